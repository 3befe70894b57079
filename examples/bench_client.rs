//! The arkagent client of the end-to-end benchmark (`scripts/bench.sh`): one run of the agent
//! through its Rust API against the mock server (`examples/mock_openai.rs`).
//!
//! ```text
//! cargo run --release --example bench_client -- --base-url http://127.0.0.1:PORT/v1 --rounds R
//!     [--store memory|file|events] [--state-dir DIR]
//! ```
//!
//! It builds an [`AgentBuilder`] with an [`OpenAiCompatibleClient`] (streaming, the model name
//! `bench-r<R>` tells the mock how many rounds to play), a [`MemoryStore`] (or a [`FileStore`]),
//! and one safe Rust tool `record_reading` with the 6-property schema of
//! `benches/e2e/tool_schema.json`; `max_rounds` is R + 5. It runs one user message to the end and
//! prints one JSON line (status, rounds, tool calls executed, final text). It exits 1 unless the run
//! completed with exactly 3 R tool calls executed, so a broken run cannot pass for a fast one.
//!
//! `--store events` is a diagnostic, not a product configuration: an in-memory store that keeps
//! each session by applying the committed events ([`AgentState::apply`], as a FileStore load
//! folds its journal) instead of cloning the whole state on every commit as [`MemoryStore`] does.
//! The difference between the two runs is what `MemoryStore::commit`'s clone costs per round.

use arkagent::agent::{AgentBuilder, AgentConfig, NoEvents, RunOutcome};
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::state::{AgentState, FileStore, MemoryStore, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::AgentError;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;

fn main() {
    let mut base_url = String::new();
    let mut rounds = 20u32;
    let mut store_kind = "memory".to_string();
    let mut state_dir: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| fail(&format!("{a} needs a value")));
        match a.as_str() {
            "--base-url" => base_url = value(),
            "--rounds" => rounds = value().parse().unwrap_or_else(|_| fail("bad --rounds")),
            "--store" => store_kind = value(),
            "--state-dir" => state_dir = Some(value()),
            _ => fail(&format!("unknown argument {a}")),
        }
    }
    if base_url.is_empty() {
        fail("--base-url is required");
    }
    // A client app owns its runtime; the library never builds one.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run(base_url, rounds, store_kind, state_dir));
}

fn fail(why: &str) -> ! {
    eprintln!("bench_client: {why}");
    std::process::exit(2)
}

async fn run(base_url: String, rounds: u32, store_kind: String, state_dir: Option<String>) {
    // From its text, so the model is sent the schema in the file's key order, as the peers send it.
    let definition = ToolDefinition::from_schema_text(
        "record_reading",
        "Records one station reading.",
        include_str!("../benches/e2e/tool_schema.json"),
    )
    .expect("tool_schema.json");
    let executed = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolRegistry::new();
    let counter = Arc::clone(&executed);
    tools
        .register(
            definition,
            Arc::new(FnExecutor(move |args: serde_json::Map<String, serde_json::Value>, _ctx| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok(ToolResult::json(json!({"recorded": true, "seq": args.get("seq").cloned()})))
                }
            })),
        )
        .unwrap_or_else(|e| fail(&format!("register: {e}")));

    let model = OpenAiCompatibleClient::new(
        ClientConfig::custom(base_url, format!("bench-r{rounds}"), "sk-bench-not-a-key")
            .with_retry(RetryPolicy::none()),
    )
    .unwrap_or_else(|e| fail(&format!("client: {e}")));
    let store: Arc<dyn StateStore> = match store_kind.as_str() {
        "memory" => Arc::new(MemoryStore::new()),
        "events" => Arc::new(EventStore::default()),
        "file" => {
            let dir = state_dir.unwrap_or_else(|| fail("--store file needs --state-dir"));
            Arc::new(FileStore::new(dir))
        }
        other => fail(&format!("unknown store {other}")),
    };
    let config = AgentConfig { max_rounds: rounds + 5, ..AgentConfig::default() };
    let agent = AgentBuilder::new(Arc::new(model), store).tools(tools).config(config).build();
    let outcome = agent
        .run("bench", "Record every reading the stations send.", &NoEvents, &CancellationSignal::new())
        .await
        .unwrap_or_else(|e| fail(&format!("run: {e}")));
    let calls = executed.load(Ordering::Relaxed);
    let (status, text, error) = match &outcome {
        RunOutcome::Finished { status, final_text, error, .. } => {
            (*status, final_text.clone(), error.as_ref().map(|e| e.to_string()))
        }
        RunOutcome::Suspended { .. } => (RunStatus::AwaitingApproval, None, None),
    };
    println!(
        "{}",
        json!({"client": "arkagent-rust", "store": store_kind, "rounds": rounds, "status": format!("{status:?}"),
               "tool_calls": calls, "final_text": text, "error": error})
    );
    if status != RunStatus::Completed || calls != 3 * rounds as usize {
        std::process::exit(1);
    }
}

/// The diagnostic store of `--store events`: commits apply the events to the kept state.
#[derive(Default)]
struct EventStore {
    sessions: Mutex<HashMap<String, AgentState>>,
}

#[async_trait]
impl StateStore for EventStore {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        Ok(self.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(session_id).cloned())
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        match sessions.get_mut(&state.session_id) {
            Some(kept) => events.iter().for_each(|e| kept.apply(e)),
            None => {
                sessions.insert(state.session_id.clone(), state.clone());
            }
        }
        Ok(())
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(state.session_id.clone(), state.clone());
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        Ok(self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(session_id).is_some())
    }
}
