//! The tools of the sub-agent tests: `query_stock` (safe, answers `<sku>: 12 件`) and
//! `clear_baking_cache` (dangerous; each run counted in `cleared`).
#![allow(dead_code)]

use arkagent::agent::{Agent, AgentBuilder, AgentConfig};
use arkagent::provider::ChatModel;
use arkagent::state::StateStore;
use arkagent::tool::FnExecutor;
use arkagent::{RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An agent with both tools that delegates (`delegate_task`), its workers delegating again down
/// to `depth` levels.
pub fn agent(
    model: Arc<dyn ChatModel>,
    store: Arc<dyn StateStore>,
    cleared: &Arc<AtomicUsize>,
    depth: u32,
) -> Arc<Agent> {
    let agent = Arc::new(
        AgentBuilder::new(model, store)
            .tools(tools(cleared))
            .config(AgentConfig { max_delegation_depth: depth, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    agent
}

/// A registry with both tools.
pub fn tools(cleared: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new(
            "query_stock",
            "查询库存",
            json!({"type":"object","properties":{"sku":{"type":"string"}}}),
        ),
        Arc::new(FnExecutor(|a: serde_json::Map<String, serde_json::Value>, _c| async move {
            Ok(ToolResult::text(format!("{}: 12 件", a.get("sku").and_then(|s| s.as_str()).unwrap_or("?"))))
        })),
    )
    .unwrap();
    let c = cleared.clone();
    r.register(
        ToolDefinition::new("clear_baking_cache", "危险", json!({"type":"object"}))
            .with_risk(RiskLevel::Dangerous),
        Arc::new(FnExecutor(move |_a, _c| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(ToolResult::text("cleared"))
            }
        })),
    )
    .unwrap();
    r
}

/// The parent delegates (`d1`), the worker asks for the dangerous `clear_baking_cache` (`w1`),
/// answers `worker done` once it ran, and the parent answers `parent done`. (Every test that
/// includes this file names the runtime support module `support`.)
pub fn clear_script() -> Vec<arkagent::provider::ModelResponse> {
    use crate::support::{answer, calls};
    vec![
        calls(&[("d1", arkagent::agent::DELEGATE_TASK, r#"{"task":"clear"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker done"),
        answer("parent done"),
    ]
}

/// The delegating agent over `store` that plays [`clear_script`] (workers one level deep).
pub fn clear_agent(store: Arc<dyn StateStore>, cleared: &Arc<AtomicUsize>) -> Arc<Agent> {
    agent(Arc::new(crate::support::Script::new(clear_script())), store, cleared, 1)
}

/// Runs session `parent` of a [`clear_agent`] into the freeze of its worker's dangerous call:
/// the frozen batch and the worker's session.
pub async fn suspend_in_worker(agent: &Agent) -> (arkagent::approval::PendingApprovalBatch, String) {
    let out = agent
        .run("parent", "q", &arkagent::agent::EventLog::new(), &arkagent::CancellationSignal::new())
        .await
        .unwrap();
    let arkagent::agent::RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();
    (batch, worker)
}

/// The decision the pending batch of `session` holds for `approval_id` (panics when the session,
/// its batch or the item is missing).
pub async fn decision_on(
    store: &dyn StateStore,
    session: &str,
    approval_id: &str,
) -> arkagent::approval::ApprovalDecision {
    let state = store.load(session).await.unwrap().unwrap_or_else(|| panic!("no session {session}"));
    let batch = state.pending_approval.unwrap_or_else(|| panic!("{session} has no batch"));
    batch.item(approval_id).unwrap_or_else(|| panic!("{session} has no {approval_id}")).decision
}
