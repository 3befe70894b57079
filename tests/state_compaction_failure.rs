//! A commit's events are durable once its journal append is synced; folding the journal into a
//! new snapshot (compaction) is bookkeeping after that. A compaction that fails (a full disk: the
//! small append fits, the whole snapshot does not) must not turn a durable commit into an error:
//! the caller would take a decision or a tool's `started` record for lost while it stands (an
//! `approve` answered `state_io` whose approval a later `resume` acts on). The commit succeeds,
//! the next one tries the compaction again, and nothing is lost either way.

mod state_support;

use arkagent::state::{AgentState, FileStore, FileStoreOptions, StateStore};
use state_support::{files, state_after, turn};
use std::fs;

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
