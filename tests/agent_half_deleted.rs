//! A deletion cut short (a crash, a store error) deletes a session's workers first and leaves the
//! session itself, to be deleted again (`Agent::delete_session`). Such a session may be frozen on
//! a batch that mirrors a worker that is gone: deciding or resuming it would run the delegation
//! again from scratch in a new worker session (its model asked again, the calls it had made run
//! again). So a decision on it is refused with `session_not_found` naming the gone worker (as
//! `approve` and `deny` document), at any depth of a nested delegation, as are a `dismiss` and a
//! `resume` of it, and nothing is written: deleting it again finishes the job. And before its
//! workers go, a deletion makes a session whose run may go on (`running` after a crash, or
//! frozen) `cancelled`, its batch cleared: cut short, it is not resumed into running its
//! delegations again (`invalid_state`); a new message answers their calls `interrupted`. So is
//! a worker that delegated in turn (a worker can be resumed directly). And a deletion refused
//! because a worker is being written elsewhere changes nothing.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{EventLog, RunOutcome};
use arkagent::state::StateStore;
use arkagent::CancellationSignal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{MemStore, Script};

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

#[tokio::test]
async fn a_session_whose_deletion_was_cut_short_is_neither_decided_nor_resumed() {
    for decided_first in [false, true] {
        let store = Arc::new(MemStore::new());
        let cleared = Arc::new(AtomicUsize::new(0));
        let agent = delegation::clear_agent(store.clone(), &cleared);
        let (batch, worker) = delegation::suspend_in_worker(&agent).await;
        let id = batch.items[0].approval_id.clone();
        if decided_first {
            agent.approve("parent", &id).await.unwrap();
        }
        // The deletion went as far as the worker.
        assert!(store.delete(&worker).await.unwrap());
        let before = store.load("parent").await.unwrap().unwrap();

        if !decided_first {
            let e = agent.approve("parent", &id).await.unwrap_err();
            assert_eq!(e.code, "session_not_found", "{e}");
            assert!(e.message.contains(&worker), "names the worker: {e}");
            assert_eq!(agent.deny("parent", &id, "no").await.unwrap_err().code, "session_not_found");
            let e = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap_err();
            assert_eq!(e.code, "session_not_found", "{e}");
        } else {
            let e = agent.resume("parent", &EventLog::new(), &none()).await.unwrap_err();
            assert_eq!(e.code, "session_not_found", "decided_first {decided_first}: {e}");
            assert!(e.message.contains(&worker), "names the worker: {e}");
        }
        // Nothing was written, no worker was started again.
        assert_eq!(store.load("parent").await.unwrap().unwrap(), before, "decided_first {decided_first}");
        assert_eq!(store.load(&worker).await.unwrap(), None, "decided_first {decided_first}");
        assert_eq!(cleared.load(Ordering::SeqCst), 0);
        // Deleting it again finishes the job.
        assert!(agent.delete_session("parent").await.unwrap());
        assert_eq!(store.load("parent").await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_decision_is_refused_when_the_gone_worker_is_a_worker_of_a_worker() {
    use arkagent::agent::DELEGATE_TASK;
    use support::calls;
    let store = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let script = vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ];
    let agent = delegation::agent(Arc::new(Script::new(script)), store.clone(), &cleared, 2);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let middle = batch.worker_session.clone().unwrap();
    let deepest =
        store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap().worker_session.unwrap();
    // Deepest first: the deletion went as far as the worker's worker.
    assert!(store.delete(&deepest).await.unwrap());
    let (parent, mid) = (store.load("parent").await.unwrap(), store.load(&middle).await.unwrap());
    let e = agent.approve("parent", &batch.items[0].approval_id).await.unwrap_err();
    assert_eq!(e.code, "session_not_found", "{e}");
    assert!(e.message.contains(&deepest), "{e}");
    assert_eq!(store.load("parent").await.unwrap(), parent, "nothing written");
    assert_eq!(store.load(&middle).await.unwrap(), mid, "nothing written");
    assert!(agent.delete_session("parent").await.unwrap());
    assert_eq!(store.load(&middle).await.unwrap(), None);
}

#[tokio::test]
async fn a_run_interrupted_in_its_delegation_and_then_deleted_part_way_never_runs_the_worker_again() {
    use arkagent::agent::DELEGATE_TASK;
    use arkagent::state::{MemoryStore, RunStatus};
    use support::{answer, calls};

    let sent = Arc::new(AtomicUsize::new(0));
    let agent_on = |store, script| sms_agent(store, script, &sent, 1);
    let mem = Arc::new(MemoryStore::new());
    // The worker sends its text and answers; the process dies before the parent saves its batch.
    let dying = agent_on(
        Arc::new(wrapped::DiesAtBatchEnd::wrap(mem.clone(), "parent")),
        vec![
            calls(&[("d1", DELEGATE_TASK, r#"{"task":"notify"}"#)]),
            calls(&[("w1", "send_sms", "{}")]),
            answer("worker done"),
        ],
    );
    let e = dying.run("parent", "q", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(e.code, "state_io");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let parent = mem.load_unrepaired("parent").await.unwrap().unwrap();
    assert_eq!(parent.status, RunStatus::Running, "its delegating call started, never finished");
    let worker = parent.workers[0].clone();

    // A new process deletes the session; the deletion is cut short after the worker.
    let again = agent_on(keeps_one(&mem, "parent"), vec![answer("parent done")]);
    assert_eq!(again.delete_session("parent").await.unwrap_err().code, "state_io");
    assert_eq!(mem.load(&worker).await.unwrap(), None, "the worker went first");
    // The session is still there, no longer resumable: resuming it would run its delegation
    // again from scratch, in a new worker that sends the text a second time.
    let e = again.resume("parent", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the text was sent once");
    assert_eq!(mem.load(&worker).await.unwrap(), None, "no worker started again");
    // A new message answers the delegating call as interrupted, without running it.
    let out = again.run("parent", "and now?", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let texts = support::tool_messages(&mem.load("parent").await.unwrap().unwrap().messages);
    assert!(texts[0].1.contains("tool_interrupted") && texts[0].2, "{texts:?}");
}

#[tokio::test]
async fn a_deletion_refused_because_a_worker_is_busy_leaves_the_session_as_it_was() {
    let store = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::clear_agent(store.clone(), &cleared);
    let (_, worker) = delegation::suspend_in_worker(&agent).await;
    let before = store.load_unrepaired("parent").await.unwrap().unwrap();
    // The worker is being written elsewhere (the app resumed it directly on another agent).
    let held = store.lease(&worker).await.unwrap();
    let e = agent.delete_session("parent").await.unwrap_err();
    assert_eq!(e.code, "session_busy", "{e}");
    // The message names the session asked about, and its worker as the one in use.
    assert!(
        e.message.starts_with(&format!(
            "cannot delete session parent: its worker session {worker} is being written"
        )),
        "{e}"
    );
    // Refused: nothing was deleted, nor changed (its batch still pending, its run resumable).
    assert_eq!(store.load_unrepaired("parent").await.unwrap().unwrap(), before);
    assert!(store.load(&worker).await.unwrap().is_some());
    drop(held);
    assert!(agent.delete_session("parent").await.unwrap());
    assert_eq!(store.load(&worker).await.unwrap(), None);
}

/// An agent with delegation on `store`, answering with `script`, whose one tool `send_sms` counts
/// the texts it sends in `sent`.
fn sms_agent(
    store: Arc<dyn StateStore>,
    script: Vec<arkagent::provider::ModelResponse>,
    sent: &Arc<AtomicUsize>,
    max_delegation_depth: u32,
) -> Arc<arkagent::agent::Agent> {
    use arkagent::agent::{AgentBuilder, AgentConfig};
    use arkagent::tool::FnExecutor;
    use arkagent::{ToolDefinition, ToolRegistry, ToolResult};
    let s = sent.clone();
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("send_sms", "sends a text", serde_json::json!({"type":"object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolResult::text("sent"))
                }
            })),
        )
        .unwrap();
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(Script::new(script)), store)
            .tools(tools)
            .config(AgentConfig { max_delegation_depth, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    agent
}

/// The inner store, whose deletion of one session fails (the process died there).
struct KeepsOne(String);

#[async_trait::async_trait]
impl wrapped::StoreHooks for KeepsOne {
    const FORWARD: wrapped::Forward =
        wrapped::Forward { load_unrepaired: true, ..wrapped::Forward::REQUIRED };

    async fn delete(&self, inner: &dyn StateStore, id: &str) -> Result<bool, arkagent::AgentError> {
        if id == self.0 {
            return Err(arkagent::AgentError::of(arkagent::codes::STATE_IO, "the process died"));
        }
        inner.delete(id).await
    }
}

fn keeps_one(mem: &Arc<arkagent::state::MemoryStore>, id: &str) -> Arc<wrapped::Wrapped<KeepsOne>> {
    Arc::new(wrapped::Wrapped::new(mem.clone(), KeepsOne(id.into())))
}

#[tokio::test]
async fn a_middle_worker_left_running_by_a_deletion_cut_short_never_runs_its_delegation_again() {
    use arkagent::agent::DELEGATE_TASK;
    use arkagent::state::{MemoryStore, RunStatus};
    use support::{answer, calls};

    let sent = Arc::new(AtomicUsize::new(0));
    let agent_on = |store, script| sms_agent(store, script, &sent, 2);
    let mem = Arc::new(MemoryStore::new());
    // The deepest worker sends its text and answers; the process dies before the middle worker
    // saves its batch's end: the parent and the middle worker are both left running.
    let dying = agent_on(
        // A worker that itself delegated (a middle worker) completes a batch.
        Arc::new(wrapped::DiesAtBatchEnd::wrap_when(mem.clone(), |state| {
            state.delegation.is_some() && !state.workers.is_empty()
        })),
        vec![
            calls(&[("d1", DELEGATE_TASK, r#"{"task":"notify"}"#)]),
            calls(&[("d2", DELEGATE_TASK, r#"{"task":"really notify"}"#)]),
            calls(&[("w1", "send_sms", "{}")]),
            answer("deepest done"),
        ],
    );
    assert!(dying.run("parent", "q", &EventLog::new(), &none()).await.is_err());
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let middle = mem.load_unrepaired("parent").await.unwrap().unwrap().workers[0].clone();
    let mid = mem.load_unrepaired(&middle).await.unwrap().unwrap();
    assert_eq!(mid.status, RunStatus::Running, "its delegating call started, never finished");
    let deepest = mid.workers[0].clone();

    // A new process deletes the session; the deletion is cut short after the deepest worker.
    let again = agent_on(
        keeps_one(&mem, &middle),
        vec![calls(&[("w1", "send_sms", "{}")]), answer("deepest again"), answer("middle done")],
    );
    assert_eq!(again.delete_session("parent").await.unwrap_err().code, "state_io");
    assert_eq!(mem.load(&deepest).await.unwrap(), None, "the deepest worker went first");
    // The middle worker, left running, is not resumed (directly) into running its delegation
    // again from scratch in a new worker (its model asked again, the calls it made run again).
    let e = again.resume(&middle, &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert_eq!(mem.load(&deepest).await.unwrap(), None, "no worker started again");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the text was sent once");
}
