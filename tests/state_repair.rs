//! The pairing invariant on load and "no tool run twice": what `repair_pairing` answers for each
//! kind of orphan, and properties over random histories.

use arkagent::approval::{ApprovalDecision, PendingApprovalBatch, PendingApprovalItem};
use arkagent::state::{
    check_pairing, repair_pairing, tool_result_message, AgentState, RepairPolicy, RunStatus, ToolRunRecord,
};
use arkagent::{ChatMessage, RiskLevel, ToolCall, ToolResult};
use proptest::prelude::*;

fn assistant(calls: &[(&str, &str)]) -> ChatMessage {
    ChatMessage::Assistant {
        content: None,
        reasoning_content: None,
        tool_calls: calls.iter().map(|(id, name)| ToolCall::new(*id, *name, "{}")).collect(),
    }
}

fn result(id: &str, name: &str, text: &str) -> ChatMessage {
    ChatMessage::Tool { tool_call_id: id.into(), name: name.into(), content: text.into(), is_error: false }
}

fn content_of<'a>(state: &'a AgentState, id: &str) -> (&'a str, bool) {
    let found: Vec<_> = state.messages.iter().filter(|m| m.tool_call_id() == Some(id)).collect();
    assert_eq!(found.len(), 1, "exactly one result for {id}");
    match found[0] {
        ChatMessage::Tool { content, is_error, .. } => (content.as_str(), *is_error),
        _ => unreachable!(),
    }
}

/// A crash mid-batch: three calls; `a` finished, `b` started, `c` never started.
fn crashed_mid_batch() -> AgentState {
    let mut s = AgentState::new("s1");
    s.status = RunStatus::Running;
    s.messages.push(ChatMessage::user("go"));
    s.messages.push(assistant(&[("a", "pay"), ("b", "refresh"), ("c", "notify")]));
    s.tool_runs.insert(
        "a".into(),
        ToolRunRecord::Finished {
            name: "pay".into(),
            result: ToolResult::text("paid 10"),
            stop_requested: false,
            injected: Vec::new(),
        },
    );
    s.tool_runs.insert("b".into(), ToolRunRecord::Started { name: "refresh".into() });
    s
}

#[test]
fn finished_calls_get_their_recorded_result_and_unfinished_ones_are_interrupted() {
    let mut s = crashed_mid_batch();
    let report = repair_pairing(&mut s, &RepairPolicy::conservative());
    check_pairing(&s.messages, &[]).unwrap();
    assert_eq!(report.recorded, vec!["a"]);
    assert_eq!(report.interrupted, vec!["b"]);
    assert_eq!(report.not_started, vec!["c"]);
    assert!(report.rerun.is_empty());
    assert_eq!(content_of(&s, "a"), ("paid 10", false), "the recorded result, not a re-run");
    let (b, b_err) = content_of(&s, "b");
    assert!(
        b_err && b.starts_with("error [tool_interrupted]") && b.contains("may or may not have taken effect"),
        "{b}"
    );
    let (c, c_err) = content_of(&s, "c");
    assert!(c_err && c.starts_with("error [tool_interrupted]") && c.contains("did not run"), "{c}");
    // Appended at the end: the report's events make it durable and reproduce the repair.
    assert!(!report.needs_snapshot);
    let mut replay = crashed_mid_batch();
    for e in &report.events {
        replay.apply(e);
    }
    assert_eq!(replay, s);
}

#[test]
fn idempotent_started_calls_are_left_for_the_runtime_to_run_again() {
    let mut s = crashed_mid_batch();
    let policy = RepairPolicy::with_idempotent(|name| name == "refresh" || name == "pay");
    let report = repair_pairing(&mut s, &policy);
    assert_eq!(report.rerun.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), vec!["b"]);
    // A finished call is never run again, even when idempotent.
    assert_eq!(report.recorded, vec!["a"]);
    assert!(s.messages.iter().all(|m| m.tool_call_id() != Some("b")));
    check_pairing(&s.messages, &["b"]).unwrap();
    // The runtime runs it and appends the result: the invariant then holds fully.
    s.messages.push(tool_result_message(&report.rerun[0], &ToolResult::text("refreshed")));
    check_pairing(&s.messages, &[]).unwrap();
}

#[test]
fn never_started_calls_of_a_running_batch_can_be_resumed() {
    let mut s = crashed_mid_batch();
    let report = repair_pairing(&mut s, &RepairPolicy::conservative().resume_unstarted(true));
    assert_eq!(report.resume.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), vec!["c"]);
    assert_eq!(report.recorded, vec!["a"]);
    assert_eq!(report.interrupted, vec!["b"], "a started call is never resumed without idempotency");
    check_pairing(&s.messages, &["c"]).unwrap();
    // Only while running: a cancelled run's unstarted calls are orphans.
    let mut s = crashed_mid_batch();
    s.status = RunStatus::Cancelled;
    let report = repair_pairing(&mut s, &RepairPolicy::conservative().resume_unstarted(true));
    assert!(report.resume.is_empty());
    assert_eq!(report.not_started, vec!["c"]);
}

#[test]
fn an_idempotent_call_of_an_older_message_is_not_run_again() {
    let mut s = AgentState::new("s1");
    s.messages.push(assistant(&[("old", "refresh")]));
    s.messages.push(ChatMessage::user("later"));
    s.messages.push(ChatMessage::assistant_text("done"));
    s.tool_runs.insert("old".into(), ToolRunRecord::Started { name: "refresh".into() });
    let report = repair_pairing(&mut s, &RepairPolicy::with_idempotent(|_| true));
    assert!(report.rerun.is_empty());
    assert_eq!(report.interrupted, vec!["old"]);
    assert!(report.needs_snapshot, "inserted mid-history");
    assert!(report.events.is_empty());
    assert_eq!(s.messages[1].tool_call_id(), Some("old"), "the result sits right after its call");
    check_pairing(&s.messages, &[]).unwrap();
}

fn awaiting() -> AgentState {
    let mut s = AgentState::new("s1");
    let msg = assistant(&[("safe", "read"), ("risky", "clear")]);
    s.messages.push(ChatMessage::user("clear it"));
    s.messages.push(msg.clone());
    s.status = RunStatus::AwaitingApproval;
    s.pending_approval = Some(PendingApprovalBatch {
        batch_id: "b".into(),
        run_id: "r".into(),
        items: vec![PendingApprovalItem {
            approval_id: "ap".into(),
            tool_call: ToolCall::new("risky", "clear", "{}"),
            arguments_hash: "h".into(),
            risk_level: RiskLevel::Dangerous,
            reason: "dangerous".into(),
            created_at_ms: 1,
            decision: ApprovalDecision::Approved,
            deny_reason: None,
            decided_at_ms: Some(2),
        }],
        assistant_message: msg,
        created_at_ms: 1,
        calls: Vec::new(),
        worker_session: None,
        injected: Vec::new(),
        stop_requested: false,
        dismissed: None,
        denied_above: false,
        approved_calls: None,
        item_workers: Default::default(),
    });
    s
}

#[test]
fn a_batch_awaiting_approval_is_pending_unless_the_policy_says_otherwise() {
    let mut s = awaiting();
    let report = repair_pairing(&mut s, &RepairPolicy::conservative());
    assert_eq!(s, awaiting(), "nothing synthesised, the decision kept");
    assert_eq!(report.awaiting, vec!["safe", "risky"]);
    assert!(!report.changed());

    let mut s = awaiting();
    let report = repair_pairing(&mut s, &RepairPolicy::conservative().keep_awaiting_approval(false));
    assert_eq!(report.not_started, vec!["safe", "risky"]);
    check_pairing(&s.messages, &[]).unwrap();
}

#[test]
fn duplicate_and_stray_results_are_dropped() {
    let mut s = AgentState::new("s1");
    s.messages.push(result("ghost", "t", "answers nothing"));
    s.messages.push(assistant(&[("a", "t")]));
    s.messages.push(result("a", "t", "first"));
    s.messages.push(result("a", "t", "second"));
    s.messages.push(result("zzz", "t", "not this batch"));
    s.messages.push(ChatMessage::user("next"));
    let report = repair_pairing(&mut s, &RepairPolicy::conservative());
    assert_eq!(report.removed, 3);
    assert!(report.needs_snapshot);
    assert_eq!(
        s.messages,
        vec![assistant(&[("a", "t")]), result("a", "t", "first"), ChatMessage::user("next")]
    );
}

#[test]
fn partially_answered_groups_get_the_missing_results_after_the_present_ones() {
    let mut s = AgentState::new("s1");
    s.messages.push(assistant(&[("a", "t"), ("b", "t"), ("c", "t")]));
    s.messages.push(result("b", "t", "b done"));
    let report = repair_pairing(&mut s, &RepairPolicy::conservative());
    let ids: Vec<_> = s.messages.iter().filter_map(|m| m.tool_call_id()).collect();
    assert_eq!(ids, vec!["b", "a", "c"]);
    assert_eq!(report.not_started, vec!["a", "c"]);
    assert_eq!(report.events.len(), 2);
}

// --- properties over random histories

#[derive(Debug, Clone)]
enum Item {
    User,
    System,
    Assistant(Vec<u8>),
    Result(u8),
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        Just(Item::User),
        Just(Item::System),
        prop::collection::vec(0u8..6, 0..4).prop_map(Item::Assistant),
        (0u8..6).prop_map(Item::Result),
    ]
}

fn build(items: &[Item], records: &[(u8, bool)], status_awaiting: bool) -> AgentState {
    let mut s = AgentState::new("p");
    let mut n = 0;
    let mut last_calls: Vec<String> = Vec::new();
    for it in items {
        match it {
            Item::User => s.messages.push(ChatMessage::user("u")),
            Item::System => s.messages.push(ChatMessage::system("s")),
            Item::Assistant(calls) => {
                n += 1;
                last_calls = calls.iter().map(|c| format!("c{n}-{c}")).collect();
                let tc = last_calls
                    .iter()
                    .map(|id| ToolCall::new(id, format!("tool{}", id.len() % 3), "{}"))
                    .collect();
                s.messages.push(ChatMessage::Assistant {
                    content: None,
                    reasoning_content: None,
                    tool_calls: tc,
                });
            }
            Item::Result(c) => s.messages.push(result(&format!("c{n}-{c}"), "t", "r")),
        }
    }
    for (c, finished) in records {
        let id = format!("c{n}-{c}");
        let rec = if *finished {
            ToolRunRecord::Finished {
                name: "t".into(),
                result: ToolResult::text("recorded"),
                stop_requested: false,
                injected: Vec::new(),
            }
        } else {
            ToolRunRecord::Started { name: "t".into() }
        };
        s.tool_runs.insert(id, rec);
    }
    if status_awaiting && !last_calls.is_empty() {
        s.status = RunStatus::AwaitingApproval;
        let msg = ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: last_calls.iter().map(|id| ToolCall::new(id, "t", "{}")).collect(),
        };
        s.pending_approval = Some(PendingApprovalBatch {
            batch_id: "b".into(),
            run_id: "r".into(),
            items: vec![],
            assistant_message: msg,
            created_at_ms: 0,
            calls: Vec::new(),
            worker_session: None,
            injected: Vec::new(),
            stop_requested: false,
            dismissed: None,
            denied_above: false,
            approved_calls: None,
            item_workers: Default::default(),
        });
    }
    s
}

proptest! {
    #[test]
    fn repair_always_restores_the_invariant_and_is_idempotent(
        items in prop::collection::vec(item(), 0..14),
        records in prop::collection::vec((0u8..6, any::<bool>()), 0..4),
        awaiting in any::<bool>(),
        idempotent in any::<bool>(),
        resume in any::<bool>(),
        running in any::<bool>(),
    ) {
        let mut original = build(&items, &records, awaiting);
        if running && original.status != RunStatus::AwaitingApproval {
            original.status = RunStatus::Running;
        }
        let mut s = original.clone();
        let policy = RepairPolicy::with_idempotent(move |_| idempotent).resume_unstarted(resume);
        let report = repair_pairing(&mut s, &policy);
        let mut pending: Vec<&str> = report.rerun.iter().map(|c| c.id.as_str()).collect();
        pending.extend(report.awaiting.iter().map(String::as_str));
        pending.extend(report.resume.iter().map(|c| c.id.as_str()));
        // Nothing that started is ever resumed, and nothing without a record is re-run.
        for c in &report.resume {
            prop_assert!(!original.tool_runs.contains_key(&c.id));
        }
        for c in &report.rerun {
            let started = matches!(original.tool_runs.get(&c.id), Some(ToolRunRecord::Started { .. }));
            prop_assert!(started, "{} re-run without a started record", c.id);
        }
        prop_assert!(check_pairing(&s.messages, &pending).is_ok(), "{:?}", check_pairing(&s.messages, &pending));
        // Non-tool messages are never touched.
        let others = |m: &Vec<ChatMessage>| m.iter().filter(|m| m.tool_call_id().is_none()).cloned().collect::<Vec<_>>();
        prop_assert_eq!(others(&s.messages), others(&original.messages));
        // Finished calls always get their recorded result.
        for id in &report.recorded {
            let finished = matches!(original.tool_runs.get(id), Some(ToolRunRecord::Finished { .. }));
            prop_assert!(finished, "{} has no finished record", id);
        }
        // A second pass changes nothing.
        let again = s.clone();
        let second = repair_pairing(&mut s, &policy);
        prop_assert_eq!(&s, &again);
        prop_assert!(!second.changed());
        // The events, when offered, reproduce the repair from the original.
        if !report.needs_snapshot {
            let mut replay = original.clone();
            for e in &report.events {
                replay.apply(e);
            }
            prop_assert_eq!(replay.messages, again.messages);
        }
    }
}
