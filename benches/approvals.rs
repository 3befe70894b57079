//! Deciding a big frozen batch on a `FileStore` through the `Agent`: N dangerous calls frozen in
//! one batch (N = 100, 300, 1000), then every item approved one at a time (`Agent::approve`), and
//! the same batch approved at once (`Agent::approve_all`), in the same run.
//!
//! `cargo bench --bench approvals` prints a table: the time per decision one by one (which
//! should not grow with N: each load folds only the records appended since the state the store
//! cached, instead of decoding the whole batch again), its ratio to the figure at N = 100, and
//! `approve_all` of the whole batch (one commit) against deciding its items one by one. Medians of
//! a few rounds, each on a fresh session; the machine's other jobs make single figures noisy.
//! Run by `cargo test --all-targets` (no `--bench` argument), it decides N = 100 once, as a check
//! that it works.

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome};
use arkagent::message::ToolCall;
use arkagent::provider::{ModelResponse, ScriptedModel};
use arkagent::state::FileStore;
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;
use tokio::runtime::Runtime;

const SIZES: [usize; 3] = [100, 300, 1000];
const ROUNDS: usize = 3;

/// An agent over a fresh store whose session `s` is frozen on `n` dangerous calls, and the ids
/// of its items.
fn frozen(rt: &Runtime, n: usize) -> (tempfile::TempDir, Agent, Vec<String>) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let calls: Vec<ToolCall> =
        (0..n).map(|k| ToolCall::new(format!("c{k}"), "wipe", format!(r#"{{"k":{k}}}"#))).collect();
    let model = ScriptedModel::new(vec![ModelResponse {
        content: None,
        reasoning_content: None,
        tool_calls: calls,
        finish_reason: Some("tool_calls".into()),
        usage: None,
    }]);
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("wipe", "dangerous", json!({"type":"object"}))
                .with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(|_a, _ctx| async move { Ok(ToolResult::text("wiped")) })),
        )
        .unwrap();
    let agent = AgentBuilder::new(Arc::new(model), Arc::new(FileStore::new(dir.path()))).tools(tools).build();
    let ids = rt.block_on(async {
        let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else { panic!("not suspended: {out:?}") };
        batch.items.iter().map(|i| i.approval_id.clone()).collect()
    });
    (dir, agent, ids)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let measured = std::env::args().any(|a| a == "--bench");
    let (sizes, rounds) = if measured { (&SIZES[..], ROUNDS) } else { (&SIZES[..1], 1) };
    println!();
    println!("Deciding a frozen batch of N items on a FileStore ({rounds} rounds, medians)");
    println!("| N | one by one, total ms | per decision ms | per decision / at N=100 | approve_all ms | one by one / approve_all |");
    println!("|---|---|---|---|---|---|");
    let mut base = None;
    for &n in sizes {
        let (mut each, mut all) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (_dir, agent, ids) = frozen(&rt, n);
            let start = Instant::now();
            rt.block_on(async {
                for id in &ids {
                    agent.approve("s", id).await.unwrap();
                }
            });
            each.push(start.elapsed().as_secs_f64() * 1e3);
            let (_dir, agent, _) = frozen(&rt, n);
            let start = Instant::now();
            let batch = rt.block_on(agent.approve_all("s")).unwrap();
            all.push(start.elapsed().as_secs_f64() * 1e3);
            assert!(batch.is_fully_decided());
        }
        let (each, all) = (median(each), median(all));
        let per = each / n as f64;
        let base = *base.get_or_insert(per);
        println!("| {n} | {each:.1} | {per:.3} | {:.2} | {all:.2} | {:.0} |", per / base, each / all);
    }
}
