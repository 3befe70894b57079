//! A load racing a deletion by another store (another process: loads take no lease, and a
//! store's own lock serialises only its own calls). `delete` moves the session's directory into
//! the trash in one rename and removes it there, so a load that read part of the session before
//! the move finds the rest gone. Such a load must answer as if it came before the deletion (the
//! whole state) or after it (`None`): never `state_io` or `state_corrupt` for files that vanished,
//! and never the older state of a snapshot whose journal it did not get to read.
//!
//! The race is real (two threads, no injection point), so how often a load lands in the middle
//! varies; the test reports it. Every outcome it accepts is correct, so it cannot fail by chance,
//! only miss a fault on a given run. `ARKAGENT_LONG=1` runs 2000 rounds instead of 150.

#[path = "support/crash_harness.rs"]
mod crash_harness;
mod state_support;

use arkagent::state::{AgentState, FileStore, FileStoreOptions, StateStore};
use crash_harness::tmpfs_tempdir;
use state_support::{state_after, turn};
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const ID: &str = "raced";
const TURNS: u64 = 40;

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_racing_a_deletion_finds_the_whole_session_or_none() {
    let rounds = if std::env::var("ARKAGENT_LONG").is_ok_and(|v| v == "1") { 2000 } else { 150 };
    // A session of several generations: the snapshots, their journals, many files to read.
    let template = tmpfs_tempdir();
    let options = FileStoreOptions { compact_min_bytes: 2048, ..FileStoreOptions::default() };
    {
        let store = FileStore::with_options(template.path(), options.clone());
        let mut state = AgentState::new(ID);
        for k in 1..=TURNS {
            let events = turn(k);
            for e in &events {
                state.apply(e);
            }
            store.commit(&state, &events).await.unwrap();
        }
    }
    let whole = state_after(ID, TURNS);
    let root = tmpfs_tempdir();
    let (mut before, mut after) = (0usize, 0usize);
    let mut wrong: Vec<String> = Vec::new();
    for round in 0..rounds {
        copy_dir(&template.path().join(ID), &root.path().join(ID));
        let deleter = Arc::new(FileStore::with_options(root.path(), options.clone()));
        let loader = Arc::new(FileStore::with_options(root.path(), options.clone()));
        let deleted = Arc::new(AtomicBool::new(false));
        let loads = {
            let (loader, deleted) = (loader.clone(), deleted.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    let done = deleted.load(Ordering::SeqCst);
                    let r = loader.load_unrepaired(ID).await;
                    let gone = matches!(r, Ok(None));
                    seen.push((done, r));
                    if gone || done {
                        return seen;
                    }
                }
            })
        };
        tokio::task::yield_now().await;
        assert!(deleter.delete(ID).await.unwrap(), "round {round}: deleted");
        deleted.store(true, Ordering::SeqCst);
        for (done, r) in loads.await.unwrap() {
            match r {
                Ok(Some(state)) if state != whole => wrong.push(format!(
                    "round {round}: an older state ({} of {} messages)",
                    state.messages.len(),
                    whole.messages.len()
                )),
                Ok(Some(_)) if done => wrong.push(format!("round {round}: the session after its deletion")),
                Ok(Some(_)) => before += 1,
                Ok(None) => after += 1,
                Err(e) => wrong.push(format!("round {round}: {e}")),
            }
        }
        assert!(loader.load_unrepaired(ID).await.unwrap().is_none());
    }
    println!(
        "{rounds} rounds: {before} loads found the whole session, {after} found none, {} were wrong",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{} loads racing a deletion were wrong: {wrong:#?}", wrong.len());
    assert!(after > 0);
}
