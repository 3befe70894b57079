//! Checking values against the compiled tree: the violations, the sink that collects them (first
//! only, or all), and the keyword checks shared by the walker over a finished [`Value`] and the
//! one-pass validator that checks while parsing.

use super::compile::{ty, Additional, Node, Schema};
use super::num::{json_eq, json_hash, FxBuild, Num};
use super::path::Path;
use crate::error::{codes, AgentError};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// One way a value breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The `tool_argument_*` code.
    pub code: &'static str,
    /// Where, as `$.items[0].name`.
    pub path: String,
    /// What is wrong, for the model (starts with or contains the path).
    pub message: String,
}

impl Violation {
    /// The violation as a tool-layer [`AgentError`].
    pub fn to_error(&self) -> AgentError {
        AgentError::of(self.code, self.message.clone())
    }
}

/// Collects violations: stops at the first unless `all`.
pub(crate) struct Sink {
    pub(crate) all: bool,
    pub(crate) found: Vec<Violation>,
}

impl Sink {
    pub(crate) fn new(all: bool) -> Self {
        Sink { all, found: Vec::new() }
    }

    /// True once nothing more needs checking (first-error mode and one was found).
    #[inline]
    pub(crate) fn done(&self) -> bool {
        !self.all && !self.found.is_empty()
    }

    pub(crate) fn push(&mut self, code: &'static str, path: &Path<'_>, message: impl FnOnce(&str) -> String) {
        let path = path.render();
        let message = message(&path);
        self.found.push(Violation { code, path, message });
    }

    pub(crate) fn type_mismatch(&mut self, node: &Node, path: &Path<'_>) {
        self.push(codes::TOOL_ARGUMENT_TYPE_MISMATCH, path, |p| format!("{p} must be {}", node.type_text));
    }

    pub(crate) fn never(&mut self, path: &Path<'_>) {
        self.push(codes::TOOL_ARGUMENT_NOT_ALLOWED, path, |p| {
            format!("{p} is not allowed here (its schema is false)")
        });
    }

    pub(crate) fn additional(&mut self, path: &Path<'_>) {
        self.push(codes::TOOL_ARGUMENT_ADDITIONAL_PROPERTY, path, |p| {
            format!("{p} is not an allowed property")
        });
    }
}

/// Type bit test for a container or string/bool/null value (numbers use [`number_type_ok`]).
#[inline]
pub(crate) fn kind_ok(types: u8, bit: u8) -> bool {
    types == 0 || types & bit != 0
}

#[inline]
pub(crate) fn number_type_ok(types: u8, n: Num) -> bool {
    types == 0 || types & ty::NUMBER != 0 || (types & ty::INTEGER != 0 && n.is_integer())
}

#[inline]
pub(crate) fn type_ok(types: u8, value: &Value) -> bool {
    match value {
        Value::Null => kind_ok(types, ty::NULL),
        Value::Bool(_) => kind_ok(types, ty::BOOLEAN),
        Value::Object(_) => kind_ok(types, ty::OBJECT),
        Value::Array(_) => kind_ok(types, ty::ARRAY),
        Value::String(_) => kind_ok(types, ty::STRING),
        Value::Number(n) => number_type_ok(types, Num::of(n)),
    }
}

/// Checks a finished value against a schema.
pub(crate) fn check(schema: &Schema, value: &Value, path: &Path<'_>, sink: &mut Sink) {
    match schema {
        Schema::Any => {}
        Schema::Never => sink.never(path),
        Schema::Node(node) => check_node(node, value, path, sink),
    }
}

fn check_node(node: &Node, value: &Value, path: &Path<'_>, sink: &mut Sink) {
    if !type_ok(node.types, value) {
        sink.type_mismatch(node, path);
        return;
    }
    match value {
        Value::Object(map) if node.object_checks => {
            for (key, child) in map {
                let child_path = path.key(key);
                match node.properties.find(key) {
                    Some(i) => check(&node.properties.entries[i].1, child, &child_path, sink),
                    None => match &node.additional {
                        Additional::Any => {}
                        Additional::Deny => sink.additional(&child_path),
                        Additional::Schema(s) => check(s, child, &child_path, sink),
                    },
                }
                if sink.done() {
                    return;
                }
            }
            check_required(node, map, path, sink);
        }
        Value::Array(items) if node.array_checks => {
            if let Some(item_schema) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &path.index(i), sink);
                    if sink.done() {
                        return;
                    }
                }
            }
            check_array(node, items, path, sink);
        }
        Value::String(s) if node.string_checks => check_string(node, s, path, sink),
        Value::Number(n) if node.number_checks => check_number(node, Num::of(n), path, sink),
        _ => {}
    }
    if node.value_checks && !sink.done() {
        check_value(node, value, path, sink);
    }
}

/// The keyword checks of a scalar whose type already matched (string and number keywords, then
/// `enum` / `const` / `anyOf`).
pub(crate) fn check_scalar(node: &Node, value: &Value, path: &Path<'_>, sink: &mut Sink) {
    match value {
        Value::String(s) if node.string_checks => check_string(node, s, path, sink),
        Value::Number(n) if node.number_checks => check_number(node, Num::of(n), path, sink),
        _ => {}
    }
    if node.value_checks && !sink.done() {
        check_value(node, value, path, sink);
    }
}

/// `required`, against a finished object.
pub(crate) fn check_required(node: &Node, map: &Map<String, Value>, path: &Path<'_>, sink: &mut Sink) {
    for name in node.required.iter() {
        if !map.contains_key(&**name) {
            missing(name, path, sink);
            if sink.done() {
                return;
            }
        }
    }
}

pub(crate) fn missing(name: &str, path: &Path<'_>, sink: &mut Sink) {
    sink.push(codes::TOOL_ARGUMENT_REQUIRED, &path.key(name), |p| format!("Missing required argument: {p}"));
}

/// `minItems`, `maxItems`, `uniqueItems`.
pub(crate) fn check_array(node: &Node, items: &[Value], path: &Path<'_>, sink: &mut Sink) {
    let len = items.len() as u64;
    if let Some(min) = node.min_items {
        if len < min {
            sink.push(codes::TOOL_ARGUMENT_ITEMS_COUNT, path, |p| {
                format!("{p} must have at least {min} items, not {len}")
            });
        }
    }
    if let Some(max) = node.max_items {
        if len > max && !sink.done() {
            sink.push(codes::TOOL_ARGUMENT_ITEMS_COUNT, path, |p| {
                format!("{p} must have at most {max} items, not {len}")
            });
        }
    }
    if node.unique_items && items.len() > 1 && !sink.done() {
        if let Some((i, j)) = first_duplicate(items) {
            sink.push(codes::TOOL_ARGUMENT_UNIQUE_ITEMS, path, |p| {
                format!("{p} must have unique items (items {i} and {j} are equal)")
            });
        }
    }
}

fn first_duplicate(items: &[Value]) -> Option<(usize, usize)> {
    first_duplicate_counted(items, &mut 0)
}

/// The first pair of equal items; `compared` counts the item pairs compared with [`json_eq`]
/// (only items of equal hash are: about one per duplicate, so the work stays linear).
fn first_duplicate_counted(items: &[Value], compared: &mut usize) -> Option<(usize, usize)> {
    let keys = std::hash::RandomState::new();
    let mut seen: HashMap<u64, Vec<usize>, FxBuild> = HashMap::with_capacity_and_hasher(items.len(), FxBuild);
    for (j, item) in items.iter().enumerate() {
        let bucket = seen.entry(json_hash(item, &keys)).or_default();
        for &i in bucket.iter() {
            *compared += 1;
            if json_eq(&items[i], item) {
                return Some((i, j));
            }
        }
        bucket.push(j);
    }
    None
}

/// `minLength`, `maxLength` (in code points) and `pattern`.
pub(crate) fn check_string(node: &Node, s: &str, path: &Path<'_>, sink: &mut Sink) {
    // A string has between len/4 and len code points: count them only when the bounds need it.
    let bytes = s.len() as u64;
    let settled =
        node.max_length.is_none_or(|max| bytes <= max) && node.min_length.is_none_or(|min| bytes / 4 >= min);
    if !settled {
        let len = s.chars().count() as u64;
        if let Some(min) = node.min_length {
            if len < min {
                sink.push(codes::TOOL_ARGUMENT_LENGTH, path, |p| {
                    format!("{p} must be at least {min} characters long, not {len}")
                });
            }
        }
        if let Some(max) = node.max_length {
            if len > max && !sink.done() {
                sink.push(codes::TOOL_ARGUMENT_LENGTH, path, |p| {
                    format!("{p} must be at most {max} characters long, not {len}")
                });
            }
        }
    }
    if let Some(pattern) = &node.pattern {
        if !sink.done() && !pattern.is_match(s) {
            sink.push(codes::TOOL_ARGUMENT_PATTERN, path, |p| {
                format!("{p} must match the pattern {}", pattern.source)
            });
        }
    }
}

fn num_text(n: Num) -> String {
    match n {
        Num::U(u) => u.to_string(),
        Num::I(i) => i.to_string(),
        Num::F(f) => crate::json::format_number(f).unwrap_or_else(|_| f.to_string()),
    }
}

/// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`.
pub(crate) fn check_number(node: &Node, n: Num, path: &Path<'_>, sink: &mut Sink) {
    use codes::{TOOL_ARGUMENT_MAXIMUM as MAX, TOOL_ARGUMENT_MINIMUM as MIN};
    use std::cmp::Ordering::{Greater, Less};
    if bound(n, node.minimum, |o| o == Less, MIN, ">=", path, sink)
        || bound(n, node.exclusive_minimum, |o| o != Greater, MIN, ">", path, sink)
        || bound(n, node.maximum, |o| o == Greater, MAX, "<=", path, sink)
        || bound(n, node.exclusive_maximum, |o| o != Less, MAX, "<", path, sink)
    {
        return;
    }
    if let Some(m) = node.multiple_of {
        if !n.is_multiple_of(m) {
            sink.push(codes::TOOL_ARGUMENT_MULTIPLE_OF, path, |p| {
                format!("{p} must be a multiple of {}", num_text(m))
            });
        }
    }
}

/// One bound: records a violation when `n` compared with it `fails`; true when checking stops.
/// Inlined with its comparison (a table of rules through function pointers cost twice as much).
#[inline(always)]
fn bound(
    n: Num,
    bound: Option<Num>,
    fails: impl Fn(std::cmp::Ordering) -> bool,
    code: &'static str,
    op: &str,
    path: &Path<'_>,
    sink: &mut Sink,
) -> bool {
    match bound {
        Some(b) if fails(n.cmp(b)) => {
            sink.push(code, path, |p| format!("{p} must be {op} {}", num_text(b)));
            sink.done()
        }
        _ => false,
    }
}

/// The most bytes of a value or a list a violation's message quotes.
const SHOWN_BYTES: usize = 200;

fn short_json(v: &Value) -> String {
    short(v.to_string())
}

/// `s` cut to [`SHOWN_BYTES`] (at a character boundary) with `…` after the cut.
fn short(mut s: String) -> String {
    if s.len() > SHOWN_BYTES {
        s.truncate(crate::text::floor_char_boundary(&s, SHOWN_BYTES));
        s.push('…');
    }
    s
}

/// `enum`, `const`, `anyOf`: checked on the finished value.
pub(crate) fn check_value(node: &Node, value: &Value, path: &Path<'_>, sink: &mut Sink) {
    if let Some(options) = &node.enumeration {
        if !options.iter().any(|o| json_eq(o, value)) {
            sink.push(codes::TOOL_ARGUMENT_ENUM, path, |p| {
                format!("{p} must be one of {}", short_json(&Value::Array(options.to_vec())))
            });
            if sink.done() {
                return;
            }
        }
    }
    if let Some(c) = &node.constant {
        if !json_eq(c, value) {
            sink.push(codes::TOOL_ARGUMENT_CONST, path, |p| format!("{p} must be {}", short_json(c)));
            if sink.done() {
                return;
            }
        }
    }
    if !node.any_of.is_empty() {
        let mut reasons = Vec::new();
        for alt in node.any_of.iter() {
            let mut inner = Sink::new(false);
            check(alt, value, path, &mut inner);
            match inner.found.pop() {
                None => return,
                Some(v) => reasons.push(v.message),
            }
        }
        sink.push(codes::TOOL_ARGUMENT_ANY_OF, path, |p| {
            let listed: Vec<String> =
                reasons.iter().enumerate().map(|(i, r)| format!("({}) {r}", i + 1)).collect();
            // Cut as an enum's options are: a schema of thousands of alternatives is no message.
            let listed = listed.join("; ");
            let all = if listed.len() > SHOWN_BYTES {
                format!(" ({} schemas in all)", reasons.len())
            } else {
                String::new()
            };
            format!("{p} must match at least one schema of anyOf: {}{all}", short(listed))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_any_of_failure_lists_its_alternatives_cut_as_an_enum_is() {
        let alternatives: Vec<Value> = (0..3000).map(|i| json!({"const": format!("value-{i}")})).collect();
        let schema = crate::schema::CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"v": {"anyOf": alternatives}}
        }))
        .unwrap();
        let e = schema.validate(&json!({"v": "other"})).unwrap_err();
        assert_eq!(e.code, codes::TOOL_ARGUMENT_ANY_OF);
        assert!(e.message.len() < 2 * SHOWN_BYTES, "{} bytes: {}", e.message.len(), e.message);
        assert!(e
            .message
            .starts_with("$.v must match at least one schema of anyOf: (1) $.v must be \"value-0\""));
        assert!(e.message.ends_with("… (3000 schemas in all)"), "{}", e.message);
        // A short listing is whole.
        let e = schema.validate(&json!({"v": 1})).unwrap_err();
        assert!(e.message.len() < 2 * SHOWN_BYTES);
    }

    /// `[[[...[leaf]...]]]`, `levels` arrays deep.
    fn nested(levels: usize, leaf: Value) -> Value {
        (0..levels).fold(leaf, |v, _| Value::Array(vec![v]))
    }

    #[test]
    fn unique_items_compares_no_pair_of_distinct_deep_items() {
        // Items that differ only below 16 levels once shared one hash, so every pair was compared
        // (about n^2/2 = 8 million here): quadratic in the argument's size.
        for levels in [1, 17, 18, 40, 128] {
            let items: Vec<Value> = (0..4_000).map(|i| nested(levels, json!(i))).collect();
            let mut compared = 0;
            assert_eq!(first_duplicate_counted(&items, &mut compared), None, "{levels} levels");
            assert!(compared < 10, "{compared} comparisons of 4000 distinct items {levels} levels deep");
        }
    }

    #[test]
    fn unique_items_finds_duplicates_at_any_depth() {
        let mut items: Vec<Value> = (0..1_000).map(|i| nested(30, json!({"k": i, "v": [i, "x"]}))).collect();
        items.push(nested(30, json!({"v": [500.0, "x"], "k": 5e2})));
        let mut compared = 0;
        assert_eq!(first_duplicate_counted(&items, &mut compared), Some((500, 1_000)));
        assert!(compared < 10, "{compared} comparisons");
        // Far deeper than any parsed argument (a Value given to `validate`): no recursion.
        let deep = |leaf| nested(100_000, json!(leaf));
        let items = vec![deep(1), deep(2), deep(1)];
        assert_eq!(first_duplicate(&items), Some((0, 2)));
        for v in items {
            drop_iteratively(v);
        }
    }

    /// serde_json drops nested values recursively; 100,000 levels would overflow the stack.
    fn drop_iteratively(value: Value) {
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            match v {
                Value::Array(items) => stack.extend(items),
                Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
                _ => {}
            }
        }
    }
}
