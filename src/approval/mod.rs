//! Approval: the policy that decides whether a call may run, and the pending batch that freezes a
//! whole tool batch until the user decides. The batch is plain serde data (no callbacks, executors
//! or secrets) and is persisted in the agent state, so a decision survives the app being killed.
//!
//! INTERFACE (foundation commit): types and trait are fixed here; behaviour comes with the
//! control-safety issue.

use crate::message::{ChatMessage, ToolCall};
use crate::tool::{RiskLevel, ToolDefinition};
use serde::{Deserialize, Serialize};

/// What a policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", content = "reason", rename_all = "snake_case")]
pub enum PolicyDecision {
    /// Run it.
    Allow,
    /// Do not run it; the model gets an is_error result with the reason.
    Deny(String),
    /// Freeze the batch until the user decides.
    RequireConfirmation(String),
}

/// Decides whether a call may run. `definition` is `None` for an unknown tool.
pub trait ApprovalPolicy: Send + Sync {
    /// The decision for one call.
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision;
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
}

// TEMP (agent branch): replaced by the control-safety work at merge.
/// The default policy.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultApprovalPolicy;

impl ApprovalPolicy for DefaultApprovalPolicy {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        match definition.map(|d| d.risk_level) {
            None | Some(RiskLevel::Safe) => PolicyDecision::Allow,
            Some(RiskLevel::Sensitive) => PolicyDecision::RequireConfirmation(format!(
                "Sensitive tool \"{}\" requires confirmation",
                call.name
            )),
            Some(RiskLevel::Dangerous) => PolicyDecision::RequireConfirmation(format!(
                "Dangerous tool \"{}\" requires confirmation",
                call.name
            )),
        }
    }
}

/// TEMP: hash of the canonical arguments.
pub fn arguments_hash(arguments: &str) -> String {
    let canonical = serde_json::from_str::<serde_json::Value>(arguments)
        .map(|v| crate::json::canonicalize(&v))
        .unwrap_or_else(|_| arguments.to_string());
    format!("{:08x}", crc32fast::hash(canonical.as_bytes()))
}
