//! A delegation reads its worker's state once per time its call runs: the worker's session is
//! loaded by the run (or resume) that continues it and by nothing else of the delegation, and a
//! decision on the parent loads it once more to decide its batch.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{AgentBuilder, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::state::RunStatus;
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolResult};
use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::{Forward, StoreHooks, Wrapped};

/// Counts the loads of each session (`load` and `load_unrepaired` alike) of a memory store.
#[derive(Default)]
struct Counting {
    loads: Mutex<HashMap<String, usize>>,
}

impl Counting {
    fn store() -> Wrapped<Counting> {
        Wrapped::new(Arc::new(MemStore::new()), Counting::default())
    }
}

impl Wrapped<Counting> {
    fn loads_of(&self, session: &str) -> usize {
        self.hooks.loads.lock().unwrap().get(session).copied().unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl StoreHooks for Counting {
    // Not a load: `exists` is answered without reading the state (a stat for the `FileStore`).
    const FORWARD: Forward = Forward { load_unrepaired: true, exists: true, lease: false };

    fn on_load(&self, session_id: &str) {
        *self.loads.lock().unwrap().entry(session_id.to_string()).or_default() += 1;
    }
}

#[tokio::test]
async fn a_new_worker_with_inherited_metadata_that_a_stop_ended_is_loaded_once() {
    let mut tools = arkagent::ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("submit", "submit", serde_json::json!({"type":"object"})),
            Arc::new(FnExecutor(|_a, ctx: arkagent::ToolContext| async move {
                let user = ctx.state.metadata.get("userId").cloned().unwrap_or_default();
                Ok(ToolResult::text(format!("submitted for {user}")).with_stop(true))
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"submit"}"#)]),
        calls(&[("w1", "submit", "{}")]),
        answer("parent answer"),
    ]));
    let store = Arc::new(Counting::store());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(tools).build());
    agent.enable_delegation(None).unwrap();
    agent.set_metadata("parent", "userId", serde_json::json!("u-1")).await.unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = store.inner.load("parent").await.unwrap().unwrap();
    // The worker inherited the metadata and answered with the result its stop ended on.
    assert_eq!(
        tool_messages(&parent.messages),
        [("p1".to_string(), "submitted for \"u-1\"".to_string(), false)]
    );
    let worker = &parent.workers[0];
    assert_eq!(store.inner.load(worker).await.unwrap().unwrap().metadata["userId"], "u-1");
    assert_eq!(store.loads_of(worker), 1, "loaded by its run alone");
}

#[tokio::test]
async fn a_worker_frozen_decided_and_continued_is_loaded_once_per_step() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker: 已清空"),
        answer("parent answer"),
    ]));
    let store = Arc::new(Counting::store());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(delegation::tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();
    assert_eq!(store.loads_of(&worker), 1, "its run; the parent's mirror comes from the outcome");
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    assert_eq!(store.loads_of(&worker), 2, "the decision reaches its batch");
    let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(store.loads_of(&worker), 3, "its resume");
    let parent = store.inner.load("parent").await.unwrap().unwrap();
    assert_eq!(tool_messages(&parent.messages), [("p1".to_string(), "worker: 已清空".to_string(), false)]);
}
