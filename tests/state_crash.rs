//! Crash harness: a child process commits turns in a loop, printing each committed sequence number
//! after its commit returns; the parent kills it with SIGKILL at random moments. After each kill the
//! session loads and equals the state of the last reported commit, or of the one after it (committed,
//! then killed before it was printed); no decided approval is lost; the repaired load satisfies the
//! pairing invariant.
//!
//! This file has its own `main` (`harness = false`): with `ARKAGENT_CRASH_CHILD=<root>` set, the
//! binary is the child; otherwise it is the parent, which re-invokes itself.
//!
//! - `ARKAGENT_LONG=1`: 500 kills instead of 50.
//! - `ARKAGENT_CRASH_KILLS=<n>`: any number of kills.
//! - `ARKAGENT_CRASH_SEED=<u64>`: replay a run (the seed is printed).
//!
//! SIGKILL stops the process, not the machine: the page cache survives. Torn writes that only a
//! power cut leaves are covered by tests/state_recovery.rs, which cuts the journal at every byte.

#[path = "support/crash_harness.rs"]
mod crash_harness;
mod state_support;

use arkagent::approval::ApprovalDecision;
use arkagent::state::{check_pairing, AgentState, FileStore, FileStoreOptions, StateStore};
use crash_harness::{run_child_then_kill, CrashRun};
use state_support::turn;
use std::io::Write;
use std::time::{Duration, Instant};

const SESSION: &str = "crash";

fn options() -> FileStoreOptions {
    // Small, so compactions (and kills during them) are frequent.
    FileStoreOptions { compact_min_bytes: 4096, ..FileStoreOptions::default() }
}

fn seq_of(state: &AgentState) -> u64 {
    state.metadata.get("seq").and_then(|v| v.as_u64()).unwrap_or(0)
}

fn child(root: String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let store = FileStore::with_options(root, options());
        let mut state =
            store.load_unrepaired(SESSION).await.unwrap().unwrap_or_else(|| AgentState::new(SESSION));
        let mut k = seq_of(&state);
        let out = std::io::stdout();
        loop {
            k += 1;
            let events = turn(k);
            for e in &events {
                state.apply(e);
            }
            store.commit(&state, &events).await.unwrap();
            if k.is_multiple_of(17) {
                store.save_snapshot(&state).await.unwrap();
            }
            let mut lock = out.lock();
            writeln!(lock, "committed {k}").unwrap();
            lock.flush().unwrap();
        }
    });
}

fn main() {
    if let Ok(root) = std::env::var("ARKAGENT_CRASH_CHILD") {
        child(root);
        return;
    }
    let CrashRun { kills, seed } = CrashRun::from_env("state_crash", 50, 500);
    let mut rng = fastrand::Rng::with_seed(seed);
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    let started = Instant::now();
    let mut last_reported = 0u64;
    let mut expected = AgentState::new(SESSION);
    let (mut ahead, mut reported_total, mut decided_checked, mut mid_compaction) =
        (0usize, 0u64, 0usize, 0usize);
    for kill in 0..kills {
        // A quarter of the kills land during start-up and loading, the rest during the commit loop.
        let delay = if rng.u8(0..4) == 0 { rng.u64(0..3_000) } else { rng.u64(3_000..120_000) };
        let lines =
            run_child_then_kill("ARKAGENT_CRASH_CHILD", root.path(), Duration::from_micros(delay), kill);
        let reported =
            lines.iter().map(|line| line.strip_prefix("committed ").unwrap().parse::<u64>().unwrap()).max();
        if let Some(k) = reported {
            assert!(k >= last_reported, "kill {kill}: sequence went backwards");
            reported_total += k - last_reported;
            last_reported = k;
        }

        // Leftovers of a compaction cut short: a temp snapshot, or a journal newer than the newest
        // snapshot, or more than two generations (pruning not reached).
        if let Ok(dir) = std::fs::read_dir(root.path().join(SESSION)) {
            let names: Vec<String> =
                dir.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            let snaps = names.iter().filter(|n| n.starts_with("snapshot-") && n.ends_with(".ark")).count();
            let journals = names.iter().filter(|n| n.starts_with("journal-")).count();
            if names.iter().any(|n| n.ends_with(".tmp")) || journals > snaps || snaps > 2 {
                mid_compaction += 1;
            }
        }
        let (loaded, repaired) = rt.block_on(async {
            let store = FileStore::with_options(root.path(), options());
            (store.load_unrepaired(SESSION).await.unwrap(), store.load(SESSION).await.unwrap())
        });
        let loaded = loaded.unwrap_or_else(|| AgentState::new(SESSION));
        let s = seq_of(&loaded);
        assert!(
            s == last_reported || s == last_reported + 1,
            "kill {kill}: loaded seq {s}, last reported {last_reported}"
        );
        if s == last_reported + 1 {
            ahead += 1;
            last_reported = s;
        }
        for k in seq_of(&expected) + 1..=s {
            for e in turn(k) {
                expected.apply(&e);
            }
        }
        assert_eq!(loaded, expected, "kill {kill}: the loaded state differs from the fold of turns 1..={s}");
        // No decided approval is lost: after a decision turn (k % 5 == 2) and while its call runs
        // (k % 5 == 3), the persisted batch holds the decision.
        if s % 5 == 2 || s % 5 == 3 {
            let batch = loaded.pending_approval.as_ref().expect("the batch is persisted");
            assert_ne!(batch.items[0].decision, ApprovalDecision::Pending, "kill {kill}: decision lost");
            decided_checked += 1;
        }
        let repaired = repaired.unwrap_or_else(|| AgentState::new(SESSION));
        let pending: Vec<&str> = match &repaired.pending_approval {
            Some(b) if repaired.status == arkagent::state::RunStatus::AwaitingApproval => {
                b.items.iter().map(|i| i.tool_call.id.as_str()).collect()
            }
            _ => Vec::new(),
        };
        check_pairing(&repaired.messages, &pending).unwrap_or_else(|e| panic!("kill {kill}: {e}"));
    }
    let mut files: Vec<String> = std::fs::read_dir(root.path().join(SESSION))
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    files.sort();
    println!(
        "state_crash: ok: {kills} kills in {:.1} s; {reported_total} commits reported, final seq {last_reported}; \
         {ahead} kills landed after a commit and before its report; \
         {mid_compaction} loads found leftovers of a compaction cut short; {decided_checked} loads checked a decided \
         approval; session files {files:?}",
        started.elapsed().as_secs_f64()
    );
}
