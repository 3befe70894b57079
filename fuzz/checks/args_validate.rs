//! Arbitrary text -> `parse_and_validate` of a few fixed compiled schemas, compared with serde_json:
//! within the limits, the one-pass parser accepts exactly what serde_json accepts (but a repeated
//! key, and with lone surrogates' escapes read as U+FFFD) and builds the same value; outside them
//! it says why (`json_too_large`, `json_too_deep`).
use arkagent::json::{canonicalize_str, lone_surrogate_escapes_replaced, parse_value, JsonLimits};
use arkagent::schema::{CompiledSchema, SchemaOptions, ValidationMode};
use serde_json::{json, Value};
use std::sync::OnceLock;

fn schemas() -> &'static [CompiledSchema] {
    static S: OnceLock<Vec<CompiledSchema>> = OnceLock::new();
    S.get_or_init(|| {
        let order = json!({
            "type": "object",
            "properties": {
                "sku": {"type": "string", "minLength": 1, "maxLength": 32, "pattern": "^[A-Z]{2}-[0-9]+$"},
                "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                "price": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 5},
                "mode": {"enum": ["fast", "slow", null]},
                "note": {"type": ["string", "null"]},
                "addr": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"], "additionalProperties": false},
                "any": {"anyOf": [{"type": "integer"}, {"const": {"k": [1, "x"]}}]}
            },
            "required": ["sku", "qty"],
            "additionalProperties": false
        });
        let open = json!({"type": "object"});
        let mut out = Vec::new();
        for s in [order, open] {
            for mode in [ValidationMode::FirstError, ValidationMode::AllErrors] {
                let options = SchemaOptions { mode, ..SchemaOptions::default() };
                out.push(CompiledSchema::compile_with(&s, &options).expect("fixed schema compiles"));
            }
        }
        out
    })
}

fn any_schema() -> &'static CompiledSchema {
    static S: OnceLock<CompiledSchema> = OnceLock::new();
    S.get_or_init(|| {
        let options = SchemaOptions { tool_root: false, ..SchemaOptions::default() };
        CompiledSchema::compile_with(&json!({}), &options).expect("{} compiles")
    })
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

const SYNTAX: [&str; 3] = ["json_invalid", "json_too_deep", "json_too_large"];

/// Checks one input; panics on a finding.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let limits = JsonLimits { max_depth: 16, max_bytes: 4096 };

    // serde_json's verdict within the limits.
    let reference: Option<Value> = serde_json::from_str::<Value>(text).ok();
    let within = |v: &Value| depth(v) <= limits.max_depth && text.len() <= limits.max_bytes;
    let expected = reference.as_ref().filter(|v| within(v));
    // The one-pass parser (tool arguments) differs from serde_json on purpose twice: a lone
    // surrogate's escape reads as U+FFFD, and a key repeated in an object is json_invalid (what
    // the user approves must not read otherwise than what runs). RFC 8785's parser refuses
    // repeats too: it tells them.
    let fixed = lone_surrogate_escapes_replaced(text);
    let unique = JsonLimits { max_depth: 1024, max_bytes: usize::MAX };
    let repeats = matches!(canonicalize_str(&fixed, &unique), Err(e) if e.message.contains("appears twice"));
    let reference = serde_json::from_str::<Value>(&fixed).ok().filter(|_| !repeats);
    let one_pass = reference.as_ref().filter(|v| within(v));

    // The one-pass parser with an empty schema: same verdict, same value.
    match (any_schema().parse_value_and_validate(text, &limits), one_pass) {
        (Ok(v), Some(e)) => assert_eq!(&v, e, "value differs for {text:?}"),
        (Err(err), None) => {
            assert!(SYNTAX.contains(&err.code.as_ref()), "{err}");
            if reference.is_some() {
                assert_ne!(err.code, "json_invalid", "serde_json accepts {text:?} but we say {err}");
            }
        }
        (got, want) => panic!("one-pass {got:?} vs serde_json {want:?} for {text:?}"),
    }
    // The plain depth-limited parser agrees with serde_json as it is.
    match (parse_value(text, &limits), expected) {
        (Ok(v), Some(e)) => assert_eq!(&v, e),
        (Err(_), None) => {}
        (got, want) => panic!("parse_value {got:?} vs serde_json {want:?} for {text:?}"),
    }
    let expected = one_pass;
    // The tool schemas: a syntax verdict matches; a parsed object is validated like the value.
    for schema in schemas() {
        let r = schema.parse_and_validate(text, &limits);
        match (&r, expected) {
            (Err(e), _) if SYNTAX.contains(&e.code.as_ref()) => {
                assert!(expected.is_none(), "{e} for {text:?}")
            }
            (_, None) => panic!("{r:?} for text serde_json refuses: {text:?}"),
            (Ok(map), Some(e)) => {
                assert_eq!(&Value::Object(map.clone()), e);
                assert!(schema.validate(e).is_ok());
            }
            (Err(err), Some(e)) => {
                if e.is_object() {
                    // The same violations, though "first" follows the text's key order in one
                    // pass and the map's (sorted) order in `validate`.
                    let all = schema.validate_all(e);
                    assert!(!all.is_empty(), "one-pass refused ({err}), validate accepts {text:?}");
                    match (schema.mode(), all.len()) {
                        (ValidationMode::AllErrors, 1) => assert_eq!(err.code, all[0].code, "{text:?}"),
                        (ValidationMode::AllErrors, _) => assert_eq!(err.code, "tool_arguments_invalid"),
                        _ => assert!(
                            all.iter().any(|v| v.code == err.code),
                            "{err} not in {all:?} for {text:?}"
                        ),
                    }
                } else {
                    assert_eq!(err.code, "json_not_object");
                }
            }
        }
    }
}
