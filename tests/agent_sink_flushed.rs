//! `EventSink::flushed`: the driver awaits it before it calls a chunk's executors, so a sink that
//! hands its events to another thread (the NAPI listener, on the JS thread that also runs the
//! executors) has them delivered first: the answer's `ToolCallFinished` and the `StatePersisted`
//! of the calls' `started` records. A cancel while it waits ends the wait, and the calls the
//! cancel came before do not run.

use arkagent::agent::{AgentBuilder, AgentEvent, EventSink, RunOutcome};
use arkagent::state::{MemoryStore, RunStatus};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[path = "support/runtime.rs"]
mod support;
use support::{answer, calls, Script};

/// A sink that delivers its events only when flushed (as a queue to another thread would), or
/// never (`stuck`: a consumer that does not get to them).
#[derive(Default)]
struct Deferred {
    queued: Mutex<Vec<String>>,
    delivered: Arc<Mutex<Vec<String>>>,
    stuck: bool,
}

fn kind(event: &AgentEvent) -> String {
    let json = serde_json::to_value(event).unwrap();
    json["type"].as_str().unwrap().to_string()
}

impl EventSink for Deferred {
    fn emit(&self, event: AgentEvent) {
        self.queued.lock().unwrap().push(kind(&event));
    }

    fn flushed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if self.stuck {
                std::future::pending::<()>().await;
            }
            tokio::task::yield_now().await;
            let queued = std::mem::take(&mut *self.queued.lock().unwrap());
            self.delivered.lock().unwrap().extend(queued);
        })
    }
}

fn tools(
    delivered: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    ran: Arc<AtomicUsize>,
) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("act", "acts", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                seen.lock().unwrap().push(delivered.lock().unwrap().clone());
                ran.fetch_add(1, Ordering::SeqCst);
                async move { Ok(ToolResult::text("ok")) }
            })),
        )
        .unwrap();
    tools
}

#[tokio::test]
async fn each_executor_runs_after_the_sink_delivered_the_started_records_saved() {
    let sink = Deferred::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "act", "{}"), ("c2", "act", "{}")]),
        calls(&[("c3", "act", "{}")]),
        answer("done"),
    ]));
    let agent = AgentBuilder::new(model, Arc::new(MemoryStore::new()))
        .tools(tools(Arc::clone(&sink.delivered), Arc::clone(&seen), Arc::clone(&ran)))
        .build();
    let out = agent.run("s", "go", &sink, &CancellationSignal::new()).await.unwrap();
    assert!(matches!(out, RunOutcome::Finished { status: RunStatus::Completed, .. }), "{out:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    for heard in seen.lock().unwrap().iter() {
        // What the consumer had heard when an executor ran: its batch's answer, then the save of
        // the `started` records, and nothing was left undelivered.
        let finished = heard.iter().rposition(|k| k == "tool_call_finished").expect("the answer heard");
        assert!(heard[finished..].iter().any(|k| k == "state_persisted"), "{heard:?}");
    }
    assert!(sink.queued.lock().unwrap().iter().all(|k| k != "tool_call_finished"));
}

#[tokio::test]
async fn a_cancel_while_the_sink_is_flushed_ends_the_wait_and_runs_nothing() {
    let sink = Deferred { stuck: true, ..Deferred::default() };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![calls(&[("c1", "act", "{}")]), answer("done")]));
    let agent = AgentBuilder::new(model, Arc::new(MemoryStore::new()))
        .tools(tools(Arc::clone(&sink.delivered), seen, Arc::clone(&ran)))
        .build();
    let cancel = CancellationSignal::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        canceller.cancel("user pressed stop");
    });
    let out = tokio::time::timeout(std::time::Duration::from_secs(5), agent.run("s", "go", &sink, &cancel))
        .await
        .expect("the cancel ends the wait")
        .unwrap();
    assert!(matches!(out, RunOutcome::Finished { status: RunStatus::Cancelled, .. }), "{out:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}
