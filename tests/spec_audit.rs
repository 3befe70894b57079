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

/// tool-calling-loop.md 3 (`ToolAgent.chat`: `let rounds = 0; while (rounds < maxRounds)`): each
/// user message gets `maxRounds` model rounds; the calls of the last round still run and are
/// recorded, then the fixed fallback is recorded as the answer. The next message starts counting
/// again.
#[tokio::test]
async fn the_last_rounds_calls_run_before_the_fallback_and_each_message_counts_its_own_rounds() {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("query_stock", "查询库存", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_args, _ctx| {
                let counted = Arc::clone(&counted);
                async move {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok(ToolResult::text("12"))
                }
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "query_stock", r#"{"sku":"SKU001"}"#)]),
        calls(&[("c2", "query_stock", r#"{"sku":"SKU002"}"#)]),
        calls(&[("c3", "query_stock", r#"{"sku":"SKU003"}"#)]),
        answer("SKU003 有 12 件"),
    ]));
    let store = Arc::new(MemStore::new());
    let config = arkagent::agent::AgentConfig { max_rounds: 2, ..Default::default() };
    let agent = AgentBuilder::new(model.clone(), store.clone()).tools(tools).config(config).build();
    let out = agent.run("s", "SKU001 还有货吗", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), arkagent::state::RunStatus::MaxRounds);
    assert_eq!(model.requests().len(), 2, "maxRounds model rounds");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2, "the second round's call ran too");
    let state = arkagent::state::StateStore::load(store.as_ref(), "s").await.unwrap().unwrap();
    let roles: Vec<&str> = state.messages.iter().map(|m| m.role()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool", "assistant"]);
    assert_eq!(
        state.messages.last().unwrap(),
        &arkagent::ChatMessage::assistant_text(arkagent::agent::MAX_ROUNDS_FALLBACK)
    );

    // A new message: two rounds again (one call, then the answer), not ended at once.
    let out = agent.run("s", "SKU003 呢", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), arkagent::state::RunStatus::Completed);
    assert_eq!(model.requests().len(), 4);
}

/// arkagent-tool-system.md 6.2 ("取消错误不回填"), as `ToolExecutor` documents it: the run's
/// cancel is what ends a run without writing the call back (tests/agent_runtime.rs,
/// `cancellation_mid_tool_reaches_the_executor_and_ends_the_run_without_results`). A `cancelled`
/// error an executor returns on its own while the run goes on is its domain error: the model
/// reads it, and the run goes on.
#[tokio::test]
async fn an_executors_own_cancelled_error_while_the_run_goes_on_is_read_by_the_model() {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("pick_photo", "asks the user for a photo", json!({"type": "object"})),
            Arc::new(FnExecutor(|_args, _ctx| async move {
                Err(arkagent::AgentError::of(arkagent::codes::TOOL_CANCELLED, "the user closed the picker"))
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("c1", "pick_photo", "{}")]), answer("好的，不选照片")]));
    let agent = AgentBuilder::new(model.clone(), Arc::new(MemStore::new())).tools(tools).build();
    let out = agent.run("s", "换头像", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), arkagent::state::RunStatus::Completed);
    let results = tool_messages(&model.requests()[1].messages);
    assert_eq!(
        results,
        vec![("c1".to_string(), "error [tool_cancelled]: the user closed the picker".to_string(), true)]
    );
}

/// The mark is written into the saved history, not added when a request is built: a failed
/// result reads the same to the model before and after the session is loaded again by another
/// agent (the same messages, so the same request bytes and the provider's prefix cache holds).
#[tokio::test]
async fn a_marked_failure_reads_the_same_after_the_session_is_loaded_again() {
    let tools = || {
        let mut tools = ToolRegistry::new();
        tools
            .register(
                ToolDefinition::new("read_record", "reads a record", json!({"type": "object"})),
                Arc::new(FnExecutor(|_args, _ctx| async move {
                    Ok(ToolResult {
                        contents: vec![
                            arkagent::tool::ContentPart::text("errno 2"),
                            arkagent::tool::ContentPart::json(json!({"id": "r9"})),
                        ],
                        is_error: true,
                        stop: false,
                        metadata: None,
                    })
                })),
            )
            .unwrap();
        tools
    };
    let store = Arc::new(MemStore::new());
    let first =
        Arc::new(Script::new(vec![calls(&[("c1", "read_record", r#"{"id":"r9"}"#)]), answer("没有")]));
    AgentBuilder::new(first.clone(), store.clone())
        .tools(tools())
        .build()
        .run("s", "r9?", &EventLog::new(), &CancellationSignal::new())
        .await
        .unwrap();
    let before = first.requests()[1].messages.clone();
    assert_eq!(
        tool_messages(&before),
        vec![("c1".to_string(), "error: errno 2\n{\"id\":\"r9\"}".to_string(), true)]
    );
    let second = Arc::new(Script::new(vec![answer("好")]));
    AgentBuilder::new(second.clone(), store)
        .tools(tools())
        .build()
        .run("s", "再看看", &EventLog::new(), &CancellationSignal::new())
        .await
        .unwrap();
    let after = &second.requests()[0].messages;
    assert_eq!(&after[..before.len()], &before[..]);
}
