//! A parent frozen on a worker's call (its batch mirrors the worker's), opened by an agent that
//! does not delegate: an app update that turned delegation off over the same store. That agent
//! cannot continue the worker (it has no `delegate_task`), so its `resume` and `dismiss` of the
//! parent are refused (`invalid_state`, nothing written) instead of answering the delegating call
//! and leaving the worker awaiting approval for good. Decisions are still recorded (on the parent
//! and on the worker), and an agent with delegation enabled resumes the session as it stands.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::approval::ApprovalDecision;
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::{codes, CancellationSignal};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

/// Version 1 of the app (delegation on) ran `parent` until its worker froze on
/// `clear_baking_cache`: the worker's session and the pending item's approval id.
async fn frozen_by_v1(store: &Arc<MemStore>, cleared: &Arc<AtomicUsize>) -> (String, String) {
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ]));
    let v1 = delegation::agent(model, store.clone(), cleared, 1);
    let out = v1.run("parent", "清缓存", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    (batch.worker_session.clone().unwrap(), batch.items[0].approval_id.clone())
}

/// Version 2 without delegation: the same tools, `delegate_task` not enabled.
fn without_delegation(store: &Arc<MemStore>, cleared: &Arc<AtomicUsize>) -> Agent {
    AgentBuilder::new(Arc::new(Script::new(vec![answer("v2 asked its model")])), store.clone())
        .tools(delegation::tools(cleared))
        .build()
}

async fn both(store: &Arc<MemStore>, worker: &str) -> (AgentState, AgentState) {
    (store.load("parent").await.unwrap().unwrap(), store.load(worker).await.unwrap().unwrap())
}

fn assert_refused(err: arkagent::AgentError) {
    assert_eq!(err.code, codes::INVALID_STATE, "{err}");
    assert!(err.message.contains("enable delegation to continue this session"), "{}", err.message);
}

#[tokio::test]
async fn an_agent_without_delegation_refuses_to_settle_a_parent_frozen_on_a_worker() {
    let store = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let (worker, id) = frozen_by_v1(&store, &cleared).await;
    let v2 = without_delegation(&store, &cleared);

    // A decision is recorded, on the parent's mirror and on the worker's batch.
    v2.approve("parent", &id).await.unwrap();
    let before = both(&store, &worker).await;
    assert_eq!(before.0.pending_approval.as_ref().unwrap().items[0].decision, ApprovalDecision::Approved);
    assert_eq!(before.1.pending_approval.as_ref().unwrap().items[0].decision, ApprovalDecision::Approved);

    // Settled here, the delegating call would be answered without the worker (before: completed,
    // `d1` answered `tool_interrupted`, the approval dropped and the worker awaiting for good).
    assert_refused(v2.resume("parent", &EventLog::new(), &none()).await.unwrap_err());
    assert_refused(v2.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap_err());
    assert_eq!(both(&store, &worker).await, before, "nothing written");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    assert!(v2.state("parent").await.unwrap().unwrap().pending_approval.is_some());

    // With delegation on again, the resume continues the worker: the approved call runs once.
    let model = Arc::new(Script::new(vec![answer("worker: 已清空"), answer("parent: 好了")]));
    let v3 = delegation::agent(model, store.clone(), &cleared, 1);
    let out = v3.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    let (parent, worker) = both(&store, &worker).await;
    assert_eq!(tool_messages(&parent.messages), [("d1".into(), "worker: 已清空".into(), false)]);
    assert_eq!(worker.status, RunStatus::Completed);
}

#[tokio::test]
async fn a_dismissal_without_delegation_writes_no_denial_and_one_with_it_settles_the_worker() {
    let store = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let (worker, _) = frozen_by_v1(&store, &cleared).await;
    let v2 = without_delegation(&store, &cleared);
    let before = both(&store, &worker).await;
    assert_refused(v2.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap_err());
    assert_eq!(both(&store, &worker).await, before, "no denial written, here or in the worker");

    // The app's denial is recorded, and its resume with delegation on settles both sessions.
    v2.deny_all("parent", "no").await.unwrap();
    assert_refused(v2.resume("parent", &EventLog::new(), &none()).await.unwrap_err());
    let model = Arc::new(Script::new(vec![answer("worker: 不清了"), answer("parent: 好")]));
    let v3 = delegation::agent(model, store.clone(), &cleared, 1);
    let out = v3.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    let (parent, worker) = both(&store, &worker).await;
    assert_eq!(tool_messages(&parent.messages), [("d1".into(), "worker: 不清了".into(), false)]);
    assert!(parent.pending_approval.is_none());
    assert!(worker.pending_approval.is_none(), "the worker is not left awaiting approval");
    assert_ne!(worker.status, RunStatus::AwaitingApproval);
}

/// What a process killed while the worker's approved call ran left: the parent settling its
/// mirror (`running`, the delegating call `d1` started), the worker `running` with `w1` started.
async fn killed_while_the_worker_ran(store: &Arc<MemStore>, cleared: &Arc<AtomicUsize>) -> String {
    let (worker, id) = frozen_by_v1(store, cleared).await;
    let v1 = delegation::agent(Arc::new(Script::new(Vec::new())), store.clone(), cleared, 1);
    v1.approve("parent", &id).await.unwrap();
    let running = StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None };
    let started = StateEvent::ToolStarted {
        call_id: "w1".into(),
        name: "clear_baking_cache".into(),
        worker_session: None,
    };
    for (session, events) in [("parent", vec![running.clone()]), (worker.as_str(), vec![running, started])] {
        let mut state = store.load_unrepaired(session).await.unwrap().unwrap();
        for e in &events {
            state.apply(e);
        }
        store.commit(&state, &events).await.unwrap();
    }
    worker
}

#[tokio::test]
async fn a_new_message_on_a_parent_killed_mid_delegation_ends_its_worker() {
    // The new message moves on: the delegating call is answered `tool_interrupted`, so nobody
    // reads the worker's answer. Before, the worker stayed `running`, listed interrupted for good:
    // without delegation it could be neither resumed nor deleted but with its parent, and with
    // delegation an app resuming interrupted sessions ran its model for nobody.
    for delegating in [false, true] {
        let store = Arc::new(MemStore::new());
        let cleared = Arc::new(AtomicUsize::new(0));
        let worker = killed_while_the_worker_ran(&store, &cleared).await;
        let v2 = if delegating {
            delegation::agent(Arc::new(Script::new(vec![answer("v2 answered")])), store.clone(), &cleared, 1)
        } else {
            Arc::new(without_delegation(&store, &cleared))
        };
        let interrupted = |all: Vec<arkagent::agent::SessionSummary>| {
            all.into_iter().filter(|s| s.interrupted).map(|s| s.session_id).collect::<Vec<_>>()
        };
        assert_eq!(
            interrupted(v2.list_all_sessions().await.unwrap()),
            ["parent".to_string(), worker.clone()]
        );

        let out = v2.run("parent", "new question", &EventLog::new(), &none()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
        let (parent, ended) = both(&store, &worker).await;
        let results = tool_messages(&parent.messages);
        assert!(results[0].2 && results[0].1.contains("tool_interrupted"), "{results:?}");
        assert_eq!(ended.status, RunStatus::Cancelled, "delegating: {delegating}");
        assert!(ended.pending_approval.is_none());
        assert!(interrupted(v2.list_all_sessions().await.unwrap()).is_empty(), "delegating: {delegating}");
        assert_eq!(
            v2.resume(&worker, &EventLog::new(), &none()).await.unwrap_err().code,
            codes::INVALID_STATE
        );
        assert_eq!(cleared.load(Ordering::SeqCst), 0, "the worker's call never ran again");

        // Deleted with its parent, as every worker.
        assert!(v2.delete_session("parent").await.unwrap());
        assert!(store.load(&worker).await.unwrap().is_none());
    }
}
