//! Fault soak: many runs of the real [`Agent`] with the OpenAI-compatible client against the local
//! fault-injecting mock server, on a [`FileStore`], with random faults (500, 429, connections
//! closed or reset mid-stream, truncated streams, slow drips), random cancellations and random
//! SIGKILLs of a child process running the agent. After each run, and again after the session is
//! driven to its end by a fresh agent (as the app would after a restart):
//! - nothing panicked (the in-process run is a task whose panic is seen; a child must die by the
//!   kill or exit 0),
//! - the state loads,
//! - the pairing invariant holds (`check_pairing`; the calls of a batch awaiting approval may be
//!   unanswered),
//! - no tool ran twice: each executor appends its call id to a side file before it works, and no
//!   id appears twice there,
//! - no decided approval was lost: every decision whose `approve`/`deny` returned is still in the
//!   batch, or the batch is settled and the call is answered; a denied call never ran.
//!
//! This file has its own `main` (`harness = false`): with `ARKAGENT_SOAK_CHILD` set, the binary is
//! the child; otherwise the parent, which re-invokes itself (the approach of tests/state_crash.rs).
//!
//! - default: 200 runs (CI; about 8 s in a debug build). A bug that ran a call twice showed in
//!   about one run in 300: 30 runs missed it nine times in ten, 200 catch it about half the time.
//! - `ARKAGENT_SOAK=<n>`: n runs (the long mode, e.g. 10000).
//! - `ARKAGENT_SOAK_SEED=<u64>`: replay (the seed is printed).
//! - `ARKAGENT_SOAK_SECS=<s>`: stop after this many seconds (the summary says how many ran).

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, NoEvents, RunOutcome};
use arkagent::approval::ApprovalDecision;
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy, Timeouts};
use arkagent::state::{check_pairing, AgentState, FileStore, FileStoreOptions, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{
    CancellationSignal, ChatMessage, RiskLevel, ToolContext, ToolDefinition, ToolRegistry, ToolResult,
};
use mock_server::{End, MockServer, Reply};
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "sk-soak-0000";

// ---------------------------------------------------------------------------------------------
// The agent under test (parent and child build it the same way)

fn exec_log(root: &Path, session: &str) -> PathBuf {
    root.join(format!("exec-{session}.log"))
}

/// `note` (safe) and `wipe` (dangerous: needs approval). Each appends its call id to the side file
/// before working, then works for a few milliseconds (so kills and cancellations land mid-call).
fn tools(root: &Path) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, risk) in [("note", RiskLevel::Safe), ("wipe", RiskLevel::Dangerous)] {
        let root = root.to_path_buf();
        let def = ToolDefinition::new(
            name,
            format!("soak tool {name}"),
            json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}),
        )
        .with_risk(risk);
        r.register(
            def,
            Arc::new(FnExecutor(
                move |args: serde_json::Map<String, serde_json::Value>, ctx: ToolContext| {
                    let root = root.clone();
                    async move {
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(exec_log(&root, &ctx.session_id))
                            .expect("exec log");
                        writeln!(f, "{}", ctx.call_id).expect("exec log write");
                        drop(f);
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..4))).await;
                        Ok(ToolResult::text(format!("done {}", args["n"])))
                    }
                },
            )),
        )
        .unwrap();
    }
    r
}

fn agent(root: &Path, base_url: &str) -> Agent {
    let config = ClientConfig::custom(base_url, "soak-model", KEY)
        .with_retry(RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            jitter: 0.5,
            max_retry_after: Duration::from_millis(50),
        })
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(2),
            idle: Duration::from_millis(300),
            total: Duration::from_secs(5),
            ..Timeouts::default()
        });
    let model = Arc::new(OpenAiCompatibleClient::new(config).expect("client"));
    let store = Arc::new(FileStore::with_options(
        root,
        FileStoreOptions { compact_min_bytes: 2048, ..FileStoreOptions::default() },
    ));
    AgentBuilder::new(model, store)
        .tools(tools(root))
        .config(AgentConfig { streaming: true, ..AgentConfig::default() })
        .build()
}

// ---------------------------------------------------------------------------------------------
// Scripted answers and faults

fn sse(chunks: &[serde_json::Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// An answer with tool calls `(id, name)`.
fn calls_body(calls: &[(String, &str)]) -> Vec<u8> {
    let deltas: Vec<serde_json::Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (id, name))| {
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":id,"type":"function",
                "function":{"name":name,"arguments":format!("{{\"n\":{i}}}")}}]}}]})
        })
        .collect();
    let mut chunks = vec![json!({"choices":[{"index":0,"delta":{"role":"assistant"}}]})];
    chunks.extend(deltas);
    chunks.push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}));
    sse(&chunks)
}

fn text_body(text: &str) -> Vec<u8> {
    sse(&[
        json!({"choices":[{"index":0,"delta":{"role":"assistant","content":text}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ])
}

/// The good reply, or a fault before it (the fault comes first in the queue; a retried fault is
/// followed by the good reply, a fatal one ends the run).
fn faulty(rng: &mut fastrand::Rng, body: Vec<u8>, counts: &mut Counts) -> Vec<Reply> {
    let mut out = Vec::new();
    for _ in 0..rng.usize(0..3) {
        if rng.u8(0..3) != 0 {
            continue;
        }
        // A cut stream ends before the chunk with the finish reason: a cut after it would be a
        // complete answer, and the good reply behind it would answer the next round instead.
        let finish = body.windows(13).position(|w| w == b"finish_reason").expect("finish chunk");
        let line_start = body[..finish].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let cut = rng.usize(1..line_start.max(2));
        let fault = match rng.u8(0..5) {
            0 => Reply::error(500, "server_error", "boom"),
            1 => Reply::error(429, "rate_limited", "slow down").with_header("Retry-After", "0"),
            2 => Reply::Close,
            3 => Reply::sse_in_pieces(&body[..cut], 17, Duration::ZERO, End::Reset),
            _ => Reply::sse_in_pieces(&body[..cut], 23, Duration::ZERO, End::Truncate),
        };
        counts.faults += 1;
        out.push(fault);
    }
    // The answer itself: whole, in pieces, or as a slow drip (5 bytes a millisecond).
    out.push(match rng.u8(0..3) {
        0 => Reply::sse(&body),
        1 => Reply::sse_in_pieces(&body, rng.usize(1..64), Duration::ZERO, End::Complete),
        _ => {
            counts.drips += 1;
            Reply::sse_in_pieces(&body, 5, Duration::from_millis(1), End::Complete)
        }
    });
    out
}

// ---------------------------------------------------------------------------------------------
// The child: runs the session, decides approvals, reports each durable decision, until killed

#[derive(Debug)]
struct ChildSpec {
    root: PathBuf,
    session: String,
    base_url: String,
    seed: u64,
}

fn child(spec: ChildSpec) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let agent = agent(&spec.root, &spec.base_url);
        let mut rng = fastrand::Rng::with_seed(spec.seed);
        drive(&agent, &spec.session, &mut rng, None, &mut |line| {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}").unwrap();
            out.flush().unwrap();
        })
        .await;
    });
}

/// Runs a session to its end: run, then decide and resume while suspended (at most a few times).
/// `report` gets `decided <approval id> <call id> <approve|deny>` once a decision is durable.
async fn drive(
    agent: &Agent,
    session: &str,
    rng: &mut fastrand::Rng,
    cancel: Option<CancellationSignal>,
    report: &mut (dyn FnMut(String) + Send),
) -> Option<RunOutcome> {
    let cancel = cancel.unwrap_or_default();
    let mut outcome = match agent.run(session, "soak", &NoEvents, &cancel).await {
        Ok(o) => o,
        Err(_) => return None,
    };
    for _ in 0..3 {
        let RunOutcome::Suspended { batch } = &outcome else { break };
        for item in &batch.items {
            if item.decision != ApprovalDecision::Pending {
                continue;
            }
            let approve = rng.u8(0..4) != 0;
            let r = if approve {
                agent.approve(session, &item.approval_id).await
            } else {
                agent.deny(session, &item.approval_id, "no").await
            };
            if r.is_ok() {
                let how = if approve { "approve" } else { "deny" };
                report(format!("decided {} {} {how}", item.approval_id, item.tool_call.id));
            }
        }
        outcome = match agent.resume(session, &NoEvents, &cancel).await {
            Ok(o) => o,
            Err(_) => return None,
        };
    }
    Some(outcome)
}

// ---------------------------------------------------------------------------------------------
// The parent

#[derive(Debug, Default)]
struct Counts {
    runs: usize,
    in_process: usize,
    cancelled: usize,
    kills: usize,
    kills_after_exit: usize,
    faults: usize,
    drips: usize,
    decisions_checked: usize,
    executions: usize,
    resumed: usize,
    statuses: HashMap<String, usize>,
}

fn pending_ids(state: &AgentState) -> Vec<&str> {
    match (&state.pending_approval, state.status) {
        (Some(b), RunStatus::AwaitingApproval) => b
            .items
            .iter()
            .map(|i| i.tool_call.id.as_str())
            .chain(b.assistant_message.tool_calls().iter().map(|c| c.id.as_str()))
            .collect(),
        _ => Vec::new(),
    }
}

fn executions(root: &Path, session: &str) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    if let Ok(text) = std::fs::read_to_string(exec_log(root, session)) {
        for line in text.lines() {
            *m.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    m
}

fn answered(state: &AgentState, call_id: &str) -> bool {
    state
        .messages
        .iter()
        .any(|m| matches!(m, ChatMessage::Tool { tool_call_id, .. } if tool_call_id == call_id))
}

/// The invariants on a loaded state; `decided` maps approval ids to (call id, approved).
fn check_state(
    ctx: &str,
    root: &Path,
    session: &str,
    state: &AgentState,
    decided: &HashMap<String, (String, bool)>,
    counts: &mut Counts,
) {
    check_pairing(&state.messages, &pending_ids(state)).unwrap_or_else(|e| panic!("{ctx}: pairing: {e}"));
    let runs = executions(root, session);
    for (id, n) in &runs {
        assert_eq!(*n, 1, "{ctx}: call {id} ran {n} times; messages {:#?}", state.messages);
    }
    for (approval_id, (call_id, approved)) in decided {
        counts.decisions_checked += 1;
        let item = state.pending_approval.as_ref().and_then(|b| b.item(approval_id));
        match item {
            Some(item) => {
                let want = if *approved { ApprovalDecision::Approved } else { ApprovalDecision::Denied };
                assert_eq!(item.decision, want, "{ctx}: decision of {approval_id} lost");
            }
            None => {
                assert!(answered(state, call_id), "{ctx}: {approval_id} decided, batch gone, call unanswered")
            }
        }
        if !approved {
            assert!(!runs.contains_key(call_id), "{ctx}: denied call {call_id} ran");
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    i: usize,
    rng: &mut fastrand::Rng,
    rt: &tokio::runtime::Runtime,
    exe: &Path,
    root: &Path,
    counts: &mut Counts,
) {
    let session = format!("s{i}");
    let ctx = format!("run {i}");
    // Round 1: one to three calls (some dangerous); round 2: the answer.
    let n_calls = rng.usize(1..4);
    let calls: Vec<(String, &str)> = (0..n_calls)
        .map(|k| (format!("c{i}-{k}"), if rng.u8(0..3) == 0 { "wipe" } else { "note" }))
        .collect();
    let mut replies = faulty(rng, calls_body(&calls), counts);
    for _ in 0..3 {
        replies.extend(faulty(rng, text_body("all done"), counts));
    }
    let server = rt.block_on(MockServer::start(replies));
    let base_url = server.base_url();
    let mut decided: HashMap<String, (String, bool)> = HashMap::new();

    if rng.bool() {
        // In process, maybe cancelled after a random delay.
        counts.in_process += 1;
        let agent = Arc::new(agent(root, &base_url));
        let cancel = CancellationSignal::new();
        let seed = rng.u64(..);
        let (a, s, c) = (agent.clone(), session.clone(), cancel.clone());
        let task = rt.spawn(async move {
            let mut lines = Vec::new();
            let mut rng = fastrand::Rng::with_seed(seed);
            let out = drive(&a, &s, &mut rng, Some(c), &mut |l| lines.push(l)).await;
            (out, lines)
        });
        if rng.u8(0..3) != 0 {
            let delay = Duration::from_micros(rng.u64(0..40_000));
            let c = cancel.clone();
            rt.spawn(async move {
                tokio::time::sleep(delay).await;
                c.cancel("soak");
            });
            counts.cancelled += 1;
        }
        let (outcome, lines) = rt.block_on(task).unwrap_or_else(|e| panic!("{ctx}: the run panicked: {e}"));
        if let Some(o) = &outcome {
            *counts.statuses.entry(format!("{:?}", o.status())).or_insert(0) += 1;
        }
        record_decisions(&lines, &mut decided);
    } else {
        // A child process, killed at a random moment.
        let mut child = Command::new(exe)
            .env("ARKAGENT_SOAK_CHILD", "1")
            .env("SOAK_ROOT", root)
            .env("SOAK_SESSION", &session)
            .env("SOAK_URL", &base_url)
            .env("SOAK_SEED", rng.u64(..).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let reader =
            std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).collect());
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
            s
        });
        std::thread::sleep(Duration::from_micros(rng.u64(0..60_000)));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        let lines: Vec<String> = reader.join().unwrap();
        let stderr = err_reader.join().unwrap();
        if status.success() {
            counts.kills_after_exit += 1;
        } else {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(9), "{ctx}: the child failed by itself ({status}): {stderr}");
            counts.kills += 1;
        }
        assert!(!stderr.contains("panicked"), "{ctx}: the child panicked: {stderr}");
        record_decisions(&lines, &mut decided);
    }

    // After the run (or the kill): the state loads and holds the invariants.
    let store = FileStore::new(root);
    let loaded = rt.block_on(store.load(&session)).unwrap_or_else(|e| panic!("{ctx}: load: {e}"));
    if let Some(state) = &loaded {
        check_state(&format!("{ctx} (after)"), root, &session, state, &decided, counts);
    }

    // A fresh agent (the app after a restart) drives the session to its end.
    if let Some(state) = loaded.filter(|s| !s.status.is_terminal() && s.status != RunStatus::Idle) {
        counts.resumed += 1;
        let finals = (0..4).map(|_| Reply::sse(&text_body("recovered")));
        let server = rt.block_on(MockServer::start(finals));
        let agent = agent(root, &server.base_url());
        rt.block_on(async {
            if let Some(batch) = &state.pending_approval {
                for item in batch.pending_items() {
                    if agent.approve(&session, &item.approval_id).await.is_ok() {
                        decided.insert(item.approval_id.clone(), (item.tool_call.id.clone(), true));
                    }
                }
            }
            let out = agent.resume(&session, &NoEvents, &CancellationSignal::new()).await;
            let out = out.unwrap_or_else(|e| panic!("{ctx}: resume: {e}"));
            assert!(out.status().is_terminal(), "{ctx}: resume ended {:?}", out.status());
        });
        let state = rt.block_on(store.load(&session)).unwrap().expect("session exists");
        check_state(&format!("{ctx} (resumed)"), root, &session, &state, &decided, counts);
        check_pairing(&state.messages, &[]).unwrap_or_else(|e| panic!("{ctx}: final pairing: {e}"));
    }
    counts.executions += executions(root, &session).len();
    counts.runs += 1;
}

fn record_decisions(lines: &[String], decided: &mut HashMap<String, (String, bool)>) {
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        if let ["decided", approval_id, call_id, how] = parts[..] {
            decided.insert(approval_id.to_string(), (call_id.to_string(), how == "approve"));
        }
    }
}

fn main() {
    if std::env::var_os("ARKAGENT_SOAK_CHILD").is_some() {
        let var = |k: &str| std::env::var(k).unwrap();
        child(ChildSpec {
            root: PathBuf::from(var("SOAK_ROOT")),
            session: var("SOAK_SESSION"),
            base_url: var("SOAK_URL"),
            seed: var("SOAK_SEED").parse().unwrap(),
        });
        return;
    }
    let runs: usize = std::env::var("ARKAGENT_SOAK").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let seed: u64 = std::env::var("ARKAGENT_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("soak: {runs} runs, seed {seed} (ARKAGENT_SOAK_SEED={seed} replays the choices)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let exe = std::env::current_exe().unwrap();
    let root = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let budget =
        std::env::var("ARKAGENT_SOAK_SECS").ok().and_then(|v| v.parse().ok()).map(Duration::from_secs);
    let mut counts = Counts::default();
    for i in 0..runs {
        if budget.is_some_and(|b| started.elapsed() > b) {
            println!("soak: time budget spent after {i} of {runs} runs");
            break;
        }
        one_run(i, &mut rng, &rt, &exe, root.path(), &mut counts);
        if runs >= 100 && (i + 1) % (runs / 20).max(1) == 0 {
            println!("soak: {} runs, {:.0} s: {counts:?}", i + 1, started.elapsed().as_secs_f64());
        }
    }
    println!("soak: ok: {} runs in {:.1} s: {counts:?}", counts.runs, started.elapsed().as_secs_f64());
}
