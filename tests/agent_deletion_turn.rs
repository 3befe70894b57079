//! `Agent::deletion_turn`: a deletion's turn taken where the app asks for it (the binding's JS
//! thread), so that `deleteSession` then `run` on the same id, neither awaited, deletes first and
//! the run starts a new session, and `run` then `deleteSession` refuses the deletion with
//! `session_busy`, whichever of their tasks starts (or ends) first. Without it the deletion took
//! the session only when its task ran: it could be refused although asked for first, or run after
//! a run asked for after it and delete that run's new conversation. `TurnReservation::kept`: the
//! reservation a binding keeps until the app is handed the outcome.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, EventLog, TurnReservation};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::CancellationSignal;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{answer, MemStore, Script};

fn agent(store: Arc<dyn StateStore>) -> Arc<Agent> {
    let answers: Vec<_> = (0..8).map(|i| answer(&format!("answer {i}"))).collect();
    Arc::new(AgentBuilder::new(Arc::new(Script::new(answers)), store).build())
}

/// The user messages of the session, in order (empty when it does not exist).
async fn user_messages(agent: &Agent, session_id: &str) -> Vec<String> {
    let Some(state) = agent.state(session_id).await.unwrap() else { return Vec::new() };
    state
        .messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// The binding's `run`: the call run within its reservation on a task of its own.
fn spawn_run(
    agent: &Arc<Agent>,
    reservation: TurnReservation,
    input: &'static str,
) -> tokio::task::JoinHandle<RunStatus> {
    let runner = Arc::clone(agent);
    tokio::spawn(async move {
        let (log, signal) = (EventLog::new(), CancellationSignal::new());
        reservation.within(runner.run("s", input, &log, &signal)).await.unwrap().status()
    })
}

/// The binding's `deleteSession`: the deletion run within its turn on a task of its own.
fn spawn_deletion(
    agent: &Arc<Agent>,
    turn: TurnReservation,
) -> tokio::task::JoinHandle<Result<bool, arkagent::AgentError>> {
    let deleter = Arc::clone(agent);
    tokio::spawn(async move { turn.within(deleter.delete_session("s")).await })
}

async fn deletion_then_run_deletes_first(store: Arc<dyn StateStore>) {
    let agent = agent(store);
    let (log, signal) = (EventLog::new(), CancellationSignal::new());
    agent.run("s", "old conversation", &log, &signal).await.unwrap();
    // The app: deleteSession("s"), run("s", "new conversation"), neither awaited. The binding
    // takes both turns on the caller's thread in that order; here the run's task starts first.
    let deletion = agent.deletion_turn("s").unwrap();
    let reservation = agent.reserve_turn("s").unwrap();
    let run = spawn_run(&agent, reservation, "new conversation");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!run.is_finished(), "the run waits for the deletion asked for before it");
    assert_eq!(user_messages(&agent, "s").await, ["old conversation"], "nothing deleted yet");
    assert!(spawn_deletion(&agent, deletion).await.unwrap().unwrap(), "the old session existed");
    assert_eq!(run.await.unwrap(), RunStatus::Completed);
    assert_eq!(user_messages(&agent, "s").await, ["new conversation"], "a new session, kept");
}

#[tokio::test]
async fn a_deletion_asked_for_before_a_run_goes_first_and_the_run_keeps_its_new_session() {
    deletion_then_run_deletes_first(Arc::new(MemStore::new())).await;
    let dir = tempfile::tempdir().unwrap();
    deletion_then_run_deletes_first(Arc::new(FileStore::new(dir.path()))).await;
}

async fn run_then_deletion_is_refused(store: Arc<dyn StateStore>) {
    let agent = agent(store);
    let (log, signal) = (EventLog::new(), CancellationSignal::new());
    agent.run("s", "old conversation", &log, &signal).await.unwrap();
    // The app: run("s", ...), deleteSession("s"), neither awaited: refused when asked for, before
    // the run's task even started.
    let reservation = agent.reserve_turn("s").unwrap();
    let kept = reservation.kept();
    assert_eq!(agent.deletion_turn("s").unwrap_err().code, "session_busy");
    assert_eq!(spawn_run(&agent, reservation, "again").await.unwrap(), RunStatus::Completed);
    // The run's task is over, but the binding keeps the reservation until the app is handed the
    // outcome: a deletion the app asked for before that is still refused.
    let err = agent.deletion_turn("s").unwrap_err();
    assert_eq!((err.code.as_ref(), err.layer), ("session_busy", arkagent::ErrorLayer::Persistence));
    assert_eq!(agent.delete_session("s").await.unwrap_err().code, "session_busy");
    assert_eq!(user_messages(&agent, "s").await, ["old conversation", "again"], "nothing deleted");
    drop(kept);
    assert!(spawn_deletion(&agent, agent.deletion_turn("s").unwrap()).await.unwrap().unwrap());
    assert!(agent.state("s").await.unwrap().is_none());
}

#[tokio::test]
async fn a_deletion_asked_for_after_a_run_is_refused_whichever_task_ends_first() {
    run_then_deletion_is_refused(Arc::new(MemStore::new())).await;
    let dir = tempfile::tempdir().unwrap();
    run_then_deletion_is_refused(Arc::new(FileStore::new(dir.path()))).await;
}

#[tokio::test]
async fn a_deletion_turn_refuses_later_changes_and_deletions_until_it_is_over() {
    let agent = agent(Arc::new(MemStore::new()));
    agent.set_metadata("s", "userId", json!("u-1")).await.unwrap();
    let turn = agent.deletion_turn("s").unwrap();
    let kept = turn.kept();
    // Asked for after the deletion: refused as while a deletion holds the session.
    assert_eq!(agent.metadata_turn("s").unwrap_err().code, "session_busy");
    assert_eq!(agent.set_metadata("s", "userId", json!(2)).await.unwrap_err().code, "session_busy");
    assert_eq!(agent.deletion_turn("s").unwrap_err().code, "session_busy");
    assert_eq!(agent.delete_session("s").await.unwrap_err().code, "session_busy");
    // Other sessions are free.
    drop(agent.deletion_turn("t").unwrap());
    assert!(spawn_deletion(&agent, turn).await.unwrap().unwrap());
    assert!(agent.state("s").await.unwrap().is_none());
    assert_eq!(agent.metadata_turn("s").unwrap_err().code, "session_busy", "kept until settled");
    drop(kept);
    // A session that does not exist: nothing to delete, nothing created.
    assert!(!spawn_deletion(&agent, agent.deletion_turn("s").unwrap()).await.unwrap().unwrap());
    assert!(agent.state("s").await.unwrap().is_none());
    agent.set_metadata("s", "userId", json!("u-2")).await.unwrap();
    assert_eq!(agent.deletion_turn("../up").unwrap_err().code, "session_id_invalid");
}

#[tokio::test]
async fn a_deletion_asked_for_after_a_metadata_change_waits_behind_it() {
    let agent = agent(Arc::new(MemStore::new()));
    // The app: setMetadata, deleteSession, run, none awaited.
    let change = agent.metadata_turn("s").unwrap();
    let deletion = agent.deletion_turn("s").unwrap();
    let reservation = agent.reserve_turn("s").unwrap();
    let run = spawn_run(&agent, reservation, "new conversation");
    let deleted = spawn_deletion(&agent, deletion);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!deleted.is_finished(), "the deletion waits for the change asked for before it");
    assert!(!run.is_finished(), "the run waits for both");
    // A change asked for after the deletion is refused, as after a reserved run.
    assert_eq!(agent.metadata_turn("s").unwrap_err().code, "session_busy");
    agent.set_metadata_in_turn(change, "userId", json!("u-1")).await.unwrap();
    assert!(deleted.await.unwrap().unwrap(), "the change had created the session");
    assert_eq!(run.await.unwrap(), RunStatus::Completed);
    let state = agent.state("s").await.unwrap().unwrap();
    assert!(state.metadata.is_empty(), "deleted with the session");
    assert_eq!(user_messages(&agent, "s").await, ["new conversation"]);
}
