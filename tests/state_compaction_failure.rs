//! A commit's events are durable once its journal append is synced; folding the journal into a
//! new snapshot (compaction) is bookkeeping after that. A compaction that fails (a full disk: the
//! small append fits, the whole snapshot does not) must not turn a durable commit into an error:
//! the caller would take a decision or a tool's `started` record for lost while it stands (an
//! `approve` answered `state_io` whose approval a later `resume` acts on). The commit succeeds,
//! a later one tries the compaction again, and nothing is lost either way. A compaction that keeps
//! failing backs off (the journal at least doubles between two tries, each logged once) instead of
//! being tried, and logged, at every commit; once one succeeds, the backoff starts over.
//!
//! The failure is injected from outside the store: a directory stands where the new snapshot's
//! temp file goes, so creating it fails as a write for want of space would.

#[path = "support/log_capture.rs"]
mod log_capture;
mod state_support;

use arkagent::state::{AgentState, FileStore, FileStoreOptions, StateStore};
use state_support::{files, state_after, turn};
use std::fs;
use std::path::Path;

#[tokio::test]
async fn a_commit_whose_events_are_durable_succeeds_though_its_compaction_failed() {
    let root = tempfile::tempdir().unwrap();
    let opts = FileStoreOptions { compact_min_bytes: 2048, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut state = AgentState::new("s1");
    let commit = |k: u64, state: &mut AgentState| {
        let events = turn(k);
        for e in &events {
            state.apply(e);
        }
        (state.clone(), events)
    };
    let (saved, events) = commit(1, &mut state);
    store.commit(&saved, &events).await.unwrap();
    let dir = root.path().join("s1");
    assert_eq!(files(&dir, "snapshot-").len(), 1);
    // The next generation's snapshot cannot be written: a directory stands where its temp file
    // goes, as a write that fails for want of space would.
    let blocked = dir.join(format!("snapshot-{:020}.tmp", 2));
    fs::create_dir(&blocked).unwrap();
    for k in 2..=40 {
        let (saved, events) = commit(k, &mut state);
        store.commit(&saved, &events).await.unwrap_or_else(|e| panic!("commit {k}: {e}"));
    }
    let snapshots = || -> Vec<_> {
        files(&dir, "snapshot-").into_iter().filter(|p| p.extension().is_some_and(|x| x == "ark")).collect()
    };
    assert_eq!(snapshots().len(), 1, "no compaction could happen: {:?}", snapshots());
    assert_eq!(state, state_after("s1", 40));
    assert_eq!(FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap(), state);
    assert_eq!(store.load_unrepaired("s1").await.unwrap().unwrap(), state);
    // Once it can, a later commit compacts, and nothing was lost.
    fs::remove_dir(&blocked).unwrap();
    for k in 41..=45 {
        let (saved, events) = commit(k, &mut state);
        store.commit(&saved, &events).await.unwrap();
    }
    assert!(dir.join(format!("snapshot-{:020}.ark", 2)).is_file(), "{:?}", snapshots());
    assert_eq!(
        FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap(),
        state_after("s1", 45)
    );
}

fn journal(dir: &Path, gen: u64) -> std::path::PathBuf {
    dir.join(format!("journal-{gen:020}.ark"))
}

fn len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn a_compaction_that_keeps_failing_backs_off_and_resumes_once_it_can() {
    const ID: &str = "backoff";
    const MIN: u64 = 2048;
    let log = log_capture::capture();
    let tries = || log.lines_with(&["WARN", "session backoff could not be compacted"]).len();
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::with_options(
        root.path(),
        FileStoreOptions { compact_min_bytes: MIN, ..Default::default() },
    );
    let dir = root.path().join(ID);
    let mut state = AgentState::new(ID);
    let mut k = 0;
    commit_next(&store, &mut state, &mut k).await;
    let snapshot1 = len(&dir.join(format!("snapshot-{:020}.ark", 1)));
    let blocked = dir.join(format!("snapshot-{:020}.tmp", 2));
    fs::create_dir(&blocked).unwrap();

    // 400 commits while no compaction can succeed: the journal length at each try.
    let mut tried_at: Vec<u64> = Vec::new();
    let mut due = 0;
    for _ in 0..400 {
        commit_next(&store, &mut state, &mut k).await;
        let now = len(&journal(&dir, 1));
        due += usize::from(now >= MIN.max(snapshot1));
        if tries() > tried_at.len() {
            tried_at.push(now);
        }
        assert_eq!(tries(), tried_at.len(), "at most one try per commit");
    }
    let end = len(&journal(&dir, 1));
    println!("{due} commits found a compaction due; tried at journal lengths {tried_at:?} (end {end})");
    assert!(tried_at.len() >= 3, "tried again after failures: {tried_at:?}");
    assert!(tried_at[0] >= MIN.max(snapshot1) && tried_at[0] < MIN.max(snapshot1) + 4096, "{tried_at:?}");
    for pair in tried_at.windows(2) {
        assert!(pair[1] >= 2 * pair[0], "the journal at least doubles between two tries: {tried_at:?}");
    }
    let bound = 1 + (end / tried_at[0]).ilog2() as usize;
    assert!(tried_at.len() <= bound, "{} tries, more than {bound}", tried_at.len());
    assert!(due > 10 * tried_at.len(), "{due} commits found a compaction due");
    // Each failed try left nothing behind but the obstacle: no half-made generation.
    assert!(!journal(&dir, 2).exists());
    let mut names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    // So the writer is still the session's: a lease keeps it, and its backoff (no try at once).
    let lease = store.lease(ID).await.unwrap();
    let before = tries();
    commit_next(&store, &mut state, &mut k).await;
    assert_eq!(tries(), before, "the lease reopened the session and tried again at once");
    drop(lease);
    // Nothing is lost.
    assert_eq!(state, state_after(ID, k));
    assert_eq!(FileStore::new(root.path()).load_unrepaired(ID).await.unwrap().unwrap(), state);
    assert_eq!(store.load_unrepaired(ID).await.unwrap().unwrap(), state);

    // The failure ends: the next try, once due, succeeds.
    fs::remove_dir(&blocked).unwrap();
    let retry_at: u64 = {
        let last = log.lines_with(&["session backoff could not be compacted"]).pop().unwrap();
        let (_, rest) = last.split_once("reaches ").unwrap();
        rest.split(' ').next().unwrap().parse().unwrap()
    };
    let mut before = len(&journal(&dir, 1));
    assert!(before < retry_at);
    let snapshot2 = dir.join(format!("snapshot-{:020}.ark", 2));
    while !snapshot2.exists() {
        assert!(before < retry_at, "no compaction though the journal reached {before} of {retry_at}");
        commit_next(&store, &mut state, &mut k).await;
        before = len(&journal(&dir, 1));
    }
    assert!(before >= retry_at, "compacted at {before}, before the backoff's {retry_at}");
    assert_eq!(log.lines_with(&["session backoff was compacted after"]).len(), 1);
    let tries_then = tries();
    assert_eq!(FileStore::new(root.path()).load_unrepaired(ID).await.unwrap().unwrap(), state);

    // The backoff started over: with the next generation blocked too, the first try comes as soon
    // as the journal reaches the usual threshold.
    let threshold = MIN.max(len(&snapshot2));
    fs::create_dir(dir.join(format!("snapshot-{:020}.tmp", 3))).unwrap();
    let mut before = len(&journal(&dir, 2));
    while tries() == tries_then {
        assert!(before < threshold, "no try though the journal reached {before} of {threshold}");
        commit_next(&store, &mut state, &mut k).await;
        before = len(&journal(&dir, 2));
    }
    assert!(before >= threshold);
    assert_eq!(tries(), tries_then + 1);
    assert_eq!(FileStore::new(root.path()).load_unrepaired(ID).await.unwrap().unwrap(), state);
    assert_eq!(state, state_after(ID, k));
}

/// Folds and commits the next turn (`k` counts them).
async fn commit_next(store: &FileStore, state: &mut AgentState, k: &mut u64) {
    *k += 1;
    let events = turn(*k);
    for e in &events {
        state.apply(e);
    }
    store.commit(state, &events).await.unwrap_or_else(|e| panic!("commit {k}: {e}"));
}
