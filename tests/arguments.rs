//! The seed's check list (section 13), "参数校验": argument validation through the registry, plus
//! the input limits (a 10,000-deep or 100 MB argument text is refused without a crash), paths in
//! messages, and the collect-all mode.

use arkagent::error::{codes, ErrorLayer};
use arkagent::json::JsonLimits;
use arkagent::schema::ValidationMode;
use arkagent::tool::{FnExecutor, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry, ToolResult};
use arkagent::{AgentError, ToolCall};
use serde_json::{json, Map, Value};
use std::sync::Arc;

fn echo() -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(|args: Map<String, Value>, _ctx: ToolContext| async move {
        Ok(ToolResult::json(Value::Object(args)))
    }))
}

fn registry(schema: Value) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(ToolDefinition::new("t", "d", schema), echo()).unwrap();
    r
}

async fn run(r: &ToolRegistry, args: &str) -> Result<ToolResult, AgentError> {
    r.execute(&ToolCall::new("c1", "t", args), ToolContext::detached("s", "c1")).await
}

#[tokio::test]
async fn a_wrong_type_is_tool_argument_type_mismatch() {
    let r = registry(json!({
        "type": "object",
        "properties": {
            "recordId": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}
        }
    }));
    let e = run(&r, r#"{"recordId": 123}"#).await.unwrap_err();
    assert_eq!(
        (e.layer, e.code.as_ref(), e.message.as_str()),
        (ErrorLayer::Tool, codes::TOOL_ARGUMENT_TYPE_MISMATCH, "$.recordId must be string")
    );
    let e = run(&r, r#"{"recordId": null}"#).await.unwrap_err();
    assert_eq!(e.code, codes::TOOL_ARGUMENT_TYPE_MISMATCH);
    let e = run(&r, r#"{"items": [{"name": "a"}, {"name": ["b"]}]}"#).await.unwrap_err();
    assert_eq!(e.message, "$.items[1].name must be string");
    assert!(run(&r, r#"{"recordId": "r1", "items": []}"#).await.is_ok());
}

#[tokio::test]
async fn a_missing_required_argument_is_tool_argument_required() {
    let r = registry(json!({
        "type": "object",
        "properties": {"recordId": {"type": "string"}, "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        "required": ["recordId"]
    }));
    let e = run(&r, "{}").await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Tool, codes::TOOL_ARGUMENT_REQUIRED));
    assert_eq!(e.message, "Missing required argument: $.recordId");
    let e = run(&r, r#"{"recordId": "r", "address": {}}"#).await.unwrap_err();
    assert_eq!(e.message, "Missing required argument: $.address.city");
}

#[tokio::test]
async fn integer_rejects_a_fraction_and_accepts_whole_numbers() {
    let r = registry(json!({"type": "object", "properties": {"index": {"type": "integer"}}}));
    let e = run(&r, r#"{"index": 1.5}"#).await.unwrap_err();
    assert_eq!(
        (e.code.as_ref(), e.message.as_str()),
        (codes::TOOL_ARGUMENT_TYPE_MISMATCH, "$.index must be integer")
    );
    assert!(run(&r, r#"{"index": 1.0}"#).await.is_ok());
    assert!(run(&r, r#"{"index": -7}"#).await.is_ok());
    // 53 digits: beyond u64, parsed as a double, still an integer.
    assert!(run(&r, r#"{"index": 12345678910111213141516171819202122232425262728293031}"#).await.is_ok());
    assert!(run(&r, r#"{"index": 1e300}"#).await.is_ok());
    assert_eq!(run(&r, r#"{"index": "1"}"#).await.unwrap_err().code, codes::TOOL_ARGUMENT_TYPE_MISMATCH);
}

#[tokio::test]
async fn broken_json_is_a_decode_error() {
    let r = registry(json!({"type": "object"}));
    for text in [r#"{"recordId": "r1""#, "", "not json", r#"{"a": 1} trailing"#, "{'a': 1}", r#"{"a": NaN}"#]
    {
        let e = run(&r, text).await.unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Decode, codes::JSON_INVALID), "{text}");
    }
    for text in ["[]", "\"text\"", "42", "null"] {
        let e = run(&r, text).await.unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Decode, codes::JSON_NOT_OBJECT), "{text}");
    }
}

#[test]
fn an_unsupported_keyword_is_schema_unsupported_keyword_at_any_depth() {
    let cases = [
        (json!({"type": "object", "format": "x"}), "format", "$"),
        (
            json!({"type": "object", "properties": {"status": {"type": "string", "oneOf": []}}}),
            "oneOf",
            "$.properties.status",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {"b": {"$ref": "#"}}}}}}),
            "$ref",
            "$.properties.a.items.properties.b",
        ),
        (
            json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"not": {}}]}}}),
            "not",
            "$.properties.a.anyOf[1]",
        ),
        (
            json!({"type": "object", "additionalProperties": {"patternProperties": {}}}),
            "patternProperties",
            "$.additionalProperties",
        ),
        (json!({"type": "object", "properties": {"a": {"$schema": "x"}}}), "$schema", "$.properties.a"),
        (
            json!({"type": "object", "properties": {"a": {"items": [{"type": "string"}]}}}),
            "items",
            "$.properties.a",
        ),
    ];
    for (schema, keyword, path) in cases {
        let mut r = ToolRegistry::new();
        let e = r.register(ToolDefinition::new("t", "d", schema.clone()), echo()).unwrap_err();
        assert_eq!(
            (e.layer, e.code.as_ref()),
            (ErrorLayer::Config, codes::SCHEMA_UNSUPPORTED_KEYWORD),
            "{schema}"
        );
        assert!(e.message.contains(&format!("keyword: {keyword}")), "{}", e.message);
        assert!(e.message.contains(&format!("(at {path})")), "{}", e.message);
    }
    // A root $schema is accepted and ignored.
    assert!(ToolRegistry::new()
        .register(
            ToolDefinition::new(
                "t",
                "d",
                json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"})
            ),
            echo()
        )
        .is_ok());
}

#[tokio::test]
async fn every_enforced_keyword_has_its_own_code() {
    let r = registry(json!({
        "type": "object",
        "properties": {
            "status": {"enum": ["pending", "done"]},
            "kind": {"const": "order"},
            "qty": {"type": "integer", "minimum": 1, "exclusiveMaximum": 100, "multipleOf": 2},
            "code": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[A-Z]+$"},
            "tags": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true},
            "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "never": false
        },
        "additionalProperties": false
    }));
    let cases = [
        (
            r#"{"status": "hack"}"#,
            codes::TOOL_ARGUMENT_ENUM,
            "$.status must be one of [\"pending\",\"done\"]",
        ),
        (r#"{"kind": "user"}"#, codes::TOOL_ARGUMENT_CONST, "$.kind must be \"order\""),
        (r#"{"qty": 0}"#, codes::TOOL_ARGUMENT_MINIMUM, "$.qty must be >= 1"),
        (r#"{"qty": 100}"#, codes::TOOL_ARGUMENT_MAXIMUM, "$.qty must be < 100"),
        (r#"{"qty": 3}"#, codes::TOOL_ARGUMENT_MULTIPLE_OF, "$.qty must be a multiple of 2"),
        (r#"{"code": "A"}"#, codes::TOOL_ARGUMENT_LENGTH, "$.code must be at least 2 characters long, not 1"),
        (
            r#"{"code": "ABCDE"}"#,
            codes::TOOL_ARGUMENT_LENGTH,
            "$.code must be at most 4 characters long, not 5",
        ),
        (r#"{"code": "ab"}"#, codes::TOOL_ARGUMENT_PATTERN, "$.code must match the pattern ^[A-Z]+$"),
        (r#"{"tags": []}"#, codes::TOOL_ARGUMENT_ITEMS_COUNT, "$.tags must have at least 1 items, not 0"),
        (
            r#"{"tags": [1, 2, 3]}"#,
            codes::TOOL_ARGUMENT_ITEMS_COUNT,
            "$.tags must have at most 2 items, not 3",
        ),
        (
            r#"{"tags": [1, 1.0]}"#,
            codes::TOOL_ARGUMENT_UNIQUE_ITEMS,
            "$.tags must have unique items (items 0 and 1 are equal)",
        ),
        (
            // Equal below 2^64 however written (an integer, a double with an exponent).
            r#"{"tags": [18400000000000000000, 1.84e19]}"#,
            codes::TOOL_ARGUMENT_UNIQUE_ITEMS,
            "$.tags must have unique items (items 0 and 1 are equal)",
        ),
        (
            r#"{"id": true}"#,
            codes::TOOL_ARGUMENT_ANY_OF,
            "$.id must match at least one schema of anyOf: (1) $.id must be string; (2) $.id must be integer",
        ),
        (
            r#"{"never": 1}"#,
            codes::TOOL_ARGUMENT_NOT_ALLOWED,
            "$.never is not allowed here (its schema is false)",
        ),
        (r#"{"extra": 1}"#, codes::TOOL_ARGUMENT_ADDITIONAL_PROPERTY, "$.extra is not an allowed property"),
    ];
    for (args, code, message) in cases {
        let e = run(&r, args).await.unwrap_err();
        assert_eq!(
            (e.layer, e.code.as_ref(), e.message.as_str()),
            (ErrorLayer::Tool, code, message),
            "{args}"
        );
    }
    // Code points, not bytes or UTF-16 units: four characters, 12 bytes / 5 code units... fails the pattern only.
    let e = run(&r, r#"{"code": "日本語😀"}"#).await.unwrap_err();
    assert_eq!(e.code, codes::TOOL_ARGUMENT_PATTERN);
    assert!(run(
        &r,
        r#"{"status": "done", "kind": "order", "qty": 98, "code": "ABCD", "tags": ["a"], "id": 7}"#
    )
    .await
    .is_ok());
}

#[tokio::test]
async fn all_errors_mode_reports_every_violation_at_once() {
    let schema = json!({
        "type": "object",
        "properties": {"orderId": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
        "required": ["orderId", "quantity"]
    });
    let mut r = ToolRegistry::new().with_validation_mode(ValidationMode::AllErrors);
    r.register(ToolDefinition::new("t", "d", schema), echo()).unwrap();
    let e = run(&r, r#"{"orderId": 7, "quantity": 0.5}"#).await.unwrap_err();
    assert_eq!(e.code, codes::TOOL_ARGUMENTS_INVALID);
    assert_eq!(e.message, "2 violations: $.orderId must be string; $.quantity must be integer");
    // One violation keeps its own code.
    assert_eq!(run(&r, r#"{"orderId": "A"}"#).await.unwrap_err().code, codes::TOOL_ARGUMENT_REQUIRED);
    // Switching back to first-error mode applies to tools already registered.
    r.set_validation_mode(ValidationMode::FirstError);
    assert_eq!(
        run(&r, r#"{"orderId": 7, "quantity": 0.5}"#).await.unwrap_err().code,
        codes::TOOL_ARGUMENT_TYPE_MISMATCH
    );
}

#[tokio::test]
async fn a_10000_deep_argument_is_json_too_deep() {
    let r = registry(json!({"type": "object"}));
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    let e = run(&r, &deep).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Decode, codes::JSON_TOO_DEEP));
    // At the limit (64 containers) it passes; one more fails.
    let at = format!("{{\"a\":{}{}}}", "[".repeat(63), "]".repeat(63));
    assert!(run(&r, &at).await.is_ok());
    let over = format!("{{\"a\":{}{}}}", "[".repeat(64), "]".repeat(64));
    assert_eq!(run(&r, &over).await.unwrap_err().code, codes::JSON_TOO_DEEP);
    // Also deep inside a validated property.
    let r = registry(
        json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "array"}}}}),
    );
    assert_eq!(run(&r, &deep).await.unwrap_err().code, codes::JSON_TOO_DEEP);
}

#[tokio::test]
async fn a_100_mb_argument_is_json_too_large() {
    let r = registry(json!({"type": "object"}));
    let big = format!("{{\"a\":\"{}\"}}", "x".repeat(100 * 1024 * 1024));
    let e = run(&r, &big).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Decode, codes::JSON_TOO_LARGE));
    // Limits are per registry.
    let mut small = ToolRegistry::with_limits(JsonLimits { max_depth: 2, max_bytes: 10 });
    small.register(ToolDefinition::new("t", "d", json!({"type": "object"})), echo()).unwrap();
    assert_eq!(run(&small, r#"{"a": "0123456789"}"#).await.unwrap_err().code, codes::JSON_TOO_LARGE);
    assert_eq!(run(&small, r#"{"a":[[]]}"#).await.unwrap_err().code, codes::JSON_TOO_DEEP);
}

#[test]
fn the_app_facing_docs_list_every_supported_keyword() {
    // An app writes schemas from README.md, index.d.ts or the ArkTS ToolDefinition's doc: each
    // lists the keywords (before saying that any other is schema_unsupported_keyword).
    let root = env!("CARGO_MANIFEST_DIR");
    for doc in [
        "README.md",
        "arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts",
        "arkts-bindings/src/main/ets/tool/Tool.ets",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        let end = text.find("schema_unsupported_keyword").unwrap_or_else(|| panic!("{doc} names the code"));
        let mut start = end.saturating_sub(1_600);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let list = &text[start..end];
        for keyword in arkagent::schema::SUPPORTED_KEYWORDS.iter().chain(&["$schema"]) {
            assert!(list.contains(&format!("`{keyword}`")), "{doc} does not list `{keyword}`");
        }
    }
}
