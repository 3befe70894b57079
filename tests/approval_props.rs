//! Randomized whole-batch checks: batches of mixed risk levels (safe, sensitive, dangerous,
//! unknown, policy-denied) decided in random orders. Whatever the batch and the order:
//! no call is released to run before every item is decided, every call gets exactly one outcome,
//! outcomes come back in call order, and a denial releases nothing.
//!
//! `PROPTEST_CASES` raises the number of cases (default 256 here).

mod common;

use arkagent::approval::{
    plan_batch, ApprovalDecision, ApprovalPolicy, BatchPlan, BatchSettlement, BatchStep, CallDisposition,
    DefaultApprovalPolicy, PolicyDecision, UserDecision,
};
use arkagent::{codes, RiskLevel, ToolCall, ToolDefinition};
use common::code_of;
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Safe,
    Sensitive,
    Dangerous,
    Unknown,
    Forbidden,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Safe),
        Just(Kind::Sensitive),
        Just(Kind::Dangerous),
        Just(Kind::Unknown),
        Just(Kind::Forbidden)
    ]
}

/// The default policy, except that it denies the tool `forbidden` outright.
struct Policy;
impl ApprovalPolicy for Policy {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        if call.name == "forbidden" {
            PolicyDecision::Deny("never".into())
        } else {
            DefaultApprovalPolicy.decide(call, definition)
        }
    }
}

fn definition(kind: Kind) -> Option<ToolDefinition> {
    let risk = match kind {
        Kind::Safe | Kind::Forbidden => RiskLevel::Safe,
        Kind::Sensitive => RiskLevel::Sensitive,
        Kind::Dangerous => RiskLevel::Dangerous,
        Kind::Unknown => return None,
    };
    Some(ToolDefinition::new("t", "d", json!({"type":"object"})).with_risk(risk))
}

fn name(kind: Kind) -> &'static str {
    match kind {
        Kind::Safe => "safe_tool",
        Kind::Sensitive => "sensitive_tool",
        Kind::Dangerous => "dangerous_tool",
        Kind::Unknown => "unknown_tool",
        Kind::Forbidden => "forbidden",
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn no_call_runs_early_and_every_call_gets_one_outcome_in_order(
        batch in prop::collection::vec((kind(), any::<bool>(), 0u32..1000), 1..9),
        order in prop::collection::vec(any::<u64>(), 9),
    ) {
        let calls: Vec<ToolCall> = batch
            .iter()
            .enumerate()
            .map(|(i, (k, _, arg))| ToolCall::new(format!("call_{i}"), name(*k), format!(r#"{{"n":{arg}}}"#)))
            .collect();
        let inputs = batch
            .iter()
            .zip(&calls)
            .map(|((k, _, _), call)| {
                let def = definition(*k);
                arkagent::approval::BatchCallInput {
                    call: call.clone(),
                    risk_level: def.as_ref().map(|d| d.risk_level).unwrap_or_default(),
                    disposition: CallDisposition::from_policy(Policy.decide(call, def.as_ref())),
                }
            })
            .collect();
        let needs: Vec<bool> = batch.iter().map(|(k, _, _)| matches!(k, Kind::Sensitive | Kind::Dangerous)).collect();
        let forbidden: Vec<bool> = batch.iter().map(|(k, _, _)| matches!(k, Kind::Forbidden)).collect();
        let plan = plan_batch("run", common::assistant(&calls), inputs, 1);

        let outcomes: Vec<(String, Option<arkagent::ToolResult>)> = match plan {
            BatchPlan::Run(steps) => {
                prop_assert!(!needs.iter().any(|n| *n), "a call needing confirmation was not frozen");
                steps.into_iter().map(|s| match s {
                    BatchStep::Execute(c) => (c.id, None),
                    BatchStep::Answer(a) => (a.call.id, Some(a.result)),
                }).collect()
            }
            BatchPlan::Freeze(mut frozen) => {
                prop_assert!(needs.iter().any(|n| *n));
                prop_assert_eq!(frozen.items.len(), needs.iter().filter(|n| **n).count());
                // Decide the items in a random order, checking nothing is released before the last.
                let mut sequence: Vec<usize> = (0..frozen.items.len()).collect();
                sequence.sort_by_key(|i| order[*i]);
                for (step, &i) in sequence.iter().enumerate() {
                    prop_assert!(frozen.settle().is_err(), "released with {} decisions of {}", step, sequence.len());
                    let call_index: usize = frozen.items[i].tool_call.id[5..].parse().unwrap();
                    let id = frozen.items[i].approval_id.clone();
                    let decision = if batch[call_index].1 { UserDecision::Approve } else { UserDecision::Deny(format!("r{call_index}")) };
                    frozen.decide(&id, decision.clone(), 2).unwrap();
                    // A second decision on the same item is refused and changes nothing.
                    let snapshot = frozen.clone();
                    prop_assert_eq!(frozen.decide(&id, decision, 3).unwrap_err().code, codes::APPROVAL_ALREADY_DECIDED);
                    prop_assert_eq!(&frozen, &snapshot);
                }
                prop_assert!(frozen.is_fully_decided());
                let any_denied = frozen.items.iter().any(|i| i.decision == ApprovalDecision::Denied);
                match frozen.settle().unwrap() {
                    BatchSettlement::Run(steps) => {
                        prop_assert!(!any_denied);
                        steps.into_iter().map(|s| match s {
                            BatchStep::Execute(c) => (c.id, None),
                            BatchStep::Answer(a) => (a.call.id, Some(a.result)),
                        }).collect()
                    }
                    BatchSettlement::Denied(answers) => {
                        prop_assert!(any_denied);
                        for (i, a) in answers.iter().enumerate() {
                            let code = code_of(&a.result);
                            prop_assert!(a.result.is_error);
                            if needs[i] && !batch[i].1 {
                                prop_assert_eq!(a.result.to_model_text(), format!("denied by user: r{i}"));
                                prop_assert_eq!(code.as_deref(), Some(codes::TOOL_DENIED));
                            } else if forbidden[i] {
                                prop_assert_eq!(code.as_deref(), Some(codes::TOOL_DENIED));
                            } else {
                                prop_assert_eq!(code.as_deref(), Some(codes::TOOL_NOT_RUN));
                            }
                        }
                        answers.into_iter().map(|a| (a.call.id, Some(a.result))).collect()
                    }
                }
            }
        };
        // Exactly one outcome per call, in call order.
        let ids: Vec<&str> = outcomes.iter().map(|(id, _)| id.as_str()).collect();
        let expected: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        prop_assert_eq!(ids, expected);
        // A call released to run is never a forbidden one; a forbidden one always gets tool_denied.
        for (i, (_, result)) in outcomes.iter().enumerate() {
            if forbidden[i] {
                let code = result.as_ref().and_then(code_of);
                prop_assert_eq!(code.as_deref(), Some(codes::TOOL_DENIED));
            }
        }
    }
}
