//! `Agent::metadata_turn` + `Agent::set_metadata_in_turn`: the session's turn for a metadata change
//! taken where the app asks for it (the binding's JS thread), so a run asked for right after waits
//! for the change instead of taking the session first and making it `session_busy`; and
//! `Agent::reserve_turn`: a run's place reserved where the app asks for it, so a change asked for
//! after it is `session_busy` instead of applying before the run starts.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, EventLog};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};
use support::{answer, calls, MemStore, Script};

type Seen = Arc<Mutex<Vec<Option<Value>>>>;

fn agent(seen: &Seen) -> Arc<Agent> {
    let mut tools = ToolRegistry::new();
    let seen = Arc::clone(seen);
    tools
        .register(
            ToolDefinition::new("whoami", "reads the session metadata", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_args: Map<String, Value>, ctx: arkagent::ToolContext| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push(ctx.state.metadata.get("userId").cloned());
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    Arc::new(
        AgentBuilder::new(
            Arc::new(Script::new(vec![calls(&[("c1", "whoami", "{}")]), answer("done")])),
            Arc::new(MemStore::new()),
        )
        .tools(tools)
        .build(),
    )
}

#[tokio::test]
async fn a_run_started_after_the_turn_was_taken_waits_for_the_change_and_sees_it() {
    let seen = Seen::default();
    let agent = agent(&seen);
    let turn = agent.metadata_turn("s").unwrap();
    // The run is asked for (and spawned) before the change even starts.
    let runner = Arc::clone(&agent);
    let run = tokio::spawn(async move {
        runner.run("s", "who am I?", &EventLog::new(), &CancellationSignal::new()).await.unwrap()
    });
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!run.is_finished(), "the run waits for the turn");
    agent.set_metadata_in_turn(turn, "userId", json!("u-42")).await.unwrap();
    assert_eq!(run.await.unwrap().status(), arkagent::state::RunStatus::Completed);
    assert_eq!(*seen.lock().unwrap(), vec![Some(json!("u-42"))]);
}

#[tokio::test]
async fn a_turn_taken_while_another_change_holds_the_session_waits_behind_it() {
    let seen = Seen::default();
    let agent = agent(&seen);
    let turn = agent.metadata_turn("s").unwrap();
    // A second change (the app did not await the first) is not refused: it waits its turn...
    let second = agent.metadata_turn("s").unwrap();
    let third = agent.metadata_turn("s").unwrap();
    // ...while a change that does not take a turn is still refused, as a deletion is.
    assert_eq!(agent.set_metadata("s", "userId", json!(1)).await.unwrap_err().code, "session_busy");
    assert_eq!(agent.delete_session("s").await.unwrap_err().code, "session_busy");
    let (a, b) = (Arc::clone(&agent), Arc::clone(&agent));
    let third = tokio::spawn(async move { a.set_metadata_in_turn(third, "userId", json!("third")).await });
    let second = tokio::spawn(async move { b.set_metadata_in_turn(second, "locale", json!("zh")).await });
    let runner = Arc::clone(&agent);
    let run = tokio::spawn(async move {
        runner.run("s", "who am I?", &EventLog::new(), &CancellationSignal::new()).await.unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!second.is_finished() && !third.is_finished() && !run.is_finished(), "all wait for the first");
    agent.set_metadata_in_turn(turn, "userId", json!("first")).await.unwrap();
    second.await.unwrap().unwrap();
    third.await.unwrap().unwrap();
    // The session went from change to change, in the order the turns were taken: the run, asked
    // for while they waited, came after all of them.
    assert_eq!(run.await.unwrap().status(), arkagent::state::RunStatus::Completed);
    assert_eq!(*seen.lock().unwrap(), vec![Some(json!("third"))]);
    let metadata = agent.state("s").await.unwrap().unwrap().metadata;
    assert_eq!(metadata.get("locale"), Some(&json!("zh")));
    // A waiting turn given up (its change dropped) passes the session on to the next one.
    let first = agent.metadata_turn("s").unwrap();
    let dropped = agent.metadata_turn("s").unwrap();
    let last = agent.metadata_turn("s").unwrap();
    drop(dropped);
    drop(first);
    agent.set_metadata_in_turn(last, "userId", json!("last")).await.unwrap();
    assert_eq!(agent.state("s").await.unwrap().unwrap().metadata.get("userId"), Some(&json!("last")));
    // And once no change holds it, the session is free again.
    assert!(agent.delete_session("s").await.unwrap());
}

#[tokio::test]
async fn no_turn_while_a_run_holds_the_session_nor_for_a_bad_session_id() {
    let seen = Seen::default();
    let agent = agent(&seen);
    let mut tools = ToolRegistry::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let (g, st) = (Arc::clone(&gate), Arc::clone(&started));
    tools
        .register(
            ToolDefinition::new("whoami", "waits", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_args: Map<String, Value>, _ctx: arkagent::ToolContext| {
                let (g, st) = (Arc::clone(&g), Arc::clone(&st));
                async move {
                    st.notify_one();
                    g.notified().await;
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    let held = Arc::new(
        AgentBuilder::new(
            Arc::new(Script::new(vec![calls(&[("c1", "whoami", "{}")]), answer("done")])),
            Arc::new(MemStore::new()),
        )
        .tools(tools)
        .build(),
    );
    let runner = Arc::clone(&held);
    let run = tokio::spawn(async move {
        runner.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap()
    });
    started.notified().await;
    // A run holds the session: a change is refused at once, it does not wait for the run.
    assert_eq!(held.metadata_turn("s").unwrap_err().code, "session_busy");
    gate.notify_one();
    assert_eq!(run.await.unwrap().status(), arkagent::state::RunStatus::Completed);
    drop(held.metadata_turn("s").unwrap());
    let turn = agent.metadata_turn("s").unwrap();
    // Other sessions are free.
    drop(agent.metadata_turn("t").unwrap());
    drop(turn);
    // Given back once dropped.
    let again = agent.metadata_turn("s").unwrap();
    // The checks of set_metadata still apply within a turn.
    assert_eq!(
        agent.set_metadata_in_turn(again, "", json!(1)).await.unwrap_err().code,
        "metadata_key_invalid"
    );
    assert_eq!(agent.metadata_turn("../up").unwrap_err().code, "session_id_invalid");
    // Removing a key of a session that does not exist creates nothing.
    agent.set_metadata_in_turn(agent.metadata_turn("n").unwrap(), "userId", Value::Null).await.unwrap();
    assert!(agent.state("n").await.unwrap().is_none());
}

#[tokio::test]
async fn a_reserved_turn_refuses_later_changes_until_it_is_dropped() {
    let seen = Seen::default();
    let agent = agent(&seen);
    let reservation = agent.reserve_turn("s").unwrap();
    let another = agent.reserve_turn("s").unwrap();
    // A change asked for after the call reserved its place: refused, though nothing holds the
    // session's lock yet (the call has not started).
    assert_eq!(agent.metadata_turn("s").unwrap_err().code, "session_busy");
    assert_eq!(agent.set_metadata("s", "userId", json!(1)).await.unwrap_err().code, "session_busy");
    assert!(agent.state("s").await.unwrap().is_none(), "nothing written");
    // Other sessions are free.
    agent.set_metadata_in_turn(agent.metadata_turn("t").unwrap(), "userId", json!("t")).await.unwrap();
    // Busy while any reservation is left.
    drop(reservation);
    assert_eq!(agent.metadata_turn("s").unwrap_err().code, "session_busy");
    drop(another);
    agent.set_metadata_in_turn(agent.metadata_turn("s").unwrap(), "userId", json!("u-1")).await.unwrap();
    agent.set_metadata("s", "locale", json!("zh")).await.unwrap();
    let metadata = agent.state("s").await.unwrap().unwrap().metadata;
    assert_eq!((metadata.get("userId"), metadata.get("locale")), (Some(&json!("u-1")), Some(&json!("zh"))));
    assert_eq!(agent.reserve_turn("../up").unwrap_err().code, "session_id_invalid");
}

#[tokio::test]
async fn a_change_before_the_reservation_applies_first_and_one_after_is_refused() {
    let seen = Seen::default();
    let agent = agent(&seen);
    // The app: setMetadata A, run R, setMetadata B, none awaited (the binding's order of calls).
    let first = agent.metadata_turn("s").unwrap();
    let reservation = agent.reserve_turn("s").unwrap();
    assert_eq!(agent.metadata_turn("s").unwrap_err().code, "session_busy", "B comes after R");
    let runner = Arc::clone(&agent);
    let run = tokio::spawn(async move {
        let (log, signal) = (EventLog::new(), CancellationSignal::new());
        reservation.within(runner.run("s", "who am I?", &log, &signal)).await.unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!run.is_finished(), "the run waits for the change asked for before it");
    agent.set_metadata_in_turn(first, "userId", json!("a")).await.unwrap();
    assert_eq!(run.await.unwrap().status(), arkagent::state::RunStatus::Completed);
    assert_eq!(*seen.lock().unwrap(), vec![Some(json!("a"))]);
    // The run over (its reservation dropped with it), changes apply again.
    agent.set_metadata_in_turn(agent.metadata_turn("s").unwrap(), "userId", json!("b")).await.unwrap();
    assert_eq!(agent.state("s").await.unwrap().unwrap().metadata.get("userId"), Some(&json!("b")));
}

#[tokio::test]
async fn a_turn_taken_on_another_agent_is_refused_and_writes_nothing() {
    let store = Arc::new(MemStore::new());
    let build =
        || AgentBuilder::new(Arc::new(Script::new(vec![answer("done")])), store.clone() as Arc<_>).build();
    let (one, other) = (build(), build());
    let turn = one.metadata_turn("s").unwrap();
    let err = other.set_metadata_in_turn(turn, "userId", json!("u-1")).await.unwrap_err();
    assert_eq!((err.code.as_ref(), err.layer), ("argument_invalid", arkagent::ErrorLayer::Config));
    assert!(one.state("s").await.unwrap().is_none(), "nothing written");
    // The refused turn was given back: the session is free on the agent that took it.
    one.set_metadata_in_turn(one.metadata_turn("s").unwrap(), "userId", json!("u-2")).await.unwrap();
    assert_eq!(other.state("s").await.unwrap().unwrap().metadata.get("userId"), Some(&json!("u-2")));
}

#[tokio::test]
async fn calls_reserved_one_after_the_other_hold_the_session_in_that_order() {
    let agent = Arc::new(
        AgentBuilder::new(
            Arc::new(Script::new(vec![answer("one"), answer("two")])),
            Arc::new(MemStore::new()),
        )
        .build(),
    );
    // The app: run "first", run "second", neither awaited. The binding reserves both on the
    // caller's thread in that order; their tasks may start in any order: here the second first.
    let first = agent.reserve_turn("s").unwrap();
    let second = agent.reserve_turn("s").unwrap();
    // A deletion asked for now finds the session reserved.
    assert_eq!(agent.delete_session("s").await.unwrap_err().code, "session_busy");
    let spawn = |reservation: arkagent::agent::TurnReservation, input: &'static str| {
        let runner = Arc::clone(&agent);
        tokio::spawn(async move {
            let (log, signal) = (EventLog::new(), CancellationSignal::new());
            reservation.within(runner.run("s", input, &log, &signal)).await.unwrap()
        })
    };
    let later = spawn(second, "second");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!later.is_finished(), "the second call waits for the first, though its task started first");
    let earlier = spawn(first, "first");
    assert_eq!(earlier.await.unwrap().status(), arkagent::state::RunStatus::Completed);
    assert_eq!(later.await.unwrap().status(), arkagent::state::RunStatus::Completed);
    let texts: Vec<String> = agent
        .state("s")
        .await
        .unwrap()
        .unwrap()
        .messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap()["content"].to_string())
        .collect();
    assert_eq!(texts, ["\"first\"", "\"one\"", "\"second\"", "\"two\""]);
    // Both given up: the session is free again.
    agent.set_metadata("s", "userId", json!(1)).await.unwrap();
}

#[tokio::test]
async fn a_reservation_given_up_unused_gives_its_place_on() {
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(Script::new(vec![answer("one")])), Arc::new(MemStore::new())).build(),
    );
    let unused = agent.reserve_turn("s").unwrap();
    let used = agent.reserve_turn("s").unwrap();
    let runner = Arc::clone(&agent);
    let run = tokio::spawn(async move {
        let (log, signal) = (EventLog::new(), CancellationSignal::new());
        used.within(runner.run("s", "hi", &log, &signal)).await.unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!run.is_finished(), "behind the first reservation");
    drop(unused);
    assert_eq!(run.await.unwrap().status(), arkagent::state::RunStatus::Completed);
}
