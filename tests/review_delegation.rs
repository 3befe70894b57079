//! Review of sub-agent delegation and approvals: races between the app's calls on a parent and
//! on its worker sessions, dismissals, multi-item batches, other processes' leases.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::approval::ApprovalDecision;
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::CancellationSignal;
use delegation::{agent, decision_on, frozen_one_deep, frozen_two_deep, OneDeep, TwoDeep};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::{Forward, StoreHooks, Wrapped};

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

/// Fails the test instead of hanging it.
async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f).await.unwrap_or_else(|_| panic!("{what} hung"))
}

/// `approve(worker)`, `resume(worker)`, `resume(parent)`, each reserved in that order where the
/// app asked for it (as a binding does), none awaited. Awaited one after the other, the parent
/// completes with the worker's answer; reserved, the parent's resume must see the same.
#[tokio::test]
async fn approve_then_resume_worker_then_resume_parent_reserved_in_order() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, model, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let approve = agent.reserve_turn(&worker).unwrap().within(agent.approve(&worker, &id));
    let (wlog, plog) = (EventLog::new(), EventLog::new());
    let (c1, c2) = (none(), none());
    let resume_worker = agent.reserve_turn(&worker).unwrap().within(agent.resume(&worker, &wlog, &c1));
    let resume_parent = agent.reserve_turn("parent").unwrap().within(agent.resume("parent", &plog, &c2));
    let (parent, approved, worker_out) =
        bounded("the three calls", async { tokio::join!(resume_parent, approve, resume_worker) }).await;
    approved.unwrap();
    assert_eq!(worker_out.unwrap().status(), RunStatus::Completed);
    let parent = parent.unwrap_or_else(|e| panic!("the parent's resume, reserved last: {e:?}"));
    let RunOutcome::Finished { status, final_text, .. } = parent else { panic!("{parent:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    assert_eq!(model.remaining(), 0);
}

/// `dismiss(worker)` then `resume(parent)`, reserved in that order, neither awaited. Awaited, the
/// dismissal's denial reaches the parent and its resume completes.
#[tokio::test]
async fn dismiss_worker_then_resume_parent_reserved_in_order() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, .. } = frozen_one_deep(&store, Some(true)).await;
    let (wlog, plog) = (EventLog::new(), EventLog::new());
    let (c1, c2) = (none(), none());
    let dismiss = agent.reserve_turn(&worker).unwrap().within(agent.dismiss(&worker, "算了", &wlog, &c1));
    let resume_parent = agent.reserve_turn("parent").unwrap().within(agent.resume("parent", &plog, &c2));
    let (parent, dismissed) = bounded("the two calls", async { tokio::join!(resume_parent, dismiss) }).await;
    assert_eq!(dismissed.unwrap().status(), RunStatus::Completed);
    let parent =
        parent.unwrap_or_else(|e| panic!("the parent's resume, reserved after the dismissal: {e:?}"));
    assert_eq!(parent.status(), RunStatus::Completed, "{parent:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
}

/// The same two calls awaited one after the other: the reference behaviour.
#[tokio::test]
async fn dismiss_worker_then_resume_parent_awaited() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    agent.dismiss(&worker, "算了", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Denied);
    let parent = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(parent.status(), RunStatus::Completed, "{parent:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    let state = store.load("parent").await.unwrap().unwrap();
    assert_eq!(tool_messages(&state.messages).len(), 1);
}

/// The same three calls awaited one after the other: the reference behaviour.
#[tokio::test]
async fn approve_then_resume_worker_then_resume_parent_awaited() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, model, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    agent.approve(&worker, &id).await.unwrap();
    agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    assert_eq!(model.remaining(), 0);
}

/// `approve(worker)`, `resume(worker)` and `deny(parent)`, reserved in that order, none awaited,
/// all in one process. Awaited in order, the denial on the parent is `approval_already_decided`
/// (the worker's approval reached the parent). Reserved, the parent must not end up recording a
/// denial of the call that ran.
#[tokio::test]
async fn a_denial_on_the_parent_reserved_after_approve_and_resume_of_the_worker() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let wlog = EventLog::new();
    let c1 = none();
    let approve = agent.reserve_turn(&worker).unwrap().within(agent.approve(&worker, &id));
    let resume_worker = agent.reserve_turn(&worker).unwrap().within(agent.resume(&worker, &wlog, &c1));
    let deny = agent.reserve_turn("parent").unwrap().within(agent.deny("parent", &id, "不要清"));
    let (denied, approved, worker_out) =
        bounded("the three calls", async { tokio::join!(deny, approve, resume_worker) }).await;
    approved.unwrap();
    assert_eq!(worker_out.unwrap().status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1, "the worker ran the approved call");
    let parent_decision = decision_on(store.as_ref(), "parent", &id).await;
    assert!(
        parent_decision != ApprovalDecision::Denied,
        "the parent records a denial of a call that ran (deny returned {:?})",
        denied.as_ref().map(|b| b.items[0].decision)
    );
    assert_eq!(denied.unwrap_err().code, "approval_already_decided");
}

/// The same with `dismiss(parent)` reserved last.
#[tokio::test]
async fn a_dismissal_of_the_parent_reserved_after_approve_and_resume_of_the_worker() {
    let recorded = recording();
    let store: Arc<dyn StateStore> = recorded.clone();
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let (wlog, plog) = (EventLog::new(), EventLog::new());
    let (c1, c2) = (none(), none());
    let approve = agent.reserve_turn(&worker).unwrap().within(agent.approve(&worker, &id));
    let resume_worker = agent.reserve_turn(&worker).unwrap().within(agent.resume(&worker, &wlog, &c1));
    let dismiss = agent.reserve_turn("parent").unwrap().within(agent.dismiss("parent", "算了", &plog, &c2));
    let (dismissed, approved, worker_out) =
        bounded("the three calls", async { tokio::join!(dismiss, approve, resume_worker) }).await;
    approved.unwrap();
    assert_eq!(worker_out.unwrap().status(), RunStatus::Completed);
    assert_eq!(dismissed.unwrap().status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(tool_messages(&parent.messages), [("p1".to_string(), "worker: 已清空".to_string(), false)]);
    // The journal of the parent must not hold a denial of the call that ran.
    let denied_recorded = denial_committed(&recorded, "parent", &id);
    assert!(!denied_recorded, "the parent's journal records a denial of w1, which ran");
}

/// Records every event committed, per session.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(String, StateEvent)>>);

#[async_trait::async_trait]
impl StoreHooks for Recorder {
    const FORWARD: Forward = Forward { load_unrepaired: true, exists: true, lease: true };
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), arkagent::AgentError> {
        inner.commit(state, events).await?;
        let mut log = self.0.lock().unwrap();
        log.extend(events.iter().map(|e| (state.session_id.clone(), e.clone())));
        Ok(())
    }
}

/// A memory store that records its commits.
fn recording() -> Arc<Wrapped<Recorder>> {
    Arc::new(Wrapped::new(Arc::new(MemStore::new()), Recorder::default()))
}

/// Whether a denial of `id` was committed on `session`.
fn denial_committed(store: &Wrapped<Recorder>, session: &str, id: &str) -> bool {
    store.hooks.0.lock().unwrap().iter().any(|(s, e)| {
        s == session
            && matches!(e, StateEvent::ApprovalDecided { approval_id, decision: ApprovalDecision::Denied, .. }
                if approval_id == id)
    })
}

/// The parent's batch is [`p1` delegate, `c2` dangerous]. `c2` is approved on the parent's own
/// batch; the resume runs `p1` first, whose worker freezes on `w1`: the mirror keeps `c2` to run.
/// Returns the agent, the model, the runs counter, the worker, the mirror's approval id.
async fn frozen_with_a_dangerous_call_after_the_delegation(
    store: &Arc<dyn StateStore>,
) -> (Arc<Agent>, Arc<Script>, Arc<AtomicUsize>, String, String) {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#), ("c2", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker answer"),
        answer("parent answer"),
    ]));
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "清缓存", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert!(batch.worker_session.is_none(), "the parent's own batch freezes on c2 first");
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().expect("the mirror of the worker's batch");
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "p1 runs before c2");
    let id = batch.items[0].approval_id.clone();
    (agent, model, cleared, worker, id)
}

/// Reference: dismissing that mirror answers `c2` (not run yet) `tool_not_run`.
#[tokio::test]
async fn dismissing_the_mirror_does_not_run_the_calls_not_run_yet() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let (agent, _model, cleared, _worker, _id) =
        frozen_with_a_dangerous_call_after_the_delegation(&store).await;
    let out = agent.dismiss("parent", "算了", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert!(results.iter().all(|r| r.2 && r.1.contains("算了")), "{results:?}");
}

/// The worker's batch approved on the worker session while another process held the parent,
/// and the worker resumed directly (it moved on). The app then dismisses the parent: the
/// delegating call reads the worker's answer, and the dismissal must still not run `c2`, the
/// parent's own dangerous call that had not run (`dismiss`: "the delegating call and the calls
/// not run yet are answered `tool_not_run`"; moved on: "the delegating call runs again ... and
/// the run still completes without this session's model").
#[tokio::test]
async fn dismissing_a_mirror_whose_worker_moved_on_does_not_run_the_calls_not_run_yet() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let (agent, model, cleared, worker, id) = frozen_with_a_dangerous_call_after_the_delegation(&store).await;
    let elsewhere = store.lease("parent").await.unwrap();
    agent.approve(&worker, &id).await.unwrap();
    drop(elsewhere);
    let out = agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1, "w1 ran in the worker");
    let asked = model.requests().len();

    let out = agent.dismiss("parent", "算了", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(model.requests().len(), asked, "no model asked");
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert_eq!(results[0], ("p1".to_string(), "worker answer".to_string(), false));
    assert_eq!(
        cleared.load(Ordering::SeqCst),
        1,
        "the dismissal ran the parent's dangerous c2: results {results:?}"
    );
}

/// A worker's worker's decision that missed the levels above (the middle session held by
/// another process); then an agent over the same store that does not delegate resumes the
/// middle session. It is refused (`invalid_state`) "before anything is written".
#[tokio::test]
async fn a_resume_refused_for_an_agent_that_does_not_delegate_writes_nothing() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let TwoDeep { agent, model, cleared, middle, inner, id } =
        frozen_two_deep(&store, &["inner done", "middle done", "parent done"]).await;
    let elsewhere = store.lease(&middle).await.unwrap();
    agent.approve(&inner, &id).await.unwrap();
    drop(elsewhere);
    assert_eq!(decision_on(store.as_ref(), &middle, &id).await, ApprovalDecision::Pending);

    let plain = arkagent::agent::AgentBuilder::new(model.clone(), store.clone())
        .tools(delegation::tools(&cleared))
        .build();
    let before = store.load(&middle).await.unwrap().unwrap();
    let err = plain.resume(&middle, &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(err.code, "invalid_state", "{err:?}");
    let after = store.load(&middle).await.unwrap().unwrap();
    assert_eq!(
        after.pending_approval.as_ref().unwrap().item(&id).unwrap().decision,
        before.pending_approval.as_ref().unwrap().item(&id).unwrap().decision,
        "the refused resume wrote the decision on the middle session"
    );
}

/// `deny(parent)` then `approve(worker)` on the same item, reserved in that order, neither
/// awaited. The order of calls on two sessions is not kept (the approval may take the worker
/// first), but one decision wins, the other is `approval_already_decided`, and both levels show
/// the winner.
#[tokio::test]
async fn deny_parent_and_approve_worker_reserved_together_agree() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let deny = agent.reserve_turn("parent").unwrap().within(agent.deny("parent", &id, "不要清"));
    let approve = agent.reserve_turn(&worker).unwrap().within(agent.approve(&worker, &id));
    let (approved, denied) = bounded("the two calls", async { tokio::join!(approve, deny) }).await;
    let winner = match (&approved, &denied) {
        (Ok(_), Err(e)) | (Err(e), Ok(_)) if e.code == "approval_already_decided" => {
            if approved.is_ok() {
                ApprovalDecision::Approved
            } else {
                ApprovalDecision::Denied
            }
        }
        other => panic!("one decision must win: {other:?}"),
    };
    for session in [worker.as_str(), "parent"] {
        assert_eq!(decision_on(store.as_ref(), session, &id).await, winner, "{session}");
    }
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "a decision runs nothing");
}

/// Approve on the worker, deny on the parent, reserved in that order: the approval wins, the
/// denial is `approval_already_decided`, nothing records a denial.
#[tokio::test]
async fn approve_worker_then_deny_parent_reserved_in_order() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let approve = agent.reserve_turn(&worker).unwrap().within(agent.approve(&worker, &id));
    let deny = agent.reserve_turn("parent").unwrap().within(agent.deny("parent", &id, "不要清"));
    let (denied, approved) = bounded("the two calls", async { tokio::join!(deny, approve) }).await;
    approved.unwrap();
    assert_eq!(denied.unwrap_err().code, "approval_already_decided");
    assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Approved);
}

#[tokio::test]
async fn dismissing_the_middle_of_three_levels() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let TwoDeep { agent, model, cleared, middle, inner, id } =
        frozen_two_deep(&store, &["parent done"]).await;
    let out = agent.dismiss(&middle, "算了", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    // The inner worker, whose answer the middle no longer reads, completed with the denial.
    let inner = store.load(&inner).await.unwrap().unwrap();
    assert_eq!((inner.status, inner.pending_approval.is_none()), (RunStatus::Completed, true));
    assert!(tool_messages(&inner.messages).iter().any(|r| r.2 && r.1.contains("算了")));
    assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Denied);
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent done")));
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    assert_eq!(model.remaining(), 0);
}

/// The inner decision missed the middle (held elsewhere); the app then denies on the parent:
/// refused, the inner approval stands, nothing written above.
#[tokio::test]
async fn a_different_decision_on_the_parent_after_a_missed_inner_approval() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let TwoDeep { agent, middle, inner, id, cleared, .. } =
        frozen_two_deep(&store, &["inner done", "middle done", "parent done"]).await;
    let elsewhere = store.lease(&middle).await.unwrap();
    agent.approve(&inner, &id).await.unwrap();
    drop(elsewhere);
    let err = agent.deny("parent", &id, "不要清").await.unwrap_err();
    assert_eq!(err.code, "approval_already_decided");
    assert_eq!(decision_on(store.as_ref(), &middle, &id).await, ApprovalDecision::Pending);
    assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Pending);
    // Dismissing the parent takes the approval from below and runs it.
    let out = agent.dismiss("parent", "算了", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
}

/// A worker batch with two dangerous calls, decided differently on the worker while another
/// process held the parent: the parent's resume takes both (the denial with its reason), and
/// nothing runs.
#[tokio::test]
async fn two_items_decided_differently_on_the_worker_missing_the_parent() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}"), ("w2", "clear_baking_cache", r#"{"x":1}"#)]),
        answer("worker answer"),
        answer("parent answer"),
    ]));
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items.len(), 2);
    let worker = batch.worker_session.clone().unwrap();
    let (a, b) = (batch.items[0].approval_id.clone(), batch.items[1].approval_id.clone());
    let elsewhere = store.lease("parent").await.unwrap();
    agent.approve(&worker, &a).await.unwrap();
    agent.deny(&worker, &b, "第二个不要").await.unwrap();
    drop(elsewhere);
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "a denied item runs none of the batch");
    let w = store.load(&worker).await.unwrap().unwrap();
    let results = tool_messages(&w.messages);
    assert!(results.iter().any(|r| r.1.contains("第二个不要")), "{results:?}");
    assert_eq!(model.remaining(), 0);
}

/// Two delegating calls in one batch, both workers freeze. The parent mirrors one and offers
/// the other's item in the same batch; both are approved through the parent, and one resume runs
/// each dangerous call once.
#[tokio::test]
async fn two_delegations_in_one_batch_both_freeze() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"a"}"#), ("p2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker answer"),
        answer("worker answer"),
        answer("parent answer"),
    ]));
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let workers: Vec<&str> = batch.items.iter().filter_map(|i| batch.item_worker(&i.approval_id)).collect();
    assert_eq!(workers.len(), 2);
    assert_ne!(workers[0], workers[1]);
    for item in &batch.items {
        agent.approve("parent", &item.approval_id).await.unwrap();
    }
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
}

/// Two delegating calls; the worker the parent does not mirror is dismissed directly, then the
/// mirrored one approved through the parent. The dismissed worker's call never runs.
#[tokio::test]
async fn two_delegations_the_unmirrored_worker_dismissed_directly() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"a"}"#), ("p2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker answer"),
        answer("parent answer"),
    ]));
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let mirrored = batch.worker_session.clone().unwrap();
    let parent = store.load("parent").await.unwrap().unwrap();
    let other = parent.workers.iter().find(|w| **w != mirrored).cloned().expect("the other worker");
    let other_state = store.load(&other).await.unwrap().unwrap();
    assert_eq!(other_state.status, RunStatus::AwaitingApproval);
    let out = agent.dismiss(&other, "不要", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = bounded("resume", agent.resume("parent", &EventLog::new(), &none())).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    assert_eq!(model.remaining(), 0);
}

/// Fails the first commit of an `ApprovalDecided` on `parent` (a crash between the worker's
/// commit and the parent's).
#[derive(Default)]
struct FailParentDecisionOnce(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl StoreHooks for FailParentDecisionOnce {
    const FORWARD: Forward = Forward { load_unrepaired: true, exists: true, lease: true };
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), arkagent::AgentError> {
        let decided = events.iter().any(|e| matches!(e, StateEvent::ApprovalDecided { .. }));
        if state.session_id == "parent" && decided && !self.0.swap(true, Ordering::SeqCst) {
            return Err(arkagent::AgentError::of(arkagent::codes::STATE_IO, "the process died"));
        }
        inner.commit(state, events).await
    }
}

#[tokio::test]
async fn a_crash_between_the_workers_and_the_parents_decision_commits() {
    for retry_with_deny in [false, true] {
        let store: Arc<dyn StateStore> =
            Arc::new(Wrapped::new(Arc::new(MemStore::new()), FailParentDecisionOnce::default()));
        let OneDeep { agent, model, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
        let err = agent.approve("parent", &id).await.unwrap_err();
        assert_eq!(err.code, "state_io");
        assert_eq!(decision_on(store.as_ref(), &worker, &id).await, ApprovalDecision::Approved);
        assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Pending);
        if retry_with_deny {
            let err = agent.deny("parent", &id, "不要").await.unwrap_err();
            assert_eq!(err.code, "approval_already_decided");
        }
        let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
        assert_eq!(cleared.load(Ordering::SeqCst), 1);
        assert_eq!(model.remaining(), 0);
    }
}

/// The worker's decision missed the parent; another process holds the worker when the parent
/// resumes: a structured error, nothing run; once released the resume completes.
#[tokio::test]
async fn the_parents_resume_while_another_process_holds_the_worker() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let elsewhere = store.lease("parent").await.unwrap();
    agent.approve(&worker, &id).await.unwrap();
    drop(elsewhere);
    let elsewhere = store.lease(&worker).await.unwrap();
    let err = bounded("resume", agent.resume("parent", &EventLog::new(), &none())).await.unwrap_err();
    assert_eq!(err.code, "session_busy", "{err:?}");
    let err = bounded("dismiss", agent.dismiss("parent", "x", &EventLog::new(), &none())).await.unwrap_err();
    assert_eq!(err.code, "session_busy", "{err:?}");
    drop(elsewhere);
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
}

/// The worker session removed from the store (a deletion cut short): the parent's resume,
/// dismissal and decisions are `session_not_found`, nothing run.
#[tokio::test]
async fn the_worker_session_gone() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    store.delete(&worker).await.unwrap();
    let err = agent.resume("parent", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(err.code, "session_not_found");
    let err = agent.dismiss("parent", "x", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(err.code, "session_not_found");
    let err = agent.approve("parent", &id).await.unwrap_err();
    assert_eq!(err.code, "session_not_found");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Pending);
}

/// Three levels, the inner worker session gone: the parent's resume takes nothing, answers a
/// structured error; nothing runs.
#[tokio::test]
async fn the_inner_worker_of_three_levels_gone() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let TwoDeep { agent, inner, id, cleared, .. } = frozen_two_deep(&store, &["x", "y", "z"]).await;
    agent.approve(&inner, &id).await.unwrap();
    store.delete(&inner).await.unwrap();
    let out = bounded("resume", agent.resume("parent", &EventLog::new(), &none())).await;
    match out {
        Ok(o) => assert_ne!(o.status(), RunStatus::AwaitingApproval, "{o:?}"),
        Err(e) => assert!(!e.code.is_empty()),
    }
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
}

/// As a binding runs them: `approve(decided)` and then a resume of each of `resumed`, each
/// reserved on the caller's thread in that order, then spawned on the runtime. The approval's
/// result and each resume's outcome, none of them hung.
async fn approve_then_resume_spawned(
    agent: &Arc<Agent>,
    decided: &str,
    id: &str,
    resumed: [&str; 2],
) -> (Result<(), arkagent::AgentError>, Vec<Result<RunOutcome, arkagent::AgentError>>) {
    let reserved = agent.reserve_turn(decided).unwrap();
    let (a, d, i) = (agent.clone(), decided.to_string(), id.to_string());
    let approve = tokio::spawn(async move { reserved.within(a.approve(&d, &i)).await.map(|_| ()) });
    let resumes: Vec<_> = resumed
        .iter()
        .map(|session| {
            let reserved = agent.reserve_turn(session).unwrap();
            let (a, s) = (agent.clone(), session.to_string());
            tokio::spawn(async move {
                reserved.within(a.resume(&s, &EventLog::new(), &CancellationSignal::new())).await
            })
        })
        .collect();
    let approved = bounded("approve", approve).await.unwrap();
    let mut outcomes = Vec::new();
    for resume in resumes {
        outcomes.push(bounded("resume", resume).await.unwrap());
    }
    (approved, outcomes)
}

/// As a binding runs them: `approve(worker)`, `resume(worker)`, `resume(parent)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_resume_worker_resume_parent_spawned_like_a_binding() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let OneDeep { agent, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
    let (approved, outcomes) = approve_then_resume_spawned(&agent, &worker, &id, [&worker, "parent"]).await;
    approved.unwrap();
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    let [worker_out, parent] = <[_; 2]>::try_from(outcomes).unwrap();
    worker_out.unwrap();
    let parent = parent.unwrap_or_else(|e| panic!("the parent's resume, reserved last: {e:?}"));
    assert_eq!(parent.status(), RunStatus::Completed, "{parent:?}");
}

/// Three levels: `approve(inner)`, `resume(middle)`, `resume(parent)` reserved in that order; no
/// call may hang, and the approved call runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_levels_reserved_calls_do_not_hang() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let TwoDeep { agent, cleared, middle, inner, id, .. } =
        frozen_two_deep(&store, &["inner done", "middle done", "parent done"]).await;
    let (approved, outcomes) = approve_then_resume_spawned(&agent, &inner, &id, [&middle, "parent"]).await;
    approved.unwrap();
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    let [middle_out, parent] = <[_; 2]>::try_from(outcomes).unwrap();
    assert_eq!(middle_out.unwrap().status(), RunStatus::Completed);
    let parent = parent.unwrap_or_else(|e| panic!("the parent's resume, reserved last: {e:?}"));
    let RunOutcome::Finished { status, final_text, .. } = parent else { panic!("{parent:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent done")));
}
