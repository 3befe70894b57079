//! The hook pipeline: runs registered hooks in registration order, one at a time.
//!
//! # `before_tool_call`
//! - Each hook sees the call as the hooks before it left it (rewrites chain).
//! - `Proceed(Some(call))` is a rewrite: it replaces the whole call, arguments included. The
//!   arguments text is taken as it is: `{}` (an empty object) is a rewrite to "no arguments", not
//!   "no change"; only `Proceed(None)` means "no change".
//! - A rewrite must keep the call's id and name. A rewrite that changes the id (or the name, which
//!   would run another tool than the one the model asked for and the earlier hooks saw) is
//!   refused: none of it is applied, later hooks are not called, and the outcome is
//!   [`BeforeToolCallOutcome::Refused`] with the call as it was before that hook (so with its
//!   original id) and a `hook_call_id_changed` / `hook_call_name_changed` error. The call does not
//!   run: its result is that error (fail closed: a hook that wanted to change the call is not
//!   silently ignored).
//! - The first `Deny`, `Defer` or `Abort` wins: later hooks are not called.
//! - A hook that panics is treated like a refused rewrite, with code `hook_failed`.
//!
//! # `after_tool_call`
//! - Each hook sees the result as the hooks before it left it; `Proceed(Some(result))` replaces
//!   the whole result.
//! - Injected messages accumulate in hook order (those of a hook that stops included). An abort
//!   ends the run before the batch's results are appended, so nothing is injected then.
//! - The first `Stop` or `Abort` wins: later hooks are not called. A hook that panics aborts the
//!   run with `hook_failed` (the result can no longer be un-run, and the hook may have been a
//!   filter the model must not be shown the unfiltered result without).
//!
//! # `before_persist_state`
//! Every hook is called; the save is skipped when any hook says `Skip`, unless the caller says the
//! save is forced (`terminal`: a terminal state, or a frozen batch, see [`persist_is_forced`]),
//! which is always persisted. A hook that panics counts as `Persist`.
//!
//! # Notifications
//! `on_run_start`, `before_model_call`, `after_model_response`, `on_approval_required`,
//! `on_run_end` and `on_error` call every hook in order; a panicking hook does not stop the others
//! and the first panic is returned as a `hook_failed` error.

use super::{AfterToolCallAction, AgentHook, BeforeToolCall, HookContext, PersistDecision};
use crate::approval::{
    ApprovalPolicy, BatchCallInput, CallDisposition, PendingApprovalBatch, PolicyDecision,
};
use crate::error::{codes, AgentError};
use crate::message::{ChatMessage, ToolCall};
use crate::provider::{ChatRequest, ModelResponse};
use crate::state::{AgentState, RunStatus};
use crate::tool::{CancellationSignal, ToolDefinition, ToolResult};
use futures_util::FutureExt;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// Hooks in registration order.
#[derive(Clone, Default)]
pub struct HookPipeline {
    hooks: Vec<Arc<dyn AgentHook>>,
}

impl std::fmt::Debug for HookPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookPipeline").field("hooks", &self.hooks.len()).finish()
    }
}

/// The pipeline's answer for one call before it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeToolCallOutcome {
    /// Go on (to the policy and the registry) with this call: the original or the last rewrite.
    Proceed(ToolCall),
    /// Ask the user even where the policy allows.
    Defer {
        /// The call as the hooks left it.
        call: ToolCall,
        /// The reason for the approval dialog.
        reason: String,
    },
    /// Do not run; the model gets the hook's synthetic result.
    Deny {
        /// The call as the hooks left it.
        call: ToolCall,
        /// The synthetic result.
        result: ToolResult,
    },
    /// A hook broke the rules (changed the id or name) or panicked: the call does not run and
    /// its result is `ToolResult::from_error(&error)`; report `error` too (`on_error`).
    Refused {
        /// The call as it was before the offending hook (original id).
        call: ToolCall,
        /// `hook_call_id_changed`, `hook_call_name_changed` or `hook_failed`.
        error: AgentError,
    },
    /// End the run now with this `hook_aborted` error.
    Abort(AgentError),
}

impl BeforeToolCallOutcome {
    /// Combines the outcome with the approval policy into the planner's input: `Proceed` asks the
    /// policy, `Defer` asks the policy and then defers (a policy denial stays a denial), `Deny` and
    /// `Refused` are answered without running. `definition` is the tool's definition (`None` for
    /// an unknown tool); the name cannot have changed, so it is the one looked up for the model's
    /// call.
    ///
    /// An unknown tool never asks the user, whoever wants a confirmation (a policy, one that failed
    /// closed, a hook's `Defer`): it has no executor, so an approval would mean nothing and the
    /// registry answers `tool_not_found` whatever the user says; freezing the batch for it would
    /// only hold the known calls back (seed 7.3). It is answered with the registry's
    /// `tool_not_found` at once instead of running: a batch frozen for other calls runs on resume,
    /// when a tool of that name may have been registered, which nobody was asked about. A denial
    /// stays.
    ///
    /// # Errors
    /// The `hook_aborted` error of an `Abort`: the run ends.
    pub fn into_batch_input(
        self,
        policy: &dyn ApprovalPolicy,
        definition: Option<&ToolDefinition>,
    ) -> Result<BatchCallInput, AgentError> {
        let disposition = match self.question()? {
            Question::Policy { call, defer } => {
                let decision = policy.decide_cancellable(&call, definition, &CancellationSignal::new());
                Question::decided(call, defer, decision)
            }
            Question::Answered { call, result } => (call, CallDisposition::Answer(result)),
        };
        Ok(batch_input(disposition, definition))
    }

    /// [`into_batch_input`](Self::into_batch_input) for a run that `cancel` may end while the
    /// policy decides: the policy's answer is awaited ([`ApprovalPolicy::decide_async`]).
    ///
    /// # Errors
    /// As [`into_batch_input`](Self::into_batch_input).
    pub async fn into_batch_input_cancellable(
        self,
        policy: &dyn ApprovalPolicy,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> Result<BatchCallInput, AgentError> {
        let disposition = match self.question()? {
            Question::Policy { call, defer } => {
                let decision = policy.decide_async(&call, definition, cancel).await;
                Question::decided(call, defer, decision)
            }
            Question::Answered { call, result } => (call, CallDisposition::Answer(result)),
        };
        Ok(batch_input(disposition, definition))
    }

    /// What is left to ask the policy. An `Abort` is the error.
    fn question(self) -> Result<Question, AgentError> {
        Ok(match self {
            BeforeToolCallOutcome::Proceed(call) => Question::Policy { call, defer: None },
            BeforeToolCallOutcome::Defer { call, reason } => {
                // The reason is what the user reads in the approval dialog: never empty.
                let reason = if reason.trim().is_empty() {
                    format!("A hook asks to confirm tool \"{}\"", call.name)
                } else {
                    reason
                };
                Question::Policy { call, defer: Some(reason) }
            }
            BeforeToolCallOutcome::Deny { call, result } => Question::Answered { call, result },
            BeforeToolCallOutcome::Refused { call, error } => {
                Question::Answered { call, result: ToolResult::from_error(&error) }
            }
            BeforeToolCallOutcome::Abort(error) => return Err(error),
        })
    }
}

/// A before-hooks outcome short of an abort: a call for the policy to decide, or one answered
/// without running (the policy is not asked).
enum Question {
    /// Ask the policy; `defer` is the reason of a hook's `Defer`.
    Policy { call: ToolCall, defer: Option<String> },
    /// A hook's denial or a refused rewrite.
    Answered { call: ToolCall, result: ToolResult },
}

impl Question {
    /// The call's disposition once the policy decided (a hook's defer applies after it: a policy
    /// denial stays a denial).
    fn decided(
        call: ToolCall,
        defer: Option<String>,
        decision: PolicyDecision,
    ) -> (ToolCall, CallDisposition) {
        let disposition = CallDisposition::from_policy(decision);
        match defer {
            Some(reason) => (call, disposition.deferred(reason)),
            None => (call, disposition),
        }
    }
}

/// The planner's input for a call and its disposition: a call of an unknown tool that wants a
/// confirmation is answered `tool_not_found` instead
/// ([`into_batch_input`](BeforeToolCallOutcome::into_batch_input)).
fn batch_input(
    (call, disposition): (ToolCall, CallDisposition),
    definition: Option<&ToolDefinition>,
) -> BatchCallInput {
    let risk_level = definition.map(|d| d.risk_level).unwrap_or_default();
    let disposition = match disposition {
        CallDisposition::Confirm(_) if definition.is_none() => {
            // The registry is not at hand: the stand-in named is the one free of every tool,
            // which is what the request sends unless a tool goes by it (rare: a name that only
            // differs by refused characters from a registered one).
            CallDisposition::Answer(ToolResult::from_error(&crate::tool::tool_not_found(&call.name, |_| {
                false
            })))
        }
        d => d,
    };
    BatchCallInput { call, risk_level, disposition }
}

/// What the run does after a call's after-hooks.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterControl {
    /// Go on.
    Continue,
    /// Keep the result and end the run after this batch.
    Stop,
    /// End the run now with this error (`hook_aborted`, or `hook_failed` for a panicking hook).
    Abort(AgentError),
}

/// The pipeline's answer after a call ran.
#[derive(Debug, Clone, PartialEq)]
pub struct AfterToolCallOutcome {
    /// The result, as the hooks left it.
    pub result: ToolResult,
    /// What the run does next.
    pub control: AfterControl,
    /// Messages to append after the batch's results, in hook order.
    pub inject: Vec<ChatMessage>,
}

impl AfterToolCallOutcome {
    /// A hook failed (panicked, or an adapter's hook threw): the run ends with `error`, and the
    /// result kept for the call is that error, not what the tool returned. A failing hook may be
    /// the one that filters results, so the unfiltered result must not reach the model later
    /// either (the call's record answers it when the session goes on).
    fn failed(error: AgentError) -> Self {
        AfterToolCallOutcome {
            result: ToolResult::from_error(&error),
            control: AfterControl::Abort(error),
            inject: Vec::new(),
        }
    }
}

/// True when a save of a state with this status must not be skipped by `before_persist_state`:
/// the terminal statuses and `AwaitingApproval` (a frozen batch is persisted before
/// `approval_required` is emitted).
pub fn persist_is_forced(status: RunStatus) -> bool {
    status.is_terminal() || status == RunStatus::AwaitingApproval
}

impl HookPipeline {
    /// An empty pipeline.
    pub fn new() -> Self {
        HookPipeline { hooks: Vec::new() }
    }

    /// A pipeline of these hooks, in this order.
    pub fn with_hooks(hooks: Vec<Arc<dyn AgentHook>>) -> Self {
        HookPipeline { hooks }
    }

    /// Adds a hook after the others.
    pub fn push(&mut self, hook: Arc<dyn AgentHook>) {
        self.hooks.push(hook);
    }

    /// The hooks, in order.
    pub fn hooks(&self) -> &[Arc<dyn AgentHook>] {
        &self.hooks
    }

    /// The number of hooks.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// True without hooks.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Runs `before_tool_call` through the hooks (see the module rules).
    pub async fn before_tool_call(
        &self,
        ctx: &HookContext<'_>,
        call: ToolCall,
        definition: Option<&ToolDefinition>,
    ) -> BeforeToolCallOutcome {
        let mut current = call;
        for (index, hook) in self.hooks.iter().enumerate() {
            let decision = match guarded(hook.before_tool_call(ctx, &current, definition)).await {
                Ok(decision) => decision,
                Err(panic) => {
                    let error = hook_failed(index, "before_tool_call", panic);
                    return BeforeToolCallOutcome::Refused { call: current, error };
                }
            };
            match decision {
                BeforeToolCall::Proceed(None) => {}
                BeforeToolCall::Proceed(Some(rewritten)) => {
                    if rewritten.id != current.id {
                        let error = AgentError::of(
                            codes::HOOK_CALL_ID_CHANGED,
                            format!(
                                "hook #{index} rewrote call {} with id {}; the rewrite was refused",
                                current.id, rewritten.id
                            ),
                        );
                        return BeforeToolCallOutcome::Refused { call: current, error };
                    }
                    if rewritten.name != current.name {
                        let error = AgentError::of(
                            codes::HOOK_CALL_NAME_CHANGED,
                            format!(
                                "hook #{index} rewrote call {} of tool {} into tool {}; the rewrite was refused",
                                current.id, current.name, rewritten.name
                            ),
                        );
                        return BeforeToolCallOutcome::Refused { call: current, error };
                    }
                    current = rewritten;
                }
                BeforeToolCall::Deny(result) => {
                    // The result is saved with the call: one that could not be read back fails the hook.
                    if let Err(e) = result.check_depth(&format!("hook #{index} (before_tool_call)")) {
                        let error = AgentError::of(codes::HOOK_FAILED, e.message);
                        return BeforeToolCallOutcome::Refused { call: current, error };
                    }
                    return BeforeToolCallOutcome::Deny { call: current, result };
                }
                BeforeToolCall::Defer(reason) => {
                    return BeforeToolCallOutcome::Defer { call: current, reason }
                }
                BeforeToolCall::Abort(reason) => {
                    return BeforeToolCallOutcome::Abort(AgentError::of(
                        codes::HOOK_ABORTED,
                        format!("hook #{index} aborted the run before call {}: {reason}", current.id),
                    ))
                }
                BeforeToolCall::Failed(why) => {
                    let error = AgentError::of(
                        codes::HOOK_FAILED,
                        format!("hook #{index} failed in before_tool_call for call {}: {why}", current.id),
                    );
                    return BeforeToolCallOutcome::Refused { call: current, error };
                }
            }
        }
        BeforeToolCallOutcome::Proceed(current)
    }

    /// Runs `after_tool_call` through the hooks (see the module rules).
    pub async fn after_tool_call(
        &self,
        ctx: &HookContext<'_>,
        call: &ToolCall,
        result: ToolResult,
    ) -> AfterToolCallOutcome {
        let mut outcome =
            AfterToolCallOutcome { result, control: AfterControl::Continue, inject: Vec::new() };
        for (index, hook) in self.hooks.iter().enumerate() {
            let answer = match guarded(hook.after_tool_call(ctx, call, &outcome.result)).await {
                Ok(answer) => answer,
                Err(panic) => {
                    return AfterToolCallOutcome::failed(hook_failed(index, "after_tool_call", panic));
                }
            };
            // A reminder for the model is a user or system message. An assistant message would
            // put words (or calls) in the model's mouth, a tool message would answer no call:
            // either breaks the history the provider accepts.
            if let Some(m) = answer
                .inject
                .iter()
                .find(|m| !matches!(m, ChatMessage::User { .. } | ChatMessage::System { .. }))
            {
                // Only assistant and tool messages get here.
                let article = if m.role().starts_with('a') { "an" } else { "a" };
                return AfterToolCallOutcome::failed(AgentError::of(
                    codes::HOOK_FAILED,
                    format!(
                        "hook #{index} injected {article} {} message after call {}: only user and system messages can be injected",
                        m.role(),
                        call.id
                    ),
                ));
            }
            outcome.inject.extend(answer.inject);
            match answer.action {
                AfterToolCallAction::Proceed(None) => {}
                AfterToolCallAction::Proceed(Some(rewritten)) => {
                    // Saved as the call's result: one that could not be read back fails the hook.
                    if let Err(e) = rewritten.check_depth(&format!("hook #{index} (after_tool_call)")) {
                        return AfterToolCallOutcome::failed(AgentError::of(codes::HOOK_FAILED, e.message));
                    }
                    outcome.result = rewritten;
                }
                AfterToolCallAction::Stop => {
                    outcome.control = AfterControl::Stop;
                    return outcome;
                }
                AfterToolCallAction::Abort(reason) => {
                    outcome.control = AfterControl::Abort(AgentError::of(
                        codes::HOOK_ABORTED,
                        format!("hook #{index} aborted the run after call {}: {reason}", call.id),
                    ));
                    return outcome;
                }
                AfterToolCallAction::Failed(why) => {
                    return AfterToolCallOutcome::failed(AgentError::of(
                        codes::HOOK_FAILED,
                        format!("hook #{index} failed in after_tool_call for call {}: {why}", call.id),
                    ));
                }
            }
        }
        outcome
    }

    /// Asks every hook whether this save may be skipped. `terminal` forces the save (pass
    /// [`persist_is_forced`]`(state.status)`).
    pub async fn before_persist_state(
        &self,
        ctx: &HookContext<'_>,
        state: &AgentState,
        terminal: bool,
    ) -> PersistDecision {
        let mut skip = false;
        for (index, hook) in self.hooks.iter().enumerate() {
            match guarded(hook.before_persist_state(ctx, state)).await {
                Ok(PersistDecision::Skip) => skip = true,
                Ok(PersistDecision::Persist) => {}
                Err(panic) => {
                    log::warn!("{}", hook_failed(index, "before_persist_state", panic));
                }
            }
        }
        if skip && !terminal {
            PersistDecision::Skip
        } else {
            PersistDecision::Persist
        }
    }

    /// Notifies every hook that a run starts.
    ///
    /// # Errors
    /// `hook_failed` for the first hook that panicked (the others were still called).
    pub async fn on_run_start(&self, ctx: &HookContext<'_>) -> Result<(), AgentError> {
        self.notify("on_run_start", |hook| hook.on_run_start(ctx)).await
    }

    /// Notifies every hook of a request about to go to the model.
    ///
    /// # Errors
    /// As [`on_run_start`](Self::on_run_start).
    pub async fn before_model_call(
        &self,
        ctx: &HookContext<'_>,
        request: &ChatRequest,
    ) -> Result<(), AgentError> {
        self.notify("before_model_call", |hook| hook.before_model_call(ctx, request)).await
    }

    /// Notifies every hook of the model's answer.
    ///
    /// # Errors
    /// As [`on_run_start`](Self::on_run_start).
    pub async fn after_model_response(
        &self,
        ctx: &HookContext<'_>,
        response: &ModelResponse,
    ) -> Result<(), AgentError> {
        self.notify("after_model_response", |hook| hook.after_model_response(ctx, response)).await
    }

    /// Notifies every hook that a batch was frozen and persisted.
    ///
    /// # Errors
    /// As [`on_run_start`](Self::on_run_start).
    pub async fn on_approval_required(
        &self,
        ctx: &HookContext<'_>,
        batch: &PendingApprovalBatch,
    ) -> Result<(), AgentError> {
        self.notify("on_approval_required", |hook| hook.on_approval_required(ctx, batch)).await
    }

    /// Notifies every hook that the run ended.
    ///
    /// # Errors
    /// As [`on_run_start`](Self::on_run_start).
    pub async fn on_run_end(
        &self,
        ctx: &HookContext<'_>,
        status: RunStatus,
        final_text: Option<&str>,
    ) -> Result<(), AgentError> {
        self.notify("on_run_end", |hook| hook.on_run_end(ctx, status, final_text)).await
    }

    /// Notifies every hook of an error. A `hook_failed` returned from here should not be fed back
    /// into `on_error`.
    ///
    /// # Errors
    /// As [`on_run_start`](Self::on_run_start).
    pub async fn on_error(&self, ctx: &HookContext<'_>, error: &AgentError) -> Result<(), AgentError> {
        self.notify("on_error", |hook| hook.on_error(ctx, error)).await
    }

    async fn notify<'h, F, Fut>(&'h self, method: &str, call: F) -> Result<(), AgentError>
    where
        F: Fn(&'h dyn AgentHook) -> Fut,
        Fut: Future<Output = ()> + 'h,
    {
        let mut first = None;
        for (index, hook) in self.hooks.iter().enumerate() {
            if let Err(panic) = guarded(call(hook.as_ref())).await {
                first.get_or_insert_with(|| hook_failed(index, method, panic));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Awaits a hook's future, turning a panic into its payload.
async fn guarded<T>(future: impl Future<Output = T>) -> Result<T, Box<dyn Any + Send>> {
    AssertUnwindSafe(future).catch_unwind().await
}

fn hook_failed(index: usize, method: &str, panic: Box<dyn Any + Send>) -> AgentError {
    let what = crate::logging::panic_text(panic.as_ref()).unwrap_or("a panic".into());
    AgentError::of(codes::HOOK_FAILED, format!("hook #{index} panicked in {method}: {what}"))
}
