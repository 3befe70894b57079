//! Loop detection inside a run (check list "循环检测", "不同参数不误判"), with a scripted model:
//! a bad configuration never reaches a run, the model's own calls are what is signed (a hook's
//! rewrite neither hides a loop nor makes one), short cycles are judged once per batch and need
//! three whole turns, the window survives restarts, and cancelling stops a slow LLM diagnosis.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::loop_detect::{DiagnosisSchedule, LoopDiagnoser, LoopDiagnosis};
use arkagent::provider::{ModelResponse, ToolChoice};
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{
    codes, AgentError, CancellationSignal, ChatMessage, RiskLevel, ToolCall, ToolDefinition, ToolRegistry,
    ToolResult,
};
use async_trait::async_trait;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, MemStore, Script};

/// Tools `a`, `b`, `c` (safe) and `s` (sensitive: needs approval); each answers "try again" and
/// counts its runs.
fn tools(ran: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, risk) in
        [("a", RiskLevel::Safe), ("b", RiskLevel::Safe), ("c", RiskLevel::Safe), ("s", RiskLevel::Sensitive)]
    {
        let ran = Arc::clone(ran);
        r.register(
            ToolDefinition::new(name, "a tool", json!({"type": "object"})).with_risk(risk),
            Arc::new(FnExecutor(move |_args, _ctx| {
                let ran = Arc::clone(&ran);
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolResult::error_text("temporarily unavailable, retry"))
                }
            })),
        )
        .unwrap();
    }
    r
}

struct Setup {
    model: Arc<Script>,
    store: Arc<MemStore>,
    ran: Arc<AtomicUsize>,
}

fn setup(script: Vec<ModelResponse>) -> (Setup, AgentBuilder) {
    let model = Arc::new(Script::new(script));
    let store = Arc::new(MemStore::new());
    let ran = Arc::new(AtomicUsize::new(0));
    let builder = AgentBuilder::new(model.clone(), store.clone()).tools(tools(&ran));
    (Setup { model, store, ran }, builder)
}

async fn run(agent: &Agent) -> Result<RunOutcome, AgentError> {
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await
}

/// The same batch `times` times (fresh ids each answer), then a final answer.
fn repeated(batch: &[(&str, &str)], times: usize) -> Vec<ModelResponse> {
    (0..times)
        .map(|round| {
            let ids: Vec<String> = (0..batch.len()).map(|i| format!("r{round}c{i}")).collect();
            let owned: Vec<(&str, &str, &str)> =
                batch.iter().zip(&ids).map(|((name, args), id)| (id.as_str(), *name, *args)).collect();
            calls(&owned)
        })
        .chain([answer("done")])
        .collect()
}

fn finished(out: &RunOutcome) -> (RunStatus, Option<&AgentError>) {
    match out {
        RunOutcome::Finished { status, error, .. } => (*status, error.as_ref()),
        other => panic!("not finished: {other:?}"),
    }
}

// --- configuration -----------------------------------------------------------------------------

/// Bad values, each with the field its error must name.
fn bad_configs() -> Vec<(AgentConfig, &'static str)> {
    let d = AgentConfig::default;
    vec![
        (AgentConfig { loop_window: 0, ..d() }, "loop_window"),
        (AgentConfig { loop_window: 1, ..d() }, "loop_window"),
        (AgentConfig { loop_window: 1001, ..d() }, "loop_window"),
        (AgentConfig { loop_window: 5000, ..d() }, "loop_window"),
        (AgentConfig { loop_max_cycle_period: 0, ..d() }, "loop_max_cycle_period"),
        (AgentConfig { loop_max_cycle_period: 4, ..d() }, "loop_max_cycle_period"),
        (AgentConfig { max_rounds: 0, ..d() }, "max_rounds"),
        (AgentConfig { tool_timeout: Duration::ZERO, ..d() }, "tool_timeout"),
        (AgentConfig { temperature: Some(f32::NAN), ..d() }, "temperature"),
        (AgentConfig { temperature: Some(2.5), ..d() }, "temperature"),
        (AgentConfig { temperature: Some(-0.1), ..d() }, "temperature"),
        (AgentConfig { max_tokens: Some(0), ..d() }, "max_tokens"),
        (AgentConfig { tool_choice: Some(ToolChoice::Function("nope".into())), ..d() }, "tool_choice"),
    ]
}

/// Before: a window of 1 was accepted, the tools ran, and the run ended `loop_detected`
/// (`config_invalid`) after the model's first answer; `max_rounds: 0` answered the fallback.
#[tokio::test]
async fn a_bad_config_fails_run_and_resume_before_any_model_request_or_tool() {
    for (config, field) in bad_configs() {
        let (s, builder) = setup(vec![calls(&[("c1", "a", "{}")]), answer("done")]);
        let agent = builder.config(config).build();
        let err = run(&agent).await.expect_err(field);
        assert_eq!(err.code, codes::CONFIG_INVALID, "{field}: {err}");
        assert!(err.message.contains(field), "{field}: {}", err.message);
        assert!(s.model.requests().is_empty(), "{field}: the model was asked");
        assert_eq!(s.ran.load(Ordering::SeqCst), 0, "{field}: a tool ran");
        assert!(s.store.load("s").await.unwrap().is_none(), "{field}: a session was written");
        let err = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(err.code, codes::CONFIG_INVALID, "{field}: resume: {err}");
    }
}

#[tokio::test]
async fn try_build_refuses_a_bad_config_and_names_the_field() {
    for (config, field) in bad_configs() {
        if field == "tool_choice" {
            // Tools may be registered after the build: checked when a run starts.
            continue;
        }
        let (_, builder) = setup(vec![]);
        let err = builder.config(config).try_build().expect_err(field);
        assert_eq!(err.code, codes::CONFIG_INVALID, "{field}");
        assert!(err.message.contains(field), "{field}: {}", err.message);
    }
    // The edges of the ranges are fine, and so is a tool choice naming a registered tool.
    let good = AgentConfig {
        loop_window: 2,
        loop_max_cycle_period: 1,
        max_rounds: 1,
        temperature: Some(2.0),
        max_tokens: Some(1),
        tool_timeout: Duration::from_millis(1),
        tool_choice: Some(ToolChoice::Function("a".into())),
        ..AgentConfig::default()
    };
    let (s, builder) = setup(vec![answer("hi")]);
    let agent = builder.config(good.clone()).try_build().unwrap();
    assert_eq!(finished(&run(&agent).await.unwrap()).0, RunStatus::Completed);
    assert_eq!(s.model.requests().len(), 1);
    assert!(AgentBuilder::new(s.model.clone(), s.store.clone())
        .config(AgentConfig { loop_window: 1000, ..good })
        .try_build()
        .is_ok());
}

// --- what is signed ----------------------------------------------------------------------------

/// Adds a fresh audit id to every call, as the spec's own hook example does.
struct AuditId(AtomicUsize);

#[async_trait]
impl AgentHook for AuditId {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let mut args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
        args["auditId"] = json!(n);
        BeforeToolCall::Proceed(Some(ToolCall { arguments: args.to_string(), ..call.clone() }))
    }
}

/// Rewrites every call to empty arguments.
struct Blank;

#[async_trait]
impl AgentHook for Blank {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        BeforeToolCall::Proceed(Some(ToolCall { arguments: "{}".into(), ..call.clone() }))
    }
}

/// P7. Before: the window held the rewritten calls, all different, and 9 identical calls of the
/// model completed.
#[tokio::test]
async fn a_hook_adding_an_audit_id_does_not_hide_the_models_loop() {
    let (s, builder) = setup(repeated(&[("a", r#"{"q":"x"}"#)], 9));
    let agent = builder.hook(Arc::new(AuditId(AtomicUsize::new(0)))).build();
    let out = run(&agent).await.unwrap();
    let (status, error) = finished(&out);
    assert_eq!(status, RunStatus::LoopDetected);
    assert_eq!(error.unwrap().code, codes::LOOP_DETECTED);
    assert_eq!(s.model.requests().len(), 5);
    let state = s.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.loop_window.last().map(String::as_str), Some(r#"a:{"q":"x"}"#));
}

#[tokio::test]
async fn a_hook_rewriting_to_identical_arguments_makes_no_loop() {
    let script: Vec<ModelResponse> = (0..8)
        .map(|i| calls(&[(&format!("c{i}"), "a", &format!(r#"{{"page":{i}}}"#))]))
        .chain([answer("done")])
        .collect();
    let (s, builder) = setup(script);
    let agent =
        builder.hook(Arc::new(Blank)).config(AgentConfig { max_rounds: 20, ..Default::default() }).build();
    let out = run(&agent).await.unwrap();
    assert_eq!(finished(&out).0, RunStatus::Completed, "{out:?}");
    assert_eq!(s.model.requests().len(), 9);
    assert_eq!(s.ran.load(Ordering::SeqCst), 8);
}

// --- short cycles --------------------------------------------------------------------------------

/// P2. Before: the second batch of three ended the run `loop_detected` mid-batch.
#[tokio::test]
async fn a_batch_of_three_retried_once_is_no_loop() {
    let (s, builder) = setup(repeated(&[("a", "{}"), ("b", "{}"), ("c", "{}")], 2));
    let out = run(&builder.build()).await.unwrap();
    assert_eq!(finished(&out).0, RunStatus::Completed, "{out:?}");
    assert_eq!(s.model.requests().len(), 3);
    assert_eq!(s.ran.load(Ordering::SeqCst), 6);
}

/// P2b. Before: `a,b,a,b,a` (the third batch's first call) was a cycle, though the model changed
/// course.
#[tokio::test]
async fn a_model_that_changes_course_is_no_loop() {
    let script = vec![
        calls(&[("x1", "a", "{}"), ("x2", "b", "{}")]),
        calls(&[("y1", "a", "{}"), ("y2", "b", "{}")]),
        calls(&[("z1", "a", "{}"), ("z2", "c", "{}")]),
        answer("ok"),
    ];
    let (s, builder) = setup(script);
    let out = run(&builder.build()).await.unwrap();
    assert_eq!(finished(&out).0, RunStatus::Completed, "{out:?}");
    assert_eq!(s.model.requests().len(), 4);
}

#[tokio::test]
async fn three_turns_of_a_batch_are_a_loop() {
    let (s, builder) = setup(repeated(&[("a", "{}"), ("b", "{}"), ("c", "{}")], 5));
    let out = run(&builder.build()).await.unwrap();
    let (status, error) = finished(&out);
    assert_eq!(status, RunStatus::LoopDetected);
    assert!(error.unwrap().message.contains("cycle of 3"), "{:?}", error);
    assert_eq!(s.model.requests().len(), 3);
    assert_eq!(s.ran.load(Ordering::SeqCst), 9, "the whole third batch ran before the verdict");
    // Turned off: the same script runs to its answer.
    let (s, builder) = setup(repeated(&[("a", "{}"), ("b", "{}"), ("c", "{}")], 5));
    let config = AgentConfig { loop_max_cycle_period: 1, ..AgentConfig::default() };
    let out = run(&builder.config(config).build()).await.unwrap();
    assert_eq!(finished(&out).0, RunStatus::Completed);
    assert_eq!(s.model.requests().len(), 6);
}

/// Each batch `[a, s]` waits for approval; each approval and resume happens in a "new process"
/// (a new agent over the same store). The third turn is a loop: the window was persisted.
/// (Also passed before the fixes: it guards the persisted window.)
#[tokio::test]
async fn the_window_survives_restarts_between_batches() {
    let store = Arc::new(MemStore::new());
    let ran = Arc::new(AtomicUsize::new(0));
    let batch = |round: usize| calls(&[(&format!("a{round}"), "a", "{}"), (&format!("s{round}"), "s", "{}")]);
    let agent_with = |script: Vec<ModelResponse>| {
        let model = Arc::new(Script::new(script));
        (AgentBuilder::new(model.clone(), store.clone()).tools(tools(&ran)).build(), model)
    };
    let (agent, _) = agent_with(vec![batch(0)]);
    let mut out = run(&agent).await.unwrap();
    for round in 1..=3 {
        let RunOutcome::Suspended { batch: pending } = &out else { panic!("round {round}: {out:?}") };
        let (agent, model) = agent_with(vec![batch(round), answer("done")]);
        agent.approve("s", &pending.items[0].approval_id).await.unwrap();
        out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        // Resuming runs the batch of the round before; the third turn ends the run before the
        // model is asked again.
        assert_eq!(model.requests().len(), if round < 3 { 1 } else { 0 }, "round {round}");
    }
    let (status, error) = finished(&out);
    assert_eq!(status, RunStatus::LoopDetected, "{out:?}");
    assert!(error.unwrap().message.contains("cycle of 2"));
    assert_eq!(ran.load(Ordering::SeqCst), 6);
    assert_eq!(store.load("s").await.unwrap().unwrap().status, RunStatus::LoopDetected);
}

/// A process killed after `a` of the batch `[a, b]` finished: the resumed run runs only `b`, but
/// the window counts the model's whole answer (the window is committed with the batch's end, so
/// nothing of it was counted before). Before: only `b` was signed and the third turn was missed.
#[tokio::test]
async fn a_batch_finished_after_a_restart_counts_the_whole_answer() {
    let (s, builder) = setup(vec![answer("never asked")]);
    let agent = builder.build();
    let mut state = AgentState::new("s");
    let answer_calls = vec![ToolCall::new("a3", "a", "{}"), ToolCall::new("b3", "b", "{}")];
    for event in [
        StateEvent::RunStarted { run_id: "r".into(), delegation: None },
        StateEvent::MessageAppended { message: ChatMessage::user("q") },
        StateEvent::LoopWindow { window: ["a:{}", "b:{}", "a:{}", "b:{}"].map(String::from).to_vec() },
        StateEvent::RoundStarted { round: 3 },
        StateEvent::MessageAppended {
            message: ChatMessage::Assistant {
                content: None,
                reasoning_content: None,
                tool_calls: answer_calls,
            },
        },
        StateEvent::ToolStarted { call_id: "a3".into(), name: "a".into(), worker_session: None },
        StateEvent::ToolFinished {
            call_id: "a3".into(),
            name: "a".into(),
            result: ToolResult::text("ok"),
            stop_requested: false,
            injected: Vec::new(),
        },
    ] {
        state.apply(&event);
    }
    s.store.save_snapshot(&state).await.unwrap();
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let (status, error) = finished(&out);
    assert_eq!(status, RunStatus::LoopDetected, "{out:?}");
    assert!(error.unwrap().message.contains("cycle of 2"));
    assert_eq!(s.ran.load(Ordering::SeqCst), 1, "only b ran again");
    assert!(s.model.requests().is_empty());
}

// --- cancelling a diagnosis ----------------------------------------------------------------------

/// A diagnosis that takes an hour; notes whether it finished or was dropped before.
struct SlowDiagnosis {
    finished: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl LoopDiagnoser for SlowDiagnosis {
    async fn diagnose(&self, _history: &[ChatMessage]) -> Result<LoopDiagnosis, AgentError> {
        let guard = DropFlag(Arc::clone(&self.dropped));
        tokio::time::sleep(Duration::from_secs(3600)).await;
        self.finished.store(true, Ordering::SeqCst);
        std::mem::forget(guard);
        Ok(LoopDiagnosis { is_loop: false, confidence: 0.0, reason: String::new(), usage: None })
    }
}

/// P6. Before: the run waited for the diagnosis to finish (an hour of the paused clock).
#[tokio::test(start_paused = true)]
async fn cancelling_during_a_diagnosis_drops_it() {
    let finished_flag = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let diagnoser = SlowDiagnosis { finished: Arc::clone(&finished_flag), dropped: Arc::clone(&dropped) };
    let schedule = DiagnosisSchedule { first_round: 1, every: 1, min_confidence: 0.8 };
    let (s, builder) = setup(vec![calls(&[("c1", "a", "{}")]), answer("never asked")]);
    let agent = builder.loop_diagnoser(Arc::new(diagnoser), schedule).build();
    let cancel = CancellationSignal::new();
    let canceller = cancel.clone();
    let started = tokio::time::Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        canceller.cancel("user");
    });
    let out = agent.run("s", "q", &EventLog::new(), &cancel).await.unwrap();
    assert_eq!(finished(&out).0, RunStatus::Cancelled);
    assert!(dropped.load(Ordering::SeqCst), "the diagnosis was not dropped");
    assert!(!finished_flag.load(Ordering::SeqCst), "the run waited for the diagnosis");
    assert!(started.elapsed() < Duration::from_secs(3600));
    assert_eq!(s.model.requests().len(), 1);
    // The batch's result was kept with the cancelled state.
    let state = s.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert!(state.messages.iter().any(|m| m.tool_call_id() == Some("c1")));
}
