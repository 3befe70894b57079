//! The pairing invariant and its repair: every assistant tool call is answered by exactly one tool
//! result, so the next request is never rejected by the provider; and no tool is run twice.
//!
//! [`repair_pairing`] is pure. For each assistant message's calls that lack a result it decides
//! from the state's [`ToolRunRecord`]s:
//! - `Finished`: the recorded result is used (the call is never run again);
//! - `Started` only: an is_error `tool_interrupted` result saying the call may or may not have taken
//!   effect, unless the tool is idempotent ([`RepairPolicy::is_idempotent`]) and the call belongs to
//!   the last assistant message: then it is left unanswered and listed in
//!   [`RepairReport::rerun`], for the runtime to run again;
//! - no record: an is_error `tool_interrupted` result saying the call did not run, unless
//!   [`RepairPolicy::resume_unstarted`] is set, the status is `running` and the call belongs to the
//!   last assistant message: then it is left unanswered and listed in [`RepairReport::resume`] (it
//!   never ran, so running it now runs it once; this is how an approved batch resumes after a crash);
//! - calls of a batch still awaiting approval ([`RepairPolicy::keep_awaiting_approval`], status
//!   `awaiting_approval` with a pending batch, last assistant message) are pending, not orphans:
//!   left alone.
//!
//! It also drops a second result for the same call and results that answer no call of the
//! assistant message before them.
//!
//! Where it runs: `StateStore::load` of both stores applies it with the store's policy
//! (by default [`RepairPolicy::conservative`]: nothing idempotent, awaiting batches kept);
//! `StateStore::load_unrepaired` skips it, so a runtime that knows which tools are idempotent loads
//! unrepaired and calls [`repair_pairing`] itself. Repair is idempotent: a second pass changes
//! nothing. Loading never writes: the runtime commits [`RepairReport::events`] (or calls
//! `save_snapshot` when [`RepairReport::needs_snapshot`]) to make the repair durable.

use super::{AgentState, RunStatus, StateEvent, ToolRunRecord};
use crate::error::{codes, AgentError};
use crate::message::{ChatMessage, ToolCall};
use crate::tool::ToolResult;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// How [`repair_pairing`] treats calls it cannot answer from a record.
#[derive(Clone)]
pub struct RepairPolicy {
    /// True for tools whose started-but-unfinished calls may run again (their definition's
    /// `idempotent` flag).
    pub is_idempotent: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Leave alone the calls of a batch still awaiting approval (they are pending, not orphans).
    pub keep_awaiting_approval: bool,
    /// Leave unanswered the never-started calls of the last assistant message of a `running`
    /// session, for the runtime to run ([`RepairReport::resume`]).
    pub resume_unstarted: bool,
}

impl RepairPolicy {
    /// Nothing is idempotent (nothing is left to run again); awaiting batches are kept.
    pub fn conservative() -> Self {
        RepairPolicy {
            is_idempotent: Arc::new(|_| false),
            keep_awaiting_approval: true,
            resume_unstarted: false,
        }
    }

    /// The conservative policy with an idempotency predicate (by tool name).
    pub fn with_idempotent(is_idempotent: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        RepairPolicy {
            is_idempotent: Arc::new(is_idempotent),
            keep_awaiting_approval: true,
            resume_unstarted: false,
        }
    }

    /// The same policy with `keep_awaiting_approval` set.
    pub fn keep_awaiting_approval(mut self, keep: bool) -> Self {
        self.keep_awaiting_approval = keep;
        self
    }

    /// The same policy with `resume_unstarted` set.
    pub fn resume_unstarted(mut self, resume: bool) -> Self {
        self.resume_unstarted = resume;
        self
    }
}

impl Default for RepairPolicy {
    fn default() -> Self {
        RepairPolicy::conservative()
    }
}

impl fmt::Debug for RepairPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepairPolicy")
            .field("keep_awaiting_approval", &self.keep_awaiting_approval)
            .field("resume_unstarted", &self.resume_unstarted)
            .finish_non_exhaustive()
    }
}

/// What [`repair_pairing`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepairReport {
    /// Calls answered with their recorded (`Finished`) result.
    pub recorded: Vec<String>,
    /// Calls that started and never finished, answered `tool_interrupted` ("may or may not have
    /// taken effect").
    pub interrupted: Vec<String>,
    /// Calls that never started, answered `tool_interrupted` ("did not run").
    pub not_started: Vec<String>,
    /// Started, unfinished calls of idempotent tools, left unanswered for the runtime to run again.
    pub rerun: Vec<ToolCall>,
    /// Calls of a batch awaiting approval, left alone.
    pub awaiting: Vec<String>,
    /// Never-started calls left unanswered for the runtime to run ([`RepairPolicy::resume_unstarted`]).
    pub resume: Vec<ToolCall>,
    /// Tool results dropped: a second answer to a call, or an answer to no call.
    pub removed: usize,
    /// When every change was an append at the end of the history: the `MessageAppended` events
    /// that make the repair durable with `commit`. Empty when [`needs_snapshot`](Self::needs_snapshot).
    pub events: Vec<StateEvent>,
    /// True when a change was not at the end of the history: make it durable with `save_snapshot`.
    pub needs_snapshot: bool,
}

impl RepairReport {
    /// True when the history was changed.
    pub fn changed(&self) -> bool {
        self.removed > 0
            || !self.recorded.is_empty()
            || !self.interrupted.is_empty()
            || !self.not_started.is_empty()
    }
}

/// The tool message that answers `call` with `result` (what the runtime appends after a call).
///
/// Its content is what the model reads, and the OpenAI-compatible `role=tool` message has no
/// error field: a failed result (`is_error`) says so in its text, which starts with the word
/// `error` (ASCII case ignored; [`crate::message::reads_as_error`]). The runtime's own error
/// results do (`error [code]: ...`); any other failed text is shown as `error: <text>` (an
/// executor's `unknown record: r9`, a denial's `denied by user: ...`), so the model never takes
/// a failure for data (seed: "isError: true 正确回填给模型"). `is_error` itself is kept for the
/// app.
pub fn tool_result_message(call: &ToolCall, result: &ToolResult) -> ChatMessage {
    let text = result.to_model_text();
    let content = if needs_error_mark(&text, result.is_error) { format!("error: {text}") } else { text };
    ChatMessage::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error: result.is_error,
    }
}

/// Whether a tool message's text must be shown as `error: <text>` (see [`tool_result_message`]).
fn needs_error_mark(text: &str, is_error: bool) -> bool {
    is_error && !crate::message::reads_as_error(text)
}

/// The history as the model is shown it: every failed result's text marked as
/// [`tool_result_message`] marks it. Results appended since the mark exists already carry it in
/// their content; results saved by earlier versions (a session resumed after an update) do not,
/// and would reach the model word for word like a success. They are marked here, in what is sent,
/// not in the state: the saved history keeps its text as it was written. Without such a result
/// (every history written since) the same `Arc` is returned and nothing is copied.
pub fn mark_failed_results(messages: Arc<Vec<ChatMessage>>) -> Arc<Vec<ChatMessage>> {
    let unmarked = |m: &ChatMessage| matches!(m, ChatMessage::Tool { content, is_error, .. } if needs_error_mark(content, *is_error));
    if !messages.iter().any(unmarked) {
        return messages;
    }
    let mut marked = Arc::unwrap_or_clone(messages);
    for m in &mut marked {
        if let ChatMessage::Tool { content, is_error, .. } = m {
            if needs_error_mark(content, *is_error) {
                *content = format!("error: {content}");
            }
        }
    }
    Arc::new(marked)
}

/// The result given to a call that started but never finished.
pub fn interrupted_result(call: &ToolCall) -> ToolResult {
    ToolResult::from_error(&AgentError::of(
        codes::TOOL_INTERRUPTED,
        format!(
            "the call to `{}` was interrupted while it ran (the app stopped or the run was cancelled); \
             it may or may not have taken effect, so check before calling it again",
            call.name
        ),
    ))
}

/// The result given to a call that was interrupted before it started.
pub fn not_started_result(call: &ToolCall) -> ToolResult {
    ToolResult::from_error(&AgentError::of(
        codes::TOOL_INTERRUPTED,
        format!("the run was interrupted before the call to `{}` ran; it did not run", call.name),
    ))
}

/// Restores the pairing invariant in `state.messages` (see the module docs for the rules).
pub fn repair_pairing(state: &mut AgentState, policy: &RepairPolicy) -> RepairReport {
    // The common case costs a scan, not a copy of the history: nothing to repair.
    if check_pairing(&state.messages, &[]).is_ok() {
        return RepairReport::default();
    }
    let mut report = RepairReport::default();
    let messages = std::mem::take(&mut state.messages);
    let last_assistant = messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { .. }));
    // The awaiting batch's call ids (only honoured for the last assistant message).
    let awaiting_ids: HashSet<&str> = match (&state.pending_approval, state.status) {
        (Some(batch), RunStatus::AwaitingApproval) if policy.keep_awaiting_approval => batch
            .items
            .iter()
            .map(|i| i.tool_call.id.as_str())
            .chain(batch.assistant_message.tool_calls().iter().map(|c| c.id.as_str()))
            .collect(),
        _ => HashSet::new(),
    };
    let original_len = messages.len();
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 4);
    // Index in `out` where each appended message landed relative to the original tail.
    let mut inserted_not_at_end = false;
    let mut appended: Vec<ChatMessage> = Vec::new();

    let mut i = 0;
    while i < messages.len() {
        let msg = &messages[i];
        match msg {
            ChatMessage::Tool { .. } => {
                // A tool message outside any assistant group answers no call.
                report.removed += 1;
                inserted_not_at_end = true;
                i += 1;
            }
            ChatMessage::Assistant { tool_calls, .. } => {
                out.push(msg.clone());
                let is_last = Some(i) == last_assistant;
                let mut j = i + 1;
                let mut answered: HashSet<&str> = HashSet::new();
                while j < messages.len() {
                    let ChatMessage::Tool { tool_call_id, .. } = &messages[j] else { break };
                    let known = tool_calls.iter().any(|c| &c.id == tool_call_id);
                    if known && answered.insert(tool_call_id.as_str()) {
                        out.push(messages[j].clone());
                    } else {
                        report.removed += 1;
                        inserted_not_at_end = true;
                    }
                    j += 1;
                }
                let group_ends_history = j == original_len;
                for call in tool_calls {
                    // `insert` also skips a call id the model repeated within one message.
                    if !answered.insert(call.id.as_str()) {
                        continue;
                    }
                    if is_last && awaiting_ids.contains(call.id.as_str()) {
                        report.awaiting.push(call.id.clone());
                        continue;
                    }
                    let result = match state.tool_runs.get(&call.id) {
                        Some(ToolRunRecord::Finished { result, .. }) => {
                            report.recorded.push(call.id.clone());
                            result.clone()
                        }
                        Some(ToolRunRecord::Started { .. }) => {
                            if is_last && (policy.is_idempotent)(&call.name) {
                                report.rerun.push(call.clone());
                                continue;
                            }
                            report.interrupted.push(call.id.clone());
                            interrupted_result(call)
                        }
                        None => {
                            if is_last && policy.resume_unstarted && state.status == RunStatus::Running {
                                report.resume.push(call.clone());
                                continue;
                            }
                            report.not_started.push(call.id.clone());
                            not_started_result(call)
                        }
                    };
                    let m = tool_result_message(call, &result);
                    if group_ends_history {
                        appended.push(m.clone());
                    } else {
                        inserted_not_at_end = true;
                    }
                    out.push(m);
                }
                i = j;
            }
            _ => {
                out.push(msg.clone());
                i += 1;
            }
        }
    }
    state.messages = out;
    if inserted_not_at_end {
        report.needs_snapshot = true;
    } else {
        report.events = appended.into_iter().map(|message| StateEvent::MessageAppended { message }).collect();
    }
    report
}

/// Checks the pairing invariant: every tool call of every assistant message is answered exactly
/// once by the tool messages right after it, and every tool message answers a call. Calls listed in
/// `pending` (a batch awaiting approval, idempotent calls to re-run) may be unanswered.
///
/// # Errors
/// `invalid_state`, naming the first call or result that breaks it.
pub fn check_pairing(messages: &[ChatMessage], pending: &[&str]) -> Result<(), AgentError> {
    let bad = |m: String| Err(AgentError::of(codes::INVALID_STATE, m));
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            ChatMessage::Tool { tool_call_id, .. } => {
                return bad(format!("message {i}: the result for {tool_call_id:?} answers no call"))
            }
            ChatMessage::Assistant { tool_calls, .. } => {
                let mut answered: HashSet<&str> = HashSet::new();
                let mut j = i + 1;
                while let Some(ChatMessage::Tool { tool_call_id, .. }) = messages.get(j) {
                    if !tool_calls.iter().any(|c| &c.id == tool_call_id) {
                        return bad(format!("message {j}: the result for {tool_call_id:?} answers no call"));
                    }
                    if !answered.insert(tool_call_id) {
                        return bad(format!("message {j}: a second result for {tool_call_id:?}"));
                    }
                    j += 1;
                }
                for c in tool_calls {
                    if !answered.contains(c.id.as_str()) && !pending.contains(&c.id.as_str()) {
                        return bad(format!("message {i}: the call {:?} has no result", c.id));
                    }
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, content: &str, is_error: bool) -> ChatMessage {
        ChatMessage::Tool { tool_call_id: id.into(), name: "t".into(), content: content.into(), is_error }
    }

    #[test]
    fn mark_failed_results_marks_only_unmarked_failures_and_copies_nothing_without_one() {
        let current = Arc::new(vec![
            ChatMessage::user("q"),
            result("a", "error: unknown record: r9", true),
            result("b", "unknown record: r9", false),
            result("c", "ERROR [tool_timeout]: slow", true),
        ]);
        assert!(Arc::ptr_eq(&mark_failed_results(Arc::clone(&current)), &current));
        let old =
            Arc::new(vec![result("a", "unknown record: r9", true), result("b", "errors found: 2", true)]);
        let marked = mark_failed_results(old);
        assert_eq!(
            *marked,
            vec![result("a", "error: unknown record: r9", true), result("b", "error: errors found: 2", true)]
        );
        assert!(
            Arc::ptr_eq(&mark_failed_results(Arc::clone(&marked)), &marked),
            "marking twice changes nothing"
        );
    }
}
