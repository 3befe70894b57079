//! "终态（cancel/complete/error/loop_detected/abort）的持久化是强制的" (arkagent-tool-system.md
//! 9.5): with a `before_persist_state` hook that asks to skip every save, each way a run can end
//! still leaves its terminal status in the store. One run per terminal status.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext, PersistDecision};
use arkagent::message::ToolCall;
use arkagent::provider::ScriptStep;
use arkagent::state::{AgentState, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{
    codes, AgentError, CancellationSignal, ToolContext, ToolDefinition, ToolRegistry, ToolResult,
};
use serde_json::json;
use std::sync::Arc;
use support::{answer, calls, MemStore, Script};

/// Skips every save it is asked about, and aborts before a call to `forbidden`.
struct SkipEverySave;

#[async_trait::async_trait]
impl AgentHook for SkipEverySave {
    async fn before_persist_state(&self, _ctx: &HookContext<'_>, _state: &AgentState) -> PersistDecision {
        PersistDecision::Skip
    }

    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _d: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if call.name == "forbidden" {
            return BeforeToolCall::Abort("not allowed".into());
        }
        BeforeToolCall::Proceed(None)
    }
}

fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    let schema = json!({"type": "object"});
    for name in ["look", "forbidden"] {
        r.register(
            ToolDefinition::new(name, "a tool", schema.clone()),
            Arc::new(FnExecutor(|_a, _c| async { Ok(ToolResult::text("seen")) })),
        )
        .unwrap();
    }
    // Cancels the run it belongs to (the signal its context carries is the run's child).
    r.register(
        ToolDefinition::new("cancel_me", "cancels the run", schema),
        Arc::new(FnExecutor(|_a, ctx: ToolContext| async move {
            ctx.signal.cancelled().await;
            Err(AgentError::of(codes::TOOL_CANCELLED, "stopped"))
        })),
    )
    .unwrap();
    r
}

/// Runs one question with the skipping hook; returns the outcome's status and the stored one.
async fn ended(
    steps: Vec<ScriptStep>,
    config: AgentConfig,
    cancel_after_ms: Option<u64>,
) -> (RunStatus, RunStatus) {
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(Arc::new(Script::from_steps(steps)), store.clone())
        .tools(tools())
        .hook(Arc::new(SkipEverySave))
        .config(config)
        .build();
    let signal = CancellationSignal::new();
    if let Some(ms) = cancel_after_ms {
        let s = signal.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            s.cancel("the user left");
        });
    }
    let out = agent.run("s", "q", &EventLog::new(), &signal).await.unwrap();
    let RunOutcome::Finished { status, .. } = out else { panic!("expected an end: {out:?}") };
    let stored = store.load("s").await.unwrap().expect("the session is stored").status;
    (status, stored)
}

fn respond(r: arkagent::provider::ModelResponse) -> ScriptStep {
    ScriptStep::Respond(r)
}

#[tokio::test]
async fn every_terminal_status_is_stored_although_every_save_is_skipped() {
    let look = || respond(calls(&[("c", "look", "{}")]));
    let cases = [
        (RunStatus::Completed, vec![respond(answer("done"))], AgentConfig::default(), None),
        (
            RunStatus::Failed,
            vec![ScriptStep::Fail(AgentError::of(codes::PROVIDER_AUTH, "HTTP 401"))],
            AgentConfig::default(),
            None,
        ),
        (RunStatus::Aborted, vec![respond(calls(&[("c", "forbidden", "{}")]))], AgentConfig::default(), None),
        (RunStatus::MaxRounds, vec![look()], AgentConfig { max_rounds: 1, ..AgentConfig::default() }, None),
        (
            RunStatus::LoopDetected,
            vec![look(), look()],
            AgentConfig { loop_window: 2, ..AgentConfig::default() },
            None,
        ),
        (
            RunStatus::Cancelled,
            vec![respond(calls(&[("c", "cancel_me", "{}")]))],
            AgentConfig::default(),
            Some(50),
        ),
    ];
    for (want, steps, config, cancel) in cases {
        let (status, stored) = ended(steps, config, cancel).await;
        assert_eq!(status, want, "the run's end");
        assert_eq!(stored, want, "the stored status of a run that ended {want:?}");
    }
}
