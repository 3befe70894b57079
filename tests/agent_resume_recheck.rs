//! A frozen batch whose tools changed before it was resumed: a call planned to run when the batch
//! froze (its tool safe then) is asked about again on resume. Its tool registered anew as
//! dangerous (an app update over the same store, or unregister + register in one process), or a
//! policy that now asks or denies, never lets it run unasked: the batch freezes again with that
//! call pending and what was decided kept, or it is answered as the policy says. No call runs twice.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::approval::{ApprovalDecision, ApprovalPolicy, DefaultApprovalPolicy, PolicyDecision};
use arkagent::message::ToolCall;
use arkagent::state::{RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::{Arc, Mutex};
use support::{answer, calls, tool_messages, MemStore, Script};

type Ran = Arc<Mutex<Vec<String>>>;

/// `export_contacts` with this risk level and `clear_cache` (dangerous); each run is logged.
fn tools(export_risk: RiskLevel, ran: &Ran) -> ToolRegistry {
    tools_of(export_risk, false, ran)
}

/// [`tools`], with `export_contacts` idempotent when `idempotent` is set.
fn tools_of(export_risk: RiskLevel, idempotent: bool, ran: &Ran) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, risk) in [("export_contacts", export_risk), ("clear_cache", RiskLevel::Dangerous)] {
        let ran = Arc::clone(ran);
        r.register(
            ToolDefinition::new(name, "d", json!({"type":"object"}))
                .with_risk(risk)
                .idempotent(idempotent && name == "export_contacts"),
            Arc::new(FnExecutor(move |_args, _ctx| {
                ran.lock().unwrap().push(name.to_string());
                async move { Ok(ToolResult::text(format!("{name} done"))) }
            })),
        )
        .unwrap();
    }
    r
}

fn agent(
    store: &Arc<MemStore>,
    script: Vec<arkagent::provider::ModelResponse>,
    tools: ToolRegistry,
) -> Agent {
    AgentBuilder::new(Arc::new(Script::new(script)), store.clone())
        .tools(tools)
        .config(AgentConfig::default())
        .build()
}

/// Version 1 of the app: `export_contacts` safe, so the batch freezes on `clear_cache` alone.
async fn frozen_by_v1(store: &Arc<MemStore>, ran: &Ran) -> String {
    let v1 = agent(
        store,
        vec![calls(&[("c1", "export_contacts", "{}"), ("c2", "clear_cache", "{}")])],
        tools(RiskLevel::Safe, ran),
    );
    let out = v1.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].tool_call.name, "clear_cache");
    batch.items[0].approval_id.clone()
}

fn ran_now(ran: &Ran) -> Vec<String> {
    ran.lock().unwrap().clone()
}

#[tokio::test]
async fn a_call_planned_to_run_whose_tool_became_dangerous_freezes_the_batch_again() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let clear_id = frozen_by_v1(&store, &ran).await;

    // Version 2 of the app: `export_contacts` is dangerous now.
    let v2 = agent(&store, vec![answer("done")], tools(RiskLevel::Dangerous, &ran));
    v2.approve("s", &clear_id).await.unwrap();
    let log = EventLog::new();
    let out = v2.resume("s", &log, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("export_contacts ran unasked: {out:?}") };
    assert!(ran_now(&ran).is_empty(), "nothing of the batch runs: {:?}", ran_now(&ran));
    // Both calls have an item, in call order: the new one pending, the decided one kept.
    let items: Vec<_> =
        batch.items.iter().map(|i| (i.tool_call.id.as_str(), i.risk_level, i.decision)).collect();
    assert_eq!(
        items,
        [
            ("c1", RiskLevel::Dangerous, ApprovalDecision::Pending),
            ("c2", RiskLevel::Dangerous, ApprovalDecision::Approved)
        ]
    );
    assert_eq!(batch.items[0].reason, "Dangerous tool \"export_contacts\" requires confirmation");
    assert_eq!(batch.items[1].approval_id, clear_id);
    // Persisted, then announced: the app reads it as any frozen batch.
    let events = log.events();
    let at = events.iter().position(|e| matches!(e, AgentEvent::ApprovalRequired { .. })).unwrap();
    assert!(matches!(events[at - 1], AgentEvent::StatePersisted { .. }));
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::AwaitingApproval);
    assert_eq!(state.pending_approval.as_ref(), Some(&batch));
    let err = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, codes::APPROVAL_PENDING);

    // Approved now: each call runs once, in call order, and the model reads both results.
    v2.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["export_contacts", "clear_cache"]);
    let state = store.load("s").await.unwrap().unwrap();
    assert!(state.pending_approval.is_none());
    let results = tool_messages(&state.messages);
    assert_eq!(
        results,
        [
            ("c1".into(), "export_contacts done".into(), false),
            ("c2".into(), "clear_cache done".into(), false)
        ]
    );
}

#[tokio::test]
async fn a_denial_of_the_new_item_runs_nothing_not_even_what_was_approved() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let clear_id = frozen_by_v1(&store, &ran).await;
    let v2 = agent(&store, vec![answer("ok")], tools(RiskLevel::Dangerous, &ran));
    v2.approve("s", &clear_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected a new freeze: {out:?}") };
    v2.deny("s", &batch.items[0].approval_id, "no export").await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert!(ran_now(&ran).is_empty());
    let results = tool_messages(&store.load("s").await.unwrap().unwrap().messages);
    assert_eq!(results[0], ("c1".into(), "error: denied by user: no export".into(), true));
    assert!(results[1].2 && results[1].1.contains("none of the batch ran"), "{}", results[1].1);
}

#[tokio::test]
async fn a_tool_swapped_for_a_dangerous_one_in_the_same_process_is_asked_about() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let a = agent(
        &store,
        vec![calls(&[("c1", "export_contacts", "{}"), ("c2", "clear_cache", "{}")]), answer("done")],
        tools(RiskLevel::Safe, &ran),
    );
    let out = a.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert_eq!(a.unregister_tool("export_contacts"), Ok(true));
    let ran2 = Arc::clone(&ran);
    a.register_tool(
        ToolDefinition::new("export_contacts", "now dangerous", json!({"type":"object"}))
            .with_risk(RiskLevel::Sensitive),
        Arc::new(FnExecutor(move |_args, _ctx| {
            ran2.lock().unwrap().push("export_contacts v2".to_string());
            async move { Ok(ToolResult::text("exported")) }
        })),
    )
    .unwrap();
    a.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = a.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("the swapped tool ran unasked: {out:?}") };
    assert!(ran_now(&ran).is_empty());
    let pending: Vec<_> = batch.pending_items().map(|i| (i.tool_call.id.as_str(), i.risk_level)).collect();
    assert_eq!(pending, [("c1", RiskLevel::Sensitive)]);
    a.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = a.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["export_contacts v2", "clear_cache"]);
}

/// The default policy, but calls of one tool are denied outright, with a reason.
struct DenyTool(&'static str, &'static str);

impl ApprovalPolicy for DenyTool {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        if call.name == self.0 {
            return PolicyDecision::Deny(self.1.into());
        }
        DefaultApprovalPolicy.decide(call, definition)
    }
}

#[tokio::test]
async fn a_call_the_policy_now_denies_is_answered_and_the_approved_calls_run() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let clear_id = frozen_by_v1(&store, &ran).await;
    let v2 = AgentBuilder::new(Arc::new(Script::new(vec![answer("ok")])), store.clone())
        .tools(tools(RiskLevel::Safe, &ran))
        .policy(Arc::new(DenyTool("export_contacts", "exports are off")))
        .build();
    v2.approve("s", &clear_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["clear_cache"]);
    let results = tool_messages(&store.load("s").await.unwrap().unwrap().messages);
    assert_eq!(results[0], ("c1".into(), "error: denied by policy: exports are off".into(), true));
    assert_eq!(results[1], ("c2".into(), "clear_cache done".into(), false));
}

#[tokio::test]
async fn a_dismissal_of_a_batch_whose_tool_became_dangerous_runs_none_of_it() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let clear_id = frozen_by_v1(&store, &ran).await;
    let v2 = agent(&store, vec![], tools(RiskLevel::Dangerous, &ran));
    // Everything that was asked is approved; the user then moves on.
    v2.approve("s", &clear_id).await.unwrap();
    let out = v2.dismiss("s", "later", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
    let state = store.load("s").await.unwrap().unwrap();
    assert!(state.pending_approval.is_none());
    let results = tool_messages(&state.messages);
    assert_eq!(results[0], ("c1".into(), "error: denied by user: later".into(), true));
    assert!(results[1].2 && results[1].1.contains("none of the batch ran"), "{}", results[1].1);
}

#[tokio::test]
async fn a_dangerous_tool_made_safe_keeps_its_item_and_still_runs_once_approved() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let clear_id = frozen_by_v1(&store, &ran).await;
    // Version 2: both safe. The pending item still waits for the user.
    let mut relaxed = ToolRegistry::new();
    for name in ["export_contacts", "clear_cache"] {
        let ran = Arc::clone(&ran);
        relaxed
            .register(
                ToolDefinition::new(name, "d", json!({"type":"object"})),
                Arc::new(FnExecutor(move |_args, _ctx| {
                    ran.lock().unwrap().push(name.to_string());
                    async move { Ok(ToolResult::text("ok")) }
                })),
            )
            .unwrap();
    }
    let v2 = agent(&store, vec![answer("ok")], relaxed);
    let err = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, codes::APPROVAL_PENDING);
    v2.approve("s", &clear_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["export_contacts", "clear_cache"]);
}

/// A delegating agent over `store` with [`tools`] (`export_contacts` at `export_risk`).
fn delegating(
    store: &Arc<MemStore>,
    script: Vec<arkagent::provider::ModelResponse>,
    export_risk: RiskLevel,
    ran: &Ran,
    config: AgentConfig,
) -> Arc<Agent> {
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(Script::new(script)), store.clone())
            .tools(tools(export_risk, ran))
            .config(config)
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    agent
}

#[tokio::test]
async fn a_worker_batch_whose_tool_became_dangerous_freezes_the_parent_again() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let script = vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"clean up"}"#)]),
        calls(&[("c1", "export_contacts", "{}"), ("c2", "clear_cache", "{}")]),
    ];
    let v1 = delegating(&store, script, RiskLevel::Safe, &ran, AgentConfig::default());
    let out = v1.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert!(batch.worker_session.is_some());
    assert_eq!(batch.items.len(), 1);

    let script = vec![answer("worker done"), answer("parent done")];
    let v2 = delegating(&store, script, RiskLevel::Dangerous, &ran, AgentConfig::default());
    v2.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else {
        panic!("the worker ran export_contacts unasked: {out:?}")
    };
    assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
    assert!(batch.worker_session.is_some());
    let pending: Vec<_> = batch.pending_items().map(|i| i.tool_call.id.as_str()).collect();
    assert_eq!(pending, ["c1"]);
    v2.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["export_contacts", "clear_cache"]);
}

#[tokio::test]
async fn a_parent_call_not_reached_when_a_worker_froze_is_not_run_unasked() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    // One call at a time: `p1` is not reached when the worker freezes on `w1`.
    let config = AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() };
    let script = vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"clean up"}"#), ("p1", "export_contacts", "{}")]),
        calls(&[("w1", "clear_cache", "{}")]),
    ];
    let v1 = delegating(&store, script, RiskLevel::Safe, &ran, config.clone());
    let out = v1.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert!(ran_now(&ran).is_empty());

    let script = vec![answer("worker done"), answer("parent done")];
    let v2 = delegating(&store, script, RiskLevel::Dangerous, &ran, config);
    v2.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["clear_cache"], "export_contacts must not run unasked");
    let results = tool_messages(&store.load("s").await.unwrap().unwrap().messages);
    assert_eq!(results[0], ("d1".into(), "worker done".into(), false));
    assert_eq!(results[1].0, "p1");
    assert!(results[1].2, "{:?}", results[1]);
    assert!(results[1].1.contains("needs the user's confirmation now"), "{}", results[1].1);
}

#[tokio::test]
async fn a_batch_killed_mid_run_freezes_again_without_running_its_finished_call_twice() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    // What a process killed after `c1` finished left behind (`c2` never started).
    approved_then_killed(&store, &ran, false).await;

    // The app, updated meanwhile, has `export_contacts` dangerous.
    let v2 = agent(&store, vec![answer("ok")], tools(RiskLevel::Dangerous, &ran));
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("export_contacts ran unasked: {out:?}") };
    assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
    let pending: Vec<_> = batch.pending_items().map(|i| i.tool_call.id.as_str()).collect();
    assert_eq!(pending, ["c2"]);
    v2.approve("s", &batch.items[1].approval_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["export_contacts"], "c1 finished before the kill: never run again");
    let state = store.load_unrepaired("s").await.unwrap().unwrap();
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(
        results,
        [
            ("c1".into(), "cleared before the kill".into(), false),
            ("c2".into(), "export_contacts done".into(), false)
        ]
    );
}

/// Version 1 (`export_contacts` safe, idempotent when `c2_started`) froze on `clear_cache`, the
/// user approved it, and the process was killed: after `c1` finished, and while `c2` ran when
/// `c2_started` (its tool idempotent, so it runs again, once it is asked about).
async fn approved_then_killed(store: &Arc<MemStore>, ran: &Ran, c2_started: bool) {
    let v1 = agent(
        store,
        vec![calls(&[("c1", "clear_cache", "{}"), ("c2", "export_contacts", "{}")])],
        tools_of(RiskLevel::Safe, c2_started, ran),
    );
    let out = v1.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    v1.approve("s", &batch.items[0].approval_id).await.unwrap();
    let mut state = store.load_unrepaired("s").await.unwrap().unwrap();
    let mut events = vec![
        StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None },
        StateEvent::ToolStarted { call_id: "c1".into(), name: "clear_cache".into(), worker_session: None },
        StateEvent::ToolFinished {
            call_id: "c1".into(),
            name: "clear_cache".into(),
            result: ToolResult::text("cleared before the kill"),
            stop_requested: false,
            injected: Vec::new(),
        },
    ];
    if c2_started {
        events.push(StateEvent::ToolStarted {
            call_id: "c2".into(),
            name: "export_contacts".into(),
            worker_session: None,
        });
    }
    for e in &events {
        state.apply(e);
    }
    store.commit(&state, &events).await.unwrap();
}

#[tokio::test]
async fn a_started_idempotent_call_whose_tool_became_dangerous_is_asked_about_before_it_runs_again() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    approved_then_killed(&store, &ran, true).await;

    // The app, updated meanwhile, has `export_contacts` dangerous (still idempotent). Before, it
    // ran again at once: a started call was never asked about again.
    let v2 = agent(&store, vec![answer("ok")], tools_of(RiskLevel::Dangerous, true, &ran));
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("export_contacts ran again unasked: {out:?}") };
    assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
    let items: Vec<_> =
        batch.items.iter().map(|i| (i.tool_call.id.as_str(), i.risk_level, i.decision)).collect();
    assert_eq!(
        items,
        [
            ("c1", RiskLevel::Dangerous, ApprovalDecision::Approved),
            ("c2", RiskLevel::Dangerous, ApprovalDecision::Pending)
        ]
    );
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::AwaitingApproval);

    // Approved: `c2` runs again, once; `c1`, finished before the kill, never runs again.
    v2.approve("s", &batch.items[1].approval_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["export_contacts"]);
    let state = store.load_unrepaired("s").await.unwrap().unwrap();
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(
        results,
        [
            ("c1".into(), "cleared before the kill".into(), false),
            ("c2".into(), "export_contacts done".into(), false)
        ]
    );
}

#[tokio::test]
async fn a_started_idempotent_call_denied_on_its_new_item_is_not_run_again() {
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    approved_then_killed(&store, &ran, true).await;

    let v2 = agent(&store, vec![answer("ok")], tools_of(RiskLevel::Dangerous, true, &ran));
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("export_contacts ran again unasked: {out:?}") };
    v2.deny("s", &batch.items[1].approval_id, "no export").await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
    let state = store.load_unrepaired("s").await.unwrap().unwrap();
    arkagent::state::check_pairing(&state.messages, &[]).unwrap();
    let results = tool_messages(&state.messages);
    // What ran keeps its result; the denied call, which started before the kill, may have taken
    // effect: it is answered interrupted, with the denial that kept it from running again.
    assert_eq!(results[0], ("c1".into(), "cleared before the kill".into(), false));
    assert_eq!(
        results[1],
        (
            "c2".into(),
            "error [tool_interrupted]: the call to `export_contacts` was interrupted while it ran (the \
             app stopped or the run was cancelled); it may or may not have taken effect, so check \
             before calling it again. It was not run again: denied by user: no export"
                .into(),
            true
        )
    );
}

#[tokio::test]
async fn a_started_idempotent_call_denied_or_dismissed_is_answered_interrupted_and_the_rest_not_run() {
    // Version 1 froze on `clear_cache` (`export_contacts` safe and idempotent), the user approved
    // it, and the process was killed while `export_contacts` ran, before `clear_cache`. Version 2
    // has `export_contacts` dangerous: the resume asks about it, and the user denies it or
    // dismisses the batch. It started before the kill, so it may have acted: answered the denial
    // alone, and `clear_cache` "none of the batch ran", the model and the user were told nothing
    // ran.
    for dismiss in [false, true] {
        let store = Arc::new(MemStore::new());
        let ran: Ran = Arc::default();
        let v1 = agent(
            &store,
            vec![calls(&[("c1", "export_contacts", "{}"), ("c2", "clear_cache", "{}")])],
            tools_of(RiskLevel::Safe, true, &ran),
        );
        let out = v1.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
        v1.approve("s", &batch.items[0].approval_id).await.unwrap();
        let mut state = store.load_unrepaired("s").await.unwrap().unwrap();
        let events = vec![
            StateEvent::StatusChanged { status: RunStatus::Running, finish_reason: None, error: None },
            StateEvent::ToolStarted {
                call_id: "c1".into(),
                name: "export_contacts".into(),
                worker_session: None,
            },
        ];
        for e in &events {
            state.apply(e);
        }
        store.commit(&state, &events).await.unwrap();

        let v2 = agent(&store, vec![answer("ok")], tools_of(RiskLevel::Dangerous, true, &ran));
        let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else {
            panic!("export_contacts ran again unasked: {out:?}")
        };
        let pending: Vec<_> = batch.pending_items().map(|i| i.approval_id.clone()).collect();
        assert_eq!(pending.len(), 1);
        let out = if dismiss {
            v2.dismiss("s", "moved on", &EventLog::new(), &CancellationSignal::new()).await.unwrap()
        } else {
            v2.deny("s", &pending[0], "no export").await.unwrap();
            v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap()
        };
        assert_eq!(out.status(), RunStatus::Completed);
        assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
        let state = store.load_unrepaired("s").await.unwrap().unwrap();
        arkagent::state::check_pairing(&state.messages, &[]).unwrap();
        let results = tool_messages(&state.messages);
        let reason = if dismiss { "moved on" } else { "no export" };
        let (id, text, is_error) = &results[0];
        assert_eq!(id, "c1");
        assert!(*is_error);
        assert!(
            text.starts_with("error [tool_interrupted]: ")
                && text.contains("it may or may not have taken effect")
                && text.ends_with(&format!("It was not run again: denied by user: {reason}")),
            "{text}"
        );
        let (id, text, is_error) = &results[1];
        assert_eq!(id, "c2");
        assert!(*is_error);
        assert_eq!(
            text,
            "error: not run: another call of the same batch was denied by the user, so the rest of \
             the batch did not run (a call of it had started before: see its result)"
        );
    }
}

#[tokio::test]
async fn a_pending_item_whose_tool_was_removed_still_decides_the_batch() {
    // Version 2 of the app no longer registers `clear_cache`. Its item stays pending: the user's
    // decision on it decides the whole batch (a denial runs none of it), which an answer given
    // without asking would take from the user. Approved, the call is answered `tool_not_found`.
    for approve in [true, false] {
        let store = Arc::new(MemStore::new());
        let ran: Ran = Arc::default();
        let clear_id = frozen_by_v1(&store, &ran).await;
        let mut without_clear = tools(RiskLevel::Safe, &ran);
        without_clear.unregister("clear_cache");
        let v2 = agent(&store, vec![answer("ok")], without_clear);
        let err = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(err.code, codes::APPROVAL_PENDING);
        if approve {
            v2.approve("s", &clear_id).await.unwrap();
        } else {
            v2.deny("s", &clear_id, "no").await.unwrap();
        }
        let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        let results = tool_messages(&store.load("s").await.unwrap().unwrap().messages);
        if approve {
            assert_eq!(ran_now(&ran), ["export_contacts"]);
            assert_eq!(results[0], ("c1".into(), "export_contacts done".into(), false));
            assert!(results[1].2 && results[1].1.contains("tool_not_found"), "{:?}", results[1]);
        } else {
            assert!(ran_now(&ran).is_empty(), "{:?}", ran_now(&ran));
            assert!(results[0].2 && results[0].1.contains("none of the batch ran"), "{:?}", results[0]);
            assert_eq!(results[1], ("c2".into(), "error: denied by user: no".into(), true));
        }
    }
}

/// A before-hook that denies every call, counting the calls it is asked about.
#[derive(Default)]
struct DeniesEverything {
    asked: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl arkagent::hook::AgentHook for DeniesEverything {
    async fn before_tool_call(
        &self,
        _ctx: &arkagent::hook::HookContext<'_>,
        _call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> arkagent::hook::BeforeToolCall {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        arkagent::hook::BeforeToolCall::Deny(ToolResult::error_text("blocked by the update's hook"))
    }
}

#[tokio::test]
async fn a_resume_after_an_update_asks_no_new_hook_and_keeps_the_user_s_approval() {
    // As documented: the update's before-hooks are not asked about a batch frozen before them
    // (their word is in its plan), and the policy is asked only about the calls that were to run
    // without asking: the user's approval of `clear_cache` stands though the policy denies it now.
    let store = Arc::new(MemStore::new());
    let ran: Ran = Arc::default();
    let clear_id = frozen_by_v1(&store, &ran).await;
    let hook = Arc::new(DeniesEverything::default());
    let v2 = AgentBuilder::new(Arc::new(Script::new(vec![answer("ok")])), store.clone())
        .tools(tools(RiskLevel::Safe, &ran))
        .policy(Arc::new(DenyTool("clear_cache", "clearing is off")))
        .hook(hook.clone())
        .build();
    v2.approve("s", &clear_id).await.unwrap();
    let out = v2.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(hook.asked.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(ran_now(&ran), ["export_contacts", "clear_cache"]);
}
