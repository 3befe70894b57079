//! Shared helpers for the control-safety tests: a registry whose executors log what ran, and a
//! small driver doing what the runtime does with one batch (hooks -> policy -> plan -> run).
#![allow(dead_code)] // each test binary uses a part of this file

use arkagent::approval::{plan_batch, ApprovalPolicy, BatchCallInput, BatchPlan, BatchStep};
use arkagent::hook::{HookContext, HookPipeline};
use arkagent::tool::FnExecutor;
use arkagent::{
    AgentError, CancellationSignal, ChatMessage, RiskLevel, ToolCall, ToolContext, ToolDefinition,
    ToolRegistry, ToolResult,
};
use serde_json::json;
use std::sync::{Arc, LazyLock, Mutex};

/// The ids of the calls whose executor ran, in the order they ran.
pub type RunLog = Arc<Mutex<Vec<String>>>;

/// A run's hook context, of a run never cancelled.
pub static CTX: LazyLock<HookContext<'static>> = LazyLock::new(|| {
    static SIGNAL: LazyLock<CancellationSignal> = LazyLock::new(CancellationSignal::new);
    HookContext { session_id: "s1", run_id: "run-1", round: 1, signal: &SIGNAL }
});

/// A registry with one tool per (name, risk); each executor logs its call id and answers
/// `ran <name> <arguments>`.
pub fn registry(tools: &[(&str, RiskLevel)]) -> (ToolRegistry, RunLog) {
    let log: RunLog = Arc::new(Mutex::new(Vec::new()));
    let mut registry = ToolRegistry::new();
    for (name, risk) in tools {
        let def = ToolDefinition::new(*name, format!("test tool {name}"), json!({"type": "object"}))
            .with_risk(*risk);
        let log = log.clone();
        let tool_name = name.to_string();
        let exec = FnExecutor(move |args: serde_json::Map<String, serde_json::Value>, ctx: ToolContext| {
            let log = log.clone();
            let tool_name = tool_name.clone();
            async move {
                log.lock().unwrap().push(ctx.call_id.clone());
                Ok::<_, AgentError>(ToolResult::text(format!(
                    "ran {tool_name} {}",
                    serde_json::Value::Object(args)
                )))
            }
        });
        registry.register(def, Arc::new(exec)).unwrap();
    }
    (registry, log)
}

pub fn assistant(calls: &[ToolCall]) -> ChatMessage {
    ChatMessage::Assistant { content: None, reasoning_content: None, tool_calls: calls.to_vec() }
}

/// Hooks, then the policy, for every call of a batch.
///
/// # Errors
/// The `hook_aborted` error of a hook that aborted.
pub async fn inputs(
    pipeline: &HookPipeline,
    policy: &dyn ApprovalPolicy,
    registry: &ToolRegistry,
    calls: &[ToolCall],
) -> Result<Vec<BatchCallInput>, AgentError> {
    let mut out = Vec::new();
    for call in calls {
        let definition = registry.definition(&call.name);
        let outcome = pipeline.before_tool_call(&CTX, call.clone(), definition).await;
        out.push(outcome.into_batch_input(policy, definition)?);
    }
    Ok(out)
}

/// Plans a batch the way the runtime does.
pub async fn plan(
    pipeline: &HookPipeline,
    policy: &dyn ApprovalPolicy,
    registry: &ToolRegistry,
    calls: &[ToolCall],
    now_ms: u64,
) -> Result<BatchPlan, AgentError> {
    let inputs = inputs(pipeline, policy, registry, calls).await?;
    Ok(plan_batch("run-1", assistant(calls), inputs, now_ms))
}

/// Runs the steps of a batch through the registry: one (call id, result) per step, in step order.
pub async fn run_steps(registry: &ToolRegistry, steps: Vec<BatchStep>) -> Vec<(String, ToolResult)> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            BatchStep::Execute(call) => {
                let ctx = ToolContext::detached("s1", call.id.clone());
                let result = match registry.snapshot().execute(&call, ctx).await {
                    Ok(r) => r,
                    Err(e) => ToolResult::from_error(&e),
                };
                out.push((call.id, result));
            }
            BatchStep::Answer(answered) => out.push((answered.call.id, answered.result)),
        }
    }
    out
}

pub fn code_of(result: &ToolResult) -> Option<String> {
    result.metadata.as_ref().and_then(|m| m.get("code")).and_then(|c| c.as_str()).map(str::to_string)
}
