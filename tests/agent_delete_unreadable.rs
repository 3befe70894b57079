//! `Agent::delete_session` on sessions no load can read (`state_corrupt`): the app's only way to
//! be rid of such a session is to delete it, so the deletion goes ahead without the state (a
//! corrupt session's own workers are not known; each is then an orphan, deleted as any session),
//! and a parent whose worker session is corrupt is deleted with it; also through a store of the
//! app's whose `exists` is the default (which loads, and so fails on a corrupt session).

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::EventLog;
use arkagent::state::{FileStore, StateStore, LOCK_DIR};
use arkagent::CancellationSignal;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use support::{answer, Script};
use wrapped::{Forward, StoreHooks, Wrapped};

/// Overwrites every file of a session's directory with bytes no load reads.
fn corrupt(dir: &Path) {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::write(&path, b"\x00not a state\xff").unwrap();
        n += 1;
    }
    assert!(n > 0, "{} held files", dir.display());
}

#[tokio::test]
async fn a_corrupt_session_and_a_parent_with_a_corrupt_worker_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::clear_agent(store.clone(), &cleared);
    let (_, worker) = delegation::suspend_in_worker(&agent).await;

    // The worker's files are corrupt: the parent is still deleted, with it.
    corrupt(&dir.path().join(&worker));
    assert_eq!(store.load(&worker).await.unwrap_err().code, "state_corrupt");
    assert!(agent.delete_session("parent").await.unwrap());
    assert_eq!(store.load("parent").await.unwrap(), None);
    assert!(!dir.path().join(&worker).exists(), "the corrupt worker went with its parent");

    // A corrupt session of its own.
    let plain = delegation::agent(Arc::new(Script::new(vec![answer("hi")])), store.clone(), &cleared, 1);
    plain.run("alone", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    corrupt(&dir.path().join("alone"));
    assert_eq!(store.load("alone").await.unwrap_err().code, "state_corrupt");
    assert!(agent.delete_session("alone").await.unwrap());
    assert!(!dir.path().join("alone").exists());
    assert_eq!(std::fs::read_dir(dir.path().join(LOCK_DIR)).unwrap().count(), 0, "no lock file is left");
    assert!(!agent.delete_session("alone").await.unwrap(), "gone");
}

/// A store of the app's that forwards to a `FileStore` but keeps `StateStore::exists`' default
/// (which loads the session, so it fails on a corrupt one).
struct Forwarding;

#[async_trait::async_trait]
impl StoreHooks for Forwarding {
    const FORWARD: Forward = Forward { load_unrepaired: true, exists: false, lease: true };
}

#[tokio::test]
async fn a_corrupt_session_of_a_store_with_the_default_exists_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(Wrapped::new(Arc::new(FileStore::new(dir.path())), Forwarding));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::agent(Arc::new(Script::new(vec![answer("hi")])), store.clone(), &cleared, 1);
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    corrupt(&dir.path().join("s"));
    assert_eq!(store.exists("s").await.unwrap_err().code, "state_corrupt");
    assert!(agent.delete_session("s").await.unwrap());
    assert!(!dir.path().join("s").exists());
    assert!(!agent.delete_session("s").await.unwrap());
}
