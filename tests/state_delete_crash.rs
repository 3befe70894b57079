//! Crash harness for deletion: a child process builds a session of two generations (a snapshot,
//! its journal, a newer snapshot and its journal), prints `built <k>`, deletes it, prints
//! `deleted <k>`, and starts again; the parent kills it with SIGKILL at random moments. After
//! each kill the session must load as nothing or as the whole state the child built: never as
//! an older state. (Removing a session's files one by one, a kill that removed the newer snapshot
//! or its journal first left the older generation, which loads as the state of an earlier
//! compaction: a session the app deleted came back as it stood before its last turns, its
//! settled batch pending again, whose approved call a resume would run a second time.)
//!
//! This file has its own `main` (`harness = false`): with `ARKAGENT_DELETE_CHILD=<root>` set, the
//! binary is the child; otherwise it is the parent, which re-invokes itself.
//!
//! - `ARKAGENT_LONG=1`: 400 kills instead of 60.
//! - `ARKAGENT_CRASH_KILLS=<n>`: any number of kills.
//! - `ARKAGENT_CRASH_SEED=<u64>`: replay a run (the seed is printed).

#[path = "support/crash_harness.rs"]
mod crash_harness;
mod state_support;

use arkagent::state::{AgentState, FileStore, FileStoreOptions, StateStore};
use crash_harness::{run_child_then_kill, tmpfs_tempdir, CrashRun};
use state_support::{state_after, turn};
use std::io::Write;
use std::time::{Duration, Instant};

const SESSION: &str = "doomed";
/// Turns 1..=SNAPSHOT_AT go to the first generation, the rest to the second.
const SNAPSHOT_AT: u64 = 5;
const TURNS: u64 = 8;

fn options() -> FileStoreOptions {
    FileStoreOptions { compact_min_bytes: 1 << 30, ..FileStoreOptions::default() }
}

fn child(root: String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let store = FileStore::with_options(root, options());
        let out = std::io::stdout();
        for k in 1u64.. {
            // A session left by the kill before is deleted first (its state is checked by then).
            store.delete(SESSION).await.unwrap();
            let mut state = AgentState::new(SESSION);
            for t in 1..=TURNS {
                let events = turn(t);
                for e in &events {
                    state.apply(e);
                }
                store.commit(&state, &events).await.unwrap();
                if t == SNAPSHOT_AT {
                    store.save_snapshot(&state).await.unwrap();
                }
            }
            writeln!(out.lock(), "built {k}").unwrap();
            store.delete(SESSION).await.unwrap();
            writeln!(out.lock(), "deleted {k}").unwrap();
        }
    });
}

fn main() {
    if let Ok(root) = std::env::var("ARKAGENT_DELETE_CHILD") {
        child(root);
        return;
    }
    let CrashRun { kills, seed } = CrashRun::from_env("state_delete_crash", 60, 400);
    let mut rng = fastrand::Rng::with_seed(seed);
    let root = tmpfs_tempdir();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let whole = state_after(SESSION, TURNS);
    let started = Instant::now();
    let (mut gone, mut kept, mut cycles, mut deleting_kills) = (0usize, 0usize, 0u64, 0usize);
    for kill in 0..kills {
        let delay = Duration::from_micros(rng.u64(2_000..60_000));
        let last =
            run_child_then_kill("ARKAGENT_DELETE_CHILD", root.path(), delay, kill).pop().unwrap_or_default();
        cycles = cycles.max(last.rsplit(' ').next().and_then(|k| k.parse::<u64>().ok()).unwrap_or(0));
        // `built k` last: the kill came while the whole session was being deleted (or just
        // before): it is gone or whole. Otherwise it came while the next one was being built: a
        // prefix of its turns, as any commit loop leaves.
        let deleting = last.starts_with("built ");
        let loaded = rt.block_on(async {
            let store = FileStore::with_options(root.path(), options());
            store.load_unrepaired(SESSION).await
        });
        match loaded {
            Ok(None) => gone += 1,
            Ok(Some(state)) if deleting => {
                let turns = state.messages.len();
                assert!(
                    state == whole,
                    "kill {kill}: killed while deleting it, the session loads as an older state ({turns} messages, \
                     whole: {})",
                    whole.messages.len()
                );
                kept += 1;
            }
            Ok(Some(state)) => {
                let is_prefix = (0..=TURNS).any(|t| state == state_after(SESSION, t));
                assert!(is_prefix, "kill {kill}: the session loads as no state it was built through");
            }
            Err(e) => panic!("kill {kill}: the session does not load: {e}"),
        }
        if deleting {
            deleting_kills += 1;
        }
    }
    println!(
        "state_delete_crash: ok: {kills} kills in {:.1} s (the last child reached cycle {cycles}); \
         {deleting_kills} kills came while a whole session was being deleted, {kept} of them found it \
         whole; {gone} loads found it gone",
        started.elapsed().as_secs_f64()
    );
}
