//! History trimming never separates an assistant message from its tool results, keeps the system
//! messages the history opens with and the last user message, fits the budget whenever those and the newest group do, and
//! leaves a history that opens (after its system messages) with a user message.

use arkagent::state::{approx_tokens, check_pairing, trim_history};
use arkagent::{ChatMessage, ToolCall};
use proptest::prelude::*;

fn history(shape: &[(u8, u8)]) -> Vec<ChatMessage> {
    let mut h = Vec::new();
    for (i, (kind, n)) in shape.iter().enumerate() {
        match kind % 4 {
            0 => h.push(ChatMessage::system(format!("sys {i}"))),
            1 => h.push(ChatMessage::user("u".repeat(*n as usize * 10))),
            2 => h.push(ChatMessage::assistant_text("a".repeat(*n as usize * 7))),
            _ => {
                let calls: Vec<ToolCall> =
                    (0..=*n % 3).map(|c| ToolCall::new(format!("c{i}-{c}"), "t", "{\"q\":1}")).collect();
                let results: Vec<ChatMessage> = calls
                    .iter()
                    .map(|c| ChatMessage::Tool {
                        tool_call_id: c.id.clone(),
                        name: "t".into(),
                        content: "r".repeat(*n as usize * 5),
                        is_error: false,
                    })
                    .collect();
                h.push(ChatMessage::Assistant { content: None, reasoning_content: None, tool_calls: calls });
                h.extend(results);
            }
        }
    }
    h
}

proptest! {
    #[test]
    fn trimming_keeps_pairs_and_system_messages(
        shape in prop::collection::vec((0u8..4, 0u8..20), 0..30),
        budget in 0usize..400,
    ) {
        let h = history(&shape);
        prop_assert!(check_pairing(&h, &[]).is_ok());
        let t = trim_history(&h, budget, approx_tokens);
        prop_assert!(check_pairing(&t.messages, &[]).is_ok(), "{:?}", check_pairing(&t.messages, &[]));
        let leading = |m: &[ChatMessage]| m.iter().take_while(|m| matches!(m, ChatMessage::System { .. })).count();
        // The system messages the history opens with are kept, and open what is kept.
        let lead = leading(&h);
        prop_assert_eq!(&t.messages[..lead], &h[..lead]);
        prop_assert_eq!(t.messages.len() + t.dropped, h.len());
        prop_assert_eq!(t.cost, t.messages.iter().map(approx_tokens).sum::<usize>());
        // The last user message (the question of the current turn) is always kept.
        let last_user = |m: &[ChatMessage]| m.iter().rev().find(|m| matches!(m, ChatMessage::User { .. })).cloned();
        prop_assert_eq!(last_user(&t.messages), last_user(&h));
        // Once something was dropped, no answer or tool round is left before the first question.
        if t.dropped > 0 && last_user(&h).is_some() {
            let first = t.messages.get(lead);
            prop_assert!(matches!(first, Some(ChatMessage::User { .. })), "{:?}", t.messages);
        }
        // What is kept of the rest is a suffix of it (oldest dropped first).
        let rest = |m: &[ChatMessage]| -> Vec<ChatMessage> {
            let q = m.iter().rposition(|m| matches!(m, ChatMessage::User { .. }));
            m.iter()
                .enumerate()
                .skip(lead)
                .filter(|(i, _)| Some(*i) != q)
                .map(|(_, m)| m.clone())
                .collect()
        };
        let (all, kept) = (rest(&h), rest(&t.messages));
        prop_assert_eq!(&all[all.len() - kept.len()..], &kept[..]);
        if t.over_budget {
            // Only the leading system messages, the question and the newest group remain.
            prop_assert!(t.cost > budget);
            let groups = kept.iter().filter(|m| !matches!(m, ChatMessage::Tool { .. })).count();
            prop_assert!(groups <= 1, "{groups} groups kept over budget");
        } else {
            prop_assert!(t.cost <= budget);
        }
    }
}
