//! A worker session the app acts on directly, through its top-level agent (the worker sessions
//! are listed in the parent's state): it runs as its delegation would run it, never as a
//! top-level session. A `resume` or `dismiss` gives it the worker's tools (the parent's without
//! `delegate_task`, the factory applied) and the worker's depth, so it cannot delegate past the
//! limit nor use a tool the factory took away; a new message (`run`) is refused (`invalid_state`),
//! as its parent would never read that answer; an agent that does not delegate cannot run it. A
//! batch such a resume freezes on is announced to the hooks, as the app's own resume.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome, WorkerFactory, DELEGATE_TASK};
use arkagent::approval::{ApprovalDecision, PendingApprovalBatch};
use arkagent::hook::{AgentHook, HookContext};
use arkagent::provider::ChatRequest;
use arkagent::state::{AgentState, Delegation, FileStore, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use delegation::decision_on;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};

/// The factory of these tests: the worker gets no `query_stock`, and a sandboxed
/// `clear_baking_cache` (each run counted in `sandboxed`) instead of the parent's.
struct Sandbox {
    sandboxed: Arc<AtomicUsize>,
}

impl WorkerFactory for Sandbox {
    fn prepare_tools(&self, tools: &mut ToolRegistry) {
        tools.unregister("query_stock");
        tools.unregister("clear_baking_cache");
        let counter = self.sandboxed.clone();
        tools
            .register(
                ToolDefinition::new("clear_baking_cache", "危险", json!({"type":"object"}))
                    .with_risk(RiskLevel::Dangerous),
                Arc::new(FnExecutor(move |_a, _c| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolResult::text("cleared in the sandbox"))
                    }
                })),
            )
            .unwrap();
    }
}

struct Setup {
    model: Arc<Script>,
    store: Arc<dyn StateStore>,
    agent: Arc<Agent>,
    /// Runs of the parent's `clear_baking_cache`.
    cleared: Arc<AtomicUsize>,
    /// Runs of the worker's (the factory's) `clear_baking_cache`.
    sandboxed: Arc<AtomicUsize>,
}

fn setup(script: Vec<arkagent::provider::ModelResponse>, depth: u32) -> Setup {
    setup_on(script, depth, Arc::new(MemStore::new()))
}

fn setup_on(script: Vec<arkagent::provider::ModelResponse>, depth: u32, store: Arc<dyn StateStore>) -> Setup {
    let cleared = Arc::new(AtomicUsize::new(0));
    let sandboxed = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(script));
    let agent = Arc::new(
        AgentBuilder::new(model.clone(), store.clone())
            .tools(delegation::tools(&cleared))
            .config(AgentConfig { max_delegation_depth: depth, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(Some(Arc::new(Sandbox { sandboxed: sandboxed.clone() }))).unwrap();
    Setup { model, store, agent, cleared, sandboxed }
}

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

fn tool_names(request: &ChatRequest) -> Vec<String> {
    let mut names: Vec<String> = request.tools.iter().map(|d| d.name.clone()).collect();
    names.sort();
    names
}

/// The parent delegates, its worker asks for `clear_baking_cache` and freezes: the worker's
/// session and its pending item.
async fn frozen_worker(s: &Setup) -> (String, String) {
    let out = s.agent.run("parent", "清缓存", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();
    (worker, batch.items[0].approval_id.clone())
}

#[tokio::test]
async fn a_worker_resumed_directly_keeps_the_worker_tools() {
    let s = setup(
        vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
            answer("worker: 已清空"),
        ],
        1,
    );
    let (worker, id) = frozen_worker(&s).await;
    s.agent.approve(&worker, &id).await.unwrap();
    let out = s.agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!((status, final_text.as_deref()), (RunStatus::Completed, Some("worker: 已清空")));

    let requests = s.model.requests();
    assert_eq!(requests.len(), 3);
    // The parent's round, then the worker's in the delegation, then the worker's resumed round.
    assert_eq!(tool_names(&requests[0]), ["clear_baking_cache", DELEGATE_TASK, "query_stock"]);
    assert_eq!(tool_names(&requests[1]), ["clear_baking_cache"]);
    assert_eq!(tool_names(&requests[2]), tool_names(&requests[1]), "resumed with the worker's tools");
    // The approved call ran with the worker's tool, not the parent's.
    assert_eq!((s.sandboxed.load(Ordering::SeqCst), s.cleared.load(Ordering::SeqCst)), (1, 0));
    let state = s.store.load(&worker).await.unwrap().unwrap();
    assert_eq!(
        tool_messages(&state.messages),
        [("w1".to_string(), "cleared in the sandbox".to_string(), false)]
    );
}

#[tokio::test]
async fn a_worker_dismissed_directly_runs_its_approved_calls_with_the_worker_tools() {
    let s = setup(
        vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
            answer("parent answer"),
        ],
        1,
    );
    let (worker, id) = frozen_worker(&s).await;
    s.agent.approve(&worker, &id).await.unwrap();
    let out = s.agent.dismiss(&worker, "moved on", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(s.model.requests().len(), 2, "the dismissal asked no model");
    assert_eq!((s.sandboxed.load(Ordering::SeqCst), s.cleared.load(Ordering::SeqCst)), (1, 0));
    // The approval on the worker reached the parent's batch (the dismissal denied nothing: no
    // item was left pending), which settles as for a worker resumed directly: the delegation is
    // answered with the results the dismissed worker ended on.
    assert_eq!(decision_on(s.store.as_ref(), "parent", &id).await, ApprovalDecision::Approved);
    let out = s.agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!(final_text.as_deref(), Some("parent answer"));
    let parent = s.store.load("parent").await.unwrap().unwrap();
    assert_eq!(
        tool_messages(&parent.messages),
        [("p1".to_string(), "cleared in the sandbox".to_string(), false)]
    );
    assert_eq!(s.sandboxed.load(Ordering::SeqCst), 1, "the approved call ran once");
}

#[tokio::test]
async fn a_worker_of_a_worker_resumed_directly_cannot_delegate_again() {
    // Depth limit 2: the first worker may delegate, its worker (depth 2) may not.
    let s = setup(
        vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("v1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
            answer("w2: 已清空"),
            answer("w1: 已清空"),
            answer("parent: 已清空"),
        ],
        2,
    );
    let out = s.agent.run("parent", "清缓存", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let first = batch.worker_session.clone().unwrap();
    let id = batch.items[0].approval_id.clone();
    let first_state = s.store.load(&first).await.unwrap().unwrap();
    let second = first_state.pending_approval.unwrap().worker_session.unwrap();
    // Each worker's state names its parent and depth; the parent's names none.
    assert_eq!(first_state.delegation, Some(Delegation { parent_session: "parent".into(), depth: 1 }));
    let second_state = s.store.load(&second).await.unwrap().unwrap();
    assert_eq!(second_state.delegation, Some(Delegation { parent_session: first.clone(), depth: 2 }));
    assert_eq!(s.store.load("parent").await.unwrap().unwrap().delegation, None);

    s.agent.approve(&second, &id).await.unwrap();
    let out = s.agent.resume(&second, &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!(final_text.as_deref(), Some("w2: 已清空"));
    let requests = s.model.requests();
    assert_eq!(tool_names(&requests[1]), ["clear_baking_cache", DELEGATE_TASK], "depth 1 delegates");
    assert_eq!(tool_names(&requests[2]), ["clear_baking_cache"], "depth 2 does not");
    assert_eq!(tool_names(&requests[3]), tool_names(&requests[2]), "resumed at depth 2");
    assert_eq!((s.sandboxed.load(Ordering::SeqCst), s.cleared.load(Ordering::SeqCst)), (1, 0));

    // The decision on the worker's worker reached every batch above that mirrors it, and the
    // chain above settles (module docs, point 5).
    for above in [first.as_str(), "parent"] {
        assert_eq!(decision_on(s.store.as_ref(), above, &id).await, ApprovalDecision::Approved, "{above}");
    }
    let out = s.agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!(final_text.as_deref(), Some("parent: 已清空"));
    assert_eq!(s.model.remaining(), 0);
    assert_eq!(s.sandboxed.load(Ordering::SeqCst), 1, "the approved call ran once");
}

#[tokio::test]
async fn a_new_message_on_a_worker_session_is_refused() {
    let s = setup(
        vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
            answer("worker: 已清空"),
            answer("parent answer"),
        ],
        1,
    );
    let (worker, id) = frozen_worker(&s).await;
    // Frozen: refused as a worker session, not as a session awaiting decisions.
    let before = s.store.load(&worker).await.unwrap().unwrap();
    let err = s.agent.run(&worker, "还有别的吗", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(err.code, "invalid_state", "{err}");
    assert!(err.message.contains("parent"), "names the parent session: {}", err.message);
    assert_eq!(s.store.load(&worker).await.unwrap().unwrap(), before, "nothing written");

    // Completed (the app resumed it directly): still refused, nothing asked nor written.
    s.agent.approve(&worker, &id).await.unwrap();
    s.agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    let asked = s.model.requests().len();
    let before = s.store.load(&worker).await.unwrap().unwrap();
    let err = s.agent.run(&worker, "还有别的吗", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(err.code, "invalid_state", "{err}");
    assert_eq!(s.model.requests().len(), asked, "no model was asked");
    assert_eq!(s.store.load(&worker).await.unwrap().unwrap(), before, "nothing written");
    // The parent took the decision made on its worker, and reads the worker's answer.
    assert_eq!(decision_on(s.store.as_ref(), "parent", &id).await, ApprovalDecision::Approved);
    let out = s.agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!(final_text.as_deref(), Some("parent answer"));
    let parent = s.store.load("parent").await.unwrap().unwrap();
    assert_eq!(tool_messages(&parent.messages), [("p1".to_string(), "worker: 已清空".to_string(), false)]);
}

#[tokio::test]
async fn an_agent_that_does_not_delegate_cannot_resume_a_worker() {
    let s = setup(
        vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
        ],
        1,
    );
    let (worker, id) = frozen_worker(&s).await;
    s.agent.approve(&worker, &id).await.unwrap();
    // Another agent on the same store, with the parent's tools but no delegation: it does not
    // know the worker's tools (the factory), so it runs nothing.
    let plain =
        AgentBuilder::new(s.model.clone(), s.store.clone()).tools(delegation::tools(&s.cleared)).build();
    let before = s.store.load(&worker).await.unwrap().unwrap();
    for err in [
        plain.resume(&worker, &EventLog::new(), &none()).await.unwrap_err(),
        plain.dismiss(&worker, "moved on", &EventLog::new(), &none()).await.unwrap_err(),
    ] {
        assert_eq!(err.code, "invalid_state", "{err}");
        assert!(err.message.contains("delegate_task"), "{}", err.message);
    }
    assert_eq!(s.store.load(&worker).await.unwrap().unwrap(), before, "nothing written");
    assert_eq!((s.sandboxed.load(Ordering::SeqCst), s.cleared.load(Ordering::SeqCst)), (0, 0));
}

#[tokio::test]
async fn after_a_restart_a_worker_resumed_directly_still_gets_the_worker_tools() {
    // The worker's origin is in its journal: a new agent on the same files knows it.
    let dir = tempfile::tempdir().unwrap();
    let store = || Arc::new(FileStore::new(dir.path())) as Arc<dyn StateStore>;
    let before = setup_on(
        vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
        ],
        1,
        store(),
    );
    let (worker, id) = frozen_worker(&before).await;
    drop(before);
    let after = setup_on(vec![answer("worker: 已清空")], 1, store());
    assert_eq!(
        after.store.load(&worker).await.unwrap().unwrap().delegation,
        Some(Delegation { parent_session: "parent".into(), depth: 1 })
    );
    after.agent.approve(&worker, &id).await.unwrap();
    let out = after.agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(tool_names(&after.model.requests()[0]), ["clear_baking_cache"]);
    assert_eq!((after.sandboxed.load(Ordering::SeqCst), after.cleared.load(Ordering::SeqCst)), (1, 0));
}

#[test]
fn a_run_start_without_a_delegation_is_written_as_before_the_field_existed() {
    let plain = StateEvent::RunStarted { run_id: "r".into(), delegation: None };
    assert_eq!(serde_json::to_string(&plain).unwrap(), r#"{"event":"run_started","run_id":"r"}"#);
    let origin = Delegation { parent_session: "parent".into(), depth: 1 };
    let worker = StateEvent::RunStarted { run_id: "r".into(), delegation: Some(origin.clone()) };
    let text = serde_json::to_string(&worker).unwrap();
    assert_eq!(
        text,
        r#"{"event":"run_started","run_id":"r","delegation":{"parent_session":"parent","depth":1}}"#
    );
    assert_eq!(serde_json::from_str::<StateEvent>(&text).unwrap(), worker);
    // A state saved before the field existed has none; the worker's later runs keep it.
    let mut state = AgentState::new("w");
    assert!(serde_json::to_value(&state).unwrap().get("delegation").is_none());
    let old =
        arkagent::state::codec::decode_state_json(serde_json::to_string(&state).unwrap().as_bytes()).unwrap();
    assert_eq!(old.delegation, None);
    state.apply(&worker);
    state.apply(&plain);
    assert_eq!(state.delegation, Some(origin));
}

/// Counts the batches announced to `on_approval_required`.
struct Counting(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl AgentHook for Counting {
    async fn on_approval_required(&self, _ctx: &HookContext<'_>, _batch: &PendingApprovalBatch) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_worker_resumed_directly_that_freezes_again_is_announced() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let heard = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w2", "clear_baking_cache", "{}")]),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model, store.clone())
            .tools(delegation::tools(&cleared))
            .hook(Arc::new(Counting(heard.clone())))
            .config(AgentConfig { max_delegation_depth: 1, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!() };
    assert_eq!(heard.load(Ordering::SeqCst), 1);
    let worker = batch.worker_session.clone().unwrap();
    agent.approve(&worker, &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume(&worker, &EventLog::new(), &none()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }), "{out:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    assert_eq!(heard.load(Ordering::SeqCst), 2, "the new batch the app's resume froze on is announced");
}
