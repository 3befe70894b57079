//! A parent frozen on its worker's batch when the app acts on that batch on the worker session
//! itself (decides it there, resumes or dismisses the worker directly). The decision reaches the
//! parent's batch that mirrors it (checked on both stores), at every level of a nested
//! delegation, so the parent shows it and a different decision there is refused; the parent's
//! resume then reads the worker's answer.
//! Where it could not reach the parent (held by another process meanwhile), the worker has moved
//! on (completed, or frozen on a later batch) while the parent still awaits, and the parent can
//! still be settled: a decision on it is recorded on its mirror alone, and its resume runs the
//! delegating call again, which reads the worker's answer (or freezes on the worker's new batch);
//! a dismissal does the same without the parent's model. A parent resumed while the app's own
//! resume of its worker runs waits for it.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome, WorkerFactory, DELEGATE_TASK};
use arkagent::approval::{ApprovalDecision, PendingApprovalBatch};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use delegation::{agent, decision_on, frozen_one_deep, frozen_two_deep, OneDeep, TwoDeep};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};
use tokio::sync::Notify;

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

/// Runs `parent` until it freezes on its worker's batch, then approves that batch's first item on
/// the worker session while another process holds `parent` (so the decision does not reach the
/// parent's batch), and resumes the worker directly, as an app may. Returns the parent's batch,
/// the worker session and the worker's outcome.
async fn worker_settled_directly(
    agent: &Agent,
    store: &MemStore,
) -> (PendingApprovalBatch, String, RunOutcome) {
    let out = agent.run("parent", "清缓存", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();
    let elsewhere = store.lease("parent").await.unwrap();
    agent.approve(&worker, &batch.items[0].approval_id).await.unwrap();
    drop(elsewhere);
    assert_eq!(decision_on(store, "parent", &batch.items[0].approval_id).await, ApprovalDecision::Pending);
    let worker_out = agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    (batch, worker, worker_out)
}

#[tokio::test]
async fn a_parent_the_workers_decision_missed_can_still_be_settled() {
    for approve in [true, false] {
        let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
        let OneDeep { agent, model, cleared, worker, id, worker_answer } =
            frozen_one_deep(&store, Some(approve)).await;
        // The app decides on the worker session, while another process holds the parent (the
        // decision cannot reach its batch), and resumes the worker itself.
        let elsewhere = store.lease("parent").await.unwrap();
        if approve {
            agent.approve(&worker, &id).await.unwrap();
        } else {
            agent.deny(&worker, &id, "不要清").await.unwrap();
        }
        drop(elsewhere);
        let out = agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some(worker_answer)));

        // The parent still awaits: resuming it asks for a decision, and says why.
        let early = agent.resume("parent", &EventLog::new(), &none()).await.unwrap_err();
        assert_eq!(early.code, "approval_pending");
        assert!(early.message.contains("moved on"), "{}", early.message);
        // A decision on it settles it.
        let decided = if approve {
            agent.approve("parent", &id).await
        } else {
            agent.deny("parent", &id, "不要清").await
        };
        let decided = decided.unwrap_or_else(|e| panic!("approve={approve}: {e}"));
        assert!(decided.is_fully_decided());
        let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
        let parent = store.load("parent").await.unwrap().unwrap();
        assert_eq!(tool_messages(&parent.messages), [("p1".to_string(), worker_answer.to_string(), false)]);
        assert!(parent.pending_approval.is_none());
        assert_eq!(cleared.load(Ordering::SeqCst), usize::from(approve), "the worker's decision stood");
        assert_eq!(model.remaining(), 0, "the worker's model was not asked again");
    }
}

#[tokio::test]
async fn dismissing_such_a_parent_gives_it_the_worker_answer_without_its_model() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#), ("p2", "query_stock", r#"{"sku":"A"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker: 已清空"),
        answer("for the next message"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    worker_settled_directly(&agent, &store).await;
    let asked = model.requests().len();

    let out = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text), (RunStatus::Completed, None));
    assert_eq!(model.requests().len(), asked, "no model was asked");
    let parent = store.load("parent").await.unwrap().unwrap();
    // The worker ran its approved call: the delegation is answered with what it said, not as
    // "not run".
    assert_eq!(
        tool_messages(&parent.messages),
        [
            ("p1".to_string(), "worker: 已清空".to_string(), false),
            ("p2".to_string(), "A: 12 件".to_string(), false)
        ]
    );
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_worker_that_moved_on_to_a_new_batch_freezes_the_parent_on_it() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清两次"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w2", "clear_baking_cache", "{}")]),
        answer("worker: 清了两次"),
        answer("parent answer"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let (batch, worker, out) = worker_settled_directly(&agent, &store).await;
    let first = batch.items[0].approval_id.clone();
    let RunOutcome::Suspended { batch: second } = out else { panic!("{out:?}") };
    assert_eq!(second.items[0].tool_call.id, "w2");

    agent.approve("parent", &first).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("the parent mirrors the new batch: {out:?}") };
    assert_eq!(batch.worker_session.as_deref(), Some(worker.as_str()));
    assert_eq!(batch.items[0].approval_id, second.items[0].approval_id);
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
    assert_eq!(model.remaining(), 0);
}

/// A parent that delegates to a worker that delegates again (depth 2), run until the inner
/// worker's dangerous call freezes every level.
#[tokio::test]
async fn a_workers_worker_the_decision_missed_leaves_every_level_settleable() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let TwoDeep { agent, model, cleared, middle, inner, id } =
        frozen_two_deep(&store, &["inner done", "middle done", "parent done"]).await;
    // The middle session is held elsewhere: the decision stops below it.
    let elsewhere = store.lease(&middle).await.unwrap();
    agent.approve(&inner, &id).await.unwrap();
    drop(elsewhere);
    for above in [middle.as_str(), "parent"] {
        assert_eq!(decision_on(store.as_ref(), above, &id).await, ApprovalDecision::Pending, "{above}");
    }
    let out = agent.resume(&inner, &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);

    agent.approve("parent", &id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent done")));
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(tool_messages(&parent.messages), [("d1".to_string(), "middle done".to_string(), false)]);
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn dismissing_a_parent_whose_worker_froze_again_returns_the_new_batch() {
    // As for any dismissal that meets a new freeze on its way: that batch is returned suspended.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清两次"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w2", "clear_baking_cache", "{}")]),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let (_, _, out) = worker_settled_directly(&agent, &store).await;
    let RunOutcome::Suspended { batch: second } = out else { panic!("the worker freezes again") };
    let out = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items[0].approval_id, second.items[0].approval_id);
    assert_eq!(batch.dismissed, None, "the dismissal is not carried into the new batch");
    // Dismissing that one ends both without a model: the worker's denial is its own now.
    let out = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert!(results[0].2 && results[0].1.contains("moved on"), "{results:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 1, "the first call, approved on the worker");
    assert_eq!(model.remaining(), 0);
}

/// Gives the worker `slow_clear` (dangerous): it signals `.0` when it starts and ends on `.1`.
struct Slow(Arc<Notify>, Arc<Notify>);

impl WorkerFactory for Slow {
    fn prepare_tools(&self, tools: &mut ToolRegistry) {
        let (started, release) = (self.0.clone(), self.1.clone());
        tools
            .register(
                ToolDefinition::new("slow_clear", "危险", json!({"type":"object"}))
                    .with_risk(RiskLevel::Dangerous),
                Arc::new(FnExecutor(move |_a, _c| {
                    let (started, release) = (started.clone(), release.clone());
                    async move {
                        started.notify_one();
                        release.notified().await;
                        Ok(ToolResult::text("cleared"))
                    }
                })),
            )
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_waits_for_the_workers_direct_resume() {
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("w1", "slow_clear", "{}")]),
        answer("worker done"),
        answer("parent done"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model, store.clone())
            .config(AgentConfig { max_delegation_depth: 1, ..AgentConfig::default() })
            .build(),
    );
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    agent.enable_delegation(Some(Arc::new(Slow(started.clone(), release.clone())))).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let worker = batch.worker_session.clone().unwrap();
    let a = agent.clone();
    let direct =
        tokio::spawn(async move { a.resume(&worker, &EventLog::new(), &CancellationSignal::new()).await });
    started.notified().await;
    let a = agent.clone();
    let parent =
        tokio::spawn(async move { a.resume("parent", &EventLog::new(), &CancellationSignal::new()).await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    release.notify_one();
    let direct = direct.await.unwrap().unwrap();
    assert!(
        matches!(&direct, RunOutcome::Finished { final_text: Some(t), .. } if t == "worker done"),
        "{direct:?}"
    );
    // The delegating call waited for the app's resume of its worker (it was answered
    // `session_busy`, and the parent's model told the delegation failed although it ran).
    let parent = parent.await.unwrap().unwrap();
    assert!(
        matches!(&parent, RunOutcome::Finished { final_text: Some(t), .. } if t == "parent done"),
        "{parent:?}"
    );
    let state = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results, vec![("d1".to_string(), "worker done".to_string(), false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_waits_for_a_worker_another_agent_object_resumes() {
    // Two Agent objects over one state directory (two windows of an app): B resumes the worker
    // while A resumes the parent. A's delegating call meets the worker's lease held by B: it waits
    // for B's resume to end and reads its answer, as it waits for a resume of its own agent.
    // Before, `session_busy` became the delegating call's result and the parent completed on it.
    let dir = tempfile::tempdir().unwrap();
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let open = |script: Vec<arkagent::provider::ModelResponse>| {
        let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
        let agent = Arc::new(
            AgentBuilder::new(Arc::new(Script::new(script)), store)
                .config(AgentConfig { max_delegation_depth: 1, ..AgentConfig::default() })
                .build(),
        );
        agent.enable_delegation(Some(Arc::new(Slow(started.clone(), release.clone())))).unwrap();
        agent
    };
    let a = open(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("w1", "slow_clear", "{}")]),
        answer("parent done"),
    ]);
    let b = open(vec![answer("worker done")]);
    let out = a.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    a.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let worker = batch.worker_session.clone().unwrap();
    let direct = {
        let b = b.clone();
        tokio::spawn(async move { b.resume(&worker, &EventLog::new(), &CancellationSignal::new()).await })
    };
    started.notified().await;
    let parent = {
        let a = a.clone();
        tokio::spawn(async move { a.resume("parent", &EventLog::new(), &CancellationSignal::new()).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    release.notify_one();
    let direct = direct.await.unwrap().unwrap();
    assert!(
        matches!(&direct, RunOutcome::Finished { final_text: Some(t), .. } if t == "worker done"),
        "{direct:?}"
    );
    let parent = parent.await.unwrap().unwrap();
    assert!(
        matches!(&parent, RunOutcome::Finished { final_text: Some(t), .. } if t == "parent done"),
        "{parent:?}"
    );
    let state = a.state("parent").await.unwrap().unwrap();
    assert_eq!(tool_messages(&state.messages), [("d1".to_string(), "worker done".to_string(), false)]);
}

#[tokio::test]
async fn a_decision_on_the_worker_session_reaches_the_parents_batch() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let cases = [true, false].into_iter().zip(&dirs);
    for (approve, store) in cases.flat_map(|(a, dir)| both_stores(dir.path()).map(|s| (a, s))) {
        let OneDeep { agent, model, cleared, worker, id, worker_answer } =
            frozen_one_deep(&store, Some(approve)).await;
        let (made, other) = if approve {
            (agent.approve(&worker, &id).await, agent.deny("parent", &id, "不要清").await)
        } else {
            (agent.deny(&worker, &id, "不要清").await, agent.approve("parent", &id).await)
        };
        made.unwrap();
        let shown = store.load("parent").await.unwrap().unwrap();
        let item = shown.pending_approval.as_ref().unwrap().item(&id).unwrap().clone();
        let want = if approve { ApprovalDecision::Approved } else { ApprovalDecision::Denied };
        assert_eq!(item.decision, want, "approve={approve}: the parent shows the worker's decision");
        assert_eq!(item.deny_reason.as_deref(), (!approve).then_some("不要清"));
        // The other decision on the parent is refused: the worker's stands.
        assert_eq!(other.unwrap_err().code, "approval_already_decided", "approve={approve}");
        assert_eq!(store.load("parent").await.unwrap().unwrap(), shown, "nothing written");

        // The worker resumed directly moves on; the parent still refuses the other decision
        // (recorded alone, it would say the opposite of what ran), and its resume needs none.
        let out = agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
        let late = if approve {
            agent.deny("parent", &id, "不要清").await
        } else {
            agent.approve("parent", &id).await
        };
        assert_eq!(late.unwrap_err().code, "approval_already_decided", "approve={approve}");
        let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
        let parent = store.load("parent").await.unwrap().unwrap();
        assert_eq!(tool_messages(&parent.messages), [("p1".to_string(), worker_answer.to_string(), false)]);
        assert_eq!(cleared.load(Ordering::SeqCst), usize::from(approve));
        assert_eq!(model.remaining(), 0);
    }
}

#[tokio::test]
async fn a_decision_on_a_workers_worker_reaches_every_level_above() {
    let dir = tempfile::tempdir().unwrap();
    for store in both_stores(dir.path()) {
        let TwoDeep { agent, model, cleared, middle, inner, id } =
            frozen_two_deep(&store, &["inner done", "middle done", "parent done"]).await;
        agent.approve(&inner, &id).await.unwrap();
        for above in [middle.as_str(), "parent"] {
            assert_eq!(decision_on(store.as_ref(), above, &id).await, ApprovalDecision::Approved, "{above}");
        }
        // The parent's resume continues the chain down to the approved call, which runs once.
        let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent done")));
        assert_eq!(cleared.load(Ordering::SeqCst), 1);
        assert_eq!(model.remaining(), 0);
    }
}

/// A memory store and a file store in `dir`, for the tests that run on both.
fn both_stores(dir: &std::path::Path) -> [Arc<dyn StateStore>; 2] {
    [Arc::new(MemStore::new()), Arc::new(FileStore::new(dir))]
}

#[tokio::test]
async fn dismissing_the_worker_session_denies_its_items_in_the_parents_batch() {
    let dir = tempfile::tempdir().unwrap();
    for store in both_stores(dir.path()) {
        let OneDeep { agent, model, cleared, worker, id, .. } = frozen_one_deep(&store, None).await;
        let out = agent.dismiss(&worker, "算了", &EventLog::new(), &none()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
        let parent = store.load("parent").await.unwrap().unwrap();
        let item = parent.pending_approval.unwrap().item(&id).unwrap().clone();
        assert_eq!((item.decision, item.deny_reason.as_deref()), (ApprovalDecision::Denied, Some("算了")));
        assert_eq!(agent.approve("parent", &id).await.unwrap_err().code, "approval_already_decided");
        let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
        assert_eq!(cleared.load(Ordering::SeqCst), 0);
        assert_eq!(model.remaining(), 0);
    }
}

#[tokio::test]
async fn a_parents_resume_reserved_after_a_decision_on_its_worker_waits_for_it() {
    // A binding reserves each call's turn where the app makes it: `approve(worker)` and then
    // `resume("parent")`, neither awaited. The resume's task runs first here (join! polls it
    // first); it must see the decision the app made before it, not answer `approval_pending`.
    let dir = tempfile::tempdir().unwrap();
    for store in both_stores(dir.path()) {
        let OneDeep { agent, model, cleared, worker, id, .. } = frozen_one_deep(&store, Some(true)).await;
        let decision = agent.reserve_turn(&worker).unwrap().within(agent.approve(&worker, &id));
        let (log, cancel) = (EventLog::new(), none());
        let resume = agent.reserve_turn("parent").unwrap().within(agent.resume("parent", &log, &cancel));
        let (out, decided) = tokio::join!(resume, decision);
        decided.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out.unwrap() else { panic!("not finished") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
        assert_eq!(cleared.load(Ordering::SeqCst), 1);
        assert_eq!(model.remaining(), 0);
    }
    // Two levels down: the decision on the worker's worker.
    let dir = tempfile::tempdir().unwrap();
    for store in both_stores(dir.path()) {
        let TwoDeep { agent, model, cleared, inner, id, .. } =
            frozen_two_deep(&store, &["inner done", "middle done", "parent done"]).await;
        let decision = agent.reserve_turn(&inner).unwrap().within(agent.deny(&inner, &id, "不要清"));
        let (log, cancel) = (EventLog::new(), none());
        let resume = agent.reserve_turn("parent").unwrap().within(agent.resume("parent", &log, &cancel));
        let (out, decided) = tokio::join!(resume, decision);
        decided.unwrap();
        assert_eq!(out.unwrap().status(), RunStatus::Completed);
        assert_eq!(cleared.load(Ordering::SeqCst), 0);
        let parent = store.load("parent").await.unwrap().unwrap();
        assert_eq!(tool_messages(&parent.messages), [("d1".to_string(), "middle done".to_string(), false)]);
        assert_eq!(model.remaining(), 0);
    }
}

#[tokio::test]
async fn a_parents_resume_takes_a_decision_that_missed_it_while_the_worker_waits() {
    // The decision on the worker session could not reach the parent (another process held it),
    // and the worker was not resumed: the parent's resume takes the decision from below.
    let dir = tempfile::tempdir().unwrap();
    for store in both_stores(dir.path()) {
        let OneDeep { agent, model, cleared, worker, id, worker_answer } =
            frozen_one_deep(&store, Some(false)).await;
        let elsewhere = store.lease("parent").await.unwrap();
        agent.deny(&worker, &id, "不要清").await.unwrap();
        drop(elsewhere);
        assert_eq!(decision_on(store.as_ref(), "parent", &id).await, ApprovalDecision::Pending);
        let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
        let parent = store.load("parent").await.unwrap().unwrap();
        assert_eq!(tool_messages(&parent.messages), [("p1".to_string(), worker_answer.to_string(), false)]);
        assert_eq!(cleared.load(Ordering::SeqCst), 0);
        assert_eq!(model.remaining(), 0);
    }
}
