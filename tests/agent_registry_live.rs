//! The registry changes while a batch runs: an executor, a hook or the approval policy
//! unregisters the tool of a call not run yet, or registers it anew (dangerous). Each call is
//! gated by the registry as it is when the call reaches its gate: a tool gone by then is answered
//! `tool_not_found`, one registered anew is not run (neither its old executor nor the new one,
//! which nobody checked), and a tool registered anew before the batch began is checked as it is
//! now (a dangerous one asks for approval). A call already past its gate finishes.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::approval::{ApprovalPolicy, DefaultApprovalPolicy, PolicyDecision};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::message::ToolCall;
use arkagent::provider::ModelResponse;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::{FnExecutor, ToolExecutor};
use arkagent::{codes, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use support::{answer, calls, tool_messages, MemStore, Script};

type Ran = Arc<Mutex<Vec<String>>>;

/// The agent, for the executors, hooks and policies that change its registry (set once built).
type Slot = Arc<OnceLock<Weak<Agent>>>;

fn agent_of(slot: &Slot) -> Arc<Agent> {
    slot.get().and_then(Weak::upgrade).expect("the agent is built")
}

/// A tool of `name` whose executor logs `label` in `ran`.
fn logging_tool(
    name: &str,
    label: &str,
    risk: RiskLevel,
    ran: &Ran,
) -> (ToolDefinition, Arc<dyn ToolExecutor>) {
    let (ran, label) = (Arc::clone(ran), label.to_string());
    let definition = ToolDefinition::new(name, "d", json!({"type": "object"})).with_risk(risk);
    let executor = Arc::new(FnExecutor(move |_args, _ctx| {
        ran.lock().unwrap().push(label.clone());
        std::future::ready(Ok(ToolResult::text(format!("{label} done"))))
    }));
    (definition, executor)
}

/// Replaces `pay` in `agent` with a dangerous `pay` whose executor logs `new pay`.
fn swap_pay_for_a_dangerous_one(agent: &Agent, ran: &Ran) {
    assert_eq!(agent.unregister_tool("pay"), Ok(true));
    let (definition, executor) = logging_tool("pay", "new pay", RiskLevel::Dangerous, ran);
    agent.register_tool(definition, executor).unwrap();
}

fn build(
    script: Vec<ModelResponse>,
    tools: ToolRegistry,
    slot: &Slot,
    with: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> (Arc<Agent>, Arc<MemStore>) {
    let store = Arc::new(MemStore::new());
    let config = AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() };
    let builder = AgentBuilder::new(Arc::new(Script::new(script)), store.clone()).tools(tools).config(config);
    let agent = Arc::new(with(builder).build());
    slot.set(Arc::downgrade(&agent)).unwrap();
    (agent, store)
}

fn ran_now(ran: &Ran) -> Vec<String> {
    ran.lock().unwrap().clone()
}

/// `pay` (safe), whose executor logs `old pay`.
fn old_pay(ran: &Ran) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    let (definition, executor) = logging_tool("pay", "old pay", RiskLevel::Safe, ran);
    tools.register(definition, executor).unwrap();
    tools
}

async fn results_of(store: &MemStore) -> Vec<(String, String, bool)> {
    tool_messages(&store.load("s").await.unwrap().unwrap().messages)
}

#[tokio::test]
async fn an_executor_that_unregisters_a_later_call_s_tool_stops_that_call() {
    let (ran, slot): (Ran, Slot) = Default::default();
    let mut tools = ToolRegistry::new();
    let (logged, unregisters) = (Arc::clone(&ran), Arc::clone(&slot));
    tools
        .register(
            ToolDefinition::new("logout", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_args, _ctx| {
                logged.lock().unwrap().push("logout".to_string());
                assert_eq!(agent_of(&unregisters).unregister_tool("transfer"), Ok(true));
                std::future::ready(Ok(ToolResult::text("logged out")))
            })),
        )
        .unwrap();
    let (definition, executor) = logging_tool("transfer", "transfer", RiskLevel::Safe, &ran);
    tools.register(definition, executor).unwrap();
    let script = vec![calls(&[("c1", "logout", "{}"), ("c2", "transfer", "{}")]), answer("done")];
    let (agent, store) = build(script, tools, &slot, |b| b);
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["logout"], "transfer ran after it was unregistered");
    let results = results_of(&store).await;
    assert_eq!(results[0], ("c1".into(), "logged out".into(), false));
    let (id, text, is_error) = &results[1];
    assert_eq!(id, "c2");
    assert!(*is_error && text.contains(codes::TOOL_NOT_FOUND) && text.contains("unregistered"), "{text}");
}

/// A before-hook that swaps `pay` for a dangerous one as the call to it is planned.
struct SwapsPay(Slot, Ran);

#[async_trait]
impl AgentHook for SwapsPay {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        swap_pay_for_a_dangerous_one(&agent_of(&self.0), &self.1);
        BeforeToolCall::Proceed(None)
    }
}

#[tokio::test]
async fn a_tool_swapped_for_a_dangerous_one_by_a_before_hook_runs_neither_executor() {
    let (ran, slot): (Ran, Slot) = Default::default();
    let script = vec![calls(&[("c1", "pay", "{}")]), answer("done")];
    let hook = Arc::new(SwapsPay(Arc::clone(&slot), Arc::clone(&ran)));
    let (agent, store) = build(script, old_pay(&ran), &slot, |b| b.hook(hook));
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert!(ran_now(&ran).is_empty(), "ran without approval: {:?}", ran_now(&ran));
    let results = results_of(&store).await;
    let (id, text, is_error) = &results[0];
    assert_eq!(id, "c1");
    assert!(*is_error && text.contains(codes::TOOL_NOT_RUN) && text.contains("registered anew"), "{text}");
}

/// An after-hook on the model's answer that swaps `pay` for a dangerous one.
struct SwapsPayOnAnswer(Slot, Ran);

#[async_trait]
impl AgentHook for SwapsPayOnAnswer {
    async fn after_model_response(&self, _ctx: &HookContext<'_>, _response: &ModelResponse) {
        swap_pay_for_a_dangerous_one(&agent_of(&self.0), &self.1);
    }
}

#[tokio::test]
async fn a_tool_swapped_for_a_dangerous_one_once_the_model_answered_asks_for_approval() {
    let (ran, slot): (Ran, Slot) = Default::default();
    let script = vec![calls(&[("c1", "pay", "{}")]), answer("done")];
    let hook = Arc::new(SwapsPayOnAnswer(Arc::clone(&slot), Arc::clone(&ran)));
    let (agent, _store) = build(script, old_pay(&ran), &slot, |b| b.hook(hook));
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else {
        panic!("the dangerous pay was not asked about: {out:?}")
    };
    assert!(ran_now(&ran).is_empty());
    assert_eq!(batch.items[0].risk_level, RiskLevel::Dangerous);
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(ran_now(&ran), ["new pay"]);
}

/// The default policy, but it unregisters the tool of the call it is asked about first.
struct UnregistersThenAllows(Slot);

impl ApprovalPolicy for UnregistersThenAllows {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        agent_of(&self.0).unregister_tool(&call.name).unwrap();
        DefaultApprovalPolicy.decide(call, definition)
    }
}

#[tokio::test]
async fn a_call_whose_tool_the_policy_unregistered_is_not_run() {
    let (ran, slot): (Ran, Slot) = Default::default();
    let script = vec![calls(&[("c1", "pay", "{}")]), answer("done")];
    let policy = Arc::new(UnregistersThenAllows(Arc::clone(&slot)));
    let (agent, store) = build(script, old_pay(&ran), &slot, |b| b.policy(policy));
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert!(ran_now(&ran).is_empty(), "ran after it was unregistered: {:?}", ran_now(&ran));
    let results = results_of(&store).await;
    assert!(results[0].2 && results[0].1.contains(codes::TOOL_NOT_FOUND), "{:?}", results[0]);
}

/// The default policy, but it swaps `pay` for a dangerous one before it answers (a resumed
/// batch's re-check asks it too).
struct SwapsPayThenAllows(Slot, Ran);

impl ApprovalPolicy for SwapsPayThenAllows {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        if call.name == "pay" && definition.is_some_and(|d| d.risk_level == RiskLevel::Safe) {
            swap_pay_for_a_dangerous_one(&agent_of(&self.0), &self.1);
        }
        DefaultApprovalPolicy.decide(call, definition)
    }
}

#[tokio::test]
async fn a_resumed_batch_does_not_run_a_tool_the_policy_swapped_while_re_checking_it() {
    let (ran, slot): (Ran, Slot) = Default::default();
    let mut tools = old_pay(&ran);
    let (definition, executor) = logging_tool("wipe", "wipe", RiskLevel::Dangerous, &ran);
    tools.register(definition, executor).unwrap();
    let script = vec![calls(&[("c1", "wipe", "{}"), ("c2", "pay", "{}")]), answer("done")];
    let policy = Arc::new(SwapsPayThenAllows(Arc::clone(&slot), Arc::clone(&ran)));
    let (agent, store) = build(script, tools, &slot, |b| b.policy(policy));
    // Planned: the policy swapped `pay` while asked about it, so the batch freezes on `wipe`
    // alone with `pay` planned to run; swapped back to a safe `pay` before the resume, the
    // re-check swaps it again, and the call must not run with the registration the policy saw.
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected suspension: {out:?}") };
    assert_eq!(agent.unregister_tool("pay"), Ok(true));
    let (definition, executor) = logging_tool("pay", "old pay", RiskLevel::Safe, &ran);
    agent.register_tool(definition, executor).unwrap();
    let wipe = batch.items.iter().find(|i| i.tool_call.name == "wipe").unwrap();
    agent.approve("s", &wipe.approval_id).await.unwrap();
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    assert_eq!(ran_now(&ran), ["wipe"], "pay ran with a registration nobody checked");
    let results = results_of(&store).await;
    assert!(results[1].2 && results[1].1.contains(codes::TOOL_NOT_RUN), "{:?}", results[1]);
}
