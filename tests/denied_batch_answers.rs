//! A batch the user denies (or dismisses) runs none of its calls; a call of it that could not
//! have run anyway (an unknown tool, arguments that are not a JSON object or fail the schema) is
//! answered with that error, as it would have been had the batch run, not with "not run: another
//! call of the same batch was denied": the model is told what to fix instead of retrying the call
//! as it was. A call that would have passed the gates keeps the `tool_not_run` answer.

#[path = "support/runtime.rs"]
mod runtime;

use arkagent::agent::{AgentBuilder, AgentEvent, EventLog, RunOutcome};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, RiskLevel, ToolDefinition, ToolResult};
use runtime::{answer, calls, tool_messages, MemStore, Script};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The frozen batch: a sensitive call, a call of an unknown tool, one with arguments the schema
/// refuses, one with arguments that are no JSON object, and a valid one.
fn batch() -> Vec<arkagent::provider::ModelResponse> {
    vec![
        calls(&[
            ("c1", "wipe", r#"{"x":"a"}"#),
            ("c2", "no_such_tool", "{}"),
            ("c3", "note", r#"{"q":1}"#),
            ("c4", "note", "[1]"),
            ("c5", "note", r#"{"q":"fine"}"#),
        ]),
        answer("好的"),
    ]
}

async fn frozen(
    model: Arc<Script>,
    store: Arc<MemStore>,
    ran: &Arc<AtomicUsize>,
) -> (arkagent::agent::Agent, String) {
    let agent = AgentBuilder::new(model, store).build();
    let schema = |key: &str| json!({"type": "object", "properties": {key: {"type": "string"}}});
    for (name, key, risk) in [("wipe", "x", RiskLevel::Sensitive), ("note", "q", RiskLevel::Safe)] {
        let ran = ran.clone();
        agent
            .register_tool(
                ToolDefinition::new(name, name, schema(key)).with_risk(risk),
                Arc::new(FnExecutor(move |_a: Map<String, Value>, _c| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    async { Ok(ToolResult::text("ran")) }
                })),
            )
            .unwrap();
    }
    let out = agent.run("s", "整理", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items.len(), 1);
    let approval_id = batch.items[0].approval_id.clone();
    (agent, approval_id)
}

/// The answers as the model reads them, and the codes the `tool_result` events carry.
fn check(results: &[(String, String, bool)], events: &EventLog, not_run: &str) {
    let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    assert!(texts[0].starts_with("error: denied by user: 不要"), "{texts:?}");
    assert!(texts[1].starts_with("error [tool_not_found]: "), "{texts:?}");
    assert!(texts[2].starts_with("error [tool_argument_type_mismatch]: "), "{texts:?}");
    assert!(texts[3].starts_with("error [json_not_object]: "), "{texts:?}");
    assert!(texts[4].starts_with(not_run), "{texts:?}");
    assert!(results.iter().all(|r| r.2), "all are errors: {results:?}");
    let codes_of: Vec<String> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { call_id, result, .. } => {
                Some(format!("{call_id} {}", result.metadata.as_ref().unwrap()["code"].as_str().unwrap()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(codes_of[0], format!("c1 {}", codes::TOOL_DENIED));
    assert_eq!(codes_of[1], format!("c2 {}", codes::TOOL_NOT_FOUND));
    assert_eq!(codes_of[2], format!("c3 {}", codes::TOOL_ARGUMENT_TYPE_MISMATCH));
    assert_eq!(codes_of[3], format!("c4 {}", codes::JSON_NOT_OBJECT));
    assert_eq!(codes_of[4], format!("c5 {}", codes::TOOL_NOT_RUN));
}

#[tokio::test]
async fn a_denied_batch_answers_calls_that_could_not_run_with_their_own_error() {
    let (model, store, ran) = (Arc::new(Script::new(batch())), Arc::new(MemStore::new()), Arc::default());
    let (agent, approval_id) = frozen(model.clone(), store, &ran).await;
    agent.deny("s", &approval_id, "不要").await.unwrap();
    let events = EventLog::new();
    let out = agent.resume("s", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), arkagent::state::RunStatus::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "none of the batch ran");
    let state = agent.state("s").await.unwrap().unwrap();
    check(
        &tool_messages(&state.messages),
        &events,
        "error: not run: another call of the same batch was denied",
    );
    // The model reads the same.
    let sent = tool_messages(&model.requests()[1].messages);
    assert_eq!(sent, tool_messages(&state.messages));
}

#[tokio::test]
async fn a_dismissed_batch_answers_calls_that_could_not_run_with_their_own_error() {
    let (model, store, ran) = (Arc::new(Script::new(batch())), Arc::new(MemStore::new()), Arc::default());
    let (agent, _) = frozen(model.clone(), store, &ran).await;
    let events = EventLog::new();
    let out = agent.dismiss("s", "不要", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), arkagent::state::RunStatus::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "none of the batch ran");
    let state = agent.state("s").await.unwrap().unwrap();
    // A dismissal denies what is pending: the batch is answered as a denied one.
    check(
        &tool_messages(&state.messages),
        &events,
        "error: not run: another call of the same batch was denied",
    );
}
