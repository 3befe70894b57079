//! `Agent::delete_session` on sessions no load can read (`state_corrupt`): the app's only way to
//! be rid of such a session is to delete it, so the deletion goes ahead without the state (a
//! corrupt session's own workers are not known; each is then an orphan, deleted as any session),
//! and a parent whose worker session is corrupt is deleted with it.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::state::{FileStore, StateStore, LOCK_DIR};
use arkagent::CancellationSignal;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use support::{answer, calls, Script};

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

fn script() -> Vec<arkagent::provider::ModelResponse> {
    vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"clear"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker done"),
        answer("parent done"),
    ]
}

#[tokio::test]
async fn a_corrupt_session_and_a_parent_with_a_corrupt_worker_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::agent(Arc::new(Script::new(script())), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();

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
