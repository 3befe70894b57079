//! Listing sessions (`Agent::list_sessions` on a `FileStore`): what an app pays at start-up to show
//! its conversations. 100 sessions of 20 messages and 100 sessions of 400 messages, against the
//! same sessions loaded one by one (`StateStore::load`, what an app without a listing would do with
//! ids it kept itself) and against the bare id scan (`StateStore::list`).
//!
//! `cargo bench --bench sessions` runs criterion, then measures the same operations again
//! interleaved (so both sides of each ratio see the same machine load) and prints a table with the
//! ratio the target is about: a listing costs no more than loading every session one by one
//! (listing / loads <= 1.2: the summary, the worker scan and the time stamps add little).

use arkagent::agent::{Agent, AgentBuilder};
use arkagent::provider::ScriptedModel;
use arkagent::state::{AgentState, FileStore, RunStatus, StateStore};
use criterion::{criterion_group, Criterion};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

#[path = "support/order_history.rs"]
mod order_history;
use order_history::order_history;

const SESSIONS: usize = 100;
const SIZES: [usize; 2] = [20, 400];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A completed session of `n` messages: questions, tool calls, results, answers.
fn session(id: &str, n: usize) -> AgentState {
    let mut s = order_history(id, n, None);
    s.status = RunStatus::Completed;
    s
}

/// A store under `dir` holding [`SESSIONS`] sessions of `n` messages, and an agent over it.
fn fill(rt: &Runtime, dir: &Path, n: usize) -> (Arc<FileStore>, Agent) {
    let store = Arc::new(FileStore::new(dir));
    rt.block_on(async {
        for k in 0..SESSIONS {
            store.save_snapshot(&session(&format!("chat-{k:03}"), n)).await.unwrap();
        }
    });
    let agent = AgentBuilder::new(Arc::new(ScriptedModel::new(vec![])), store.clone()).build();
    (store, agent)
}

async fn load_each(store: &FileStore, ids: &[String]) -> usize {
    let mut messages = 0;
    for id in ids {
        messages += store.load(id).await.unwrap().unwrap().messages.len();
    }
    messages
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Arc<FileStore>,
    agent: Agent,
    ids: Vec<String>,
}

fn setups(rt: &Runtime) -> Vec<Setup> {
    SIZES
        .iter()
        .map(|&n| {
            let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let (store, agent) = fill(rt, dir.path(), n);
            let ids = rt.block_on(store.list()).unwrap();
            assert_eq!(ids.len(), SESSIONS);
            Setup { _dir: dir, store, agent, ids }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let setups = setups(&rt);
    let mut g = c.benchmark_group("sessions_listing");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for (s, n) in setups.iter().zip(SIZES) {
        g.bench_function(format!("list_sessions_{SESSIONS}x{n}"), |b| {
            b.iter(|| rt.block_on(s.agent.list_sessions()).unwrap().len())
        });
        g.bench_function(format!("load_each_{SESSIONS}x{n}"), |b| {
            b.iter(|| rt.block_on(load_each(&s.store, &s.ids)))
        });
        g.bench_function(format!("list_ids_{SESSIONS}x{n}"), |b| {
            b.iter(|| rt.block_on(s.store.list()).unwrap().len())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The interleaved measurement: per size, rounds of (listing, loads, id scan), each round starting
/// with a different one.
fn table() {
    let rt = runtime();
    let setups = setups(&rt);
    let rounds = 30;
    println!();
    println!("Session listing ({SESSIONS} sessions, {rounds} interleaved rounds, median per call)");
    println!(
        "| sessions x messages | list_sessions ms | load each ms | list ids ms | listing / loads | target |"
    );
    println!("|---|---|---|---|---|---|");
    for (s, n) in setups.iter().zip(SIZES) {
        let mut t = [Vec::new(), Vec::new(), Vec::new()];
        for r in 0..rounds {
            for k in 0..3 {
                let which = (r + k) % 3;
                let start = Instant::now();
                match which {
                    0 => assert_eq!(rt.block_on(s.agent.list_sessions()).unwrap().len(), SESSIONS),
                    1 => assert!(rt.block_on(load_each(&s.store, &s.ids)) >= SESSIONS * n),
                    _ => assert_eq!(rt.block_on(s.store.list()).unwrap().len(), SESSIONS),
                }
                t[which].push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        let [l, e, i] = t.each_mut().map(|v| median(v));
        println!("| {SESSIONS} x {n} | {l:.3} | {e:.3} | {i:.3} | {:.2} | <= 1.2 |", l / e);
    }
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    table();
}
