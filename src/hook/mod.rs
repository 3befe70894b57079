//! Hooks: one method per lifecycle event, each a no-op by default. A [`HookPipeline`] runs hooks in
//! registration order; rewrites chain, the first short-circuit wins, and a rewrite may never change
//! a call id.
//!
//! The pipeline ([`HookPipeline`], in `pipeline`) states its exact rules: how rewrites compose,
//! which decisions short-circuit, what happens to a rewrite that changes a call's id or name, and
//! what a panicking hook does.

mod pipeline;

pub use pipeline::{
    persist_is_forced, AfterControl, AfterToolCallOutcome, BeforeToolCallOutcome, HookPipeline,
};

use crate::approval::PendingApprovalBatch;
use crate::error::AgentError;
use crate::message::{ChatMessage, ToolCall};
use crate::provider::{ChatRequest, ModelResponse};
use crate::state::{AgentState, RunStatus};
use crate::tool::{CancellationSignal, ToolDefinition, ToolResult};
use async_trait::async_trait;

/// Where a hook is called from.
#[derive(Debug, Clone, Copy)]
pub struct HookContext<'a> {
    /// The session.
    pub session_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// The model round (1-based; 0 before the first).
    pub round: u32,
    /// The run's cancellation signal. Once it fires the run no longer waits for a hook's answer
    /// (nor keeps the call): a hook that has not begun its work may skip it.
    pub signal: &'a CancellationSignal,
}

/// What `before_tool_call` decides.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeToolCall {
    /// Go on, with the call rewritten (same id) or unchanged (`None`).
    Proceed(Option<ToolCall>),
    /// Do not run; the model gets this result instead (held to the agent's `max_result_bytes` as
    /// a tool's result is: an error cut to fit, a success replaced by `tool_result_too_large`).
    Deny(ToolResult),
    /// Ask the user even where the policy allows (reason shown in the approval dialog).
    Defer(String),
    /// End the run now.
    Abort(String),
    /// The hook itself failed (for an adapter's foreign hook: it threw, rejected, timed out or
    /// answered a wrong shape). As for a panicking hook, the call is answered `hook_failed`
    /// without running, `on_error` hears it, and the run goes on.
    Failed(String),
}

/// What `after_tool_call` decides about the result.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterToolCallAction {
    /// Keep the result, rewritten or unchanged (`None`).
    Proceed(Option<ToolResult>),
    /// Keep the result and end the run after this batch.
    Stop,
    /// End the run now.
    Abort(String),
    /// The hook itself failed (for an adapter's foreign hook: it threw, rejected, timed out or
    /// answered a wrong shape). As a panicking hook does, this ends the run with `hook_failed`:
    /// a hook that filters results must not let an unfiltered one through by failing.
    Failed(String),
}

/// `after_tool_call`'s answer: an action plus messages to inject after the result.
#[derive(Debug, Clone, PartialEq)]
pub struct AfterToolCall {
    /// The action.
    pub action: AfterToolCallAction,
    /// Messages appended to the history after the batch's results: user or system messages
    /// (reminders for the model). Another role fails the hook (`hook_failed`, the run ends). Not
    /// with [`AfterToolCallAction::Abort`]: the run ends before the batch's results are appended.
    /// The history keeps a system message as it is; requests send it as a user message, as strict
    /// providers refuse a system message anywhere but first.
    pub inject: Vec<ChatMessage>,
}

impl Default for AfterToolCall {
    fn default() -> Self {
        AfterToolCall { action: AfterToolCallAction::Proceed(None), inject: Vec::new() }
    }
}

/// Whether a state save may be skipped (terminal states are persisted regardless).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PersistDecision {
    /// Save.
    #[default]
    Persist,
    /// Skip this save (ignored for terminal states).
    Skip,
}

/// A lifecycle hook. Every method has a no-op default.
#[async_trait]
pub trait AgentHook: Send + Sync {
    /// A run starts.
    async fn on_run_start(&self, _ctx: &HookContext<'_>) {}
    /// A request is about to go to the model.
    async fn before_model_call(&self, _ctx: &HookContext<'_>, _request: &ChatRequest) {}
    /// The model answered.
    async fn after_model_response(&self, _ctx: &HookContext<'_>, _response: &ModelResponse) {}
    /// A call is about to go through approval and the registry.
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        BeforeToolCall::Proceed(None)
    }
    /// A call produced a result (errors included).
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _result: &ToolResult,
    ) -> AfterToolCall {
        AfterToolCall::default()
    }
    /// A batch was frozen and persisted.
    async fn on_approval_required(&self, _ctx: &HookContext<'_>, _batch: &PendingApprovalBatch) {}
    /// The state is about to be saved by a run (or resume or dismissal): each of its saves is
    /// asked first, and reported by an `AgentEvent::StatePersisted` once written. Not asked for
    /// the saves made outside a run's events: a decision (`approve`, `deny`), `set_metadata`, a
    /// deletion, and the pairing repair a run or resume makes durable before it starts (before
    /// its `RunStarted`, which stays its first event; a repair is never skipped).
    async fn before_persist_state(&self, _ctx: &HookContext<'_>, _state: &AgentState) -> PersistDecision {
        PersistDecision::Persist
    }
    /// The run ended (not when it is suspended for approval: `on_approval_required` tells that,
    /// and its resume calls [`on_run_start`](Self::on_run_start) again).
    async fn on_run_end(&self, _ctx: &HookContext<'_>, _status: RunStatus, _final_text: Option<&str>) {}
    /// The run met an error: one that ends it (a provider's, a hook's abort or failure, a loop
    /// detected; told before [`on_run_end`](Self::on_run_end)), or a `before_tool_call` hook's
    /// failure, which answers its call and lets the run go on.
    async fn on_error(&self, _ctx: &HookContext<'_>, _error: &AgentError) {}
}
