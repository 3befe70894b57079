//! `Agent::dismiss` at its edges: it asks no model (no loop diagnosis either), survives a kill in
//! the middle of the batch it settles, keeps the denials in the history when the run is
//! cancelled, and takes over a decision made on a worker's worker directly.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::loop_detect::{DiagnosisSchedule, LoopDiagnoser, LoopDiagnosis};
use arkagent::message::ChatMessage;
use arkagent::provider::ToolChoice;
use arkagent::state::{AgentState, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};
use wrapped::{StoreHooks, Wrapped};

/// `wipe` (dangerous; each run counted; `slow`: it then takes 30 s).
fn registry(ran: &Arc<AtomicUsize>, slow: bool) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    let ran = Arc::clone(ran);
    r.register(
        ToolDefinition::new("wipe", "dangerous", json!({"type":"object"})).with_risk(RiskLevel::Dangerous),
        Arc::new(FnExecutor(move |_a, _ctx| {
            ran.fetch_add(1, Ordering::SeqCst);
            async move {
                if slow {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                Ok(ToolResult::text("wiped"))
            }
        })),
    )
    .unwrap();
    r
}

/// A diagnoser that counts its calls and always sees a loop.
struct AlwaysLoop(AtomicUsize);

#[async_trait::async_trait]
impl LoopDiagnoser for AlwaysLoop {
    async fn diagnose(&self, _history: &[ChatMessage]) -> Result<LoopDiagnosis, AgentError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(LoopDiagnosis { is_loop: true, confidence: 0.95, reason: "loop".into(), usage: None })
    }
}

#[tokio::test]
async fn a_dismissal_asks_no_diagnosis_and_completes() {
    let ran = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![calls(&[("a", "wipe", "{}")])]));
    let diagnoser = Arc::new(AlwaysLoop(AtomicUsize::new(0)));
    let schedule = DiagnosisSchedule { first_round: 1, every: 1, min_confidence: 0.5 };
    let agent = AgentBuilder::new(model, Arc::new(MemStore::new()))
        .tools(registry(&ran, false))
        .loop_diagnoser(diagnoser.clone(), schedule)
        .build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }));
    let out = agent.dismiss("s", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(diagnoser.0.load(Ordering::SeqCst), 0, "a dismissal asks no model");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_dismissal_killed_while_its_approved_batch_runs_is_not_lost() {
    let ran = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemStore::new());
    let model = Arc::new(Script::new(vec![calls(&[("a", "wipe", "{}")])]));
    let agent = AgentBuilder::new(model, store.clone()).tools(registry(&ran, true)).build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    // The process dies while the approved call runs: the dismissal's future is dropped.
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let dismissal = agent.dismiss("s", "moved on", &events, &signal);
    assert!(tokio::time::timeout(Duration::from_millis(300), dismissal).await.is_err());
    drop(agent);

    let model = Arc::new(Script::new(vec![answer("asked after the dismissal")]));
    let agent = AgentBuilder::new(model.clone(), store.clone()).tools(registry(&ran, false)).build();
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(model.requests().len(), 0, "the dismissal still holds: no model round");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the interrupted call is not run again");
}

#[tokio::test]
async fn a_cancelled_dismissal_still_answers_the_batch_with_the_denials() {
    let ran = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![calls(&[("a", "wipe", "{}")]), answer("ok")]));
    let agent =
        AgentBuilder::new(model.clone(), Arc::new(MemStore::new())).tools(registry(&ran, false)).build();
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let cancelled = CancellationSignal::new();
    cancelled.cancel("the user left");
    agent.dismiss("s", "moved on", &EventLog::new(), &cancelled).await.unwrap();
    let out = agent.run("s", "next", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let results = tool_messages(&model.requests()[1].messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("moved on"), "the model reads the denial: {results:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_decision_made_on_a_workers_worker_is_taken_over() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        answer("inner done"),
        answer("middle done"),
        answer("parent done"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = Arc::new(
        AgentBuilder::new(model, store.clone())
            .tools(delegation::tools(&cleared))
            .config(AgentConfig { max_delegation_depth: 2, ..AgentConfig::default() })
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let middle = batch.worker_session.clone().unwrap();
    let inner = store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap().worker_session.unwrap();
    agent.approve(&inner, &batch.items[0].approval_id).await.unwrap();
    let out =
        agent.dismiss("parent", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(cleared.load(Ordering::SeqCst), 1, "the approved call ran once");
}

#[tokio::test]
async fn a_dismissal_of_a_batch_frozen_on_a_worker_killed_midway_is_not_lost() {
    // Approved entirely, so the worker continues; the process dies while its call runs.
    let ran = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemStore::new());
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("w1", "wipe", "{}")]),
    ]));
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(registry(&ran, true)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.run("p", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    agent.approve("p", &batch.items[0].approval_id).await.unwrap();
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let dismissal = agent.dismiss("p", "moved on", &events, &signal);
    assert!(tokio::time::timeout(Duration::from_millis(300), dismissal).await.is_err());
    drop(agent);
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    let model =
        Arc::new(Script::new(vec![answer("worker done"), answer("parent asked after the dismissal")]));
    let agent =
        Arc::new(AgentBuilder::new(model.clone(), store.clone()).tools(registry(&ran, false)).build());
    agent.enable_delegation(None).unwrap();
    let out = agent.resume("p", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(final_text, None, "the parent's model is not asked after its dismissal");
    assert_eq!(model.requests().len(), 1, "only the worker's model was asked");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the interrupted call is not run again");
}

/// A memory store that, when a denial is committed, lets the app's other task run before the
/// commit returns (the session's lock is still held then).
struct YieldsAtDenial {
    denied: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl StoreHooks for YieldsAtDenial {
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), AgentError> {
        inner.commit(state, events).await?;
        let denial =
            events.iter().any(|e| matches!(e, StateEvent::ApprovalDecided { deny_reason: Some(_), .. }));
        if denial {
            self.denied.notify_one();
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_resume_from_the_app_during_a_dismissal_waits_for_it() {
    let ran = Arc::new(AtomicUsize::new(0));
    let yields = YieldsAtDenial { denied: tokio::sync::Notify::new() };
    let store = Arc::new(Wrapped::new(Arc::new(MemStore::new()), yields));
    let model = Arc::new(Script::new(vec![calls(&[("a", "wipe", "{}")]), answer("asked again")]));
    let agent = AgentBuilder::new(model.clone(), store.clone()).tools(registry(&ran, false)).build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }));
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let app = async {
        // The dismissal has just denied the item; the app resumes the session meanwhile.
        store.hooks.denied.notified().await;
        agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await
    };
    let (dismissed, resumed) = tokio::join!(agent.dismiss("s", "moved on", &events, &signal), app);
    let out = dismissed.expect("the dismissal settles the batch itself");
    let RunOutcome::Finished { status, final_text, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(final_text, None);
    assert_eq!(resumed.unwrap_err().code, codes::INVALID_STATE, "nothing is left to resume");
    assert_eq!(model.requests().len(), 1, "the model is not asked after the dismissal");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// A `tool_choice` naming a tool the agent no longer has concerns only requests to the model: a
/// dismissal, which asks none, is not refused for it (a resume or a new run still is).
#[tokio::test]
async fn a_dismissal_is_not_refused_for_a_tool_choice_only_the_model_would_see() {
    let ran = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![calls(&[("a", "wipe", "{}")])]));
    let config =
        AgentConfig { tool_choice: Some(ToolChoice::Function("wipe".into())), ..AgentConfig::default() };
    let agent = AgentBuilder::new(model.clone(), Arc::new(MemStore::new()))
        .tools(registry(&ran, false))
        .config(config)
        .build();
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert!(matches!(out, RunOutcome::Suspended { .. }), "{out:?}");
    // The app swaps its tools: `wipe` is gone, another one is there.
    assert_eq!(agent.unregister_tool("wipe"), Ok(true));
    agent
        .register_tool(
            ToolDefinition::new("look", "safe", json!({"type":"object"})),
            Arc::new(FnExecutor(|_a, _ctx| async { Ok(ToolResult::text("ok")) })),
        )
        .unwrap();
    let e = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(e.code, codes::CONFIG_INVALID, "a resume asks the model: still refused");
    let out = agent.dismiss("s", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(model.requests().len(), 1, "no model round after the dismissal");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let state = agent.state("s").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert!(results.len() == 1 && results[0].1.contains("moved on"), "{results:?}");
    let e = agent.run("s", "next", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(e.code, codes::CONFIG_INVALID, "a new run asks the model: still refused");
}

#[tokio::test]
async fn a_dismissal_of_a_parent_frozen_on_its_workers_settles_them_too() {
    // The batch of the worker's worker is the parent's mirror two levels down. Once the parent
    // is dismissed nobody reads the workers' answers: each completes with the denial, without
    // its model, and no longer looks resumable.
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
        // A worker asked again would take these; nobody reads its answer.
        answer("inner answer"),
        answer("middle answer"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), &cleared, 2);
    let out = agent.run("parent", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let middle = batch.worker_session.clone().unwrap();
    let inner = store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap().worker_session.unwrap();
    let out =
        agent.dismiss("parent", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let asked = model.requests().len();
    assert_eq!(asked, 3, "no model was asked by the dismissal");
    let listed = agent.list_all_sessions().await.unwrap();
    for worker in [&middle, &inner] {
        let state = store.load(worker).await.unwrap().unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{worker}");
        assert!(state.pending_approval.is_none(), "{worker}");
        let results = tool_messages(&state.messages);
        assert_eq!(results.len(), 1, "{worker}: {results:?}");
        assert!(results[0].2 && results[0].1.contains("moved on"), "{worker}: {results:?}");
        let summary = listed.iter().find(|s| &s.session_id == worker).unwrap();
        assert!(!summary.approval_pending && !summary.interrupted, "{summary:?}");
        let refused = agent.resume(worker, &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(refused.code, codes::INVALID_STATE, "{worker}: {refused}");
    }
    assert_eq!(model.requests().len(), asked, "no worker's model was asked");
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    // The parent's delegating call keeps the dismissal's answer.
    let parent = store.load("parent").await.unwrap().unwrap();
    let results = tool_messages(&parent.messages);
    assert!(results[0].2 && results[0].1.contains("tool_not_run"), "{results:?}");
}
