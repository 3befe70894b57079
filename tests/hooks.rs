//! The hook pipeline (check list "Hook"): serial order, short-circuits, call-id preservation,
//! injected messages, how two rewriting hooks compose, forced persistence, panicking hooks.

mod common;

use arkagent::approval::{CallDisposition, DefaultApprovalPolicy};
use arkagent::hook::{
    persist_is_forced, AfterControl, AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall,
    BeforeToolCallOutcome, HookContext, HookPipeline, PersistDecision,
};
use arkagent::provider::{ChatRequest, ModelResponse};
use arkagent::state::{AgentState, RunStatus};
use arkagent::{codes, AgentError, ChatMessage, ErrorLayer, RiskLevel, ToolCall, ToolDefinition, ToolResult};
use async_trait::async_trait;
use common::{code_of, CTX};
use serde_json::json;
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

/// A hook scripted by closures, logging `<name>:<event>` and what it saw.
struct Scripted {
    name: &'static str,
    log: Log,
    before: Box<dyn Fn(&ToolCall) -> BeforeToolCall + Send + Sync>,
    after: Box<dyn Fn(&ToolResult) -> AfterToolCall + Send + Sync>,
    persist: PersistDecision,
}

impl Scripted {
    fn new(name: &'static str, log: &Log) -> Self {
        Scripted {
            name,
            log: log.clone(),
            before: Box::new(|_| BeforeToolCall::Proceed(None)),
            after: Box::new(|_| AfterToolCall::default()),
            persist: PersistDecision::Persist,
        }
    }
    fn before(mut self, f: impl Fn(&ToolCall) -> BeforeToolCall + Send + Sync + 'static) -> Self {
        self.before = Box::new(f);
        self
    }
    fn after(mut self, f: impl Fn(&ToolResult) -> AfterToolCall + Send + Sync + 'static) -> Self {
        self.after = Box::new(f);
        self
    }
    fn persist(mut self, p: PersistDecision) -> Self {
        self.persist = p;
        self
    }
    fn note(&self, what: String) {
        self.log.lock().unwrap().push(format!("{}:{what}", self.name));
    }
}

#[async_trait]
impl AgentHook for Scripted {
    async fn on_run_start(&self, ctx: &HookContext<'_>) {
        self.note(format!("run_start {}", ctx.run_id));
    }
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        call: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        self.note(format!("before {}", call.arguments));
        (self.before)(call)
    }
    async fn after_tool_call(&self, _: &HookContext<'_>, _: &ToolCall, result: &ToolResult) -> AfterToolCall {
        self.note(format!("after {}", result.to_model_text()));
        (self.after)(result)
    }
    async fn before_persist_state(&self, _: &HookContext<'_>, _: &AgentState) -> PersistDecision {
        self.note("persist".into());
        self.persist
    }
    async fn before_model_call(&self, ctx: &HookContext<'_>, request: &ChatRequest) {
        self.note(format!("model_call round {} messages {}", ctx.round, request.messages.len()));
    }
    async fn after_model_response(&self, _: &HookContext<'_>, response: &ModelResponse) {
        self.note(format!("model_response {}", response.tool_calls.len()));
    }
    async fn on_run_end(&self, _: &HookContext<'_>, status: RunStatus, text: Option<&str>) {
        self.note(format!("run_end {status:?} {}", text.unwrap_or("")));
    }
    async fn on_error(&self, _: &HookContext<'_>, error: &AgentError) {
        self.note(format!("error {}", error.code));
    }
}

fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

fn pipeline(hooks: Vec<Scripted>) -> HookPipeline {
    HookPipeline::with_hooks(hooks.into_iter().map(|h| Arc::new(h) as Arc<dyn AgentHook>).collect())
}

fn call() -> ToolCall {
    ToolCall::new("call_1", "update_note", r#"{"note":"hi"}"#)
}

#[tokio::test]
async fn before_tool_call_runs_hooks_serially_in_registration_order() {
    let l = log();
    let p = pipeline(vec![Scripted::new("a", &l), Scripted::new("b", &l), Scripted::new("c", &l)]);
    let out = p.before_tool_call(&CTX, call(), None).await;
    assert_eq!(out, BeforeToolCallOutcome::Proceed(call()));
    assert_eq!(
        entries(&l),
        [r#"a:before {"note":"hi"}"#, r#"b:before {"note":"hi"}"#, r#"c:before {"note":"hi"}"#]
    );
}

#[tokio::test]
async fn two_rewrites_compose_the_second_sees_the_first() {
    let l = log();
    let p = pipeline(vec![
        Scripted::new("audit", &l).before(|c| {
            // Adds a field: the rewrite replaces the whole arguments text.
            let mut v: serde_json::Value = serde_json::from_str(&c.arguments).unwrap();
            v["audit_id"] = json!("x1");
            BeforeToolCall::Proceed(Some(c.with_arguments(v.to_string())))
        }),
        Scripted::new("upper", &l)
            .before(|c| BeforeToolCall::Proceed(Some(c.with_arguments(c.arguments.replace("hi", "HI"))))),
        Scripted::new("watch", &l),
    ]);
    let out = p.before_tool_call(&CTX, call(), None).await;
    let expected = call().with_arguments(r#"{"audit_id":"x1","note":"HI"}"#);
    assert_eq!(out, BeforeToolCallOutcome::Proceed(expected));
    assert_eq!(
        entries(&l),
        [
            r#"audit:before {"note":"hi"}"#,
            r#"upper:before {"audit_id":"x1","note":"hi"}"#,
            r#"watch:before {"audit_id":"x1","note":"HI"}"#
        ]
    );
}

#[tokio::test]
async fn an_empty_object_is_a_rewrite_and_none_is_no_change() {
    let l = log();
    let p = pipeline(vec![
        Scripted::new("strip", &l).before(|c| BeforeToolCall::Proceed(Some(c.with_arguments("{}")))),
        Scripted::new("keep", &l), // Proceed(None): no change
    ]);
    let out = p.before_tool_call(&CTX, call(), None).await;
    assert_eq!(out, BeforeToolCallOutcome::Proceed(call().with_arguments("{}")));
    assert_eq!(entries(&l)[1], "keep:before {}", "the next hook sees the empty object");
}

#[tokio::test]
async fn the_first_short_circuit_wins_and_later_hooks_are_not_called() {
    for (decision, expect) in [
        (BeforeToolCall::Abort("policy forbids".into()), "abort"),
        (BeforeToolCall::Deny(ToolResult::error_text("synthetic")), "deny"),
        (BeforeToolCall::Defer("ask the user".into()), "defer"),
    ] {
        let l = log();
        let d = decision.clone();
        let p = pipeline(vec![
            Scripted::new("rewrite", &l)
                .before(|c| BeforeToolCall::Proceed(Some(c.with_arguments(r#"{"x":1}"#)))),
            Scripted::new("stop", &l).before(move |_| d.clone()),
            Scripted::new("never", &l).before(|_| BeforeToolCall::Abort("must not be reached".into())),
        ]);
        let out = p.before_tool_call(&CTX, call(), None).await;
        assert_eq!(entries(&l).len(), 2, "{expect}: third hook called: {:?}", entries(&l));
        let rewritten = call().with_arguments(r#"{"x":1}"#);
        match (expect, out) {
            ("abort", BeforeToolCallOutcome::Abort(e)) => {
                assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Runtime, codes::HOOK_ABORTED));
                assert!(e.message.contains("policy forbids"));
            }
            ("deny", BeforeToolCallOutcome::Deny { call, result }) => {
                assert_eq!(call, rewritten);
                assert_eq!(result.to_model_text(), "synthetic");
            }
            ("defer", BeforeToolCallOutcome::Defer { call, reason }) => {
                assert_eq!((call, reason.as_str()), (rewritten, "ask the user"));
            }
            (e, other) => panic!("{e}: got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_rewrite_changing_the_call_id_is_refused_and_the_id_is_preserved() {
    let l = log();
    let p = pipeline(vec![
        Scripted::new("ok", &l)
            .before(|c| BeforeToolCall::Proceed(Some(c.with_arguments(r#"{"note":"ok"}"#)))),
        Scripted::new("thief", &l).before(|c| {
            BeforeToolCall::Proceed(Some(ToolCall::new("call_other", &c.name, r#"{"note":"evil"}"#)))
        }),
        Scripted::new("never", &l),
    ]);
    let out = p.before_tool_call(&CTX, call(), None).await;
    let BeforeToolCallOutcome::Refused { call: kept, error } = out.clone() else { panic!("got {out:?}") };
    assert_eq!(kept, call().with_arguments(r#"{"note":"ok"}"#), "none of the refused rewrite applies");
    assert_eq!((error.layer, error.code.as_ref()), (ErrorLayer::Runtime, codes::HOOK_CALL_ID_CHANGED));
    assert_eq!(entries(&l).len(), 2);
    // The call does not run: it is answered with the error, under its original id.
    let input = out.into_batch_input(&DefaultApprovalPolicy, None).unwrap();
    assert_eq!(input.call.id, "call_1");
    let CallDisposition::Answer(result) = input.disposition else { panic!() };
    assert!(result.is_error);
    assert_eq!(code_of(&result).as_deref(), Some(codes::HOOK_CALL_ID_CHANGED));
}

#[tokio::test]
async fn a_rewrite_changing_the_tool_is_refused() {
    let l = log();
    let p = pipeline(vec![Scripted::new("redirect", &l)
        .before(|c| BeforeToolCall::Proceed(Some(ToolCall::new(&c.id, "delete_all", "{}"))))]);
    let BeforeToolCallOutcome::Refused { call: kept, error } = p.before_tool_call(&CTX, call(), None).await
    else {
        panic!()
    };
    assert_eq!(kept, call());
    assert_eq!(error.code, codes::HOOK_CALL_NAME_CHANGED);
}

#[tokio::test]
async fn outcomes_combine_with_the_policy() {
    let def =
        ToolDefinition::new("update_note", "d", json!({"type":"object"})).with_risk(RiskLevel::Sensitive);
    let safe = ToolDefinition::new("update_note", "d", json!({"type":"object"}));
    let p = DefaultApprovalPolicy;
    let proceed = BeforeToolCallOutcome::Proceed(call());
    assert_eq!(proceed.clone().into_batch_input(&p, Some(&safe)).unwrap().disposition, CallDisposition::Run);
    let input = proceed.into_batch_input(&p, Some(&def)).unwrap();
    assert_eq!(input.risk_level, RiskLevel::Sensitive);
    assert!(matches!(input.disposition, CallDisposition::Confirm(_)));
    let defer = BeforeToolCallOutcome::Defer { call: call(), reason: "hook asks".into() };
    assert_eq!(
        defer.into_batch_input(&p, Some(&safe)).unwrap().disposition,
        CallDisposition::Confirm("hook asks".into())
    );
    // A defer without a reason: the approval dialog still says what is asked.
    for reason in ["", "  "] {
        let defer = BeforeToolCallOutcome::Defer { call: call(), reason: reason.into() };
        assert_eq!(
            defer.into_batch_input(&p, Some(&safe)).unwrap().disposition,
            CallDisposition::Confirm(format!("A hook asks to confirm tool \"{}\"", call().name))
        );
    }
    let abort = BeforeToolCallOutcome::Abort(AgentError::of(codes::HOOK_ABORTED, "x"));
    assert_eq!(abort.into_batch_input(&p, None).unwrap_err().code, codes::HOOK_ABORTED);
}

#[tokio::test]
async fn after_tool_call_chains_rewrites_and_accumulates_injected_messages() {
    let l = log();
    let p = pipeline(vec![
        Scripted::new("a", &l).after(|r| AfterToolCall {
            action: AfterToolCallAction::Proceed(Some(ToolResult::text(format!("{} +a", r.to_model_text())))),
            inject: vec![ChatMessage::system("from a")],
        }),
        Scripted::new("b", &l).after(|r| AfterToolCall {
            action: AfterToolCallAction::Proceed(Some(ToolResult::text(format!("{} +b", r.to_model_text())))),
            inject: vec![ChatMessage::system("from b 1"), ChatMessage::user("from b 2")],
        }),
        Scripted::new("c", &l),
    ]);
    let out = p.after_tool_call(&CTX, &call(), ToolResult::text("done")).await;
    assert_eq!(out.result, ToolResult::text("done +a +b"));
    assert_eq!(out.control, AfterControl::Continue);
    assert_eq!(
        out.inject,
        vec![ChatMessage::system("from a"), ChatMessage::system("from b 1"), ChatMessage::user("from b 2")]
    );
    assert_eq!(entries(&l), ["a:after done", "b:after done +a", "c:after done +a +b"]);
}

#[tokio::test]
async fn after_stop_and_abort_short_circuit() {
    let l = log();
    let p = pipeline(vec![
        Scripted::new("a", &l).after(|_| AfterToolCall {
            action: AfterToolCallAction::Stop,
            inject: vec![ChatMessage::system("stopping")],
        }),
        Scripted::new("never", &l).after(|_| AfterToolCall {
            action: AfterToolCallAction::Abort("x".into()),
            inject: vec![ChatMessage::system("never")],
        }),
    ]);
    let out = p.after_tool_call(&CTX, &call(), ToolResult::text("done")).await;
    assert_eq!(out.control, AfterControl::Stop);
    assert_eq!(out.result, ToolResult::text("done"), "stop keeps the result");
    assert_eq!(out.inject, vec![ChatMessage::system("stopping")]);
    assert_eq!(entries(&l).len(), 1);

    let l = log();
    let p = pipeline(vec![
        Scripted::new("a", &l)
            .after(|_| AfterToolCall { action: AfterToolCallAction::Abort("leak".into()), inject: vec![] }),
        Scripted::new("never", &l),
    ]);
    let out = p.after_tool_call(&CTX, &call(), ToolResult::text("done")).await;
    let AfterControl::Abort(e) = out.control else { panic!() };
    assert_eq!(e.code, codes::HOOK_ABORTED);
    assert!(e.message.contains("leak"));
    assert_eq!(entries(&l).len(), 1);
}

/// Only user and system messages can be injected: an assistant message would put words in the
/// model's mouth, a tool message would answer no call. The message names the role with its article.
#[tokio::test]
async fn injecting_an_assistant_or_tool_message_fails_the_hook() {
    let injects = |message: ChatMessage| {
        let l = log();
        let m = message.clone();
        let p = pipeline(vec![Scripted::new("a", &l).after(move |_| AfterToolCall {
            action: AfterToolCallAction::Proceed(None),
            inject: vec![m.clone()],
        })]);
        async move { p.after_tool_call(&CTX, &call(), ToolResult::text("done")).await }
    };
    let tool = ChatMessage::Tool {
        tool_call_id: "call_1".into(),
        name: "update_note".into(),
        content: "x".into(),
        is_error: false,
    };
    for (message, wanted) in [
        (ChatMessage::assistant_text("sure"), "hook #0 injected an assistant message after call call_1"),
        (tool, "hook #0 injected a tool message after call call_1"),
    ] {
        let out = injects(message).await;
        let AfterControl::Abort(e) = out.control else { panic!("{:?}", out.control) };
        assert_eq!(e.code, codes::HOOK_FAILED);
        assert_eq!(e.message, format!("{wanted}: only user and system messages can be injected"));
        assert!(out.inject.is_empty());
    }
}

#[tokio::test]
async fn persistence_can_be_skipped_except_for_forced_states() {
    let l = log();
    let p = pipeline(vec![Scripted::new("a", &l).persist(PersistDecision::Skip), Scripted::new("b", &l)]);
    let state = AgentState::new("s1");
    assert_eq!(p.before_persist_state(&CTX, &state, false).await, PersistDecision::Skip);
    assert_eq!(p.before_persist_state(&CTX, &state, true).await, PersistDecision::Persist);
    assert_eq!(entries(&l), ["a:persist", "b:persist", "a:persist", "b:persist"], "every hook is asked");
    let quiet = pipeline(vec![Scripted::new("a", &l)]);
    assert_eq!(quiet.before_persist_state(&CTX, &state, false).await, PersistDecision::Persist);

    for status in [
        RunStatus::Completed,
        RunStatus::Cancelled,
        RunStatus::Failed,
        RunStatus::LoopDetected,
        RunStatus::Aborted,
        RunStatus::MaxRounds,
        RunStatus::AwaitingApproval,
    ] {
        assert!(persist_is_forced(status), "{status:?}");
    }
    assert!(!persist_is_forced(RunStatus::Running) && !persist_is_forced(RunStatus::Idle));
}

#[tokio::test]
async fn notifications_reach_every_hook_in_order() {
    let l = log();
    let p = pipeline(vec![Scripted::new("a", &l), Scripted::new("b", &l)]);
    p.on_run_start(&CTX).await.unwrap();
    let request = ChatRequest::new(vec![ChatMessage::user("hi")].into(), Vec::new().into());
    p.before_model_call(&CTX, &request).await.unwrap();
    let response = ModelResponse { tool_calls: vec![call()], ..ModelResponse::default() };
    p.after_model_response(&CTX, &response).await.unwrap();
    p.on_run_end(&CTX, RunStatus::Completed, Some("bye")).await.unwrap();
    p.on_error(&CTX, &AgentError::of(codes::MAX_ROUNDS, "10")).await.unwrap();
    assert_eq!(
        entries(&l),
        [
            "a:run_start run-1",
            "b:run_start run-1",
            "a:model_call round 1 messages 1",
            "b:model_call round 1 messages 1",
            "a:model_response 1",
            "b:model_response 1",
            "a:run_end Completed bye",
            "b:run_end Completed bye",
            "a:error max_rounds",
            "b:error max_rounds"
        ]
    );
}

struct Panics;
#[async_trait]
impl AgentHook for Panics {
    async fn on_run_start(&self, _: &HookContext<'_>) {
        panic!("hook bug");
    }
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        _: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        panic!("hook bug");
    }
    async fn after_tool_call(&self, _: &HookContext<'_>, _: &ToolCall, _: &ToolResult) -> AfterToolCall {
        panic!("hook bug");
    }
    async fn before_persist_state(&self, _: &HookContext<'_>, _: &AgentState) -> PersistDecision {
        panic!("hook bug");
    }
}

#[tokio::test]
async fn a_panicking_hook_becomes_hook_failed_never_a_crash() {
    let l = log();
    let p = HookPipeline::with_hooks(vec![Arc::new(Panics), Arc::new(Scripted::new("b", &l))]);
    let BeforeToolCallOutcome::Refused { call: kept, error } = p.before_tool_call(&CTX, call(), None).await
    else {
        panic!()
    };
    assert_eq!((kept, error.code.as_ref()), (call(), codes::HOOK_FAILED));
    assert!(error.message.contains("hook bug"));
    let out = p.after_tool_call(&CTX, &call(), ToolResult::text("r")).await;
    assert!(matches!(out.control, AfterControl::Abort(ref e) if e.code == codes::HOOK_FAILED));
    assert_eq!(p.before_persist_state(&CTX, &AgentState::new("s"), false).await, PersistDecision::Persist);
    let err = p.on_run_start(&CTX).await.unwrap_err();
    assert_eq!(err.code, codes::HOOK_FAILED);
    // Only the notification and persist reached the second hook: before/after stopped at the panic.
    assert_eq!(entries(&l), ["b:persist", "b:run_start run-1"]);
}

struct Slow {
    name: &'static str,
    log: Log,
}
#[async_trait]
impl AgentHook for Slow {
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        _: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        self.log.lock().unwrap().push(format!("{} start", self.name));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        self.log.lock().unwrap().push(format!("{} end", self.name));
        BeforeToolCall::Proceed(None)
    }
}

/// Serial, not concurrent: a hook that awaits finishes before the next one starts.
#[tokio::test(start_paused = true)]
async fn hooks_never_overlap() {
    let l = log();
    let p = HookPipeline::with_hooks(vec![
        Arc::new(Slow { name: "a", log: l.clone() }),
        Arc::new(Slow { name: "b", log: l.clone() }),
    ]);
    p.before_tool_call(&CTX, call(), None).await;
    assert_eq!(entries(&l), ["a start", "a end", "b start", "b end"]);
}
