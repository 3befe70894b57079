//! Behaviours found by the specification audit (docs/spec-audit.md) that no other test covered:
//! each test names the seed statement it checks.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentEvent, EventLog};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};

/// arkagent-tool-system.md 6.1 / 13 ("isError: true 正确回填给模型"): a failed result must reach
/// the model as a failure. The OpenAI-compatible `role=tool` message has no error field, only its
/// content, so the text the model reads says it: an app's `is_error` result is shown as
/// `error: <text>`; a text that already starts with "error" (the runtime's own
/// `error [code]: ...`) is left as it is, and a successful result is never marked. The app's
/// `tool_result` event keeps the tool's own text.
#[tokio::test]
async fn an_is_error_result_is_marked_as_an_error_in_what_the_model_reads() {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("read_record", "reads a record", json!({"type": "object"})),
            Arc::new(FnExecutor(|args: serde_json::Map<String, serde_json::Value>, _ctx| async move {
                Ok(match args.get("id").and_then(|v| v.as_str()) {
                    Some("r1") => ToolResult::text("法棍 500g"),
                    Some("e1") => ToolResult::error_text("Error: the oven is offline"),
                    _ => ToolResult::error_text("unknown record: r9"),
                })
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[
            ("c1", "read_record", r#"{"id":"r9"}"#),
            ("c2", "read_record", r#"{"id":"r1"}"#),
            ("c3", "missing_tool", "{}"),
            ("c4", "read_record", r#"{"id":"e1"}"#),
        ]),
        answer("记录 r9 不存在"),
    ]));
    let agent = AgentBuilder::new(model.clone(), Arc::new(MemStore::new())).tools(tools).build();
    let events = EventLog::new();
    agent.run("s", "r9 和 r1 是什么？", &events, &CancellationSignal::new()).await.unwrap();

    let second = &model.requests()[1];
    let results = tool_messages(&second.messages);
    assert_eq!(
        results,
        vec![
            ("c1".to_string(), "error: unknown record: r9".to_string(), true),
            ("c2".to_string(), "法棍 500g".to_string(), false),
            ("c3".to_string(), "error [tool_not_found]: Tool not found: missing_tool".to_string(), true),
            ("c4".to_string(), "Error: the oven is offline".to_string(), true),
        ]
    );
    // The app's event carries the tool's result as it returned it.
    let first = events
        .events()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { call_id, result, .. } if call_id == "c1" => Some(result),
            _ => None,
        })
        .expect("a tool_result event for c1");
    assert_eq!(first.to_model_text(), "unknown record: r9");
    assert!(first.is_error);
}
