//! A parent's batch that a worker froze continues as it stood once the user decided: calls the
//! user already approved are not asked again, and what the parent's after-hooks did for the calls
//! that finished before the freeze (injected messages, a stop) is kept.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentEvent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::state::{FileStore, RunStatus, StateEvent, StateStore};
use arkagent::{CancellationSignal, ToolRegistry, ToolResult};
use delegation::tools;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, MemStore, Script};

fn agent(model: Arc<Script>, store: Arc<dyn StateStore>, tools: ToolRegistry) -> Arc<Agent> {
    let agent = Arc::new(AgentBuilder::new(model, store).tools(tools).hook(Arc::new(NoteStock)).build());
    agent.enable_delegation(None).unwrap();
    agent
}

/// After a `query_stock` call: injects a note and asks to stop after the batch. (Hooks are shared
/// with workers; the workers here never call `query_stock`.)
struct NoteStock;

#[async_trait::async_trait]
impl AgentHook for NoteStock {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        if call.name != "query_stock" {
            return AfterToolCall::default();
        }
        AfterToolCall {
            action: AfterToolCallAction::Stop,
            inject: vec![ChatMessage::user("note: stock checked")],
        }
    }
}

fn results(messages: &[ChatMessage]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, content, .. } => Some((tool_call_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

fn approvals_asked(events: &EventLog) -> usize {
    events.events().iter().filter(|e| matches!(e, AgentEvent::ApprovalRequired { .. })).count()
}

#[tokio::test]
async fn an_approved_call_after_a_delegation_is_not_asked_again() {
    for file_store in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // A new store per "process" when on files: the decision survives a restart.
        let mem: Arc<dyn StateStore> = Arc::new(MemStore::new());
        let process = || -> Arc<dyn StateStore> {
            if file_store {
                Arc::new(FileStore::new(dir.path()))
            } else {
                mem.clone()
            }
        };
        let cleared = Arc::new(AtomicUsize::new(0));
        let model = Arc::new(Script::new(vec![
            // The parent's batch: the delegation first, then a dangerous call of its own.
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#), ("p2", "clear_baking_cache", "{}")]),
            calls(&[("w1", "clear_baking_cache", "{}")]), // the worker, frozen
            answer("worker: 已清空"),                     // the worker, after the decision
            answer("都清好了"),                           // the parent
        ]));
        let events = EventLog::new();
        let parent = agent(model.clone(), process(), tools(&cleared));
        let out = parent.run("parent", "清两次缓存", &events, &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
        assert_eq!(batch.items[0].tool_call.id, "p2");
        parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
        let out = parent.resume("parent", &events, &CancellationSignal::new()).await.unwrap();
        // The approved batch ran its delegation, whose worker froze on its own dangerous call.
        let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
        assert_eq!((batch.items[0].tool_call.id.as_str(), batch.worker_session.is_some()), ("w1", true));
        assert_eq!(cleared.load(Ordering::SeqCst), 0);

        drop(parent);
        let store = process();
        let parent = agent(model.clone(), store.clone(), tools(&cleared));
        parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
        let out = parent.resume("parent", &events, &CancellationSignal::new()).await.unwrap();
        // p2 was approved with the parent's batch: it runs now, without a third question.
        assert_eq!(out.status(), RunStatus::Completed, "file_store={file_store}: {out:?}");
        assert_eq!(approvals_asked(&events), 2);
        assert_eq!(cleared.load(Ordering::SeqCst), 2, "the worker's call and p2, once each");
        let state = store.load("parent").await.unwrap().unwrap();
        assert_eq!(
            results(&state.messages),
            [("p1".to_string(), "worker: 已清空".to_string()), ("p2".to_string(), "cleared".to_string())]
        );
        assert!(state.pending_approval.is_none());
        assert_eq!(model.remaining(), 0);
    }
}

#[tokio::test]
async fn what_after_hooks_did_before_a_worker_froze_the_batch_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        // Both safe: they run together; p1 finishes (its hook injects and asks to stop) while the
        // worker of p2 freezes.
        calls(&[("p1", "query_stock", r#"{"sku":"A"}"#), ("p2", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker: 已清空"),
        // No parent round 2: the hook asked to stop after the batch.
    ]));
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let parent = agent(model.clone(), store.clone(), tools(&cleared));
    let out =
        parent.run("parent", "查库存再清缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    drop(parent);

    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let parent = agent(model.clone(), store.clone(), tools(&cleared));
    parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = parent.resume("parent", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(model.remaining(), 0, "the stop asked before the freeze holds: no further model round");
    let state = store.load("parent").await.unwrap().unwrap();
    let tail: Vec<&ChatMessage> = state.messages.iter().rev().take(3).collect();
    assert_eq!(tail[0], &ChatMessage::user("note: stock checked"), "the injected note follows the results");
    assert_eq!(
        results(&state.messages),
        [("p1".to_string(), "A: 12 件".to_string()), ("p2".to_string(), "worker: 已清空".to_string())]
    );
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_mirror_saved_without_the_parent_plan_still_continues() {
    // State written before mirrors kept the parent's batch: its calls are planned anew, so p2
    // is asked once more (what those versions did), and the run still completes.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#), ("p2", "clear_baking_cache", "{}")]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("worker: 已清空"),
        answer("都清好了"),
    ]));
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let parent = agent(model.clone(), store.clone(), tools(&cleared));
    let none = CancellationSignal::new;
    let RunOutcome::Suspended { batch } =
        parent.run("parent", "清", &EventLog::new(), &none()).await.unwrap()
    else {
        panic!("the parent's own batch freezes")
    };
    parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let RunOutcome::Suspended { batch } = parent.resume("parent", &EventLog::new(), &none()).await.unwrap()
    else {
        panic!("the worker freezes")
    };
    let mut old = store.load("parent").await.unwrap().unwrap();
    let mirror = old.pending_approval.as_mut().unwrap();
    assert_eq!(mirror.calls.len(), 2, "the mirror keeps the parent's batch");
    mirror.calls.clear();
    store.save_snapshot(&old).await.unwrap();

    parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = parent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("p2 is planned anew: {out:?}") };
    // The whole batch froze again, the delegation with it: nothing has run yet.
    assert_eq!((batch.items[0].tool_call.id.as_str(), cleared.load(Ordering::SeqCst)), ("p2", 0));
    parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = parent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn a_new_message_after_a_kill_in_a_continued_mirror_keeps_what_its_hooks_did() {
    // As `what_after_hooks_did_before_a_worker_froze_the_batch_is_kept`, but the process is killed
    // while the decided mirror runs the delegation again (p1's answer and p2's start saved), and
    // the app then sends a new message instead of resuming. The note p1's hook injected before
    // the freeze (kept on the mirror) goes after the batch's results and before the new message.
    let dir = tempfile::tempdir().unwrap();
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", "query_stock", r#"{"sku":"A"}"#), ("p2", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("好的"), // the parent, on the new message
        answer("再见"),
    ]));
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let parent = agent(model.clone(), store.clone(), tools(&cleared));
    let out =
        parent.run("parent", "查库存再清缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    parent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    // What the mirror's resume saves before the worker runs again; the process dies then.
    let mut state = store.load_unrepaired("parent").await.unwrap().unwrap();
    let events = [
        StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None },
        StateEvent::ToolFinished {
            call_id: "p1".into(),
            name: "query_stock".into(),
            result: ToolResult::text("A: 12 件"),
            stop_requested: false,
            injected: Vec::new(),
        },
        StateEvent::ToolStarted {
            call_id: "p2".into(),
            name: DELEGATE_TASK.into(),
            worker_session: batch.worker_session.clone(),
        },
    ];
    for event in &events {
        state.apply(event);
    }
    store.commit(&state, &events).await.unwrap();
    drop(parent);

    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let parent = agent(model.clone(), store.clone(), tools(&cleared));
    let out = parent.run("parent", "算了", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    let state = store.load("parent").await.unwrap().unwrap();
    let answered: Vec<String> = results(&state.messages).into_iter().map(|(id, _)| id).collect();
    assert_eq!(answered, ["p1", "p2"]);
    let tail: Vec<&ChatMessage> = state.messages.iter().rev().take(3).collect();
    assert_eq!(
        tail,
        [
            &ChatMessage::assistant_text("好的"),
            &ChatMessage::user("算了"),
            &ChatMessage::user("note: stock checked")
        ]
    );
    // Injected once: a second message does not add it again.
    let out = parent.run("parent", "再见", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!((out.status(), model.remaining()), (RunStatus::Completed, 0));
    let state = store.load("parent").await.unwrap().unwrap();
    let notes = state.messages.iter().filter(|m| **m == ChatMessage::user("note: stock checked")).count();
    assert_eq!(notes, 1);
    assert_eq!(cleared.load(Ordering::SeqCst), 0, "the worker's call never ran");
}
