//! A session lease held by another process (`flock(1)`, the same kind of lock) refuses runs and
//! deletions until that process ends; the kernel releases the lock of a process that died. In a
//! binary of its own (see `tests/state_lease.rs`).

#[path = "support/lease.rs"]
mod lease;

use arkagent::state::{FileStore, RunStatus, StateStore, LOCK_DIR};
use lease::{agent, run, saved};
use std::sync::Arc;
use std::time::Duration;

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
