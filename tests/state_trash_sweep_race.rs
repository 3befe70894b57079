//! Sweeps of the trash at the same time (each deletion sweeps the whole trash, so deletions at
//! once empty the same graves together): what one sweep removed or moved back first is done, not
//! a failure of the other, and nothing is logged for a grave that ends up gone. Before, nearly
//! every one of 100 deletions at once warned that a grave "keeps files of the app's own that
//! could not go back" (the other sweep had removed it: `No such file or directory`), while the
//! trash ended empty and every app file was back. A grave that really keeps an app file is still
//! logged, once per sweep that leaves it.
//!
//! The race is real (threads of the blocking pool, no injection point): it cannot fail by chance,
//! only miss the fault on a given run (with 100 deletions, it came up on nearly every one).

#[path = "support/log_capture.rs"]
mod log_capture;
mod state_support;

use arkagent::state::{AgentState, FileStore, StateStore, TRASH_DIR};
use log_capture::capture;
use state_support::turn;
use std::fs;
use std::sync::Arc;

const KEPT: &str = "keeps files of the app's own";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletions_at_once_do_not_warn_of_files_kept_when_nothing_stayed() {
    let log = capture();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Arc::new(FileStore::new(root));
    const SESSIONS: usize = 100;
    for i in 0..SESSIONS {
        let id = format!("s{i}");
        let mut state = AgentState::new(&id);
        let events = turn(1);
        for e in &events {
            state.apply(e);
        }
        store.commit(&state, &events).await.unwrap();
        // The app's own file: moved back to the session's place, never removed.
        fs::write(root.join(&id).join("notes.txt"), format!("app data {i}")).unwrap();
    }
    let deletions = (0..SESSIONS).map(|i| {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.delete(&format!("s{i}")).await })
    });
    for deleted in futures_util::future::join_all(deletions).await {
        assert!(deleted.unwrap().unwrap(), "a session was not there to delete");
    }
    // This test's graves only (the log is the binary's).
    let warned = log.lines_with(&[&root.join(TRASH_DIR).display().to_string(), KEPT]);
    assert!(warned.is_empty(), "{} false warnings, the first: {:?}", warned.len(), warned.first());
    assert_eq!(fs::read_dir(root.join(TRASH_DIR)).unwrap().count(), 0, "the trash kept a grave");
    for i in 0..SESSIONS {
        let back = fs::read_to_string(root.join(format!("s{i}")).join("notes.txt")).unwrap();
        assert_eq!(back, format!("app data {i}"));
    }
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_grave_that_keeps_an_app_file_is_logged_once_per_sweep() {
    let log = capture();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A grave whose app file cannot go back: the app has a file of that name there again.
    let grave = root.join(TRASH_DIR).join("kept.0123456789abcdef0123456789abcdef");
    fs::create_dir_all(&grave).unwrap();
    fs::write(grave.join("notes.txt"), "old").unwrap();
    fs::create_dir(root.join("kept")).unwrap();
    fs::write(root.join("kept").join("notes.txt"), "new").unwrap();
    let store = FileStore::new(root);
    assert_eq!(store.sweep_trash().await.unwrap(), 0);
    let warned = log.lines_with(&["kept.0123456789abcdef0123456789abcdef", KEPT]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].starts_with("WARN "), "{warned:?}");
    // Nothing of the app's is lost.
    assert_eq!(fs::read_to_string(grave.join("notes.txt")).unwrap(), "old");
    assert_eq!(fs::read_to_string(root.join("kept").join("notes.txt")).unwrap(), "new");
}
