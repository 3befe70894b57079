//! What a parent's end leaves of the workers its delegations ran, once a kill stopped them part
//! way: a delegating call answered without its worker's answer (its run cancelled, dismissed or
//! ended before it reached the call) has no reader, so its worker is ended `cancelled` then, not
//! left `running` (listed interrupted for good, and resumable into running its model and tools
//! for nobody). The same for a deletion cut short after it ended the parent. And a worker the
//! parent names but a kill kept from ever being written leaves no directory once the parent is
//! deleted.

#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::state::{AgentState, FileStore, RunStatus, StateEvent, StateStore, LOCK_DIR};
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::{StoreHooks, Wrapped};

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

/// The tools of both "processes": `hang` (never answers: the kill comes while it runs), `wipe`
/// (dangerous), `stop` (cancels `cancel`, the signal of the run the test then resumes), each run
/// counted in `ran`.
fn tools(ran: &Arc<AtomicUsize>, cancel: &CancellationSignal) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    let schema = json!({"type": "object"});
    let counted = |ran: &Arc<AtomicUsize>| {
        let ran = ran.clone();
        move || ran.fetch_add(1, Ordering::SeqCst)
    };
    let count = counted(ran);
    r.register(
        ToolDefinition::new("hang", "never answers", schema.clone()),
        Arc::new(FnExecutor(move |_a: serde_json::Map<String, serde_json::Value>, _c| {
            count();
            async move {
                std::future::pending::<()>().await;
                Ok(ToolResult::text("never"))
            }
        })),
    )
    .unwrap();
    let count = counted(ran);
    r.register(
        ToolDefinition::new("wipe", "dangerous", schema.clone()).with_risk(RiskLevel::Dangerous),
        Arc::new(FnExecutor(move |_a, _c| {
            count();
            async move { Ok(ToolResult::text("wiped")) }
        })),
    )
    .unwrap();
    let (count, cancel) = (counted(ran), cancel.clone());
    r.register(
        ToolDefinition::new("stop", "the user presses stop", schema),
        Arc::new(FnExecutor(move |_a, _c| {
            count();
            cancel.cancel("the user pressed stop");
            async move { Ok(ToolResult::text("stopping")) }
        })),
    )
    .unwrap();
    r
}

fn agent(
    script: Vec<arkagent::provider::ModelResponse>,
    store: Arc<dyn StateStore>,
    tools: ToolRegistry,
) -> Arc<Agent> {
    let config = AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() };
    let agent =
        Arc::new(AgentBuilder::new(Arc::new(Script::new(script)), store).tools(tools).config(config).build());
    agent.enable_delegation(None).unwrap();
    agent
}

/// A process killed while both delegations of `parent`'s batch ran (in parallel), each worker
/// inside its `hang` call: the parent `running` with `d1` and `d2` started, both workers
/// `running` with their call started. The workers, in the order of the parent's calls.
async fn killed_in_two_delegations(store: Arc<dyn StateStore>) -> Vec<String> {
    let ran = Arc::new(AtomicUsize::new(0));
    let script = vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"one"}"#), ("d2", DELEGATE_TASK, r#"{"task":"two"}"#)]),
        calls(&[("k", "hang", "{}")]),
        calls(&[("k", "hang", "{}")]),
    ];
    let config = AgentConfig { max_parallel_tools: 2, ..AgentConfig::default() };
    let model = Arc::new(Script::new(script));
    let first =
        Arc::new(AgentBuilder::new(model, store.clone()).tools(tools(&ran, &none())).config(config).build());
    first.enable_delegation(None).unwrap();
    let (events, signal) = (EventLog::new(), none());
    let run = first.run("parent", "go", &events, &signal);
    let both_inside = async {
        while ran.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::select! {
        out = run => panic!("the run ended: {out:?}"),
        () = both_inside => {}
    }
    // The kill: nothing more is written.
    drop(first);
    let parent = store.load_unrepaired("parent").await.unwrap().unwrap();
    assert_eq!(parent.status, RunStatus::Running);
    assert_eq!(parent.workers.len(), 2);
    for worker in &parent.workers {
        assert_eq!(store.load_unrepaired(worker).await.unwrap().unwrap().status, RunStatus::Running);
    }
    let mut workers = parent.workers.clone();
    // The parent's calls in order: `d1`'s worker is the one whose task is "one".
    let mut by_task = Vec::new();
    for worker in workers.drain(..) {
        let state = store.load_unrepaired(&worker).await.unwrap().unwrap();
        let first = state.messages.iter().find_map(|m| match m {
            arkagent::message::ChatMessage::User { content, .. } => Some(content.clone()),
            _ => None,
        });
        by_task.push((first.unwrap_or_default(), worker));
    }
    by_task.sort();
    by_task.into_iter().map(|(_, w)| w).collect()
}

/// A worker nobody reads any more: ended `cancelled`, no batch, not listed interrupted, and its
/// resume refused (`invalid_state`) without its model or tools.
async fn assert_ended(agent: &Agent, store: &dyn StateStore, worker: &str) {
    let state = store.load(worker).await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Cancelled, "{worker} is not left part way");
    assert!(state.pending_approval.is_none(), "{worker}");
    let listed = agent.list_all_sessions().await.unwrap();
    let summary = listed.iter().find(|s| s.session_id == worker).unwrap();
    assert!(!summary.interrupted, "{worker} is not listed interrupted");
    let refused = agent.resume(worker, &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(refused.code, codes::INVALID_STATE, "{worker}: {refused}");
}

#[tokio::test]
async fn a_cancelled_resume_ends_the_worker_it_never_reached() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let [one, two] = <[String; 2]>::try_from(killed_in_two_delegations(store.clone()).await).unwrap();
    // The next process resumes the parent one call at a time: `d1`'s worker runs on and the user
    // presses stop in it; `d2`'s worker is never reached.
    let (ran, cancel) = (Arc::new(AtomicUsize::new(0)), none());
    let script = vec![calls(&[("s", "stop", "{}")]), answer("for nobody")];
    let second = agent(script, store.clone(), tools(&ran, &cancel));
    let out = second.resume("parent", &EventLog::new(), &cancel).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled, "{out:?}");
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(_, _, is_error)| *is_error), "{results:?}");
    assert!(results[1].1.contains("tool_interrupted"), "d2 is answered without its worker: {results:?}");
    assert_eq!(store.load(&one).await.unwrap().unwrap().status, RunStatus::Cancelled);
    // Before, `d2`'s worker stayed `running`, and its resume ran its model for nobody.
    assert_ended(&second, &*store, &two).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1, "only `stop` ran");
}

#[tokio::test]
async fn a_dismissal_ends_the_worker_of_a_delegation_it_answered_not_run() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let [one, two] = <[String; 2]>::try_from(killed_in_two_delegations(store.clone()).await).unwrap();
    // `d1`'s worker runs on into a dangerous call: the parent freezes on it before `d2`.
    let (ran, cancel) = (Arc::new(AtomicUsize::new(0)), none());
    let script = vec![calls(&[("w", "wipe", "{}")]), answer("for nobody")];
    let second = agent(script, store.clone(), tools(&ran, &cancel));
    let out = second.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.worker_session.as_deref(), Some(one.as_str()));
    let out = second.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert!(results.iter().all(|(_, text, _)| text.contains("tool_not_run")), "{results:?}");
    // Before, `d2`'s worker stayed `running`, answered `tool_not_run` above but resumable.
    assert_ended(&second, &*store, &two).await;
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no call ran");
}

/// A store whose deletion of a session fails: a deletion cut short once it ended what it ends.
struct DeleteFails;

#[async_trait::async_trait]
impl StoreHooks for DeleteFails {
    async fn delete(&self, _inner: &dyn StateStore, session_id: &str) -> Result<bool, AgentError> {
        Err(AgentError::of(codes::STATE_IO, format!("cannot delete {session_id}")))
    }
}

#[tokio::test]
async fn a_deletion_cut_short_leaves_no_worker_part_way_under_an_ended_parent() {
    let inner: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let workers = killed_in_two_delegations(inner.clone()).await;
    let failing: Arc<dyn StateStore> = Arc::new(Wrapped::new(inner.clone(), DeleteFails));
    let ran = Arc::new(AtomicUsize::new(0));
    let deleting = agent(Vec::new(), failing, tools(&ran, &none()));
    let e = deleting.delete_session("parent").await.unwrap_err();
    assert_eq!(e.code, codes::STATE_IO, "{e}");
    assert_eq!(inner.load("parent").await.unwrap().unwrap().status, RunStatus::Cancelled);
    // Before, only the sessions that delegated were ended: each worker stayed `running` under
    // its cancelled parent, and its resume ran its model for nobody.
    let next = agent(vec![answer("for nobody"), answer("for nobody")], inner.clone(), tools(&ran, &none()));
    for worker in &workers {
        assert_ended(&next, &*inner, worker).await;
    }
    // Deleting it again finishes the job.
    assert!(next.delete_session("parent").await.unwrap());
    assert!(inner.list().await.unwrap().is_empty());
}

/// What a kill between the parent's record of a delegation and its worker's first save leaves on
/// files: the parent names the worker, whose directory was made (the first commit makes it
/// before its first file) and holds nothing.
async fn named_but_never_written(root: &std::path::Path, worker: &str) -> Arc<Agent> {
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
    let ran = Arc::new(AtomicUsize::new(0));
    let a = agent(vec![answer("hello")], store.clone(), tools(&ran, &none()));
    a.run("parent", "hi", &EventLog::new(), &none()).await.unwrap();
    let mut parent: AgentState = store.load_unrepaired("parent").await.unwrap().unwrap();
    let started = StateEvent::ToolStarted {
        call_id: "d1".into(),
        name: DELEGATE_TASK.into(),
        worker_session: Some(worker.into()),
    };
    parent.apply(&started);
    store.commit(&parent, &[started]).await.unwrap();
    std::fs::create_dir(root.join(worker)).unwrap();
    a
}

#[tokio::test]
async fn a_worker_named_but_never_written_leaves_no_directory_once_its_parent_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = named_but_never_written(root, "wnever").await;
    assert!(a.list_all_sessions().await.unwrap().iter().all(|s| s.session_id != "wnever"));
    assert!(a.delete_session("parent").await.unwrap());
    assert!(!root.join("wnever").exists(), "the worker's empty directory went with its parent");
    assert!(!root.join(LOCK_DIR).join("wnever").exists(), "no lock file of it is left");
    assert!(!root.join("parent").exists());
}

#[tokio::test]
async fn a_worker_directory_holding_the_apps_files_stays_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = named_but_never_written(root, "wnever").await;
    std::fs::write(root.join("wnever").join("notes.txt"), "the app's").unwrap();
    assert!(a.delete_session("parent").await.unwrap());
    let notes = std::fs::read_to_string(root.join("wnever").join("notes.txt")).unwrap();
    assert_eq!(notes, "the app's", "deletions keep the app's files");
    assert!(!root.join(LOCK_DIR).join("wnever").exists(), "no lock file of it is left");
}
