//! A schema `pattern` matched by backtracking can take minutes (`^(a+)+$` on "aaa…!"): its
//! validation runs on tokio's blocking pool, so the runtime's other calls and runs go on, a cancel
//! answers at once (the executor never starts), and a validation that outlasts the tool's timeout
//! is answered `tool_not_started`, the executor's own time starting after it.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog};
use arkagent::message::ToolCall;
use arkagent::state::StateStore;
use arkagent::tool::{FnExecutor, ToolContext};
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};

/// A registry of `slow` (its `pattern` backtracks for hours on [`endless`]) and `quick` (no
/// pattern); `ran` counts the executors' runs.
fn registry(ran: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, schema) in [
        ("slow", json!({"type":"object","properties":{"s":{"type":"string","pattern":"^(a+)+$"}}})),
        ("quick", json!({"type":"object"})),
    ] {
        let ran = Arc::clone(ran);
        r.register(
            ToolDefinition::new(name, name, schema),
            Arc::new(FnExecutor(move |_a, _c| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok(ToolResult::text("done")) }
            })),
        )
        .unwrap();
    }
    r
}

/// 40 `a`s and a `!`: `^(a+)+$` tries about 2^40 ways to split the `a`s before it fails.
fn endless() -> String {
    json!({"s": format!("{}!", "a".repeat(40))}).to_string()
}

#[test]
fn a_slow_validation_leaves_the_runtime_to_other_calls_and_a_cancel_answers_at_once() {
    // One worker thread: a validation on it would stop everything else. The check runs on a
    // thread of its own so that such a stall fails the test (below) instead of hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let tools = Arc::new(registry(&ran));
        let slow_ctx = ToolContext::detached("s", "c1");
        let signal = slow_ctx.signal.clone();
        let slow = {
            let tools = Arc::clone(&tools);
            rt.spawn(async move { tools.execute(&ToolCall::new("c1", "slow", endless()), slow_ctx).await })
        };
        let outcome = rt.block_on(async {
            // The slow call starts first (its validation would take the only worker).
            tokio::task::yield_now().await;
            let quick =
                tools.execute(&ToolCall::new("c2", "quick", "{}"), ToolContext::detached("s", "c2")).await;
            assert!(quick.is_ok(), "{quick:?}");
            // The other call finished while the slow one is still being validated.
            assert!(!slow.is_finished());
            assert_eq!(ran.load(Ordering::SeqCst), 1);
            signal.cancel("stop");
            slow.await.unwrap()
        });
        let e = outcome.unwrap_err();
        assert_eq!(e.code, "tool_cancelled", "{e}");
        // The cancelled call's executor never ran (its validation goes on in the background).
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        rt.shutdown_background();
        done.send(()).unwrap();
    });
    // Not a speed claim: without the blocking pool the validation holds the worker for hours.
    finished.recv_timeout(Duration::from_secs(120)).expect("the runtime stalled on a validation");
}

#[test]
fn a_validation_that_outlasts_the_tool_timeout_is_answered_not_started_and_the_run_goes_on() {
    // The validation takes hours, the tool's timeout is 100 ms: the call is answered
    // `tool_not_started` (the executor never ran, so calling it again is safe), and the run goes
    // on to the model's next answer. Before, the run waited for the pattern (and a validation
    // that ended past the timeout let the executor run, then threw its result away and told the
    // model the call may or may not have taken effect).
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&ran);
        let mut tools = ToolRegistry::new();
        tools
            .register(
                ToolDefinition::new(
                    "place",
                    "place an order",
                    json!({"type":"object","properties":{"s":{"type":"string","pattern":"^(a+)+$"}}}),
                )
                .with_timeout(Duration::from_millis(100)),
                Arc::new(FnExecutor(move |_a, _c| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { Ok(ToolResult::text("placed")) }
                })),
            )
            .unwrap();
        let model = Arc::new(Script::new(vec![calls(&[("c1", "place", &endless())]), answer("ok")]));
        let store = Arc::new(MemStore::new());
        let agent = AgentBuilder::new(model, store.clone()).tools(tools).build();
        let state = rt.block_on(async {
            agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
            store.load("s").await.unwrap().unwrap()
        });
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the executor ran");
        let results = tool_messages(&state.messages);
        assert_eq!(results.len(), 1);
        assert!(
            results[0].1.starts_with("error [tool_not_started]: the arguments of place could not be checked"),
            "{results:?}"
        );
        assert!(results[0].1.contains("the tool did not run"), "{results:?}");
        rt.shutdown_background();
        done.send(()).unwrap();
    });
    // Not a speed claim: without the bound the run waits for the pattern for hours.
    finished.recv_timeout(Duration::from_secs(120)).expect("the run waited for the validation");
}
