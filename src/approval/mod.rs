//! Approval: the policy that decides whether a call may run, and the pending batch that freezes a
//! whole tool batch until the user decides. The batch is plain serde data (no callbacks, executors
//! or secrets) and is persisted in the agent state, so a decision survives the app being killed.
//!
//! - [`DefaultApprovalPolicy`] and [`arguments_hash`] live in `policy`.
//! - [`parse_policy_answer`] (in `answer`) reads the text answer of an app policy outside Rust
//!   (the binding's `setApprovalPolicy`) strictly, so the caller can fail closed on anything else.
//! - The batch planner ([`plan_batch`]), one-at-a-time decisions and the settlement of a frozen
//!   batch live in `batch`, whose module docs state the whole-batch rules.

mod answer;
mod batch;
mod policy;
pub(crate) use policy::{push_hex, sha256_text};

pub use answer::parse_policy_answer;

pub use batch::{
    plan_batch, AnsweredCall, BatchCall, BatchCallInput, BatchCallPlan, BatchPlan, BatchSettlement,
    BatchStep, CallDisposition, UserDecision,
};
pub use policy::{arguments_hash, DefaultApprovalPolicy};

use crate::message::{ChatMessage, ToolCall};
use crate::tool::{CancellationSignal, RiskLevel, ToolDefinition};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", content = "reason", rename_all = "snake_case")]
pub enum PolicyDecision {
    /// Run it.
    Allow,
    /// Do not run it; the model gets an is_error result with the reason (cut to the agent's
    /// `max_result_bytes` as an error result is).
    Deny(String),
    /// Freeze the batch until the user decides.
    RequireConfirmation(String),
}

/// Decides whether a call may run. `definition` is `None` for an unknown tool.
///
/// The runtime awaits [`decide_async`](Self::decide_async), whose default answers at once with
/// [`decide_cancellable`](Self::decide_cancellable): a policy that decides synchronously
/// implements only [`decide`](Self::decide) (and `decide_cancellable` if it may wait). A policy
/// whose answer comes from elsewhere (an app's, from its UI thread) implements `decide_async` and
/// awaits it there, so a waiting run holds no thread.
#[async_trait]
pub trait ApprovalPolicy: Send + Sync {
    /// The decision for one call.
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision;

    /// The decision for one call of a run that `cancel` may end meanwhile, given synchronously
    /// (the default [`decide_async`](Self::decide_async), which the runtime awaits, answers with
    /// it). A policy that waits for its answer should stop waiting once `cancel` fires: whatever
    /// it answers then, the run ends `cancelled` and nothing of the batch runs or freezes. By
    /// default [`decide`](Self::decide).
    fn decide_cancellable(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        _cancel: &CancellationSignal,
    ) -> PolicyDecision {
        self.decide(call, definition)
    }

    /// The decision for one call of a run that `cancel` may end meanwhile, awaited: the runtime
    /// asks this one. A policy that waits should stop once `cancel` fires (as for
    /// [`decide_cancellable`](Self::decide_cancellable)). By default `decide_cancellable`, at once.
    async fn decide_async(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> PolicyDecision {
        self.decide_cancellable(call, definition, cancel)
    }
}

/// The user's decision on one pending item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Not decided yet.
    Pending,
    /// Approved.
    Approved,
    /// Denied.
    Denied,
}

/// One call waiting for the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApprovalItem {
    /// The id the app decides by.
    pub approval_id: String,
    /// The call (its id binds the decision to it).
    pub tool_call: ToolCall,
    /// Hash of the canonical (JCS) arguments: a decision never applies to other arguments.
    pub arguments_hash: String,
    /// The tool's risk level.
    pub risk_level: RiskLevel,
    /// Why confirmation is asked.
    pub reason: String,
    /// When the item was created (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// The decision so far.
    pub decision: ApprovalDecision,
    /// The user's reason for a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_reason: Option<String>,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at_ms: Option<u64>,
}

/// A frozen batch: every call of one assistant message, none run until every item is decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApprovalBatch {
    /// The batch id.
    pub batch_id: String,
    /// The run that produced it.
    pub run_id: String,
    /// The calls that need a decision.
    pub items: Vec<PendingApprovalItem>,
    /// The assistant message with all the batch's calls (used to continue on resume).
    pub assistant_message: ChatMessage,
    /// When the batch was frozen (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// Every call of the batch in call order (as the before-hooks left it) with its plan, so a
    /// resumed process settles the batch without running hooks or the policy again. Empty in
    /// batches persisted before this field existed; [`settle`](PendingApprovalBatch::settle) then
    /// falls back to the assistant message's calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<BatchCall>,
    /// Set when the items are a sub-agent's calls: the session of the worker whose frozen batch
    /// this mirrors. A decision goes to the worker's batch first, then to this one; on resume the
    /// delegating call (which stays `started`) runs again and continues the worker.
    /// `assistant_message` is the delegating (parent's) answer, and `calls` the parent's batch as
    /// it was running when the worker froze: each call `run` (it was allowed, or its batch
    /// approved) or `answer` (answered before or while the batch ran), never `confirm`. The
    /// parent's batch then continues from it without asking its hooks, its policy or the user
    /// again. Empty in mirrors persisted before this was kept (the calls are then planned anew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_session: Option<String>,
    /// A mirror's (see `worker_session`): the items of the workers frozen beside that one in
    /// the same batch (parallel delegations), by approval id, with the worker session each comes
    /// from. They are offered in `items` after the mirrored worker's, so the user decides every
    /// frozen worker's calls at once; a decision on one goes to its own worker's batch first
    /// ([`item_worker`](Self::item_worker)). Empty when one worker froze (and in batches persisted
    /// before this was kept: the others' items then come with the parent's next resume).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub item_workers: BTreeMap<String, String>,
    /// A mirror's (see `worker_session`) messages that the parent's after-hooks injected for the
    /// calls that finished before the worker froze: appended after the batch's results once it
    /// completes, as they would have been without the freeze.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected: Vec<ChatMessage>,
    /// A mirror's: an after-hook of a call that finished before the worker froze asked to stop
    /// after this batch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_requested: bool,
    /// A mirror's (see `worker_session`): the ids of the parent's calls the user approved (items
    /// of the parent's batch), which run as planned when the batch continues. The parent's other
    /// calls still to run were allowed without asking: they are asked about again first (their
    /// tool may have been registered anew, dangerous now) and, needing a confirmation now, are
    /// not run. `None` in mirrors persisted before this was kept: then none is asked about again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_calls: Option<Vec<String>>,
    /// The reason of a dismissal (`Agent::dismiss`) begun on this batch, saved before any
    /// of it runs, so a run resumed after a kill settles it as that dismissal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dismissed: Option<String>,
    /// A worker's batch dismissed with its parent's (see `dismissed`) that the user did not
    /// approve entirely (an item there was denied, of this worker or of one frozen beside it):
    /// none of this batch runs, though every item here was approved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied_above: bool,
}
