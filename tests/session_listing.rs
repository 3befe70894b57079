//! Listing the sessions a store holds (`StateStore::list`, `Agent::list_sessions`): what a chat app
//! shows after a restart. On a `FileStore`: the trash, the lock directory, names no session id can
//! take and directories a first commit cut short are not sessions; a corrupt session or one a
//! newer version wrote is listed with its error, never failing the listing; worker sessions are
//! left out of the conversations (listed with their parent by `list_all_sessions`); a deleted
//! session is gone; a run a kill cut short is `interrupted` and `resume` continues it, and in
//! corner states the summary says what `resume` does (it follows the run's phase, not the status
//! alone); a session another store, agent or process holds now is `busy`, not interrupted.
//! Listing writes nothing and takes no lease. The same on a `MemoryStore`; a store that does not
//! list refuses with `state_list_unsupported`.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped_store;

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome, SessionSummary, DELEGATE_TASK};
use arkagent::error::codes;
use arkagent::provider::{ChatModel, ChatRequest, ModelEventStream, ModelResponse};
use arkagent::state::codec::encode_snapshot;
use arkagent::state::{
    AgentState, FileStore, MemoryStore, RunStatus, SessionLease, StateEvent, StateStore, LOCK_DIR, TRASH_DIR,
};
use arkagent::{AgentError, CancellationSignal, ChatMessage};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use support::{answer, calls, Script};
use wrapped_store::{StoreHooks, Wrapped};

fn agent_on(store: Arc<dyn StateStore>, script: Vec<ModelResponse>) -> Arc<Agent> {
    delegation::agent(Arc::new(Script::new(script)), store, &Arc::new(AtomicUsize::new(0)), 1)
}

async fn run(agent: &Agent, session: &str, input: &str) -> RunOutcome {
    agent.run(session, input, &EventLog::new(), &CancellationSignal::new()).await.unwrap()
}

fn ids(list: &[SessionSummary]) -> Vec<&str> {
    list.iter().map(|s| s.session_id.as_str()).collect()
}

fn entry<'a>(list: &'a [SessionSummary], id: &str) -> &'a SessionSummary {
    list.iter().find(|s| s.session_id == id).unwrap_or_else(|| panic!("{id} not in {:?}", ids(list)))
}

/// Every path under `root` with its size and modification time: what a read-only call must leave
/// as it was.
fn tree(root: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let key = entry.path().strip_prefix(root).unwrap().display().to_string();
            out.insert(key, (meta.len(), meta.modified().unwrap()));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    out
}

/// A model that never answers: a run on it stands `running` until its future is dropped (as a
/// killed process leaves it).
struct Hang;

#[async_trait]
impl ChatModel for Hang {
    async fn complete(&self, _request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        std::future::pending().await
    }

    async fn stream(&self, _request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_file_store_lists_its_conversations_sorted_with_their_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let script = vec![
        answer("你好"),
        answer("好的"),
        calls(&[("c1", "clear_baking_cache", "{}")]), // the third session freezes on it
    ];
    let agent = agent_on(store.clone(), script);
    assert!(agent.list_sessions().await.unwrap().is_empty(), "an empty root lists nothing");
    run(&agent, "chat-b", "第一个问题").await;
    run(&agent, "chat-a", &format!("{}\n第二行", "长".repeat(100))).await;
    let outcome = run(&agent, "chat-c", "清空缓存").await;
    assert!(matches!(outcome, RunOutcome::Suspended { .. }), "{outcome:?}");

    assert_eq!(store.list().await.unwrap(), ["chat-a", "chat-b", "chat-c"]);
    let list = agent.list_sessions().await.unwrap();
    assert_eq!(ids(&list), ["chat-a", "chat-b", "chat-c"]);
    let b = entry(&list, "chat-b");
    assert_eq!(b.status, Some(RunStatus::Completed));
    assert_eq!(b.title.as_deref(), Some("第一个问题"));
    assert_eq!(b.message_count, 2, "the question and the answer");
    assert_eq!(b.last_message.as_deref(), Some("你好"), "the answer is the preview");
    assert_eq!(b.run_error, None);
    assert!(!b.approval_pending && !b.interrupted && b.error.is_none() && b.parent_session.is_none());
    let a = entry(&list, "chat-a");
    let title = a.title.as_deref().unwrap();
    assert_eq!(title.chars().count(), arkagent::agent::SESSION_TITLE_CHARS);
    assert!(title.starts_with("长长") && title.ends_with('…'), "{title}");
    let c = entry(&list, "chat-c");
    assert_eq!(c.status, Some(RunStatus::AwaitingApproval));
    assert!(c.approval_pending && !c.interrupted);
    // The time of the session's last write, from its files.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    for s in &list {
        let at = s.updated_at_ms.unwrap_or_else(|| panic!("{} has no time", s.session_id));
        assert!(at <= now + 1000 && at + 60_000 > now, "{}: {at} vs {now}", s.session_id);
    }
    // Its serialised shape (what the bindings read): snake_case keys, absent fields null.
    let json = serde_json::to_value(c).unwrap();
    assert_eq!(json["session_id"], "chat-c");
    assert_eq!(json["status"], "awaiting_approval");
    assert_eq!(json["approval_pending"], true);
    assert_eq!(json["error"], serde_json::Value::Null);
}

#[tokio::test]
async fn trash_locks_stray_names_and_half_created_directories_are_not_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Arc::new(FileStore::new(root));
    let agent = agent_on(store.clone(), vec![answer("ok")]);
    run(&agent, "real", "hi").await;
    // A session's lease leaves its lock file while the session exists.
    assert!(root.join(LOCK_DIR).join("real").exists());
    // What a deletion killed between its rename and its removal leaves in the trash.
    let grave = root.join(TRASH_DIR).join("gone.0123456789abcdef");
    std::fs::create_dir_all(&grave).unwrap();
    std::fs::copy(
        std::fs::read_dir(root.join("real")).unwrap().next().unwrap().unwrap().path(),
        grave.join("snapshot-00000000000000000001.ark"),
    )
    .unwrap();
    // A first commit cut short: its journal made, its snapshot still a temp file.
    let half = root.join("half");
    std::fs::create_dir(&half).unwrap();
    std::fs::write(half.join("journal-00000000000000000001.ark"), b"").unwrap();
    std::fs::write(half.join("snapshot-00000000000000000001.tmp"), b"partial").unwrap();
    std::fs::create_dir(root.join("empty")).unwrap();
    // A name no session id can take, and a file that is no directory.
    std::fs::create_dir(root.join("a..b")).unwrap();
    std::fs::copy(
        grave.join("snapshot-00000000000000000001.ark"),
        root.join("a..b").join("snapshot-00000000000000000001.ark"),
    )
    .unwrap();
    std::fs::write(root.join("notes.txt"), b"not a session").unwrap();
    // Loads agree: the half-created directories hold no session.
    assert_eq!(store.load("half").await.unwrap(), None);
    assert_eq!(store.load("empty").await.unwrap(), None);

    assert_eq!(store.list().await.unwrap(), ["real"]);
    // The first listing swept the trash (and only the trash).
    assert_eq!(std::fs::read_dir(root.join(TRASH_DIR)).unwrap().count(), 0, "the trash is swept");
    assert!(half.exists() && root.join("a..b").exists() && root.join("notes.txt").exists());
    assert_eq!(ids(&agent.list_all_sessions().await.unwrap()), ["real"]);

    // A trash left after the first listing is swept by the next deletion or an open.
    std::fs::create_dir_all(&grave).unwrap();
    assert_eq!(store.list().await.unwrap(), ["real"]);
    assert!(grave.exists(), "swept once per store");
    let reopened = FileStore::open(root, Default::default()).await.unwrap();
    assert!(!grave.exists(), "open sweeps the trash");
    assert_eq!(reopened.list().await.unwrap(), ["real"]);
    std::fs::create_dir_all(&grave).unwrap();
    assert_eq!(reopened.sweep_trash().await.unwrap(), 1);
    assert!(!grave.exists());

    // A root that does not exist holds no session, and listing does not create it.
    let missing = root.join("nowhere");
    assert!(FileStore::new(&missing).list().await.unwrap().is_empty());
    assert!(!missing.exists());
}

#[tokio::test]
async fn an_unreadable_session_is_listed_with_its_error_and_the_others_still_are() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
    let agent = agent_on(store.clone(), vec![answer("a"), answer("b")]);
    run(&agent, "fine", "hello").await;
    run(&agent, "broken", "hello").await;
    for entry in std::fs::read_dir(root.join("broken")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ark") {
            std::fs::write(&path, b"garbage that is no snapshot").unwrap();
        }
    }
    // A session a newer version wrote.
    let mut newer = AgentState::new("newer");
    newer.schema_version = 99;
    std::fs::create_dir(root.join("newer")).unwrap();
    std::fs::write(
        root.join("newer").join("snapshot-00000000000000000001.ark"),
        encode_snapshot(&newer).unwrap(),
    )
    .unwrap();

    let list = agent.list_sessions().await.unwrap();
    assert_eq!(ids(&list), ["broken", "fine", "newer"]);
    let broken = entry(&list, "broken");
    assert_eq!(broken.error.as_ref().map(|e| e.code.as_ref()), Some(codes::STATE_CORRUPT));
    assert_eq!((broken.status, broken.message_count, broken.title.as_deref()), (None, 0, None));
    assert!(broken.updated_at_ms.is_some(), "its files still tell when they were written");
    let newer = entry(&list, "newer");
    assert_eq!(newer.error.as_ref().map(|e| e.code.as_ref()), Some(codes::STATE_VERSION_UNSUPPORTED));
    assert_eq!(entry(&list, "fine").status, Some(RunStatus::Completed));
    assert!(entry(&list, "fine").error.is_none());
    let json = serde_json::to_value(broken).unwrap();
    assert_eq!(json["error"]["code"], "state_corrupt");
    assert_eq!(json["error"]["layer"], "persistence");

    // The app deletes the damaged one; it is gone from the listing.
    assert!(agent.delete_session("broken").await.unwrap());
    assert_eq!(ids(&agent.list_sessions().await.unwrap()), ["fine", "newer"]);
}

/// The time a `FileStore` lists for a session is that of the files a load reads: files of the
/// app's own in the session's directory (a `state.json` that is not the session's, a name of the
/// store's pattern that is none of its files), written later, do not change it, and a directory
/// holding only such files has no time, as it has no state.
#[tokio::test]
async fn the_listed_time_is_that_of_the_store_s_files_not_of_the_app_s_own() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Arc::new(FileStore::new(root));
    let agent = agent_on(store.clone(), vec![answer("a")]);
    run(&agent, "s", "hello").await;
    let written = store.updated_at_ms("s").await.unwrap().expect("the session's files tell a time");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let app_file = |path: std::path::PathBuf, text: &str| {
        std::fs::write(&path, text).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(later).unwrap();
    };
    app_file(root.join("s").join("state.json"), r#"{"theme":"dark"}"#);
    app_file(root.join("s").join("snapshot-notes.ark"), "the app's");
    assert_eq!(store.updated_at_ms("s").await.unwrap(), Some(written));
    assert_eq!(entry(&agent.list_sessions().await.unwrap(), "s").updated_at_ms, Some(written));
    // A directory of the app's own: no state, no time.
    std::fs::create_dir(root.join("prefs")).unwrap();
    app_file(root.join("prefs").join("state.json"), r#"{"sessionId":"someone-else"}"#);
    assert_eq!(store.load("prefs").await.unwrap(), None);
    assert_eq!(store.updated_at_ms("prefs").await.unwrap(), None);
}

#[tokio::test]
async fn listing_writes_nothing_and_takes_no_lease() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
    let agent = agent_on(store.clone(), vec![answer("a")]);
    run(&agent, "done", "hello").await;
    // A session cut short mid-call (`running`, a started call without a result): a load repairs
    // it in memory; the listing must not make that repair durable.
    let mut cut = AgentState::new("cut");
    let events = [
        StateEvent::RunStarted { run_id: "r1".into(), delegation: None },
        StateEvent::MessageAppended { message: ChatMessage::user("clear it") },
        StateEvent::MessageAppended {
            message: ChatMessage::Assistant {
                content: None,
                reasoning_content: None,
                tool_calls: vec![arkagent::ToolCall::new("c1", "clear_baking_cache", "{}")],
            },
        },
        StateEvent::ToolStarted {
            call_id: "c1".into(),
            name: "clear_baking_cache".into(),
            worker_session: None,
        },
    ];
    events.iter().for_each(|e| cut.apply(e));
    store.commit(&cut, &events).await.unwrap();
    let _ = agent.list_sessions().await.unwrap(); // a first listing may sweep the trash
    let before = tree(root);
    let list = agent.list_all_sessions().await.unwrap();
    assert_eq!(tree(root), before, "the listing changed files");
    let cut_entry = entry(&list, "cut");
    assert_eq!(cut_entry.message_count, 3, "read repaired (the interrupted result counted)");
    assert_eq!(store.load_unrepaired("cut").await.unwrap().unwrap().messages.len(), 2, "stored as it was");
    // No lease is held or left: every session can be leased at once after the listing.
    let leases: Vec<SessionLease> =
        vec![store.lease("done").await.unwrap(), store.lease("cut").await.unwrap()];
    drop(leases);
}

#[tokio::test]
async fn a_run_a_kill_cut_short_is_interrupted_and_resume_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        // The "process" that dies: its run's future is dropped while the model is asked.
        let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
        let agent = Arc::new(AgentBuilder::new(Arc::new(Hang), store).build());
        let running = {
            let agent = agent.clone();
            tokio::spawn(async move {
                agent.run("trip", "plan my trip", &EventLog::new(), &CancellationSignal::new()).await
            })
        };
        // While its run goes on here, the session is running, not interrupted.
        let mut seen = None;
        for _ in 0..200 {
            let list = agent.list_sessions().await.unwrap();
            if let Some(s) = list.into_iter().find(|s| s.session_id == "trip") {
                seen = Some(s);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let seen = seen.expect("the run's first commit is listed");
        assert_eq!(seen.status, Some(RunStatus::Running));
        assert!(!seen.interrupted, "this agent is running it");
        running.abort();
        assert!(running.await.unwrap_err().is_cancelled());
    }
    // The app starts again: a fresh store and agent over the same directory.
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
    let agent = agent_on(store.clone(), vec![answer("去杭州")]);
    let list = agent.list_sessions().await.unwrap();
    let trip = entry(&list, "trip");
    assert_eq!(trip.status, Some(RunStatus::Running));
    assert!(trip.interrupted && !trip.approval_pending, "{trip:?}");
    assert_eq!(trip.title.as_deref(), Some("plan my trip"));
    // The app offers "Continue": resume finishes the run.
    let outcome = agent.resume("trip", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);
    let trip = agent.list_sessions().await.unwrap().into_iter().find(|s| s.session_id == "trip").unwrap();
    assert_eq!(trip.status, Some(RunStatus::Completed));
    assert!(!trip.interrupted);
    assert_eq!(trip.message_count, 2);
}

#[tokio::test]
async fn a_run_that_failed_says_why_in_its_summary() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    // The script runs out at the first round: the run fails with the model's error.
    let agent = agent_on(store, vec![]);
    let outcome = run(&agent, "s", "anyone there?").await;
    let RunOutcome::Finished { status: RunStatus::Failed, error: Some(e), .. } = outcome else {
        panic!("not failed: {outcome:?}")
    };
    let s = agent.list_sessions().await.unwrap().remove(0);
    assert_eq!(s.status, Some(RunStatus::Failed));
    assert_eq!(s.run_error.as_ref().map(|r| r.code.as_ref()), Some(e.code.as_ref()));
    assert_eq!(s.error, None, "the session itself reads fine");
    assert_eq!(s.last_message.as_deref(), Some("anyone there?"));
    assert!(!s.interrupted, "a failed run is over: nothing to continue");
}

#[tokio::test]
async fn a_batch_decided_but_not_resumed_is_interrupted_not_pending() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let agent = agent_on(store, vec![calls(&[("c1", "clear_baking_cache", "{}")]), answer("cleared")]);
    let RunOutcome::Suspended { batch } = run(&agent, "s", "清空").await else { panic!("not suspended") };
    let s = agent.list_sessions().await.unwrap().remove(0);
    assert!(s.approval_pending && !s.interrupted);
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    // The app died before resuming: nothing to decide, the run waits to be continued.
    let s = agent.list_sessions().await.unwrap().remove(0);
    assert_eq!(s.status, Some(RunStatus::AwaitingApproval));
    assert!(!s.approval_pending && s.interrupted, "{s:?}");
    let outcome = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);
}

#[tokio::test]
async fn worker_sessions_are_listed_only_with_their_parent_and_go_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let script = vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清空缓存"}"#)]), // parent
        calls(&[("w1", "clear_baking_cache", "{}")]),              // worker: freezes
    ];
    let agent = agent_on(store.clone(), script);
    let outcome = run(&agent, "parent", "请让助手清空缓存").await;
    assert!(matches!(outcome, RunOutcome::Suspended { .. }), "{outcome:?}");
    let workers = agent.state("parent").await.unwrap().unwrap().workers;
    assert_eq!(workers.len(), 1);
    let worker = workers[0].as_str();

    let top = agent.list_sessions().await.unwrap();
    assert_eq!(ids(&top), ["parent"], "a chat app lists conversations, not workers");
    assert!(top[0].approval_pending);
    let all = agent.list_all_sessions().await.unwrap();
    let mut expected = vec!["parent", worker];
    expected.sort();
    assert_eq!(ids(&all), expected);
    let w = entry(&all, worker);
    assert_eq!(w.parent_session.as_deref(), Some("parent"));
    assert_eq!(w.title.as_deref(), Some("清空缓存"), "the worker's question is its task");
    assert!(w.approval_pending);

    // Deleting the parent deletes its worker: both are gone from every listing.
    assert!(agent.delete_session("parent").await.unwrap());
    assert!(agent.list_all_sessions().await.unwrap().is_empty());
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_worker_saved_without_its_delegation_is_known_by_the_parent_naming_it() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    // A parent and its worker as a version before `delegation` saved them.
    let mut parent = AgentState::new("p");
    parent.messages.push(ChatMessage::user("q"));
    parent.workers = vec!["w-old".into()];
    parent.status = RunStatus::Completed;
    store.save_snapshot(&parent).await.unwrap();
    let mut worker = AgentState::new("w-old");
    worker.status = RunStatus::Completed;
    store.save_snapshot(&worker).await.unwrap();
    store.save_snapshot(&AgentState::new("other")).await.unwrap();
    let agent = agent_on(store, vec![]);
    assert_eq!(ids(&agent.list_sessions().await.unwrap()), ["other", "p"]);
    let all = agent.list_all_sessions().await.unwrap();
    assert_eq!(entry(&all, "w-old").parent_session.as_deref(), Some("p"));
    assert_eq!(entry(&all, "other").status, Some(RunStatus::Idle));
    assert_eq!(entry(&all, "other").title, None);
}

#[tokio::test]
async fn a_memory_store_lists_what_it_holds_and_forgets_what_is_deleted() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent_on(store.clone(), vec![answer("1"), answer("2")]);
    assert!(store.list().await.unwrap().is_empty());
    run(&agent, "z", "last").await;
    run(&agent, "m", "middle").await;
    assert_eq!(store.list().await.unwrap(), ["m", "z"]);
    let list = agent.list_sessions().await.unwrap();
    assert_eq!(ids(&list), ["m", "z"]);
    let (m, z) = (entry(&list, "m"), entry(&list, "z"));
    assert!(m.updated_at_ms.is_some() && z.updated_at_ms.is_some());
    assert!(m.updated_at_ms >= z.updated_at_ms, "m was written after z");
    assert_eq!(m.title.as_deref(), Some("middle"));
    assert!(agent.delete_session("z").await.unwrap());
    assert_eq!(ids(&agent.list_sessions().await.unwrap()), ["m"]);
    assert_eq!(store.updated_at_ms("z").await.unwrap(), None);
    assert_eq!(store.updated_at_ms("../x").await.unwrap_err().code, codes::SESSION_ID_INVALID);
}

/// A store of an app written before `list` existed: every other method, `list` left out.
struct OldStore(MemoryStore);

#[async_trait]
impl StateStore for OldStore {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        self.0.load(session_id).await
    }
    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        self.0.commit(state, events).await
    }
    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        self.0.save_snapshot(state).await
    }
    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        self.0.delete(session_id).await
    }
}

#[tokio::test]
async fn a_store_that_cannot_list_says_so_instead_of_listing_nothing() {
    let store = Arc::new(OldStore(MemoryStore::new()));
    let agent = agent_on(store.clone(), vec![answer("1")]);
    run(&agent, "s", "hi").await;
    let err = agent.list_sessions().await.unwrap_err();
    assert_eq!(err.code, codes::STATE_LIST_UNSUPPORTED);
    assert_eq!(err.layer, arkagent::ErrorLayer::Persistence);
    assert_eq!(store.updated_at_ms("s").await.unwrap(), None, "the default knows no time");
}

#[tokio::test]
async fn a_worker_whose_parent_is_gone_is_listed_so_the_app_can_delete_it() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let script = vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清空缓存"}"#)]), // parent
        calls(&[("w1", "clear_baking_cache", "{}")]),              // worker: freezes
    ];
    let agent = agent_on(store.clone(), script);
    run(&agent, "parent", "请让助手清空缓存").await;
    let worker = agent.state("parent").await.unwrap().unwrap().workers[0].clone();
    assert_eq!(ids(&agent.list_sessions().await.unwrap()), ["parent"]);
    // The parent gone without its worker (as a deletion of a parent no load read leaves it).
    assert!(store.delete("parent").await.unwrap());
    let top = agent.list_sessions().await.unwrap();
    assert_eq!(ids(&top), [worker.as_str()], "an orphan is no longer hidden behind a parent");
    assert_eq!(top[0].parent_session.as_deref(), Some("parent"));
    assert!(agent.delete_session(&worker).await.unwrap());
    assert!(agent.list_all_sessions().await.unwrap().is_empty());
}

/// Corner states a crash between two commits, or an older version, may leave: the summary says
/// what `resume` does with them (it follows the run's `machine::phase`), whatever the status alone
/// suggests.
mod resume_agrees {
    use super::*;
    use arkagent::agent::machine::{phase, Phase};
    use arkagent::provider::ScriptedModel;

    /// An agent on `store` replaying `script`, with the model kept to count what it was asked.
    fn agent_counting(
        store: Arc<dyn StateStore>,
        script: Vec<ModelResponse>,
    ) -> (Arc<Agent>, Arc<ScriptedModel>) {
        let model = Arc::new(ScriptedModel::new(script));
        (delegation::agent(model.clone(), store, &Arc::new(AtomicUsize::new(0)), 1), model)
    }

    /// A session saved as is: `status` over `messages`, no batch.
    async fn saved(store: &dyn StateStore, id: &str, status: RunStatus, messages: Vec<ChatMessage>) {
        let mut state = AgentState::new(id);
        state.status = status;
        state.run_id = Some("r1".into());
        state.messages = messages;
        store.save_snapshot(&state).await.unwrap();
    }

    async fn summary(agent: &Agent, id: &str) -> SessionSummary {
        entry(&agent.list_all_sessions().await.unwrap(), id).clone()
    }

    async fn resume(agent: &Agent, id: &str) -> Result<RunOutcome, AgentError> {
        agent.resume(id, &EventLog::new(), &CancellationSignal::new()).await
    }

    fn stock_call() -> ChatMessage {
        ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: vec![arkagent::ToolCall::new("c1", "query_stock", r#"{"sku":"egg"}"#)],
        }
    }

    #[tokio::test]
    async fn awaiting_approval_without_a_batch_is_interrupted_when_resume_continues_it() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let user = || ChatMessage::user("how many eggs?");
        // The status says "awaiting approval", but no batch is frozen: nothing to decide. Resume
        // goes on from the history: asks the model (after answering the last answer's calls), or
        // completes with the answer that came.
        saved(&*store, "ask", RunStatus::AwaitingApproval, vec![user()]).await;
        saved(
            &*store,
            "answered",
            RunStatus::AwaitingApproval,
            vec![user(), ChatMessage::assistant_text("12")],
        )
        .await;
        saved(&*store, "calls", RunStatus::AwaitingApproval, vec![user(), stock_call()]).await;
        let (agent, model) = agent_counting(store.clone(), vec![answer("three"), answer("12 left")]);
        for id in ["ask", "answered", "calls"] {
            let s = summary(&agent, id).await;
            assert_eq!(s.status, Some(RunStatus::AwaitingApproval));
            assert!(s.interrupted && !s.approval_pending, "{id}: resume continues it: {s:?}");
        }

        let out = resume(&agent, "ask").await.unwrap();
        assert_eq!((out.status(), model.requests().len()), (RunStatus::Completed, 1), "the model was asked");
        let out = resume(&agent, "answered").await.unwrap();
        let RunOutcome::Finished { status: RunStatus::Completed, final_text, .. } = out else {
            panic!("{out:?}")
        };
        assert_eq!(final_text.as_deref(), Some("12"), "completed with the answer that came");
        assert_eq!(model.requests().len(), 1, "without asking the model");
        // The call of a batch no status says was running is answered as not run (never run
        // blind), and the model is asked with that answer.
        let out = resume(&agent, "calls").await.unwrap();
        assert_eq!((out.status(), model.requests().len()), (RunStatus::Completed, 2));
        let state = agent.state("calls").await.unwrap().unwrap();
        let results = support::tool_messages(&state.messages);
        assert_eq!(results.len(), 1);
        assert!(results[0].2 && results[0].1.contains("did not run"), "{results:?}");
        for id in ["ask", "answered", "calls"] {
            let s = summary(&agent, id).await;
            assert_eq!((s.status, s.interrupted), (Some(RunStatus::Completed), false), "{id}");
        }
    }

    #[tokio::test]
    async fn a_run_with_nothing_to_do_is_not_interrupted_and_resume_does_nothing() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        // `running` (or awaiting approval with no batch) over an empty history: the run's phase
        // is inactive, so resume finds nothing to continue.
        saved(&*store, "empty", RunStatus::Running, vec![]).await;
        saved(&*store, "empty-awaiting", RunStatus::AwaitingApproval, vec![]).await;
        let (agent, model) = agent_counting(store.clone(), vec![answer("never asked")]);
        for id in ["empty", "empty-awaiting"] {
            let before = store.load(id).await.unwrap().unwrap();
            assert_eq!(phase(&before), Phase::Inactive);
            let s = summary(&agent, id).await;
            assert!(!s.interrupted && !s.approval_pending, "{id}: nothing to continue: {s:?}");
            let out = resume(&agent, id).await.unwrap();
            let RunOutcome::Finished { status, final_text: None, error: None, .. } = out else {
                panic!("{out:?}")
            };
            assert_eq!(status, RunStatus::Running, "{id}: the run stands where it stood");
            assert!(model.requests().is_empty(), "{id}: no model asked");
            assert_eq!(store.load(id).await.unwrap().unwrap(), before, "{id}: nothing written");
        }
    }

    #[tokio::test]
    async fn a_running_session_with_an_undecided_batch_waits_for_approval() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let (agent, model) =
            agent_counting(store.clone(), vec![calls(&[("c1", "clear_baking_cache", "{}")]), answer("done")]);
        let RunOutcome::Suspended { batch } = run(&agent, "s", "清空").await else {
            panic!("not suspended")
        };
        // The batch is frozen and undecided, the status says `running`.
        let mut state = store.load_unrepaired("s").await.unwrap().unwrap();
        state.status = RunStatus::Running;
        store.save_snapshot(&state).await.unwrap();
        let s = summary(&agent, "s").await;
        assert!(s.approval_pending && !s.interrupted, "a decision waits, nothing to continue: {s:?}");
        // Resume runs nothing: the batch is returned suspended again.
        let out = resume(&agent, "s").await.unwrap();
        let RunOutcome::Suspended { batch: again } = out else { panic!("{out:?}") };
        assert_eq!(again.items, batch.items);
        assert_eq!(model.requests().len(), 1);
        // Decided, it is a run to continue.
        agent.approve("s", &batch.items[0].approval_id).await.unwrap();
        let s = summary(&agent, "s").await;
        assert!(!s.approval_pending && s.interrupted, "{s:?}");
        assert_eq!(resume(&agent, "s").await.unwrap().status(), RunStatus::Completed);
        assert_eq!(model.requests().len(), 2);
    }
}

/// A session another agent or process holds now (its store's lease) is `busy`, not
/// `interrupted`: it is being run, not cut short, and its resume here is `session_busy`. Once the
/// holder lets go (a killed process's lock goes with it), it is interrupted and resume continues it.
mod busy {
    use super::*;

    /// A run cut short as a kill leaves it: `running`, the question asked, no answer yet.
    async fn cut_short(store: &dyn StateStore, id: &str) {
        let mut state = AgentState::new(id);
        let events = [
            StateEvent::RunStarted { run_id: "r1".into(), delegation: None },
            StateEvent::MessageAppended { message: ChatMessage::user("plan my trip") },
        ];
        events.iter().for_each(|e| state.apply(e));
        store.commit(&state, &events).await.unwrap();
    }

    async fn resume(agent: &Agent, id: &str) -> Result<RunOutcome, AgentError> {
        agent.resume(id, &EventLog::new(), &CancellationSignal::new()).await
    }

    #[tokio::test]
    async fn a_session_another_file_store_holds_is_busy_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        // Two stores over one root: another process's, and this app's.
        let other = FileStore::new(dir.path());
        let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
        cut_short(&other, "trip").await;
        cut_short(&other, "free").await;
        let agent = agent_on(store.clone(), vec![answer("去杭州"), answer("好")]);
        let held = other.lease("trip").await.unwrap();
        assert_eq!(store.lease_held("trip").await.unwrap(), Some(true));
        assert_eq!(store.lease_held("free").await.unwrap(), Some(false));

        let list = agent.list_sessions().await.unwrap();
        let trip = entry(&list, "trip");
        assert_eq!(trip.status, Some(RunStatus::Running));
        assert!(trip.busy && !trip.interrupted && !trip.approval_pending, "{trip:?}");
        let free = entry(&list, "free");
        assert!(!free.busy && free.interrupted, "{free:?}");
        assert_eq!(serde_json::to_value(trip).unwrap()["busy"], true);
        let e = resume(&agent, "trip").await.unwrap_err();
        assert_eq!(e.code, codes::SESSION_BUSY);

        // The holder lets go (a killed process's lock is released by the kernel).
        drop(held);
        let trip = agent.list_sessions().await.unwrap().into_iter().find(|s| s.session_id == "trip").unwrap();
        assert!(!trip.busy && trip.interrupted, "{trip:?}");
        assert_eq!(resume(&agent, "trip").await.unwrap().status(), RunStatus::Completed);
        // Probing created no lock file for a session no lease took, nor held any.
        assert_eq!(store.lease_held("never").await.unwrap(), Some(false));
        assert!(!dir.path().join(LOCK_DIR).join("never").exists());
    }

    #[tokio::test]
    async fn a_session_another_agent_runs_is_busy_for_this_one_and_running_for_its_own() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        // The other agent of the app, on the same store, runs `trip` on a model that never answers.
        let runner = Arc::new(AgentBuilder::new(Arc::new(Hang), store.clone()).build());
        let running = {
            let runner = runner.clone();
            tokio::spawn(async move {
                runner.run("trip", "plan my trip", &EventLog::new(), &CancellationSignal::new()).await
            })
        };
        for _ in 0..500 {
            if store.load("trip").await.unwrap().is_some() {
                break;
            }
            tokio::task::yield_now().await;
        }
        let agent = agent_on(store.clone(), vec![answer("去杭州")]);
        let trip = agent.list_sessions().await.unwrap().remove(0);
        assert_eq!(trip.status, Some(RunStatus::Running));
        assert!(trip.busy && !trip.interrupted, "held by the other agent: {trip:?}");
        // The agent running it lists it running: neither busy (its own call) nor interrupted.
        let own = runner.list_sessions().await.unwrap().remove(0);
        assert!(!own.busy && !own.interrupted, "{own:?}");

        running.abort();
        assert!(running.await.unwrap_err().is_cancelled());
        let trip = agent.list_sessions().await.unwrap().remove(0);
        assert!(!trip.busy && trip.interrupted, "{trip:?}");
        assert_eq!(resume(&agent, "trip").await.unwrap().status(), RunStatus::Completed);
    }

    /// A call of the listing agent's own that takes the session between the listing's load and
    /// its look at the lease: the lease the look finds is that call's, not another agent's or
    /// process's, so the session is not busy (nor interrupted: the agent runs it).
    #[tokio::test]
    async fn a_lease_this_agent_took_after_the_load_is_not_busy() {
        let store = Arc::new(SlowLook::default());
        cut_short(&store.inner, "trip").await;
        let agent = Arc::new(AgentBuilder::new(Arc::new(Hang), store.clone()).build());
        let listing = {
            let agent = agent.clone();
            tokio::spawn(async move { agent.list_sessions().await })
        };
        // The listing loaded `trip` (running, not in use) and is about to look at its lease.
        store.entered.notified().await;
        let resumed = {
            let agent = agent.clone();
            tokio::spawn(async move { resume(&agent, "trip").await })
        };
        for _ in 0..10_000 {
            if store.inner.lease_held("trip").await.unwrap() == Some(true) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(store.inner.lease_held("trip").await.unwrap(), Some(true), "the resume holds it");
        store.go.notify_one();
        let trip = listing.await.unwrap().unwrap().remove(0);
        assert_eq!(trip.status, Some(RunStatus::Running));
        assert!(!trip.busy && !trip.interrupted, "this agent's own call holds it: {trip:?}");
        resumed.abort();
        assert!(resumed.await.unwrap_err().is_cancelled());
    }

    /// A `MemoryStore` whose `lease_held` tells the test it was asked and waits for its word
    /// before it looks.
    #[derive(Default)]
    struct SlowLook {
        inner: MemoryStore,
        entered: tokio::sync::Notify,
        go: tokio::sync::Notify,
    }

    #[async_trait]
    impl StateStore for SlowLook {
        async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
            self.inner.load(session_id).await
        }
        async fn load_unrepaired(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
            self.inner.load_unrepaired(session_id).await
        }
        async fn exists(&self, session_id: &str) -> Result<bool, AgentError> {
            self.inner.exists(session_id).await
        }
        async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
            self.inner.commit(state, events).await
        }
        async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
            self.inner.save_snapshot(state).await
        }
        async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
            self.inner.delete(session_id).await
        }
        async fn list(&self) -> Result<Vec<String>, AgentError> {
            self.inner.list().await
        }
        async fn updated_at_ms(&self, session_id: &str) -> Result<Option<u64>, AgentError> {
            self.inner.updated_at_ms(session_id).await
        }
        async fn lease(&self, session_id: &str) -> Result<SessionLease, AgentError> {
            self.inner.lease(session_id).await
        }
        async fn lease_held(&self, session_id: &str) -> Result<Option<bool>, AgentError> {
            self.entered.notify_one();
            self.go.notified().await;
            self.inner.lease_held(session_id).await
        }
    }

    /// A store that cannot tell whether a lease is held (an app's own, written before
    /// `lease_held`): nothing is busy, a cut-short run is interrupted as before.
    #[tokio::test]
    async fn a_store_that_cannot_tell_lists_nothing_busy() {
        let inner = MemoryStore::new();
        cut_short(&inner, "trip").await;
        let _held = inner.lease("trip").await.unwrap();
        let store = Arc::new(Wrapped::new(Arc::new(inner), ListingOnly));
        assert_eq!(store.lease_held("trip").await.unwrap(), None, "the default knows nothing");
        assert_eq!(store.lease_held("../x").await.unwrap_err().code, codes::SESSION_ID_INVALID);
        let agent = agent_on(store, vec![]);
        let trip = agent.list_sessions().await.unwrap().remove(0);
        assert!(!trip.busy && trip.interrupted, "{trip:?}");
    }

    /// A store of an app written before `lease_held` existed: the required methods and `list`
    /// reach the inner store, every other method is the trait's default (it leases nothing).
    struct ListingOnly;

    impl StoreHooks for ListingOnly {}
}
