//! Session leases: two agents (or processes) sharing a state directory never interleave two
//! histories in one session. The second writer is refused with `session_busy`; a store notices a
//! session another store changed (appended to, compacted, deleted) before it writes again.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::message::ChatMessage;
use arkagent::state::{FileStore, FileStoreOptions, RunStatus, StateStore, LOCK_DIR};
use arkagent::tool::FnExecutor;
use arkagent::{AgentError, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, MemStore, Script};
use tokio::sync::Notify;

/// Holds a call of the `slow` tool until the test releases it, so a test knows a run is inside
/// its tool call (and holds its lease) without guessing with sleeps.
#[derive(Default)]
struct Gate {
    entered: Notify,
    release: Notify,
}

impl Gate {
    /// Waits until a call entered the tool.
    async fn entered(&self) {
        self.entered.notified().await;
    }

    /// Lets the call finish.
    fn release(&self) {
        self.release.notify_one();
    }

    /// Runs `f` once a call is inside the tool, then lets that call finish.
    async fn while_inside<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.entered().await;
        let out = f.await;
        self.release();
        out
    }
}

/// The `slow` tool: held at `gate` if there is one, else it answers at once.
fn tools(gate: Option<Arc<Gate>>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("slow", "takes a while", json!({"type": "object"})),
        Arc::new(FnExecutor(move |_args: serde_json::Map<String, serde_json::Value>, _ctx| {
            let gate = gate.clone();
            async move {
                if let Some(gate) = gate {
                    gate.entered.notify_one();
                    gate.release.notified().await;
                }
                Ok(ToolResult::text("done"))
            }
        })),
    )
    .unwrap();
    r
}

/// An agent whose model, at each of its (up to three) turns, calls `slow` once (call id
/// `<tag>1`), then answers `answer <tag>`.
fn gated_agent(store: Arc<dyn StateStore>, tag: &str, gate: Option<Arc<Gate>>) -> Agent {
    let turn = [calls(&[(&format!("{tag}1"), "slow", "{}")]), answer(&format!("answer {tag}"))];
    let model = Arc::new(Script::new(turn.iter().cycle().take(6).cloned()));
    AgentBuilder::new(model, store).tools(tools(gate)).config(AgentConfig::default()).build()
}

fn agent(store: Arc<dyn StateStore>, tag: &str) -> Agent {
    gated_agent(store, tag, None)
}

async fn run(agent: &Agent, session: &str, input: &str) -> Result<RunOutcome, AgentError> {
    agent.run(session, input, &EventLog::new(), &CancellationSignal::new()).await
}

/// The texts of the user and final assistant messages, in order.
fn texts(messages: &[ChatMessage]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } => Some(content.clone()),
            ChatMessage::Assistant { content: Some(c), .. } => Some(c.clone()),
            _ => None,
        })
        .collect()
}

async fn saved(root: &Path, session: &str) -> Vec<String> {
    let state = FileStore::new(root).load(session).await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    texts(&state.messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_on_one_state_dir_never_interleave_a_session() {
    let dir = tempfile::tempdir().unwrap();
    // Two stores over one directory: what two Agent objects of an app (or two processes) have.
    let gate = Arc::new(Gate::default());
    let a = gated_agent(Arc::new(FileStore::new(dir.path())), "a", Some(Arc::clone(&gate)));
    let b = agent(Arc::new(FileStore::new(dir.path())), "b");
    let (ra, rb) = tokio::join!(run(&a, "s", "from a"), gate.while_inside(run(&b, "s", "from b")));
    assert_eq!(ra.unwrap().status(), RunStatus::Completed);
    let e = rb.unwrap_err();
    assert_eq!((e.code.as_ref(), e.layer), ("session_busy", arkagent::ErrorLayer::Persistence), "{e}");
    // The refused run wrote nothing; the winner's conversation is whole.
    assert_eq!(saved(dir.path(), "s").await, ["from a", "answer a"]);
    // Once the first run is over, the second agent may write: its turn follows the first one's.
    assert_eq!(run(&b, "s", "from b").await.unwrap().status(), RunStatus::Completed);
    assert_eq!(saved(dir.path(), "s").await, ["from a", "answer a", "from b", "answer b"]);
    // Other sessions are never blocked by a busy one.
    let (r1, r2) = tokio::join!(run(&a, "s", "again a"), gate.while_inside(run(&b, "t", "other b")));
    assert_eq!(r1.unwrap().status(), RunStatus::Completed);
    assert_eq!(r2.unwrap().status(), RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_never_appends_after_another_stores_compaction() {
    let dir = tempfile::tempdir().unwrap();
    // Every commit of `b` folds the journal into a new snapshot generation.
    let tiny = FileStoreOptions { compact_min_bytes: 1, ..FileStoreOptions::default() };
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    let b = agent(Arc::new(FileStore::with_options(dir.path(), tiny)), "b");
    run(&a, "s", "one").await.unwrap();
    run(&b, "s", "two").await.unwrap();
    // `a` still holds the journal of the generation `b` compacted past: it must reopen the session
    // rather than append where no load will look.
    run(&a, "s", "three").await.unwrap();
    assert_eq!(saved(dir.path(), "s").await, ["one", "answer a", "two", "answer b", "three", "answer a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_by_another_process_refuses_the_run_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    run(&a, "s", "first").await.unwrap();
    // Another process takes the session's lock file (flock(1), the same kind of lock).
    let lock = dir.path().join(LOCK_DIR).join("s");
    assert!(lock.is_file(), "the lease's lock file is {}", lock.display());
    let mut holder = std::process::Command::new("flock")
        .args(["--exclusive", "--no-fork"])
        .arg(&lock)
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1) from util-linux");
    // Wait until the other process holds the lock.
    let probe = FileStore::new(dir.path());
    let mut busy = None;
    for _ in 0..200 {
        match probe.lease("s").await {
            Err(e) => {
                busy = Some(e);
                break;
            }
            Ok(lease) => drop(lease),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(busy.expect("the other process never took the lock").code, "session_busy");
    let e = run(&a, "s", "second").await.unwrap_err();
    assert_eq!(e.code, "session_busy");
    let e = a.delete_session("s").await.unwrap_err();
    assert_eq!(e.code, "session_busy");
    // The kernel releases the lock of a process that died.
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(run(&a, "s", "second").await.unwrap().status(), RunStatus::Completed);
    assert_eq!(saved(dir.path(), "s").await, ["first", "answer a", "second", "answer a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_memory_store_refuses_a_second_writer_too() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let gate = Arc::new(Gate::default());
    let a = gated_agent(Arc::clone(&store), "a", Some(Arc::clone(&gate)));
    let b = agent(Arc::clone(&store), "b");
    let (ra, rb) = tokio::join!(run(&a, "s", "from a"), gate.while_inside(run(&b, "s", "from b")));
    assert_eq!(ra.unwrap().status(), RunStatus::Completed);
    assert_eq!(rb.unwrap_err().code, "session_busy");
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(texts(&state.messages), ["from a", "answer a"]);
    // The lease went with the run: the next writer is let in.
    assert_eq!(run(&b, "s", "from b").await.unwrap().status(), RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_session_is_not_deleted_under_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let a = Arc::new(gated_agent(Arc::new(FileStore::new(dir.path())), "a", Some(Arc::clone(&gate))));
    let runner = Arc::clone(&a);
    let running = tokio::spawn(async move { run(&runner, "s", "keep me").await });
    gate.entered().await;
    let e = a.delete_session("s").await.unwrap_err();
    assert_eq!(e.code, "session_busy");
    assert!(e.message.contains("cancel"), "{e}");
    gate.release();
    assert_eq!(running.await.unwrap().unwrap().status(), RunStatus::Completed);
    assert_eq!(saved(dir.path(), "s").await, ["keep me", "answer a"]);
    assert!(a.delete_session("s").await.unwrap());
    assert!(!a.delete_session("s").await.unwrap());
    assert!(FileStore::new(dir.path()).load("s").await.unwrap().is_none());
}
