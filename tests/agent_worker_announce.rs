//! A frozen batch is announced to the hooks' `on_approval_required` once, whichever session
//! announces it. A worker's batch frozen inside its delegating call is announced by the parent
//! that mirrors it; one frozen by a resume of the worker session the app made itself is
//! announced by that resume, and then not again by the parent when its delegating call finds the
//! worker frozen on it and mirrors it (the worker's state saves that its batch was announced:
//! `AgentState::approval_announced`). Each run that suspends still ends its own event stream
//! with its `approval_required` event (the run's last event, which the app reads its outcome
//! from).

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::approval::PendingApprovalBatch;
use arkagent::hook::{AgentHook, HookContext};
use arkagent::state::{StateEvent, StateStore};
use arkagent::CancellationSignal;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use support::{calls, MemStore, Script};
use wrapped::{StoreHooks, Wrapped};

/// Records the approval ids of each batch announced to `on_approval_required`, with its session.
#[derive(Default)]
struct Heard(Mutex<Vec<(String, Vec<String>)>>);

#[async_trait::async_trait]
impl AgentHook for Heard {
    async fn on_approval_required(&self, ctx: &HookContext<'_>, batch: &PendingApprovalBatch) {
        let ids = batch.items.iter().map(|i| i.approval_id.clone()).collect();
        self.0.lock().unwrap().push((ctx.session_id.to_string(), ids));
    }
}

impl Heard {
    fn ids(&self) -> Vec<Vec<String>> {
        self.0.lock().unwrap().iter().map(|(_, ids)| ids.clone()).collect()
    }
}

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

fn setup(
    store: Arc<dyn StateStore>,
    heard: Arc<Heard>,
    script: Vec<arkagent::provider::ModelResponse>,
) -> Arc<Agent> {
    let cleared = Arc::new(AtomicUsize::new(0));
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(Script::new(script)), store)
            .tools(delegation::tools(&cleared))
            .hook(heard)
            .config(AgentConfig { max_delegation_depth: 1, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    agent
}

/// The parent delegates (`d1`); its worker freezes on the dangerous `w1` and, once that ran,
/// on `w2`.
fn two_worker_freezes() -> Vec<arkagent::provider::ModelResponse> {
    vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        calls(&[("w2", "clear_baking_cache", "{}")]),
    ]
}

/// The approval ids of the top-level `approval_required` events of a run.
fn announced(log: &EventLog) -> Vec<Vec<String>> {
    log.events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ApprovalRequired { batch } => {
                Some(batch.items.iter().map(|i| i.approval_id.clone()).collect())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_worker_batch_announced_by_its_direct_resume_is_not_announced_again_by_the_parent() {
    let heard = Arc::new(Heard::default());
    let store = Arc::new(MemStore::new());
    let agent = setup(store.clone(), heard.clone(), two_worker_freezes());
    // The worker freezes inside its delegation: the parent announces it, once.
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch: first } = out else { panic!("{out:?}") };
    let worker = first.worker_session.clone().unwrap();
    assert_eq!(
        heard.0.lock().unwrap().clone(),
        [("parent".to_string(), vec![first.items[0].approval_id.clone()])]
    );
    // The app decides and resumes the worker itself: it freezes again, and that resume announces it.
    agent.approve(&worker, &first.items[0].approval_id).await.unwrap();
    let direct = EventLog::new();
    let out = agent.resume(&worker, &direct, &none()).await.unwrap();
    let RunOutcome::Suspended { batch: second } = out else { panic!("{out:?}") };
    let second_ids: Vec<String> = second.items.iter().map(|i| i.approval_id.clone()).collect();
    assert_eq!(heard.ids().len(), 2);
    assert_eq!(heard.0.lock().unwrap()[1], (worker.clone(), second_ids.clone()));
    assert_eq!(announced(&direct), std::slice::from_ref(&second_ids));
    assert!(store.load(&worker).await.unwrap().unwrap().approval_announced);
    // The parent, settled by the decision made on its worker (it reached the parent's mirror),
    // runs its delegating call again and finds the worker frozen on the batch already announced:
    // it mirrors it without announcing it again.
    let parent_log = EventLog::new();
    let out = agent.resume("parent", &parent_log, &none()).await.unwrap();
    let RunOutcome::Suspended { batch: mirror } = out else { panic!("{out:?}") };
    assert_eq!(mirror.worker_session.as_deref(), Some(worker.as_str()));
    assert_eq!(mirror.items.iter().map(|i| i.approval_id.clone()).collect::<Vec<_>>(), second_ids);
    assert_eq!(heard.ids().len(), 2, "announced once: {:?}", heard.0.lock().unwrap());
    // The parent's resume still ends its own events with its suspension.
    assert!(matches!(parent_log.events().last(), Some(AgentEvent::ApprovalRequired { .. })));
    // Resumed again (after a restart: a new agent over the same store), still not announced.
    let again = setup(store.clone(), heard.clone(), vec![]);
    let e = again.resume("parent", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(e.code, "approval_pending");
    assert_eq!(heard.ids().len(), 2);
}

#[tokio::test]
async fn a_worker_batch_frozen_inside_its_delegation_is_announced_by_the_parent_after_a_crash() {
    // The process died after the worker froze and before the parent saved its mirror: the
    // parent's resume finds the worker frozen on a batch nobody announced, and announces it.
    let heard = Arc::new(Heard::default());
    let mem = Arc::new(MemStore::new());
    let dying = setup(
        Arc::new(Wrapped::new(mem.clone(), DiesAtMirror)),
        heard.clone(),
        vec![
            calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
            calls(&[("w1", "clear_baking_cache", "{}")]),
        ],
    );
    let e = dying.run("parent", "q", &EventLog::new(), &none()).await.unwrap_err();
    assert_eq!(e.code, "state_io");
    assert_eq!(heard.ids().len(), 0, "nobody announced it");
    let worker = mem.load("parent").await.unwrap().unwrap().workers[0].clone();
    assert!(!mem.load(&worker).await.unwrap().unwrap().approval_announced);
    let again = setup(mem.clone(), heard.clone(), vec![]);
    let out = again.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(
        heard.0.lock().unwrap().clone(),
        [("parent".to_string(), vec![batch.items[0].approval_id.clone()])]
    );
}

/// Refuses the parent's commit of its mirror (`ApprovalRequested` on `parent`): the process died
/// just before it.
struct DiesAtMirror;

#[async_trait::async_trait]
impl StoreHooks for DiesAtMirror {
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &arkagent::state::AgentState,
        events: &[StateEvent],
    ) -> Result<(), arkagent::AgentError> {
        if state.session_id == "parent"
            && events.iter().any(|e| matches!(e, StateEvent::ApprovalRequested { .. }))
        {
            return Err(arkagent::AgentError::of(arkagent::codes::STATE_IO, "the process died"));
        }
        inner.commit(state, events).await
    }
}

#[test]
fn a_batch_not_announced_is_written_as_before_the_field_existed() {
    let store_batch = |announced| {
        let mut state = arkagent::state::AgentState::new("w");
        let batch: PendingApprovalBatch = serde_json::from_value(serde_json::json!({
            "batch_id": "b", "run_id": "r", "items": [],
            "assistant_message": {"role": "assistant", "content": null, "tool_calls": []},
            "created_at_ms": 1
        }))
        .unwrap();
        let event = StateEvent::ApprovalRequested { batch, announced };
        state.apply(&event);
        (serde_json::to_value(&event).unwrap(), state)
    };
    let (plain, state) = store_batch(false);
    assert!(plain.get("announced").is_none(), "{plain}");
    assert!(serde_json::to_value(&state).unwrap().get("approval_announced").is_none());
    let (told, mut state) = store_batch(true);
    assert_eq!(told["announced"], true);
    assert!(state.approval_announced);
    let read: StateEvent = serde_json::from_value(told).unwrap();
    assert!(matches!(read, StateEvent::ApprovalRequested { announced: true, .. }));
    // An older record (no field) reads as not announced; a settled batch is no longer announced.
    let old: StateEvent = serde_json::from_value(plain).unwrap();
    assert!(matches!(old, StateEvent::ApprovalRequested { announced: false, .. }));
    state.apply(&StateEvent::ApprovalCleared);
    assert!(!state.approval_announced);
}

/// Records each `before_persist_state` a session's saves ask: the session and whether the state
/// to save has its batch marked announced.
#[derive(Default)]
struct Inspected(Mutex<Vec<(String, bool)>>);

#[async_trait::async_trait]
impl AgentHook for Inspected {
    async fn before_persist_state(
        &self,
        ctx: &HookContext<'_>,
        state: &arkagent::state::AgentState,
    ) -> arkagent::hook::PersistDecision {
        self.0.lock().unwrap().push((ctx.session_id.to_string(), state.approval_announced));
        arkagent::hook::PersistDecision::Persist
    }
}

#[tokio::test]
async fn the_save_that_marks_a_worker_batch_announced_is_inspected_and_reported_as_every_save() {
    // A worker session resumed directly freezes and announces its batch, then saves that it did:
    // that save goes through `before_persist_state` and is reported by `state_persisted` as every
    // other save of the run, and the run's events still end with its `approval_required`.
    let heard = Arc::new(Heard::default());
    let inspected = Arc::new(Inspected::default());
    let store = Arc::new(MemStore::new());
    let agent = setup(store.clone(), heard.clone(), two_worker_freezes());
    agent.add_hook(inspected.clone());
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch: first } = out else { panic!("{out:?}") };
    let worker = first.worker_session.clone().unwrap();
    agent.approve(&worker, &first.items[0].approval_id).await.unwrap();
    inspected.0.lock().unwrap().clear();
    let direct = EventLog::new();
    let out = agent.resume(&worker, &direct, &none()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }), "{out:?}");
    assert!(store.load(&worker).await.unwrap().unwrap().approval_announced);
    let asked = inspected.0.lock().unwrap().clone();
    assert!(asked.iter().all(|(s, _)| s == &worker), "{asked:?}");
    assert_eq!(asked.last().map(|a| a.1), Some(true), "the announced mark was inspected: {asked:?}");
    let events = direct.events();
    let persisted = events.iter().filter(|e| matches!(e, AgentEvent::StatePersisted { .. })).count();
    assert_eq!(persisted, asked.len(), "one state_persisted per save: {events:?}");
    let n = events.len();
    assert!(n >= 2, "{events:?}");
    assert_eq!(events[n - 2], AgentEvent::StatePersisted { events: 1 }, "{events:?}");
    assert!(matches!(events[n - 1], AgentEvent::ApprovalRequired { .. }), "{events:?}");
}
