//! Randomized tests (proptest): arbitrary JSON values, schemas built from supported and odd
//! keywords with well- and ill-formed values, deep nesting and mangled text never make the
//! compiler, the validator, the one-pass parser or the canonical form panic; and the two
//! validation paths agree violation for violation.
//!
//! `PROPTEST_CASES=5000 cargo test --test fuzz` runs a longer search (default 256 per property).

use arkagent::json::{canonicalize, canonicalize_str, parse_value, JsonLimits};
use arkagent::schema::{CompiledSchema, SchemaOptions, ValidationMode};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![Just(0.5f64), Just(1.0), Just(-2.0), Just(1e300), Just(1e-300)].prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
        prop_oneof![Just("a"), Just("b"), Just(""), Just("😀"), Just("\u{0}")]
            .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (prop_oneof![Just("a".to_string()), Just("b".to_string()), ".{0,4}"], inner),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn keyword() -> impl Strategy<Value = &'static str> {
    // Every supported keyword, plus some that must be refused.
    let mut all = arkagent::schema::SUPPORTED_KEYWORDS.to_vec();
    all.extend(["$schema", "format", "oneOf", "$ref", "not", "prefixItems"]);
    prop::sample::select(all)
}

fn keyword_value(inner: BoxedStrategy<Value>) -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "string", "integer", "number", "object", "array", "boolean", "null", "bogus"
        ])
        .prop_map(|t| Value::String(t.into())),
        prop::collection::vec(prop::sample::select(vec!["string", "integer", "null", "object"]), 0..3)
            .prop_map(|ts| Value::Array(ts.into_iter().map(|t| Value::String(t.into())).collect())),
        prop::collection::vec(("[ab]", inner.clone()), 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
        prop::collection::vec("[ab]", 0..3)
            .prop_map(|v| Value::Array(v.into_iter().map(Value::String).collect())),
        prop_oneof![Just("^a+$"), Just("(unclosed"), Just("\\p{Letter}"), Just("[")]
            .prop_map(|p| Value::String(p.into())),
        (-3i64..5).prop_map(Value::from),
        prop_oneof![Just(0.5f64), Just(-1.5), Just(0.0)].prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        json_value(),
        inner,
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        Just(serde_json::json!({})),
        prop::sample::select(vec!["string", "integer", "number", "object", "array", "boolean", "null"])
            .prop_map(|t| serde_json::json!({ "type": t })),
    ];
    leaf.prop_recursive(6, 48, 5, |inner| {
        prop::collection::vec((keyword(), keyword_value(inner.boxed())), 0..5)
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
    })
}

/// A value nested `depth` times in arrays and objects, alternating.
fn nested(depth: usize) -> Value {
    let mut v = Value::Null;
    for i in 0..depth {
        v = if i % 2 == 0 { Value::Array(vec![v]) } else { serde_json::json!({ "a": v }) };
    }
    v
}

proptest! {
    #[test]
    fn compile_and_validate_never_panic_and_both_paths_agree(schema in schema(), value in json_value()) {
        let options = SchemaOptions { tool_root: false, ..SchemaOptions::default() };
        if let Ok(first) = CompiledSchema::compile_with(&schema, &options) {
            let all = first.with_mode(ValidationMode::AllErrors);
            let text = serde_json::to_string(&value).unwrap();
            let limits = JsonLimits::default();
            let walked_first = first.validate(&value);
            let parsed_first = first.parse_value_and_validate(&text, &limits).map(|_| ());
            prop_assert_eq!(&walked_first, &parsed_first);
            let walked_all = all.validate(&value);
            let parsed_all = all.parse_value_and_validate(&text, &limits).map(|_| ());
            prop_assert_eq!(&walked_all, &parsed_all);
            prop_assert_eq!(walked_first.is_ok(), all.validate_all(&value).is_empty());
            if let Err(e) = walked_first {
                prop_assert!(e.code.starts_with("tool_argument"), "{}", e);
            }
        }
        // As a tool schema too (object root required): never a panic.
        let _ = CompiledSchema::compile(&schema);
    }

    #[test]
    fn deep_values_and_schemas_never_panic(depth in 0usize..400, schema in schema()) {
        let options = SchemaOptions { tool_root: false, ..SchemaOptions::default() };
        let value = nested(depth);
        let text = serde_json::to_string(&value).unwrap();
        if let Ok(s) = CompiledSchema::compile_with(&schema, &options) {
            let _ = s.validate(&value);
            let r = s.parse_value_and_validate(&text, &JsonLimits::default());
            if depth > 64 {
                prop_assert_eq!(r.unwrap_err().code, "json_too_deep");
            }
        }
        // A deep value inside enum/const is refused, not copied recursively forever.
        let _ = CompiledSchema::compile_with(&serde_json::json!({"enum": [value.clone()], "const": value}), &options);
        prop_assert_eq!(canonicalize(&nested(depth)).len(), text.len());
    }

    #[test]
    fn mangled_text_never_panics(value in json_value(), cut in 0usize..200, junk in "[\\[\\]{}\",:0-9a-z\\\\ ]{0,6}") {
        let text = serde_json::to_string(&value).unwrap();
        let mut at = cut.min(text.len());
        while !text.is_char_boundary(at) { at -= 1; }
        let mangled = format!("{}{}{}", &text[..at], junk, &text[at..]);
        let s = CompiledSchema::compile(&serde_json::json!({
            "type": "object",
            "properties": {"a": {"type": "array", "items": {"type": "string"}}, "b": {"enum": [1, "x"]}},
            "additionalProperties": {"type": ["number", "null", "object"]}
        })).unwrap();
        let _ = s.parse_and_validate(&mangled, &JsonLimits::default());
        let _ = parse_value(&mangled, &JsonLimits::default());
        let _ = canonicalize_str(&mangled, &JsonLimits::default());
    }

    #[test]
    fn canonical_form_is_stable(value in json_value()) {
        let once = canonicalize(&value);
        let twice = canonicalize_str(&once, &JsonLimits { max_depth: 128, max_bytes: usize::MAX }).unwrap();
        prop_assert_eq!(once, twice);
    }
}

proptest! {
    /// The one-pass validator has its own parser: with the schema `true` it must build exactly
    /// what serde_json builds, and accept exactly the texts serde_json accepts.
    #[test]
    fn own_parser_matches_serde_json(value in json_value(), pretty in any::<bool>(), cut in 0usize..300, junk in "[\\[\\]{}\",:.eE+0-9a-z\\\\ \t\n-]{0,4}") {
        let any = CompiledSchema::compile_with(&Value::Bool(true), &SchemaOptions { tool_root: false, ..SchemaOptions::default() }).unwrap();
        let limits = JsonLimits { max_depth: 128, max_bytes: usize::MAX };
        let text = if pretty { serde_json::to_string_pretty(&value).unwrap() } else { serde_json::to_string(&value).unwrap() };
        prop_assert_eq!(any.parse_value_and_validate(&text, &limits).unwrap(), value);
        let mut at = cut.min(text.len());
        while !text.is_char_boundary(at) { at -= 1; }
        let mangled = format!("{}{}{}", &text[..at], junk, &text[at..]);
        let ours = any.parse_value_and_validate(&mangled, &limits);
        let theirs = serde_json::from_str::<Value>(&mangled);
        // Where ours differs on purpose: a repeated key (refused: see `a_repeated_key_is_json_invalid_naming_it`).
        if matches!(&ours, Err(e) if e.message.contains("appears twice")) {
            prop_assert!(theirs.is_ok());
            return Ok(());
        }
        prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{:?}: {:?} vs {:?}", mangled, ours, theirs);
        if let (Ok(a), Ok(b)) = (ours, theirs) {
            prop_assert_eq!(a, b);
        }
    }
}

#[test]
fn own_parser_matches_serde_json_on_edge_cases() {
    let any = CompiledSchema::compile_with(
        &Value::Bool(true),
        &SchemaOptions { tool_root: false, ..SchemaOptions::default() },
    )
    .unwrap();
    let limits = JsonLimits::default();
    for text in [
        "-0",
        "0",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "1e400",
        "-1e400",
        "1.5e-400",
        "01",
        "1.",
        ".5",
        "-",
        "1e",
        "1e+",
        "+1",
        "0x10",
        "333333333.33333329",
        "\"\\ud83d\\ude02\"",
        "\"\\ud83d\"",
        "\"\\ude02\"",
        "\"\\ud83dx\"",
        "\"\\u00e9\\n\\t\\/\"",
        "\"\\x\"",
        "\"a\u{1}\"",
        "\"\u{7f}\u{80}é😀\"",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{1:2}",
        "[1 2]",
        "tru",
        "nul",
        "true false",
        " [ ] ",
        "{\"a\":{\"a\":[]}}",
        "\"unterminated",
        "[",
        "{",
        "",
        "   ",
    ] {
        let ours = any.parse_value_and_validate(text, &limits);
        // Where ours differs on purpose: a lone surrogate's escape reads as U+FFFD.
        let theirs = serde_json::from_str::<Value>(&arkagent::json::lone_surrogate_escapes_replaced(text));
        assert_eq!(ours.is_ok(), theirs.is_ok(), "{text:?}: {ours:?} vs {theirs:?}");
        if let (Ok(a), Ok(b)) = (&ours, &theirs) {
            assert_eq!(a, b, "{text:?}");
            assert_eq!(a.to_string(), b.to_string(), "{text:?}");
        }
        if let Err(e) = ours {
            assert_eq!(e.code, "json_invalid", "{text:?}");
        }
    }
}
