//! The whole-batch freeze: planning a batch of calls, deciding its items one at a time, and
//! settling it into exactly one outcome per call.
//!
//! # Rules
//! - A batch freezes when any call needs confirmation (policy `RequireConfirmation` or a hook's
//!   `Defer`). Nothing of a frozen batch runs until every item is decided.
//! - All items approved: every call that was going to run runs, in call order.
//! - Any item denied: nothing runs. Each denied call gets an `is_error` result
//!   `denied by user: <reason>` (code `tool_denied`); every other call gets an `is_error` result
//!   saying it was not run because the batch was denied (code `tool_not_run`), except calls that
//!   were already answered before the freeze (below), which keep that answer.
//! - A call the policy denies outright (`PolicyDecision::Deny`, not a confirmation) or a hook
//!   denies is answered without running (`tool_denied`, or the hook's synthetic result); the other
//!   calls of its batch are not affected and run normally (or freeze, if one of them needs
//!   confirmation).
//! - Every call of the batch always gets exactly one outcome, in call order.
//! - A call planned to run when the batch froze is asked about again before the batch settles
//!   ([`PendingApprovalBatch::replan_runs`]): its tool may have been registered anew (dangerous
//!   now) or the policy changed meanwhile. Needing confirmation now, it gets a pending item and the
//!   batch is frozen again (the decisions made stay); denied by the policy now, it is answered.
//!
//! Everything here is pure: ids come from `uuid`, times are passed in by the caller.

use super::{arguments_hash, ApprovalDecision, PendingApprovalBatch, PendingApprovalItem, PolicyDecision};
use crate::error::{codes, AgentError};
use crate::message::{ChatMessage, ToolCall};
use crate::state::StateEvent;
use crate::tool::{RiskLevel, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What happens to one call of a batch, once hooks and the policy have spoken.
#[derive(Debug, Clone, PartialEq)]
pub enum CallDisposition {
    /// Run it (as part of the batch).
    Run,
    /// Do not run it: this is its result (a hook's synthetic result, a policy denial...).
    Answer(ToolResult),
    /// Freeze the batch until the user decides; the reason is shown in the approval dialog.
    Confirm(String),
}

impl CallDisposition {
    /// The disposition a policy decision gives: `Allow` runs, `Deny(reason)` is answered with an
    /// `is_error` result `denied by policy: <reason>` (code `tool_denied`), `RequireConfirmation`
    /// asks the user.
    pub fn from_policy(decision: PolicyDecision) -> Self {
        match decision {
            PolicyDecision::Allow => CallDisposition::Run,
            PolicyDecision::Deny(reason) => CallDisposition::Answer(coded_error_result(
                codes::TOOL_DENIED,
                format!("denied by policy: {reason}"),
            )),
            PolicyDecision::RequireConfirmation(reason) => CallDisposition::Confirm(reason),
        }
    }

    /// The disposition after a hook's `Defer(reason)`: a call that would run, or would ask anyway,
    /// asks the user with the hook's reason. A call that is already answered stays answered (a
    /// denial is never turned back into a question).
    pub fn deferred(self, reason: impl Into<String>) -> Self {
        match self {
            CallDisposition::Run | CallDisposition::Confirm(_) => CallDisposition::Confirm(reason.into()),
            answered @ CallDisposition::Answer(_) => answered,
        }
    }
}

/// One call handed to [`plan_batch`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchCallInput {
    /// The call as the before-hooks left it (same id as the model's).
    pub call: ToolCall,
    /// The tool's risk level (`RiskLevel::Safe` for an unknown tool).
    pub risk_level: RiskLevel,
    /// What to do with it.
    pub disposition: CallDisposition,
}

/// How one call of a frozen batch is to be handled once the batch is settled. Persisted with the
/// batch so a resumed process needs neither the hooks nor the policy again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "snake_case")]
pub enum BatchCallPlan {
    /// Runs if the batch is approved.
    Run,
    /// Already answered before the freeze; never runs.
    Answer {
        /// The result.
        result: ToolResult,
    },
    /// Waits for the pending item with this approval id.
    Confirm {
        /// The item's approval id.
        approval_id: String,
    },
}

/// One call of a frozen batch, in call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchCall {
    /// The call as the before-hooks left it.
    pub call: ToolCall,
    /// What happens to it.
    #[serde(flatten)]
    pub plan: BatchCallPlan,
}

/// A call answered without running, with its result.
#[derive(Debug, Clone, PartialEq)]
pub struct AnsweredCall {
    /// The call (its id pairs the result).
    pub call: ToolCall,
    /// The result.
    pub result: ToolResult,
}

/// One call of a batch that may proceed, in call order.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchStep {
    /// Hand it to the registry and executor.
    Execute(ToolCall),
    /// Do not run it; use this result.
    Answer(AnsweredCall),
}

impl BatchStep {
    /// The call of this step.
    pub fn call(&self) -> &ToolCall {
        match self {
            BatchStep::Execute(call) => call,
            BatchStep::Answer(answered) => &answered.call,
        }
    }
}

/// What [`plan_batch`] decided.
// One per tool batch, moved once into the driver: boxing the frozen batch would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum BatchPlan {
    /// No call needs confirmation: one step per call, in call order.
    Run(Vec<BatchStep>),
    /// At least one call needs confirmation: persist this batch, then emit `approval_required`.
    /// Nothing runs.
    Freeze(PendingApprovalBatch),
}

/// The outcome of a fully decided batch.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchSettlement {
    /// Every item was approved: one step per call, in call order.
    Run(Vec<BatchStep>),
    /// Some item was denied: one result per call, in call order, and nothing runs.
    Denied(Vec<AnsweredCall>),
}

/// A user's decision on one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserDecision {
    /// Approve it.
    Approve,
    /// Deny it, with the user's reason (may be empty).
    Deny(String),
}

impl UserDecision {
    /// What an item holds once this decision is applied.
    pub fn outcome(&self) -> ApprovalDecision {
        match self {
            UserDecision::Approve => ApprovalDecision::Approved,
            UserDecision::Deny(_) => ApprovalDecision::Denied,
        }
    }
}

/// Plans a batch. Without any `Confirm` disposition the batch runs at once ([`BatchPlan::Run`]);
/// otherwise it is frozen into a [`PendingApprovalBatch`] with one pending item per `Confirm`
/// call (fresh uuid v4 ids, created at `now_ms`), every call and its plan in call order, and the
/// assistant message as given.
pub fn plan_batch(
    run_id: &str,
    assistant_message: ChatMessage,
    calls: Vec<BatchCallInput>,
    now_ms: u64,
) -> BatchPlan {
    if !calls.iter().any(|c| matches!(c.disposition, CallDisposition::Confirm(_))) {
        let steps = calls
            .into_iter()
            .map(|c| match c.disposition {
                CallDisposition::Answer(result) => BatchStep::Answer(AnsweredCall { call: c.call, result }),
                _ => BatchStep::Execute(c.call),
            })
            .collect();
        return BatchPlan::Run(steps);
    }
    let mut items = Vec::new();
    let mut batch_calls = Vec::with_capacity(calls.len());
    for input in calls {
        let plan = plan_of(&input.call, input.risk_level, input.disposition, &mut items, now_ms);
        batch_calls.push(BatchCall { call: input.call, plan });
    }
    BatchPlan::Freeze(PendingApprovalBatch {
        batch_id: uuid::Uuid::new_v4().to_string(),
        run_id: run_id.to_string(),
        items,
        assistant_message,
        created_at_ms: now_ms,
        calls: batch_calls,
        worker_session: None,
        item_workers: BTreeMap::new(),
        injected: Vec::new(),
        stop_requested: false,
        dismissed: None,
        denied_above: false,
        approved_calls: None,
    })
}

/// The plan of `call` for its disposition; a confirmation adds its new pending item (created at
/// `now_ms`) to `items`.
fn plan_of(
    call: &ToolCall,
    risk_level: RiskLevel,
    disposition: CallDisposition,
    items: &mut Vec<PendingApprovalItem>,
    now_ms: u64,
) -> BatchCallPlan {
    match disposition {
        CallDisposition::Run => BatchCallPlan::Run,
        CallDisposition::Answer(result) => BatchCallPlan::Answer { result },
        CallDisposition::Confirm(reason) => {
            let item = PendingApprovalItem::pending(call.clone(), risk_level, reason, now_ms);
            let approval_id = item.approval_id.clone();
            items.push(item);
            BatchCallPlan::Confirm { approval_id }
        }
    }
}

impl PendingApprovalItem {
    /// A new pending item for `call` (a fresh uuid v4 id, created at `now_ms`).
    fn pending(call: ToolCall, risk_level: RiskLevel, reason: String, now_ms: u64) -> Self {
        PendingApprovalItem {
            approval_id: uuid::Uuid::new_v4().to_string(),
            arguments_hash: arguments_hash(&call.arguments),
            tool_call: call,
            risk_level,
            reason,
            created_at_ms: now_ms,
            decision: ApprovalDecision::Pending,
            deny_reason: None,
            decided_at_ms: None,
        }
    }

    /// True once approved or denied.
    pub fn is_decided(&self) -> bool {
        self.decision != ApprovalDecision::Pending
    }

    /// The journal event recording this item's decision (`None` while pending).
    pub fn decided_event(&self) -> Option<StateEvent> {
        if !self.is_decided() {
            return None;
        }
        Some(StateEvent::ApprovalDecided {
            approval_id: self.approval_id.clone(),
            decision: self.decision,
            deny_reason: self.deny_reason.clone(),
            decided_at_ms: self.decided_at_ms.unwrap_or(0),
        })
    }
}

impl PendingApprovalBatch {
    /// The item with this approval id.
    pub fn item(&self, approval_id: &str) -> Option<&PendingApprovalItem> {
        self.items.iter().find(|i| i.approval_id == approval_id)
    }

    /// The worker session whose frozen batch holds the item `approval_id` of a mirror: the one
    /// [`item_workers`](Self::item_workers) names, else [`worker_session`](Self::worker_session)
    /// (`None` for a batch of this session's own calls).
    pub fn item_worker(&self, approval_id: &str) -> Option<&str> {
        self.item_workers.get(approval_id).or(self.worker_session.as_ref()).map(String::as_str)
    }

    /// Adds to this mirror the items of `beside`, the mirror of a worker frozen beside this one's
    /// in the same batch (parallel delegations): offered with these, each decided in its worker.
    pub fn add_beside(&mut self, beside: PendingApprovalBatch) {
        let Some(worker) = beside.worker_session else { return };
        for item in beside.items {
            self.item_workers.insert(item.approval_id.clone(), worker.clone());
            self.items.push(item);
        }
    }

    /// The items still waiting for a decision, in call order.
    pub fn pending_items(&self) -> impl Iterator<Item = &PendingApprovalItem> {
        self.items.iter().filter(|i| !i.is_decided())
    }

    /// True when the user denied an item (then none of the batch runs).
    pub fn has_denial(&self) -> bool {
        self.items.iter().any(|i| i.decision == ApprovalDecision::Denied)
    }

    /// True when none of the batch runs once settled: the user denied an item here, or in the
    /// parent's batch it was dismissed with ([`denied_above`](Self::denied_above)).
    pub fn runs_nothing(&self) -> bool {
        self.has_denial() || self.denied_above
    }

    /// True when no item is pending (a batch without items is fully decided).
    pub fn is_fully_decided(&self) -> bool {
        self.items.iter().all(PendingApprovalItem::is_decided)
    }

    /// Approves one item at `now_ms`.
    ///
    /// # Errors
    /// `approval_not_found` for an id the batch does not hold, `approval_already_decided` for an
    /// item already approved or denied (the item is left as it was).
    pub fn approve(&mut self, approval_id: &str, now_ms: u64) -> Result<&PendingApprovalItem, AgentError> {
        self.decide(approval_id, UserDecision::Approve, now_ms)
    }

    /// Denies one item at `now_ms` with the user's reason.
    ///
    /// # Errors
    /// As [`approve`](Self::approve).
    pub fn deny(
        &mut self,
        approval_id: &str,
        reason: impl Into<String>,
        now_ms: u64,
    ) -> Result<&PendingApprovalItem, AgentError> {
        self.decide(approval_id, UserDecision::Deny(reason.into()), now_ms)
    }

    /// Applies one decision at `now_ms`.
    ///
    /// # Errors
    /// As [`approve`](Self::approve).
    pub fn decide(
        &mut self,
        approval_id: &str,
        decision: UserDecision,
        now_ms: u64,
    ) -> Result<&PendingApprovalItem, AgentError> {
        let index = self.index_of(approval_id)?;
        self.apply_at(index, decision, now_ms)
    }

    /// Applies one decision only if the item is still bound to `call_id` and `arguments_hash`
    /// (what the app showed the user). Use this when a decision comes from a dialog that could be
    /// stale.
    ///
    /// # Errors
    /// `approval_not_found`; `approval_mismatch` when the call id or the hash differs (nothing
    /// changes); `approval_already_decided`.
    pub fn decide_bound(
        &mut self,
        approval_id: &str,
        call_id: &str,
        arguments_hash: &str,
        decision: UserDecision,
        now_ms: u64,
    ) -> Result<&PendingApprovalItem, AgentError> {
        let index = self.index_of(approval_id)?;
        let item = &self.items[index];
        if item.tool_call.id != call_id || item.arguments_hash != arguments_hash {
            return Err(AgentError::of(
                codes::APPROVAL_MISMATCH,
                format!(
                    "approval {approval_id} is bound to call {} with arguments {}, not call {call_id} with arguments {arguments_hash}",
                    item.tool_call.id, item.arguments_hash
                ),
            ));
        }
        self.apply_at(index, decision, now_ms)
    }

    /// Turns a fully decided batch into its outcome (see the module rules). Pure: the batch is not
    /// changed, so settling twice gives the same answer.
    ///
    /// Batches persisted without `calls` (older data) fall back to the assistant message's calls:
    /// a call with an item waits for it, every other call runs.
    ///
    /// # Errors
    /// `approval_pending` while an item is undecided; `approval_mismatch` when an item's call no
    /// longer matches its argument hash (tampered state), or the batch's calls and items disagree.
    pub fn settle(&self) -> Result<BatchSettlement, AgentError> {
        self.settle_with(not_run_result)
    }

    /// [`settle`](Self::settle) of a batch some of whose calls started before it was frozen
    /// again (a process died while it ran, and a resume asked about a call again): with a denial,
    /// the calls not run are told the rest of the batch did not run, never that none of it ran,
    /// as the calls that started may have taken effect (their answers say so).
    ///
    /// # Errors
    /// As [`settle`](Self::settle).
    pub fn settle_part_run(&self) -> Result<BatchSettlement, AgentError> {
        self.settle_with(rest_not_run_result)
    }

    fn settle_with(&self, not_run_result: fn() -> ToolResult) -> Result<BatchSettlement, AgentError> {
        if let Some(item) = self.pending_items().next() {
            let n = self.pending_items().count();
            return Err(AgentError::of(
                codes::APPROVAL_PENDING,
                format!("{n} approval(s) still pending, first {}", item.approval_id),
            ));
        }
        for item in &self.items {
            if arguments_hash(&item.tool_call.arguments) != item.arguments_hash {
                return Err(mismatch(&item.approval_id, "its call's arguments no longer match the hash"));
            }
        }
        let calls = self.effective_calls()?;
        if !self.has_denial() {
            let steps = calls
                .into_iter()
                .map(|c| match c.plan {
                    BatchCallPlan::Answer { result } => {
                        BatchStep::Answer(AnsweredCall { call: c.call, result })
                    }
                    BatchCallPlan::Run | BatchCallPlan::Confirm { .. } => BatchStep::Execute(c.call),
                })
                .collect();
            return Ok(BatchSettlement::Run(steps));
        }
        let answers = calls
            .into_iter()
            .map(|c| {
                let result = match c.plan {
                    BatchCallPlan::Answer { result } => result,
                    BatchCallPlan::Run => not_run_result(),
                    BatchCallPlan::Confirm { approval_id } => match self.item(&approval_id) {
                        Some(item) if item.decision == ApprovalDecision::Denied => user_denied_result(item),
                        _ => not_run_result(),
                    },
                };
                AnsweredCall { call: c.call, result }
            })
            .collect();
        Ok(BatchSettlement::Denied(answers))
    }

    /// The calls planned `run` (in call order): those [`replan_runs`](Self::replan_runs) asks
    /// `recheck` about.
    ///
    /// # Errors
    /// `approval_mismatch` when the batch's calls and items disagree.
    pub fn planned_runs(&self) -> Result<Vec<ToolCall>, AgentError> {
        Ok(self
            .effective_calls()?
            .into_iter()
            .filter(|c| c.plan == BatchCallPlan::Run)
            .map(|c| c.call)
            .collect())
    }

    /// Plans again the calls planned `run` for which `recheck` gives a new input: the calls that
    /// will run when the batch settles, asked again before they do (the app may have registered
    /// their tool anew, dangerous now, or changed its policy since the batch was frozen, and nobody
    /// was asked about them). One that now needs confirmation waits for a new pending item
    /// (created at `now_ms`), one now answered (a policy denial) keeps that answer, one allowed
    /// still runs. The items already decided keep their decisions. `recheck` gives `None` for a
    /// call to leave as planned. Returns true when an item was added: the batch is then frozen
    /// again, with nothing run.
    ///
    /// A batch persisted without `calls` (older data) gets them (see [`settle`](Self::settle)).
    ///
    /// # Errors
    /// `approval_mismatch` when the batch's calls and items disagree (nothing changes).
    pub fn replan_runs(
        &mut self,
        mut recheck: impl FnMut(&ToolCall) -> Option<BatchCallInput>,
        now_ms: u64,
    ) -> Result<bool, AgentError> {
        let mut calls = self.effective_calls()?;
        let items_before = self.items.len();
        for c in &mut calls {
            if c.plan != BatchCallPlan::Run {
                continue;
            }
            let Some(input) = recheck(&c.call) else { continue };
            c.plan = plan_of(&c.call, input.risk_level, input.disposition, &mut self.items, now_ms);
        }
        let asked = self.items.len() > items_before;
        if asked {
            // Items in call order, as the planner makes them.
            self.items.sort_by_key(|i| calls.iter().position(|c| c.call.id == i.tool_call.id));
        }
        self.calls = calls;
        Ok(asked)
    }

    /// The steps of the parent's batch a mirror batch (one with a `worker_session`) kept, in call
    /// order: `answer` plans keep their result, every other call is to run. The worker's items
    /// decide nothing here: the worker settles them in its own session when the delegating call
    /// runs again.
    pub fn mirrored_steps(&self) -> Vec<BatchStep> {
        self.calls
            .iter()
            .map(|c| match &c.plan {
                BatchCallPlan::Answer { result } => {
                    BatchStep::Answer(AnsweredCall { call: c.call.clone(), result: result.clone() })
                }
                BatchCallPlan::Run | BatchCallPlan::Confirm { .. } => BatchStep::Execute(c.call.clone()),
            })
            .collect()
    }

    /// The calls with their plans: the stored ones (checked against the items), or the fallback.
    fn effective_calls(&self) -> Result<Vec<BatchCall>, AgentError> {
        let calls = if self.calls.is_empty() {
            self.assistant_message
                .tool_calls()
                .iter()
                .map(|call| match self.items.iter().find(|i| i.tool_call.id == call.id) {
                    Some(item) => BatchCall {
                        call: item.tool_call.clone(),
                        plan: BatchCallPlan::Confirm { approval_id: item.approval_id.clone() },
                    },
                    None => BatchCall { call: call.clone(), plan: BatchCallPlan::Run },
                })
                .collect()
        } else {
            self.calls.clone()
        };
        let mut confirmed = 0;
        for c in &calls {
            if let BatchCallPlan::Confirm { approval_id } = &c.plan {
                match self.item(approval_id) {
                    Some(item) if item.tool_call == c.call => confirmed += 1,
                    Some(_) => return Err(mismatch(approval_id, "its call differs from the batch's call")),
                    None => return Err(mismatch(approval_id, "the batch has no such item")),
                }
            }
        }
        if confirmed != self.items.len() {
            return Err(AgentError::of(
                codes::APPROVAL_MISMATCH,
                format!(
                    "batch {} has {} items but {confirmed} calls waiting for one",
                    self.batch_id,
                    self.items.len()
                ),
            ));
        }
        Ok(calls)
    }

    fn index_of(&self, approval_id: &str) -> Result<usize, AgentError> {
        self.items.iter().position(|i| i.approval_id == approval_id).ok_or_else(|| {
            AgentError::of(
                codes::APPROVAL_NOT_FOUND,
                format!("batch {} has no approval {approval_id}", self.batch_id),
            )
        })
    }

    fn apply_at(
        &mut self,
        index: usize,
        decision: UserDecision,
        now_ms: u64,
    ) -> Result<&PendingApprovalItem, AgentError> {
        let item = &mut self.items[index];
        if item.is_decided() {
            return Err(AgentError::of(
                codes::APPROVAL_ALREADY_DECIDED,
                format!("approval {} was already {}", item.approval_id, decision_name(item.decision)),
            ));
        }
        item.decision = decision.outcome();
        if let UserDecision::Deny(reason) = decision {
            item.deny_reason = Some(reason);
        }
        item.decided_at_ms = Some(now_ms);
        Ok(item)
    }
}

fn decision_name(decision: ApprovalDecision) -> &'static str {
    match decision {
        ApprovalDecision::Pending => "pending",
        ApprovalDecision::Approved => "approved",
        ApprovalDecision::Denied => "denied",
    }
}

fn mismatch(approval_id: &str, why: &str) -> AgentError {
    AgentError::of(codes::APPROVAL_MISMATCH, format!("approval {approval_id}: {why}"))
}

/// An `is_error` result with exactly `text`, and `code` / `layer` in its metadata (the shape
/// [`ToolResult::from_error`] gives).
fn coded_error_result(code: &'static str, text: String) -> ToolResult {
    let error = AgentError::of(code, text);
    let mut result = ToolResult::error_text(error.message);
    let mut meta = Map::new();
    meta.insert("code".into(), Value::String(code.to_string()));
    meta.insert("layer".into(), Value::String(error.layer.as_str().to_string()));
    result.metadata = Some(meta);
    result
}

/// `denied by user: <reason>` (just `denied by user` for an empty reason), code `tool_denied`,
/// with the approval id in the metadata.
fn user_denied_result(item: &PendingApprovalItem) -> ToolResult {
    let reason = item.deny_reason.as_deref().unwrap_or("").trim();
    let text =
        if reason.is_empty() { "denied by user".to_string() } else { format!("denied by user: {reason}") };
    let mut result = coded_error_result(codes::TOOL_DENIED, text);
    if let Some(meta) = result.metadata.as_mut() {
        meta.insert("approval_id".into(), Value::String(item.approval_id.clone()));
    }
    result
}

fn not_run_result() -> ToolResult {
    coded_error_result(
        codes::TOOL_NOT_RUN,
        "not run: another call of the same batch was denied by the user, so none of the batch ran"
            .to_string(),
    )
}

/// [`not_run_result`] of a batch some of whose calls started before the denial.
fn rest_not_run_result() -> ToolResult {
    coded_error_result(
        codes::TOOL_NOT_RUN,
        "not run: another call of the same batch was denied by the user, so the rest of the batch \
         did not run (a call of it had started before: see its result)"
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferred_never_revives_an_answered_call() {
        let answered = CallDisposition::from_policy(PolicyDecision::Deny("no".into()));
        assert!(matches!(answered.clone().deferred("ask"), CallDisposition::Answer(_)));
        assert_eq!(CallDisposition::Run.deferred("ask"), CallDisposition::Confirm("ask".into()));
        assert_eq!(
            CallDisposition::Confirm("policy".into()).deferred("hook"),
            CallDisposition::Confirm("hook".into())
        );
    }

    #[test]
    fn policy_denial_text_and_code() {
        let CallDisposition::Answer(r) =
            CallDisposition::from_policy(PolicyDecision::Deny("off hours".into()))
        else {
            panic!("expected an answer");
        };
        assert!(r.is_error);
        assert_eq!(r.to_model_text(), "denied by policy: off hours");
        assert_eq!(r.metadata.unwrap()["code"], codes::TOOL_DENIED);
    }
}
