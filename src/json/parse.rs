//! The depth-limited parser behind [`parse_object`] and [`parse_value`]: serde_json's parser with
//! its own recursion guard off and a depth counter in its place, so that the limit is exactly the
//! one given (at most [`DEPTH_CAP`]).

use super::{JsonLimits, DEPTH_CAP};
use crate::error::{codes, AgentError};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::fmt;

/// Counts container depth while parsing and remembers whether the limit stopped the parse.
#[derive(Debug)]
pub(crate) struct Depth {
    max: usize,
    current: usize,
    exceeded: bool,
    // Refuse an object with a name twice (RFC 8785's input, I-JSON), instead of keeping the last.
    unique_names: bool,
}

impl Depth {
    /// A counter that refuses more than `max` levels, and never more than [`DEPTH_CAP`].
    pub(crate) fn new(max: usize) -> Self {
        Depth { max: max.min(DEPTH_CAP), current: 0, exceeded: false, unique_names: false }
    }

    /// Enters a container; fails (and remembers why) past the limit.
    #[inline]
    pub(crate) fn enter<E: serde::de::Error>(&mut self) -> Result<(), E> {
        self.current += 1;
        if self.current > self.max {
            self.exceeded = true;
            return Err(E::custom("nesting deeper than the limit"));
        }
        Ok(())
    }

    /// Leaves a container.
    #[inline]
    pub(crate) fn leave(&mut self) {
        self.current -= 1;
    }

    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded
    }
}

/// `json_too_large` when the text is longer than the limit.
pub(crate) fn check_size(text: &str, limits: &JsonLimits) -> Result<(), AgentError> {
    if text.len() > limits.max_bytes {
        return Err(AgentError::of(
            codes::JSON_TOO_LARGE,
            format!("JSON text of {} bytes exceeds the limit of {} bytes", text.len(), limits.max_bytes),
        ));
    }
    Ok(())
}

/// Maps a serde_json error to `json_too_deep` (the depth limit stopped the parse) or
/// `json_invalid`.
pub(crate) fn decode_error(error: serde_json::Error, depth: &Depth) -> AgentError {
    if depth.exceeded() {
        AgentError::of(
            codes::JSON_TOO_DEEP,
            format!("JSON nests deeper than the limit of {} levels", depth.max),
        )
    } else {
        AgentError::of(codes::JSON_INVALID, format!("invalid JSON: {error}"))
    }
}

/// Runs a seed over the whole text, refusing trailing characters. The seed must count its
/// containers with a [`Depth`]: that is the only fence (serde_json's own recursion guard is off,
/// as it refuses the 128th level, one short of [`DEPTH_CAP`]). The caller checks the size first
/// and maps the error with [`decode_error`].
pub(crate) fn deserialize_all<'de, S>(text: &'de str, seed: S) -> Result<S::Value, serde_json::Error>
where
    S: DeserializeSeed<'de, Value: 'de>,
{
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Parses text that must be a JSON object, within the limits.
///
/// # Errors
/// `json_too_large` (checked first, before any parsing), `json_invalid`, `json_too_deep`,
/// `json_not_object`.
pub fn parse_object(text: &str, limits: &JsonLimits) -> Result<Map<String, Value>, AgentError> {
    match parse_value(text, limits)? {
        Value::Object(m) => Ok(m),
        other => Err(AgentError::of(
            codes::JSON_NOT_OBJECT,
            format!("arguments must be a JSON object, not {}", kind_name(&other)),
        )),
    }
}

/// Parses any JSON value within the limits.
///
/// # Errors
/// `json_too_large`, `json_invalid`, `json_too_deep`.
pub fn parse_value(text: &str, limits: &JsonLimits) -> Result<Value, AgentError> {
    check_size(text, limits)?;
    let mut depth = Depth::new(limits.max_depth);
    deserialize_all(text, PlainSeed { depth: &mut depth }).map_err(|e| decode_error(e, &depth))
}

/// [`parse_value`] for RFC 8785's input (I-JSON): an object with a name twice is `json_invalid`
/// instead of keeping the last value.
pub(crate) fn parse_value_unique(text: &str, limits: &JsonLimits) -> Result<Value, AgentError> {
    check_size(text, limits)?;
    let mut depth = Depth { unique_names: true, ..Depth::new(limits.max_depth) };
    deserialize_all(text, PlainSeed { depth: &mut depth }).map_err(|e| decode_error(e, &depth))
}

/// The JSON type name of a value, as JSON Schema spells it (`integer` is not distinguished here).
pub(crate) fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Builds a [`Value`] like serde_json does, counting depth.
pub(crate) struct PlainSeed<'a> {
    pub(crate) depth: &'a mut Depth,
}

impl<'de> DeserializeSeed<'de> for PlainSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PlainSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.depth.enter()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(PlainSeed { depth: &mut *self.depth })? {
            items.push(item);
        }
        self.depth.leave();
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.depth.enter()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(PlainSeed { depth: &mut *self.depth })?;
            if self.depth.unique_names && out.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "the name {key:?} appears twice in an object"
                )));
            }
            out.insert(key, value);
        }
        self.depth.leave();
        Ok(Value::Object(out))
    }
}

/// True when a value nests deeper than `limit` containers (counted as the parser counts: the root
/// container is depth 1). Walks without recursion, so any depth is safe to check.
pub(crate) fn depth_exceeds(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(m) => Box::new(m.values()),
            _ => continue,
        };
        if d > limit {
            return true;
        }
        stack.extend(children.map(|c| (c, d + 1)));
    }
    false
}

/// Whether valid JSON text nests deeper than `limit` containers (counted as the parser counts:
/// the root is depth 1). One pass over the bytes, skipping strings; nothing is built.
pub(crate) fn nests_deeper_than(json: &str, limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The error [`parse_object`] refuses `text` with for its size or its depth (`json_too_large`,
/// `json_too_deep`), if it does; `None` for text within both limits (not parsed: one pass over
/// its bytes) or refused for another reason (`json_invalid`, `json_not_object`).
pub(crate) fn over_limits(text: &str, limits: &JsonLimits) -> Option<AgentError> {
    if text.len() <= limits.max_bytes && !nests_deeper_than(text, limits.max_depth.min(DEPTH_CAP)) {
        return None;
    }
    parse_object(text, limits)
        .err()
        .filter(|e| e.code == codes::JSON_TOO_LARGE || e.code == codes::JSON_TOO_DEEP)
}

/// The length in bytes of a value's compact JSON text, or `None` once it passes `cap` (the
/// writing stops there: nothing is allocated). Check [`depth_exceeds`] first: serde_json writes
/// nested values recursively.
pub(crate) fn compact_len<T: serde::Serialize + ?Sized>(value: &T, cap: usize) -> Option<usize> {
    struct Counter {
        len: usize,
        cap: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            if self.len > self.cap {
                return Err(std::io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { len: 0, cap };
    serde_json::to_writer(&mut counter, value).ok().map(|()| counter.len)
}

/// Valid JSON text without the whitespace outside its strings, as a [`RawValue`]: keys in the
/// order written, strings and numbers byte for byte. serde_json's `Value` sorts object keys, so
/// this is how a text's order is kept. Whitespace bytes and the quote and backslash are ASCII,
/// which never occur inside a multi-byte UTF-8 sequence.
///
/// # Errors
/// serde_json's, when the text is not JSON (parse it within limits first: the check here has no
/// depth limit).
pub(crate) fn raw_compact(text: &str) -> Result<Box<RawValue>, serde_json::Error> {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if matches!(c, ' ' | '\t' | '\n' | '\r') {
            continue;
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    let mut de = serde_json::Deserializer::from_str(&out);
    de.disable_recursion_limit();
    let raw = Box::<RawValue>::deserialize(&mut de)?;
    de.end()?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn depth_is_counted_in_containers() {
        let limits = JsonLimits { max_depth: 3, max_bytes: 1 << 20 };
        assert!(parse_value(&nested(3), &limits).is_ok());
        assert_eq!(parse_value(&nested(4), &limits).unwrap_err().code, codes::JSON_TOO_DEEP);
        assert!(parse_value("[1, {\"a\": [2]}]", &limits).is_ok());
        assert_eq!(parse_value("[1, {\"a\": [[2]]}]", &limits).unwrap_err().code, codes::JSON_TOO_DEEP);
    }

    #[test]
    fn over_limits_names_only_size_and_depth() {
        let limits = JsonLimits { max_depth: 3, max_bytes: 32 };
        let code = |text: &str| over_limits(text, &limits).map(|e| e.code.into_owned());
        assert_eq!(code(r#"{"a": [[1]], "b": "]]]]"}"#), None);
        assert_eq!(code(r#"{"a": [[[1]]]}"#).as_deref(), Some(codes::JSON_TOO_DEEP));
        assert_eq!(
            code(&format!(r#"{{"a": "{}"}}"#, "x".repeat(32))).as_deref(),
            Some(codes::JSON_TOO_LARGE)
        );
        // Cut off past the depth limit is too deep, as the parser says; cut off within it, or not
        // an object, is refused for another reason.
        assert_eq!(code(r#"{"a": [[[1"#).as_deref(), Some(codes::JSON_TOO_DEEP));
        assert_eq!(code(r#"{"a": 1"#), None);
        assert_eq!(code("[1]"), None);
        // The parser's cap holds whatever the limit says.
        let deep = format!(r#"{{"a":{}}}"#, nested(DEPTH_CAP));
        let roomy = JsonLimits { max_depth: 1000, max_bytes: 1 << 20 };
        assert_eq!(
            over_limits(&deep, &roomy).map(|e| e.code.into_owned()).as_deref(),
            Some(codes::JSON_TOO_DEEP)
        );
    }

    #[test]
    fn no_limit_goes_past_128_levels_and_128_is_reached() {
        // serde_json's own guard refuses its 128th level: it once refused 128 levels as "deeper
        // than the limit of 128", while the argument parser of the schema accepted them.
        for max_depth in [128, 129, 100_000] {
            let limits = JsonLimits { max_depth, max_bytes: 1 << 20 };
            for ok in [127, 128] {
                assert!(parse_value(&nested(ok), &limits).is_ok(), "{ok} levels, limit {max_depth}");
                assert!(parse_value_unique(&nested(ok), &limits).is_ok(), "{ok} levels, limit {max_depth}");
            }
            for deep in [129, 5_000] {
                let e = parse_value(&nested(deep), &limits).unwrap_err();
                assert_eq!(e.code, codes::JSON_TOO_DEEP);
                assert_eq!(e.message, "JSON nests deeper than the limit of 128 levels");
                assert_eq!(parse_value_unique(&nested(deep), &limits).unwrap_err(), e);
            }
        }
    }

    #[test]
    fn huge_inputs_are_refused_without_a_crash() {
        let l = JsonLimits::default();
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(parse_object(&deep, &l).unwrap_err().code, codes::JSON_TOO_DEEP);
        let unclosed = "[".repeat(10_000);
        assert_eq!(parse_value(&unclosed, &l).unwrap_err().code, codes::JSON_TOO_DEEP);
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(100 * 1024 * 1024));
        let e = parse_object(&big, &l).unwrap_err();
        assert_eq!(e.code, codes::JSON_TOO_LARGE);
        assert!(e.message.contains("1048576"), "{}", e.message);
    }

    #[test]
    fn object_errors_in_gate_order() {
        let l = JsonLimits::default();
        assert_eq!(parse_object("[1,2", &l).unwrap_err().code, codes::JSON_INVALID);
        assert_eq!(parse_object("[1,2]", &l).unwrap_err().code, codes::JSON_NOT_OBJECT);
        assert_eq!(parse_object("{} x", &l).unwrap_err().code, codes::JSON_INVALID);
        assert_eq!(parse_object("", &l).unwrap_err().code, codes::JSON_INVALID);
        assert_eq!(parse_object("{\"a\":1,\"a\":2}", &l).unwrap()["a"], 2);
    }

    #[test]
    fn compact_len_and_depth_of_values() {
        let v: Value = serde_json::from_str(r#"{"a": [1, "é", null], "b": {"c": true}}"#).unwrap();
        let text = v.to_string();
        assert_eq!(compact_len(&v, usize::MAX), Some(text.len()));
        assert_eq!(compact_len(&v, text.len()), Some(text.len()));
        assert_eq!(compact_len(&v, text.len() - 1), None);
        assert!(!depth_exceeds(&v, 2));
        assert!(depth_exceeds(&v, 1));
        assert!(!depth_exceeds(&Value::from(3), 0));
    }
}
