//! Edges of a tool batch: an idempotent call re-run after a crash goes through the before-hooks
//! again (their rewrite was never saved); a cancel while the before-hooks run ends the run before
//! the batch is frozen or run; an after-hook may inject only user or system messages.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentEvent, EventLog, RunOutcome};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use support::{answer, calls, tool_messages, MemStore, Script};

/// What each tool's executor received, as JSON texts, per tool name.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

fn register(agent: &arkagent::agent::Agent, name: &str, risk: RiskLevel, idempotent: bool, seen: &Seen) {
    let seen = Arc::clone(seen);
    let tool = name.to_string();
    agent
        .register_tool(
            ToolDefinition::new(name, "test tool", json!({"type":"object"}))
                .with_risk(risk)
                .idempotent(idempotent),
            Arc::new(FnExecutor(move |args: serde_json::Map<String, serde_json::Value>, _c| {
                seen.lock().unwrap().push((tool.clone(), serde_json::Value::Object(args).to_string()));
                async move { Ok(ToolResult::text("ran")) }
            })),
        )
        .unwrap();
}

/// A before-hook that counts its calls and does what `answer` says for each call.
struct Before<F: Fn(&ToolCall) -> BeforeToolCall + Send + Sync>(Arc<AtomicUsize>, F);

#[async_trait::async_trait]
impl<F: Fn(&ToolCall) -> BeforeToolCall + Send + Sync> AgentHook for Before<F> {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _d: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        self.0.fetch_add(1, Ordering::SeqCst);
        (self.1)(call)
    }
}

/// A session whose process died while the idempotent call `half` ran: its start is saved, its
/// end is not.
async fn died_while_running() -> Arc<MemStore> {
    let store = Arc::new(MemStore::new());
    let mut state = AgentState::new("s");
    let events = vec![
        StateEvent::RunStarted { run_id: "r1".into(), delegation: None },
        StateEvent::MessageAppended { message: ChatMessage::user("q") },
        StateEvent::RoundStarted { round: 1 },
        StateEvent::MessageAppended {
            message: ChatMessage::Assistant {
                content: None,
                reasoning_content: None,
                tool_calls: vec![ToolCall::new("half", "lookup", r#"{"x":"model"}"#)],
            },
        },
        StateEvent::ToolStarted { call_id: "half".into(), name: "lookup".into(), worker_session: None },
    ];
    for e in &events {
        state.apply(e);
    }
    store.commit(&state, &events).await.unwrap();
    store
}

#[tokio::test]
async fn an_idempotent_call_run_again_after_a_crash_gets_its_before_hooks_rewrite() {
    let store = died_while_running().await;
    let hooked = Arc::new(AtomicUsize::new(0));
    let rewrite = |c: &ToolCall| {
        BeforeToolCall::Proceed(Some(ToolCall::new(c.id.clone(), c.name.clone(), r#"{"x":"hook"}"#)))
    };
    let model = Arc::new(Script::new(vec![answer("ok")]));
    let agent =
        AgentBuilder::new(model, store.clone()).hook(Arc::new(Before(hooked.clone(), rewrite))).build();
    let seen: Seen = Arc::default();
    register(&agent, "lookup", RiskLevel::Safe, true, &seen);
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(hooked.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.lock().unwrap(), [("lookup".to_string(), r#"{"x":"hook"}"#.to_string())]);
}

#[tokio::test]
async fn an_idempotent_call_a_before_hook_now_denies_is_not_run_again() {
    let store = died_while_running().await;
    let hooked = Arc::new(AtomicUsize::new(0));
    let deny = |_: &ToolCall| BeforeToolCall::Deny(ToolResult::error_text("blocked by policy hook"));
    let model = Arc::new(Script::new(vec![answer("ok")]));
    let agent = AgentBuilder::new(model, store.clone()).hook(Arc::new(Before(hooked.clone(), deny))).build();
    let seen: Seen = Arc::default();
    register(&agent, "lookup", RiskLevel::Safe, true, &seen);
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert!(seen.lock().unwrap().is_empty());
    let state = store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("blocked by policy hook"), "{results:?}");
}

#[tokio::test]
async fn a_cancel_while_before_hooks_run_ends_the_run_before_the_batch_freezes() {
    let cancel = CancellationSignal::new();
    let hooked = Arc::new(AtomicUsize::new(0));
    let by_hook = cancel.clone();
    let cancels = move |_: &ToolCall| {
        by_hook.cancel("the user left");
        BeforeToolCall::Proceed(None)
    };
    let model = Arc::new(Script::new(vec![calls(&[("c1", "wipe", "{}"), ("c2", "lookup", "{}")])]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model.clone(), store.clone())
        .hook(Arc::new(Before(hooked.clone(), cancels)))
        .build();
    let seen: Seen = Arc::default();
    register(&agent, "wipe", RiskLevel::Dangerous, false, &seen);
    register(&agent, "lookup", RiskLevel::Safe, false, &seen);
    let events = EventLog::new();
    let out = agent.run("s", "q", &events, &cancel).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    assert_eq!(hooked.load(Ordering::SeqCst), 1, "no hook is asked after the cancel");
    assert!(seen.lock().unwrap().is_empty(), "nothing ran");
    assert!(!events.events().iter().any(|e| matches!(e, AgentEvent::ApprovalRequired { .. })));
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert!(state.pending_approval.is_none());
}

struct Inject(ChatMessage);

#[async_trait::async_trait]
impl AgentHook for Inject {
    async fn after_tool_call(
        &self,
        _c: &HookContext<'_>,
        _call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        AfterToolCall { action: AfterToolCallAction::Proceed(None), inject: vec![self.0.clone()] }
    }
}

#[tokio::test]
async fn an_after_hook_may_inject_only_user_or_system_messages() {
    let refused = [
        ChatMessage::Tool {
            tool_call_id: "zz".into(),
            name: "lookup".into(),
            content: "x".into(),
            is_error: false,
        },
        ChatMessage::assistant_text("the hook answers for the model"),
        ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: vec![ToolCall::new("h1", "wipe", "{}")],
        },
    ];
    for message in refused {
        let model = Arc::new(Script::new(vec![calls(&[("c1", "lookup", "{}")]), answer("model answer")]));
        let store = Arc::new(MemStore::new());
        let agent =
            AgentBuilder::new(model.clone(), store.clone()).hook(Arc::new(Inject(message.clone()))).build();
        let seen: Seen = Arc::default();
        register(&agent, "lookup", RiskLevel::Safe, false, &seen);
        register(&agent, "wipe", RiskLevel::Safe, false, &seen);
        let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Finished { status, error, .. } = out else { panic!("{message:?}: suspended") };
        let error = error.unwrap();
        assert_eq!((status, error.code.as_ref()), (RunStatus::Aborted, "hook_failed"), "{message:?}");
        assert!(error.message.contains(message.role()), "{}", error.message);
        assert_eq!(model.requests().len(), 1, "{message:?}: the model is not asked again");
        assert_eq!(seen.lock().unwrap().len(), 1, "{message:?}: only the model's call ran");
        let state = store.load("s").await.unwrap().unwrap();
        assert!(!state.messages.contains(&message), "{message:?} was kept");
    }
    for message in [ChatMessage::user("(reminder)"), ChatMessage::system("(reminder)")] {
        let model = Arc::new(Script::new(vec![calls(&[("c1", "lookup", "{}")]), answer("model answer")]));
        let agent = AgentBuilder::new(model.clone(), Arc::new(MemStore::new()))
            .hook(Arc::new(Inject(message.clone())))
            .build();
        register(&agent, "lookup", RiskLevel::Safe, false, &Arc::default());
        let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        // A system message goes as a user message after the head (strict providers refuse one
        // anywhere but first; `tests/answer_replay.rs`).
        assert!(
            model.requests()[1].messages.contains(&ChatMessage::user("(reminder)")),
            "{message:?} reaches the model"
        );
    }
}

/// Runs `question` with a 300-token history budget, a reminder injected after every call, and
/// `rounds` rounds of one `lookup` call answering `result_len` bytes; returns the last request's
/// messages.
async fn last_request_with_reminders(question: &str, rounds: usize, result_len: usize) -> Vec<ChatMessage> {
    let mut script: Vec<_> =
        (0..rounds).map(|i| calls(&[(&format!("c{}", i + 1), "lookup", "{}")])).collect();
    script.push(answer("done"));
    let model = Arc::new(Script::new(script));
    let config = arkagent::agent::AgentConfig { context_budget_tokens: Some(300), ..Default::default() };
    let agent = AgentBuilder::new(model.clone(), Arc::new(MemStore::new()))
        .config(config)
        .hook(Arc::new(Inject(ChatMessage::user("reminder: be brief"))))
        .build();
    agent
        .register_tool(
            ToolDefinition::new("lookup", "test tool", json!({"type":"object"})),
            Arc::new(FnExecutor(move |_a, _c| async move { Ok(ToolResult::text("x".repeat(result_len))) })),
        )
        .unwrap();
    let out = agent.run("s", question, &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    model.requests().last().unwrap().messages.to_vec()
}

#[tokio::test]
async fn trimming_keeps_the_question_when_after_hooks_inject_reminders() {
    let question = "THE QUESTION ".repeat(20);
    let last = last_request_with_reminders(&question, 3, 400).await;
    assert!(last.len() < 10, "the history was trimmed: {} messages", last.len());
    // Trimming takes the rounds between the question and an earlier reminder, which are then
    // sent as one user message (successive user messages go joined).
    let first_question = last.iter().find_map(|m| match m {
        ChatMessage::User { content } => Some(content.as_str()),
        _ => None,
    });
    assert!(first_question.is_some_and(|q| q.starts_with(&question)), "the question was dropped: {last:?}");
    assert_eq!(last.last(), Some(&ChatMessage::user("reminder: be brief")));
}

#[tokio::test]
async fn trimming_keeps_the_newest_results_when_a_reminder_follows_them() {
    let last = last_request_with_reminders("question", 2, 1200).await;
    assert!(
        last.iter().any(|m| matches!(m, ChatMessage::Tool { tool_call_id, .. } if tool_call_id == "c2")),
        "the results the model just asked for were trimmed away: {:?}",
        last.iter().map(|m| m.role()).collect::<Vec<_>>()
    );
    assert!(last.contains(&ChatMessage::user("question")));
}

#[tokio::test]
async fn an_unknown_call_a_strict_policy_let_through_never_runs_a_tool_registered_before_the_resume() {
    // A policy that asks about everything freezes [u1: wipe (no such tool yet), c1: lookup] for c1
    // alone: nothing could run u1 (seed 7.3). If the app registers a `wipe` before it resumes, u1
    // must still meet "tool not found", never run a dangerous tool nobody was asked about.
    struct AskAll;
    impl arkagent::approval::ApprovalPolicy for AskAll {
        fn decide(&self, _: &ToolCall, _: Option<&ToolDefinition>) -> arkagent::approval::PolicyDecision {
            arkagent::approval::PolicyDecision::RequireConfirmation("asks about everything".into())
        }
    }
    let model =
        Arc::new(Script::new(vec![calls(&[("u1", "wipe", "{}"), ("c1", "lookup", "{}")]), answer("ok")]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model, store.clone()).policy(Arc::new(AskAll)).build();
    let seen: Seen = Arc::default();
    register(&agent, "lookup", RiskLevel::Safe, false, &seen);
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected a suspension: {out:?}") };
    assert_eq!(batch.items.iter().map(|i| i.tool_call.id.as_str()).collect::<Vec<_>>(), ["c1"]);
    register(&agent, "wipe", RiskLevel::Dangerous, false, &seen);
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(seen.lock().unwrap().iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["lookup"]);
    // Its answer is the registry's, as under the default policy, which lets the call run.
    let state = store.load("s").await.unwrap().unwrap();
    let plain_store = Arc::new(MemStore::new());
    let plain = AgentBuilder::new(
        Arc::new(Script::new(vec![calls(&[("u1", "wipe", "{}"), ("c1", "lookup", "{}")]), answer("ok")])),
        plain_store.clone(),
    )
    .build();
    register(&plain, "lookup", RiskLevel::Safe, false, &Seen::default());
    plain.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let registry_answer = tool_messages(&plain_store.load("s").await.unwrap().unwrap().messages);
    assert!(registry_answer[0].1.contains("Tool not found: wipe"), "{registry_answer:?}");
    assert_eq!(tool_messages(&state.messages)[0], registry_answer[0]);
}
