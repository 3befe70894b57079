//! Compiling a schema document into a tree of nodes, once. Every keyword of the whitelist is
//! checked for its form here; any other keyword, at any depth, is `schema_unsupported_keyword`.

use super::num::{FxBuild, Num};
use super::simple_pattern::SimplePattern;
use crate::error::{codes, AgentError};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Type bits of the `type` keyword.
pub(crate) mod ty {
    pub const NULL: u8 = 1;
    pub const BOOLEAN: u8 = 2;
    pub const OBJECT: u8 = 4;
    pub const ARRAY: u8 = 8;
    pub const NUMBER: u8 = 16;
    pub const STRING: u8 = 32;
    pub const INTEGER: u8 = 64;
}

const TYPE_NAMES: [(&str, u8); 7] = [
    ("null", ty::NULL),
    ("boolean", ty::BOOLEAN),
    ("object", ty::OBJECT),
    ("array", ty::ARRAY),
    ("number", ty::NUMBER),
    ("string", ty::STRING),
    ("integer", ty::INTEGER),
];

/// The whitelist: the seed's five keywords plus the ones DESIGN.md adds, all fully enforced.
pub const SUPPORTED_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "description",
    "enum",
    "const",
    "additionalProperties",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "anyOf",
    "title",
    "default",
];

/// A compiled (sub)schema.
#[derive(Debug)]
pub(crate) enum Schema {
    /// `true` (or `{}`): anything.
    Any,
    /// `false`: nothing.
    Never,
    Node(Box<Node>),
}

#[derive(Debug)]
pub(crate) enum Additional {
    Any,
    Deny,
    Schema(Schema),
}

#[derive(Debug)]
pub(crate) struct Properties {
    pub(crate) entries: Vec<(Box<str>, Schema)>,
    lookup: Lookup,
}

/// How names are found among the entries.
#[derive(Debug)]
// The slot table stays inline in the (boxed) node: one pointer less to follow per key.
#[allow(clippy::large_enum_variant)]
enum Lookup {
    /// Up to 16 names: a collision-free hash of each name's leading (and trailing) bytes into 64
    /// slots (index + 1, 0 for none), then one compare against the name's first eight bytes and
    /// length kept inline. Found for almost every small schema.
    Slots(Slots),
    /// More names.
    Map(HashMap<Box<str>, usize, FxBuild>),
    /// Names the slots could not separate: compared in turn.
    Scan,
}

#[derive(Debug)]
struct Slots {
    seed: u64,
    slots: [u8; 64],
    /// First (up to) eight bytes of each name, zero-padded, little-endian.
    words: [u64; 16],
    lens: [u8; 16],
}

/// The first `min(len, 8)` bytes of `text[start..start + len]`, zero-padded: one load when eight
/// bytes can be read there.
#[inline]
fn head_word(text: &[u8], start: usize, len: usize) -> u64 {
    let mask = if len >= 8 { u64::MAX } else { (1u64 << (len * 8)) - 1 };
    match text.get(start..start + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().unwrap_or([0; 8])) & mask,
        None => {
            let mut w = [0u8; 8];
            let n = len.min(8);
            w[..n].copy_from_slice(&text[start..start + n]);
            u64::from_le_bytes(w)
        }
    }
}

/// What the slot hash looks at: the head word, the length and, past eight bytes, the last eight.
#[inline]
fn fingerprint(text: &[u8], start: usize, len: usize, head: u64) -> u64 {
    let tail = match len {
        0..=8 => 0,
        _ => u64::from_le_bytes(text[start + len - 8..start + len].try_into().unwrap_or([0; 8])),
    };
    head ^ tail.rotate_left(29) ^ (len as u64).rotate_right(7)
}

#[inline]
fn slot(fingerprint: u64, seed: u64) -> usize {
    (fingerprint.wrapping_mul(seed) >> 58) as usize
}

impl Properties {
    fn new(entries: Vec<(Box<str>, Schema)>) -> Self {
        let lookup = if entries.len() > 16 {
            Lookup::Map(entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect())
        } else {
            Self::slots(&entries).map_or(Lookup::Scan, Lookup::Slots)
        };
        Properties { entries, lookup }
    }

    /// Tries a fixed series of odd multipliers until every name has its own slot.
    fn slots(entries: &[(Box<str>, Schema)]) -> Option<Slots> {
        let mut table = Slots { seed: 0, slots: [0; 64], words: [0; 16], lens: [0; 16] };
        let mut prints = Vec::with_capacity(entries.len());
        for (i, (name, _)) in entries.iter().enumerate() {
            let (bytes, len) = (name.as_bytes(), name.len());
            table.words[i] = head_word(bytes, 0, len);
            table.lens[i] = u8::try_from(len).ok()?;
            prints.push(fingerprint(bytes, 0, len, table.words[i]));
        }
        (table.seed, table.slots) = (0..512u64)
            .map(|k| 0x9E37_79B9_7F4A_7C15u64.wrapping_add(k.wrapping_mul(0x6A09_E667_F3BC_C90A)) | 1)
            .find_map(|seed| {
                let mut slots = [0u8; 64];
                for (i, &print) in prints.iter().enumerate() {
                    let s = &mut slots[slot(print, seed)];
                    if *s != 0 {
                        return None;
                    }
                    *s = i as u8 + 1;
                }
                Some((seed, slots))
            })?;
        Some(table)
    }

    /// The index of a property, if the schema names it.
    #[inline]
    pub(crate) fn find(&self, key: &str) -> Option<usize> {
        self.find_in(key.as_bytes(), 0, key.len())
    }

    /// [`find`](Self::find) for the name `text[start..start + len]` (a key as written in the
    /// arguments): the bytes around it may be read, which saves copying short names. The usual
    /// case (a slot table, a name of at most eight bytes with eight readable) is inline, a
    /// specialised copy of `find_other`'s slot arm: one function for every case measured 5%
    /// slower on the small benchmark object.
    #[inline(always)]
    pub(crate) fn find_in(&self, text: &[u8], start: usize, len: usize) -> Option<usize> {
        if let (Lookup::Slots(t), Some(word)) = (&self.lookup, text.get(start..start + 8)) {
            if len <= 8 {
                let mask = if len == 8 { u64::MAX } else { (1u64 << (len * 8)) - 1 };
                let head = u64::from_le_bytes(word.try_into().unwrap_or([0; 8])) & mask;
                let at = usize::from(t.slots[slot(fingerprint(text, start, len, head), t.seed)]);
                let i = at.checked_sub(1)?;
                return (t.words[i] == head && usize::from(t.lens[i]) == len).then_some(i);
            }
        }
        self.find_other(text, start, len)
    }

    #[inline(never)]
    fn find_other(&self, text: &[u8], start: usize, len: usize) -> Option<usize> {
        let name = &text[start..start + len];
        match &self.lookup {
            Lookup::Slots(t) => {
                let head = head_word(text, start, len);
                let i =
                    usize::from(t.slots[slot(fingerprint(text, start, len, head), t.seed)]).checked_sub(1)?;
                let found = t.words[i] == head
                    && usize::from(t.lens[i]) == len
                    && (len <= 8 || same_name(self.entries[i].0.as_bytes(), name));
                found.then_some(i)
            }
            Lookup::Map(map) => std::str::from_utf8(name).ok().and_then(|k| map.get(k).copied()),
            Lookup::Scan => self.entries.iter().position(|(k, _)| same_name(k.as_bytes(), name)),
        }
    }
}

/// Byte equality of two names, without a call for the usual short ones: names of 4 to 16 bytes
/// are compared as two overlapping words.
#[inline]
fn same_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word8 = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
    let word4 = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]));
    match n {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

#[derive(Debug)]
pub(crate) struct Pattern {
    pub(crate) source: Box<str>,
    pub(crate) regex: regress::Regex,
    /// A direct matcher when the pattern is simple enough (most are); `regex` otherwise.
    pub(crate) simple: Option<SimplePattern>,
}

impl Pattern {
    /// True when the pattern matches somewhere in `s`.
    #[inline]
    pub(crate) fn is_match(&self, s: &str) -> bool {
        match &self.simple {
            Some(simple) => simple.is_match(s),
            None => self.regex.find(s).is_some(),
        }
    }
}

/// True when some `pattern` of `schema` is matched by regress (not the linear [`SimplePattern`]):
/// a backtracking match whose time has no bound but the string's length.
pub(crate) fn has_backtracking_pattern(schema: &Schema) -> bool {
    let Schema::Node(node) = schema else { return false };
    node.pattern.as_ref().is_some_and(|p| p.simple.is_none())
        || node.properties.entries.iter().any(|(_, s)| has_backtracking_pattern(s))
        || matches!(&node.additional, Additional::Schema(s) if has_backtracking_pattern(s))
        || node.items.as_ref().is_some_and(has_backtracking_pattern)
        || node.any_of.iter().any(has_backtracking_pattern)
}

#[derive(Debug)]
pub(crate) struct Node {
    /// Type bits; 0 when `type` is absent.
    pub(crate) types: u8,
    /// "string", "string or null"...
    pub(crate) type_text: Box<str>,
    pub(crate) properties: Properties,
    pub(crate) required: Box<[Box<str>]>,
    /// Bits of `properties` indexes that `required` names, when every required name is one of the
    /// first 64 properties (fast check while parsing); otherwise None.
    pub(crate) required_mask: Option<u64>,
    pub(crate) additional: Additional,
    pub(crate) items: Option<Schema>,
    pub(crate) min_items: Option<u64>,
    pub(crate) max_items: Option<u64>,
    pub(crate) unique_items: bool,
    pub(crate) min_length: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) pattern: Option<Pattern>,
    pub(crate) minimum: Option<Num>,
    pub(crate) maximum: Option<Num>,
    pub(crate) exclusive_minimum: Option<Num>,
    pub(crate) exclusive_maximum: Option<Num>,
    pub(crate) multiple_of: Option<Num>,
    pub(crate) enumeration: Option<Box<[Value]>>,
    pub(crate) constant: Option<Value>,
    pub(crate) any_of: Box<[Schema]>,
    /// Any keyword that looks at objects / arrays / strings / numbers is present.
    pub(crate) object_checks: bool,
    pub(crate) array_checks: bool,
    pub(crate) string_checks: bool,
    pub(crate) number_checks: bool,
    /// enum, const or anyOf: checked on the finished value.
    pub(crate) value_checks: bool,
}

/// Compilation settings.
pub(crate) struct Compiler {
    pub(crate) max_depth: usize,
}

fn err(code: &'static str, path: &str, what: impl std::fmt::Display) -> AgentError {
    AgentError::of(code, format!("{what} (at {path})"))
}

impl Compiler {
    /// Compiles the schema at `path` (a JSONPath-like location in the schema document).
    pub(crate) fn compile(
        &self,
        value: &Value,
        path: &str,
        depth: usize,
        bad_shape: &'static str,
    ) -> Result<Schema, AgentError> {
        if depth > self.max_depth {
            return Err(err(
                codes::SCHEMA_TOO_DEEP,
                path,
                format!("schema nests deeper than {} levels", self.max_depth),
            ));
        }
        match value {
            Value::Bool(true) => Ok(Schema::Any),
            Value::Bool(false) => Ok(Schema::Never),
            Value::Object(map) => self.compile_object(map, path, depth),
            other => {
                Err(err(bad_shape, path, format!("a schema must be an object or a boolean, not {other}")))
            }
        }
    }

    fn compile_object(
        &self,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<Schema, AgentError> {
        // Unsupported keywords first: the honest answer to a schema we cannot enforce.
        for key in map.keys() {
            let root_schema_uri = depth == 0 && key == "$schema";
            if !root_schema_uri && !SUPPORTED_KEYWORDS.contains(&key.as_str()) {
                return Err(AgentError::of(
                    codes::SCHEMA_UNSUPPORTED_KEYWORD,
                    format!("Unsupported JSON Schema keyword: {key} (at {path})"),
                ));
            }
        }
        if let Some(Value::Array(_)) = map.get("items") {
            return Err(AgentError::of(
                codes::SCHEMA_UNSUPPORTED_KEYWORD,
                format!("Unsupported JSON Schema keyword: items in array (tuple) form (at {path}); use one schema for every item"),
            ));
        }
        if map.is_empty()
            || map.keys().all(|k| matches!(k.as_str(), "$schema" | "description" | "title" | "default"))
        {
            check_annotations(map, path)?;
            return Ok(Schema::Any);
        }
        check_annotations(map, path)?;

        let (types, type_text) = match map.get("type") {
            None => (0, "any".into()),
            Some(t) => parse_type(t, path)?,
        };

        let mut entries = Vec::new();
        if let Some(p) = map.get("properties") {
            let Value::Object(p) = p else {
                return Err(err(
                    codes::SCHEMA_INVALID_PROPERTIES,
                    path,
                    "\"properties\" must be an object of schemas",
                ));
            };
            for (name, sub) in p {
                let sub_path = format!("{path}.properties{}", super::path::key_segment(name));
                entries.push((
                    name.as_str().into(),
                    self.compile(sub, &sub_path, depth + 1, codes::SCHEMA_INVALID_PROPERTIES)?,
                ));
            }
        }
        let properties = Properties::new(entries);

        let mut required: Vec<Box<str>> = Vec::new();
        if let Some(r) = map.get("required") {
            let Value::Array(r) = r else {
                return Err(err(
                    codes::SCHEMA_INVALID_REQUIRED,
                    path,
                    "\"required\" must be an array of strings",
                ));
            };
            for name in r {
                let Value::String(name) = name else {
                    return Err(err(
                        codes::SCHEMA_INVALID_REQUIRED,
                        path,
                        format!("\"required\" holds {name}, not a string"),
                    ));
                };
                if required.iter().any(|n| **n == **name) {
                    return Err(err(
                        codes::SCHEMA_INVALID_REQUIRED,
                        path,
                        format!("\"required\" names {name:?} twice"),
                    ));
                }
                required.push(name.as_str().into());
            }
        }
        let required_mask = required.iter().try_fold(0u64, |mask, name| match properties.find(name) {
            Some(i) if i < 64 => Some(mask | (1 << i)),
            _ => None,
        });

        let additional = match map.get("additionalProperties") {
            None | Some(Value::Bool(true)) => Additional::Any,
            Some(Value::Bool(false)) => Additional::Deny,
            Some(v @ Value::Object(_)) => match self.compile(
                v,
                &format!("{path}.additionalProperties"),
                depth + 1,
                codes::SCHEMA_INVALID_ADDITIONAL_PROPERTIES,
            )? {
                Schema::Any => Additional::Any,
                Schema::Never => Additional::Deny,
                s => Additional::Schema(s),
            },
            Some(other) => {
                return Err(err(
                    codes::SCHEMA_INVALID_ADDITIONAL_PROPERTIES,
                    path,
                    format!("\"additionalProperties\" must be a boolean or a schema, not {other}"),
                ))
            }
        };

        let items = match map.get("items") {
            None => None,
            Some(v) => {
                Some(self.compile(v, &format!("{path}.items"), depth + 1, codes::SCHEMA_INVALID_ITEMS)?)
            }
        };

        let mut any_of = Vec::new();
        if let Some(a) = map.get("anyOf") {
            match a {
                Value::Array(alts) if !alts.is_empty() => {
                    for (i, alt) in alts.iter().enumerate() {
                        any_of.push(self.compile(
                            alt,
                            &format!("{path}.anyOf[{i}]"),
                            depth + 1,
                            codes::SCHEMA_INVALID_ANY_OF,
                        )?);
                    }
                }
                _ => {
                    return Err(err(
                        codes::SCHEMA_INVALID_ANY_OF,
                        path,
                        "\"anyOf\" must be a non-empty array of schemas",
                    ))
                }
            }
        }

        let enumeration = match map.get("enum") {
            None => None,
            Some(Value::Array(values)) => {
                if values.iter().any(|v| crate::json::depth_exceeds(v, self.max_depth)) {
                    return Err(err(codes::SCHEMA_TOO_DEEP, path, "an \"enum\" value nests too deep"));
                }
                Some(values.clone().into_boxed_slice())
            }
            Some(_) => return Err(err(codes::SCHEMA_INVALID_ENUM, path, "\"enum\" must be an array")),
        };
        let constant = match map.get("const") {
            None => None,
            Some(v) => {
                if crate::json::depth_exceeds(v, self.max_depth) {
                    return Err(err(codes::SCHEMA_TOO_DEEP, path, "the \"const\" value nests too deep"));
                }
                Some(v.clone())
            }
        };

        let unique_items = match map.get("uniqueItems") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(err(
                    codes::SCHEMA_INVALID_UNIQUE_ITEMS,
                    path,
                    "\"uniqueItems\" must be a boolean",
                ))
            }
        };

        let pattern = match map.get("pattern") {
            None => None,
            Some(Value::String(source)) => match regress::Regex::with_flags(source, "u") {
                Ok(regex) => Some(Pattern {
                    source: source.as_str().into(),
                    regex,
                    simple: SimplePattern::compile(source),
                }),
                Err(e) => {
                    return Err(err(
                        codes::SCHEMA_INVALID_PATTERN,
                        path,
                        format!("\"pattern\" {source:?} is not a valid ECMA-262 regular expression: {e}"),
                    ))
                }
            },
            Some(_) => return Err(err(codes::SCHEMA_INVALID_PATTERN, path, "\"pattern\" must be a string")),
        };

        let bound = |key: &str| -> Result<Option<Num>, AgentError> {
            match map.get(key) {
                None => Ok(None),
                Some(Value::Number(n)) => Ok(Some(Num::of(n))),
                Some(other) => Err(err(
                    codes::SCHEMA_INVALID_BOUND,
                    path,
                    format!("\"{key}\" must be a number, not {other}"),
                )),
            }
        };
        let multiple_of = bound("multipleOf")?;
        if let Some(m) = multiple_of {
            if m.cmp(Num::U(0)) != std::cmp::Ordering::Greater {
                return Err(err(codes::SCHEMA_INVALID_BOUND, path, "\"multipleOf\" must be greater than 0"));
            }
        }
        let count = |key: &str| -> Result<Option<u64>, AgentError> {
            match map.get(key) {
                None => Ok(None),
                Some(Value::Number(n)) => match Num::of(n) {
                    Num::U(u) => Ok(Some(u)),
                    Num::F(f) if f >= 0.0 && f.fract() == 0.0 => Ok(Some(f.min(u64::MAX as f64) as u64)),
                    _ => Err(err(
                        codes::SCHEMA_INVALID_LENGTH,
                        path,
                        format!("\"{key}\" must be a non-negative integer"),
                    )),
                },
                Some(_) => Err(err(
                    codes::SCHEMA_INVALID_LENGTH,
                    path,
                    format!("\"{key}\" must be a non-negative integer"),
                )),
            }
        };

        let mut node = Node {
            types,
            type_text,
            required: required.into_boxed_slice(),
            required_mask,
            additional,
            items,
            min_items: count("minItems")?,
            max_items: count("maxItems")?,
            unique_items,
            min_length: count("minLength")?,
            max_length: count("maxLength")?,
            pattern,
            minimum: bound("minimum")?,
            maximum: bound("maximum")?,
            exclusive_minimum: bound("exclusiveMinimum")?,
            exclusive_maximum: bound("exclusiveMaximum")?,
            multiple_of,
            enumeration,
            constant,
            any_of: any_of.into_boxed_slice(),
            properties,
            object_checks: false,
            array_checks: false,
            string_checks: false,
            number_checks: false,
            value_checks: false,
        };
        node.object_checks = !node.properties.entries.is_empty()
            || !node.required.is_empty()
            || !matches!(node.additional, Additional::Any);
        node.array_checks =
            node.items.is_some() || node.min_items.is_some() || node.max_items.is_some() || node.unique_items;
        node.string_checks = node.min_length.is_some() || node.max_length.is_some() || node.pattern.is_some();
        node.number_checks = node.minimum.is_some()
            || node.maximum.is_some()
            || node.exclusive_minimum.is_some()
            || node.exclusive_maximum.is_some()
            || node.multiple_of.is_some();
        node.value_checks = node.enumeration.is_some() || node.constant.is_some() || !node.any_of.is_empty();
        Ok(Schema::Node(Box::new(node)))
    }
}

fn check_annotations(map: &Map<String, Value>, path: &str) -> Result<(), AgentError> {
    for key in ["description", "title", "$schema"] {
        match map.get(key) {
            None | Some(Value::String(_)) => {}
            Some(other) => {
                return Err(err(
                    codes::SCHEMA_INVALID_ANNOTATION,
                    path,
                    format!("\"{key}\" must be a string, not {other}"),
                ))
            }
        }
    }
    Ok(())
}

fn parse_type(t: &Value, path: &str) -> Result<(u8, Box<str>), AgentError> {
    let one = |name: &str| -> Result<u8, AgentError> {
        TYPE_NAMES.iter().find(|(n, _)| *n == name).map(|(_, bit)| *bit).ok_or_else(|| {
            err(codes::SCHEMA_INVALID_TYPE, path, format!("unknown type {name:?} (expected one of null, boolean, object, array, number, string, integer)"))
        })
    };
    match t {
        Value::String(name) => Ok((one(name)?, name.as_str().into())),
        Value::Array(names) if !names.is_empty() => {
            let mut bits = 0u8;
            let mut text: Vec<&str> = Vec::new();
            for name in names {
                let Value::String(name) = name else {
                    return Err(err(
                        codes::SCHEMA_INVALID_TYPE,
                        path,
                        format!("\"type\" holds {name}, not a type name"),
                    ));
                };
                let bit = one(name)?;
                if bits & bit != 0 {
                    return Err(err(
                        codes::SCHEMA_INVALID_TYPE,
                        path,
                        format!("\"type\" names {name:?} twice"),
                    ));
                }
                bits |= bit;
                text.push(name);
            }
            Ok((bits, text.join(" or ").into()))
        }
        other => Err(err(
            codes::SCHEMA_INVALID_TYPE,
            path,
            format!("\"type\" must be a type name or a non-empty array of them, not {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn props(names: &[&str]) -> Properties {
        Properties::new(names.iter().map(|n| (Box::from(*n), Schema::Any)).collect())
    }

    #[test]
    fn slot_lookup_finds_each_name_and_nothing_else() {
        let names = ["order_id", "product", "quantity", "express", "status", "note", "tags", ""];
        let p = props(&names);
        assert!(matches!(p.lookup, Lookup::Slots { .. }));
        for (i, name) in names.iter().enumerate() {
            assert_eq!(p.find(name), Some(i), "{name}");
        }
        // Same length, first, middle and last byte as a member: same slot, refused by the compare.
        for stranger in ["oRder_id", "prXduct", "nite", "x", "order_i", "quantity "] {
            assert_eq!(p.find(stranger), None, "{stranger}");
        }
    }

    #[test]
    fn names_compare_equal_only_when_every_byte_is() {
        for n in 0..=24usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_name(&a, &a.clone()), "length {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] = b'#';
                assert!(!same_name(&a, &b), "length {n}, byte {at}");
            }
            assert!(!same_name(&a, &[a.as_slice(), b"x"].concat()));
        }
    }

    #[test]
    fn names_the_hash_cannot_separate_are_scanned() {
        // Same length, same first eight and last eight bytes: the hash cannot tell them apart.
        let (a, b) = ("abcdefgh_1_ijklmnop", "abcdefgh_2_ijklmnop");
        let p = props(&[a, b, "age"]);
        assert!(matches!(p.lookup, Lookup::Scan));
        assert_eq!(
            (p.find(a), p.find(b), p.find("age"), p.find("abcdefgh_3_ijklmnop")),
            (Some(0), Some(1), Some(2), None)
        );
    }

    #[test]
    fn many_names_use_a_map() {
        let names: Vec<String> = (0..100).map(|i| format!("field_{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let p = props(&refs);
        assert!(matches!(p.lookup, Lookup::Map(_)));
        assert_eq!(p.find("field_57"), Some(57));
        assert_eq!(p.find("field_100"), None);
    }

    proptest! {
        /// Whatever the lookup chosen, `find` answers as a linear search would.
        #[test]
        fn find_agrees_with_a_linear_search(
            names in proptest::collection::btree_set("[a-c_é]{0,6}", 0..80),
            probes in proptest::collection::vec("[a-c_é]{0,6}", 20),
            around in ("[a-c\"]{0,9}", "[a-c\"]{0,9}"),
        ) {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let p = props(&names);
            for probe in names.iter().copied().chain(probes.iter().map(String::as_str)) {
                let expected = names.iter().position(|n| *n == probe);
                prop_assert_eq!(p.find(probe), expected);
                // Inside a longer text, as the parser asks (bytes around the name may be read).
                let text = format!("{}{probe}{}", around.0, around.1);
                prop_assert_eq!(p.find_in(text.as_bytes(), around.0.len(), probe.len()), expected);
            }
        }
    }
}
