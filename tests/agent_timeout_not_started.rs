//! A call cut off at its time limit before its executor started is `tool_not_started` (the tool
//! did not run: calling it again is safe), whichever limit fired first: the runtime's own, or an
//! adapter's that waits for another thread before it starts the call (the ArkTS binding's, for the
//! JS thread). The runtime gives such a call up as it answers it, so it never starts afterwards.
//!
//! The adapter here is a fake: its calls queue for a "thread" the test keeps busy, and its own
//! limit is 1 ms longer than the runtime's (as the binding's, whose deadline is taken a moment
//! later and may round up to the next tick of tokio's timer). Time is tokio's paused clock.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog};
use arkagent::state::StateStore;
use arkagent::tool::{FnExecutor, ToolContext, ToolExecutor};
use arkagent::{codes, AgentError, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};

/// The runtime's limit of the tools below.
const LIMIT: Duration = Duration::from_millis(100);

/// An executor whose calls wait for a busy "thread" (`thread`: a permit, none while busy) before
/// they start, and which reports that start itself, as the ArkTS binding's does; its own limit is
/// `LIMIT + 1 ms`. `ran` counts the calls that started.
struct QueuedExecutor {
    thread: Arc<tokio::sync::Semaphore>,
    ran: Arc<AtomicUsize>,
}

#[async_trait]
impl ToolExecutor for QueuedExecutor {
    async fn execute(&self, _args: Map<String, Value>, ctx: ToolContext) -> Result<ToolResult, AgentError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (thread, ran, start) = (Arc::clone(&self.thread), Arc::clone(&self.ran), ctx.started.clone());
        // The call, queued for the thread: made only if nobody gave it up meanwhile.
        tokio::spawn(async move {
            let _free = thread.acquire().await;
            if start.start() {
                ran.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(ToolResult::text("placed"));
            }
        });
        match tokio::time::timeout(LIMIT + Duration::from_millis(1), rx).await {
            Ok(Ok(result)) => Ok(result),
            _ if !ctx.started.give_up() => Err(AgentError::of(codes::TOOL_TIMEOUT, "its own limit")),
            _ => Err(AgentError::of(codes::TOOL_NOT_STARTED, "not started by its own limit")),
        }
    }

    fn marks_own_start(&self) -> bool {
        true
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_never_started_by_the_runtimes_limit_is_not_started_and_never_starts_after() {
    let thread = Arc::new(tokio::sync::Semaphore::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let hung = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolRegistry::new();
    let queued = QueuedExecutor { thread: Arc::clone(&thread), ran: Arc::clone(&ran) };
    tools
        .register(
            ToolDefinition::new("place_order", "places an order", json!({"type":"object"}))
                .with_timeout(LIMIT),
            Arc::new(queued),
        )
        .unwrap();
    // A Rust executor counts as started once polled: cut off, it may have acted.
    let h = Arc::clone(&hung);
    tools
        .register(
            ToolDefinition::new("hang", "never ends", json!({"type":"object"})).with_timeout(LIMIT),
            Arc::new(FnExecutor(move |_a, _c| {
                h.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<ToolResult, AgentError>>()
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "place_order", "{}"), ("c2", "hang", "{}")]),
        answer("ok"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model, store.clone()).tools(tools).build();
    agent.run("s", "order it", &EventLog::new(), &CancellationSignal::new()).await.unwrap();

    let state = store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 2, "{results:?}");
    // The runtime's limit came first; the executor had not started. Before, the runtime answered
    // every cut-off call `tool_timeout`, "may or may not have taken effect".
    assert_eq!(
        results[0].1,
        "error [tool_not_started]: place_order was not started within 100 ms, and the tool did not run",
        "{results:?}"
    );
    assert!(
        results[1].1.starts_with("error [tool_timeout]: hang did not finish within 100 ms"),
        "{results:?}"
    );
    assert!(results[1].1.contains("may or may not have taken effect"), "{results:?}");
    assert_eq!(hung.load(Ordering::SeqCst), 1);

    // The thread is free at last: the call it finds was given up, and is never made.
    thread.add_permits(1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a call answered not started ran after");
}
