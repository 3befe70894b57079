//! An after-hook that aborts the run while other calls of its chunk still run: those calls hear
//! their signal (as on a cancel) instead of running on unseen while the session is already free
//! for the next run, and a delegation among them is let end, so its worker session ends
//! `cancelled` rather than `running` for good. And a run end hook that never answers does not
//! hold a cancelled run.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog, DELEGATE_TASK};
use arkagent::hook::{AgentHook, HookContext};
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{answer, calls, AbortOnFast, MemStore, Script};
use tokio::sync::Notify;

/// `fast` (answers once `go` is notified) and `slow` (keeps its signal in `heard`, then waits for
/// it to be cancelled). A Rust executor's future is dropped with the chunk, so what it was told is
/// read off the signals it kept.
fn add_tools(
    tools: &mut ToolRegistry,
    go: &Arc<Notify>,
    slow_started: &Arc<AtomicUsize>,
    heard: &Arc<Mutex<Vec<CancellationSignal>>>,
) {
    let go = Arc::clone(go);
    tools
        .register(
            ToolDefinition::new("fast", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                let go = Arc::clone(&go);
                async move {
                    go.notified().await;
                    Ok(ToolResult::text("fast done"))
                }
            })),
        )
        .unwrap();
    let (started, heard) = (Arc::clone(slow_started), Arc::clone(heard));
    tools
        .register(
            ToolDefinition::new("slow", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, ctx: arkagent::tool::ToolContext| {
                let (started, heard) = (Arc::clone(&started), Arc::clone(&heard));
                async move {
                    heard.lock().unwrap().push(ctx.signal.clone());
                    started.fetch_add(1, Ordering::SeqCst);
                    ctx.signal.cancelled().await;
                    Ok(ToolResult::text("slow told"))
                }
            })),
        )
        .unwrap();
}

#[tokio::test]
async fn an_abort_tells_the_calls_of_its_chunk_still_running() {
    let (go, started, heard) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)), Arc::default());
    let mut tools = ToolRegistry::new();
    add_tools(&mut tools, &go, &started, &heard);
    let model = Arc::new(Script::new(vec![
        calls(&[("s1", "slow", "{}"), ("f1", "fast", "{}"), ("s2", "slow", "{}")]),
        answer("next run"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model, store.clone())
        .tools(tools)
        .hook(Arc::new(AbortOnFast))
        .config(AgentConfig { max_parallel_tools: 4, ..AgentConfig::default() })
        .build();
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let run = agent.run("s", "q", &events, &signal);
    let release = async {
        // Both slow calls run.
        while started.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        go.notify_one();
    };
    let (out, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(5), run), release);
    let out = out.expect("the abort ends the run").unwrap();
    assert_eq!(out.status(), RunStatus::Aborted);
    let arkagent::agent::RunOutcome::Finished { error: Some(e), .. } = &out else { panic!("{out:?}") };
    assert_eq!(e.code, codes::HOOK_ABORTED, "{e}");
    // Both slow calls were told, and why.
    let reasons: Vec<Option<String>> = heard.lock().unwrap().iter().map(CancellationSignal::reason).collect();
    assert_eq!(
        reasons,
        [
            Some("the run was aborted by a hook".to_string()),
            Some("the run was aborted by a hook".to_string())
        ]
    );
    let saved = store.load("s").await.unwrap().unwrap();
    assert_eq!(saved.status, RunStatus::Aborted);
    arkagent::state::check_pairing(&saved.messages, &[]).unwrap();
}

#[tokio::test]
async fn an_abort_lets_a_delegation_of_its_chunk_end_its_worker_cancelled() {
    let (go, started, heard) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)), Arc::default());
    let cleared = Arc::new(AtomicUsize::new(0));
    let mut tools = delegation::tools(&cleared);
    add_tools(&mut tools, &go, &started, &heard);
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"wait"}"#), ("f1", "fast", "{}")]), // parent
        calls(&[("w1", "slow", "{}")]),                                              // worker
    ]));
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model, store.clone())
            .tools(tools)
            .hook(Arc::new(AbortOnFast))
            .config(AgentConfig { max_parallel_tools: 4, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let run = agent.run("parent", "q", &events, &signal);
    let release = async {
        // The worker's call runs: then `fast` answers and the hook aborts.
        while started.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        go.notify_one();
    };
    let (out, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(5), run), release);
    let out = out.expect("the abort ends the run").unwrap();
    assert_eq!(out.status(), RunStatus::Aborted);
    let told: Vec<bool> = heard.lock().unwrap().iter().map(CancellationSignal::is_cancelled).collect();
    assert_eq!(told, [true], "the worker's call was told");
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(parent.workers.len(), 1);
    let worker = store.load(&parent.workers[0]).await.unwrap().unwrap();
    assert_eq!(worker.status, RunStatus::Cancelled, "the worker's run ended, not left running");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
}

/// A run end hook that never answers.
struct HangsAtRunEnd;

#[async_trait::async_trait]
impl AgentHook for HangsAtRunEnd {
    async fn on_run_end(&self, _ctx: &HookContext<'_>, _status: RunStatus, _final_text: Option<&str>) {
        std::future::pending::<()>().await;
    }
}

#[tokio::test]
async fn a_cancel_does_not_wait_for_a_run_end_hook() {
    let model = Arc::new(Script::new(vec![answer("done")]));
    let agent = AgentBuilder::new(model, Arc::new(MemStore::new())).hook(Arc::new(HangsAtRunEnd)).build();
    let signal = CancellationSignal::new();
    let events = EventLog::new();
    let run = agent.run("s", "q", &events, &signal);
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        signal.cancel("the user left");
    };
    let (out, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(5), run), cancel);
    let out = out.expect("the cancel ends the wait for the hook").unwrap();
    // The run had completed: its status stands, and its end was announced.
    assert_eq!(out.status(), RunStatus::Completed);
    assert!(events.events().iter().any(|e| matches!(e, arkagent::agent::AgentEvent::RunFinished { .. })));
}
