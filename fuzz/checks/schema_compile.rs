//! Arbitrary JSON -> `CompiledSchema::compile`; every schema that compiles validates a few values,
//! and the two validation paths (a parsed value, and the one-pass parse of its text) must agree.
//!
//! Input: a JSON text. An array `[schema, v1, v2, ...]` gives the values; anything else is the
//! schema and is validated against itself and a few fixed values. The first byte, when it is not
//! JSON text, picks the options (mode, tool root).
use arkagent::json::JsonLimits;
use arkagent::schema::{CompiledSchema, SchemaOptions, ValidationMode};
use serde_json::{json, Value};

/// Checks one input; panics on a finding.
pub fn run(data: &[u8]) {
    let (flags, text) = match data.split_first() {
        Some((&b, rest)) if b >= 0x80 => (b, rest),
        _ => (0, data),
    };
    let Ok(input) = serde_json::from_slice::<Value>(text) else { return };
    let mode = if flags & 1 == 1 { ValidationMode::AllErrors } else { ValidationMode::FirstError };
    let tool_root = flags & 2 == 0;
    let options = SchemaOptions { mode, tool_root, ..SchemaOptions::default() };

    let (schema, mut values) = match &input {
        Value::Array(items) if !items.is_empty() => (items[0].clone(), items[1..].to_vec()),
        other => (other.clone(), vec![other.clone()]),
    };
    values.extend([
        json!({}),
        json!(null),
        json!({"a": 1, "b": "x", "c": [1, 2.5, true]}),
        json!([]),
        json!(-0.0),
    ]);

    let Ok(compiled) = CompiledSchema::compile_with(&schema, &options) else { return };
    let limits = JsonLimits::default();
    for value in &values {
        let first = compiled.validate(value);
        let all = compiled.validate_all(value);
        // validate() fails exactly when validate_all finds something.
        assert_eq!(first.is_ok(), all.is_empty(), "validate vs validate_all on {value}");
        // The one-pass path over the value's text agrees with validating the parsed value.
        let text = value.to_string();
        let onepass = compiled.parse_value_and_validate(&text, &limits);
        match (&first, &onepass) {
            (Ok(()), Ok(v)) => assert_eq!(v, value),
            (Err(a), Err(b)) => {
                // A value nested beyond the parser's depth limit is refused before the schema.
                if b.code != "json_too_deep" {
                    assert_eq!(a.code, b.code, "{value}: {a} vs {b}");
                    assert_eq!(a.message, b.message, "{value}");
                }
            }
            (a, b) => {
                if !matches!(b, Err(e) if e.code == "json_too_deep") {
                    panic!("validate {a:?} but one-pass {b:?} on {value}");
                }
            }
        }
        // The tool path: an object's text through parse_and_validate.
        if tool_root && value.is_object() {
            let r = compiled.parse_and_validate(&text, &limits);
            assert_eq!(r.is_ok(), onepass.is_ok(), "{value}");
        }
    }
}
