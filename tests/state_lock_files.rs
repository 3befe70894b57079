//! The lock files of session leases (`<root>/..locks/<session id>`, see the `file_store` module
//! docs): a call on a session that does not exist leaves nothing on disk, whatever it is (a read,
//! a resume or decision refused with `session_not_found`, a deletion that finds nothing, the
//! removal of a metadata key that is not there), and a deleted session leaves no lock file (also
//! when its directory stays for the app's own files). The two-writers guarantee still holds while
//! lock files come and go: at most one lease on a session at any moment, across stores.

#[path = "support/lease.rs"]
mod lease;

use arkagent::agent::EventLog;
use arkagent::state::{FileStore, StateStore, LOCK_DIR, TRASH_DIR};
use arkagent::CancellationSignal;
use lease::{agent, run};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Every path under `root` (relative, sorted); empty when `root` does not exist.
fn files_under(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                dirs.push(path);
            }
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_session_that_does_not_exist_leave_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("state");
    let a = agent(Arc::new(FileStore::new(&root)), "a");
    let none = CancellationSignal::new();
    assert_eq!(a.state("ghost").await.unwrap(), None);
    assert_eq!(a.resume("ghost", &EventLog::new(), &none).await.unwrap_err().code, "session_not_found");
    assert_eq!(a.approve("ghost", "ap-1").await.unwrap_err().code, "session_not_found");
    assert_eq!(a.deny("ghost", "ap-1", "no").await.unwrap_err().code, "session_not_found");
    let e = a.dismiss("ghost", "moved on", &EventLog::new(), &none).await.unwrap_err();
    assert_eq!(e.code, "session_not_found");
    assert!(!a.delete_session("ghost").await.unwrap());
    a.set_metadata("ghost", "userId", serde_json::Value::Null).await.unwrap();
    assert_eq!(files_under(&root), Vec::<String>::new(), "nothing was created under the root");

    // The same once the root exists and holds another session (and so the lock directory).
    run(&a, "real", "hello").await.unwrap();
    let before = files_under(&root);
    assert!(before.contains(&format!("{LOCK_DIR}/real")), "{before:?}");
    assert_eq!(a.resume("ghost", &EventLog::new(), &none).await.unwrap_err().code, "session_not_found");
    assert_eq!(a.approve("ghost", "ap-1").await.unwrap_err().code, "session_not_found");
    assert!(!a.delete_session("ghost").await.unwrap());
    a.set_metadata("ghost", "userId", serde_json::Value::Null).await.unwrap();
    assert_eq!(files_under(&root), before);
    // A lease taken on a session that never came to exist leaves no lock file either.
    let store = FileStore::new(&root);
    drop(store.lease("ghost").await.unwrap());
    assert_eq!(files_under(&root), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_leaves_no_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    run(&a, "s", "hello").await.unwrap();
    run(&a, "t", "hello").await.unwrap();
    let lock = dir.path().join(LOCK_DIR).join("s");
    assert!(lock.is_file());
    assert!(a.delete_session("s").await.unwrap());
    assert!(!lock.exists(), "the deleted session's lock file is gone");
    assert!(dir.path().join(LOCK_DIR).join("t").is_file(), "another session's stays");
    // The session can be created again, and is leased as before.
    run(&a, "s", "again").await.unwrap();
    let store = FileStore::new(dir.path());
    let held = store.lease("s").await.unwrap();
    assert_eq!(FileStore::new(dir.path()).lease("s").await.unwrap_err().code, "session_busy");
    drop(held);
}

/// A deletion removes only the store's files: the app's own in the session's directory stand
/// where they stood after it. The session is gone all the same, and so is its lock file; while the
/// session exists, a lease dropped keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_whose_directory_keeps_app_files_leaves_no_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    run(&a, "s", "hello").await.unwrap();
    let notes = dir.path().join("s").join("notes.txt");
    std::fs::write(&notes, "the app's").unwrap();
    let lock = dir.path().join(LOCK_DIR).join("s");
    drop(FileStore::new(dir.path()).lease("s").await.unwrap());
    assert!(lock.is_file(), "the session exists: its lock file stays");
    assert!(a.delete_session("s").await.unwrap());
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "the app's", "the app's file stands where it stood");
    assert!(!FileStore::new(dir.path()).exists("s").await.unwrap());
    assert!(!lock.exists(), "the deleted session's lock file is gone");
    assert_eq!(files_under(dir.path()), [LOCK_DIR, TRASH_DIR, "s", "s/notes.txt"]);
    // The session can be created again beside the app's file, and is leased as before.
    run(&a, "s", "again").await.unwrap();
    let held = FileStore::new(dir.path()).lease("s").await.unwrap();
    assert_eq!(FileStore::new(dir.path()).lease("s").await.unwrap_err().code, "session_busy");
    drop(held);
    assert!(lock.is_file());
}

/// Two stores over one root take and drop leases on sessions that never exist (so each lease's
/// lock file is removed as it is dropped, and made again by the next one): at no moment do two
/// leases on one session coexist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lease_at_a_time_while_lock_files_come_and_go() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [Arc::new(FileStore::new(dir.path())), Arc::new(FileStore::new(dir.path()))];
    let inside = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = Arc::clone(&stores[t % 2]);
        let (inside, granted) = (Arc::clone(&inside), Arc::clone(&granted));
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                match store.lease("s").await {
                    Ok(lease) => {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two leases at once");
                        granted.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(lease);
                    }
                    Err(e) => assert_eq!(e.code, "session_busy", "{e}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(granted.load(Ordering::SeqCst) > 0);
    assert_eq!(files_under(&dir.path().join(LOCK_DIR)), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_first_commit_cut_short_left_is_deleted_with_its_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    // A first commit killed before its snapshot's rename: no state a load reads, but bytes of it.
    let half = dir.path().join("half");
    std::fs::create_dir(&half).unwrap();
    std::fs::write(half.join("snapshot-00000000000000000001.tmp"), b"{\"session_id\":\"half\"").unwrap();
    assert_eq!(a.state("half").await.unwrap(), None);
    assert!(a.delete_session("half").await.unwrap(), "the leftovers were there");
    // The store's own directories stay (the trash empty: the deletion's move and removal).
    assert_eq!(files_under(dir.path()), [LOCK_DIR, TRASH_DIR], "nothing of it is left");
}

/// What a kill right after a deletion's rename leaves: the session's directory in the trash, its
/// lock file still in `..locks` (the lease that would have removed it died with the process).
async fn killed_after_the_rename(root: &Path) {
    let a = agent(Arc::new(FileStore::new(root)), "a");
    run(&a, "s", "hello").await.unwrap();
    run(&a, "t", "hello").await.unwrap();
    drop(a);
    std::fs::rename(root.join("s"), root.join(TRASH_DIR).join("s.0123456789abcdef")).unwrap();
    assert!(root.join(LOCK_DIR).join("s").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_file_a_killed_deletion_left_goes_with_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    killed_after_the_rename(dir.path()).await;
    // The next process lists its sessions: the trash is swept, and the lock file nobody holds
    // of a session that is no more goes with it (before, it stayed for good).
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    let listed: Vec<String> =
        a.list_all_sessions().await.unwrap().into_iter().map(|s| s.session_id).collect();
    assert_eq!(listed, ["t"]);
    assert_eq!(files_under(&dir.path().join(LOCK_DIR)), ["t"], "the other session's stays");
    assert_eq!(files_under(&dir.path().join(TRASH_DIR)), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_file_a_killed_deletion_left_goes_with_a_deletion_of_its_id() {
    let dir = tempfile::tempdir().unwrap();
    killed_after_the_rename(dir.path()).await;
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    assert!(!a.delete_session("s").await.unwrap(), "nothing of the session is left to delete");
    assert!(!dir.path().join(LOCK_DIR).join("s").exists(), "nor its lock file (before, it stayed)");
    assert!(dir.path().join(LOCK_DIR).join("t").is_file(), "another session's stays");
    // The id is taken again, and leased as before.
    run(&a, "s", "again").await.unwrap();
    let held = FileStore::new(dir.path()).lease("s").await.unwrap();
    assert_eq!(FileStore::new(dir.path()).lease("s").await.unwrap_err().code, "session_busy");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_file_of_a_session_not_written_yet_is_left_to_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(Arc::new(FileStore::new(dir.path())), "a");
    run(&a, "t", "hello").await.unwrap();
    // A writer of another process holds the lease of a session it has not written yet.
    let held = FileStore::new(dir.path()).lease("new").await.unwrap();
    let lock = dir.path().join(LOCK_DIR).join("new");
    assert!(lock.is_file());
    assert!(!a.delete_session("new").await.unwrap());
    let fresh = FileStore::new(dir.path());
    assert_eq!(fresh.list().await.unwrap(), ["t"]);
    fresh.sweep_trash().await.unwrap();
    assert!(lock.is_file(), "a lock file a lease holds is never removed");
    assert_eq!(FileStore::new(dir.path()).lease("new").await.unwrap_err().code, "session_busy");
    drop(held);
    assert!(!lock.exists(), "its lease removes it, the session never written");
}
