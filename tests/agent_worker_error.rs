//! A worker that ended failed or aborted, found so when its delegating call runs again (the
//! parent's process died after the worker ended, before the parent saved the call's result),
//! answers the parent with the error that ended it (its code and message), as the live run did,
//! not only with its status: the worker's state saves the error with its ending status
//! (`AgentState::run_error`, `StatusChanged.error`; optional, so states saved before it load as
//! before and answer with the status).

#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, AgentBuilder, EventLog, DELEGATE_TASK};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::message::ToolCall;
use arkagent::provider::ScriptStep;
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{AgentError, CancellationSignal, ErrorLayer, ToolDefinition, ToolRegistry, ToolResult};
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::DiesAtBatchEnd;

/// `explode`: its call is aborted by [`AbortExplode`] before it runs.
fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("explode", "never runs", serde_json::json!({"type":"object"})),
        Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("ran")) })),
    )
    .unwrap();
    r
}

/// Aborts the run at any call of `explode`.
struct AbortExplode;

#[async_trait::async_trait]
impl AgentHook for AbortExplode {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if call.name == "explode" {
            BeforeToolCall::Abort("explode is forbidden here".into())
        } else {
            BeforeToolCall::Proceed(None)
        }
    }
}

fn agent(steps: Vec<ScriptStep>, store: Arc<dyn StateStore>) -> Arc<Agent> {
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(Script::from_steps(steps)), store)
            .tools(tools())
            .hook(Arc::new(AbortExplode))
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    agent
}

fn provider_down() -> AgentError {
    AgentError::new(ErrorLayer::Provider, "provider_unavailable", "the provider answered 503 three times")
}

/// The parent delegates; the worker's steps follow.
fn script(worker: Vec<ScriptStep>) -> Vec<ScriptStep> {
    let mut steps = vec![ScriptStep::from(calls(&[("p1", DELEGATE_TASK, r#"{"task":"do it"}"#)]))];
    steps.extend(worker);
    steps
}

/// The parent's result for the delegation: (content, is_error).
async fn delegation_result(store: &MemStore) -> (String, bool) {
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert_eq!(results.len(), 1, "{results:?}");
    (results[0].1.clone(), results[0].2)
}

/// The delegation's result in a live run, and when the parent died at its batch's end and a new
/// process resumed it (the delegating call runs again and finds the worker ended), with the
/// worker's saved state.
async fn live_and_again(
    worker: impl Fn() -> Vec<ScriptStep>,
) -> ((String, bool), (String, bool), AgentState, Arc<MemStore>) {
    let live_store = Arc::new(MemStore::new());
    let mut steps = script(worker());
    steps.push(answer("parent answer").into());
    let live = agent(steps, live_store.clone());
    let out = live.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);

    let mem = Arc::new(MemStore::new());
    let dying = agent(script(worker()), Arc::new(DiesAtBatchEnd::wrap(mem.clone(), "parent")));
    let died = dying.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(died.unwrap_err().code, "state_io");
    let worker_id = mem.load("parent").await.unwrap().unwrap().workers[0].clone();
    let worker_state = mem.load(&worker_id).await.unwrap().unwrap();
    let again = agent(vec![answer("parent answer").into()], mem.clone());
    let out = again.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    (delegation_result(&live_store).await, delegation_result(&mem).await, worker_state, mem)
}

#[tokio::test]
async fn a_failed_worker_answers_with_its_error_after_a_crash() {
    let (live, again, worker, _) = live_and_again(|| vec![ScriptStep::Fail(provider_down())]).await;
    assert!(
        live.1 && live.0.contains("provider_unavailable") && live.0.contains("503 three times"),
        "{live:?}"
    );
    assert_eq!(worker.status, RunStatus::Failed);
    assert_eq!(worker.run_error.as_ref().map(|e| e.code.as_ref()), Some("provider_unavailable"));
    assert_eq!(again, live, "the re-entry answers with the worker's error, as the live run did");
}

#[tokio::test]
async fn an_aborted_worker_answers_with_its_error_after_a_crash() {
    let (live, again, worker, _) = live_and_again(|| vec![calls(&[("w1", "explode", "{}")]).into()]).await;
    assert!(live.1 && live.0.contains("hook_aborted") && live.0.contains("explode is forbidden"), "{live:?}");
    assert_eq!(worker.status, RunStatus::Aborted);
    assert_eq!(again, live);
}

#[tokio::test]
async fn a_worker_state_saved_before_run_errors_were_kept_still_loads_and_answers_with_its_status() {
    let mem = Arc::new(MemStore::new());
    let dying = agent(
        script(vec![ScriptStep::Fail(provider_down())]),
        Arc::new(DiesAtBatchEnd::wrap(mem.clone(), "parent")),
    );
    let died = dying.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(died.unwrap_err().code, "state_io");
    // The worker's state as an older version wrote it: no `run_error`.
    let worker = mem.load("parent").await.unwrap().unwrap().workers[0].clone();
    let mut json = serde_json::to_value(mem.load(&worker).await.unwrap().unwrap()).unwrap();
    assert_eq!(json["run_error"]["code"], "provider_unavailable", "saved");
    json.as_object_mut().unwrap().remove("run_error");
    let old = arkagent::state::codec::decode_state_json(json.to_string().as_bytes()).unwrap();
    assert_eq!((old.status, old.run_error.as_ref()), (RunStatus::Failed, None));
    mem.save_snapshot(&old).await.unwrap();

    let again = agent(vec![answer("parent answer").into()], mem.clone());
    let out = again.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let (content, is_error) = delegation_result(&mem).await;
    assert!(is_error && content.contains("with status failed"), "what those versions answered: {content}");
}

#[test]
fn a_status_change_without_an_error_is_written_as_before_the_field_existed() {
    let plain = serde_json::to_string(&StateEvent::StatusChanged {
        status: RunStatus::Completed,
        finish_reason: None,
        error: None,
    })
    .unwrap();
    assert_eq!(plain, r#"{"event":"status_changed","status":"completed"}"#);
    let failed = StateEvent::StatusChanged {
        status: RunStatus::Failed,
        finish_reason: None,
        error: Some(provider_down()),
    };
    let text = serde_json::to_string(&failed).unwrap();
    assert_eq!(
        text,
        r#"{"event":"status_changed","status":"failed","error":{"layer":"provider","code":"provider_unavailable","message":"the provider answered 503 three times"}}"#
    );
    assert_eq!(serde_json::from_str::<StateEvent>(&text).unwrap(), failed);
    // A record an older version wrote reads with no error.
    let old: StateEvent = serde_json::from_str(r#"{"event":"status_changed","status":"failed"}"#).unwrap();
    assert_eq!(
        old,
        StateEvent::StatusChanged { status: RunStatus::Failed, finish_reason: None, error: None }
    );
    let mut state = AgentState::new("s");
    assert!(serde_json::to_value(&state).unwrap().get("run_error").is_none());
    state.apply(&failed);
    assert_eq!(state.run_error, Some(provider_down()));
    // A new run starts without the last one's error.
    state.apply(&StateEvent::RunStarted { run_id: "r2".into(), delegation: None });
    assert_eq!(state.run_error, None);
}

#[tokio::test]
async fn the_error_that_ended_a_run_is_saved_through_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(arkagent::state::FileStore::new(dir.path()));
    let a = agent(vec![ScriptStep::Fail(provider_down())], store);
    let out = a.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Failed);
    // Read back by another store (snapshot and journal decoded).
    let state = arkagent::state::FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!((state.status, state.run_error), (RunStatus::Failed, Some(provider_down())));
}
