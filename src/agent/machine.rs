//! The run as a serializable state machine. Where a run stands is derived from the persisted
//! [`AgentState`] alone, so a state loaded in another process continues exactly where it stopped:
//!
//! ```text
//!   user message ──> NeedsModel ──model answer──> (no calls) Answered ──> Completed
//!                       ^                 └──(calls)──> ToolBatch ──(some call needs approval)──> AwaitingApproval
//!                       │                                   │                                        │ every item decided
//!                       └──────── results recorded ─────────┴──────────── ApprovedBatch <─────────────┘
//! ```
//!
//! The driver ([`super::Agent`]) asks [`phase`] what to do next, performs the I/O, and records what
//! happened as [`StateEvent`](crate::state::StateEvent)s.

use crate::message::{ChatMessage, ToolCall};
use crate::state::AgentState;
use std::collections::HashSet;

/// What the run needs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// No run is active (idle or ended).
    Inactive,
    /// Ask the model (the history ends with a user, system or tool message).
    NeedsModel,
    /// The last assistant message's calls have no results yet and nothing is frozen.
    ToolBatch {
        /// The unanswered calls, in call order.
        calls: Vec<ToolCall>,
    },
    /// A frozen batch still has undecided items.
    AwaitingApproval,
    /// A frozen batch is fully decided: settle it.
    ApprovedBatch {
        /// The unanswered calls of the batch, in call order.
        calls: Vec<ToolCall>,
    },
    /// The last message is the model's answer without calls.
    Answered {
        /// Its text.
        text: Option<String>,
    },
}

/// The calls of the last assistant message that have no tool result after it.
pub fn unanswered_calls(messages: &[ChatMessage]) -> Vec<ToolCall> {
    let Some(pos) = messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { .. })) else {
        return Vec::new();
    };
    let answered: HashSet<&str> = messages[pos + 1..].iter().filter_map(|m| m.tool_call_id()).collect();
    messages[pos].tool_calls().iter().filter(|c| !answered.contains(c.id.as_str())).cloned().collect()
}

/// Where the run stands.
pub fn phase(state: &AgentState) -> Phase {
    if !state.status.is_part_way() {
        return Phase::Inactive;
    }
    if let Some(batch) = &state.pending_approval {
        if !batch.is_fully_decided() {
            return Phase::AwaitingApproval;
        }
        let calls = unanswered_calls(&state.messages);
        if !calls.is_empty() {
            return Phase::ApprovedBatch { calls };
        }
    }
    match state.messages.last() {
        None => Phase::Inactive,
        Some(ChatMessage::Assistant { content, tool_calls, .. }) if tool_calls.is_empty() => {
            Phase::Answered { text: content.clone() }
        }
        Some(ChatMessage::Assistant { .. }) | Some(ChatMessage::Tool { .. }) => {
            let calls = unanswered_calls(&state.messages);
            if calls.is_empty() {
                Phase::NeedsModel
            } else {
                Phase::ToolBatch { calls }
            }
        }
        Some(ChatMessage::User { .. }) | Some(ChatMessage::System { .. }) => Phase::NeedsModel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateEvent;

    fn running(messages: Vec<ChatMessage>) -> AgentState {
        let mut s = AgentState::new("s");
        s.apply(&StateEvent::RunStarted { run_id: "r".into(), delegation: None });
        s.messages = messages;
        s
    }

    fn tool_msg(id: &str) -> ChatMessage {
        ChatMessage::Tool { tool_call_id: id.into(), name: "t".into(), content: "ok".into(), is_error: false }
    }

    fn calls(ids: &[&str]) -> ChatMessage {
        ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: ids.iter().map(|id| ToolCall::new(*id, "t", "{}")).collect(),
        }
    }

    #[test]
    fn phases_follow_the_history() {
        assert_eq!(phase(&AgentState::new("s")), Phase::Inactive);
        assert_eq!(phase(&running(vec![ChatMessage::user("hi")])), Phase::NeedsModel);
        let s = running(vec![ChatMessage::user("hi"), calls(&["a", "b"]), tool_msg("a")]);
        match phase(&s) {
            Phase::ToolBatch { calls } => assert_eq!(calls.len(), 1),
            p => panic!("{p:?}"),
        }
        let s = running(vec![ChatMessage::user("hi"), calls(&["a"]), tool_msg("a")]);
        assert_eq!(phase(&s), Phase::NeedsModel);
        let s = running(vec![ChatMessage::user("hi"), ChatMessage::assistant_text("done")]);
        assert_eq!(phase(&s), Phase::Answered { text: Some("done".into()) });
    }

    #[test]
    fn injected_messages_after_results_ask_the_model_again() {
        let s =
            running(vec![ChatMessage::user("hi"), calls(&["a"]), tool_msg("a"), ChatMessage::user("note")]);
        assert_eq!(phase(&s), Phase::NeedsModel);
    }
}
