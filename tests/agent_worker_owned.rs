//! A worker session (a `delegate_task` call's) belongs to the session that delegated: the app
//! deletes it with its parent, and its metadata is the copy its delegation started with. So
//! `delete_session` and `set_metadata` on a worker session directly are refused with
//! `invalid_state` naming the parent session, before anything is written, while that parent
//! exists and names it (its list of workers, its frozen batch): a worker deleted under a parent frozen on its batch would be run again from scratch
//! by the parent's resume, and a worker's metadata changed apart from its parent's would run its
//! approved calls for another user than the one the task was delegated for. A worker whose parent
//! is gone (an orphan) is deleted as any session, also once a new session took its parent's id.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::EventLog;
use arkagent::state::{FileStore, RunStatus, StateStore, LOCK_DIR};
use arkagent::CancellationSignal;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::MemStore;

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

#[tokio::test]
async fn a_worker_session_is_not_deleted_nor_changed_apart_from_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::clear_agent(store.clone(), &cleared);
    agent.set_metadata("parent", "userId", json!("u-1")).await.unwrap();
    let (batch, worker) = delegation::suspend_in_worker(&agent).await;
    let before = store.load(&worker).await.unwrap().unwrap();

    let e = agent.delete_session(&worker).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert!(e.message.contains("parent") && e.message.contains("delete"), "names the parent: {e}");
    let e = agent.set_metadata(&worker, "userId", json!("u-2")).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert!(e.message.contains("parent"), "{e}");
    let e = agent.set_metadata(&worker, "userId", serde_json::Value::Null).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    // Nothing was written: the worker is as it was, with its parent's metadata.
    assert_eq!(store.load(&worker).await.unwrap().unwrap(), before);
    assert_eq!(before.metadata.get("userId"), Some(&json!("u-1")));

    // The parent still settles: the approved call runs once, in the worker it froze.
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    // Over, the worker still belongs to its parent: deleted with it, not apart.
    assert_eq!(agent.delete_session(&worker).await.unwrap_err().code, "invalid_state");
    assert!(agent.delete_session("parent").await.unwrap());
    assert_eq!(store.load(&worker).await.unwrap(), None);
    assert!(!dir.path().join(LOCK_DIR).join(&worker).exists(), "no lock file left");
}

#[tokio::test]
async fn a_worker_whose_parent_is_gone_is_deleted_as_any_session() {
    let store = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::clear_agent(store.clone(), &cleared);
    let (_, worker) = delegation::suspend_in_worker(&agent).await;
    // The parent's state is gone (removed from the store itself, not by `delete_session`).
    assert!(store.delete("parent").await.unwrap());
    assert!(agent.delete_session(&worker).await.unwrap());
    assert_eq!(store.load(&worker).await.unwrap(), None);
}

/// Overwrites every file of a session's directory with bytes no load reads.
fn corrupt(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::write(entry.unwrap().path(), b"\x00not a state\xff").unwrap();
    }
}

#[tokio::test]
async fn a_worker_is_owned_by_the_parent_that_lists_it_not_by_a_new_session_of_the_same_id() {
    // The parent's state became unreadable: deleting it leaves its workers as orphans (only its
    // state named them). The app then starts a new session under the same id (apps reuse ids: a
    // user's, "main"). That session never delegated to the orphan: deleting it would not delete
    // the orphan, so it does not own it, and the orphan is deleted and changed as any session.
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::clear_agent(store.clone(), &cleared);
    let (_, worker) = delegation::suspend_in_worker(&agent).await;

    // While the parent is there but unreadable, it may still be the worker's (read back from a
    // copy, it would resume it): refused, naming it.
    corrupt(&dir.path().join("parent"));
    let e = agent.delete_session(&worker).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert!(e.message.contains("parent"), "{e}");
    assert!(store.load(&worker).await.unwrap().is_some());

    assert!(agent.delete_session("parent").await.unwrap());
    assert!(store.load(&worker).await.unwrap().is_some(), "an orphan now");
    // A new session of the same id: it completes (the script's next answer) without delegating.
    let out = agent.run("parent", "again", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert!(parent.workers.is_empty(), "{:?}", parent.workers);

    agent.set_metadata(&worker, "userId", json!("u-2")).await.unwrap();
    assert_eq!(store.load(&worker).await.unwrap().unwrap().metadata.get("userId"), Some(&json!("u-2")));
    assert!(agent.delete_session(&worker).await.unwrap());
    assert_eq!(store.load(&worker).await.unwrap(), None);
    assert!(store.load("parent").await.unwrap().is_some(), "the new session is untouched");
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "the orphan's frozen call never ran");
}
