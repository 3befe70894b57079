//! The tools of the sub-agent tests: `query_stock` (safe, answers `<sku>: 12 件`) and
//! `clear_baking_cache` (dangerous; each run counted in `cleared`).
#![allow(dead_code)]

use crate::support::{answer, calls, Script};
use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::provider::ChatModel;
use arkagent::state::StateStore;
use arkagent::tool::FnExecutor;
use arkagent::CancellationSignal;
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

/// A parent whose worker's dangerous call froze it (one level deep); the worker answers as if its
/// call was approved (`Some(true)`) or denied (`Some(false)`), or not at all (`None`: it is
/// dismissed), then the parent answers `parent answer`.
pub struct OneDeep {
    pub agent: Arc<Agent>,
    pub model: Arc<Script>,
    /// Runs of the dangerous call.
    pub cleared: Arc<AtomicUsize>,
    /// The worker's session.
    pub worker: String,
    /// The frozen call's approval id.
    pub id: String,
    /// What the worker answers once its call was decided (empty: nothing).
    pub worker_answer: &'static str,
}

pub async fn frozen_one_deep(store: &Arc<dyn StateStore>, approve: Option<bool>) -> OneDeep {
    let cleared = Arc::new(AtomicUsize::new(0));
    let worker_answer = match approve {
        Some(true) => "worker: 已清空",
        Some(false) => "worker: 用户不让清",
        None => "",
    };
    let mut script = vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ];
    if approve.is_some() {
        script.push(answer(worker_answer));
    }
    script.push(answer("parent answer"));
    let model = Arc::new(Script::new(script));
    let agent = agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "清缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();
    let id = batch.items[0].approval_id.clone();
    OneDeep { agent, model, cleared, worker, id, worker_answer }
}

/// A parent whose worker's worker froze on its dangerous call (`d1`, `d2`, `w1`: two levels
/// deep); the model answers `tail` after it.
pub struct TwoDeep {
    pub agent: Arc<Agent>,
    pub model: Arc<Script>,
    /// Runs of the dangerous call.
    pub cleared: Arc<AtomicUsize>,
    /// The first worker's session.
    pub middle: String,
    /// Its worker's session.
    pub inner: String,
    /// The frozen call's approval id (the same at every level).
    pub id: String,
}

pub async fn frozen_two_deep(store: &Arc<dyn StateStore>, tail: &[&str]) -> TwoDeep {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(
        vec![
            calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
            calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
        ]
        .into_iter()
        .chain(tail.iter().map(|t| answer(t)))
        .collect::<Vec<_>>(),
    ));
    let agent = agent(model.clone(), store.clone(), &cleared, 2);
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let middle = batch.worker_session.clone().unwrap();
    let inner = store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap().worker_session.unwrap();
    let id = batch.items[0].approval_id.clone();
    TwoDeep { agent, model, cleared, middle, inner, id }
}
