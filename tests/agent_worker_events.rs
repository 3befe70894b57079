//! A worker's events reach the parent's sink: each wrapped in `AgentEvent::WorkerEvent` with the
//! delegating call and the worker's session, between that call's start and its `ToolResult`; on the
//! run that suspends for the worker's approval and on the resumed run; nested for a worker's
//! worker; tagged per call when delegations run in parallel.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::error::AgentError;
use arkagent::message::ChatMessage;
use arkagent::provider::{ChatModel, ChatRequest, ModelEvent, ModelEventStream, ModelResponse};
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use delegation::tools;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, MemStore, Script};

/// A wrapped event unwrapped one level: (delegating call, worker session, inner event).
fn unwrap(event: &AgentEvent) -> Option<(&str, &str, &AgentEvent)> {
    match event {
        AgentEvent::WorkerEvent { call_id, session_id, event } => Some((call_id, session_id, event)),
        _ => None,
    }
}

fn position(events: &[AgentEvent], what: impl Fn(&AgentEvent) -> bool) -> usize {
    events.iter().position(what).expect("the event is there")
}

fn is_result_of(event: &AgentEvent, id: &str) -> bool {
    matches!(event, AgentEvent::ToolResult { call_id, .. } if call_id == id)
}

/// Checks that the worker events of the call `id` form one block right before its `ToolResult`,
/// after the parent's commit of the call's `started` record; returns the block's inner events and
/// the worker session they name.
fn worker_block(events: &[AgentEvent], id: &str) -> (Vec<AgentEvent>, String) {
    let result = position(events, |e| is_result_of(e, id));
    let first = position(events, |e| unwrap(e).is_some());
    assert!(first > 0 && matches!(events[first - 1], AgentEvent::StatePersisted { .. }), "{events:#?}");
    let block = &events[first..result];
    let session = unwrap(&block[0]).unwrap().1.to_string();
    let inner = block
        .iter()
        .map(|e| {
            let (call, worker, inner) = unwrap(e).unwrap_or_else(|| panic!("not a worker's: {e:?}"));
            assert_eq!((call, worker), (id, session.as_str()));
            inner.clone()
        })
        .collect();
    assert!(
        events[result + 1..].iter().all(|e| unwrap(e).is_none()),
        "nothing of the worker after its result"
    );
    (inner, session)
}

#[tokio::test]
async fn a_delegation_emits_the_worker_events_wrapped_before_the_call_result() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"查 SKU001 库存"}"#)]), // parent
        calls(&[("w1", "query_stock", r#"{"sku":"SKU001"}"#)]),          // worker round 1
        answer("SKU001 有 12 件"),                                       // worker round 2
        answer("库存充足"),                                              // parent round 2
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let events = EventLog::new();
    let out = agent.run("parent", "SKU001 还有货吗", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let events = events.events();
    let (inner, worker) = worker_block(&events, "p1");
    let sessions = store.session_ids();
    assert!(worker != "parent" && sessions.contains(&worker), "{worker} in {sessions:?}");
    assert!(
        matches!(&inner[0], AgentEvent::RunStarted { session_id, resumed: false, .. } if *session_id == worker),
        "{inner:?}"
    );
    // The worker's own stream: its call, its result, its answer's text, its end.
    assert!(inner.iter().any(|e| matches!(e, AgentEvent::ToolCallStarted { id, .. } if id == "w1")));
    let result = inner.iter().find(|e| is_result_of(e, "w1")).expect("the worker's tool result");
    let AgentEvent::ToolResult { name, result, .. } = result else { unreachable!() };
    assert_eq!((name.as_str(), result.to_model_text()), ("query_stock", "SKU001: 12 件".to_string()));
    assert!(inner.iter().any(|e| matches!(e, AgentEvent::TextDelta { .. })));
    assert!(matches!(
        inner.last().unwrap(),
        AgentEvent::RunFinished { status: RunStatus::Completed, final_text: Some(t), .. } if t == "SKU001 有 12 件"
    ));
    // The parent's own events are unchanged around the block.
    assert!(matches!(events[0], AgentEvent::RunStarted { ref session_id, .. } if session_id == "parent"));
    assert!(matches!(events.last().unwrap(), AgentEvent::RunFinished { status: RunStatus::Completed, .. }));
}

#[tokio::test]
async fn a_worker_that_waits_for_approval_forwards_on_the_suspended_and_on_the_resumed_run() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]), // worker: frozen
        answer("缓存已清空"),                         // worker, after the approval
        answer("好了"),                               // parent
    ]));
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(tools(&cleared)).build());
    agent.enable_delegation(None).unwrap();
    let first = EventLog::new();
    let out = agent.run("parent", "清缓存", &first, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let worker = batch.worker_session.clone().unwrap();
    let first = first.events();
    // The worker's events, then the parent's own approval_required (the one to decide on), last.
    let wrapped: Vec<&AgentEvent> = first
        .iter()
        .filter_map(unwrap)
        .map(|(call, session, inner)| {
            assert_eq!((call, session), ("p1", worker.as_str()));
            inner
        })
        .collect();
    assert!(matches!(wrapped[0], AgentEvent::RunStarted { resumed: false, .. }));
    assert!(
        matches!(wrapped.last().unwrap(), AgentEvent::ApprovalRequired { batch } if batch.worker_session.is_none()),
        "the worker's own frozen batch, for information: {wrapped:?}"
    );
    assert!(matches!(first.last().unwrap(), AgentEvent::ApprovalRequired { batch: b } if *b == batch));
    assert!(!first.iter().any(|e| matches!(e, AgentEvent::ToolResult { .. })), "nothing ran");

    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let second = EventLog::new();
    let out = agent.resume("parent", &second, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    let second = second.events();
    let (inner, session) = worker_block(&second, "p1");
    assert_eq!(session, worker, "the same worker continues");
    assert!(
        matches!(&inner[0], AgentEvent::RunStarted { session_id, resumed: true, .. } if *session_id == worker)
    );
    let AgentEvent::ToolResult { name, result, .. } = inner.iter().find(|e| is_result_of(e, "w1")).unwrap()
    else {
        unreachable!()
    };
    assert_eq!((name.as_str(), result.to_model_text()), ("clear_baking_cache", "cleared".to_string()));
    assert!(matches!(inner.last().unwrap(), AgentEvent::RunFinished { status: RunStatus::Completed, .. }));
}

#[tokio::test]
async fn a_worker_of_a_worker_nests_one_level_more() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"让下级查库存"}"#)]), // parent
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"查库存"}"#)]),       // worker
        calls(&[("w1", "query_stock", r#"{"sku":"B"}"#)]),             // the worker's worker
        answer("B: 12 件"),                                            // the worker's worker
        answer("下级说 12 件"),                                        // worker
        answer("12 件"),                                               // parent
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model, store.clone())
            .tools(tools(&cleared))
            .config(AgentConfig { max_delegation_depth: 2, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let events = EventLog::new();
    let out = agent.run("parent", "查", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let events = events.events();
    let (middle_events, middle) = worker_block(&events, "d1");
    // The middle worker's own view: its worker's events before its d2 result, wrapped once more.
    let (inner_events, inner) = worker_block(&middle_events, "d2");
    assert_ne!(middle, inner);
    let sessions = store.session_ids();
    assert!(sessions.contains(&middle) && sessions.contains(&inner), "{sessions:?}");
    assert!(matches!(&inner_events[0], AgentEvent::RunStarted { session_id, .. } if *session_id == inner));
    assert!(inner_events.iter().any(|e| is_result_of(e, "w1")));
    assert!(matches!(
        inner_events.last().unwrap(),
        AgentEvent::RunFinished { final_text: Some(t), .. } if t == "B: 12 件"
    ));
    // As the parent's sink holds it: two wrappers around the innermost worker's tool result.
    let nested = events.iter().find_map(|e| {
        let (c1, s1, e1) = unwrap(e)?;
        let (c2, s2, e2) = unwrap(e1)?;
        is_result_of(e2, "w1").then(|| (c1.to_string(), s1.to_string(), c2.to_string(), s2.to_string()))
    });
    assert_eq!(nested, Some(("d1".into(), middle.clone(), "d2".into(), inner.clone())));
    let wire =
        serde_json::to_value(events.iter().find(|e| unwrap(e).is_some_and(|(_, _, i)| unwrap(i).is_some())))
            .unwrap();
    assert_eq!(wire["type"], "worker_event");
    assert_eq!(wire["call_id"], "d1");
    assert_eq!(wire["event"]["type"], "worker_event");
    assert_eq!(wire["event"]["call_id"], "d2");
    assert_eq!(wire["event"]["session_id"], inner.as_str());
}

/// A parent that delegates two tasks in one answer; a worker answers its own task after calling
/// `meet`, which waits until both workers are in it (so both runs are in flight at once).
struct TwoTasks;

#[async_trait::async_trait]
impl ChatModel for TwoTasks {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        let first = match request.messages.first() {
            Some(ChatMessage::User { content, .. }) => content.clone(),
            other => panic!("{other:?}"),
        };
        let has_results = request.messages.iter().any(|m| matches!(m, ChatMessage::Tool { .. }));
        Ok(match (first.as_str(), has_results) {
            ("two", false) => calls(&[
                ("a", DELEGATE_TASK, r#"{"task":"task a"}"#),
                ("b", DELEGATE_TASK, r#"{"task":"task b"}"#),
            ]),
            ("two", true) => answer("both done"),
            (_, false) => calls(&[("m", "meet", "{}")]),
            (task, true) => answer(&format!("{task} done")),
        })
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let response = self.complete(request).await?;
        Ok(Box::pin(futures_util::stream::iter(vec![Ok(ModelEvent::Finished(response))])))
    }
}

#[tokio::test]
async fn parallel_delegations_tag_each_worker_event_with_its_call() {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("meet", "waits for the other worker", json!({"type":"object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                let barrier = barrier.clone();
                async move {
                    barrier.wait().await;
                    Ok(ToolResult::text("met"))
                }
            })),
        )
        .unwrap();
    let agent =
        Arc::new(AgentBuilder::new(Arc::new(TwoTasks), Arc::new(MemStore::new())).tools(tools).build());
    agent.enable_delegation(None).unwrap();
    let events = EventLog::new();
    let cancel = CancellationSignal::new();
    let run = agent.run("parent", "two", &events, &cancel);
    let out = tokio::time::timeout(std::time::Duration::from_secs(10), run).await.expect("both workers met");
    assert_eq!(out.unwrap().status(), RunStatus::Completed);
    let events = events.events();
    let mut workers = std::collections::HashMap::new();
    for (call, session, inner) in events.iter().filter_map(unwrap) {
        assert_eq!(workers.entry(call).or_insert(session), &session, "one worker per call");
        if let AgentEvent::RunFinished { final_text, .. } = inner {
            // Each worker's answer names its own task: the tags are not swapped.
            let task = if call == "a" { "task a done" } else { "task b done" };
            assert_eq!(final_text.as_deref(), Some(task));
        }
    }
    assert_eq!(workers.len(), 2);
    assert_ne!(workers["a"], workers["b"]);
    for id in ["a", "b"] {
        let result = position(&events, |e| is_result_of(e, id));
        let last = events.iter().rposition(|e| unwrap(e).is_some_and(|(c, _, _)| c == id)).unwrap();
        assert!(last < result, "call {id}'s worker events precede its result");
        assert!(matches!(unwrap(&events[last]).unwrap().2, AgentEvent::RunFinished { .. }));
    }
    // Both workers were in `meet` at once, so their runs' events interleave.
    let first_a_end = position(&events, |e| {
        unwrap(e).is_some_and(|(c, _, i)| c == "a" && matches!(i, AgentEvent::RunFinished { .. }))
    });
    let first_b_start = position(&events, |e| unwrap(e).is_some_and(|(c, _, _)| c == "b"));
    let first_b_end = position(&events, |e| {
        unwrap(e).is_some_and(|(c, _, i)| c == "b" && matches!(i, AgentEvent::RunFinished { .. }))
    });
    let first_a_start = position(&events, |e| unwrap(e).is_some_and(|(c, _, _)| c == "a"));
    assert!(first_b_start < first_a_end && first_a_start < first_b_end, "{events:#?}");
}
