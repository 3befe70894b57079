//! Session leases: two agents (or processes) sharing a state directory never interleave two
//! histories in one session. The second writer is refused with `session_busy`; a store notices a
//! session another store changed (appended to, compacted, deleted) before it writes again.
//!
//! The lease held by another process is tested in `tests/state_lease_process.rs`, a binary of its
//! own: the process it starts inherits, between its fork and its exec, every lock file this test
//! binary holds at that moment, which would hold up the leases of the tests here for a moment.

#[path = "support/lease.rs"]
mod lease;

use arkagent::state::{FileStore, FileStoreOptions, RunStatus, StateStore};
use lease::{agent, gated_agent, run, saved, texts, Gate, MemStore};
use std::sync::Arc;

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
