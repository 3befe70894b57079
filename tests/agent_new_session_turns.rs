//! Calls reserved on a session one after the other (`Agent::reserve_turn`, as the binding does on
//! the app's thread) hold it in that order also when the session is new: `run` then `approve_all`,
//! `resume`, `dismiss`, `approve` or `deny`, none awaited, on a session the run creates. Each later
//! call waits for the run, then finds the session it wrote. Before, those calls looked for the
//! session before waiting their turn, found none (the run had not written it yet) and failed with
//! `session_not_found`: the user's decision was dropped and the batch stayed frozen. A call on a
//! session nobody asked for before it is still `session_not_found`, and creates nothing on disk.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome, TurnReservation};
use arkagent::approval::ApprovalDecision;
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, MemStore, Script};

/// An agent whose model asks for the dangerous `wipe`, then answers `wiped`; each run of `wipe`
/// counted in `ran`.
fn agent(store: Arc<dyn StateStore>, ran: &Arc<AtomicUsize>) -> Arc<Agent> {
    let mut tools = ToolRegistry::new();
    let ran = Arc::clone(ran);
    tools
        .register(
            ToolDefinition::new("wipe", "wipes", json!({"type":"object"})).with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(move |_a, _ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                async move { Ok(ToolResult::text("wiped")) }
            })),
        )
        .unwrap();
    let model = Script::new(vec![calls(&[("w1", "wipe", "{}")]), answer("wiped")]);
    Arc::new(AgentBuilder::new(Arc::new(model), store).tools(tools).build())
}

/// The binding's call: run within its reservation on a task of its own.
fn spawn_within<T: Send + 'static>(
    reservation: TurnReservation,
    call: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    tokio::spawn(reservation.within(call))
}

/// The app: `run("s")`, then `approve_all("s")`, then `resume("s")` on a new session, none
/// awaited. The binding reserves the three turns in that order; here the tasks start in the
/// reverse order, the run's last, after the others had every chance to go first.
async fn run_then_approve_all_then_resume(store: Arc<dyn StateStore>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = agent(store, &ran);
    let (run_turn, approve_turn, resume_turn) = (
        agent.reserve_turn("s").unwrap(),
        agent.reserve_turn("s").unwrap(),
        agent.reserve_turn("s").unwrap(),
    );
    let a = Arc::clone(&agent);
    let resume = spawn_within(resume_turn, async move {
        a.resume("s", &EventLog::new(), &CancellationSignal::new()).await
    });
    let a = Arc::clone(&agent);
    let approve = spawn_within(approve_turn, async move { a.approve_all("s").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!approve.is_finished(), "the decision waits for the run asked for before it");
    assert!(!resume.is_finished(), "the resume waits for the run and the decision");
    let a = Arc::clone(&agent);
    let run = spawn_within(run_turn, async move {
        a.run("s", "wipe the cache", &EventLog::new(), &CancellationSignal::new()).await
    });
    let RunOutcome::Suspended { batch } = run.await.unwrap().unwrap() else {
        panic!("the run freezes on the dangerous call")
    };
    assert_eq!(batch.items.len(), 1);
    let decided = approve.await.unwrap().expect("the decision finds the session the run wrote");
    assert_eq!(decided.items[0].decision, ApprovalDecision::Approved);
    let outcome = resume.await.unwrap().expect("the resume finds the approved batch");
    assert_eq!(outcome.status(), RunStatus::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the approved call ran once");
    assert_eq!(agent.state("s").await.unwrap().unwrap().status, RunStatus::Completed);
}

#[tokio::test]
async fn a_decision_and_a_resume_asked_for_after_a_new_sessions_run_wait_for_it() {
    run_then_approve_all_then_resume(Arc::new(MemStore::new())).await;
    let dir = tempfile::tempdir().unwrap();
    run_then_approve_all_then_resume(Arc::new(FileStore::new(dir.path()))).await;
}

/// `run("s")` then `dismiss("s")` on a new session, neither awaited, the dismissal's task first.
async fn run_then_dismiss(store: Arc<dyn StateStore>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = agent(store, &ran);
    let (run_turn, dismiss_turn) = (agent.reserve_turn("s").unwrap(), agent.reserve_turn("s").unwrap());
    let a = Arc::clone(&agent);
    let dismiss = spawn_within(dismiss_turn, async move {
        a.dismiss("s", "user moved on", &EventLog::new(), &CancellationSignal::new()).await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let a = Arc::clone(&agent);
    let run = spawn_within(run_turn, async move {
        a.run("s", "wipe the cache", &EventLog::new(), &CancellationSignal::new()).await
    });
    assert!(matches!(run.await.unwrap().unwrap(), RunOutcome::Suspended { .. }));
    let outcome = dismiss.await.unwrap().expect("the dismissal finds the frozen batch");
    assert_eq!(outcome.status(), RunStatus::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the dismissed call never ran");
    let state = agent.state("s").await.unwrap().unwrap();
    assert!(state.pending_approval.is_none(), "nothing left pending");
}

#[tokio::test]
async fn a_dismissal_asked_for_after_a_new_sessions_run_waits_for_it() {
    run_then_dismiss(Arc::new(MemStore::new())).await;
    let dir = tempfile::tempdir().unwrap();
    run_then_dismiss(Arc::new(FileStore::new(dir.path()))).await;
}

/// `run("s")` then `deny("s", id)` of an item the app names: the denial waits for the run and
/// then reads the batch (an unknown id is `approval_not_found` there, not `session_not_found`).
async fn run_then_deny(store: Arc<dyn StateStore>) {
    let agent = agent(store, &Arc::new(AtomicUsize::new(0)));
    let (run_turn, deny_turn) = (agent.reserve_turn("s").unwrap(), agent.reserve_turn("s").unwrap());
    let a = Arc::clone(&agent);
    let deny = spawn_within(deny_turn, async move { a.deny("s", "no-such-item", "no").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let a = Arc::clone(&agent);
    let run = spawn_within(run_turn, async move {
        a.run("s", "wipe the cache", &EventLog::new(), &CancellationSignal::new()).await
    });
    assert!(matches!(run.await.unwrap().unwrap(), RunOutcome::Suspended { .. }));
    let err = deny.await.unwrap().unwrap_err();
    assert_ne!(err.code, codes::SESSION_NOT_FOUND, "the denial waited for the run: {err}");
}

#[tokio::test]
async fn a_single_decision_asked_for_after_a_new_sessions_run_waits_for_it() {
    run_then_deny(Arc::new(MemStore::new())).await;
    let dir = tempfile::tempdir().unwrap();
    run_then_deny(Arc::new(FileStore::new(dir.path()))).await;
}

/// On a session no call was asked for before, each of them is still `session_not_found`, and
/// leaves nothing in the state directory (no session, no lease's lock file).
#[tokio::test]
async fn calls_on_a_session_nobody_asked_for_are_still_session_not_found_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(Arc::new(FileStore::new(dir.path())), &Arc::new(AtomicUsize::new(0)));
    let (log, cancel) = (EventLog::new(), CancellationSignal::new());
    let in_turn = |agent: &Agent| agent.reserve_turn("nobody").unwrap();
    let errors = [
        in_turn(&agent).within(agent.approve_all("nobody")).await.map(drop).unwrap_err(),
        in_turn(&agent).within(agent.deny_all("nobody", "no")).await.map(drop).unwrap_err(),
        in_turn(&agent).within(agent.approve("nobody", "x")).await.map(drop).unwrap_err(),
        in_turn(&agent).within(agent.deny("nobody", "x", "no")).await.map(drop).unwrap_err(),
        in_turn(&agent).within(agent.resume("nobody", &log, &cancel)).await.map(drop).unwrap_err(),
        in_turn(&agent).within(agent.dismiss("nobody", "r", &log, &cancel)).await.map(drop).unwrap_err(),
        // Outside a reservation too (the Rust API called directly).
        agent.approve_all("nobody").await.map(drop).unwrap_err(),
        agent.resume("nobody", &log, &cancel).await.map(drop).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.code, codes::SESSION_NOT_FOUND, "{err}");
    }
    assert!(agent.state("nobody").await.unwrap().is_none());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing created for a session that does not exist: {left:?}");
}
