//! The run loop with a scripted model: the seed's unit scenarios (tool loop, unknown tool, round
//! limit, invalid arguments, executor failure), approval freeze and resume, hooks, stop flags,
//! cancellation, timeouts, concurrency and crash recovery.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{
    Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, MAX_ROUNDS_FALLBACK,
};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::state::{RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{AgentError, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};

fn order_schema() -> serde_json::Value {
    json!({"type":"object","properties":{"order_id":{"type":"string","description":"订单号"}},"required":["order_id"]})
}

struct Counters {
    query: AtomicUsize,
    clear: AtomicUsize,
}

fn registry(counters: &Arc<Counters>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    let c = Arc::clone(counters);
    r.register(
        ToolDefinition::new("query_order", "查询订单状态", order_schema()),
        Arc::new(FnExecutor(move |args: serde_json::Map<String, serde_json::Value>, _ctx| {
            let c = Arc::clone(&c);
            async move {
                c.query.fetch_add(1, Ordering::SeqCst);
                let id = args["order_id"].as_str().unwrap_or_default().to_string();
                if id == "20261010" {
                    Ok(ToolResult::json(json!({"status":"已发货","logistics":"顺丰 SF123456"})))
                } else {
                    Ok(ToolResult::error_text(format!("订单不存在: {id}")))
                }
            }
        })),
    )
    .unwrap();
    let c = Arc::clone(counters);
    r.register(
        ToolDefinition::new("clear_baking_cache", "清空本地烘焙缓存", json!({"type":"object"}))
            .with_risk(RiskLevel::Dangerous),
        Arc::new(FnExecutor(move |_args, _ctx| {
            let c = Arc::clone(&c);
            async move {
                c.clear.fetch_add(1, Ordering::SeqCst);
                Ok(ToolResult::text("已清空"))
            }
        })),
    )
    .unwrap();
    r.register(
        ToolDefinition::new("explode", "always fails", json!({"type":"object"})),
        Arc::new(FnExecutor(|_args, _ctx| async move {
            if true {
                panic!("boom");
            }
            Ok(ToolResult::text("unreachable"))
        })),
    )
    .unwrap();
    r.register(
        ToolDefinition::new("domain_fail", "fails with a domain error", json!({"type":"object"})),
        Arc::new(FnExecutor(|_args, _ctx| async move {
            Err(AgentError::tool("plan_todo_status_unknown", "unknown todo status"))
        })),
    )
    .unwrap();
    r
}

struct Fixture {
    agent: Agent,
    model: Arc<Script>,
    store: Arc<MemStore>,
    counters: Arc<Counters>,
}

fn fixture(script: Vec<arkagent::provider::ModelResponse>, config: AgentConfig) -> Fixture {
    let counters = Arc::new(Counters { query: AtomicUsize::new(0), clear: AtomicUsize::new(0) });
    let model = Arc::new(Script::new(script));
    let store = Arc::new(MemStore::new());
    let agent =
        AgentBuilder::new(model.clone(), store.clone()).tools(registry(&counters)).config(config).build();
    Fixture { agent, model, store, counters }
}

/// A second agent over the same store and tools: what another process sees after a kill.
fn reopen(f: &Fixture, script: Vec<arkagent::provider::ModelResponse>) -> (Agent, Arc<Script>) {
    let model = Arc::new(Script::new(script));
    let agent = AgentBuilder::new(model.clone(), f.store.clone())
        .tools(registry(&f.counters))
        .config(AgentConfig::default())
        .build();
    (agent, model)
}

#[tokio::test]
async fn tool_loop_feeds_results_back_and_ends_with_the_answer() {
    let f = fixture(
        vec![calls(&[("c1", "query_order", r#"{"order_id":"20261010"}"#)]), answer("您的订单已发货")],
        AgentConfig::default(),
    );
    let log = EventLog::new();
    let out =
        f.agent.run("s1", "我的订单 20261010 到哪了？", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(
        out,
        RunOutcome::Finished {
            status: RunStatus::Completed,
            final_text: Some("您的订单已发货".into()),
            error: None,
            usage: arkagent::Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
            finish_reason: Some("stop".into()),
        }
    );
    let requests = f.model.requests();
    assert_eq!(requests.len(), 2);
    // Tools are sent every round.
    assert!(requests.iter().all(|r| r.tools.iter().any(|t| t.name == "query_order")));
    // Round two carries the assistant call and the result paired by call id.
    let second = &requests[1].messages;
    assert_eq!(second[1].tool_calls()[0].id, "c1");
    assert_eq!(second[2].tool_call_id(), Some("c1"));
    let state = f.store.load("s1").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.messages.len(), 4);
    assert!(tool_messages(&state.messages)[0].1.contains("顺丰"));
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn events_come_in_the_documented_order() {
    let f = fixture(
        vec![calls(&[("c1", "query_order", r#"{"order_id":"20261010"}"#)]), answer("好的")],
        AgentConfig::default(),
    );
    let log = EventLog::new();
    f.agent.run("s", "q", &log, &CancellationSignal::new()).await.unwrap();
    let kinds: Vec<&'static str> = log
        .events()
        .iter()
        .map(|e| match e {
            AgentEvent::RunStarted { .. } => "run_started",
            AgentEvent::TextDelta { .. } => "text",
            AgentEvent::ReasoningDelta { .. } => "reasoning",
            AgentEvent::ToolCallStarted { .. } => "call_started",
            AgentEvent::ToolCallArgumentsDelta { .. } => "call_delta",
            AgentEvent::ToolCallFinished { .. } => "call_finished",
            AgentEvent::ApprovalRequired { .. } => "approval",
            AgentEvent::ToolResult { .. } => "result",
            AgentEvent::StatePersisted { .. } => "persisted",
            AgentEvent::RunFinished { .. } => "finished",
            AgentEvent::WorkerEvent { .. } => "worker",
        })
        .collect();
    let mut kinds = kinds;
    // Arguments stream in several pieces: one entry per run of pieces.
    kinds.dedup_by(|a, b| *a == "call_delta" && *b == "call_delta");
    assert_eq!(
        kinds,
        vec![
            "run_started",
            "persisted", // the user message
            "call_started",
            "call_delta",
            "call_finished",
            "persisted", // the answer and the call's `started` record, before the executor runs
            "result",
            "persisted", // the call's `finished` record and the results in the history
            "text",
            "persisted", // the final answer and the terminal status
            "finished"
        ]
    );
}

#[tokio::test]
async fn unknown_tool_goes_back_to_the_model_without_approval() {
    let f = fixture(vec![calls(&[("c1", "no_such_tool", "{}")]), answer("换个方法")], AgentConfig::default());
    let out = f.agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let state = f.store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].2);
    assert!(results[0].1.contains("tool_not_found"), "{}", results[0].1);
}

#[tokio::test]
async fn round_limit_ends_with_the_fixed_fallback() {
    let script = (0..3).map(|i| calls(&[(&format!("c{i}"), "query_order", r#"{"order_id":"1"}"#)])).collect();
    let f = fixture(script, AgentConfig { max_rounds: 3, loop_window: 10, ..AgentConfig::default() });
    let out = f.agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    match out {
        RunOutcome::Finished { status, final_text, .. } => {
            assert_eq!(status, RunStatus::MaxRounds);
            // The seed's fixed fallback (tool-calling-loop.md 3), word for word.
            assert_eq!(final_text.as_deref(), Some("已多次调用工具仍未得到结论，请稍后重试或联系人工客服。"));
            assert_eq!(final_text.as_deref(), Some(MAX_ROUNDS_FALLBACK));
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(f.model.requests().len(), 3);
    let state = f.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::MaxRounds);
    assert_eq!(state.messages.last().unwrap(), &ChatMessage::assistant_text(MAX_ROUNDS_FALLBACK));
}

#[tokio::test]
async fn invalid_argument_json_and_failing_executors_become_error_results() {
    let f = fixture(
        vec![
            calls(&[
                ("c1", "query_order", r#"{"order_id": "1""#),
                ("c2", "query_order", r#"{"order_id": 123}"#),
                ("c3", "explode", "{}"),
                ("c4", "domain_fail", "{}"),
            ]),
            answer("ok"),
        ],
        AgentConfig::default(),
    );
    f.agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let state = f.store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    let ids: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"], "results in call order");
    assert!(results.iter().all(|r| r.2), "all are errors");
    assert!(results[0].1.contains("json_invalid"), "{}", results[0].1);
    assert!(results[2].1.contains("tool_execution_failed") && results[2].1.contains("boom"));
    assert!(results[3].1.contains("plan_todo_status_unknown"), "domain code passes through");
    // The model saw the errors in round two.
    assert_eq!(tool_messages(&f.model.requests()[1].messages).len(), 4);
}

#[tokio::test]
async fn dangerous_call_freezes_the_whole_batch_until_approved() {
    let f = fixture(
        vec![
            calls(&[
                ("a", "query_order", r#"{"order_id":"20261010"}"#),
                ("b", "clear_baking_cache", r#"{"confirm":"yes"}"#),
            ]),
            answer("已清空"),
        ],
        AgentConfig::default(),
    );
    let log = EventLog::new();
    let out = f.agent.run("s", "清空烘焙缓存", &log, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].tool_call.id, "b");
    // Nothing of the batch ran, not even the safe call.
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 0);
    assert_eq!(f.counters.clear.load(Ordering::SeqCst), 0);
    // Persisted before the event went out.
    let events = log.events();
    let approval_at = events.iter().position(|e| matches!(e, AgentEvent::ApprovalRequired { .. })).unwrap();
    assert!(matches!(events[approval_at - 1], AgentEvent::StatePersisted { .. }));
    let state = f.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::AwaitingApproval);
    assert_eq!(state.pending_approval.as_ref().unwrap(), &batch);
    // A new message while awaiting approval is refused.
    let err = f.agent.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, "approval_pending");
    // Resume before deciding is refused too.
    let err = f.agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, "approval_pending");

    // "Kill the process": another agent over the same store approves and resumes.
    let (agent2, model2) = reopen(&f, vec![answer("已清空")]);
    let err = agent2.approve("s", "nope").await.unwrap_err();
    assert_eq!(err.code, "approval_not_found");
    agent2.approve("s", &batch.items[0].approval_id).await.unwrap();
    let err = agent2.approve("s", &batch.items[0].approval_id).await.unwrap_err();
    assert_eq!(err.code, "approval_already_decided");
    // Decided but not settled: a new message is still refused, and the message says to resume.
    let err = agent2.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, "approval_pending");
    assert!(err.message.contains("resume it"), "{}", err.message);
    let out = agent2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 1);
    assert_eq!(f.counters.clear.load(Ordering::SeqCst), 1);
    let state = f.store.load("s").await.unwrap().unwrap();
    assert!(state.pending_approval.is_none());
    let results = tool_messages(&state.messages);
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(results.iter().all(|r| !r.2));
    assert_eq!(model2.requests().len(), 1);
}

#[tokio::test]
async fn a_dismissed_batch_is_answered_with_the_denial_and_the_model_is_not_asked_again() {
    let f = fixture(
        vec![
            calls(&[
                ("a", "query_order", r#"{"order_id":"20261010"}"#),
                ("b", "clear_baking_cache", r#"{"confirm":"yes"}"#),
            ]),
            answer("好的，换个问题"),
        ],
        AgentConfig::default(),
    );
    let out = f.agent.run("s", "清空烘焙缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }));
    let err = f.agent.run("s", "算了", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, "approval_pending");

    // In another process, the user moved on: the batch is dismissed.
    let (agent2, model2) = reopen(&f, vec![]);
    let out =
        agent2.dismiss("s", "用户换了话题", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(model2.requests().len(), 0, "the model is not asked after a dismissal");
    assert_eq!(f.counters.query.load(Ordering::SeqCst) + f.counters.clear.load(Ordering::SeqCst), 0);
    let state = f.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert!(state.pending_approval.is_none());
    let results = tool_messages(&state.messages);
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(results.iter().all(|r| r.2), "{results:?}");
    assert_eq!(results[1].1, "error: denied by user: 用户换了话题");
    let err = agent2.dismiss("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, "no_pending_approval");

    // The next message runs on a valid history: the model reads the denial first.
    let out = f.agent.run("s", "算了，查订单", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let sent = &f.model.requests()[1].messages;
    assert_eq!(tool_messages(sent).len(), 2);
    assert_eq!(sent.last(), Some(&ChatMessage::user("算了，查订单")));
}

#[tokio::test]
async fn repeated_or_missing_call_ids_in_one_answer_get_one_result_each() {
    let f = fixture(
        vec![
            calls(&[
                ("dup", "query_order", r#"{"order_id":"20261010"}"#),
                ("dup", "query_order", r#"{"order_id":"404"}"#),
                ("", "query_order", r#"{"order_id":"405"}"#),
            ]),
            answer("查到了"),
        ],
        AgentConfig::default(),
    );
    let events = EventLog::new();
    let out = f.agent.run("s", "查询", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 3, "each call ran once");
    // The stream's events name the calls as the history and the results do.
    let named: Vec<String> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallStarted { id, .. } => Some(format!("started {id}")),
            AgentEvent::ToolCallFinished { call, .. } => Some(format!("finished {}", call.id)),
            AgentEvent::ToolResult { call_id, .. } => Some(format!("result {call_id}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        named,
        [
            "started dup",
            "started dup_1",
            "started call_2",
            "finished dup",
            "finished dup_1",
            "finished call_2",
            "result dup",
            "result dup_1",
            "result call_2"
        ]
    );
    let state = f.store.load("s").await.unwrap().unwrap();
    let call_ids: Vec<String> = state.messages[1].tool_calls().iter().map(|c| c.id.clone()).collect();
    assert_eq!(call_ids, ["dup", "dup_1", "call_2"]);
    let results = tool_messages(&state.messages);
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["dup", "dup_1", "call_2"]);
    // Each result is its own call's: the order found, then the two that are not.
    assert!(results[0].1.contains("顺丰") && !results[0].2, "{results:?}");
    assert!(results[1].1.contains("404") && results[1].2, "{results:?}");
    assert!(results[2].1.contains("405") && results[2].2, "{results:?}");
    // The model gets the same pairing back.
    let second = &f.model.requests()[1].messages;
    assert_eq!(second[1].tool_calls().iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), call_ids);
    assert_eq!(second[2..5].iter().map(|m| m.tool_call_id().unwrap()).collect::<Vec<_>>(), call_ids);

    // In a frozen batch too: two dangerous calls with one id are two approvals, each run once.
    let f = fixture(
        vec![
            calls(&[
                ("same", "clear_baking_cache", r#"{"confirm":"yes"}"#),
                ("same", "clear_baking_cache", r#"{"confirm":"again"}"#),
            ]),
            answer("已清空"),
        ],
        AgentConfig::default(),
    );
    let out = f.agent.run("t", "清空", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert_eq!(batch.items.iter().map(|i| i.tool_call.id.as_str()).collect::<Vec<_>>(), ["same", "same_1"]);
    for item in &batch.items {
        f.agent.approve("t", &item.approval_id).await.unwrap();
    }
    let out = f.agent.resume("t", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(f.counters.clear.load(Ordering::SeqCst), 2);
    let state = f.store.load("t").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["same", "same_1"]);
}

#[tokio::test]
async fn a_denial_runs_nothing_and_answers_every_call() {
    let f = fixture(
        vec![
            calls(&[("a", "query_order", r#"{"order_id":"20261010"}"#), ("b", "clear_baking_cache", "{}")]),
            answer("好的，不清空"),
        ],
        AgentConfig::default(),
    );
    let out = f.agent.run("s", "清空", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!() };
    let (agent2, _) = reopen(&f, vec![answer("好的，不清空")]);
    agent2.deny("s", &batch.items[0].approval_id, "不要清空").await.unwrap();
    let out = agent2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 0);
    assert_eq!(f.counters.clear.load(Ordering::SeqCst), 0);
    let state = f.store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 2);
    assert!(results[0].2 && results[0].1.contains("not run"), "{}", results[0].1);
    assert!(results[1].2 && results[1].1.contains("denied by user: 不要清空"), "{}", results[1].1);
}

struct Rewriter;
#[async_trait::async_trait]
impl AgentHook for Rewriter {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _d: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if call.name == "query_order" && call.id == "c1" {
            return BeforeToolCall::Proceed(Some(call.with_arguments(r#"{"order_id":"20261010"}"#)));
        }
        if call.name == "query_order" {
            // Tries to change the id: the rewrite is refused and the call answered with the error.
            return BeforeToolCall::Proceed(Some(ToolCall::new("evil", "query_order", "{}")));
        }
        if call.name == "domain_fail" {
            return BeforeToolCall::Abort("policy forbids it".into());
        }
        BeforeToolCall::Proceed(None)
    }
}

#[tokio::test]
async fn hooks_rewrite_arguments_keep_ids_and_abort() {
    let f = fixture(vec![], AgentConfig::default());
    let model = Arc::new(Script::new(vec![
        calls(&[
            ("c1", "query_order", r#"{"order_id":"nope"}"#),
            ("c9", "query_order", r#"{"order_id":"x"}"#),
        ]),
        answer("ok"),
        calls(&[("c2", "domain_fail", "{}")]),
    ]));
    let agent = AgentBuilder::new(model.clone(), f.store.clone())
        .tools(registry(&f.counters))
        .hook(Arc::new(Rewriter))
        .build();
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let state = f.store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results[0].0, "c1");
    assert!(!results[0].2 && results[0].1.contains("已发货"), "rewritten arguments ran: {}", results[0].1);
    assert_eq!(results[1].0, "c9", "the id is preserved");
    assert!(results[1].2 && results[1].1.contains("hook_call_id_changed"), "{}", results[1].1);
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 1, "the refused rewrite did not run");
    let out = agent.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    match out {
        RunOutcome::Finished { status, error, .. } => {
            assert_eq!(status, RunStatus::Aborted);
            assert_eq!(error.unwrap().code, "hook_aborted");
        }
        o => panic!("{o:?}"),
    }
}

struct Stopper;
#[async_trait::async_trait]
impl AgentHook for Stopper {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        AfterToolCall { action: AfterToolCallAction::Stop, inject: vec![ChatMessage::user("(系统提醒)")] }
    }
}

#[tokio::test]
async fn stop_from_a_hook_ends_the_run_after_its_batch_and_injects_messages() {
    let f = fixture(vec![], AgentConfig::default());
    let model = Arc::new(Script::new(vec![calls(&[("c1", "query_order", r#"{"order_id":"20261010"}"#)])]));
    let agent = AgentBuilder::new(model.clone(), f.store.clone())
        .tools(registry(&f.counters))
        .hook(Arc::new(Stopper))
        .build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(model.requests().len(), 1, "no model round after the stop");
    let state = f.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.messages.last().unwrap(), &ChatMessage::user("(系统提醒)"));
}

#[tokio::test]
async fn a_stop_flag_result_ends_the_run() {
    let f = fixture(vec![], AgentConfig::default());
    let mut tools = registry(&f.counters);
    tools
        .register(
            ToolDefinition::new("finish_task", "marks the task done", json!({"type":"object"})),
            Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("done").with_stop(true)) })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("c1", "finish_task", "{}")])]));
    let agent = AgentBuilder::new(model.clone(), f.store.clone()).tools(tools).build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn identical_calls_filling_the_window_end_with_loop_detected() {
    let script = (0..6).map(|i| calls(&[(&format!("c{i}"), "query_order", r#"{"order_id":"1"}"#)])).collect();
    let f = fixture(script, AgentConfig::default());
    let out = f.agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    match out {
        RunOutcome::Finished { status, error, .. } => {
            assert_eq!(status, RunStatus::LoopDetected);
            assert_eq!(error.unwrap().code, "loop_detected");
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(f.model.requests().len(), 5);
    assert_eq!(f.store.load("s").await.unwrap().unwrap().status, RunStatus::LoopDetected);
}

#[tokio::test]
async fn a_new_user_message_starts_an_empty_loop_window() {
    // Six turns that each ask the same again: one call, or the same two calls, per turn. Counted
    // over the session they would fill the window (identical, then a cycle of two) by turn 5 or 3.
    for per_turn in [
        vec![("c", "query_order", r#"{"order_id":"20261010"}"#)],
        vec![
            ("a", "query_order", r#"{"order_id":"20261010"}"#),
            ("b", "query_order", r#"{"order_id":"404"}"#),
        ],
    ] {
        let script = (0..6).flat_map(|_| [calls(&per_turn), answer("查到了")]).collect();
        let f = fixture(script, AgentConfig::default());
        for turn in 0..6 {
            let out =
                f.agent.run("s", "订单怎样了", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
            assert_eq!(out.status(), RunStatus::Completed, "turn {turn} of {per_turn:?}");
        }
        assert_eq!(f.counters.query.load(Ordering::SeqCst), 6 * per_turn.len());
    }

    // After a run that looped, the next message starts afresh too.
    let mut script: Vec<_> =
        (0..5).map(|i| calls(&[(&format!("c{i}"), "query_order", r#"{"order_id":"1"}"#)])).collect();
    script.push(calls(&[("d", "query_order", r#"{"order_id":"1"}"#)]));
    script.push(answer("订单 1 不存在"));
    let f = fixture(script, AgentConfig::default());
    let out = f.agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::LoopDetected);
    let out = f.agent.run("s", "再查一次", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
}

#[tokio::test]
async fn cancellation_mid_tool_reaches_the_executor_and_ends_the_run_without_results() {
    let f = fixture(vec![], AgentConfig::default());
    let mut tools = ToolRegistry::new();
    let seen_signal: Arc<std::sync::Mutex<Option<CancellationSignal>>> = Arc::default();
    let seen = seen_signal.clone();
    tools
        .register(
            ToolDefinition::new("slow", "waits for cancellation", json!({"type":"object"})),
            Arc::new(FnExecutor(move |_a, ctx: arkagent::ToolContext| {
                let seen = seen.clone();
                async move {
                    *seen.lock().unwrap() = Some(ctx.signal.clone());
                    ctx.signal.cancelled().await;
                    Ok(ToolResult::text("late"))
                }
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("c1", "slow", "{}")]), answer("next run")]));
    let agent = Arc::new(AgentBuilder::new(model.clone(), f.store.clone()).tools(tools).build());
    let cancel = CancellationSignal::new();
    let (a2, c2) = (agent.clone(), cancel.clone());
    let task = tokio::spawn(async move { a2.run("s", "q", &EventLog::new(), &c2).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel.cancel("user pressed cancel");
    let out = tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    let signal = seen_signal.lock().unwrap().clone().expect("the executor ran");
    assert!(signal.is_cancelled(), "the executor's signal was cancelled");
    assert_eq!(signal.reason().as_deref(), Some("user pressed cancel"));
    let state = f.store.load_unrepaired("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert!(tool_messages(&state.messages).is_empty(), "no backfilled result");
    // The orphan is answered as interrupted before the next request.
    agent.run("s", "继续", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let req = &model.requests()[1];
    let results = tool_messages(&req.messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("tool_interrupted"), "{}", results[0].1);
}

#[tokio::test]
async fn cancellation_mid_model_request_ends_at_once() {
    let f = fixture(vec![], AgentConfig::default());
    let agent = Arc::new(AgentBuilder::new(Arc::new(support::SlowModel), f.store.clone()).build());
    let cancel = CancellationSignal::new();
    let (a2, c2) = (agent.clone(), cancel.clone());
    let task = tokio::spawn(async move { a2.run("s", "q", &EventLog::new(), &c2).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel.cancel("stop");
    let out = tokio::time::timeout(Duration::from_secs(2), task).await.unwrap().unwrap().unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
}

#[tokio::test]
async fn a_call_announced_by_a_stream_that_then_fails_gets_no_result_and_never_runs() {
    use arkagent::provider::{ModelEvent, ScriptStep, ScriptedModel};
    let f = fixture(vec![], AgentConfig::default());
    let cut = AgentError::of(arkagent::codes::PROVIDER_STREAM_INTERRUPTED, "scripted cut");
    let model = ScriptedModel::from_steps([ScriptStep::BreakOff(
        vec![
            ModelEvent::ToolCallStarted { index: 0, id: "c1".into(), name: "query_order".into() },
            ModelEvent::ToolCallArgumentsDelta { index: 0, delta: r#"{"order_id":"#.into() },
        ],
        cut,
    )]);
    let agent = AgentBuilder::new(Arc::new(model), f.store.clone()).tools(registry(&f.counters)).build();
    let log = EventLog::new();
    let out = agent.run("s", "q", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Failed);
    let events = log.events();
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolCallStarted { .. })));
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolCallFinished { .. } | AgentEvent::ToolResult { .. })));
    assert!(matches!(events.last(), Some(AgentEvent::RunFinished { status: RunStatus::Failed, .. })));
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 0);
    // Nothing of the cut answer is recorded: the history ends with the question.
    let state = f.store.load("s").await.unwrap().unwrap();
    assert!(matches!(state.messages.last(), Some(ChatMessage::User { .. })), "{:?}", state.messages);
}

#[tokio::test]
async fn safe_calls_run_concurrently_bounded_and_results_stay_in_call_order() {
    let f = fixture(vec![], AgentConfig::default());
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolRegistry::new();
    let (inf, pk) = (in_flight.clone(), peak.clone());
    tools
        .register(
            ToolDefinition::new(
                "wait",
                "sleeps",
                json!({"type":"object","properties":{"ms":{"type":"integer"}}}),
            ),
            Arc::new(FnExecutor(move |a: serde_json::Map<String, serde_json::Value>, _c| {
                let (inf, pk) = (inf.clone(), pk.clone());
                async move {
                    let now = inf.fetch_add(1, Ordering::SeqCst) + 1;
                    pk.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(a["ms"].as_u64().unwrap())).await;
                    inf.fetch_sub(1, Ordering::SeqCst);
                    Ok(ToolResult::text(a["ms"].to_string()))
                }
            })),
        )
        .unwrap();
    let batch: Vec<(String, String)> =
        (0..6).map(|i| (format!("c{i}"), format!(r#"{{"ms":{}}}"#, 60 - i * 10))).collect();
    let refs: Vec<(&str, &str, &str)> =
        batch.iter().map(|(id, a)| (id.as_str(), "wait", a.as_str())).collect();
    let model = Arc::new(Script::new(vec![calls(&refs), answer("done")]));
    let agent = AgentBuilder::new(model, f.store.clone()).tools(tools).build();
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(peak.load(Ordering::SeqCst), 4, "bounded at the default of 4");
    let state = f.store.load("s").await.unwrap().unwrap();
    let ids: Vec<String> = tool_messages(&state.messages).into_iter().map(|r| r.0).collect();
    assert_eq!(ids, ["c0", "c1", "c2", "c3", "c4", "c5"]);
}

#[tokio::test]
async fn a_slow_tool_times_out_with_tool_timeout() {
    // The tool did its work (an order placed) and then hung: cut off at its timeout, it is
    // reported as a call that may have taken effect, so the model checks before calling it again
    // rather than placing the order twice.
    let f = fixture(vec![], AgentConfig::default());
    let placed = Arc::new(AtomicUsize::new(0));
    let p = placed.clone();
    let signal = Arc::new(std::sync::Mutex::new(None));
    let kept = signal.clone();
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("hang", "never ends", json!({"type":"object"}))
                .with_timeout(Duration::from_millis(50)),
            Arc::new(FnExecutor(move |_a, c: arkagent::tool::ToolContext| {
                let p = p.clone();
                *kept.lock().unwrap() = Some(c.signal.clone());
                async move {
                    p.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    Ok(ToolResult::text("never"))
                }
            })),
        )
        .unwrap();
    // An adapter's executor that enforces its own limit (the ArkTS one does) says the same.
    tools
        .register(
            ToolDefinition::new("late", "its own limit", json!({"type":"object"})),
            Arc::new(FnExecutor(|_a, _c| async move {
                Err(AgentError::of(
                    arkagent::codes::TOOL_TIMEOUT,
                    "executor of late did not finish within 10 ms",
                ))
            })),
        )
        .unwrap();
    let model =
        Arc::new(Script::new(vec![calls(&[("c1", "hang", "{}"), ("c2", "late", "{}")]), answer("ok")]));
    let agent = AgentBuilder::new(model, f.store.clone()).tools(tools).build();
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(placed.load(Ordering::SeqCst), 1);
    // The executor's signal says why, as the ArkTS executor's own limit says it (index.d.ts).
    let told = signal.lock().unwrap().clone().expect("the executor ran");
    assert_eq!(told.reason().as_deref(), Some(arkagent::tool::TIMEOUT_REASON));
    assert_eq!(arkagent::tool::TIMEOUT_REASON, "timeout");
    let state = f.store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 2);
    for (_, text, is_error) in results {
        assert!(is_error && text.contains("tool_timeout"), "{text}");
        assert!(text.contains("may or may not have taken effect"), "{text}");
    }
}

/// Applies `events` to `state` and commits them: the journal a killed process left behind.
async fn leave_behind(store: &MemStore, state: &mut arkagent::state::AgentState, events: &[StateEvent]) {
    for e in events {
        state.apply(e);
    }
    store.commit(state, events).await.unwrap();
}

#[tokio::test]
async fn after_a_crash_finished_calls_keep_their_result_started_ones_are_interrupted_and_unstarted_ones_run()
{
    let f = fixture(vec![], AgentConfig::default());
    // What a process that died mid-batch left behind: the assistant message with three calls,
    // one finished, one started, one not started.
    let mut state = arkagent::state::AgentState::new("s");
    let events = vec![
        StateEvent::RunStarted { run_id: "r1".into(), delegation: None },
        StateEvent::MessageAppended { message: ChatMessage::user("q") },
        StateEvent::RoundStarted { round: 1 },
        StateEvent::MessageAppended {
            message: ChatMessage::Assistant {
                content: None,
                reasoning_content: None,
                tool_calls: vec![
                    ToolCall::new("done", "query_order", r#"{"order_id":"20261010"}"#),
                    ToolCall::new("half", "query_order", r#"{"order_id":"20261010"}"#),
                    ToolCall::new("todo", "query_order", r#"{"order_id":"20261010"}"#),
                ],
            },
        },
        StateEvent::ToolStarted { call_id: "done".into(), name: "query_order".into(), worker_session: None },
        StateEvent::ToolFinished {
            call_id: "done".into(),
            name: "query_order".into(),
            result: ToolResult::text("recorded"),
            stop_requested: false,
            injected: Vec::new(),
        },
        StateEvent::ToolStarted { call_id: "half".into(), name: "query_order".into(), worker_session: None },
    ];
    leave_behind(&f.store, &mut state, &events).await;
    let (agent2, _) = reopen(&f, vec![answer("ok")]);
    let out = agent2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 1, "only the never-started call ran");
    let state = f.store.load("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results[0], ("done".into(), "recorded".into(), false), "the recorded result is used");
    assert!(results[1].2 && results[1].1.contains("may or may not"), "{}", results[1].1);
    assert!(!results[2].2 && results[2].1.contains("已发货"), "{}", results[2].1);
}

#[tokio::test]
async fn an_approved_batch_killed_mid_call_never_runs_the_started_call_again() {
    let f = fixture(
        vec![calls(&[
            ("a", "query_order", r#"{"order_id":"20261010"}"#),
            ("b", "clear_baking_cache", r#"{}"#),
        ])],
        AgentConfig::default(),
    );
    let out = f.agent.run("s", "清空烘焙缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    f.agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    // What a process killed while `a` ran left behind: the approved batch resumed (running) and
    // `a` journaled as started, nothing finished.
    let mut state = f.store.load_unrepaired("s").await.unwrap().unwrap();
    let events = vec![
        StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None },
        StateEvent::ToolStarted { call_id: "a".into(), name: "query_order".into(), worker_session: None },
    ];
    leave_behind(&f.store, &mut state, &events).await;

    let (agent2, _) = reopen(&f, vec![answer("已清空")]);
    let out = agent2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(f.counters.query.load(Ordering::SeqCst), 0, "the started call must not run again");
    assert_eq!(f.counters.clear.load(Ordering::SeqCst), 1, "the approved call that never started runs once");
    // As saved, before any repair on load: one result per call.
    let state = f.store.load_unrepaired("s").await.unwrap().unwrap();
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, "a");
    assert!(results[0].2 && results[0].1.contains("may or may not"), "{}", results[0].1);
    assert_eq!(results[1], ("b".into(), "已清空".into(), false));
    assert!(state.pending_approval.is_none());
}

#[tokio::test]
async fn an_approved_batch_killed_mid_call_reruns_a_started_idempotent_call() {
    // As above, but the started call's tool is declared idempotent: running it again is allowed,
    // and it gets exactly one result.
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = || {
        let mut r = ToolRegistry::new();
        let n = Arc::clone(&runs);
        r.register(
            ToolDefinition::new("lookup", "idempotent read", json!({"type":"object"})).idempotent(true),
            Arc::new(FnExecutor(move |_args, _ctx| {
                let n = Arc::clone(&n);
                async move {
                    n.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolResult::text("found"))
                }
            })),
        )
        .unwrap();
        r.register(
            ToolDefinition::new("wipe", "dangerous", json!({"type":"object"}))
                .with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(|_args, _ctx| async move { Ok(ToolResult::text("wiped")) })),
        )
        .unwrap();
        r
    };
    let store = Arc::new(MemStore::new());
    let model = Arc::new(Script::new(vec![calls(&[("a", "lookup", "{}"), ("b", "wipe", "{}")])]));
    let agent = AgentBuilder::new(model, store.clone()).tools(tools()).build();
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    let mut state = store.load_unrepaired("s").await.unwrap().unwrap();
    let events = vec![
        StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None },
        StateEvent::ToolStarted { call_id: "a".into(), name: "lookup".into(), worker_session: None },
    ];
    leave_behind(&store, &mut state, &events).await;

    let model2 = Arc::new(Script::new(vec![answer("ok")]));
    let agent2 = AgentBuilder::new(model2, store.clone()).tools(tools()).build();
    let out = agent2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the idempotent call runs again, once");
    let state = store.load_unrepaired("s").await.unwrap().unwrap();
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(
        results,
        vec![("a".to_string(), "found".to_string(), false), ("b".to_string(), "wiped".to_string(), false)]
    );
}

struct Diagnoser {
    confidence: f64,
    asked: AtomicUsize,
}

#[async_trait::async_trait]
impl arkagent::loop_detect::LoopDiagnoser for Diagnoser {
    async fn diagnose(
        &self,
        _history: &[ChatMessage],
    ) -> Result<arkagent::loop_detect::LoopDiagnosis, AgentError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(arkagent::loop_detect::LoopDiagnosis {
            is_loop: true,
            confidence: self.confidence,
            reason: "keeps asking for other orders".into(),
            usage: None,
        })
    }
}

async fn run_with_diagnoser(confidence: f64) -> (RunOutcome, usize) {
    let f = fixture(vec![], AgentConfig::default());
    let script =
        (0..6).map(|i| calls(&[(&format!("c{i}"), "query_order", &format!(r#"{{"order_id":"{i}"}}"#))]));
    let model = Arc::new(Script::new(script.chain([answer("done")])));
    let diagnoser = Arc::new(Diagnoser { confidence, asked: AtomicUsize::new(0) });
    let schedule = arkagent::loop_detect::DiagnosisSchedule { first_round: 3, every: 2, min_confidence: 0.8 };
    let agent = AgentBuilder::new(model, f.store.clone())
        .tools(registry(&f.counters))
        .loop_diagnoser(diagnoser.clone(), schedule)
        .build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    (out, diagnoser.asked.load(Ordering::SeqCst))
}

#[tokio::test]
async fn the_llm_diagnosis_ends_a_loop_only_above_its_confidence() {
    let (out, asked) = run_with_diagnoser(0.9).await;
    match out {
        RunOutcome::Finished { status, error, .. } => {
            assert_eq!(status, RunStatus::LoopDetected);
            assert!(error.unwrap().message.contains("keeps asking"));
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(asked, 1, "asked at the third answer, which already counted");
    let (out, asked) = run_with_diagnoser(0.8).await;
    assert_eq!(out.status(), RunStatus::Completed, "0.8 is not above the threshold");
    assert_eq!(asked, 2, "asked at answers 3 and 5");
}

#[tokio::test]
async fn a_context_budget_trims_the_request_not_the_state_and_keeps_pairs() {
    let f = fixture(vec![], AgentConfig::default());
    let script = (0..4).map(|i| calls(&[(&format!("c{i}"), "query_order", r#"{"order_id":"20261010"}"#)]));
    let model = Arc::new(Script::new(script.chain([answer("done")])));
    let config = AgentConfig {
        system_prompt: Some("系统提示".into()),
        context_budget_tokens: Some(120),
        loop_window: 10,
        ..AgentConfig::default()
    };
    let agent =
        AgentBuilder::new(model.clone(), f.store.clone()).tools(registry(&f.counters)).config(config).build();
    agent
        .run("s", "我的订单到哪了？".repeat(20).as_str(), &EventLog::new(), &CancellationSignal::new())
        .await
        .unwrap();
    let state = f.store.load("s").await.unwrap().unwrap();
    let last = model.requests().pop().unwrap();
    assert!(last.messages.len() < state.messages.len() - 1, "the request was trimmed");
    assert_eq!(last.messages[0], ChatMessage::system("系统提示"), "system messages stay");
    let question = ChatMessage::user("我的订单到哪了？".repeat(20));
    assert_eq!(last.messages[1], question, "the question of the tool loop stays");
    arkagent::state::check_pairing(&last.messages, &[]).expect("no assistant message lost its results");
    assert_eq!(state.messages.len(), 2 + 4 * 2 + 1, "the state keeps everything");
}

struct NeverPersist;
#[async_trait::async_trait]
impl AgentHook for NeverPersist {
    async fn before_persist_state(
        &self,
        _ctx: &HookContext<'_>,
        _state: &arkagent::state::AgentState,
    ) -> arkagent::hook::PersistDecision {
        arkagent::hook::PersistDecision::Skip
    }
}

#[tokio::test]
async fn terminal_states_are_persisted_even_when_a_hook_skips_saves() {
    let f = fixture(vec![], AgentConfig::default());
    let script = (0..6).map(|i| calls(&[(&format!("c{i}"), "query_order", r#"{"order_id":"1"}"#)]));
    let model = Arc::new(Script::new(script));
    let agent = AgentBuilder::new(model, f.store.clone())
        .tools(registry(&f.counters))
        .hook(Arc::new(NeverPersist))
        .build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::LoopDetected);
    let state = f.store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::LoopDetected, "the terminal state was saved");
    assert_eq!(state.loop_window.len(), 5);
}

/// A registry with `slow`, which says it `started` and answers "ok" once `release`d.
fn slow_tool() -> (ToolRegistry, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let mut tools = ToolRegistry::new();
    let (s, r) = (started.clone(), release.clone());
    tools
        .register(
            ToolDefinition::new("slow", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a: serde_json::Map<String, serde_json::Value>, _c| {
                let (s, r) = (s.clone(), r.clone());
                async move {
                    s.notify_one();
                    r.notified().await;
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    (tools, started, release)
}

#[tokio::test]
async fn the_state_read_mid_run_shows_a_running_call_as_running_not_interrupted() {
    // A chat screen polls the state while a tool runs: the call has started and has no result yet.
    // The repair a load applies (a call that started and never finished is interrupted) is for
    // a session no run holds; here the call is running.
    let (tools, started, release) = slow_tool();
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let model = Arc::new(Script::new(vec![calls(&[("c1", "slow", "{}")]), answer("done")]));
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(tools).build());
    let running = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await })
    };
    started.notified().await;
    let mid = agent.state("s").await.unwrap().unwrap();
    assert_eq!(mid.status, RunStatus::Running);
    assert!(tool_messages(&mid.messages).is_empty(), "no result yet: {:?}", mid.messages);
    release.notify_one();
    assert_eq!(running.await.unwrap().unwrap().status(), RunStatus::Completed);
    let after = agent.state("s").await.unwrap().unwrap();
    assert_eq!(tool_messages(&after.messages), [("c1".to_string(), "ok".to_string(), false)]);
    // With no run holding it, a session saved mid-call (the process died) shows the call
    // interrupted, as a resume will answer it.
    let mut died = after.clone();
    died.session_id = "died".into();
    died.status = RunStatus::Running;
    died.messages.truncate(2);
    died.tool_runs.insert("c1".into(), arkagent::state::ToolRunRecord::Started { name: "slow".into() });
    store.save_snapshot(&died).await.unwrap();
    let shown = agent.state("died").await.unwrap().unwrap();
    let results = tool_messages(&shown.messages);
    assert!(results.len() == 1 && results[0].1.contains("tool_interrupted"), "{results:?}");
}

#[tokio::test]
async fn another_agent_reading_a_session_a_run_holds_shows_its_running_call_as_running() {
    // Two agents over one state directory (two screens of an app, or two processes): the one that
    // does not run the session reads it while a call runs. The call is running, not
    // interrupted: the repair a load applies is for a session no run holds, and the lease says
    // one does. The listing counts the messages as that state shows them.
    let dir = tempfile::tempdir().unwrap();
    let (tools, started, release) = slow_tool();
    let file_store =
        |d: &std::path::Path| -> Arc<dyn StateStore> { Arc::new(arkagent::state::FileStore::new(d)) };
    let model = Arc::new(Script::new(vec![calls(&[("c1", "slow", "{}")]), answer("done")]));
    let runner = Arc::new(AgentBuilder::new(model, file_store(dir.path())).tools(tools).build());
    let reader = AgentBuilder::new(Arc::new(Script::new(vec![])), file_store(dir.path())).build();
    let running = {
        let runner = runner.clone();
        tokio::spawn(async move { runner.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await })
    };
    started.notified().await;
    let mid = reader.state("s").await.unwrap().unwrap();
    assert_eq!(mid.status, RunStatus::Running);
    assert!(tool_messages(&mid.messages).is_empty(), "no result yet: {:?}", mid.messages);
    assert_eq!(mid, runner.state("s").await.unwrap().unwrap(), "both agents show the same state");
    let listed = reader.list_sessions().await.unwrap();
    assert!(listed[0].busy && !listed[0].interrupted, "{listed:?}");
    assert_eq!(listed[0].message_count, mid.messages.len());
    let own = runner.list_sessions().await.unwrap();
    assert_eq!(own[0].message_count, mid.messages.len(), "the running agent's listing too");
    release.notify_one();
    assert_eq!(running.await.unwrap().unwrap().status(), RunStatus::Completed);
    let after = reader.state("s").await.unwrap().unwrap();
    assert_eq!(tool_messages(&after.messages), [("c1".to_string(), "ok".to_string(), false)]);
}
