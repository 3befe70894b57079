//! `StateStore::lease_held`, the look a listing takes to tell a session another agent or process
//! runs now from one a kill cut short: it tells a held lease from a free one, creates no lock
//! file, and never makes a lease fail, however many probes race it (a `FileStore` probes with a
//! shared try-lock for an instant; a lease that meets only probes tries again).

use arkagent::state::{AgentState, FileStore, MemoryStore, StateStore, LOCK_DIR};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_store_tells_a_lease_held_by_any_store_on_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (FileStore::new(dir.path()), FileStore::new(dir.path()));
    assert_eq!(b.lease_held("s").await.unwrap(), Some(false));
    assert!(!dir.path().join(LOCK_DIR).exists(), "a probe creates nothing");
    a.save_snapshot(&AgentState::new("s")).await.unwrap();
    let lease = a.lease("s").await.unwrap();
    assert_eq!(b.lease_held("s").await.unwrap(), Some(true), "another store's lease");
    assert_eq!(a.lease_held("s").await.unwrap(), Some(true), "its own lease");
    assert_eq!(b.lease("s").await.unwrap_err().code, "session_busy", "still busy at once for a lease");
    drop(lease);
    assert_eq!(b.lease_held("s").await.unwrap(), Some(false));
    assert!(dir.path().join(LOCK_DIR).join("s").exists(), "the lock file of a session stays");
    // Probes hold nothing a lease waits for.
    let _lease = b.lease("s").await.unwrap();
    assert_eq!(b.lease_held("../x").await.unwrap_err().code, "session_id_invalid");
}

#[tokio::test]
async fn a_memory_store_tells_its_own_leases() {
    let store = MemoryStore::new();
    assert_eq!(store.lease_held("s").await.unwrap(), Some(false));
    let lease = store.lease("s").await.unwrap();
    assert_eq!(store.lease_held("s").await.unwrap(), Some(true));
    drop(lease);
    assert_eq!(store.lease_held("s").await.unwrap(), Some(false));
}

/// One store takes and drops leases, one after the other, on a session that exists (its lock file
/// stays) and on one that does not (its lock file comes and goes), while tasks on another store
/// over the same root probe both as fast as they can: every lease is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_racing_leases_never_make_a_lease_fail() {
    let dir = tempfile::tempdir().unwrap();
    let leaser = Arc::new(FileStore::new(dir.path()));
    let prober = Arc::new(FileStore::new(dir.path()));
    leaser.save_snapshot(&AgentState::new("kept")).await.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let (probes, seen_held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut probers = Vec::new();
    for _ in 0..3 {
        let (prober, done) = (Arc::clone(&prober), Arc::clone(&done));
        let (probes, seen_held) = (Arc::clone(&probes), Arc::clone(&seen_held));
        probers.push(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                for id in ["kept", "fleeting"] {
                    if prober.lease_held(id).await.unwrap() == Some(true) {
                        seen_held.fetch_add(1, Ordering::SeqCst);
                    }
                    probes.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let mut granted = 0;
    for round in 0..1500 {
        for id in ["kept", "fleeting"] {
            let lease = leaser.lease(id).await.unwrap_or_else(|e| panic!("lease {round} of {id}: {e}"));
            tokio::task::yield_now().await;
            drop(lease);
            granted += 1;
        }
    }
    done.store(true, Ordering::SeqCst);
    for p in probers {
        p.await.unwrap();
    }
    assert_eq!(granted, 3000);
    assert!(probes.load(Ordering::SeqCst) > 1000, "the probes raced: {}", probes.load(Ordering::SeqCst));
    assert!(seen_held.load(Ordering::SeqCst) > 0, "some probe met a lease");
    assert!(!dir.path().join(LOCK_DIR).join("fleeting").exists());
}
