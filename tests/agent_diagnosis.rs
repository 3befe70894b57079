//! The optional LLM loop diagnosis inside a run, asked through a [`ModelLoopDiagnoser`] on a
//! scripted model: what the diagnosis costs counts in the session's usage, and its schedule counts
//! the model's answers only.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome};
use arkagent::loop_detect::{DiagnosisSchedule, ModelLoopDiagnoser};
use arkagent::message::Usage;
use arkagent::provider::ModelResponse;
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::Arc;
use support::{answer, calls, MemStore, Script};

/// Tool `t` (safe), answering "ok".
fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("t", "a tool", json!({"type": "object"})),
        Arc::new(FnExecutor(|_args, _ctx| async move { Ok(ToolResult::text("ok")) })),
    )
    .unwrap();
    r
}

/// A diagnosis model's answer reporting `total` tokens (100 of them the completion's).
fn diagnosis(text: &str, total: u64) -> ModelResponse {
    ModelResponse {
        content: Some(text.into()),
        finish_reason: Some("stop".into()),
        usage: Some(Usage { prompt_tokens: total - 100, completion_tokens: 100, total_tokens: total }),
        ..ModelResponse::default()
    }
}

/// An agent on `script` that asks `diagnoser`'s model after every batch, from the first answer.
fn agent(script: Vec<ModelResponse>, diagnoser: &Arc<Script>, store: &Arc<MemStore>) -> Agent {
    let schedule = DiagnosisSchedule { first_round: 1, every: 1, min_confidence: 0.8 };
    AgentBuilder::new(Arc::new(Script::new(script)), store.clone())
        .tools(tools())
        .loop_diagnoser(Arc::new(ModelLoopDiagnoser::new(diagnoser.clone())), schedule)
        .build()
}

/// Before: the run's usage was the tool loop's alone (30 tokens here); the 1650 of the two
/// diagnoses were dropped.
#[tokio::test]
async fn the_tokens_of_a_diagnosis_count_in_the_sessions_usage() {
    let store = Arc::new(MemStore::new());
    // The second diagnosis cannot be read: no loop, but its tokens were spent all the same.
    let diagnoser = Arc::new(Script::new([
        diagnosis(r#"{"is_loop": false, "confidence": 0.1, "reason": "fine"}"#, 1100),
        diagnosis("I am not sure.", 550),
    ]));
    let script =
        vec![calls(&[("c1", "t", r#"{"i":1}"#)]), calls(&[("c2", "t", r#"{"i":2}"#)]), answer("done")];
    let agent = agent(script, &diagnoser, &store);
    let events = EventLog::new();
    let out = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(diagnoser.requests().len(), 2, "asked after each batch");
    // Two tool-call answers of 15 tokens (10 + 5), then the two diagnoses.
    let expected =
        Usage { prompt_tokens: 20 + 1000 + 450, completion_tokens: 10 + 200, total_tokens: 30 + 1650 };
    let RunOutcome::Finished { status, usage, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(usage, expected);
    let finished = events.events().into_iter().find_map(|e| match e {
        AgentEvent::RunFinished { usage, .. } => Some(usage),
        _ => None,
    });
    assert_eq!(finished, Some(expected), "run_finished tells the same usage");
    // Persisted like the rest of the session's usage.
    assert_eq!(store.load("s").await.unwrap().unwrap().usage, expected);
}

/// Before: the fixed answer a run that reached its round limit appended counted as a model
/// answer, so with `first_round` 3 the diagnosis was asked after the model's second answer.
#[tokio::test]
async fn the_round_limits_fallback_is_not_counted_as_a_model_answer() {
    let dir = tempfile::tempdir().unwrap();
    let verdict = r#"{"is_loop": true, "confidence": 0.99, "reason": "asked"}"#;
    let diagnoser = Arc::new(Script::new([diagnosis(verdict, 200)]));
    let schedule = DiagnosisSchedule { first_round: 3, every: 0, min_confidence: 0.8 };
    // One answer per run: each run reaches its limit of one round after its batch.
    let agent = |answer: ModelResponse| {
        AgentBuilder::new(Arc::new(Script::new([answer])), Arc::new(FileStore::new(dir.path())))
            .tools(tools())
            .config(AgentConfig { max_rounds: 1, ..AgentConfig::default() })
            .loop_diagnoser(Arc::new(ModelLoopDiagnoser::new(diagnoser.clone())), schedule)
            .build()
    };
    let status = |out: RunOutcome| match out {
        RunOutcome::Finished { status, .. } => status,
        o => panic!("{o:?}"),
    };
    for (i, question) in ["q1", "q2"].into_iter().enumerate() {
        let answer = calls(&[(&format!("c{i}"), "t", &format!(r#"{{"i":{i}}}"#))]);
        let out =
            agent(answer).run("s", question, &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(status(out), RunStatus::MaxRounds, "{question}");
        assert!(diagnoser.requests().is_empty(), "asked after the model's answer {}", i + 1);
    }
    // Two fallbacks in the history, counted in the saved state (each agent reloads it).
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!(state.fallback_answers, 2);
    let out = agent(calls(&[("c2", "t", r#"{"i":2}"#)]))
        .run("s", "q3", &EventLog::new(), &CancellationSignal::new())
        .await
        .unwrap();
    assert_eq!(status(out), RunStatus::LoopDetected, "asked after the model's third answer");
    assert_eq!(diagnoser.requests().len(), 1);
}
