//! `Agent::approve_all` / `deny_all`: every pending item decided in one durable commit, with the
//! outcome of deciding each in turn (on a mirror of a worker's batch too).

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome};
use arkagent::approval::{ApprovalDecision, PendingApprovalBatch};
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::{StoreHooks, Wrapped};

/// `wipe` (dangerous) and `look` (safe), each run counted.
fn registry(ran: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, risk) in [("wipe", RiskLevel::Dangerous), ("look", RiskLevel::Safe)] {
        let ran = Arc::clone(ran);
        r.register(
            ToolDefinition::new(name, "t", json!({"type":"object"})).with_risk(risk),
            Arc::new(FnExecutor(move |_a, _ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                async move { Ok(ToolResult::text("done")) }
            })),
        )
        .unwrap();
    }
    r
}

/// The commits a store saw (their events).
#[derive(Default)]
struct Commits(Mutex<Vec<Vec<StateEvent>>>);

#[async_trait::async_trait]
impl StoreHooks for Arc<Commits> {
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), AgentError> {
        self.0.lock().unwrap().push(events.to_vec());
        inner.commit(state, events).await
    }
}

/// An agent whose model asks for three dangerous calls and a safe one, then answers `ok`.
fn three_wipes(store: Arc<dyn StateStore>, ran: &Arc<AtomicUsize>) -> Agent {
    let model = Script::new(vec![
        calls(&[("a", "wipe", "{}"), ("b", "look", "{}"), ("c", "wipe", r#"{"x":1}"#), ("d", "wipe", "{}")]),
        answer("ok"),
    ]);
    AgentBuilder::new(Arc::new(model), store).tools(registry(ran)).build()
}

async fn suspend(agent: &Agent) -> PendingApprovalBatch {
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    batch
}

/// The decisions of a batch, in item order, without their times.
fn decisions(batch: &PendingApprovalBatch) -> Vec<(String, ApprovalDecision, Option<String>)> {
    batch.items.iter().map(|i| (i.tool_call.id.clone(), i.decision, i.deny_reason.clone())).collect()
}

/// What one session ends as after a resume: its batch's decisions, the tool results and the runs.
async fn settle(
    agent: &Agent,
    decided: &PendingApprovalBatch,
    ran: &AtomicUsize,
) -> impl PartialEq + std::fmt::Debug {
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let state = agent.state("s").await.unwrap().unwrap();
    (decisions(decided), out.status(), tool_messages(&state.messages), ran.load(Ordering::SeqCst))
}

#[tokio::test]
async fn approve_all_is_one_commit_with_the_outcome_of_approving_each_in_turn() {
    // One at a time.
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = three_wipes(Arc::new(MemStore::new()), &ran);
    let batch = suspend(&agent).await;
    let mut decided = batch.clone();
    for item in &batch.items {
        decided = agent.approve("s", &item.approval_id).await.unwrap();
    }
    let one_by_one = settle(&agent, &decided, &ran).await;

    let ran = Arc::new(AtomicUsize::new(0));
    let commits = Arc::new(Commits::default());
    let store = Arc::new(Wrapped::new(Arc::new(MemStore::new()), Arc::clone(&commits)));
    let agent = three_wipes(store, &ran);
    let batch = suspend(&agent).await;
    // The first item decided alone beforehand: approve_all decides the items still pending.
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    commits.0.lock().unwrap().clear();
    let decided = agent.approve_all("s").await.unwrap();
    let recorded = std::mem::take(&mut *commits.0.lock().unwrap());
    assert_eq!(recorded.len(), 1, "one commit: {recorded:?}");
    let ids: Vec<&str> = recorded[0]
        .iter()
        .map(|e| match e {
            StateEvent::ApprovalDecided { approval_id, decision: ApprovalDecision::Approved, .. } => {
                approval_id.as_str()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, [batch.items[1].approval_id.as_str(), batch.items[2].approval_id.as_str()]);
    assert!(decided.is_fully_decided());
    assert_eq!(settle(&agent, &decided, &ran).await, one_by_one);
    assert_eq!(ran.load(Ordering::SeqCst), 4, "the three wipes and the look ran");
}

#[tokio::test]
async fn deny_all_denies_each_pending_item_with_the_reason_and_nothing_runs() {
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = three_wipes(Arc::new(MemStore::new()), &ran);
    let batch = suspend(&agent).await;
    for item in &batch.items {
        agent.deny("s", &item.approval_id, "no").await.unwrap();
    }
    let one_by_one = agent.state("s").await.unwrap().unwrap().pending_approval.unwrap();
    let one_by_one = settle(&agent, &one_by_one, &ran).await;

    let ran = Arc::new(AtomicUsize::new(0));
    let agent = three_wipes(Arc::new(MemStore::new()), &ran);
    suspend(&agent).await;
    let decided = agent.deny_all("s", "no").await.unwrap();
    assert!(decided.items.iter().all(|i| i.decision == ApprovalDecision::Denied));
    assert_eq!(settle(&agent, &decided, &ran).await, one_by_one);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn approve_all_at_its_edges() {
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = three_wipes(Arc::new(MemStore::new()), &ran);
    assert_eq!(agent.approve_all("s").await.unwrap_err().code, codes::SESSION_NOT_FOUND);
    assert_eq!(agent.deny_all("s", "no").await.unwrap_err().code, codes::SESSION_NOT_FOUND);
    suspend(&agent).await;
    let long = "x".repeat(agent.config().max_result_bytes + 1);
    assert_eq!(agent.deny_all("s", &long).await.unwrap_err().code, codes::ARGUMENT_INVALID);
    let pending = agent.state("s").await.unwrap().unwrap().pending_approval.unwrap();
    assert!(pending.pending_items().count() == 3, "nothing written");
    let decided = agent.approve_all("s").await.unwrap();
    // Nothing left pending: the batch as it stands, nothing written.
    assert_eq!(agent.deny_all("s", "late").await.unwrap(), decided);
    assert!(decided.items.iter().all(|i| i.decision == ApprovalDecision::Approved));
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(agent.approve_all("s").await.unwrap_err().code, codes::NO_PENDING_APPROVAL);
}

#[tokio::test]
async fn approve_all_on_a_mirror_decides_the_workers_batch_as_approve_does() {
    for all in [false, true] {
        let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
        let cleared = Arc::new(AtomicUsize::new(0));
        let agent = delegation::clear_agent(Arc::clone(&store), &cleared);
        let (batch, worker) = delegation::suspend_in_worker(&agent).await;
        let id = batch.items[0].approval_id.clone();
        let decided = if all {
            agent.approve_all("parent").await.unwrap()
        } else {
            agent.approve("parent", &id).await.unwrap()
        };
        assert_eq!(decided.item(&id).unwrap().decision, ApprovalDecision::Approved, "all: {all}");
        assert_eq!(delegation::decision_on(&*store, &worker, &id).await, ApprovalDecision::Approved);
        let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "all: {all}");
        assert_eq!(cleared.load(Ordering::SeqCst), 1, "all: {all}");
    }
}

#[tokio::test]
async fn approve_all_on_a_worker_session_reaches_the_parents_mirror() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::clear_agent(Arc::clone(&store), &cleared);
    let (batch, worker) = delegation::suspend_in_worker(&agent).await;
    let id = batch.items[0].approval_id.clone();
    agent.deny_all(&worker, "not now").await.unwrap();
    assert_eq!(delegation::decision_on(&*store, "parent", &id).await, ApprovalDecision::Denied);
    assert_eq!(agent.approve("parent", &id).await.unwrap_err().code, codes::APPROVAL_ALREADY_DECIDED);
}
