//! A worker found completed when its delegating call runs again (the parent's process died after
//! the worker ended, before the parent saved the call's result) answers the parent exactly as the
//! live run did: a worker whose last answer was cut off or filtered is an error naming the finish
//! reason, not the tool results it ended on; one a tool's stop ended still answers with them.

#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, AgentBuilder, EventLog, DELEGATE_TASK};
use arkagent::provider::ModelResponse;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::DiesAtBatchEnd;

/// `query_stock` (answers `<sku>: 12 件`) and `submit` (answers `submitted` and stops the run).
fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("query_stock", "查询库存", serde_json::json!({"type":"object"})),
        Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("SKU001: 12 件")) })),
    )
    .unwrap();
    r.register(
        ToolDefinition::new("submit", "submit", serde_json::json!({"type":"object"})),
        Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("submitted").with_stop(true)) })),
    )
    .unwrap();
    r
}

fn agent(model: Arc<Script>, store: Arc<dyn StateStore>) -> Arc<Agent> {
    let agent = Arc::new(AgentBuilder::new(model, store).tools(tools()).build());
    agent.enable_delegation(None).unwrap();
    agent
}

/// An answer with neither text nor calls, ending for `reason`.
fn empty(reason: Option<&str>) -> ModelResponse {
    let mut cut = answer("");
    cut.content = None;
    cut.finish_reason = reason.map(str::to_string);
    cut
}

/// The worker's answers after the parent's delegation: a tool call, then `last`.
fn script(tool: &str, last: Option<ModelResponse>) -> Vec<ModelResponse> {
    let mut answers =
        vec![calls(&[("p1", DELEGATE_TASK, r#"{"task":"查库存"}"#)]), calls(&[("w1", tool, "{}")])];
    answers.extend(last);
    answers
}

/// The parent's result for the delegation: (content, is_error).
async fn delegation_result(store: &MemStore) -> (String, bool) {
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert_eq!(results.len(), 1, "{results:?}");
    (results[0].1.clone(), results[0].2)
}

/// The delegation's result in a live run, and when the parent died at its batch's end and a new
/// process resumed it (the delegating call runs again and finds the worker completed).
async fn live_and_again(tool: &str, last: Option<ModelResponse>) -> ((String, bool), (String, bool)) {
    let live_store = Arc::new(MemStore::new());
    let mut answers = script(tool, last.clone());
    answers.push(answer("parent answer"));
    let live = agent(Arc::new(Script::new(answers)), live_store.clone());
    let out = live.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);

    let mem = Arc::new(MemStore::new());
    let dying = agent(
        Arc::new(Script::new(script(tool, last))),
        Arc::new(DiesAtBatchEnd::wrap(mem.clone(), "parent")),
    );
    let died = dying.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(died.unwrap_err().code, "state_io");
    let again = agent(Arc::new(Script::new(vec![answer("parent answer")])), mem.clone());
    let out = again.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    (delegation_result(&live_store).await, delegation_result(&mem).await)
}

#[tokio::test]
async fn a_cut_off_or_filtered_worker_answers_the_same_after_a_crash() {
    for reason in [Some("length"), Some("content_filter"), None] {
        let (live, again) = live_and_again("query_stock", Some(empty(reason))).await;
        let named = reason.unwrap_or("stop");
        assert!(live.1 && live.0.contains(named), "{reason:?}: live {live:?}");
        assert_eq!(again, live, "{reason:?}: the re-entry answers as the live run did");
    }
}

#[tokio::test]
async fn a_worker_its_tool_stopped_still_answers_with_its_results_after_a_crash() {
    let (live, again) = live_and_again("submit", None).await;
    assert_eq!(live, ("submitted".to_string(), false));
    assert_eq!(again, live);
}

#[tokio::test]
async fn a_worker_state_saved_before_finish_reasons_were_kept_still_loads_and_answers_with_its_results() {
    let mem = Arc::new(MemStore::new());
    let dying = agent(
        Arc::new(Script::new(script("query_stock", Some(empty(Some("length")))))),
        Arc::new(DiesAtBatchEnd::wrap(mem.clone(), "parent")),
    );
    let died = dying.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(died.unwrap_err().code, "state_io");
    // The worker's state as an older version wrote it: no `finish_reason`.
    let worker = mem.load("parent").await.unwrap().unwrap().workers[0].clone();
    let mut json = serde_json::to_value(mem.load(&worker).await.unwrap().unwrap()).unwrap();
    assert_eq!(json["finish_reason"], "length", "saved");
    json.as_object_mut().unwrap().remove("finish_reason");
    let old = arkagent::state::codec::decode_state_json(json.to_string().as_bytes()).unwrap();
    assert_eq!((old.status, old.finish_reason.as_deref()), (RunStatus::Completed, None));
    mem.save_snapshot(&old).await.unwrap();

    let again = agent(Arc::new(Script::new(vec![answer("parent answer")])), mem.clone());
    let out = again.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    // Without a saved reason, what the worker ended on stands (what those versions answered).
    assert_eq!(delegation_result(&mem).await, ("SKU001: 12 件".to_string(), false));
}

#[test]
fn a_status_change_without_a_finish_reason_is_written_as_before_the_field_existed() {
    use arkagent::state::{AgentState, StateEvent};
    let plain = serde_json::to_string(&StateEvent::StatusChanged {
        status: RunStatus::Completed,
        finish_reason: None,
        error: None,
    })
    .unwrap();
    assert_eq!(plain, r#"{"event":"status_changed","status":"completed"}"#);
    let cut = StateEvent::StatusChanged {
        status: RunStatus::Completed,
        finish_reason: Some("length".into()),
        error: None,
    };
    let text = serde_json::to_string(&cut).unwrap();
    assert_eq!(text, r#"{"event":"status_changed","status":"completed","finish_reason":"length"}"#);
    assert_eq!(serde_json::from_str::<StateEvent>(&text).unwrap(), cut);
    let mut state = AgentState::new("s");
    assert!(serde_json::to_value(&state).unwrap().get("finish_reason").is_none());
    state.apply(&cut);
    assert_eq!(state.finish_reason.as_deref(), Some("length"));
    // A new run starts without the last one's reason.
    state.apply(&StateEvent::RunStarted { run_id: "r2".into(), delegation: None });
    assert_eq!(state.finish_reason, None);
}
