//! Helpers shared by the state tests: deterministic turns of events and file listings.
#![allow(dead_code)]

use arkagent::approval::{ApprovalDecision, PendingApprovalBatch, PendingApprovalItem};
use arkagent::state::{AgentState, RunStatus, StateEvent};
use arkagent::{codes, AgentError, ChatMessage, RiskLevel, ToolCall, ToolResult, Usage};
use std::fs;
use std::path::{Path, PathBuf};

/// The events of turn `k` (k >= 1) of a scripted session: a cycle of five turns that asks for an
/// approval, decides it, starts the call, finishes it and answers. Folding turns 1..=k from
/// `AgentState::new` gives the state after turn k.
pub fn turn(k: u64) -> Vec<StateEvent> {
    let call = ToolCall::new(format!("call-{k}"), "clear_baking_cache", format!("{{\"n\":{k}}}"));
    let mut ev = match k % 5 {
        1 => {
            let assistant = ChatMessage::Assistant {
                content: None,
                reasoning_content: Some(format!("thinking {k}")),
                tool_calls: vec![call.clone()],
            };
            vec![
                StateEvent::RunStarted { run_id: format!("run-{k}"), delegation: None },
                StateEvent::MessageAppended { message: ChatMessage::user(format!("please clear {k}")) },
                StateEvent::MessageAppended { message: assistant.clone() },
                StateEvent::ApprovalRequested {
                    batch: PendingApprovalBatch {
                        batch_id: format!("batch-{k}"),
                        run_id: format!("run-{k}"),
                        items: vec![PendingApprovalItem {
                            approval_id: format!("appr-{k}"),
                            tool_call: call,
                            arguments_hash: format!("hash-{k}"),
                            risk_level: RiskLevel::Dangerous,
                            reason: "dangerous".into(),
                            created_at_ms: k,
                            decision: ApprovalDecision::Pending,
                            deny_reason: None,
                            decided_at_ms: None,
                        }],
                        assistant_message: assistant,
                        created_at_ms: k,
                        calls: Vec::new(),
                        worker_session: None,
                        injected: Vec::new(),
                        stop_requested: false,
                        dismissed: None,
                        denied_above: false,
                        approved_calls: None,
                        item_workers: Default::default(),
                    },
                    // Both forms of the record (a worker's batch announced, and not).
                    announced: k.is_multiple_of(2),
                },
            ]
        }
        2 => vec![
            StateEvent::ApprovalDecided {
                approval_id: format!("appr-{}", k - 1),
                decision: if k.is_multiple_of(3) {
                    ApprovalDecision::Denied
                } else {
                    ApprovalDecision::Approved
                },
                deny_reason: (k.is_multiple_of(3)).then(|| "no".to_string()),
                decided_at_ms: k * 10,
            },
            StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None },
        ],
        3 => vec![StateEvent::ToolStarted {
            call_id: format!("call-{}", k - 2),
            name: "clear_baking_cache".into(),
            worker_session: None,
        }],
        4 => {
            let result = ToolResult::text(format!("cleared {}", k - 3));
            vec![
                StateEvent::ToolFinished {
                    call_id: format!("call-{}", k - 3),
                    name: "clear_baking_cache".into(),
                    result: result.clone(),
                    stop_requested: false,
                    injected: Vec::new(),
                },
                StateEvent::MessageAppended {
                    message: ChatMessage::Tool {
                        tool_call_id: format!("call-{}", k - 3),
                        name: "clear_baking_cache".into(),
                        content: result.to_model_text(),
                        is_error: false,
                    },
                },
                StateEvent::BatchCompleted { stop_requested: false },
                StateEvent::ApprovalCleared,
            ]
        }
        _ => vec![
            StateEvent::RoundStarted { round: 2 },
            StateEvent::MessageAppended { message: ChatMessage::assistant_text(format!("done {k}")) },
            StateEvent::LoopWindow { window: vec![format!("sig-{k}")] },
            // Every second run of the cycle fails with the error that ended it (saved with its status).
            if k.is_multiple_of(10) {
                StateEvent::StatusChanged {
                    status: RunStatus::Failed,
                    finish_reason: None,
                    error: Some(AgentError::of(
                        codes::PROVIDER_HTTP_STATUS,
                        format!("HTTP 500: run {k} failed"),
                    )),
                }
            } else {
                StateEvent::StatusChanged { status: RunStatus::Completed, finish_reason: None, error: None }
            },
        ],
    };
    ev.push(StateEvent::UsageAdded {
        usage: Usage { prompt_tokens: k, completion_tokens: 1, total_tokens: k + 1 },
    });
    ev.push(StateEvent::MetadataSet { key: "seq".into(), value: k.into() });
    ev
}

/// The state after turns 1..=k.
pub fn state_after(session_id: &str, k: u64) -> AgentState {
    let mut s = AgentState::new(session_id);
    for i in 1..=k {
        for e in turn(i) {
            s.apply(&e);
        }
    }
    s
}

/// The files of `dir` whose names start with `prefix`, sorted by name (= by generation).
pub fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    v.sort();
    v
}
