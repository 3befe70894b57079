//! The loop detector (check list "循环检测"): five identical signatures, different arguments,
//! key order, streamed updates, forced persistence of `loop_detected`, plus short cycles (three
//! whole turns, judged per batch), the persisted window and the LLM diagnosis with a scripted
//! model (never a network call). The runtime side is in `agent_loop.rs`.

mod common;

use arkagent::hook::{persist_is_forced, AgentHook, HookContext, HookPipeline, PersistDecision};
use arkagent::loop_detect::{
    call_signature, diagnose_loop, signature, DiagnosisSchedule, LoopCheck, LoopDetector, LoopDetectorConfig,
    LoopDiagnoser, LoopDiagnosis, LoopKind, ModelLoopDiagnoser, SIGNATURE_KEPT_BYTES,
};
use arkagent::provider::{ChatModel, ChatRequest, ModelEventStream, ModelResponse};
use arkagent::state::{AgentState, RunStatus, StateEvent};
use arkagent::{codes, AgentError, ChatMessage, ErrorLayer, ToolCall};
use async_trait::async_trait;
use common::CTX;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

fn detector(window: usize) -> LoopDetector {
    LoopDetector::new(&LoopDetectorConfig { window }).unwrap()
}

/// Records each signature under a fresh call id; returns the checks.
fn feed(d: &mut LoopDetector, signatures: &[&str]) -> Vec<bool> {
    signatures.iter().enumerate().map(|(i, s)| d.record(&format!("id{i}"), *s).is_loop()).collect()
}

#[test]
fn five_identical_signatures_are_a_loop_not_four() {
    let mut d = LoopDetector::new(&LoopDetectorConfig::default()).unwrap();
    let call = |i: usize| ToolCall::new(format!("c{i}"), "get_weather", r#"{"city":"北京","unit":"c"}"#);
    let checks: Vec<bool> = (0..5).map(|i| d.record_call(&call(i)).is_loop()).collect();
    assert_eq!(checks, [false, false, false, false, true]);
    let LoopCheck::Loop(finding) = d.check() else { panic!() };
    assert_eq!(
        finding.kind,
        LoopKind::Repeat { signature: r#"get_weather:{"city":"北京","unit":"c"}"#.into(), times: 5 }
    );
    let err = finding.to_error();
    assert_eq!((err.layer, err.code.as_ref()), (ErrorLayer::Runtime, codes::LOOP_DETECTED));
    assert!(err.message.contains("5 times"));
}

#[test]
fn different_arguments_never_trigger() {
    let mut d = detector(5);
    for i in 0..200 {
        let call = ToolCall::new(format!("c{i}"), "get_weather", format!(r#"{{"city":"c{i}"}}"#));
        assert!(!d.record_call(&call).is_loop(), "call {i}");
    }
    // Four identical then a different one: still no loop, and the run of identical ones restarts.
    let mut d = detector(5);
    assert_eq!(feed(&mut d, &["a", "a", "a", "a", "b", "a", "a", "a", "a"]), [false; 9]);
    assert!(d.record("last", "a").is_loop());
}

#[test]
fn key_order_and_spacing_give_the_same_signature() {
    let a = signature("get_weather", r#"{"city":"北京","unit":"c"}"#);
    assert_eq!(a, signature("get_weather", r#"{ "unit": "c", "city": "北京" }"#));
    assert_eq!(a, r#"get_weather:{"city":"北京","unit":"c"}"#);
    assert_ne!(a, signature("get_weather", r#"{"city":"上海","unit":"c"}"#));
    assert_ne!(a, signature("get_forecast", r#"{"city":"北京","unit":"c"}"#));
    // Arguments that are not JSON are used as they are.
    assert_eq!(signature("t", "{oops"), "t:{oops");
    // Keys are sorted at every level; arrays keep their order (seed 9.2).
    assert_eq!(
        signature("t", r#"{"o":{"z":1,"a":[{"y":2,"b":3}]}}"#),
        r#"t:{"o":{"a":[{"b":3,"y":2}],"z":1}}"#
    );
    assert_ne!(signature("t", r#"{"ids":[1,2]}"#), signature("t", r#"{"ids":[2,1]}"#));
    let mut d = detector(5);
    let orders = [r#"{"a":1,"b":[1,2]}"#, r#"{"b":[1,2],"a":1}"#];
    let checks: Vec<bool> = (0..5)
        .map(|i| d.record_call(&ToolCall::new(format!("c{i}"), "t", orders[i % 2])).is_loop())
        .collect();
    assert_eq!(checks, [false, false, false, false, true]);
}

/// A signature longer than `SIGNATURE_KEPT_BYTES` keeps its start and the SHA-256 of the whole:
/// the window is saved with the session, and arguments may take a megabyte each (five of them
/// made every commit of the session's snapshot five megabytes larger).
#[test]
fn a_long_signature_is_kept_as_its_start_and_its_digest() {
    let big = |c: &str| format!(r#"{{"text":"{}","tail":"{c}"}}"#, "x".repeat(100_000));
    let a = signature("write", &big("a"));
    assert!(a.len() < SIGNATURE_KEPT_BYTES, "{} bytes", a.len());
    assert!(a.starts_with(r#"write:{"tail":"a","text":"xxx"#), "{a}");
    assert!(a.contains("(100028 bytes, sha256:"), "{a}");
    // Key order still does not count; any other difference does, past the kept start too.
    let reordered = format!(r#"{{"tail":"a","text":"{}"}}"#, "x".repeat(100_000));
    assert_eq!(a, signature("write", &reordered));
    let late = format!(r#"{{"text":"{}y","tail":"a"}}"#, "x".repeat(99_999));
    assert_ne!(a, signature("write", &late));
    assert_ne!(a, signature("write", &big("b")));
    // Text that is not JSON too; a short signature stays whole.
    let raw = format!("{{{}", "z".repeat(1000));
    assert!(signature("t", &raw).len() < SIGNATURE_KEPT_BYTES);
    assert_eq!(signature("t", "{oops"), "t:{oops");
    // Five of them are a loop, as short ones are.
    let mut d = detector(5);
    let checks: Vec<bool> =
        (0..5).map(|i| d.record_call(&ToolCall::new(format!("c{i}"), "write", big("a"))).is_loop()).collect();
    assert_eq!(checks, [false, false, false, false, true]);
    assert!(d.window().iter().all(|s| s == &a));
    // A window saved whole (before compaction) compares equal with the new signatures.
    let whole =
        format!("write:{}", arkagent::json::canonicalize_str(&big("a"), &Default::default()).unwrap());
    let mut old = LoopDetector::from_window(&LoopDetectorConfig { window: 5 }, vec![whole; 4]).unwrap();
    assert!(old.record_call(&ToolCall::new("c9", "write", big("a"))).is_loop());
}

#[test]
fn streamed_updates_of_one_call_count_once() {
    let mut d = detector(5);
    // Four calls, each streamed in many growing pieces: four counts, no loop.
    let final_args = r#"{"city":"北京"}"#;
    for call in 0..4 {
        let id = format!("call_{call}");
        for end in 1..=final_args.len() {
            if final_args.is_char_boundary(end) {
                d.update(&id, signature("get_weather", &final_args[..end]));
            }
        }
        assert!(!d.commit(&id).is_loop());
    }
    assert_eq!(d.window().len(), 4);
    // A call still streaming is not counted; at commit only its final signature counts.
    d.update("call_4", "get_weather:{\"ci");
    assert!(!d.check().is_loop());
    assert_eq!(d.window().len(), 4);
    d.update("call_4", signature("get_weather", r#"{"city":"上海"}"#));
    assert!(!d.commit("call_4").is_loop(), "its final arguments differ: no loop");
    assert_eq!(d.window().len(), 5);
    assert!(!d.window().iter().any(|s| s == "get_weather:{\"ci"), "the partial signature never counted");
    // A commit of an id never updated changes nothing; a discarded stream is not counted.
    let before = d.window();
    assert!(!d.commit("nobody").is_loop());
    d.update("call_6", "x");
    d.discard("call_6");
    assert!(!d.commit("call_6").is_loop());
    assert_eq!(d.window(), before);
}

#[test]
fn the_same_call_streamed_five_times_is_a_loop() {
    let mut d = detector(5);
    let sig = signature("get_weather", r#"{"city":"北京"}"#);
    let mut checks = Vec::new();
    for call in 0..5 {
        let id = format!("call_{call}");
        for _ in 0..3 {
            d.update(&id, sig.clone());
        }
        checks.push(d.commit(&id).is_loop());
    }
    assert_eq!(checks, [false, false, false, false, true]);
}

/// Some providers reuse call ids across answers (`call_0` every round): once committed, an id
/// counts again, so a loop cannot hide behind a reused id.
#[test]
fn reused_call_ids_across_rounds_still_count() {
    let mut d = detector(5);
    let sig = signature("get_weather", r#"{"city":"北京"}"#);
    let mut checks = Vec::new();
    for _round in 0..5 {
        d.update("call_0", "get_weather:{");
        d.update("call_0", sig.clone());
        checks.push(d.commit("call_0").is_loop());
    }
    assert_eq!(checks, [false, false, false, false, true]);
    let mut d = detector(5);
    let checks: Vec<bool> = (0..5).map(|_| d.record("call_0", sig.clone()).is_loop()).collect();
    assert_eq!(checks, [false, false, false, false, true]);
}

/// A short cycle is a loop after three whole turns that fill the window; two turns are a retry.
#[test]
fn short_cycles_are_loops_after_three_turns() {
    let mut d = detector(5);
    assert_eq!(feed(&mut d, &["a", "b", "a", "b", "a", "b"]), [false, false, false, false, false, true]);
    let LoopCheck::Loop(f) = d.check() else { panic!() };
    assert_eq!(f.kind, LoopKind::Cycle { period: 2, signatures: vec!["a".into(), "b".into()] });
    assert_eq!(f.to_error().code, codes::LOOP_DETECTED);

    let mut d = detector(5);
    let mut expected = [false; 9];
    expected[8] = true;
    assert_eq!(feed(&mut d, &["a", "b", "c", "a", "b", "c", "a", "b", "c"]), expected);
    let LoopCheck::Loop(f) = d.check() else { panic!() };
    assert_eq!(f.kind, LoopKind::Cycle { period: 3, signatures: vec!["a".into(), "b".into(), "c".into()] });

    // Not cycles: two turns (a batch retried once), two and a half turns, a period of 4, a
    // broken pattern.
    assert_eq!(feed(&mut detector(5), &["a", "b", "c", "a", "b", "c"]), [false; 6]);
    assert_eq!(feed(&mut detector(5), &["a", "b", "a", "b", "a"]), [false; 5]);
    assert_eq!(feed(&mut detector(5), &["a", "b", "c", "a", "b", "c", "a", "b"]), [false; 8]);
    assert_eq!(
        feed(&mut detector(5), &["a", "b", "c", "d", "a", "b", "c", "d", "a", "b", "c", "d"]),
        [false; 12]
    );
    assert_eq!(
        feed(&mut detector(5), &["a", "b", "a", "c", "a", "b", "a", "c", "a", "b", "a", "c"]),
        [false; 12]
    );
    // With a longer window the cycle has to fill it.
    assert_eq!(feed(&mut detector(8), &["a", "b", "a", "b", "a", "b", "a"]), [false; 7]);
    assert!(detector(8).record_batch(["a", "b", "a", "b", "a", "b", "a", "b"]).is_loop());
    // Cycle detection can be turned off.
    let mut d = detector(5).with_max_cycle_period(1).unwrap();
    assert_eq!(feed(&mut d, &["a", "b", "a", "b", "a", "b", "a", "b"]), [false; 8]);
    assert_eq!(detector(5).with_max_cycle_period(4).unwrap_err().code, codes::CONFIG_INVALID);
    assert_eq!(detector(5).with_max_cycle_period(0).unwrap_err().code, codes::CONFIG_INVALID);
    // Only periods up to the maximum: with 2, a cycle of 3 is no loop.
    let mut d = detector(5).with_max_cycle_period(2).unwrap();
    assert_eq!(feed(&mut d, &["a", "b", "c", "a", "b", "c", "a", "b", "c"]), [false; 9]);
}

/// The runtime counts whole answers: batches `[a,b] [a,b] [a,c]` changed course (no cycle, though
/// the calls up to the third batch's first read `a,b,a,b,a`), a batch of three retried once is no
/// loop, three turns are.
#[test]
fn batches_are_judged_whole() {
    let mut d = detector(5);
    let checks: Vec<bool> =
        [["a", "b"], ["a", "b"], ["a", "c"]].iter().map(|batch| d.record_batch(*batch).is_loop()).collect();
    assert_eq!(checks, [false; 3]);
    let mut d = detector(5);
    let abc = ["a:{}", "b:{}", "c:{}"];
    let checks: Vec<bool> = (0..3).map(|_| d.record_batch(abc).is_loop()).collect();
    assert_eq!(checks, [false, false, true]);
    let LoopCheck::Loop(f) = d.check() else { panic!() };
    assert!(f.message().contains("a cycle of 3 calls repeating: a:{} -> b:{} -> c:{}"), "{}", f.message());
    // The same call five times in one answer: a loop, found mid-batch.
    assert!(detector(5).record_batch(["x"; 5]).is_loop());
}

#[test]
fn window_is_configurable_and_validated() {
    let mut d = detector(3);
    assert_eq!(feed(&mut d, &["a", "a", "a"]), [false, false, true]);
    for bad in [0, 1, 1001] {
        let err = LoopDetector::new(&LoopDetectorConfig { window: bad }).unwrap_err();
        assert_eq!((err.layer, err.code.as_ref()), (ErrorLayer::Config, codes::CONFIG_INVALID));
    }
    let cfg: LoopDetectorConfig = serde_json::from_str(r#"{"window":7}"#).unwrap();
    assert_eq!(cfg.window, 7);
}

/// The window goes into `AgentState::loop_window` and a resumed run keeps counting.
#[test]
fn the_window_survives_a_restart() {
    let cfg = LoopDetectorConfig::default();
    let mut d = LoopDetector::new(&cfg).unwrap();
    assert_eq!(feed(&mut d, &["s", "s", "s"]), [false; 3]);
    let mut state = AgentState::new("s1");
    state.apply(&StateEvent::LoopWindow { window: d.window() });
    let saved = serde_json::to_string(&state).unwrap();
    let reloaded: AgentState = serde_json::from_str(&saved).unwrap();
    assert_eq!(reloaded.loop_window, ["s", "s", "s"]);
    let mut resumed = LoopDetector::from_window(&cfg, reloaded.loop_window).unwrap();
    assert!(!resumed.record("n1", "s").is_loop());
    assert!(resumed.record("n2", "s").is_loop());
    // An over-long persisted window keeps only what the checks need (three turns of a cycle of 3).
    let long: Vec<String> = (0..50).map(|i| format!("x{i}")).collect();
    assert_eq!(LoopDetector::from_window(&cfg, long).unwrap().window().len(), 9);
    // A cycle that began before the restart is still found after it.
    let mut before = LoopDetector::new(&cfg).unwrap();
    assert!(!before.record_batch(["a", "b"]).is_loop());
    assert!(!before.record_batch(["a", "b"]).is_loop());
    let mut after = LoopDetector::from_window(&cfg, before.window()).unwrap();
    assert!(after.record_batch(["a", "b"]).is_loop());
    resumed.reset();
    assert!(resumed.window().is_empty());
}

/// Check list: "loop_detected 终态强制持久化" — a hook asking to skip the save cannot skip it.
#[tokio::test]
async fn loop_detected_is_persisted_even_when_a_hook_asks_to_skip() {
    struct SkipAll;
    #[async_trait]
    impl AgentHook for SkipAll {
        async fn before_persist_state(&self, _: &HookContext<'_>, _: &AgentState) -> PersistDecision {
            PersistDecision::Skip
        }
    }
    let pipeline = HookPipeline::with_hooks(vec![Arc::new(SkipAll)]);
    let mut state = AgentState::new("s1");
    state.apply(&StateEvent::RunStarted { run_id: "run-1".into(), delegation: None });
    assert_eq!(
        pipeline.before_persist_state(&CTX, &state, persist_is_forced(state.status)).await,
        PersistDecision::Skip
    );
    state.apply(&StateEvent::StatusChanged {
        status: RunStatus::LoopDetected,
        finish_reason: None,
        error: None,
    });
    assert_eq!(
        pipeline.before_persist_state(&CTX, &state, persist_is_forced(state.status)).await,
        PersistDecision::Persist
    );
}

// --- LLM diagnosis, with a scripted model -----------------------------------------------------

/// A model that answers from a script and records what it was asked.
struct ScriptedModel {
    answers: Mutex<VecDeque<Result<ModelResponse, AgentError>>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    fn new(answers: Vec<Result<&str, AgentError>>) -> Arc<Self> {
        let answers = answers
            .into_iter()
            .map(|a| {
                a.map(|text| ModelResponse { content: Some(text.to_string()), ..ModelResponse::default() })
            })
            .collect();
        Arc::new(ScriptedModel { answers: Mutex::new(answers), requests: Mutex::new(Vec::new()) })
    }
    fn asked(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        self.requests.lock().unwrap().push(request.clone());
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Err(AgentError::of(codes::PROVIDER_SCRIPT_EXHAUSTED, "no more answers")))
    }
    async fn stream(&self, _request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        Err(AgentError::of(codes::PROVIDER_SCRIPT_EXHAUSTED, "not scripted"))
    }
}

fn history() -> Vec<ChatMessage> {
    let call = ToolCall::new("c1", "get_weather", r#"{"city":"北京"}"#);
    vec![
        ChatMessage::user("weather?"),
        ChatMessage::Assistant { content: None, reasoning_content: None, tool_calls: vec![call] },
        ChatMessage::Tool {
            tool_call_id: "c1".into(),
            name: "get_weather".into(),
            content: "sunny".into(),
            is_error: false,
        },
    ]
}

#[tokio::test]
async fn diagnosis_is_asked_from_round_30_then_every_10() {
    let model = ScriptedModel::new(vec![
        Ok(r#"{"is_loop": true, "confidence": 0.95, "reason": "same weather query again and again"}"#),
        Ok(r#"{"is_loop": true, "confidence": 0.95, "reason": "again"}"#),
    ]);
    let diagnoser = ModelLoopDiagnoser::new(model.clone());
    let schedule = DiagnosisSchedule::default();
    let h = history();
    for round in 0..30 {
        assert!(!diagnose_loop(&diagnoser, &schedule, round, &h).await.0.is_loop());
    }
    assert_eq!(model.asked(), 0, "never asked before round 30");
    let (LoopCheck::Loop(finding), _) = diagnose_loop(&diagnoser, &schedule, 30, &h).await else { panic!() };
    assert_eq!(
        finding.kind,
        LoopKind::Diagnosed { confidence: 0.95, reason: "same weather query again and again".into() }
    );
    assert_eq!(finding.to_error().code, codes::LOOP_DETECTED);
    for round in 31..40 {
        assert!(!diagnose_loop(&diagnoser, &schedule, round, &h).await.0.is_loop());
    }
    assert_eq!(model.asked(), 1);
    assert!(diagnose_loop(&diagnoser, &schedule, 40, &h).await.0.is_loop());
    assert_eq!(model.asked(), 2);

    // What the model was shown: the prompt, then the transcript with the call and result; no tools.
    let request = model.requests.lock().unwrap()[0].clone();
    assert!(request.tools.is_empty());
    assert_eq!(request.messages.len(), 2);
    let ChatMessage::System { content } = &request.messages[0] else { panic!() };
    assert!(content.contains("Loop Diagnosis Expert") && content.contains("is_loop"));
    let ChatMessage::User { content } = &request.messages[1] else { panic!() };
    assert!(content.contains(r#"[call get_weather({"city":"北京"})]"#), "{content}");
    assert!(content.contains("tool get_weather result: sunny"), "{content}");
    // No temperature unless asked for: some models refuse any but their default.
    assert_eq!(request.temperature, None);
    let steady = ModelLoopDiagnoser::new(model.clone()).with_temperature(Some(0.0));
    assert_eq!(steady.request(&h).temperature, Some(0.0));
}

/// Before: a diagnosis request had no token limit whatever the agent's was.
#[tokio::test]
async fn a_diagnosis_asks_within_the_token_limit_it_is_given() {
    let model = ScriptedModel::new(vec![Ok(r#"{"is_loop": false, "confidence": 0.2}"#)]);
    assert_eq!(ModelLoopDiagnoser::new(model.clone()).request(&history()).max_tokens, None);
    let capped = ModelLoopDiagnoser::new(model.clone()).with_max_tokens(Some(256));
    let schedule = DiagnosisSchedule { first_round: 1, every: 1, min_confidence: 0.8 };
    assert!(!diagnose_loop(&capped, &schedule, 1, &history()).await.0.is_loop());
    assert_eq!(model.requests.lock().unwrap()[0].max_tokens, Some(256), "sent with the request");
}

#[tokio::test]
async fn only_a_confident_loop_counts_and_failures_are_no_loop() {
    let answers = vec![
        Ok(r#"{"is_loop": true, "confidence": 0.8, "reason": "exactly the threshold"}"#),
        Ok(r#"{"is_loop": true, "confidence": 0.5}"#),
        Ok(r#"{"is_loop": false, "confidence": 0.99, "reason": "making progress"}"#),
        Ok("I think the agent is looping."),
        Ok(r#"{"is_loop": "yes", "confidence": 0.9}"#),
        Ok(r#"{"is_loop": true, "confidence": 9}"#),
        Err(AgentError::of(codes::PROVIDER_TIMEOUT, "slow")),
        Ok("```json\n{\"is_loop\": true, \"confidence\": 0.81}\n```"),
    ];
    let n = answers.len();
    let model = ScriptedModel::new(answers);
    let diagnoser = ModelLoopDiagnoser::new(model.clone());
    let schedule = DiagnosisSchedule { first_round: 1, every: 1, min_confidence: 0.8 };
    let mut checks = Vec::new();
    for round in 1..=n as u32 {
        checks.push(diagnose_loop(&diagnoser, &schedule, round, &history()).await.0.is_loop());
    }
    assert_eq!(checks, [false, false, false, false, false, false, false, true]);
    assert_eq!(model.asked(), n);
}

/// Any `LoopDiagnoser` works, not only a model.
#[tokio::test]
async fn a_custom_diagnoser_plugs_in() {
    struct Rule;
    #[async_trait]
    impl LoopDiagnoser for Rule {
        async fn diagnose(&self, history: &[ChatMessage]) -> Result<LoopDiagnosis, AgentError> {
            let calls = history.iter().flat_map(|m| m.tool_calls()).map(call_signature).collect::<Vec<_>>();
            let same = calls.windows(2).all(|w| w[0] == w[1]) && calls.len() > 1;
            Ok(LoopDiagnosis {
                is_loop: same,
                confidence: if same { 0.9 } else { 0.1 },
                reason: "rule".into(),
                usage: None,
            })
        }
    }
    let schedule = DiagnosisSchedule::default();
    let mut h = history();
    assert!(!diagnose_loop(&Rule, &schedule, 30, &h).await.0.is_loop());
    h.extend(history());
    assert!(diagnose_loop(&Rule, &schedule, 30, &h).await.0.is_loop());
}
