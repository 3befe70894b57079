//! History trimming for the context window: drop the oldest messages until the history fits a
//! budget, never separating an assistant message from its tool results, and never dropping the
//! system messages the history opens with (the app's prompt) or the last user message (the
//! question the current turn is answering: in a long tool loop the oldest messages are the turn's
//! own, and without its question the model loses the task). A system message later in the history
//! (a reminder an after-hook injected) is dropped, oldest first, as any other message: kept, one
//! injected per batch would grow every request without bound. A trimmed history opens, after its
//! system messages, with a user message: an answer whose question was dropped goes with it.

use crate::message::ChatMessage;

/// A history cut to a budget.
#[derive(Debug, Clone, PartialEq)]
pub struct TrimmedHistory {
    /// The kept messages, in their original order.
    pub messages: Vec<ChatMessage>,
    /// How many messages were dropped.
    pub dropped: usize,
    /// The cost of the kept messages.
    pub cost: usize,
    /// True when even the leading system messages, the last user message and the newest group exceed the
    /// budget (they are kept anyway: a request needs its question and its newest round).
    pub over_budget: bool,
}

/// A rough token count for a message: about four bytes a token, plus a few tokens of framing.
pub fn approx_tokens(message: &ChatMessage) -> usize {
    let bytes = match message {
        ChatMessage::System { content } | ChatMessage::User { content } => content.len(),
        ChatMessage::Assistant { content, reasoning_content, tool_calls } => {
            content.as_deref().map_or(0, str::len)
                + reasoning_content.as_deref().map_or(0, str::len)
                + tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len() + 8).sum::<usize>()
        }
        ChatMessage::Tool { tool_call_id, name, content, .. } => {
            tool_call_id.len() + name.len() + content.len()
        }
    };
    bytes.div_ceil(4) + 4
}

/// Drops the oldest messages of `messages` until the total `cost` fits `budget`.
///
/// Messages are dropped oldest first, by groups: an assistant message together with the tool
/// messages right after it, or one other message. The system messages the history opens with and
/// the last user message are never dropped (a later system message is a group of its own), and the newest group is always kept (see [`TrimmedHistory::over_budget`]). When
/// anything was dropped, the groups then left before the first kept user message are dropped too,
/// so that the history sent opens with a question, not an answer to one it no longer shows. Pure;
/// pass [`approx_tokens`] as `cost` when no tokenizer is at hand. [`trim_history_keeping`] keeps
/// the current run's question as well.
pub fn trim_history<F: Fn(&ChatMessage) -> usize>(
    messages: &[ChatMessage],
    budget: usize,
    cost: F,
) -> TrimmedHistory {
    trim_history_keeping(messages, budget, cost, None)
}

/// [`trim_history`], also keeping the user message whose ordinal among the history's user
/// messages is `question` (the runtime passes [`AgentState::turn_question`]: the input of the
/// current run, which after-hooks' injected reminders, user messages too, follow).
///
/// [`AgentState::turn_question`]: crate::state::AgentState::turn_question
pub fn trim_history_keeping<F: Fn(&ChatMessage) -> usize>(
    messages: &[ChatMessage],
    budget: usize,
    cost: F,
    question: Option<usize>,
) -> TrimmedHistory {
    let costs: Vec<usize> = messages.iter().map(&cost).collect();
    let is_user = |m: &ChatMessage| matches!(m, ChatMessage::User { .. });
    let last_user = messages.iter().rposition(is_user);
    let turn_question =
        question.and_then(|n| messages.iter().enumerate().filter(|(_, m)| is_user(m)).nth(n).map(|(i, _)| i));
    let pinned = |i: usize| Some(i) == last_user || Some(i) == turn_question;
    // Group boundaries: [start, end) of each group, oldest first; the system messages the history
    // opens with are no group (a later one is: an injected reminder).
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            ChatMessage::System { .. } if groups.is_empty() => i += 1,
            ChatMessage::Assistant { .. } => {
                let mut j = i + 1;
                while matches!(messages.get(j), Some(ChatMessage::Tool { .. })) {
                    j += 1;
                }
                groups.push((i, j));
                i = j;
            }
            _ => {
                groups.push((i, i + 1));
                i += 1;
            }
        }
    }
    let mut total: usize = costs.iter().sum();
    let mut keep = vec![true; messages.len()];
    let mut dropped = 0;
    let droppable = groups.len().saturating_sub(1);
    // The run's newest round (the newest group after its question that is no pinned message) stays
    // too: reminders injected after a batch must not push the batch's results out.
    let newest_round = turn_question
        .and_then(|q| {
            groups.iter().rposition(|&(s, _)| s > q && matches!(messages[s], ChatMessage::Assistant { .. }))
        })
        .map(|g| groups[g].0);
    for &(start, end) in &groups[..droppable] {
        if total <= budget {
            break;
        }
        if pinned(start) || Some(start) == newest_round {
            continue;
        }
        for k in start..end {
            keep[k] = false;
            total -= costs[k];
            dropped += 1;
        }
    }
    // What is left must open (after the system messages) with a question: strict providers refuse
    // a history that opens with an answer or a tool round (DeepSeek's reasoner: "the first message
    // (except the system message) must be a user message"), and the model would read an answer to
    // a question it cannot see. So once something was dropped, the groups left before the first
    // kept user message go too. Pinned messages are user messages and the newest round follows
    // the run's question, so none of them is reached; without any user message nothing more goes.
    if dropped > 0 && last_user.is_some() {
        for &(start, end) in &groups {
            if is_user(&messages[start]) && keep[start] {
                break;
            }
            for k in start..end {
                if std::mem::replace(&mut keep[k], false) {
                    total -= costs[k];
                    dropped += 1;
                }
            }
        }
    }
    let kept = messages.iter().zip(&keep).filter(|(_, k)| **k).map(|(m, _)| m.clone()).collect();
    TrimmedHistory { messages: kept, dropped, cost: total, over_budget: total > budget }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn call_group(id: &str) -> Vec<ChatMessage> {
        vec![
            ChatMessage::Assistant {
                content: None,
                reasoning_content: None,
                tool_calls: vec![ToolCall::new(id, "t", "{}")],
            },
            ChatMessage::Tool {
                tool_call_id: id.into(),
                name: "t".into(),
                content: "r".into(),
                is_error: false,
            },
        ]
    }

    #[test]
    fn a_system_message_after_the_opening_ones_is_dropped_as_any_other() {
        // The prompt stays; reminders injected after each batch go oldest first, so a long
        // session's requests do not grow by one reminder per batch.
        let mut h = vec![ChatMessage::system("prompt"), ChatMessage::user("u1")];
        h.extend(call_group("c1"));
        h.push(ChatMessage::system("reminder 1"));
        h.push(ChatMessage::user("u2"));
        h.extend(call_group("c2"));
        h.push(ChatMessage::system("reminder 2"));
        // 9 messages of cost 1, a budget of 4: oldest first go u1, c1 (2) and reminder 1 (5 left),
        // u2 is the question, then c2 (2): 3 left. Reminder 2 is the newest group.
        let t = trim_history(&h, 4, |_| 1);
        assert_eq!(
            t.messages,
            [ChatMessage::system("prompt"), ChatMessage::user("u2"), ChatMessage::system("reminder 2")]
        );
        assert_eq!(t.dropped, 6);
    }

    #[test]
    fn drops_groups_whole_and_keeps_system_messages() {
        let mut h = vec![ChatMessage::system("sys"), ChatMessage::user("u1")];
        h.extend(call_group("c1"));
        h.push(ChatMessage::user("u2"));
        h.extend(call_group("c2"));
        // Every message costs 1: 7 in all. A budget of 4 drops u1, the c1 group (2) -> 4 left.
        let t = trim_history(&h, 4, |_| 1);
        assert_eq!(t.dropped, 3);
        assert_eq!(t.cost, 4);
        assert!(!t.over_budget);
        assert_eq!(t.messages[0], ChatMessage::system("sys"));
        assert_eq!(t.messages[1], ChatMessage::user("u2"));
        assert_eq!(&t.messages[2..], &call_group("c2")[..]);
        // A budget of 3 cannot be met: u2 is the last user message (the question of the turn) and
        // c2 the newest group, so both stay and the result is over budget.
        let t = trim_history(&h, 3, |_| 1);
        assert_eq!(t.messages.len(), 4);
        assert_eq!(t.messages[1], ChatMessage::user("u2"));
        assert_eq!(&t.messages[2..], &call_group("c2")[..]);
        assert!(t.over_budget);
    }

    #[test]
    fn keeps_the_newest_group_even_over_budget() {
        let mut h = vec![ChatMessage::system("sys")];
        h.extend(call_group("c1"));
        let t = trim_history(&h, 0, |_| 1);
        assert_eq!(t.messages, h);
        assert!(t.over_budget);
        assert_eq!(t.dropped, 0);
    }

    #[test]
    fn keeps_the_question_of_a_long_tool_loop() {
        // One turn: the question, then many tool rounds. Trimming drops the oldest rounds, never
        // the question the model is working on.
        let mut h =
            vec![ChatMessage::system("sys"), ChatMessage::user("old"), ChatMessage::assistant_text("a")];
        h.push(ChatMessage::user("question"));
        for i in 0..5 {
            h.extend(call_group(&format!("c{i}")));
        }
        // 3 + 1 + 10 messages of cost 1; a budget of 6 keeps sys, the question and two rounds.
        let t = trim_history(&h, 6, |_| 1);
        assert_eq!(t.messages[0], ChatMessage::system("sys"));
        assert_eq!(t.messages[1], ChatMessage::user("question"));
        assert_eq!(&t.messages[2..4], &call_group("c3")[..]);
        assert_eq!(&t.messages[4..], &call_group("c4")[..]);
        assert_eq!((t.dropped, t.cost, t.over_budget), (8, 6, false));
        // Over budget, the question still stays with the newest round.
        let t = trim_history(&h, 0, |_| 1);
        assert_eq!(t.messages[1], ChatMessage::user("question"));
        assert_eq!(&t.messages[2..], &call_group("c4")[..]);
        assert!(t.over_budget);
    }

    #[test]
    fn a_new_turn_can_drop_a_huge_previous_answer() {
        // The question of the new turn is the newest group: the answer before it is droppable.
        let h = vec![
            ChatMessage::system("sys"),
            ChatMessage::user("u1"),
            ChatMessage::assistant_text("a".repeat(4000)),
            ChatMessage::user("u2"),
        ];
        let t = trim_history(&h, 100, approx_tokens);
        assert_eq!(t.messages, [ChatMessage::system("sys"), ChatMessage::user("u2")]);
        assert!(!t.over_budget);
    }

    #[test]
    fn the_turn_question_stays_when_reminders_follow_it() {
        // After-hooks inject reminders (user messages) after batches: the last user message is a
        // reminder, and the run's question (the second user message: ordinal 1) stays too.
        let mut h =
            vec![ChatMessage::system("sys"), ChatMessage::user("old"), ChatMessage::assistant_text("a")];
        h.push(ChatMessage::user("THE QUESTION"));
        h.extend(call_group("c1"));
        h.push(ChatMessage::user("reminder"));
        h.extend(call_group("c2"));
        h.extend(call_group("c3"));
        let t = trim_history_keeping(&h, 6, |_| 1, Some(1));
        assert_eq!(
            t.messages[..3],
            [ChatMessage::system("sys"), ChatMessage::user("THE QUESTION"), ChatMessage::user("reminder")]
        );
        assert_eq!(&t.messages[3..], &call_group("c3")[..]);
        assert!(!t.over_budget);
        // Without the ordinal only the last user message is known: the question goes first.
        let t = trim_history(&h, 6, |_| 1);
        assert!(!t.messages.contains(&ChatMessage::user("THE QUESTION")));
        // An ordinal past the history's user messages keeps nothing more.
        assert_eq!(trim_history_keeping(&h, 6, |_| 1, Some(9)), t);
    }

    #[test]
    fn the_newest_round_stays_when_a_reminder_follows_it() {
        let mut h = vec![ChatMessage::system("sys"), ChatMessage::user("Q")];
        h.extend(call_group("c1"));
        h.push(ChatMessage::user("reminder"));
        h.extend(call_group("c2"));
        h.push(ChatMessage::user("reminder"));
        // Budget 4 cannot hold sys, Q, c2 (2) and the last reminder: over budget, but the round
        // the model just asked for is never the one dropped.
        let t = trim_history_keeping(&h, 4, |_| 1, Some(0));
        let mut expected = vec![ChatMessage::system("sys"), ChatMessage::user("Q")];
        expected.extend(call_group("c2"));
        expected.push(ChatMessage::user("reminder"));
        assert_eq!(t.messages, expected);
        assert!(t.over_budget);
    }

    #[test]
    fn the_newest_round_stays_when_several_reminders_follow_it() {
        let mut h = vec![ChatMessage::system("sys"), ChatMessage::user("Q")];
        h.extend(call_group("c1"));
        h.push(ChatMessage::user("r1"));
        h.push(ChatMessage::user("r2"));
        let t = trim_history_keeping(&h, 3, |_| 1, Some(0));
        assert!(t.messages.contains(&call_group("c1")[1]), "{:?}", t.messages);
    }

    #[test]
    fn an_answer_whose_question_was_dropped_goes_with_it() {
        // The first question alone is over the budget: its answer must not open the history sent
        // with the second question (DeepSeek's reasoner answers 400 to that).
        let h = vec![
            ChatMessage::system("sys"),
            ChatMessage::user(format!("first question {}", "x".repeat(200))),
            ChatMessage::assistant_text("Answer one."),
            ChatMessage::user("second question"),
        ];
        let t = trim_history(&h, 40, approx_tokens);
        assert_eq!(t.messages, [ChatMessage::system("sys"), ChatMessage::user("second question")]);
        assert_eq!((t.dropped, t.cost, t.over_budget), (2, 13, false));
    }

    #[test]
    fn a_tool_round_left_at_the_head_goes_and_the_opening_system_message_stays() {
        let mut h = vec![ChatMessage::system("sys"), ChatMessage::user("u1")];
        h.extend(call_group("c1"));
        h.push(ChatMessage::system("reminder"));
        h.push(ChatMessage::assistant_text("a"));
        h.push(ChatMessage::user("u2"));
        h.extend(call_group("c2"));
        // 9 messages of cost 1; dropping u1 fits 8, but the c1 round, the reminder and the answer
        // after them would open what is left: they go too, the opening system message stays.
        let t = trim_history_keeping(&h, 8, |_| 1, Some(1));
        let mut expected = vec![ChatMessage::system("sys"), ChatMessage::user("u2")];
        expected.extend(call_group("c2"));
        assert_eq!(t.messages, expected);
        assert_eq!((t.dropped, t.cost, t.over_budget), (5, 4, false));
        // Over budget alike.
        assert_eq!(trim_history_keeping(&h, 0, |_| 1, Some(1)).messages, expected);
        // Without user messages there is no question to open with: only the budget drops.
        let mut h = vec![ChatMessage::system("sys"), ChatMessage::assistant_text("a")];
        h.extend(call_group("c1"));
        let t = trim_history(&h, 3, |_| 1);
        assert_eq!(t.messages, [&h[..1], &h[2..]].concat());
    }

    #[test]
    fn fits_untouched_when_under_budget() {
        let h = vec![ChatMessage::user("a"), ChatMessage::assistant_text("b")];
        let t = trim_history(&h, 1000, approx_tokens);
        assert_eq!(t.messages, h);
        assert_eq!(t.dropped, 0);
    }
}
