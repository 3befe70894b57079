//! A run that ends in the middle of a batch (cancelled, or aborted by an after-hook) still gives
//! every call of the batch exactly one `ToolResult` event before `RunFinished`: the calls it cut
//! short get the answer the state gives them when it is read back (a started call's
//! `tool_interrupted` "may or may not have taken effect", one that never ran its "did not run"),
//! after the run's end was saved. A UI that pairs each `ToolCallFinished` with its `ToolResult`
//! closes them all. A call the batch answered without running it (a denial) was not cut short:
//! the state keeps the answer its event gave.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, AgentEvent, EventLog};
use arkagent::approval::{ApprovalPolicy, DefaultApprovalPolicy, PolicyDecision};
use arkagent::message::ToolCall;
use arkagent::state::{tool_result_message, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, AbortOnFast, MemStore, Script};

/// `fast` answers at once; `slow` waits for its signal (a Rust executor's future is dropped with
/// the chunk on a cancel). `finished` counts the answers of `fast`.
fn tools(finished: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    let finished = Arc::clone(finished);
    tools
        .register(
            ToolDefinition::new("fast", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                finished.fetch_add(1, Ordering::SeqCst);
                async move { Ok(ToolResult::text("fast done")) }
            })),
        )
        .unwrap();
    tools
        .register(
            ToolDefinition::new("slow", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, ctx: arkagent::tool::ToolContext| async move {
                ctx.signal.cancelled().await;
                Ok(ToolResult::text("slow told"))
            })),
        )
        .unwrap();
    tools
}

/// The run's own events, by kind: `R:<call>` for a `ToolResult`, `P` for `StatePersisted`, `F`
/// for `RunFinished`.
fn outline(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { call_id, .. } => Some(format!("R:{call_id}")),
            AgentEvent::StatePersisted { .. } => Some("P".into()),
            AgentEvent::RunFinished { .. } => Some("F".into()),
            _ => None,
        })
        .collect()
}

/// Every call of the model's answer has exactly one `ToolResult`, and it is the answer the state
/// read back (repaired on load) gives the call.
async fn results_match_the_state(events: &[AgentEvent], store: &MemStore, batch: &[&str]) -> Vec<ToolResult> {
    let state = store.load("s").await.unwrap().unwrap();
    let answer = state.messages.iter().find(|m| !m.tool_calls().is_empty()).expect("the batch");
    let mut results = Vec::new();
    for id in batch {
        let call: &ToolCall = answer.tool_calls().iter().find(|c| c.id == *id).unwrap();
        let got: Vec<&ToolResult> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolResult { call_id, result, .. } if call_id == id => Some(result),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 1, "one ToolResult for {id}: {events:#?}");
        let saved =
            state.messages.iter().find(|m| m.tool_call_id() == Some(id)).expect("answered in the state");
        assert_eq!(&tool_result_message(call, got[0]), saved, "{id}: the event tells what the state says");
        results.push(got[0].clone());
    }
    results
}

/// The result's error code (from its metadata), empty for a success.
fn code(result: &ToolResult) -> String {
    let code = result.metadata.as_ref().and_then(|m| m.get("code")).and_then(|c| c.as_str());
    code.unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_cancel_mid_batch_gives_the_calls_still_running_their_tool_result() {
    let finished = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("c0", "fast", "{}"), ("c1", "fast", "{}"), ("c2", "slow", "{}"), ("c3", "slow", "{}")]),
        answer("never asked"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model, store.clone())
        .tools(tools(&finished))
        .config(AgentConfig { max_parallel_tools: 4, ..AgentConfig::default() })
        .build();
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let run = agent.run("s", "q", &events, &signal);
    let cancel = async {
        while events.events().iter().filter(|e| matches!(e, AgentEvent::ToolResult { .. })).count() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        signal.cancel("the user left");
    };
    let (out, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(5), run), cancel);
    assert_eq!(out.expect("the cancel ends the run").unwrap().status(), RunStatus::Cancelled);
    let events = events.events();
    // The fast calls' results as they finished; the slow ones' once the end is saved, in call
    // order, then the end.
    let outline = outline(&events);
    let end = &outline[outline.len() - 4..];
    assert_eq!(end, ["P", "R:c2", "R:c3", "F"], "{outline:?}");
    let results = results_match_the_state(&events, &store, &["c0", "c1", "c2", "c3"]).await;
    assert_eq!(
        results.iter().map(code).collect::<Vec<_>>(),
        ["", "", codes::TOOL_INTERRUPTED, codes::TOOL_INTERRUPTED]
    );
    assert!(results[2].to_model_text().contains("may or may not have taken effect"), "{:?}", results[2]);
}

#[tokio::test]
async fn an_after_hook_abort_gives_the_calls_not_run_their_tool_result() {
    // One call at a time: the abort on `c1` ends the run before `c2` and `c3` start.
    let finished = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "fast", "{}"), ("c2", "fast", "{}"), ("c3", "slow", "{}")]),
        answer("never asked"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model, store.clone())
        .tools(tools(&finished))
        .hook(Arc::new(AbortOnFast))
        .config(AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() })
        .build();
    let events = EventLog::new();
    let out = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Aborted);
    assert_eq!(finished.load(Ordering::SeqCst), 1, "only c1 ran");
    let events = events.events();
    let outline = outline(&events);
    let end = &outline[outline.len() - 5..];
    assert_eq!(end, ["R:c1", "P", "R:c2", "R:c3", "F"], "{outline:?}");
    let results = results_match_the_state(&events, &store, &["c1", "c2", "c3"]).await;
    assert_eq!(
        results.iter().map(code).collect::<Vec<_>>(),
        ["", codes::TOOL_INTERRUPTED, codes::TOOL_INTERRUPTED]
    );
    assert!(results[1].to_model_text().contains("did not run"), "{:?}", results[1]);
}

#[tokio::test]
async fn a_batch_that_completes_gives_no_second_tool_result() {
    // The control: a run that ends after its batch (a stop) reports each call once.
    let finished = Arc::new(AtomicUsize::new(0));
    let model =
        Arc::new(Script::new(vec![calls(&[("c1", "fast", "{}"), ("c2", "fast", "{}")]), answer("done")]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model, store.clone()).tools(tools(&finished)).build();
    let events = EventLog::new();
    let out = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let events = events.events();
    results_match_the_state(&events, &store, &["c1", "c2"]).await;
    assert!(matches!(events.last(), Some(AgentEvent::RunFinished { .. })));
}

/// The default policy, but `fast` is denied outright.
struct DenyFast;

impl ApprovalPolicy for DenyFast {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        if call.name == "fast" {
            return PolicyDecision::Deny("fast is off".into());
        }
        DefaultApprovalPolicy.decide(call, definition)
    }
}

#[tokio::test]
async fn a_call_the_policy_denied_keeps_its_denial_when_the_batch_is_cancelled() {
    // `c1` is denied by the policy (its `ToolResult` goes out before anything runs), `c2` runs
    // until the cancel: the state read back says `c1` was denied, as the event did, not that the
    // run was interrupted before it ran.
    let finished = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "fast", "{}"), ("c2", "slow", "{}")]),
        answer("never asked"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent =
        AgentBuilder::new(model, store.clone()).tools(tools(&finished)).policy(Arc::new(DenyFast)).build();
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let run = agent.run("s", "q", &events, &signal);
    let cancel = async {
        while !events.events().iter().any(|e| matches!(e, AgentEvent::ToolResult { .. })) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        signal.cancel("the user left");
    };
    let (out, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(5), run), cancel);
    assert_eq!(out.expect("the cancel ends the run").unwrap().status(), RunStatus::Cancelled);
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the denied call never ran");
    let results = results_match_the_state(&events.events(), &store, &["c1", "c2"]).await;
    assert_eq!(results[0].to_model_text(), "denied by policy: fast is off");
    assert_eq!(code(&results[0]), codes::TOOL_DENIED);
    assert_eq!(code(&results[1]), codes::TOOL_INTERRUPTED);
}
