//! The order-assistant history the state benches build their sessions from (included by
//! `#[path]`): one shape of conversation, so the benches measure the same bytes.

use arkagent::state::AgentState;
use arkagent::{ChatMessage, ToolCall};

/// A session `id` of `n` messages after a system prompt: the user asks, the assistant calls
/// `query_order` (with `reasoning` as its reasoning text, if any), the tool answers, the assistant
/// replies; again until `n`.
pub fn order_history(id: &str, n: usize, reasoning: Option<&str>) -> AgentState {
    let mut s = AgentState::new(id);
    s.messages.push(ChatMessage::system("You are the order assistant. Answer briefly."));
    let mut i = 0;
    while s.messages.len() < n {
        let m = match i % 4 {
            0 => ChatMessage::user(format!("Where is order {i}? And is SKU A-{i} in stock?")),
            1 => ChatMessage::Assistant {
                content: None,
                reasoning_content: reasoning.map(str::to_string),
                tool_calls: vec![ToolCall::new(
                    format!("call_{i}"),
                    "query_order",
                    format!("{{\"orderId\":{i}}}"),
                )],
            },
            2 => ChatMessage::Tool {
                tool_call_id: format!("call_{}", i - 1),
                name: "query_order".into(),
                content: format!("{{\"orderId\":{},\"status\":\"shipped\",\"eta\":\"2026-12-01\"}}", i - 1),
                is_error: false,
            },
            _ => {
                ChatMessage::assistant_text(format!("Order {} has shipped and arrives on 1 December.", i - 3))
            }
        };
        s.messages.push(m);
        i += 1;
    }
    s
}
