//! `Agent::delete_session` on sessions no load can read (`state_corrupt`): the app's only way to
//! be rid of such a session is to delete it, so the deletion goes ahead without the state (a
//! corrupt session's own workers are not known; each is then an orphan, deleted as any session),
//! and a parent whose worker session is corrupt is deleted with it; also through a store of the
//! app's whose `exists` is the default (which loads, and so fails on a corrupt session). The same
//! holds for a session a newer version wrote (`state_version_unsupported`), unless another
//! process holds it, and for a stray file (or link) standing where a session's directory should.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::EventLog;
use arkagent::state::codec::encode_snapshot;
use arkagent::state::{AgentState, FileStore, StateStore, LOCK_DIR, TRASH_DIR};
use arkagent::CancellationSignal;
use std::path::{Path, PathBuf};
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

/// Rewrites a session's directory as a newer version would have written `state`: one snapshot
/// whose schema version this code does not know.
fn as_newer_version(dir: &Path, mut state: AgentState) {
    state.schema_version = 99;
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir(dir).unwrap();
    std::fs::write(dir.join("snapshot-00000000000000000001.ark"), encode_snapshot(&state).unwrap()).unwrap();
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(tree(&p));
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_session_a_newer_version_wrote_is_deleted_unless_another_process_holds_it() {
    // Deleting is the user's wish to forget the conversation: that this version cannot read it
    // is no reason to keep it (it was refused with `state_version_unsupported`, for good).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
    let cleared = Arc::new(AtomicUsize::new(0));
    let plain = delegation::agent(Arc::new(Script::new(vec![answer("hi")])), store.clone(), &cleared, 1);
    plain.run("future", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    as_newer_version(&root.join("future"), store.load_unrepaired("future").await.unwrap().unwrap());
    assert_eq!(store.load("future").await.unwrap_err().code, "state_version_unsupported");

    // Another process holds it: refused as any session held is, and not a byte changes.
    let other = FileStore::new(root);
    let lease = other.lease("future").await.unwrap();
    let before = tree(&root.join("future"));
    assert_eq!(plain.delete_session("future").await.unwrap_err().code, "session_busy");
    assert_eq!(tree(&root.join("future")), before);
    drop(lease);
    assert!(plain.delete_session("future").await.unwrap());
    assert!(!root.join("future").exists());
    assert!(!root.join(LOCK_DIR).join("future").exists(), "no lock file is left");
    assert!(!plain.delete_session("future").await.unwrap(), "gone");

    // A parent whose worker session a newer version wrote is deleted with it.
    let agent = delegation::clear_agent(store.clone(), &cleared);
    let (_, worker) = delegation::suspend_in_worker(&agent).await;
    as_newer_version(&root.join(&worker), store.load_unrepaired(&worker).await.unwrap().unwrap());
    assert!(agent.delete_session("parent").await.unwrap());
    assert!(!root.join("parent").exists());
    assert!(!root.join(&worker).exists(), "the newer worker went with its parent");

    // A worker whose parent a newer version wrote belongs to that parent, as to a corrupt one:
    // deleting the parent leaves it (unknown to this version), deleted then as any session.
    let agent = delegation::clear_agent(store.clone(), &cleared);
    let (_, worker) = delegation::suspend_in_worker(&agent).await;
    as_newer_version(&root.join("parent"), store.load_unrepaired("parent").await.unwrap().unwrap());
    let e = agent.delete_session(&worker).await.unwrap_err();
    assert_eq!(e.code, "invalid_state", "{e}");
    assert!(agent.delete_session("parent").await.unwrap());
    assert!(root.join(&worker).exists());
    assert!(agent.delete_session(&worker).await.unwrap());
    assert!(!root.join(&worker).exists());
    assert_eq!(store.list().await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn a_file_in_a_session_s_place_is_state_corrupt_and_deleted_by_its_id() {
    // A file (or a link) where a session's directory should be, made by a bug or by hand: its
    // deletion failed with `state_io` ("not a directory"), so the app could not be rid of it, and
    // a run under its id failed with that `state_io`, as if trying again could help.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::agent(
        Arc::new(Script::new(vec![answer("hi"), answer("again")])),
        store.clone(),
        &cleared,
        1,
    );
    agent.run("fine", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let fine = store.load("fine").await.unwrap().unwrap();
    std::fs::write(root.join("stray"), b"not a session").unwrap();
    // A link to a file of the app's elsewhere, and a link to nothing.
    let elsewhere = tempfile::tempdir().unwrap();
    let notes = elsewhere.path().join("notes.txt");
    std::fs::write(&notes, b"keep me").unwrap();
    std::os::unix::fs::symlink(&notes, root.join("linked")).unwrap();
    std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).unwrap();
    let strays = ["dangling", "linked", "stray"];

    // The listing leaves them out, as anything the store did not make (a file in the state
    // directory may be the app's own: it is not offered as a damaged session to delete).
    let list = agent.list_sessions().await.unwrap();
    assert_eq!(list.iter().map(|s| s.session_id.as_str()).collect::<Vec<_>>(), ["fine"]);

    // Reads, runs, resumes and commits under such an id refuse with a structured error that
    // says what stands there, and write nothing anywhere.
    for id in strays {
        let e = agent.state(id).await.unwrap_err();
        assert_eq!(e.code, "state_corrupt", "{id}: {e}");
        assert!(e.message.contains("not a session directory"), "{e}");
        let e = agent.run(id, "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(e.code, "state_corrupt", "{id}: {e}");
        let e = agent.resume(id, &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(e.code, "state_corrupt", "{id}: {e}");
        let e = store.commit(&AgentState::new(id), &[]).await.unwrap_err();
        assert_eq!(e.code, "state_corrupt", "{id}: {e}");
    }
    assert_eq!(std::fs::read(root.join("stray")).unwrap(), b"not a session");
    assert_eq!(std::fs::read(&notes).unwrap(), b"keep me");
    assert!(!root.join("nowhere").exists());

    // Deleted by its id through the trash, as any session: the entry goes (a link itself, never
    // what it points to), with no lock file left; the other session is untouched.
    for id in strays {
        assert!(agent.delete_session(id).await.unwrap(), "{id}");
        assert!(std::fs::symlink_metadata(root.join(id)).is_err(), "{id} is gone");
        assert!(!root.join(LOCK_DIR).join(id).exists(), "{id}'s lock file");
        assert!(!agent.delete_session(id).await.unwrap(), "{id} was deleted already");
    }
    assert_eq!(std::fs::read(&notes).unwrap(), b"keep me");
    assert_eq!(std::fs::read_dir(root.join(TRASH_DIR)).unwrap().count(), 0);
    assert_eq!(store.load("fine").await.unwrap().unwrap(), fine);
    // The id is free again: a run there starts a new session.
    agent.run("stray", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(root.join("stray").is_dir());
    assert!(store.load("stray").await.unwrap().is_some());
}

#[tokio::test]
async fn a_directory_of_the_app_s_own_is_not_deleted_by_its_name() {
    // `deleteSession("images")` on a root the app shares removed the app's `images` directory
    // (no file of the store in it: listed by nobody, loaded as `None`) and answered `true`.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    std::fs::write(images.join("cat.png"), b"png").unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::agent(Arc::new(Script::new(vec![answer("hi")])), store.clone(), &cleared, 1);
    assert!(!agent.delete_session("images").await.unwrap(), "no session of that name");
    assert_eq!(std::fs::read(images.join("cat.png")).unwrap(), b"png");
    // A session run under that name shares the directory: deleting it keeps the app's file.
    agent.run("images", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(store.load("images").await.unwrap().is_some());
    assert!(agent.delete_session("images").await.unwrap());
    assert_eq!(store.load("images").await.unwrap(), None);
    assert!(agent.list_sessions().await.unwrap().is_empty());
    let left: Vec<_> = std::fs::read_dir(&images).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["cat.png"]);
}

#[tokio::test]
async fn a_session_whose_files_cannot_be_read_is_deleted_too() {
    // A session listed with state_io (here a directory stands where its snapshot file should; on
    // a device, a file that fails with EIO): its deletion failed with that same state_io, so the
    // app could never be rid of it.
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = delegation::agent(Arc::new(Script::new(vec![answer("hi")])), store.clone(), &cleared, 1);
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let session = dir.path().join("s");
    let snapshot = std::fs::read_dir(&session)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("snapshot-"))
        .unwrap();
    std::fs::remove_file(&snapshot).unwrap();
    std::fs::create_dir(&snapshot).unwrap();
    assert_eq!(store.load("s").await.unwrap_err().code, "state_io");
    let listed = agent.list_sessions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].error.as_ref().map(|e| e.code.to_string()), Some("state_io".to_string()));
    assert!(agent.delete_session("s").await.unwrap());
    assert!(!session.exists());
    assert!(agent.list_sessions().await.unwrap().is_empty());
    assert_eq!(std::fs::read_dir(dir.path().join(TRASH_DIR)).unwrap().count(), 0);
}
