//! The seed's check list (section 13), "工具定义与注册" and "执行与错误": registration's three checks
//! in order, the four execution gates in order, executor failures, results and flags, and the
//! registry's derived operations (copy, unregister, per-turn snapshots).

use arkagent::error::{codes, AgentError, ErrorLayer};
use arkagent::tool::{FnExecutor, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry, ToolResult};
use arkagent::ToolCall;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn order_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"orderId": {"type": "string"}, "quantity": {"type": "integer"}},
        "required": ["orderId"]
    })
}

fn echo() -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(|args: Map<String, Value>, _ctx: ToolContext| async move {
        Ok(ToolResult::json(Value::Object(args)))
    }))
}

/// An executor that counts its runs and returns what `make` gives.
fn counting(runs: Arc<AtomicUsize>, make: fn() -> Result<ToolResult, AgentError>) -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(move |_args: Map<String, Value>, _ctx: ToolContext| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            make()
        }
    }))
}

fn ctx() -> ToolContext {
    ToolContext::detached("s1", "call_1")
}

fn call(name: &str, args: &str) -> ToolCall {
    ToolCall::new("call_1", name, args)
}

// ---- 工具定义与注册

#[test]
fn registering_a_valid_tool_succeeds() {
    let mut r = ToolRegistry::new();
    r.register(ToolDefinition::new("query_order", "Look an order up", order_schema()), echo()).unwrap();
    assert_eq!(r.names(), vec!["query_order"]);
    let openai = r.definition("query_order").unwrap().to_openai_tool();
    assert_eq!(openai["function"]["parameters"], order_schema());
}

#[test]
fn an_empty_or_blank_name_is_tool_name_empty() {
    let mut r = ToolRegistry::new();
    for name in ["", "   ", "\t\n", "\u{feff}", " \u{feff}\u{3000}"] {
        let e = r.register(ToolDefinition::new(name, "d", order_schema()), echo()).unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Config, codes::TOOL_NAME_EMPTY));
    }
    // Check one comes before check three: a blank name with a broken schema is still a name error.
    let e = r.register(ToolDefinition::new(" ", "d", json!({"type": "nope"})), echo()).unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_EMPTY);
    assert!(r.is_empty());
}

#[test]
fn a_name_model_apis_refuse_is_tool_name_invalid() {
    let mut r = ToolRegistry::new();
    let long = "a".repeat(65);
    for name in [
        "查询订单",
        "query order",
        "query.order",
        " query_order",
        "query_order\n",
        "q\u{feff}",
        long.as_str(),
    ] {
        let e = r.register(ToolDefinition::new(name, "d", order_schema()), echo()).unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Config, codes::TOOL_NAME_INVALID), "{name:?}");
        assert!(e.message.contains("Tool name"), "{}", e.message);
    }
    // Check two comes before the duplicate and schema checks.
    let e = r.register(ToolDefinition::new("a b", "d", json!({"type": "nope"})), echo()).unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_INVALID);
    assert!(r.is_empty());
    let longest = "A-z_0".repeat(12) + "abcd";
    for name in ["q", "Query-Order_2", longest.as_str()] {
        r.register(ToolDefinition::new(name, "d", order_schema()), echo()).unwrap();
    }
    assert_eq!(r.len(), 3);
}

#[test]
fn a_duplicate_name_is_tool_name_duplicate() {
    let mut r = ToolRegistry::new();
    r.register(ToolDefinition::new("query_order", "d", order_schema()), echo()).unwrap();
    let e = r.register(ToolDefinition::new("query_order", "other", order_schema()), echo()).unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Config, codes::TOOL_NAME_DUPLICATE));
    assert!(e.message.contains("query_order"));
    // Check two comes before check three.
    let e = r.register(ToolDefinition::new("query_order", "d", json!({"type": 1})), echo()).unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_DUPLICATE);
    assert_eq!(r.definition("query_order").unwrap().description, "d");
}

#[test]
fn an_invalid_schema_is_a_schema_error() {
    let cases = [
        (json!({"type": "object", "properties": {"a": {"type": "strng"}}}), codes::SCHEMA_INVALID_TYPE),
        (json!({"type": "object", "properties": []}), codes::SCHEMA_INVALID_PROPERTIES),
        (json!({"type": "object", "properties": {"a": 5}}), codes::SCHEMA_INVALID_PROPERTIES),
        (json!({"type": "object", "required": [1]}), codes::SCHEMA_INVALID_REQUIRED),
        (json!({"type": "object", "required": "a"}), codes::SCHEMA_INVALID_REQUIRED),
        (json!({"type": "object", "required": ["a", "a"]}), codes::SCHEMA_INVALID_REQUIRED),
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "items": 3}}}),
            codes::SCHEMA_INVALID_ITEMS,
        ),
        (json!({"type": "object", "properties": {"a": {"enum": 3}}}), codes::SCHEMA_INVALID_ENUM),
        (
            json!({"type": "object", "additionalProperties": "no"}),
            codes::SCHEMA_INVALID_ADDITIONAL_PROPERTIES,
        ),
        (json!({"type": "object", "properties": {"a": {"minimum": "1"}}}), codes::SCHEMA_INVALID_BOUND),
        (json!({"type": "object", "properties": {"a": {"multipleOf": 0}}}), codes::SCHEMA_INVALID_BOUND),
        (json!({"type": "object", "properties": {"a": {"maxLength": -1}}}), codes::SCHEMA_INVALID_LENGTH),
        (json!({"type": "object", "properties": {"a": {"minItems": 1.5}}}), codes::SCHEMA_INVALID_LENGTH),
        (
            json!({"type": "object", "properties": {"a": {"pattern": "(unclosed"}}}),
            codes::SCHEMA_INVALID_PATTERN,
        ),
        (json!({"type": "object", "properties": {"a": {"pattern": 7}}}), codes::SCHEMA_INVALID_PATTERN),
        (json!({"type": "object", "properties": {"a": {"anyOf": []}}}), codes::SCHEMA_INVALID_ANY_OF),
        (
            json!({"type": "object", "properties": {"a": {"uniqueItems": "yes"}}}),
            codes::SCHEMA_INVALID_UNIQUE_ITEMS,
        ),
        (json!({"type": "object", "description": 5}), codes::SCHEMA_INVALID_ANNOTATION),
        (json!({"type": "string"}), codes::SCHEMA_INVALID_ROOT),
        (json!("object"), codes::SCHEMA_INVALID_ROOT),
        (json!({"properties": {}}), codes::SCHEMA_INVALID_TYPE),
        (json!({"type": []}), codes::SCHEMA_INVALID_TYPE),
        (
            json!({"type": "object", "properties": {"a": {"type": ["string", "string"]}}}),
            codes::SCHEMA_INVALID_TYPE,
        ),
    ];
    for (schema, code) in cases {
        let mut r = ToolRegistry::new();
        let e = r.register(ToolDefinition::new("t", "d", schema.clone()), echo()).unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Config, code), "{schema}: {e}");
        assert!(e.code.starts_with("schema_"));
        assert!(r.is_empty(), "nothing is registered after a schema error");
    }
}

#[test]
fn a_deeply_nested_schema_is_refused_not_overflowed() {
    // 1,000 levels: deep enough to pass any sane limit; serde_json's own recursive Drop of the
    // test's Value is what bounds this number, not the compiler (which stops at 64).
    let mut schema = json!({"type": "string"});
    for _ in 0..1_000 {
        schema = json!({"type": "array", "items": schema});
    }
    let mut r = ToolRegistry::new();
    let e = r.register(
        ToolDefinition::new("t", "d", json!({"type": "object", "properties": {"a": schema}})),
        echo(),
    );
    assert_eq!(e.unwrap_err().code, codes::SCHEMA_TOO_DEEP);
}

// ---- 执行与错误

#[tokio::test]
async fn a_valid_call_runs_and_returns_the_executor_result() {
    let mut r = ToolRegistry::new();
    r.register(ToolDefinition::new("query_order", "d", order_schema()), echo()).unwrap();
    let result = r.execute(&call("query_order", r#"{"orderId": "A1", "quantity": 2}"#), ctx()).await.unwrap();
    assert!(!result.is_error && !result.stop);
    assert_eq!(result.to_model_text(), r#"{"orderId":"A1","quantity":2}"#);
}

#[tokio::test]
async fn an_executor_that_panics_becomes_tool_execution_failed() {
    let mut r = ToolRegistry::new();
    let boom: Arc<dyn ToolExecutor> =
        Arc::new(FnExecutor(|_a: Map<String, Value>, _c: ToolContext| async move {
            if true {
                panic!("disk on fire");
            }
            Ok(ToolResult::text("unreachable"))
        }));
    r.register(ToolDefinition::new("boom", "d", json!({"type": "object"})), boom).unwrap();
    let e = r.execute(&call("boom", "{}"), ctx()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Tool, codes::TOOL_EXECUTION_FAILED));
    assert!(e.message.contains("disk on fire"), "{}", e.message);
    // The registry is still usable afterwards.
    assert_eq!(r.execute(&call("boom", "{}"), ctx()).await.unwrap_err().code, codes::TOOL_EXECUTION_FAILED);
}

#[tokio::test]
async fn a_domain_error_passes_through_with_its_own_code() {
    let mut r = ToolRegistry::new();
    let runs = Arc::new(AtomicUsize::new(0));
    r.register(
        ToolDefinition::new("plan", "d", json!({"type": "object"})),
        counting(Arc::clone(&runs), || {
            Err(AgentError::tool("plan_todo_status_unknown", "status 'x' is unknown"))
        }),
    )
    .unwrap();
    let e = r.execute(&call("plan", "{}"), ctx()).await.unwrap_err();
    assert_eq!(e, AgentError::tool("plan_todo_status_unknown", "status 'x' is unknown"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_is_error_result_reaches_the_model_as_an_error() {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("read_record", "d", json!({"type": "object"})),
        counting(Arc::new(AtomicUsize::new(0)), || Ok(ToolResult::error_text("unknown record: r9"))),
    )
    .unwrap();
    let result = r.execute(&call("read_record", "{}"), ctx()).await.unwrap();
    assert!(result.is_error);
    assert_eq!(result.to_model_text(), "unknown record: r9");
    // The tool message the model reads says it failed (the wire has no error field).
    let message = arkagent::state::tool_result_message(&call("read_record", "{}"), &result);
    assert!(matches!(message, arkagent::ChatMessage::Tool { ref content, is_error: true, .. }
        if content == "error: unknown record: r9"));
    // A gate's error becomes an is_error result carrying its code too.
    let e = r.execute(&call("nope", "{}"), ctx()).await.unwrap_err();
    let as_result = ToolResult::from_error(&e);
    assert!(as_result.is_error);
    assert_eq!(as_result.to_model_text(), "error [tool_not_found]: Tool not found: nope");
}

#[tokio::test]
async fn a_stop_flag_result_is_returned_with_the_flag_set() {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("finish", "d", json!({"type": "object"})),
        counting(Arc::new(AtomicUsize::new(0)), || Ok(ToolResult::text("done").with_stop(true))),
    )
    .unwrap();
    let result = r.execute(&call("finish", "{}"), ctx()).await.unwrap();
    assert!(result.stop && !result.is_error);
}

#[tokio::test]
async fn a_cancelled_signal_stops_the_call_before_the_executor() {
    let mut r = ToolRegistry::new();
    let runs = Arc::new(AtomicUsize::new(0));
    r.register(
        ToolDefinition::new("slow", "d", order_schema()),
        counting(Arc::clone(&runs), || Ok(ToolResult::text("ran"))),
    )
    .unwrap();
    let context = ctx();
    context.signal.cancel("user pressed stop");
    let e = r.execute(&call("slow", r#"{"orderId": "A1"}"#), context).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Cancelled, codes::TOOL_CANCELLED));
    assert_eq!(e.message, "user pressed stop");
    assert!(e.is_cancelled());
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the executor never ran");
}

#[tokio::test]
async fn a_running_executor_sees_the_cancellation() {
    let mut r = ToolRegistry::new();
    let cooperative: Arc<dyn ToolExecutor> =
        Arc::new(FnExecutor(|_a: Map<String, Value>, c: ToolContext| async move {
            c.signal.cancelled().await;
            Err(AgentError::of(codes::TOOL_CANCELLED, c.signal.reason().unwrap_or_default()))
        }));
    r.register(ToolDefinition::new("wait", "d", json!({"type": "object"})), cooperative).unwrap();
    let context = ctx();
    let signal = context.signal.clone();
    let snapshot = r.snapshot();
    let task = tokio::spawn(async move { snapshot.execute(&call("wait", "{}"), context).await });
    tokio::task::yield_now().await;
    signal.cancel("timeout");
    let e = task.await.unwrap().unwrap_err();
    assert_eq!((e.layer, e.message.as_str()), (ErrorLayer::Cancelled, "timeout"));
}

#[tokio::test]
async fn the_four_gates_run_in_order() {
    let mut r = ToolRegistry::new();
    let runs = Arc::new(AtomicUsize::new(0));
    r.register(
        ToolDefinition::new("query_order", "d", order_schema()),
        counting(Arc::clone(&runs), || Ok(ToolResult::text("ran"))),
    )
    .unwrap();
    let cancelled = || {
        let c = ctx();
        c.signal.cancel("stop");
        c
    };
    // 1 before 2: an unknown tool with broken arguments is tool_not_found.
    let e = r.execute(&call("missing", "{broken"), cancelled()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Tool, codes::TOOL_NOT_FOUND));
    // 2 before 3 and 4: broken JSON is a decode error even when a schema violation precedes the break.
    let e = r.execute(&call("query_order", r#"{"orderId": 5, "quantity": "#), cancelled()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Decode, codes::JSON_INVALID));
    // 3 before 4.
    let e = r.execute(&call("query_order", r#"{"orderId": 5}"#), cancelled()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Tool, codes::TOOL_ARGUMENT_TYPE_MISMATCH));
    // 4 before the executor.
    let e = r.execute(&call("query_order", r#"{"orderId": "A"}"#), cancelled()).await.unwrap_err();
    assert_eq!(e.code, codes::TOOL_CANCELLED);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // All pass: the executor runs once.
    r.execute(&call("query_order", r#"{"orderId": "A"}"#), ctx()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// ---- derived operations

#[tokio::test]
async fn a_snapshot_keeps_the_tools_the_model_saw() {
    let mut r = ToolRegistry::new();
    r.register(ToolDefinition::new("query_order", "d", order_schema()), echo()).unwrap();
    let turn = r.snapshot();
    assert!(r.unregister("query_order"));
    r.register(
        ToolDefinition::new(
            "query_order",
            "d",
            json!({"type": "object", "properties": {"orderId": {"type": "integer"}}}),
        ),
        echo(),
    )
    .unwrap();
    // The old turn still runs the old schema; a new snapshot runs the new one.
    assert!(turn.execute(&call("query_order", r#"{"orderId": "A1"}"#), ctx()).await.is_ok());
    let e = r.snapshot().execute(&call("query_order", r#"{"orderId": "A1"}"#), ctx()).await.unwrap_err();
    assert_eq!(e.code, codes::TOOL_ARGUMENT_TYPE_MISMATCH);
    assert_eq!(turn.definitions().len(), 1);
}

#[test]
fn copy_into_excluding_and_unregister() {
    let mut parent = ToolRegistry::new();
    for name in ["read", "write", "delegate_task"] {
        parent.register(ToolDefinition::new(name, "d", json!({"type": "object"})), echo()).unwrap();
    }
    let mut worker = ToolRegistry::new();
    parent.copy_into_excluding(&mut worker, &["delegate_task"]).unwrap();
    assert_eq!(worker.names(), vec!["read", "write"]);
    // A clash leaves the target unchanged.
    let mut clash = ToolRegistry::new();
    clash.register(ToolDefinition::new("write", "mine", json!({"type": "object"})), echo()).unwrap();
    assert_eq!(parent.copy_into(&mut clash).unwrap_err().code, codes::TOOL_NAME_DUPLICATE);
    assert_eq!(clash.names(), vec!["write"]);
    assert!(worker.unregister("read"));
    assert!(!worker.unregister("read"));
    assert_eq!(worker.names(), vec!["write"]);
    assert_eq!(parent.len(), 3);
}
