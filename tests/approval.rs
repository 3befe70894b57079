//! Approval: the default policy, the whole-batch freeze, one-at-a-time decisions, settlement, and
//! a frozen batch surviving a process kill (check list "风险与审批").

mod common;

use arkagent::approval::{
    arguments_hash, plan_batch, ApprovalDecision, ApprovalPolicy, BatchCallInput, BatchPlan, BatchSettlement,
    BatchStep, CallDisposition, DefaultApprovalPolicy, PendingApprovalBatch, PolicyDecision, UserDecision,
};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext, HookPipeline};
use arkagent::state::{AgentState, RunStatus, StateEvent};
use arkagent::{codes, ErrorLayer, RiskLevel, ToolCall, ToolDefinition, ToolResult};
use async_trait::async_trait;
use common::{code_of, plan, registry, run_steps};
use serde_json::json;
use std::sync::Arc;

fn frozen(plan: BatchPlan) -> PendingApprovalBatch {
    match plan {
        BatchPlan::Freeze(batch) => batch,
        BatchPlan::Run(steps) => panic!("expected a frozen batch, got {steps:?}"),
    }
}

fn three_calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new("c1", "query_order", r#"{"id":"A1"}"#),
        ToolCall::new("c2", "clear_baking_cache", r#"{"confirm":"yes"}"#),
        ToolCall::new("c3", "query_order", r#"{"id":"A2"}"#),
    ]
}

fn tools() -> Vec<(&'static str, RiskLevel)> {
    vec![
        ("query_order", RiskLevel::Safe),
        ("update_note", RiskLevel::Sensitive),
        ("clear_baking_cache", RiskLevel::Dangerous),
    ]
}

#[test]
fn default_policy_follows_the_seed() {
    let p = DefaultApprovalPolicy;
    let call = |name: &str| ToolCall::new("c", name, "{}");
    let def = |risk| ToolDefinition::new("t", "d", json!({"type":"object"})).with_risk(risk);
    assert_eq!(p.decide(&call("nope"), None), PolicyDecision::Allow, "unknown tool is allowed");
    assert_eq!(p.decide(&call("q"), Some(&def(RiskLevel::Safe))), PolicyDecision::Allow);
    assert_eq!(
        p.decide(&call("note"), Some(&def(RiskLevel::Sensitive))),
        PolicyDecision::RequireConfirmation("Sensitive tool \"note\" requires confirmation".into())
    );
    assert_eq!(
        p.decide(&call("wipe"), Some(&def(RiskLevel::Dangerous))),
        PolicyDecision::RequireConfirmation("Dangerous tool \"wipe\" requires confirmation".into())
    );
}

#[tokio::test]
async fn safe_tools_run_without_asking() {
    let (reg, log) = registry(&tools());
    let calls =
        vec![ToolCall::new("c1", "query_order", r#"{"id":"A1"}"#), ToolCall::new("c2", "query_order", "{}")];
    let BatchPlan::Run(steps) =
        plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap()
    else {
        panic!("safe calls must not freeze");
    };
    let results = run_steps(&reg, steps).await;
    assert_eq!(*log.lock().unwrap(), vec!["c1", "c2"]);
    assert_eq!(results.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["c1", "c2"]);
    assert!(results.iter().all(|(_, r)| !r.is_error));
}

#[tokio::test]
async fn unknown_tool_does_not_ask_and_gets_tool_not_found() {
    let (reg, log) = registry(&tools());
    let calls = vec![ToolCall::new("c1", "no_such_tool", "{}"), ToolCall::new("c2", "query_order", "{}")];
    let BatchPlan::Run(steps) =
        plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap()
    else {
        panic!("an unknown tool must not freeze the batch");
    };
    let results = run_steps(&reg, steps).await;
    assert_eq!(code_of(&results[0].1).as_deref(), Some(codes::TOOL_NOT_FOUND));
    assert!(results[0].1.is_error);
    assert_eq!(*log.lock().unwrap(), vec!["c2"]);
}

#[tokio::test]
async fn an_unknown_tool_never_asks_even_when_a_policy_or_a_hook_wants_it_to() {
    // A policy that asks about everything (an app's policy that fails closed behaves the same), and
    // a hook deferring every call: approving a tool that does not exist would mean nothing (seed
    // 7.3), so the unknown call meets the registry; the known ones still ask.
    struct AskAll;
    impl ApprovalPolicy for AskAll {
        fn decide(&self, _: &ToolCall, _: Option<&ToolDefinition>) -> PolicyDecision {
            PolicyDecision::RequireConfirmation("asks about everything".into())
        }
    }
    struct DeferAll;
    #[async_trait]
    impl AgentHook for DeferAll {
        async fn before_tool_call(
            &self,
            _: &HookContext<'_>,
            call: &ToolCall,
            _: Option<&ToolDefinition>,
        ) -> BeforeToolCall {
            BeforeToolCall::Defer(format!("deferred {}", call.id))
        }
    }
    let (reg, log) = registry(&tools());
    let unknown = vec![ToolCall::new("u1", "no_such_tool", "{}")];
    let mut deferring = HookPipeline::new();
    deferring.push(Arc::new(DeferAll));
    for hooks in [&HookPipeline::new(), &deferring] {
        let BatchPlan::Run(steps) = plan(hooks, &AskAll, &reg, &unknown, 1).await.unwrap() else {
            panic!("an unknown tool alone must not freeze");
        };
        let results = run_steps(&reg, steps).await;
        assert_eq!(code_of(&results[0].1).as_deref(), Some(codes::TOOL_NOT_FOUND));
        let mixed = vec![unknown[0].clone(), ToolCall::new("c1", "query_order", "{}")];
        let batch = frozen(plan(hooks, &AskAll, &reg, &mixed, 1).await.unwrap());
        assert_eq!(batch.items.iter().map(|i| i.tool_call.id.as_str()).collect::<Vec<_>>(), ["c1"]);
        assert!(log.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn dangerous_tool_freezes_the_whole_batch_with_nothing_run() {
    let (reg, log) = registry(&tools());
    let calls = three_calls();
    let batch =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1_000).await.unwrap());
    assert!(log.lock().unwrap().is_empty(), "zero side effects before the decision");
    assert_eq!(batch.run_id, "run-1");
    assert_eq!(batch.created_at_ms, 1_000);
    assert_eq!(batch.assistant_message.tool_calls(), calls.as_slice(), "assistant message holds every call");
    assert_eq!(batch.items.len(), 1, "only the dangerous call needs a decision");
    let item = &batch.items[0];
    assert_eq!(item.tool_call, calls[1]);
    assert_eq!(item.risk_level, RiskLevel::Dangerous);
    assert_eq!(item.reason, "Dangerous tool \"clear_baking_cache\" requires confirmation");
    assert_eq!(item.decision, ApprovalDecision::Pending);
    assert_eq!(item.created_at_ms, 1_000);
    assert_eq!(item.arguments_hash, arguments_hash(r#"{"confirm":"yes"}"#));
    assert!(
        uuid::Uuid::parse_str(&item.approval_id).is_ok() && uuid::Uuid::parse_str(&batch.batch_id).is_ok()
    );
    let err = batch.settle().unwrap_err();
    assert_eq!((err.layer, err.code.as_ref()), (ErrorLayer::Runtime, codes::APPROVAL_PENDING));

    // The runtime then tells the hooks (after persisting the batch).
    struct Watch(std::sync::Mutex<Vec<(String, usize)>>);
    #[async_trait]
    impl AgentHook for Watch {
        async fn on_approval_required(&self, _: &HookContext<'_>, batch: &PendingApprovalBatch) {
            self.0.lock().unwrap().push((batch.batch_id.clone(), batch.items.len()));
        }
    }
    let watch = Arc::new(Watch(std::sync::Mutex::new(Vec::new())));
    let hooks = HookPipeline::with_hooks(vec![watch.clone()]);
    hooks.on_approval_required(&common::CTX, &batch).await.unwrap();
    assert_eq!(*watch.0.lock().unwrap(), vec![(batch.batch_id.clone(), 1)]);
}

#[tokio::test]
async fn approval_runs_the_whole_batch_in_call_order() {
    let (reg, log) = registry(&tools());
    let calls = three_calls();
    let mut batch =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap());
    let id = batch.items[0].approval_id.clone();
    let item = batch.approve(&id, 2_000).unwrap();
    assert_eq!((item.decision, item.decided_at_ms), (ApprovalDecision::Approved, Some(2_000)));
    assert!(batch.is_fully_decided());
    let BatchSettlement::Run(steps) = batch.settle().unwrap() else { panic!("approved batch must run") };
    assert!(steps.iter().all(|s| matches!(s, BatchStep::Execute(_))));
    let results = run_steps(&reg, steps).await;
    assert_eq!(*log.lock().unwrap(), vec!["c1", "c2", "c3"]);
    assert_eq!(results[1].1.to_model_text(), r#"ran clear_baking_cache {"confirm":"yes"}"#);
}

#[tokio::test]
async fn denial_answers_every_call_and_runs_none() {
    let (reg, log) = registry(&tools());
    let calls = three_calls();
    let mut batch =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap());
    let id = batch.items[0].approval_id.clone();
    batch.deny(&id, "keep my cache", 3).unwrap();
    let BatchSettlement::Denied(answers) = batch.settle().unwrap() else {
        panic!("denied batch must not run")
    };
    assert!(log.lock().unwrap().is_empty());
    assert_eq!(answers.iter().map(|a| a.call.id.as_str()).collect::<Vec<_>>(), ["c1", "c2", "c3"]);
    assert!(answers.iter().all(|a| a.result.is_error));
    assert_eq!(answers[1].result.to_model_text(), "denied by user: keep my cache");
    assert_eq!(code_of(&answers[1].result).as_deref(), Some(codes::TOOL_DENIED));
    assert_eq!(answers[1].result.metadata.as_ref().unwrap()["approval_id"], json!(id));
    for i in [0, 2] {
        assert_eq!(code_of(&answers[i].result).as_deref(), Some(codes::TOOL_NOT_RUN));
        assert!(answers[i].result.to_model_text().contains("not run"));
    }
    // An empty reason still says who denied it.
    let mut batch2 =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap());
    let id2 = batch2.items[0].approval_id.clone();
    batch2.deny(&id2, "  ", 3).unwrap();
    let BatchSettlement::Denied(a2) = batch2.settle().unwrap() else { panic!() };
    assert_eq!(a2[1].result.to_model_text(), "denied by user");
}

#[tokio::test]
async fn decisions_arrive_one_at_a_time_and_errors_are_clear() {
    let (reg, _log) = registry(&tools());
    let calls = vec![
        ToolCall::new("c1", "update_note", r#"{"n":1}"#),
        ToolCall::new("c2", "query_order", "{}"),
        ToolCall::new("c3", "clear_baking_cache", "{}"),
    ];
    let mut batch =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap());
    assert_eq!(batch.items.len(), 2);
    assert_eq!(batch.items[0].reason, "Sensitive tool \"update_note\" requires confirmation");
    let (a, b) = (batch.items[0].approval_id.clone(), batch.items[1].approval_id.clone());

    let err = batch.approve("not-an-id", 5).unwrap_err();
    assert_eq!((err.layer, err.code.as_ref()), (ErrorLayer::Runtime, codes::APPROVAL_NOT_FOUND));

    batch.approve(&a, 5).unwrap();
    assert!(!batch.is_fully_decided());
    assert_eq!(batch.pending_items().map(|i| i.approval_id.clone()).collect::<Vec<_>>(), vec![b.clone()]);
    assert_eq!(batch.settle().unwrap_err().code, codes::APPROVAL_PENDING, "no call released early");

    let before = batch.clone();
    let err = batch.deny(&a, "changed my mind", 6).unwrap_err();
    assert_eq!(err.code, codes::APPROVAL_ALREADY_DECIDED);
    assert_eq!(batch, before, "a refused decision changes nothing");

    batch.decide(&b, UserDecision::Approve, 7).unwrap();
    assert!(batch.is_fully_decided());
    assert_eq!(batch.approve(&b, 8).unwrap_err().code, codes::APPROVAL_ALREADY_DECIDED);
    let BatchSettlement::Run(steps) = batch.settle().unwrap() else { panic!() };
    assert_eq!(steps.iter().map(|s| s.call().id.as_str()).collect::<Vec<_>>(), ["c1", "c2", "c3"]);
}

#[tokio::test]
async fn a_bound_decision_never_applies_to_other_arguments() {
    let (reg, _log) = registry(&tools());
    let calls = vec![ToolCall::new("c1", "clear_baking_cache", r#"{"scope":"all","confirm":"yes"}"#)];
    let mut batch =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap());
    let id = batch.items[0].approval_id.clone();
    let before = batch.clone();

    let other_args = arguments_hash(r#"{"scope":"today","confirm":"yes"}"#);
    let err = batch.decide_bound(&id, "c1", &other_args, UserDecision::Approve, 2).unwrap_err();
    assert_eq!((err.layer, err.code.as_ref()), (ErrorLayer::Runtime, codes::APPROVAL_MISMATCH));
    let same_args = arguments_hash(r#"{"confirm":"yes","scope":"all"}"#); // other key order, same arguments
    let err = batch.decide_bound(&id, "c9", &same_args, UserDecision::Approve, 2).unwrap_err();
    assert_eq!(err.code, codes::APPROVAL_MISMATCH);
    assert_eq!(batch, before);
    assert_eq!(
        batch.decide_bound("nope", "c1", &same_args, UserDecision::Approve, 2).unwrap_err().code,
        codes::APPROVAL_NOT_FOUND
    );

    batch.decide_bound(&id, "c1", &same_args, UserDecision::Deny("no".into()), 2).unwrap();
    assert_eq!(batch.items[0].decision, ApprovalDecision::Denied);
    let err = batch.decide_bound(&id, "c1", &same_args, UserDecision::Approve, 3).unwrap_err();
    assert_eq!(err.code, codes::APPROVAL_ALREADY_DECIDED);
}

#[tokio::test]
async fn tampered_persisted_arguments_are_refused_at_settlement() {
    let (reg, log) = registry(&tools());
    let mut batch =
        frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &three_calls(), 1).await.unwrap());
    let id = batch.items[0].approval_id.clone();
    batch.approve(&id, 2).unwrap();
    // Someone edits the saved state: the approved call now has other arguments.
    let mut tampered = batch.clone();
    tampered.items[0].tool_call.arguments = r#"{"confirm":"yes","scope":"everything"}"#.into();
    assert_eq!(tampered.settle().unwrap_err().code, codes::APPROVAL_MISMATCH);
    // Or the plan's copy of the call differs from the item the user approved.
    let mut tampered = batch.clone();
    tampered.calls[1].call.arguments = r#"{"confirm":"no"}"#.into();
    assert_eq!(tampered.settle().unwrap_err().code, codes::APPROVAL_MISMATCH);
    assert!(log.lock().unwrap().is_empty());
    assert!(batch.settle().is_ok());
}

#[tokio::test]
async fn policy_deny_answers_that_call_and_the_others_run() {
    struct NoWipes;
    impl ApprovalPolicy for NoWipes {
        fn decide(&self, call: &ToolCall, _: Option<&ToolDefinition>) -> PolicyDecision {
            if call.name == "clear_baking_cache" {
                PolicyDecision::Deny("wiping is disabled on this device".into())
            } else {
                PolicyDecision::Allow
            }
        }
    }
    let (reg, log) = registry(&tools());
    let BatchPlan::Run(steps) = plan(&HookPipeline::new(), &NoWipes, &reg, &three_calls(), 1).await.unwrap()
    else {
        panic!("a policy denial is not a confirmation");
    };
    let results = run_steps(&reg, steps).await;
    assert_eq!(*log.lock().unwrap(), vec!["c1", "c3"]);
    assert_eq!(results.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["c1", "c2", "c3"]);
    assert!(results[1].1.is_error);
    assert_eq!(results[1].1.to_model_text(), "denied by policy: wiping is disabled on this device");
    assert_eq!(code_of(&results[1].1).as_deref(), Some(codes::TOOL_DENIED));
}

struct DeferSafe;
#[async_trait]
impl AgentHook for DeferSafe {
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        call: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if call.id == "c3" {
            BeforeToolCall::Defer("second opinion on the order".into())
        } else {
            BeforeToolCall::Proceed(None)
        }
    }
}

struct DenyFirst;
#[async_trait]
impl AgentHook for DenyFirst {
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        call: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if call.id == "c1" {
            BeforeToolCall::Deny(ToolResult::error_text("blocked by the audit hook"))
        } else {
            BeforeToolCall::Proceed(None)
        }
    }
}

#[tokio::test]
async fn hook_defer_freezes_a_safe_call_and_hook_denials_survive_the_freeze() {
    let (reg, log) = registry(&tools());
    let calls = vec![
        ToolCall::new("c1", "query_order", "{}"),
        ToolCall::new("c2", "query_order", r#"{"id":"A"}"#),
        ToolCall::new("c3", "query_order", r#"{"id":"B"}"#),
    ];
    let pipeline = HookPipeline::with_hooks(vec![Arc::new(DenyFirst), Arc::new(DeferSafe)]);
    let batch = frozen(plan(&pipeline, &DefaultApprovalPolicy, &reg, &calls, 1).await.unwrap());
    assert_eq!(batch.items.len(), 1);
    assert_eq!(
        (batch.items[0].tool_call.id.as_str(), batch.items[0].reason.as_str()),
        ("c3", "second opinion on the order")
    );
    assert_eq!(batch.items[0].risk_level, RiskLevel::Safe);

    let mut approved = batch.clone();
    let id = approved.items[0].approval_id.clone();
    approved.approve(&id, 2).unwrap();
    let BatchSettlement::Run(steps) = approved.settle().unwrap() else { panic!() };
    let results = run_steps(&reg, steps).await;
    assert_eq!(*log.lock().unwrap(), vec!["c2", "c3"], "the hook-denied call never runs");
    assert_eq!(results[0].1.to_model_text(), "blocked by the audit hook");

    let mut denied = batch;
    denied.deny(&id, "no", 2).unwrap();
    let BatchSettlement::Denied(answers) = denied.settle().unwrap() else { panic!() };
    assert_eq!(answers[0].result.to_model_text(), "blocked by the audit hook", "keeps its own answer");
    assert_eq!(code_of(&answers[1].result).as_deref(), Some(codes::TOOL_NOT_RUN));
    assert_eq!(answers[2].result.to_model_text(), "denied by user: no");
}

/// Check list: "杀进程后审批状态恢复". The frozen batch goes into the state through the journal
/// events, the process "dies" (only the JSON survives), and the decisions continue on the reloaded
/// state, ending exactly where an uninterrupted run ends.
#[tokio::test]
async fn a_frozen_batch_survives_a_process_kill() {
    let (reg, log) = registry(&tools());
    let calls = vec![
        ToolCall::new("c1", "update_note", r#"{"n":1}"#),
        ToolCall::new("c2", "query_order", "{}"),
        ToolCall::new("c3", "clear_baking_cache", "{}"),
    ];
    let batch = frozen(plan(&HookPipeline::new(), &DefaultApprovalPolicy, &reg, &calls, 10).await.unwrap());
    let mut state = AgentState::new("s1");
    state.apply(&StateEvent::RunStarted { run_id: "run-1".into(), delegation: None });
    state.apply(&StateEvent::ApprovalRequested { batch: batch.clone(), announced: false });
    // The first decision is journaled before the kill.
    let first = batch.items[0].approval_id.clone();
    let mut live = batch.clone();
    let event = live.approve(&first, 20).unwrap().decided_event().unwrap();
    state.apply(&event);
    let saved = serde_json::to_string(&state).unwrap();
    drop(state);

    let mut reloaded: AgentState = serde_json::from_str(&saved).unwrap();
    assert_eq!(reloaded.status, RunStatus::AwaitingApproval);
    let mut resumed = reloaded.pending_approval.clone().unwrap();
    assert_eq!(resumed, live, "the reloaded batch is the batch as decided so far");
    assert_eq!(resumed.approve(&first, 30).unwrap_err().code, codes::APPROVAL_ALREADY_DECIDED);
    let second = resumed.items[1].approval_id.clone();
    let event = resumed.approve(&second, 40).unwrap().decided_event().unwrap();
    reloaded.apply(&event);
    assert_eq!(reloaded.pending_approval.as_ref(), Some(&resumed));
    assert!(log.lock().unwrap().is_empty());
    let BatchSettlement::Run(steps) = resumed.settle().unwrap() else { panic!() };
    run_steps(&reg, steps).await;
    assert_eq!(*log.lock().unwrap(), vec!["c1", "c2", "c3"]);
}

#[test]
fn the_batch_is_plain_data_and_round_trips() {
    let calls = vec![ToolCall::new("c1", "wipe", r#"{"a":1}"#), ToolCall::new("c2", "q", "{}")];
    let inputs = vec![
        BatchCallInput {
            call: calls[0].clone(),
            risk_level: RiskLevel::Dangerous,
            disposition: CallDisposition::Confirm("why".into()),
        },
        BatchCallInput {
            call: calls[1].clone(),
            risk_level: RiskLevel::Safe,
            disposition: CallDisposition::Run,
        },
    ];
    let BatchPlan::Freeze(batch) = plan_batch("r", common::assistant(&calls), inputs, 7) else { panic!() };
    let v = serde_json::to_value(&batch).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["assistant_message", "batch_id", "calls", "created_at_ms", "items", "run_id"]);
    let item_keys: Vec<&str> = v["items"][0].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        item_keys.len(),
        7,
        "approval_id, tool_call, arguments_hash, risk_level, reason, created_at_ms, decision: {item_keys:?}"
    );
    assert_eq!(v["items"][0]["decision"], "pending");
    assert_eq!(v["calls"][1], json!({"call": {"id":"c2","name":"q","arguments":"{}"}, "plan": "run"}));
    let back: PendingApprovalBatch = serde_json::from_value(v).unwrap();
    assert_eq!(back, batch);
}

/// A batch saved without the `calls` field (before it existed) still settles: calls with an item
/// wait for it, the others run.
#[test]
fn a_batch_without_calls_settles_from_the_assistant_message() {
    let calls = vec![ToolCall::new("c1", "q", "{}"), ToolCall::new("c2", "wipe", r#"{"x":true}"#)];
    let inputs = vec![
        BatchCallInput {
            call: calls[0].clone(),
            risk_level: RiskLevel::Safe,
            disposition: CallDisposition::Run,
        },
        BatchCallInput {
            call: calls[1].clone(),
            risk_level: RiskLevel::Dangerous,
            disposition: CallDisposition::Confirm("why".into()),
        },
    ];
    let BatchPlan::Freeze(batch) = plan_batch("r", common::assistant(&calls), inputs, 7) else { panic!() };
    let mut v = serde_json::to_value(&batch).unwrap();
    v.as_object_mut().unwrap().remove("calls");
    let mut old: PendingApprovalBatch = serde_json::from_value(v).unwrap();
    assert!(old.calls.is_empty());
    let id = old.items[0].approval_id.clone();
    let mut denied = old.clone();
    old.approve(&id, 8).unwrap();
    let BatchSettlement::Run(steps) = old.settle().unwrap() else { panic!() };
    assert_eq!(steps, vec![BatchStep::Execute(calls[0].clone()), BatchStep::Execute(calls[1].clone())]);
    denied.deny(&id, "x", 8).unwrap();
    let BatchSettlement::Denied(answers) = denied.settle().unwrap() else { panic!() };
    assert_eq!(code_of(&answers[0].result).as_deref(), Some(codes::TOOL_NOT_RUN));
    assert_eq!(code_of(&answers[1].result).as_deref(), Some(codes::TOOL_DENIED));
}

#[test]
fn argument_hash_ignores_key_order_and_spacing_but_not_values() {
    let a = arguments_hash(r#"{"b":2,"a":{"y":[1,2],"x":null}}"#);
    assert_eq!(a, arguments_hash(r#" { "a" : { "x":null, "y":[1, 2] }, "b":2 } "#));
    assert_ne!(a, arguments_hash(r#"{"b":2,"a":{"y":[2,1],"x":null}}"#));
    assert_ne!(a, arguments_hash(r#"{"b":3,"a":{"y":[1,2],"x":null}}"#));
    assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
}
