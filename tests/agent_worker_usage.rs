//! A worker's token usage counts in its parent's: the usage of the worker a delegation ran is
//! added to the parent session's once, when the delegating call finishes (in the outcome, the
//! `RunFinished` event and the saved state), through a freeze and a crash, at every depth; a
//! dismissal that leaves the worker as it stands adds what the worker used until then; a
//! delegating call that never finishes (its run cancelled, or killed and followed by a new run)
//! adds its worker's usage when the next run answers it interrupted. `Agent::usage_so_far` of a
//! session frozen on its workers tells what they used until they froze.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::message::Usage;
use arkagent::provider::ModelResponse;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolResult};
use delegation::agent;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use support::{answer, calls, MemStore, Script};
use wrapped::DiesAtBatchEnd;

/// `response` reporting `prompt` + `completion` tokens.
fn costing(mut response: ModelResponse, prompt: u64, completion: u64) -> ModelResponse {
    response.usage = Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
    });
    response
}

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
}

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

fn finished_usage(out: &RunOutcome) -> Usage {
    match out {
        RunOutcome::Finished { usage, .. } => *usage,
        RunOutcome::Suspended { .. } => panic!("{out:?}"),
    }
}

fn run_finished_usage(events: &EventLog) -> Usage {
    events
        .events()
        .iter()
        .rev()
        .find_map(|e| match e {
            AgentEvent::RunFinished { usage, .. } => Some(*usage),
            _ => None,
        })
        .expect("a RunFinished event")
}

#[tokio::test]
async fn a_workers_usage_is_added_to_its_parents_at_every_depth() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        costing(calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]), 100, 10), // parent
        costing(calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]), 200, 20), // worker
        costing(calls(&[("q1", "query_stock", r#"{"sku":"A"}"#)]), 300, 30),  // worker's worker
        costing(answer("A: 12 件"), 400, 40),                                 // worker's worker
        costing(answer("下级说 12 件"), 500, 50),                             // worker
        costing(answer("12 件"), 600, 60),                                    // parent
    ]));
    let store = Arc::new(MemStore::new());
    let agent = agent(model, store.clone(), &cleared, 2);
    let events = EventLog::new();
    let out = agent.run("parent", "q", &events, &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let total = usage(2100, 210);
    assert_eq!(finished_usage(&out), total, "the parent's own rounds and both workers'");
    assert_eq!(run_finished_usage(&events), total);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(parent.usage, total, "saved");
    let middle = store.load(&parent.workers[0]).await.unwrap().unwrap();
    assert_eq!(middle.usage, usage(1400, 140), "the worker's own and its worker's");
    let inner = store.load(&middle.workers[0]).await.unwrap().unwrap();
    assert_eq!(inner.usage, usage(700, 70), "the worker's worker's own");
}

#[tokio::test]
async fn a_worker_frozen_and_continued_is_counted_once() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        costing(calls(&[("d1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]), 100, 10), // parent
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20),            // worker: frozen
        costing(answer("worker: 已清空"), 300, 30),                                // worker, resumed
        costing(answer("都清好了"), 400, 40),                                      // parent
    ]));
    let store = Arc::new(MemStore::new());
    let agent = agent(model, store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    // While the delegating call has not finished, the parent holds its own usage only.
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(100, 10));
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(finished_usage(&out), usage(1000, 100));
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(1000, 100));
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
}

/// A parent (100/10 tokens) delegates to a worker (200/20) that completes; the process dies as
/// the parent's batch ends (the delegating call's end is not saved). Returns what was saved.
async fn died_at_the_delegations_end(cleared: &Arc<AtomicUsize>) -> Arc<MemStore> {
    let model = Arc::new(Script::new(vec![
        costing(calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]), 100, 10), // parent
        costing(answer("worker answer"), 200, 20),                            // worker
    ]));
    let mem = Arc::new(MemStore::new());
    let dying = Arc::new(DiesAtBatchEnd::wrap(mem.clone(), "parent"));
    let died = agent(model, dying, cleared, 1).run("parent", "q", &EventLog::new(), &none()).await;
    assert_eq!(died.unwrap_err().code, "state_io");
    mem
}

#[tokio::test]
async fn a_worker_found_completed_after_a_crash_is_counted_once() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let mem = died_at_the_delegations_end(&cleared).await;

    // A new process: the delegating call runs again and finds the worker completed.
    let model = Arc::new(Script::new(vec![costing(answer("parent answer"), 400, 40)]));
    let agent2 = agent(model, mem.clone(), &cleared, 1);
    let out = agent2.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(finished_usage(&out), usage(700, 70));
    assert_eq!(mem.load("parent").await.unwrap().unwrap().usage, usage(700, 70));
}

#[tokio::test]
async fn a_dismissal_adds_what_the_worker_used_until_it_froze() {
    let (agent, store, cleared) = frozen_two_levels_down().await;
    let out = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(finished_usage(&out), usage(600, 60), "the parent's round and both workers'");
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(600, 60));
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_suspended_parent_tells_what_its_frozen_workers_used_so_far() {
    let (agent, store, cleared) = frozen_two_levels_down().await;
    // Not counted in the parent's own usage until the delegating call finishes or is dismissed.
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(100, 10));
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(usage(600, 60)));
    assert_eq!(agent.usage_so_far("nobody").await.unwrap(), None);
    let out = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(finished_usage(&out), usage(600, 60), "the same once the run ends");
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(usage(600, 60)));
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "the frozen call never ran");
}

/// A parent suspended on its worker's worker's dangerous call (each level's round costs 100,
/// 200, 300 prompt tokens), with the count of calls of that tool.
async fn frozen_two_levels_down() -> (Arc<Agent>, Arc<MemStore>, Arc<AtomicUsize>) {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        costing(calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]), 100, 10), // parent
        costing(calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]), 200, 20), // worker
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30),       // worker's worker: frozen
    ]));
    let store = Arc::new(MemStore::new());
    let agent = agent(model, store.clone(), &cleared, 2);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }), "{out:?}");
    (agent, store, cleared)
}

/// An agent whose `stop_all` tool cancels the returned signal (the one its runs are given).
fn cancelling_agent(
    model: Arc<Script>,
    store: Arc<MemStore>,
    depth: u32,
) -> (Arc<Agent>, CancellationSignal) {
    let cleared = Arc::new(AtomicUsize::new(0));
    let mut tools = delegation::tools(&cleared);
    let cancel = CancellationSignal::new();
    let signal = Arc::new(Mutex::new(cancel.clone()));
    tools
        .register(
            ToolDefinition::new("stop_all", "cancels the run", json!({"type":"object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                let signal = signal.clone();
                async move {
                    signal.lock().unwrap().cancel("user");
                    // Long enough for the parent's run to see the cancel first.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Ok(ToolResult::text("done"))
                }
            })),
        )
        .unwrap();
    let agent = Arc::new(
        AgentBuilder::new(model, store)
            .tools(tools)
            .config(AgentConfig { max_delegation_depth: depth, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    (agent, cancel)
}

#[tokio::test]
async fn a_cancelled_delegation_keeps_the_workers_usage() {
    let model = Arc::new(Script::new(vec![
        costing(calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]), 100, 10), // parent
        costing(calls(&[("s1", "stop_all", "{}")]), 200, 20),                 // worker
        costing(answer("next"), 400, 40),                                     // parent's next run
        costing(answer("third"), 0, 0),                                       // and the one after
    ]));
    let store = Arc::new(MemStore::new());
    let (agent, cancel) = cancelling_agent(model, store.clone(), 1);
    let out = agent.run("parent", "q", &EventLog::new(), &cancel).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    let out = agent.run("parent", "again", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(finished_usage(&out), usage(700, 70), "the worker's round counts in the parent's");
    let saved = store.load("parent").await.unwrap().unwrap();
    assert_eq!(saved.usage, usage(700, 70));
    let worker = store.load(&saved.workers[0]).await.unwrap().unwrap();
    assert_eq!(worker.usage, usage(200, 20), "the worker saved its round");
    // A later run does not count it again.
    let out = agent.run("parent", "third", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(finished_usage(&out), usage(700, 70));
}

#[tokio::test]
async fn a_cancelled_nested_delegation_keeps_every_workers_usage_once() {
    let model = Arc::new(Script::new(vec![
        costing(calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]), 100, 10), // parent
        costing(calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]), 200, 20), // worker
        costing(calls(&[("s1", "stop_all", "{}")]), 300, 30),                 // worker's worker
        costing(answer("next"), 400, 40),                                     // parent's next run
    ]));
    let store = Arc::new(MemStore::new());
    let (agent, cancel) = cancelling_agent(model, store.clone(), 2);
    let out = agent.run("parent", "q", &EventLog::new(), &cancel).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    let out = agent.run("parent", "again", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(finished_usage(&out), usage(1000, 100), "the parent's rounds and both workers'");
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(1000, 100));
}

#[tokio::test]
async fn a_crashed_delegation_followed_by_a_new_run_keeps_the_workers_usage() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let mem = died_at_the_delegations_end(&cleared).await;
    // A new process, and a new message rather than a resume: the call is answered interrupted.
    let agent2 = agent(Arc::new(Script::new(vec![costing(answer("p"), 400, 40)])), mem.clone(), &cleared, 1);
    let out = agent2.run("parent", "new", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(mem.load("parent").await.unwrap().unwrap().usage, usage(700, 70));
}
