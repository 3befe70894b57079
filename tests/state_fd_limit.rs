//! A `FileStore` under a low limit of file descriptors (`ulimit -n`, an app's or a device's). The
//! store kept up to `MAX_OPEN_JOURNALS` idle journals open and never gave them back: past the
//! limit, every new session's first commit failed with `state_io` (`Too many open files`) until
//! the store was dropped, and each failure left an empty directory or a header-only journal.
//!
//! The limit is set in a child process, this test binary run again under `sh -c 'ulimit -n ...'`
//! (lowering one's own soft limit needs no privilege); the parent checks what it left on disk.

#[path = "state_support/mod.rs"]
mod state_support;

use arkagent::codes;
use arkagent::state::{AgentState, FileStore, StateStore, TRASH_DIR};
use state_support::turn;
use std::fs;
use std::path::Path;
use std::process::Command;

/// The child's state directory, set by the parent.
const CHILD_ROOT: &str = "ARKAGENT_FD_LIMIT_ROOT";

/// The child's limit of descriptors: well under `MAX_OPEN_JOURNALS` (64) plus what the process
/// holds besides.
const LIMIT: usize = 48;

/// More sessions than the limit lets the store keep open.
const SESSIONS: usize = 80;

fn state_of(id: &str) -> (AgentState, Vec<arkagent::state::StateEvent>) {
    let mut state = AgentState::new(id);
    let events = turn(1);
    for event in &events {
        state.apply(event);
    }
    (state, events)
}

/// Runs `test` of this binary in a child whose descriptor limit is [`LIMIT`], over `root`.
fn in_child_with_few_descriptors(test: &str, root: &Path) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {LIMIT} && exec \"$0\" \"$@\""))
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ROOT, root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn new_sessions_keep_committing_under_a_low_descriptor_limit() {
    let Some(root) = std::env::var_os(CHILD_ROOT) else {
        let dir = tempfile::tempdir().unwrap();
        in_child_with_few_descriptors(
            "new_sessions_keep_committing_under_a_low_descriptor_limit",
            dir.path(),
        );
        // Every session is on disk, whole, and nothing else is.
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let store = FileStore::new(dir.path());
        let ids: Vec<String> = (0..SESSIONS).map(|i| format!("s{i:03}")).collect();
        assert_eq!(rt.block_on(store.list()).unwrap(), ids);
        for id in &ids {
            assert_eq!(rt.block_on(store.load_unrepaired(id)).unwrap(), Some(state_of(id).0), "{id}");
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), SESSIONS + 1, "the sessions and {TRASH_DIR}");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = FileStore::new(&root);
    for i in 0..SESSIONS {
        let (state, events) = state_of(&format!("s{i:03}"));
        rt.block_on(store.commit(&state, &events)).unwrap_or_else(|e| panic!("session {i}: {e}"));
    }
    // The journals kept open are those written last: the first sessions commit again.
    for i in 0..3 {
        let id = format!("s{i:03}");
        let (state, _) = state_of(&id);
        rt.block_on(store.commit(&state, &[])).unwrap_or_else(|e| panic!("{id} again: {e}"));
    }
}

#[test]
fn a_first_commit_that_finds_no_descriptor_leaves_nothing_of_the_session() {
    let Some(root) = std::env::var_os(CHILD_ROOT) else {
        let dir = tempfile::tempdir().unwrap();
        in_child_with_few_descriptors(
            "a_first_commit_that_finds_no_descriptor_leaves_nothing_of_the_session",
            dir.path(),
        );
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [TRASH_DIR, "kept"],
            "no directory or journal of the sessions whose first commit failed"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = FileStore::new(&root);
    let (kept, events) = state_of("kept");
    rt.block_on(store.commit(&kept, &events)).unwrap();
    // Every descriptor taken: the first commit of a new session fails before its directory is
    // synced; tried again once the store gave back the journal of `kept`, it gets as far as its
    // journal made. The next session has that one descriptor, and no journal to give back.
    let mut filler = Vec::new();
    while let Ok(f) = fs::File::open("/dev/null") {
        filler.push(f);
    }
    for id in ["cut0", "cut1"] {
        let (state, events) = state_of(id);
        let e = rt.block_on(store.commit(&state, &events)).expect_err(id);
        assert_eq!(e.code, codes::STATE_IO, "{e}");
        assert!(!Path::new(&root).join(id).exists(), "{id}: {e}");
    }
    drop(filler);
    assert_eq!(rt.block_on(store.load_unrepaired("kept")).unwrap(), Some(kept));
}
