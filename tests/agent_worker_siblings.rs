//! Parallel delegations of one batch whose workers freeze side by side: the parent mirrors one
//! worker's batch (`worker_session`) and offers the items of the others frozen beside it in the
//! same batch (`item_workers`), so the user decides them all at once and one resume runs them,
//! each decision reaching the worker that holds its item. A dismissal of the parent settles
//! every one of them with its denial (none runs its dangerous call, none stays awaiting, each
//! one's usage counted in the parent once), and none runs even a call the user approved unless
//! every item was approved (then all run); a parent's run that ends cancelled or aborted while
//! one is frozen ends it `cancelled`, its batch cleared, so its call never runs for nobody; and
//! `Agent::usage_so_far` of the frozen parent counts all of them, once.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::approval::{ApprovalDecision, PendingApprovalBatch};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, HookContext};
use arkagent::message::{ToolCall, Usage};
use arkagent::provider::ModelResponse;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::{FnExecutor, ToolContext};
use arkagent::{CancellationSignal, ToolDefinition, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};

fn costing(mut response: ModelResponse, prompt: u64, completion: u64) -> ModelResponse {
    response.usage = Some(usage(prompt, completion));
    response
}

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
}

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

/// The parent's answer: two delegations in one batch (both `delegate_task`, safe: they run in
/// parallel).
fn two_delegations() -> ModelResponse {
    costing(
        calls(&[
            ("d1", DELEGATE_TASK, r#"{"task":"清缓存 A"}"#),
            ("d2", DELEGATE_TASK, r#"{"task":"清缓存 B"}"#),
        ]),
        100,
        10,
    )
}

/// The worker sessions of `parent`'s delegations, in the order its calls started.
async fn workers(store: &MemStore) -> Vec<String> {
    store.load_unrepaired("parent").await.unwrap().unwrap().workers
}

/// Waits until a worker of the parent's is frozen (awaiting approval) in `store`.
async fn until_a_worker_froze(store: &MemStore) {
    let waited = async {
        loop {
            if let Some(parent) = store.load_unrepaired("parent").await.unwrap() {
                for worker in &parent.workers {
                    let state = store.load_unrepaired(worker).await.unwrap();
                    if state.is_some_and(|s| s.status == RunStatus::AwaitingApproval) {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), waited).await.expect("a worker froze");
}

/// Neither worker may be continued into its dangerous call: each is settled (not awaiting, no
/// batch), refuses a decision and a resume, and `clear_baking_cache` never ran.
async fn assert_no_worker_runs_on(
    agent: &Agent,
    store: &MemStore,
    cleared: &AtomicUsize,
    settled: RunStatus,
) {
    let workers = workers(store).await;
    assert_eq!(workers.len(), 2);
    for worker in &workers {
        let state = store.load(worker).await.unwrap().unwrap();
        assert_eq!(state.status, settled, "{worker}");
        assert!(state.pending_approval.is_none(), "{worker}");
        assert!(agent.resume(worker, &EventLog::new(), &none()).await.is_err(), "{worker}");
    }
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "no dangerous call ran");
}

#[tokio::test]
async fn a_dismissal_settles_every_worker_frozen_in_the_batch() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20), // one worker: frozen
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30), // the other: frozen
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let mirrored = batch.worker_session.clone().unwrap();
    let other = workers(&store).await.into_iter().find(|w| *w != mirrored).unwrap();
    assert_eq!(store.load(&other).await.unwrap().unwrap().status, RunStatus::AwaitingApproval);
    let total = usage(600, 60);

    let events = EventLog::new();
    let out = agent.dismiss("parent", "不用了", &events, &none()).await.unwrap();
    let RunOutcome::Finished { status, usage: used, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_no_worker_runs_on(&agent, &store, &cleared, RunStatus::Completed).await;
    assert_eq!(used, total, "both workers' usage counted in the parent's, once");
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, total);
    assert_eq!(model.remaining(), 0, "no model asked, the workers' neither");

    // The worker beside the mirrored one completed with the denial too, without its model.
    let state = store.load(&other).await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert!(results.iter().any(|r| r.1.contains("不用了")), "{results:?}");
    // Its events reach the parent's sink, wrapped as its delegating call's.
    let finished_here = events.events().iter().any(|e| {
        matches!(e, AgentEvent::WorkerEvent { session_id, event, .. }
            if *session_id == other && matches!(**event, AgentEvent::RunFinished { .. }))
    });
    assert!(finished_here, "{:?}", events.events());
    // Approving the settled worker's item is refused: nothing is pending there any more.
    let item = &batch.items[0].approval_id;
    assert!(agent.approve(&other, item).await.is_err());
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(total));
}

#[tokio::test]
async fn usage_so_far_counts_every_worker_frozen_in_the_batch_once() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model, store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { .. } = out else { panic!("{out:?}") };
    // Its own round and both workers' (the mirrored one and the one beside it), once each.
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(usage(600, 60)));
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(100, 10), "not saved yet");
}

#[tokio::test]
async fn every_frozen_worker_items_are_offered_at_once_and_one_resume_runs_them() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30),
        costing(answer("worker done"), 400, 40),
        costing(answer("worker done"), 500, 50),
        costing(answer("parent done"), 600, 60),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), &cleared, 1);
    let events = EventLog::new();
    let out = agent.run("parent", "q", &events, &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    // One batch offers both workers' calls: the mirrored worker's, and the one frozen beside it,
    // each named with the worker session it is decided in.
    let workers = workers(&store).await;
    assert_eq!(workers.len(), 2);
    assert_eq!(batch.items.len(), 2, "{batch:#?}");
    let first = batch.worker_session.clone().expect("a mirror");
    let beside = workers.iter().find(|w| **w != first).unwrap().clone();
    assert_eq!(batch.item_worker(&batch.items[0].approval_id), Some(first.as_str()));
    assert_eq!(batch.item_worker(&batch.items[1].approval_id), Some(beside.as_str()));
    let approvals: Vec<_> =
        events.events().into_iter().filter(|e| matches!(e, AgentEvent::ApprovalRequired { .. })).collect();
    assert!(matches!(approvals.last(), Some(AgentEvent::ApprovalRequired { batch: last }) if *last == batch));
    // Both frozen workers' usage, counted once.
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(usage(600, 60)));
    // A decision on the parent reaches the worker that holds the item.
    agent.approve("parent", &batch.items[1].approval_id).await.unwrap();
    let held = store.load(&beside).await.unwrap().unwrap().pending_approval.unwrap();
    assert_eq!(held.items[0].decision, ApprovalDecision::Approved);
    // A decision on a worker session reaches the parent's batch.
    agent.approve(&first, &batch.items[0].approval_id).await.unwrap();
    let mirror = store.load("parent").await.unwrap().unwrap().pending_approval.unwrap();
    assert!(mirror.is_fully_decided(), "{mirror:#?}");
    // One resume runs both approved calls, in their workers, and the parent answers.
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, usage: used, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(used, usage(2100, 210));
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
    for worker in &workers {
        assert_eq!(store.load(worker).await.unwrap().unwrap().status, RunStatus::Completed, "{worker}");
    }
}

#[tokio::test]
async fn a_denial_of_the_item_beside_reaches_its_worker_only() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30),
        costing(answer("worker done"), 400, 40),
        costing(answer("worker done"), 500, 50),
        costing(answer("parent done"), 600, 60),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items.len(), 2, "{batch:#?}");
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    agent.deny("parent", &batch.items[1].approval_id, "not that one").await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1, "only the approved call ran");
    // Each delegating call got its worker's answer (the denied worker answered after its denial).
    let results = tool_messages(&store.load("parent").await.unwrap().unwrap().messages);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(_, text, is_error)| text == "worker done" && !is_error), "{results:?}");
    let beside = batch.item_worker(&batch.items[1].approval_id).unwrap();
    let worker = store.load(beside).await.unwrap().unwrap();
    assert!(tool_messages(&worker.messages)[0].1.contains("not that one"), "{:?}", worker.messages);
}

/// An agent whose workers also have `wait` (safe): it waits until a worker froze, then runs
/// `then` (given the call's context), and answers `waited`.
fn agent_with_wait<F, Fut>(
    model: Arc<Script>,
    store: Arc<MemStore>,
    cleared: &Arc<AtomicUsize>,
    then: F,
) -> AgentBuilder
where
    F: Fn(ToolContext) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut tools = delegation::tools(cleared);
    let watched = store.clone();
    tools
        .register(
            ToolDefinition::new("wait", "等", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, ctx: ToolContext| {
                let (store, then) = (watched.clone(), then.clone());
                async move {
                    until_a_worker_froze(&store).await;
                    then(ctx).await;
                    Ok(ToolResult::text("waited"))
                }
            })),
        )
        .unwrap();
    AgentBuilder::new(model, store)
        .tools(tools)
        .config(AgentConfig { max_delegation_depth: 1, ..AgentConfig::default() })
}

/// The event contract for the workers' runs in one parent run's `events`: each worker's run
/// (its events wrapped as `WorkerEvent`, at any depth) opens a segment with `RunStarted` and
/// closes it with `ApprovalRequired` or `RunFinished`, and ends with exactly one `RunFinished`
/// of `status`, before the parent's own, which is the last event. Returns the workers' sessions.
fn assert_every_worker_run_finished(events: &[AgentEvent], status: RunStatus) -> Vec<String> {
    fn collect(event: &AgentEvent, into: &mut Vec<(String, AgentEvent)>) {
        if let AgentEvent::WorkerEvent { session_id, event, .. } = event {
            match &**event {
                inner @ AgentEvent::WorkerEvent { .. } => collect(inner, into),
                inner => into.push((session_id.clone(), inner.clone())),
            }
        }
    }
    let mut inner = Vec::new();
    for event in events {
        collect(event, &mut inner);
    }
    let mut sessions: Vec<String> = inner.iter().map(|(s, _)| s.clone()).collect();
    sessions.dedup();
    sessions.sort();
    sessions.dedup();
    for session in &sessions {
        let (mut open, mut finished) = (false, Vec::new());
        for (_, event) in inner.iter().filter(|(s, _)| s == session) {
            match event {
                AgentEvent::RunStarted { .. } => {
                    assert!(!open && finished.is_empty(), "{session}: run_started in a segment: {inner:#?}");
                    open = true;
                }
                AgentEvent::ApprovalRequired { .. } | AgentEvent::RunFinished { .. } => {
                    assert!(open, "{session}: {event:?} outside a segment: {inner:#?}");
                    open = false;
                    if let AgentEvent::RunFinished { status, .. } = event {
                        finished.push(*status);
                    }
                }
                _ => {}
            }
        }
        assert_eq!(finished, vec![status], "{session}: its run ends with one run_finished: {inner:#?}");
    }
    assert!(matches!(events.last(), Some(AgentEvent::RunFinished { .. })), "{events:#?}");
    sessions
}

#[tokio::test]
async fn a_cancel_ends_a_worker_frozen_while_another_ran() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20), // one worker: frozen
        costing(calls(&[("w1", "wait", "{}")]), 300, 30),               // the other: cancels
        costing(answer("parent, next"), 400, 40),
    ]));
    let store = Arc::new(MemStore::new());
    let cancel = none();
    let run_cancel = cancel.clone();
    let cancel_then_wait = move |ctx: ToolContext| {
        let cancel = run_cancel.clone();
        async move {
            cancel.cancel("user left");
            ctx.signal.cancelled().await;
        }
    };
    let agent = Arc::new(agent_with_wait(model.clone(), store.clone(), &cleared, cancel_then_wait).build());
    agent.enable_delegation(None).unwrap();
    let events = EventLog::new();
    let out = agent.run("parent", "q", &events, &cancel).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    assert_no_worker_runs_on(&agent, &store, &cleared, RunStatus::Cancelled).await;
    // Both workers' runs end with a `run_finished`, the frozen one's too: it was ended, not left
    // awaiting a resume that never comes.
    let told = assert_every_worker_run_finished(&events.events(), RunStatus::Cancelled);
    assert_eq!(told.len(), 2, "{:#?}", events.events());
    // The parent's next run answers both delegating calls interrupted and counts what each
    // worker used, once.
    let out = agent.run("parent", "next", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, usage: used, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(used, usage(1000, 100));
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn a_cancel_ends_a_frozen_worker_and_those_frozen_below_it_each_run_told_ended() {
    // The parent delegates once, beside a `wait` that cancels the run once that worker froze: its
    // worker delegates twice in parallel, and both of those freeze on `clear_baking_cache`.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"让下级清缓存"}"#), ("x1", "wait", "{}")]),
        calls(&[
            ("e1", DELEGATE_TASK, r#"{"task":"清缓存 A"}"#),
            ("e2", DELEGATE_TASK, r#"{"task":"清缓存 B"}"#),
        ]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ]));
    let store = Arc::new(MemStore::new());
    let cancel = none();
    let run_cancel = cancel.clone();
    let cancel_then_wait = move |ctx: ToolContext| {
        let cancel = run_cancel.clone();
        async move {
            cancel.cancel("user left");
            ctx.signal.cancelled().await;
        }
    };
    let agent = Arc::new(
        agent_with_wait(model.clone(), store.clone(), &cleared, cancel_then_wait)
            .config(AgentConfig { max_delegation_depth: 2, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let events = EventLog::new();
    let out = agent.run("parent", "q", &events, &cancel).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    // The middle worker and both below it were ended, and their runs say so, each wrapped as
    // its delegating call's (the inner ones in the middle one's wrapper).
    let told = assert_every_worker_run_finished(&events.events(), RunStatus::Cancelled);
    assert_eq!(told.len(), 3, "{:#?}", events.events());
    for worker in &told {
        let state = store.load_unrepaired(worker).await.unwrap().unwrap();
        assert_eq!(state.status, RunStatus::Cancelled, "{worker}");
        assert!(state.pending_approval.is_none(), "{worker}");
    }
    let nested = events.events().iter().any(|e| {
        matches!(e, AgentEvent::WorkerEvent { call_id, event, .. } if call_id == "d1"
            && matches!(&**event, AgentEvent::WorkerEvent { event, .. }
                if matches!(**event, AgentEvent::RunFinished { status: RunStatus::Cancelled, .. })))
    });
    assert!(nested, "{:#?}", events.events());
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    assert_eq!(model.remaining(), 0);
}

/// Aborts the run on a delegating call's result.
struct AbortOnDelegation;

#[async_trait::async_trait]
impl AgentHook for AbortOnDelegation {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _result: &ToolResult,
    ) -> AfterToolCall {
        if call.name == DELEGATE_TASK {
            AfterToolCall { action: AfterToolCallAction::Abort("policy says stop".into()), inject: vec![] }
        } else {
            AfterToolCall::default()
        }
    }
}

#[tokio::test]
async fn an_abort_ends_a_worker_frozen_beside_the_call_it_aborted_on() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20), // one worker: frozen
        costing(calls(&[("w1", "wait", "{}")]), 300, 30),               // the other: answers
        costing(answer("worker done"), 400, 40),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        agent_with_wait(model.clone(), store.clone(), &cleared, |_ctx| async {})
            .hook(Arc::new(AbortOnDelegation))
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let events = EventLog::new();
    let out = agent.run("parent", "q", &events, &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Aborted);
    let workers = workers(&store).await;
    // The worker that answered finished completed; the frozen one's run ends `cancelled`, told.
    let frozen = workers.iter().find(|w| {
        events.events().iter().any(|e| {
            matches!(e, AgentEvent::WorkerEvent { session_id, event, .. }
            if *session_id == **w && matches!(**event, AgentEvent::ApprovalRequired { .. }))
        })
    });
    let frozen = frozen.expect("a worker froze").clone();
    let only_frozen: Vec<AgentEvent> = events
        .events()
        .into_iter()
        .filter(|e| !matches!(e, AgentEvent::WorkerEvent { session_id, .. } if *session_id != frozen))
        .collect();
    assert_eq!(assert_every_worker_run_finished(&only_frozen, RunStatus::Cancelled), vec![frozen]);
    let statuses: Vec<RunStatus> = {
        let mut s = Vec::new();
        for w in &workers {
            s.push(store.load(w).await.unwrap().unwrap().status);
        }
        s
    };
    assert!(statuses.contains(&RunStatus::Completed), "the worker that answered: {statuses:?}");
    assert!(statuses.contains(&RunStatus::Cancelled), "the frozen one, ended: {statuses:?}");
    for worker in &workers {
        assert!(store.load(worker).await.unwrap().unwrap().pending_approval.is_none(), "{worker}");
        assert!(agent.resume(worker, &EventLog::new(), &none()).await.is_err(), "{worker}");
    }
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    assert_eq!(model.remaining(), 0);
}

/// The parent delegates once; its worker delegates twice in parallel, and both of those freeze
/// on `clear_baking_cache`: the agent, its store and model, and the parent's batch, which offers
/// both inner workers' calls at the top. The model answers `answers` after the freeze.
async fn frozen_one_level_down(
    answers: &[&str],
    cleared: &Arc<AtomicUsize>,
) -> (Arc<Agent>, Arc<MemStore>, Arc<Script>, PendingApprovalBatch) {
    let mut script = vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"让下级清缓存"}"#)]),
        calls(&[
            ("e1", DELEGATE_TASK, r#"{"task":"清缓存 A"}"#),
            ("e2", DELEGATE_TASK, r#"{"task":"清缓存 B"}"#),
        ]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ];
    script.extend(answers.iter().map(|text| answer(text)));
    let model = Arc::new(Script::new(script));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), cleared, 2);
    let out = agent.run("parent", "清缓存", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items.len(), 2, "both inner workers' calls, offered at the top: {batch:#?}");
    (agent, store, model, batch)
}

#[tokio::test]
async fn workers_frozen_side_by_side_one_level_down_are_offered_at_once_at_the_top() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let (agent, store, model, batch) =
        frozen_one_level_down(&["已清空", "已清空", "下级已清空", "全部完成"], &cleared).await;
    let middle = batch.worker_session.clone().unwrap();
    assert!(batch.item_workers.is_empty(), "every item is decided through the middle worker");
    let middle_batch = store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap();
    assert_eq!(middle_batch.item_workers.len(), 1, "{middle_batch:#?}");
    for item in &batch.items {
        agent.approve("parent", &item.approval_id).await.unwrap();
        let inner = middle_batch.item_worker(&item.approval_id).unwrap();
        let held = store.load(inner).await.unwrap().unwrap().pending_approval.unwrap();
        assert!(held.is_fully_decided(), "{inner} decided too");
    }
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
    assert_eq!(model.remaining(), 0);
}

/// Dismisses the parent after approving `approved` (by index in the parent's batch, each on the
/// session `on` names: the parent, or the worker that holds the item), with both workers frozen
/// side by side on `clear_baking_cache`. Returns the run's status and the parent's results.
async fn dismiss_after_approving(
    approved: &[usize],
    on_worker: bool,
    cleared: &Arc<AtomicUsize>,
) -> (RunStatus, Vec<(String, String, bool)>, Arc<MemStore>, Arc<Agent>) {
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker done"),
        answer("worker done"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model, store.clone(), cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items.len(), 2, "{batch:#?}");
    for &i in approved {
        let item = &batch.items[i].approval_id;
        let session = if on_worker { batch.item_worker(item).unwrap() } else { "parent" };
        agent.approve(session, item).await.unwrap();
    }
    let out = agent.dismiss("parent", "不用了", &EventLog::new(), &none()).await.unwrap();
    let results = tool_messages(&store.load("parent").await.unwrap().unwrap().messages);
    (out.status(), results, store, agent)
}

#[tokio::test]
async fn a_dismissal_after_approving_one_worker_item_runs_no_worker_call() {
    // The item approved may be the mirrored worker's or the one beside it's, decided on the
    // parent or on the worker session itself: the parent's batch was not approved entirely, so
    // the dismissal runs nothing in any worker (as with one worker holding both calls).
    for (approved, on_worker) in [(0, false), (1, false), (0, true), (1, true)] {
        let cleared = Arc::new(AtomicUsize::new(0));
        let (status, results, store, agent) = dismiss_after_approving(&[approved], on_worker, &cleared).await;
        assert_eq!(status, RunStatus::Completed);
        assert_no_worker_runs_on(&agent, &store, &cleared, RunStatus::Completed).await;
        // The parent's results tell the truth: neither delegation ran its call.
        assert_eq!(results.len(), 2);
        assert!(
            results.iter().all(|(_, text, is_error)| *is_error && text.contains("tool_not_run")),
            "{results:?}"
        );
        // Each worker answered its own call not run: the approved one with the dismissal's
        // wording, the denied one with the denial.
        for worker in workers(&store).await {
            let state = store.load(&worker).await.unwrap().unwrap();
            let worker_results = tool_messages(&state.messages);
            assert_eq!(worker_results.len(), 1, "{worker}: {worker_results:?}");
            let (_, text, is_error) = &worker_results[0];
            assert!(*is_error && text.contains("不用了"), "{worker}: {text}");
        }
    }
}

#[tokio::test]
async fn a_dismissal_after_approving_every_worker_item_runs_them_all() {
    for on_worker in [false, true] {
        let cleared = Arc::new(AtomicUsize::new(0));
        let (status, results, store, _agent) = dismiss_after_approving(&[0, 1], on_worker, &cleared).await;
        assert_eq!(status, RunStatus::Completed);
        assert_eq!(cleared.load(Ordering::SeqCst), 2, "a batch approved entirely runs");
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(|(_, text, is_error)| text == "worker done" && !is_error), "{results:?}");
        for worker in workers(&store).await {
            assert_eq!(store.load(&worker).await.unwrap().unwrap().status, RunStatus::Completed, "{worker}");
        }
    }
}

#[tokio::test]
async fn a_dismissal_after_approving_one_item_runs_no_call_one_level_down() {
    // One item approved, then the parent dismissed: no inner worker runs its call.
    let cleared = Arc::new(AtomicUsize::new(0));
    let (agent, store, _model, batch) = frozen_one_level_down(&["已清空", "下级已清空"], &cleared).await;
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.dismiss("parent", "不用了", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "no dangerous call ran");
    let middle = batch.worker_session.clone().unwrap();
    let middle_state = store.load(&middle).await.unwrap().unwrap();
    assert_eq!(middle_state.status, RunStatus::Completed);
    for inner in &middle_state.workers {
        let state = store.load(inner).await.unwrap().unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{inner}");
        assert!(state.pending_approval.is_none(), "{inner}");
    }
    let results = tool_messages(&store.load("parent").await.unwrap().unwrap().messages);
    assert!(
        results.iter().all(|(_, text, is_error)| *is_error && text.contains("tool_not_run")),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_resume_cancelled_before_it_ran_the_batch_ends_the_workers_frozen_under_it() {
    // Both workers froze side by side; the app approves everything, then resumes the parent with
    // a signal already cancelled: the batch never runs on, so the workers, which nothing could
    // continue any more, end cancelled too, each run told ended in the parent's events.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { .. } = out else { panic!("{out:?}") };
    agent.approve_all("parent").await.unwrap();
    let cancelled = CancellationSignal::new();
    cancelled.cancel("the user left");
    let events = EventLog::new();
    let out = agent.resume("parent", &events, &cancelled).await.unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    for worker in workers(&store).await {
        let state = store.load(&worker).await.unwrap().unwrap();
        assert_eq!(state.status, RunStatus::Cancelled, "{worker} is not left awaiting approval");
        assert!(state.pending_approval.is_none(), "{worker}");
    }
    assert_eq!(assert_every_worker_run_finished(&events.events(), RunStatus::Cancelled).len(), 2);
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "no worker's call ran");
}
