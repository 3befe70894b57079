//! Helpers of the session lease tests (`tests/state_lease*.rs`): agents on a scripted model whose
//! tool can be held at a gate, and what a session holds once saved.
#![allow(dead_code)]

#[path = "runtime.rs"]
mod runtime;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::message::ChatMessage;
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{AgentError, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use runtime::{answer, calls, Script};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Notify;

#[allow(unused_imports)]
pub use runtime::MemStore;

/// Holds a call of the `slow` tool until the test releases it, so a test knows a run is inside
/// its tool call (and holds its lease) without guessing with sleeps.
#[derive(Default)]
pub struct Gate {
    entered: Notify,
    release: Notify,
}

impl Gate {
    /// Waits until a call entered the tool.
    pub async fn entered(&self) {
        self.entered.notified().await;
    }

    /// Lets the call finish.
    pub fn release(&self) {
        self.release.notify_one();
    }

    /// Runs `f` once a call is inside the tool, then lets that call finish.
    pub async fn while_inside<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.entered().await;
        let out = f.await;
        self.release();
        out
    }
}

/// The `slow` tool: held at `gate` if there is one, else it answers at once.
pub fn tools(gate: Option<Arc<Gate>>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("slow", "takes a while", json!({"type": "object"})),
        Arc::new(FnExecutor(move |_args: serde_json::Map<String, serde_json::Value>, _ctx| {
            let gate = gate.clone();
            async move {
                if let Some(gate) = gate {
                    gate.entered.notify_one();
                    gate.release.notified().await;
                }
                Ok(ToolResult::text("done"))
            }
        })),
    )
    .unwrap();
    r
}

/// An agent whose model, at each of its (up to three) turns, calls `slow` once (call id
/// `<tag>1`), then answers `answer <tag>`.
pub fn gated_agent(store: Arc<dyn StateStore>, tag: &str, gate: Option<Arc<Gate>>) -> Agent {
    let turn = [calls(&[(&format!("{tag}1"), "slow", "{}")]), answer(&format!("answer {tag}"))];
    let model = Arc::new(Script::new(turn.iter().cycle().take(6).cloned()));
    AgentBuilder::new(model, store).tools(tools(gate)).config(AgentConfig::default()).build()
}

pub fn agent(store: Arc<dyn StateStore>, tag: &str) -> Agent {
    gated_agent(store, tag, None)
}

pub async fn run(agent: &Agent, session: &str, input: &str) -> Result<RunOutcome, AgentError> {
    agent.run(session, input, &EventLog::new(), &CancellationSignal::new()).await
}

/// The texts of the user and final assistant messages, in order.
pub fn texts(messages: &[ChatMessage]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } => Some(content.clone()),
            ChatMessage::Assistant { content: Some(c), .. } => Some(c.clone()),
            _ => None,
        })
        .collect()
}

pub async fn saved(root: &Path, session: &str) -> Vec<String> {
    let state = FileStore::new(root).load(session).await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    texts(&state.messages)
}
