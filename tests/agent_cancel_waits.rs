//! A cancel reaches a run that waits on the app: a hook that never answers (an ArkTS hook waits
//! for the JS thread, at most its timeout) or a policy that waits for its answer. The run ends
//! `cancelled` at once instead of when the wait times out, nothing of the batch is frozen, and a
//! call that ran but whose after-hooks never answered is not recorded as finished (its result was
//! never released by the hooks: the next run answers it as interrupted).

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog, RunOutcome};
use arkagent::approval::{ApprovalPolicy, DefaultApprovalPolicy, PolicyDecision};
use arkagent::hook::{AfterToolCall, AgentHook, BeforeToolCall, HookContext, PersistDecision};
use arkagent::message::ToolCall;
use arkagent::provider::ChatRequest;
use arkagent::state::{AgentState, RunStatus};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};

/// Where the hook waits forever (`before_persist_state` lets the run's first save through).
#[derive(Clone, Copy, PartialEq)]
enum Hangs {
    BeforeModel,
    BeforeTool,
    AfterTool,
    BeforePersist,
}

struct Hanging {
    at: Hangs,
    // Calls let through before it hangs.
    pass: AtomicUsize,
}

impl Hanging {
    async fn hang_if(&self, at: Hangs) {
        if self.at == at
            && self.pass.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err()
        {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait::async_trait]
impl AgentHook for Hanging {
    async fn before_model_call(&self, _ctx: &HookContext<'_>, _request: &ChatRequest) {
        self.hang_if(Hangs::BeforeModel).await;
    }

    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        self.hang_if(Hangs::BeforeTool).await;
        BeforeToolCall::Proceed(None)
    }

    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _result: &ToolResult,
    ) -> AfterToolCall {
        self.hang_if(Hangs::AfterTool).await;
        AfterToolCall::default()
    }

    async fn before_persist_state(&self, _ctx: &HookContext<'_>, _state: &AgentState) -> PersistDecision {
        self.hang_if(Hangs::BeforePersist).await;
        PersistDecision::Persist
    }
}

/// `note` (safe) and `wipe` (dangerous), each counting its runs.
fn registry(ran: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, risk) in [("note", RiskLevel::Safe), ("wipe", RiskLevel::Dangerous)] {
        let ran = Arc::clone(ran);
        r.register(
            ToolDefinition::new(name, "test tool", json!({"type":"object"})).with_risk(risk),
            Arc::new(FnExecutor(move |_a, _ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok(ToolResult::text("done")) }
            })),
        )
        .unwrap();
    }
    r
}

/// Runs `tool` under a hook hanging `at`; cancels 50 ms in. The run must end within 5 s.
async fn cancelled_while_hanging(at: Hangs, tool: &str) -> (RunOutcome, Arc<AtomicUsize>, Arc<MemStore>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemStore::new());
    let model = Arc::new(Script::new(vec![calls(&[("c1", tool, "{}")]), answer("done")]));
    let pass = AtomicUsize::new(usize::from(at == Hangs::BeforePersist));
    let agent = AgentBuilder::new(model, store.clone())
        .tools(registry(&ran))
        .hook(Arc::new(Hanging { at, pass }))
        .build();
    let signal = CancellationSignal::new();
    let canceller = {
        let signal = signal.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            signal.cancel("the user left");
        }
    };
    let events = EventLog::new();
    let run = agent.run("s", "q", &events, &signal);
    let (out, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(5), run), canceller);
    let out = out.expect("the cancel ends the run without waiting for the hook").unwrap();
    (out, ran, store)
}

fn status(out: &RunOutcome) -> RunStatus {
    out.status()
}

#[tokio::test]
async fn a_cancel_during_a_before_model_hook_ends_the_run() {
    let (out, ran, _) = cancelled_while_hanging(Hangs::BeforeModel, "note").await;
    assert_eq!(status(&out), RunStatus::Cancelled);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_cancel_during_a_before_tool_hook_ends_the_run_before_anything_runs_or_freezes() {
    for tool in ["note", "wipe"] {
        let (out, ran, store) = cancelled_while_hanging(Hangs::BeforeTool, tool).await;
        assert_eq!(status(&out), RunStatus::Cancelled, "{tool}");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "{tool}");
        let state = arkagent::state::StateStore::load(store.as_ref(), "s").await.unwrap().unwrap();
        assert!(state.pending_approval.is_none(), "{tool}: nothing frozen");
    }
}

#[tokio::test]
async fn a_cancel_during_an_after_tool_hook_ends_the_run_and_the_result_is_not_released() {
    let (out, ran, store) = cancelled_while_hanging(Hangs::AfterTool, "note").await;
    assert_eq!(status(&out), RunStatus::Cancelled);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // The next run answers the call as interrupted: the hooks never released its result.
    let model = Arc::new(Script::new(vec![answer("again")]));
    let agent = AgentBuilder::new(model, store.clone()).tools(registry(&ran)).build();
    agent.run("s", "next", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let state = arkagent::state::StateStore::load(store.as_ref(), "s").await.unwrap().unwrap();
    let answered = tool_messages(&state.messages);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].0, "c1");
    assert!(answered[0].2, "answered as an error (interrupted): {answered:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "not run again");
}

#[tokio::test]
async fn a_cancel_during_a_before_persist_hook_ends_the_run_and_saves() {
    let (out, _ran, store) = cancelled_while_hanging(Hangs::BeforePersist, "note").await;
    assert_eq!(status(&out), RunStatus::Cancelled);
    let state = arkagent::state::StateStore::load(store.as_ref(), "s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Cancelled, "the end is saved");
}

/// A policy that waits for its answer until the run is cancelled (what an app's policy does
/// when its answer comes from the JS thread).
struct WaitsForCancel {
    asked: AtomicUsize,
}

impl ApprovalPolicy for WaitsForCancel {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        DefaultApprovalPolicy.decide(call, definition)
    }

    fn decide_cancellable(
        &self,
        _call: &ToolCall,
        _definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> PolicyDecision {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let start = std::time::Instant::now();
        while !cancel.is_cancelled() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        PolicyDecision::Allow
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_is_given_the_runs_cancel_signal() {
    let ran = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![calls(&[("c1", "wipe", "{}")]), answer("done")]));
    let policy = Arc::new(WaitsForCancel { asked: AtomicUsize::new(0) });
    let agent = AgentBuilder::new(model, Arc::new(MemStore::new()))
        .tools(registry(&ran))
        .policy(policy.clone())
        .build();
    let signal = CancellationSignal::new();
    let canceller = {
        let signal = signal.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            signal.cancel("the user left");
        })
    };
    let started = std::time::Instant::now();
    let out = agent.run("s", "q", &EventLog::new(), &signal).await.unwrap();
    canceller.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "the policy stopped waiting at the cancel");
    assert_eq!(policy.asked.load(Ordering::SeqCst), 1);
    assert_eq!(out.status(), RunStatus::Cancelled);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the answer given after the cancel runs nothing");
}

/// A policy whose answer is awaited (`decide_async`): it answers once `barrier` saw every run
/// waiting on it. Its synchronous `decide` denies, so a run that asked that one shows it.
struct AwaitsTheOthers {
    barrier: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl ApprovalPolicy for AwaitsTheOthers {
    fn decide(&self, _call: &ToolCall, _definition: Option<&ToolDefinition>) -> PolicyDecision {
        PolicyDecision::Deny("the synchronous decide was asked".into())
    }

    async fn decide_async(
        &self,
        _call: &ToolCall,
        _definition: Option<&ToolDefinition>,
        _cancel: &CancellationSignal,
    ) -> PolicyDecision {
        self.barrier.wait().await;
        PolicyDecision::Allow
    }
}

#[tokio::test]
async fn runs_await_the_policys_answer_without_holding_a_thread() {
    // Every run waits on the policy at once on a one-thread runtime: none holds the thread while it
    // waits (a blocking wait could never let the others reach the policy).
    const RUNS: usize = 20;
    let ran = Arc::new(AtomicUsize::new(0));
    let policy = Arc::new(AwaitsTheOthers { barrier: tokio::sync::Barrier::new(RUNS) });
    let agents: Vec<_> = (0..RUNS)
        .map(|i| {
            let model =
                Arc::new(Script::new(vec![calls(&[(&format!("c{i}"), "wipe", "{}")]), answer("done")]));
            AgentBuilder::new(model, Arc::new(MemStore::new()))
                .tools(registry(&ran))
                .policy(policy.clone())
                .build()
        })
        .collect();
    let runs = agents.iter().map(|agent| async move {
        agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap().status()
    });
    let statuses = tokio::time::timeout(Duration::from_secs(10), futures_util::future::join_all(runs))
        .await
        .expect("every run waited on the policy at once");
    assert_eq!(statuses, vec![RunStatus::Completed; RUNS]);
    assert_eq!(ran.load(Ordering::SeqCst), RUNS, "the awaited answer (allow) ran the dangerous tool");
}
