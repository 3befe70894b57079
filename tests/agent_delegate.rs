//! Sub-agents: delegate_task runs a worker with its own history; the worker cannot delegate again
//! (even when a factory adds the tool or a hook rewrites a call into it), respects the depth limit,
//! and its dangerous calls still need approval.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{
    Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, WorkerFactory, DELEGATE_TASK,
};
use arkagent::approval::PendingApprovalBatch;
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::provider::ToolChoice;
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use delegation::tools;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::DiesAtBatchEnd;

fn last_tool_result(messages: &[ChatMessage]) -> (String, bool) {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap()
}

/// A factory that tries to give the worker a delegate_task of its own.
struct Sneaky;
impl WorkerFactory for Sneaky {
    fn prepare_tools(&self, tools: &mut ToolRegistry) {
        let _ = tools.register(
            arkagent::agent::delegate_task_definition(),
            Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("sneaky delegation ran")) })),
        );
    }
}

#[tokio::test]
async fn a_worker_answers_with_its_own_history_and_cannot_delegate() {
    let cleared = Arc::new(AtomicUsize::new(0));
    // One script for parent and worker: they take turns.
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"查 SKU001 库存"}"#)]), // parent round 1
        calls(&[
            ("w1", DELEGATE_TASK, r#"{"task":"recurse"}"#),
            ("w2", "query_stock", r#"{"sku":"SKU001"}"#),
        ]), // worker 1
        answer("SKU001 有 12 件"),                                       // worker round 2
        answer("库存充足：12 件"),                                       // parent round 2
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(Some(Arc::new(Sneaky))).unwrap();
    let out =
        agent.run("parent", "SKU001 还有货吗", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(last_tool_result(&parent.messages), ("SKU001 有 12 件".to_string(), false));
    // The worker's own history: its delegate_task call was refused as unknown.
    let requests = model.requests();
    let worker_round2 = &requests[2];
    assert!(worker_round2.tools.iter().all(|t| t.name != DELEGATE_TASK), "worker never sees delegate_task");
    let worker_results: Vec<&ChatMessage> =
        worker_round2.messages.iter().filter(|m| matches!(m, ChatMessage::Tool { .. })).collect();
    match worker_results[0] {
        ChatMessage::Tool { content, is_error, .. } => {
            assert!(*is_error && content.contains("tool_not_found"), "{content}");
        }
        _ => unreachable!(),
    }
    assert_eq!(worker_round2.messages[0], ChatMessage::user("查 SKU001 库存"), "its own history");
}

#[tokio::test]
async fn a_worker_that_ends_without_an_answer_is_an_error_result_naming_why() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let mut cut = answer("");
    cut.content = None;
    cut.reasoning_content = Some("thinking until the token limit".into());
    cut.finish_reason = Some("length".into());
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"查 SKU001 库存"}"#)]), // parent round 1
        cut,                                                             // worker: cut off
        answer("没查到"),                                                // parent round 2
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let out =
        agent.run("parent", "SKU001 还有货吗", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = store.load("parent").await.unwrap().unwrap();
    let (content, is_error) = last_tool_result(&parent.messages);
    assert!(is_error, "{content}");
    assert!(content.contains("tool_execution_failed") && content.contains("length"), "{content}");
}

#[tokio::test]
async fn a_worker_its_tool_stopped_answers_with_the_results_it_ended_on() {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("submit", "submit the result", serde_json::json!({"type":"object"})),
        Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("submitted: 12").with_stop(true)) })),
    )
    .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"count"}"#)]), // parent round 1
        calls(&[("w1", "submit", "{}")]),                       // worker: stops on its result
        answer("parent done"),                                  // parent round 2
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(r).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(last_tool_result(&parent.messages), ("submitted: 12".to_string(), false));
}

/// A worker tool that submits and stops its run, with the given result.
fn submit_tools(result: ToolResult) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("submit", "submit the result", serde_json::json!({"type":"object"})),
        Arc::new(FnExecutor(move |_a, _c| {
            let result = result.clone();
            async move { Ok(result.with_stop(true)) }
        })),
    )
    .unwrap();
    r
}

/// An after-hook injecting a reminder after every call (hooks are shared with workers).
struct Remind;

#[async_trait::async_trait]
impl AgentHook for Remind {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _r: &ToolResult,
    ) -> arkagent::hook::AfterToolCall {
        arkagent::hook::AfterToolCall {
            action: arkagent::hook::AfterToolCallAction::Proceed(None),
            inject: vec![ChatMessage::user("reminder: be brief")],
        }
    }
}

#[tokio::test]
async fn a_stopped_worker_answers_with_its_results_not_its_preamble_nor_a_reminder() {
    for (preamble, remind) in [(true, false), (false, true)] {
        let mut worker = calls(&[("w1", "submit", "{}")]);
        if preamble {
            worker.content = Some("Let me submit that.".into());
        }
        let model = Arc::new(Script::new(vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"count"}"#)]),
            worker,
            answer("parent done"),
        ]));
        let store = Arc::new(MemStore::new());
        let mut builder =
            AgentBuilder::new(model, store.clone()).tools(submit_tools(ToolResult::text("submitted: 12")));
        if remind {
            builder = builder.hook(Arc::new(Remind));
        }
        let agent = Arc::new(builder.build());
        agent.enable_delegation(None).unwrap();
        let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        let parent = store.load("parent").await.unwrap().unwrap();
        assert_eq!(
            last_tool_result(&parent.messages),
            ("submitted: 12".to_string(), false),
            "{preamble} {remind}"
        );
        // The worker's own outcome has no answer text: its last assistant message is a preamble.
        let worker = store.load(&parent.workers[0]).await.unwrap().unwrap();
        assert_eq!(worker.status, RunStatus::Completed);
    }
}

#[tokio::test]
async fn a_worker_stopped_on_an_error_result_passes_the_error_on() {
    let failed = ToolResult::from_error(&arkagent::AgentError::execution_failed("quota exceeded for SKU001"));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"count"}"#)]),
        calls(&[("w1", "submit", "{}")]),
        answer("parent done"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(submit_tools(failed)).build());
    agent.enable_delegation(None).unwrap();
    agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let parent = store.load("parent").await.unwrap().unwrap();
    let (content, is_error) = last_tool_result(&parent.messages);
    assert!(is_error && content.contains("quota exceeded for SKU001"), "{content}");
}

#[tokio::test]
async fn dismissing_a_parent_frozen_on_its_worker_ends_both_without_a_model_round() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"clear"}"#), ("p2", "query_stock", r#"{"sku":"A"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        // For the next message (a worker asked after the denial would take it instead).
        answer("parent answer"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }));
    let asked = model.requests().len();
    let out =
        agent.dismiss("parent", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(model.requests().len(), asked, "no model was asked, the worker's neither");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert!(parent.pending_approval.is_none());
    let results: Vec<(String, String, bool)> = support::tool_messages(&parent.messages);
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["p1", "p2"]);
    // The delegating call is answered with the dismissal; the call that ran before the worker
    // froze keeps its result.
    assert!(
        results[0].2 && results[0].1.contains("tool_not_run") && results[0].1.contains("moved on"),
        "{results:?}"
    );
    assert_eq!((results[1].1.as_str(), results[1].2), ("A: 12 件", false));
    // The worker's run completed with the denial; nothing of it ran.
    let worker = store.load(&parent.workers[0]).await.unwrap().unwrap();
    assert_eq!(worker.status, RunStatus::Completed);
    assert!(worker.pending_approval.is_none());
    let denied = support::tool_messages(&worker.messages);
    assert!(denied.len() == 1 && denied[0].2 && denied[0].1.contains("moved on"), "{denied:?}");
    // The next message runs on a valid history.
    let out = agent.run("parent", "never mind", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
}

#[tokio::test]
async fn dismissing_after_the_user_approved_everything_runs_what_was_approved() {
    // Approved on the parent, or on the worker session directly: the approved call runs (the
    // worker continues), and a dismissal's stop is never carried into a batch frozen on the way.
    for on_worker in [false, true] {
        let cleared = Arc::new(AtomicUsize::new(0));
        let model = Arc::new(Script::new(vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"clear"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
            answer("worker done"),
            answer("parent answer"),
        ]));
        let store = Arc::new(MemStore::new());
        let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(tools(&cleared)).build());
        agent.enable_delegation(None).unwrap();
        let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
        let session = if on_worker { batch.worker_session.clone().unwrap() } else { "parent".to_string() };
        agent.approve(&session, &batch.items[0].approval_id).await.unwrap();
        let out =
            agent.dismiss("parent", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "{on_worker}");
        assert_eq!(cleared.load(Ordering::SeqCst), 1, "{on_worker}: the approved call ran");
        let parent = store.load("parent").await.unwrap().unwrap();
        assert_eq!(last_tool_result(&parent.messages), ("worker done".to_string(), false));
        assert_eq!(model.requests().len(), 3, "{on_worker}: the parent's model is not asked");
    }
}

#[tokio::test]
async fn a_dismissal_that_meets_a_new_freeze_leaves_no_stop_behind() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("x1", "clear_baking_cache", "{}"), ("d1", DELEGATE_TASK, r#"{"task":"clear"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker done"),
        answer("parent answer"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    for item in &batch.items {
        agent.approve("parent", &item.approval_id).await.unwrap();
    }
    // Everything was approved: the batch runs, and the delegation's worker freezes on its call.
    let out =
        agent.dismiss("parent", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert!(!batch.stop_requested, "the dismissal's stop is not carried into the new batch");
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("parent answer")));
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_worker_empty_answer_without_a_finish_reason_is_no_answer() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let mut empty = answer("");
    empty.content = None;
    empty.finish_reason = None;
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("w1", "query_stock", r#"{"sku":"A"}"#)]),
        empty,
        answer("parent done"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let parent = store.load("parent").await.unwrap().unwrap();
    let (content, is_error) = last_tool_result(&parent.messages);
    assert!(is_error && content.contains("without an answer"), "{content}");
}

#[tokio::test]
async fn a_completed_worker_found_again_after_a_crash_never_answers_with_its_preamble() {
    // The worker's last answer was empty (not recorded): its last assistant message is the
    // preamble of a tool call, which is no answer.
    let cleared = Arc::new(AtomicUsize::new(0));
    let mut preamble = calls(&[("w1", "query_stock", r#"{"sku":"SKU001"}"#)]);
    preamble.content = Some("Let me look that up.".into());
    let mut cut = answer("");
    cut.content = None;
    cut.finish_reason = Some("length".into());
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"查 SKU001 库存"}"#)]),
        preamble,
        cut,
    ]));
    let mem = Arc::new(MemStore::new());
    let dying = Arc::new(DiesAtBatchEnd::wrap(mem.clone(), "parent"));
    let agent = Arc::new(AgentBuilder::new(model, dying).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let died = agent.run("parent", "SKU001 还有货吗", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(died.unwrap_err().code, "state_io");

    // A new process resumes the parent: the delegating call runs again and finds the worker done.
    let model = Arc::new(Script::new(vec![answer("parent answer")]));
    let agent = Arc::new(AgentBuilder::new(model, mem.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let parent = mem.load("parent").await.unwrap().unwrap();
    let (content, is_error) = last_tool_result(&parent.messages);
    assert_ne!(content, "Let me look that up.");
    // Its last answer was cut off: the parent gets what the live run gave, an error naming why
    // (not the tool result the worker ended on; see tests/agent_worker_finish.rs).
    assert!(is_error && content.contains("finish reason: length"), "{content}");
}

#[tokio::test]
async fn the_depth_limit_refuses_delegation_beyond_it() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model, store)
            .tools(tools(&cleared))
            .config(AgentConfig { max_delegation_depth: 0, ..AgentConfig::default() })
            .build(),
    );
    let err = agent.enable_delegation(None).unwrap_err();
    assert_eq!(err.code, "delegation_depth_exceeded");
}

/// Records each `on_approval_required`: the session it came from and the batch's worker.
#[derive(Default)]
struct Announced(std::sync::Mutex<Vec<(String, Option<String>)>>);

#[async_trait::async_trait]
impl AgentHook for Announced {
    async fn on_approval_required(&self, ctx: &HookContext<'_>, batch: &PendingApprovalBatch) {
        self.0.lock().unwrap().push((ctx.session_id.to_string(), batch.worker_session.clone()));
    }
}

/// The parent with delegation, on `store`, as a fresh process would build it.
fn parent_agent(model: Arc<Script>, store: Arc<dyn StateStore>, cleared: &Arc<AtomicUsize>) -> Arc<Agent> {
    parent_agent_with(model, store, cleared, Arc::new(Announced::default()))
}

fn parent_agent_with(
    model: Arc<Script>,
    store: Arc<dyn StateStore>,
    cleared: &Arc<AtomicUsize>,
    hook: Arc<Announced>,
) -> Arc<Agent> {
    let agent = Arc::new(AgentBuilder::new(model, store).tools(tools(cleared)).hook(hook).build());
    agent.enable_delegation(None).unwrap();
    agent
}

#[tokio::test]
async fn a_worker_dangerous_call_freezes_the_parent_and_the_decision_reaches_the_worker() {
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    worker_approval_across_processes(|| store.clone()).await;
}

#[tokio::test]
async fn the_same_on_a_file_store_with_a_new_store_per_process() {
    let dir = tempfile::tempdir().unwrap();
    worker_approval_across_processes(|| Arc::new(FileStore::new(dir.path())) as Arc<dyn StateStore>).await;
}

/// `process()` gives the store a new process would open.
async fn worker_approval_across_processes(process: impl Fn() -> Arc<dyn StateStore>) {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", "query_stock", r#"{"sku":"A"}"#), ("p2", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]), // worker round 1: frozen
        answer("缓存已清空"),                         // worker round 2, after the decision
        answer("A 有 12 件，缓存已清空"),             // parent round 2
    ]));
    let store = process();
    let events = EventLog::new();
    let announced = Arc::new(Announced::default());
    let agent = parent_agent_with(model.clone(), store.clone(), &cleared, announced.clone());
    let out = agent.run("parent", "查 A 再清缓存", &events, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("the parent waits with its worker: {out:?}") };
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "nothing ran without approval");
    // The parent's batch shows the worker's call, so the app's approval UI needs nothing new.
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].tool_call.name, "clear_baking_cache");
    let worker = batch.worker_session.clone().expect("a worker's batch");
    // The hooks (shared with the worker) hear of it once, from the parent.
    assert_eq!(*announced.0.lock().unwrap(), [("parent".to_string(), Some(worker.clone()))]);
    assert!(events.events().iter().any(|e| matches!(e, AgentEvent::ApprovalRequired { .. })));
    assert_eq!(store.load(&worker).await.unwrap().unwrap().status, RunStatus::AwaitingApproval);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(parent.status, RunStatus::AwaitingApproval);
    // A new message is refused while the parent waits.
    let busy =
        agent.run("parent", "还有别的", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(busy.code, "approval_pending");

    // The app is killed; a new process decides and resumes the parent.
    drop(agent);
    let store = process();
    let agent = parent_agent(model.clone(), store.clone(), &cleared);
    let decided = agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    assert!(decided.is_fully_decided());
    let worker_state = store.load(&worker).await.unwrap().unwrap();
    assert!(worker_state.pending_approval.unwrap().is_fully_decided(), "the worker's batch is decided too");
    let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1, "the approved worker call ran once");
    let parent = store.load("parent").await.unwrap().unwrap();
    let results: Vec<(String, String, bool)> = parent
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, content, is_error, .. } => {
                Some((tool_call_id.clone(), content.clone(), *is_error))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("p1".to_string(), "A: 12 件".to_string(), false),
            ("p2".to_string(), "缓存已清空".to_string(), false)
        ]
    );
    // The worker's history holds its task once: it was continued, not started again.
    let worker_state = store.load(&worker).await.unwrap().unwrap();
    let tasks = worker_state.messages.iter().filter(|m| matches!(m, ChatMessage::User { .. })).count();
    assert_eq!((tasks, worker_state.status), (1, RunStatus::Completed));
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn a_denied_worker_call_never_runs_and_the_worker_answers_the_parent() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("用户拒绝了清缓存"), // worker, after the denial
        answer("没有清缓存"),       // parent
    ]));
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let agent = parent_agent(model.clone(), store.clone(), &cleared);
    let out = agent.run("parent", "清缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    // Resuming before the decision is refused.
    let early = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(early.code, "approval_pending");
    agent.deny("parent", &batch.items[0].approval_id, "不要清").await.unwrap();
    // Deciding again is refused, on the parent as on the worker.
    let again = agent.approve("parent", &batch.items[0].approval_id).await.unwrap_err();
    assert_eq!(again.code, "approval_already_decided");
    let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "a denied call never runs");
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(last_tool_result(&parent.messages), ("用户拒绝了清缓存".to_string(), false));
    // The worker's model saw the denial as its call's result.
    let worker_round2 = &model.requests()[2];
    let (content, is_error) = last_tool_result(&worker_round2.messages);
    assert!(is_error && content.contains("不要清"), "{content}");
}

/// A hook (shared by parent and worker, as hooks are) that tries to turn the worker's calls into
/// `delegate_task`: rewriting the name, or rewriting the arguments of a call the model already
/// named `delegate_task`.
struct Redirect;

#[async_trait::async_trait]
impl AgentHook for Redirect {
    async fn before_tool_call(
        &self,
        ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if ctx.session_id == "parent" {
            return BeforeToolCall::Proceed(None);
        }
        let mut rewritten = call.clone();
        rewritten.name = DELEGATE_TASK.to_string();
        rewritten.arguments = r#"{"task":"nested"}"#.to_string();
        BeforeToolCall::Proceed(Some(rewritten))
    }
}

#[tokio::test]
async fn a_hook_cannot_make_a_worker_delegate() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"查库存"}"#)]), // parent round 1
        calls(&[("w1", "query_stock", r#"{"sku":"A"}"#), ("w2", DELEGATE_TASK, r#"{"task":"x"}"#)]), // worker
        answer("worker done"),                                   // worker round 2
        answer("parent done"),                                   // parent round 2
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model.clone(), store.clone())
            .tools(tools(&cleared))
            .hook(Arc::new(Redirect))
            .build(),
    );
    agent.enable_delegation(Some(Arc::new(Sneaky))).unwrap();
    let out = agent.run("parent", "查", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    // Exactly one worker session: no worker of a worker was ever started.
    let sessions = store.session_ids();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "parent, worker, worker, parent: nothing else asked the model");
    let worker_round2 = &requests[2];
    let results: Vec<(String, bool)> = worker_round2
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    // The name rewrite is refused (fail closed); the model's own delegate_task call is unknown.
    assert!(results[0].1 && results[0].0.contains("hook_call_name_changed"), "{results:?}");
    assert!(results[1].1 && results[1].0.contains("tool_not_found"), "{results:?}");
}

#[tokio::test]
async fn a_call_id_reused_in_a_later_round_gets_a_fresh_worker() {
    // Some providers number calls per answer (`call_0` every round). Each delegation must get a
    // worker of its own: the second worker starts from its own task, not the first one's history.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("call_0", DELEGATE_TASK, r#"{"task":"查 A 库存"}"#)]), // parent round 1
        answer("A: 12 件"),                                             // worker 1
        calls(&[("call_0", DELEGATE_TASK, r#"{"task":"查 B 库存"}"#)]), // parent round 2
        answer("B: 3 件"),                                              // worker 2
        answer("A 12 件，B 3 件"),                                      // parent round 3
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "A 和 B", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(
        requests[3].messages.as_slice(),
        [ChatMessage::user("查 B 库存")],
        "the second worker's own history"
    );
    let workers: Vec<String> = store.session_ids().into_iter().filter(|k| k != "parent").collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(last_tool_result(&parent.messages), ("B: 3 件".to_string(), false));
}

/// An agent whose workers may delegate once more (depth 2).
fn two_level_agent(model: Arc<Script>, store: Arc<dyn StateStore>, cleared: &Arc<AtomicUsize>) -> Arc<Agent> {
    delegation::agent(model, store, cleared, 2)
}

#[tokio::test]
async fn a_nested_worker_call_freezes_every_level_and_one_decision_reaches_the_innermost() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"让下级清缓存"}"#)]), // parent
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),       // worker
        calls(&[("w1", "clear_baking_cache", "{}")]),                  // the worker's worker: frozen
        answer("已清空"),                                              // the worker's worker, after approval
        answer("下级已清空"),                                          // worker
        answer("全部完成"),                                            // parent
    ]));
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let agent = two_level_agent(model.clone(), store.clone(), &cleared);
    let out = agent.run("parent", "清缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items[0].tool_call.name, "clear_baking_cache");
    let middle = batch.worker_session.clone().unwrap();
    let middle_batch = store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap();
    let inner = middle_batch.worker_session.clone().expect("the middle worker mirrors its own worker");
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    for session in [&middle, &inner] {
        let state = store.load(session).await.unwrap().unwrap();
        assert!(state.pending_approval.unwrap().is_fully_decided(), "{session} decided too");
    }
    let out = agent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(last_tool_result(&parent.messages), ("下级已清空".to_string(), false));
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn deleting_a_session_deletes_the_workers_of_its_delegations_at_every_depth() {
    let dir = tempfile::tempdir().unwrap();
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        // "parent": a delegation whose worker delegates again, then a second delegation.
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"让下级查 A"}"#)]),
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"查 A"}"#)]),
        answer("A: 12 件"),
        answer("下级说 A 有 12 件"),
        calls(&[("d3", DELEGATE_TASK, r#"{"task":"查 B"}"#)]),
        answer("B: 3 件"),
        answer("A 12 件，B 3 件"),
        // "other": one delegation of its own, which must survive the deletion of "parent".
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"查 C"}"#)]),
        answer("C: 1 件"),
        answer("C 1 件"),
    ]));
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let agent = two_level_agent(model.clone(), store.clone(), &cleared);
    for (session, text) in [("parent", "A 和 B"), ("other", "C")] {
        let out = agent.run(session, text, &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "{session}");
    }
    assert_eq!(model.remaining(), 0);
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(parent.workers.len(), 2, "two delegations: {:?}", parent.workers);
    let nested = store.load(&parent.workers[0]).await.unwrap().unwrap().workers;
    assert_eq!(nested.len(), 1, "the first worker delegated once");
    let other = store.load("other").await.unwrap().unwrap().workers;
    assert_eq!(other.len(), 1);
    // Session directories (the store's `..locks` directory aside).
    let sessions = |d: &std::path::Path| {
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| !e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".."))
            .count()
    };
    assert_eq!(sessions(dir.path()), 6, "two sessions and four workers on disk");

    assert!(agent.delete_session("parent").await.unwrap());
    for gone in parent.workers.iter().chain(&nested).map(String::as_str).chain(["parent"]) {
        assert!(store.load(gone).await.unwrap().is_none(), "{gone} deleted");
    }
    assert!(store.load(&other[0]).await.unwrap().is_some(), "another session's worker stays");
    assert_eq!(sessions(dir.path()), 2, "only \"other\" and its worker are left");
    assert!(!agent.delete_session("parent").await.unwrap(), "already gone");
}

#[tokio::test]
async fn a_tool_choice_naming_delegate_task_is_not_the_workers() {
    // The parent is made to delegate (`tool_choice` names `delegate_task`). Its worker has no
    // `delegate_task`: with that choice inherited, every worker run was refused with
    // `config_invalid`, and so every delegation failed. The worker asks without a tool choice.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"stock of A1"}"#)]),
        answer("A1: 12 件"),
        answer("done"),
    ]));
    let agent = Arc::new(
        AgentBuilder::new(model.clone(), Arc::new(MemStore::new()))
            .tools(delegation::tools(&cleared))
            .config(AgentConfig {
                tool_choice: Some(ToolChoice::Function(DELEGATE_TASK.into())),
                ..AgentConfig::default()
            })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    let state = agent.state("s").await.unwrap().unwrap();
    assert_eq!(tool_messages(&state.messages), [("d1".to_string(), "A1: 12 件".to_string(), false)]);
    let choices: Vec<_> = model.requests().iter().map(|r| r.tool_choice.clone()).collect();
    let forced = Some(ToolChoice::Function(DELEGATE_TASK.into()));
    assert_eq!(choices, [forced.clone(), None, forced]);
}
