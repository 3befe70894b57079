//! The `run_finished` event carries the error that ended the run: the same structured
//! `AgentError` (layer, code, message) as [`RunOutcome::Finished`]'s `error`, for a failed, an
//! aborted and a loop-detected run; a run that ended without one has no `error` key in the event's
//! JSON (the wire form ArkTS decodes). The finish reason such a run tells is its last model
//! request's: none when that request failed.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::provider::ScriptStep;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, ToolCall, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use support::{answer, calls, MemStore, Script};

fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("look", "a tool", json!({"type": "object"})),
        Arc::new(FnExecutor(|_args, _ctx| async { Ok(ToolResult::text("nothing yet")) })),
    )
    .unwrap();
    r
}

fn agent(steps: Vec<ScriptStep>, hook: Option<Arc<dyn AgentHook>>) -> Agent {
    let mut builder = AgentBuilder::new(Arc::new(Script::from_steps(steps)), Arc::new(MemStore::new()))
        .tools(tools())
        .config(AgentConfig { loop_window: 2, ..AgentConfig::default() });
    if let Some(hook) = hook {
        builder = builder.hook(hook);
    }
    builder.build()
}

/// Runs once; returns the outcome's error and the last event, which must be `RunFinished` with
/// the outcome's status.
async fn run(agent: &Agent) -> (RunStatus, Option<AgentError>, AgentEvent) {
    let log = EventLog::new();
    let out = agent.run("s", "hi", &log, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, error, .. } = out else { panic!("finished expected: {out:?}") };
    let last = log.events().pop().expect("events");
    assert!(matches!(&last, AgentEvent::RunFinished { status: s, .. } if *s == status), "{last:?}");
    (status, error, last)
}

fn event_error(event: &AgentEvent) -> Option<AgentError> {
    match event {
        AgentEvent::RunFinished { error, .. } => error.clone(),
        _ => None,
    }
}

#[tokio::test]
async fn a_failed_run_reports_its_error_in_the_event() {
    let e = AgentError::of(codes::PROVIDER_AUTH, "HTTP 401: bad key");
    let agent = agent(vec![ScriptStep::Fail(e.clone())], None);
    let (status, error, last) = run(&agent).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(error.as_ref(), Some(&e));
    assert_eq!(event_error(&last).as_ref(), Some(&e));
    // The wire form: the error as {layer, code, message}.
    let wire = serde_json::to_value(&last).unwrap();
    assert_eq!(
        wire["error"],
        json!({"layer": "provider", "code": "provider_auth", "message": "HTTP 401: bad key"})
    );
}

struct Abort;

#[async_trait]
impl AgentHook for Abort {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _d: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        BeforeToolCall::Abort("policy forbids it".into())
    }
}

#[tokio::test]
async fn an_aborted_run_reports_its_error_in_the_event() {
    let agent = agent(vec![calls(&[("c1", "look", "{}")]).into()], Some(Arc::new(Abort)));
    let (status, error, last) = run(&agent).await;
    assert_eq!(status, RunStatus::Aborted);
    let error = error.expect("an aborted run has an error");
    assert_eq!(error.code, codes::HOOK_ABORTED);
    assert_eq!(event_error(&last), Some(error));
}

#[tokio::test]
async fn a_loop_detected_run_reports_its_error_in_the_event() {
    let same = || ScriptStep::from(calls(&[("c", "look", r#"{"q":1}"#)]));
    let agent = agent(vec![same(), same(), same()], None);
    let (status, error, last) = run(&agent).await;
    assert_eq!(status, RunStatus::LoopDetected);
    let error = error.expect("a loop-detected run has an error");
    assert_eq!(error.code, codes::LOOP_DETECTED);
    assert_eq!(event_error(&last), Some(error));
    assert_eq!(serde_json::to_value(&last).unwrap()["error"]["code"], "loop_detected");
}

#[tokio::test]
async fn a_completed_run_has_no_error_key() {
    let agent = agent(vec![answer("done").into()], None);
    let (status, error, last) = run(&agent).await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(error, None);
    assert_eq!(event_error(&last), None);
    let wire = serde_json::to_value(&last).unwrap();
    assert!(wire.as_object().unwrap().get("error").is_none(), "{wire}");
}

/// The outcome's, the event's and the saved state's finish reason.
async fn finish_reasons(agent: &Agent, store: &MemStore) -> (RunStatus, [Option<String>; 3]) {
    let log = EventLog::new();
    let out = agent.run("s", "hi", &log, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, finish_reason, .. } = out else {
        panic!("finished expected: {out:?}")
    };
    let Some(AgentEvent::RunFinished { finish_reason: told, .. }) = log.events().pop() else {
        panic!("run_finished")
    };
    let saved = store.load("s").await.unwrap().unwrap().finish_reason;
    (status, [finish_reason, told, saved])
}

/// Before: round 2's request failed (HTTP 500) and the run told round 1's `tool_calls`, as if
/// the model had answered.
#[tokio::test]
async fn a_run_whose_last_model_request_failed_tells_no_finish_reason() {
    let store = Arc::new(MemStore::new());
    let steps = vec![
        calls(&[("c1", "look", "{}")]).into(),
        ScriptStep::Fail(AgentError::of(codes::PROVIDER_HTTP_STATUS, "HTTP 500: boom")),
    ];
    let agent = AgentBuilder::new(Arc::new(Script::from_steps(steps)), store.clone()).tools(tools()).build();
    let (status, reasons) = finish_reasons(&agent, &store).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(reasons, [None, None, None]);
}

/// A run that reached its round limit tells its last answer's reason: the model still asked for
/// tools (the fixed fallback is no model answer).
#[tokio::test]
async fn a_max_rounds_run_tells_its_last_answers_finish_reason() {
    let store = Arc::new(MemStore::new());
    let steps = vec![calls(&[("c1", "look", "{}")]).into()];
    let agent = AgentBuilder::new(Arc::new(Script::from_steps(steps)), store.clone())
        .tools(tools())
        .config(AgentConfig { max_rounds: 1, ..AgentConfig::default() })
        .build();
    let (status, reasons) = finish_reasons(&agent, &store).await;
    assert_eq!(status, RunStatus::MaxRounds);
    assert_eq!(reasons, [(); 3].map(|_| Some("tool_calls".to_string())));
}
