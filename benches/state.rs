//! Durable state: the cost of committing one turn (3 events, one group commit) at 100, 1,000 and
//! 10,000 messages of history, and one durable journal append against SQLite inserting the same
//! record (WAL, synchronous=FULL) on the same disk, in the same run.
//!
//! `cargo bench --bench state` runs criterion, then measures the same operations again interleaved
//! (so both sides of each ratio see the same disk load) and prints a table with the ratios the
//! targets are about: 10,000 / 100 messages <= 2.0, journal / SQLite <= 1.0, and a commit at
//! 10,000 messages while every compaction fails / the same commit where they succeed <= 2.0.
//!
//! The commit benchmark keeps the state's size fixed (the same `state` is passed each time while its
//! events are appended), so compactions happen at their real rate for that size and are included.

use arkagent::state::codec::encode_records;
use arkagent::state::{AgentState, FileStore, StateEvent, StateStore};
use arkagent::{ChatMessage, Usage};
use criterion::{criterion_group, Criterion};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

#[path = "support/order_history.rs"]
mod order_history;
use order_history::order_history;

const SIZES: [usize; 3] = [100, 1_000, 10_000];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A history of `n` messages: user asks, assistant calls a tool, the tool answers, assistant replies.
fn history(n: usize) -> AgentState {
    order_history("bench", n, Some("Look the order up first."))
}

/// One turn's events: the user's message, the answer, the usage.
fn turn_events() -> Vec<StateEvent> {
    vec![
        StateEvent::MessageAppended { message: ChatMessage::user("And order 43?") },
        StateEvent::MessageAppended { message: ChatMessage::assistant_text("Order 43 is being packed.") },
        StateEvent::UsageAdded {
            usage: Usage { prompt_tokens: 812, completion_tokens: 21, total_tokens: 833 },
        },
    ]
}

/// One record, as a single event (about 200 bytes).
fn one_event() -> Vec<StateEvent> {
    vec![StateEvent::MessageAppended {
        message: ChatMessage::Tool {
            tool_call_id: "call_42".into(),
            name: "query_stock".into(),
            content: "{\"sku\":\"A-42\",\"stock\":17,\"warehouse\":\"Shenzhen-2\",\"updatedAt\":\"2026-11-30T06:00:00Z\"}"
                .into(),
            is_error: false,
        },
    }]
}

fn bench_dir() -> tempfile::TempDir {
    // Under target/: the same disk for the journal and SQLite.
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}

struct CommitCase {
    _dir: tempfile::TempDir,
    store: FileStore,
    state: AgentState,
    events: Vec<StateEvent>,
}

impl CommitCase {
    fn new(rt: &Runtime, state: AgentState, events: Vec<StateEvent>) -> Self {
        let dir = bench_dir();
        let store = FileStore::new(dir.path());
        rt.block_on(store.save_snapshot(&state)).unwrap();
        CommitCase { _dir: dir, store, state, events }
    }

    /// As `new`, on a session whose compactions all fail (a directory stands where the next
    /// generation's temp snapshot goes, so creating it fails as a write on a full disk would),
    /// with a journal already past the snapshot's size: a compaction is due at every commit. The
    /// first one, made here, failed; the store backs off from there.
    fn compaction_failing(rt: &Runtime, state: AgentState, events: Vec<StateEvent>) -> Self {
        let case = CommitCase::new(rt, state, events);
        let dir = case._dir.path().join(&case.state.session_id);
        let snapshot = std::fs::metadata(dir.join(format!("snapshot-{:020}.ark", 1))).unwrap().len();
        std::fs::create_dir(dir.join(format!("snapshot-{:020}.tmp", 2))).unwrap();
        let page = "x".repeat(64 * 1024);
        let filler: Vec<StateEvent> = (0..=snapshot / (64 * 1024))
            .map(|_| StateEvent::MessageAppended { message: ChatMessage::user(page.clone()) })
            .collect();
        rt.block_on(case.store.commit(&case.state, &filler)).unwrap();
        let journal = std::fs::metadata(dir.join(format!("journal-{:020}.ark", 1))).unwrap().len();
        assert!(journal > snapshot, "the journal ({journal} bytes) is past the snapshot ({snapshot} bytes)");
        assert!(!dir.join(format!("snapshot-{:020}.ark", 2)).exists(), "the compaction failed");
        case
    }

    fn run(&self, rt: &Runtime) {
        rt.block_on(self.store.commit(&self.state, &self.events)).unwrap();
    }
}

struct SqliteCase {
    _dir: tempfile::TempDir,
    conn: rusqlite::Connection,
    record: Vec<u8>,
}

impl SqliteCase {
    fn new() -> Self {
        let dir = bench_dir();
        let conn = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        conn.execute_batch(
            "PRAGMA synchronous=FULL; CREATE TABLE journal (seq INTEGER PRIMARY KEY, record BLOB NOT NULL);",
        )
        .unwrap();
        let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 2, "FULL");
        SqliteCase { _dir: dir, conn, record: encode_records(&one_event()).unwrap() }
    }

    fn run(&self) {
        let mut stmt = self.conn.prepare_cached("INSERT INTO journal (record) VALUES (?1)").unwrap();
        stmt.execute([&self.record]).unwrap();
    }
}

fn commit_one_turn(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("state_commit_one_turn");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    for n in SIZES {
        let case = CommitCase::new(&rt, history(n), turn_events());
        g.bench_function(format!("{n}_messages"), |b| b.iter(|| case.run(&rt)));
    }
    let failing = CommitCase::compaction_failing(&rt, history(10_000), turn_events());
    g.bench_function("10000_messages_compaction_failing", |b| b.iter(|| failing.run(&rt)));
    g.finish();
}

fn append_vs_sqlite(c: &mut Criterion) {
    let rt = runtime();
    let journal = CommitCase::new(&rt, history(100), one_event());
    let sqlite = SqliteCase::new();
    let mut g = c.benchmark_group("state_durable_append");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    g.bench_function("journal_append_fdatasync", |b| b.iter(|| journal.run(&rt)));
    g.bench_function("sqlite_wal_full_insert", |b| b.iter(|| sqlite.run()));
    g.finish();
}

criterion_group!(benches, commit_one_turn, append_vs_sqlite);

/// The median of samples.
fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[samples.len() / 2]
}

/// Mean time of one call of `f` over `batch` calls.
fn time_batch(batch: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..batch {
        f();
    }
    t.elapsed().as_secs_f64() / batch as f64
}

/// The interleaved re-measurement behind the printed table.
fn table() {
    let rt = runtime();
    let rounds = 40;
    let batch = 10;
    let commits: Vec<CommitCase> =
        SIZES.iter().map(|&n| CommitCase::new(&rt, history(n), turn_events())).collect();
    let journal = CommitCase::new(&rt, history(100), one_event());
    let sqlite = SqliteCase::new();
    let failing = CommitCase::compaction_failing(&rt, history(10_000), turn_events());
    let mut c_samples = vec![Vec::new(); SIZES.len()];
    let (mut j_samples, mut s_samples, mut f_samples) = (Vec::new(), Vec::new(), Vec::new());
    // Each round starts with a different operation, so none always follows the same neighbour.
    let ops = SIZES.len() + 3;
    for r in 0..rounds {
        for k in 0..ops {
            match (r + k) % ops {
                i if i < SIZES.len() => c_samples[i].push(time_batch(batch, || commits[i].run(&rt))),
                i if i == SIZES.len() => j_samples.push(time_batch(batch, || journal.run(&rt))),
                i if i == SIZES.len() + 1 => f_samples.push(time_batch(batch, || failing.run(&rt))),
                _ => s_samples.push(time_batch(batch, || sqlite.run())),
            }
        }
    }
    let ms = |s: f64| s * 1e3;
    let c: Vec<f64> = c_samples.iter_mut().map(|s| median(s)).collect();
    let (j, s, f) = (median(&mut j_samples), median(&mut s_samples), median(&mut f_samples));
    println!();
    println!("Durable state ({rounds} interleaved rounds of {batch} calls, median per call)");
    println!("| operation                                   | ms/op  | ratio  | target  |");
    println!("|---------------------------------------------|--------|--------|---------|");
    for (i, n) in SIZES.iter().enumerate() {
        let ratio = c[i] / c[0];
        let target = if *n == 10_000 { "<= 2.0" } else { "" };
        println!(
            "| commit one turn (3 events), {n:>6} messages | {:>6.3} | {ratio:>6.2} | {target:<7} |",
            ms(c[i])
        );
    }
    println!(
        "| the same, 10,000 messages, compaction failing | {:>6.3} | {:>6.2} | <= 2.0  |",
        ms(f),
        f / c[2]
    );
    println!("| journal append + fdatasync (1 event)        | {:>6.3} | {:>6.2} | <= 1.0  |", ms(j), j / s);
    println!("| SQLite insert, WAL + synchronous=FULL       | {:>6.3} | {:>6.2} |         |", ms(s), 1.0);
    println!();
    println!(
        "10,000 / 100 messages: {:.2} (target <= 2.0); journal / SQLite: {:.2} (target <= 1.0); \
         compaction failing / succeeding at 10,000 messages: {:.2} (target <= 2.0)",
        c[2] / c[0],
        j / s,
        f / c[2]
    );
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    table();
}
