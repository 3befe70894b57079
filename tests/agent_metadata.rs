//! Session metadata set by the app (`Agent::set_metadata`): what tools see in
//! `ToolContext.state.metadata` during the next run, durability across a restart with the
//! FileStore, removal with `null`, the stable codes of bad keys and values, and what happens while
//! a run holds the session (refused with `session_busy`, nothing lost either way).

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::state::{FileStore, RunStatus, StateStore, MAX_METADATA_BYTES, MAX_METADATA_KEY_LEN};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ErrorLayer, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use support::{answer, calls, MemStore, Script};

type Seen = Arc<Mutex<Vec<BTreeMap<String, Value>>>>;

/// A registry with `whoami` (records the metadata it sees) and `wipe` (the same, but dangerous:
/// its batch waits for approval).
fn recording_tools(seen: &Seen) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    for (name, risk) in [("whoami", RiskLevel::Safe), ("wipe", RiskLevel::Dangerous)] {
        let seen = Arc::clone(seen);
        tools
            .register(
                ToolDefinition::new(name, "reads the session metadata", json!({"type": "object"}))
                    .with_risk(risk),
                Arc::new(FnExecutor(move |_args: Map<String, Value>, ctx: arkagent::ToolContext| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.lock().unwrap().push(ctx.state.metadata.clone());
                        let user = ctx.state.metadata.get("userId").cloned().unwrap_or(Value::Null);
                        Ok(ToolResult::text(format!("user {user}")))
                    }
                })),
            )
            .unwrap();
    }
    tools
}

fn agent_on(store: Arc<dyn StateStore>, script: Script, seen: &Seen) -> Agent {
    let config = AgentConfig { system_prompt: Some("you are helpful".into()), ..AgentConfig::default() };
    AgentBuilder::new(Arc::new(script), store).tools(recording_tools(seen)).config(config).build()
}

fn one_call_script(tool: &str) -> Script {
    Script::new(vec![calls(&[("c1", tool, "{}")]), answer("done")])
}

async fn run(agent: &Agent, session: &str) -> RunOutcome {
    agent.run(session, "who am I?", &EventLog::new(), &CancellationSignal::new()).await.unwrap()
}

#[tokio::test]
async fn a_tool_in_the_next_run_sees_the_metadata_set_before_it() {
    let seen = Seen::default();
    let agent = agent_on(Arc::new(MemStore::new()), one_call_script("whoami"), &seen);
    // The session does not exist yet: setting metadata creates it (idle, no messages).
    agent.set_metadata("s1", "userId", json!("u-42")).await.unwrap();
    agent.set_metadata("s1", "profile", json!({"tier": "gold", "tags": ["a", 1, null]})).await.unwrap();
    let state = agent.state("s1").await.unwrap().expect("created by set_metadata");
    assert_eq!((state.status, state.messages.len()), (RunStatus::Idle, 0));
    assert_eq!(state.metadata["userId"], json!("u-42"));

    let outcome = run(&agent, "s1").await;
    assert_eq!(outcome.status(), RunStatus::Completed, "{outcome:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["userId"], json!("u-42"));
    assert_eq!(seen[0]["profile"], json!({"tier": "gold", "tags": ["a", 1, null]}));
    // The session created by set_metadata is a normal new session: the system prompt comes first.
    let state = agent.state("s1").await.unwrap().unwrap();
    assert!(
        matches!(&state.messages[0], arkagent::ChatMessage::System { content } if content == "you are helpful"),
        "{:?}",
        state.messages[0]
    );
    assert_eq!(state.metadata.len(), 2);
}

#[tokio::test]
async fn metadata_is_durable_across_a_restart_and_null_removes_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Seen::default();
    {
        let agent = agent_on(Arc::new(FileStore::new(dir.path())), Script::new(vec![]), &seen);
        agent.set_metadata("s", "userId", json!("u-7")).await.unwrap();
        agent.set_metadata("s", "locale", json!("zh-CN")).await.unwrap();
        agent.set_metadata("s", "locale", Value::Null).await.unwrap();
        // Removing a key that is not there is fine and changes nothing.
        agent.set_metadata("s", "never-set", Value::Null).await.unwrap();
    }
    // A new process: a new store over the same directory.
    let agent = agent_on(Arc::new(FileStore::new(dir.path())), one_call_script("whoami"), &seen);
    let state = agent.state("s").await.unwrap().expect("persisted");
    assert_eq!(state.metadata, BTreeMap::from([("userId".to_string(), json!("u-7"))]));
    run(&agent, "s").await;
    assert_eq!(seen.lock().unwrap()[0], BTreeMap::from([("userId".to_string(), json!("u-7"))]));
    // And after the run, still there (the run's own commits keep it).
    let again = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!(again.metadata["userId"], json!("u-7"));
    assert_eq!(again.status, RunStatus::Completed);
}

#[tokio::test]
async fn bad_keys_and_values_are_refused_with_stable_codes_and_nothing_is_written() {
    let seen = Seen::default();
    let agent = agent_on(Arc::new(MemStore::new()), Script::new(vec![]), &seen);
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let long_key = "k".repeat(MAX_METADATA_KEY_LEN + 1);
    let cases: Vec<(&str, &str, Value, &str, ErrorLayer)> = vec![
        ("s", "", json!(1), "metadata_key_invalid", ErrorLayer::Config),
        ("s", &long_key, json!(1), "metadata_key_invalid", ErrorLayer::Config),
        ("s", "user\nId", json!(1), "metadata_key_invalid", ErrorLayer::Config),
        ("s", "userId", deep, "json_too_deep", ErrorLayer::Decode),
        ("s", "userId", json!("x".repeat(70 * 1024)), "json_too_large", ErrorLayer::Decode),
        ("../x", "userId", json!(1), "session_id_invalid", ErrorLayer::Config),
        ("", "userId", json!(1), "session_id_invalid", ErrorLayer::Config),
    ];
    for (session, key, value, code, layer) in cases {
        let e = agent.set_metadata(session, key, value).await.unwrap_err();
        assert_eq!((e.code.as_ref(), e.layer), (code, layer), "{session:?} {key:?}: {e}");
    }
    assert!(agent.state("s").await.unwrap().is_none(), "a refused call creates no session");
    agent.set_metadata("s", "userId", Value::Null).await.unwrap();
    assert!(agent.state("s").await.unwrap().is_none(), "a removal creates no session");
    // The longest key is fine.
    agent.set_metadata("s", &"k".repeat(MAX_METADATA_KEY_LEN), json!(1)).await.unwrap();

    // The whole metadata of a session is bounded: values under the per-value limit add up.
    let chunk = json!("y".repeat(60 * 1024));
    let mut accepted = 0;
    let refused = loop {
        match agent.set_metadata("big", &format!("k{accepted}"), chunk.clone()).await {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 100, "the total is never bounded");
    };
    assert_eq!(refused.code, "metadata_too_large", "{refused}");
    let state = agent.state("big").await.unwrap().unwrap();
    assert_eq!(state.metadata.len(), accepted);
    assert!(accepted * 60 * 1024 <= MAX_METADATA_BYTES && (accepted + 1) * 60 * 1024 > MAX_METADATA_BYTES);
    // Replacing a key counts its new value, not both: rewriting one in place still works, and so
    // does removing one to make room.
    agent.set_metadata("big", "k0", chunk.clone()).await.unwrap();
    agent.set_metadata("big", "k0", Value::Null).await.unwrap();
    agent.set_metadata("big", "other", chunk).await.unwrap();
}

/// An executor that waits for the test's go (to hold a run in the middle of a batch).
fn gated_tools(started: Arc<tokio::sync::Notify>, go: Arc<tokio::sync::Notify>, seen: &Seen) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    let seen = Arc::clone(seen);
    tools
        .register(
            ToolDefinition::new("slow", "waits", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_args: Map<String, Value>, ctx: arkagent::ToolContext| {
                let (started, go, seen) = (Arc::clone(&started), Arc::clone(&go), Arc::clone(&seen));
                async move {
                    seen.lock().unwrap().push(ctx.state.metadata.clone());
                    started.notify_one();
                    go.notified().await;
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    tools
}

#[tokio::test]
async fn while_a_run_holds_the_session_set_metadata_is_refused_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let seen = Seen::default();
    let script = Script::new(vec![
        calls(&[("c1", "slow", "{}")]),
        answer("done"),
        calls(&[("c2", "slow", "{}")]),
        answer("again"),
    ]);
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(script), Arc::new(FileStore::new(dir.path())))
            .tools(gated_tools(Arc::clone(&started), Arc::clone(&go), &seen))
            .build(),
    );
    agent.set_metadata("s", "userId", json!("before")).await.unwrap();
    let running = {
        let agent = Arc::clone(&agent);
        tokio::spawn(async move { run(&agent, "s").await })
    };
    started.notified().await;

    // Through the same agent: the run holds the session.
    let e = agent.set_metadata("s", "userId", json!("during")).await.unwrap_err();
    assert_eq!((e.code.as_ref(), e.layer), ("session_busy", ErrorLayer::Persistence), "{e}");
    // Through another agent (another process) over the same directory: the run's lease.
    let other = agent_on(Arc::new(FileStore::new(dir.path())), Script::new(vec![]), &Seen::default());
    let e = other.set_metadata("s", "userId", json!("elsewhere")).await.unwrap_err();
    assert_eq!(e.code, "session_busy", "{e}");
    // Another session is not held.
    agent.set_metadata("t", "userId", json!("free")).await.unwrap();

    go.notify_one();
    assert_eq!(running.await.unwrap().status(), RunStatus::Completed);
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!(state.metadata["userId"], json!("before"), "the refused values were not written");

    // Once the run is over, the change goes through and the next run sees it.
    agent.set_metadata("s", "userId", json!("after")).await.unwrap();
    let next = {
        let agent = Arc::clone(&agent);
        tokio::spawn(async move { run(&agent, "s").await })
    };
    started.notified().await;
    go.notify_one();
    assert_eq!(next.await.unwrap().status(), RunStatus::Completed);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|m| m["userId"].clone()).collect::<Vec<_>>(),
        vec![json!("before"), json!("after")]
    );
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!(state.metadata["userId"], json!("after"));
    assert_eq!(state.messages.len(), 8, "both runs' messages are kept: {:?}", state.messages);
}

#[tokio::test]
async fn a_suspended_session_takes_metadata_and_the_resumed_batch_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Seen::default();
    let agent = agent_on(Arc::new(FileStore::new(dir.path())), one_call_script("wipe"), &seen);
    let RunOutcome::Suspended { batch } = run(&agent, "s").await else { panic!("expected a frozen batch") };
    // Between the freeze and the decision (no run holds the session): durable at once.
    agent.set_metadata("s", "userId", json!("u-9")).await.unwrap();
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::AwaitingApproval);
    assert_eq!(state.metadata["userId"], json!("u-9"));
    assert!(state.pending_approval.is_some(), "the frozen batch is untouched");

    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    let outcome = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed, "{outcome:?}");
    assert_eq!(seen.lock().unwrap()[0]["userId"], json!("u-9"));
}

#[tokio::test]
async fn a_worker_of_delegate_task_starts_with_the_parents_metadata() {
    let seen = Seen::default();
    let script = Script::new(vec![
        calls(&[("p1", "delegate_task", r#"{"task":"who is the user?"}"#)]),
        calls(&[("w1", "whoami", "{}")]),
        answer("the user is u-1"),
        answer("done"),
    ]);
    let agent = Arc::new(agent_on(Arc::new(MemStore::new()), script, &seen));
    agent.enable_delegation(None).unwrap();
    agent.set_metadata("s", "userId", json!("u-1")).await.unwrap();
    let outcome = run(&agent, "s").await;
    assert_eq!(outcome.status(), RunStatus::Completed, "{outcome:?}");
    assert_eq!(seen.lock().unwrap().clone(), vec![BTreeMap::from([("userId".to_string(), json!("u-1"))])]);
    let parent = agent.state("s").await.unwrap().unwrap();
    let worker = agent.state(&parent.workers[0]).await.unwrap().expect("the worker's session");
    assert_eq!(worker.metadata, parent.metadata);
}

#[tokio::test]
async fn a_batch_under_way_refuses_metadata_until_it_is_settled() {
    // [whoami, delegate_task, whoami] run one at a time: the first call runs, then the worker
    // freezes on its dangerous call and the parent with it. The rest of that batch runs on
    // resume: a change now would show halfway through it (the worker, started with a copy of
    // the metadata, and the first call for one user, the last call for another).
    let seen = Seen::default();
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let script = Script::new(vec![
        calls(&[
            ("c1", "whoami", "{}"),
            ("p1", "delegate_task", r#"{"task":"wipe"}"#),
            ("c2", "whoami", "{}"),
        ]),
        calls(&[("w1", "wipe", "{}")]),
        answer("wiped"),
        answer("done"),
    ]);
    let config = AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() };
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(script), store.clone())
            .tools(recording_tools(&seen))
            .config(config)
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    agent.set_metadata("s", "userId", json!("alice")).await.unwrap();
    let RunOutcome::Suspended { batch } = run(&agent, "s").await else { panic!("expected a frozen batch") };
    assert!(batch.worker_session.is_some());
    let before = store.load("s").await.unwrap().unwrap();
    let e = agent.set_metadata("s", "userId", json!("bob")).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert!(e.message.contains("middle of a batch"), "{e}");
    assert!(e.message.contains("resume or dismiss it first"), "{e}");
    assert_eq!(store.load("s").await.unwrap().unwrap(), before, "nothing written");

    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    let outcome = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed, "{outcome:?}");
    let users: Vec<Value> = seen.lock().unwrap().iter().map(|m| m["userId"].clone()).collect();
    assert_eq!(users, [json!("alice"), json!("alice"), json!("alice")], "one user for the whole batch");
    // Settled: the change applies.
    agent.set_metadata("s", "userId", json!("bob")).await.unwrap();

    // A session whose run stopped in the middle of a batch (its process died) is refused too.
    let mut died = store.load("s").await.unwrap().unwrap();
    died.session_id = "died".into();
    died.status = RunStatus::Running;
    died.tool_runs.insert("c9".into(), arkagent::state::ToolRunRecord::Started { name: "whoami".into() });
    store.save_snapshot(&died).await.unwrap();
    let e = agent.set_metadata("died", "userId", json!("carol")).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    // Nothing awaits a decision there: the way out named is the one that works (a dismissal is
    // no_pending_approval).
    assert!(e.message.ends_with("resume it (or run it with a new message) first, then set it"), "{e}");
    let dismissed =
        agent.dismiss("died", "moving on", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(dismissed.code, "no_pending_approval", "{dismissed}");
    agent.resume("died", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    agent.set_metadata("died", "userId", json!("carol")).await.unwrap();
}
