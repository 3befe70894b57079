//! The wire form of every [`AgentEvent`] kind, pinned in `tests/fixtures/agent_events/events.jsonl`.
//!
//! The native module hands events to ArkTS as this serde JSON; the ArkTS bindings decode the same
//! file in `scripts/arkts-check/agent.test.mjs`. A change to an event's shape fails here first, so
//! both sides are updated together. To rewrite the fixture after an intended change, run
//! `ARKAGENT_BLESS=1 cargo test --test event_wire -- --test-threads=1` and review the diff.

use arkagent::agent::AgentEvent;
use arkagent::approval::PendingApprovalBatch;
use arkagent::state::RunStatus;
use arkagent::{codes, AgentError, ToolCall, ToolResult, Usage};
use serde_json::json;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_events/events.jsonl")
}

/// One event of every kind, with fields a decoder can check.
fn every_kind() -> Vec<AgentEvent> {
    let batch: PendingApprovalBatch = serde_json::from_value(json!({
        "batch_id": "batch-1",
        "run_id": "run-1",
        "items": [{
            "approval_id": "ap-1",
            "tool_call": {"id": "call-2", "name": "clear_baking_cache", "arguments": "{\"confirm\":\"yes\"}"},
            "arguments_hash": "h-1",
            "risk_level": "dangerous",
            "reason": "Dangerous tool \"clear_baking_cache\" requires confirmation",
            "created_at_ms": 1_700_000_000_001u64,
            "decision": "pending"
        }],
        "assistant_message": {"role": "assistant", "tool_calls": [
            {"id": "call-2", "name": "clear_baking_cache", "arguments": "{\"confirm\":\"yes\"}"}
        ]},
        "created_at_ms": 1_700_000_000_000u64
    }))
    .expect("a valid batch");
    vec![
        AgentEvent::RunStarted { session_id: "s-1".into(), run_id: "run-1".into(), resumed: false },
        AgentEvent::TextDelta { delta: "Hello ".into() },
        AgentEvent::ReasoningDelta { delta: "thinking".into() },
        AgentEvent::ToolCallStarted { index: 0, id: "call-1".into(), name: "query_order".into() },
        AgentEvent::ToolCallArgumentsDelta { index: 0, delta: "{\"order_id\":".into() },
        AgentEvent::ToolCallFinished {
            index: 0,
            call: ToolCall::new("call-1", "query_order", "{\"order_id\":\"20261010\"}"),
        },
        AgentEvent::ApprovalRequired { batch },
        AgentEvent::ToolResult {
            call_id: "call-1".into(),
            name: "query_order".into(),
            result: ToolResult::json(json!({"status": "shipped"})),
        },
        AgentEvent::StatePersisted { events: 3 },
        // A failed run: its error, as the outcome has it (a completed run has none and no `error`
        // key, as a run without a finish reason has no `finish_reason`).
        AgentEvent::RunFinished {
            status: RunStatus::Failed,
            final_text: None,
            usage: Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
            finish_reason: Some("tool_calls".into()),
            error: Some(AgentError::of(
                codes::PROVIDER_AUTH,
                "HTTP 401: Incorrect API key provided: <redacted>",
            )),
        },
        // A worker's worker's event: a worker event nests.
        AgentEvent::WorkerEvent {
            call_id: "call-3".into(),
            session_id: "w-1".into(),
            event: Box::new(AgentEvent::WorkerEvent {
                call_id: "call-4".into(),
                session_id: "w-2".into(),
                event: Box::new(AgentEvent::ToolResult {
                    call_id: "call-5".into(),
                    name: "query_stock".into(),
                    result: ToolResult::text("12"),
                }),
            }),
        },
    ]
}

#[test]
fn event_wire_forms_match_the_fixture() {
    let lines: Vec<String> =
        every_kind().iter().map(|e| serde_json::to_string(e).expect("events serialize")).collect();
    let text = lines.join("\n") + "\n";
    if std::env::var_os("ARKAGENT_BLESS").is_some() {
        std::fs::write(fixture(), &text).expect("write the fixture");
    }
    let pinned = std::fs::read_to_string(fixture()).expect("the fixture exists");
    assert_eq!(text, pinned, "the AgentEvent wire form changed: update the ArkTS decoder and bless");
}

#[test]
fn the_fixture_has_one_line_per_event_kind() {
    let pinned = std::fs::read_to_string(fixture()).expect("the fixture exists");
    let mut kinds: Vec<String> = pinned
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["type"].as_str().unwrap().into())
        .collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), every_kind().len());
}
