//! The world of `agent_interleave`: the model that follows plans ([`PlanModel`], [`PLANS`]), the
//! tools of every risk level that count their executions and check their approvals, the hook,
//! and the store wrapper whose writes are the points where cancels and crashes happen
//! ([`TestStore`]), all sharing one [`World`].

use arkagent::approval::PendingApprovalBatch;
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext};
use arkagent::message::{ChatMessage, ToolCall, Usage};
use arkagent::provider::{ChatModel, ChatRequest, ModelEventStream, ModelResponse, ScriptedModel};
use arkagent::state::{AgentState, SessionLease, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The model's plans: per round, the tools of one batch (`delegate:N` delegates `plan N`,
/// `FAIL` makes the model fail), then the answer `done`.
pub const PLANS: &[&[&[&str]]] = &[
    &[],
    &[&["look"]],
    &[&["sens"]],
    &[&["look", "danger", "idem"]],
    &[&["danger"], &["sens", "look"]],
    &[&["idem", "look"]],
    &[&["delegate:2"]],
    &[&["delegate:1", "look"]],
    &[&["halt", "look"]],
    &[&["FAIL"]],
    &[&["delegate:3"], &["idem"]],
    &[&["note", "sens"]],
    &[&["trip", "look"]],
    &[&["delegate:12"]],
    &[&["ask"], &["look"]],
    &[&["delegate:11", "idem"]],
    &[&["sens", "trip", "look"]],
    &[&["delegate:16"]],
    &[&["look"], &["look"], &["look"], &["look"], &["look"], &["look"]],
    &[&["danger"], &["danger"], &["danger"], &["danger"], &["danger"]],
];

// ---------------------------------------------------------------------------------------------
// The world: executions, decisions, cancel and crash points.

#[derive(Default)]
pub enum Trigger {
    #[default]
    Off,
    Cancel {
        left: u32,
        signal: CancellationSignal,
    },
    Crash {
        left: u32,
        after_write: bool,
        notify: Arc<Notify>,
    },
}

#[derive(PartialEq)]
pub enum Act {
    Go,
    Hang,
    WriteThenHang,
}

#[derive(Default)]
pub struct World {
    /// Executions per call id.
    pub executions: Mutex<HashMap<String, u32>>,
    pub approved: Mutex<HashSet<String>>,
    pub denied: Mutex<HashSet<String>>,
    pub violations: Mutex<Vec<String>>,
    pub next_call: AtomicU64,
    pub trigger: Mutex<Trigger>,
    /// The simulated process died: every model, tool and store call hangs.
    pub dead: AtomicBool,
    pub crashes: AtomicU32,
    /// The metadata each executor saw, with its session.
    pub tool_metadata: Mutex<Vec<(String, BTreeMap<String, Value>)>>,
    /// Store calls still running in spawned tasks.
    pub inflight: Arc<AtomicUsize>,
}

impl World {
    pub fn violation(&self, v: String) {
        self.violations.lock().unwrap().push(v);
    }

    /// One await point: counts it and fires the trigger when it is reached.
    pub fn point(&self, is_write: bool) -> Act {
        if self.dead.load(Ordering::SeqCst) {
            return Act::Hang;
        }
        let mut t = self.trigger.lock().unwrap();
        match &mut *t {
            Trigger::Off => Act::Go,
            Trigger::Cancel { left, signal } => {
                *left -= 1;
                if *left == 0 {
                    signal.cancel("cancelled by the test");
                    *t = Trigger::Off;
                }
                Act::Go
            }
            Trigger::Crash { left, after_write, notify } => {
                *left -= 1;
                if *left > 0 {
                    return Act::Go;
                }
                let act = if *after_write && is_write { Act::WriteThenHang } else { Act::Hang };
                self.dead.store(true, Ordering::SeqCst);
                notify.notify_one();
                *t = Trigger::Off;
                act
            }
        }
    }

    pub fn record_decision(&self, batch: &PendingApprovalBatch, approval_id: &str, approved: bool) {
        let Some(item) = batch.item(approval_id) else { return };
        let set = if approved { &self.approved } else { &self.denied };
        set.lock().unwrap().insert(item.tool_call.id.clone());
    }

    /// The tool side of the checks, when an executor starts.
    pub fn executed(&self, tool: &str, call_id: &str, needs_approval: bool, idempotent: bool) {
        let n = {
            let mut e = self.executions.lock().unwrap();
            let n = e.entry(call_id.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        let crashes = self.crashes.load(Ordering::SeqCst);
        if n > 1 && !(idempotent && n <= 1 + crashes) {
            self.violation(format!("{tool} ran {n} times for call {call_id} ({crashes} crashes)"));
        }
        if self.denied.lock().unwrap().contains(call_id) {
            self.violation(format!("{tool} ran for the denied call {call_id}"));
        }
        if needs_approval && !self.approved.lock().unwrap().contains(call_id) {
            self.violation(format!("{tool} ran for call {call_id} before it was approved"));
        }
    }
}

pub async fn hang<T>() -> T {
    std::future::pending().await
}

// ---------------------------------------------------------------------------------------------
// The model.

/// Answers by the plan its run's user message names (`plan N`), one batch per round.
pub struct PlanModel {
    pub world: Arc<World>,
}

impl PlanModel {
    pub async fn answer(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        for _ in 0..2 {
            tokio::task::yield_now().await;
        }
        if self.world.point(false) != Act::Go {
            return hang().await;
        }
        let messages = &request.messages;
        // The run's question (a hook's injected reminders are user messages too; successive user
        // messages arrive joined by a blank line: the question is the last "plan" paragraph).
        let last_plan = |content: &str| {
            content.split("\n\n").filter_map(|p| p.strip_prefix("plan ")).last().map(str::to_string)
        };
        let is_plan =
            |m: &ChatMessage| matches!(m, ChatMessage::User { content } if last_plan(content).is_some());
        let Some(pos) = messages.iter().rposition(is_plan) else {
            return Ok(ModelResponse::text("no question"));
        };
        let plan = match &messages[pos] {
            ChatMessage::User { content } => {
                last_plan(content).and_then(|n| n.parse::<usize>().ok()).unwrap_or(0)
            }
            _ => 0,
        };
        let step = messages[pos + 1..].iter().filter(|m| matches!(m, ChatMessage::Assistant { .. })).count();
        let Some(batch) = PLANS.get(plan).and_then(|p| p.get(step)) else {
            return Ok(ModelResponse::text(format!("done {plan}")));
        };
        if batch == &["FAIL"] {
            return Err(AgentError::of(codes::PROVIDER_CONNECT, "the model is unreachable (scripted)"));
        }
        let calls = batch
            .iter()
            .map(|name| {
                let id = format!("c{}", self.world.next_call.fetch_add(1, Ordering::SeqCst));
                match name.strip_prefix("delegate:") {
                    Some(n) => {
                        ToolCall::new(id, "delegate_task", json!({ "task": format!("plan {n}") }).to_string())
                    }
                    None => ToolCall::new(id, *name, "{}"),
                }
            })
            .collect();
        let mut response = ModelResponse::with_tool_calls(calls);
        response.usage = Some(Usage { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
        Ok(response)
    }
}

#[async_trait]
impl ChatModel for PlanModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        self.answer(request).await
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let response = self.answer(request).await?;
        ScriptedModel::new([response]).stream(request).await
    }
}

// ---------------------------------------------------------------------------------------------
// The tools.

pub fn tools(world: &Arc<World>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, risk, idempotent, stop) in [
        ("look", RiskLevel::Safe, false, false),
        ("idem", RiskLevel::Safe, true, false),
        ("sens", RiskLevel::Sensitive, false, false),
        ("danger", RiskLevel::Dangerous, true, false),
        ("halt", RiskLevel::Safe, false, true),
        ("note", RiskLevel::Safe, false, false),
        ("trip", RiskLevel::Safe, false, false),
        ("ask", RiskLevel::Safe, false, false),
    ] {
        let world = Arc::clone(world);
        let definition = ToolDefinition::new(name, format!("{name} tool"), json!({"type":"object"}))
            .with_risk(risk)
            .idempotent(idempotent);
        r.register(
            definition,
            Arc::new(FnExecutor(move |_args, ctx: arkagent::ToolContext| {
                let world = Arc::clone(&world);
                async move {
                    if world.dead.load(Ordering::SeqCst) {
                        return hang().await;
                    }
                    // `ask` is safe, but the hook defers it to the user.
                    let needs_approval = risk != RiskLevel::Safe || name == "ask";
                    world.executed(name, &ctx.call_id, needs_approval, idempotent);
                    world
                        .tool_metadata
                        .lock()
                        .unwrap()
                        .push((ctx.session_id.clone(), ctx.state.metadata.clone()));
                    for _ in 0..2 {
                        tokio::task::yield_now().await;
                    }
                    if world.point(false) != Act::Go {
                        return hang().await;
                    }
                    let mut result = ToolResult::text(format!("{name} ok"));
                    result.stop = stop;
                    Ok(result)
                }
            })),
        )
        .unwrap();
    }
    r
}

// ---------------------------------------------------------------------------------------------
// The hook: `ask` is deferred to the user, `note`'s result brings a reminder, `trip`'s ends the run.

pub struct TestHook;

#[async_trait]
impl AgentHook for TestHook {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        match call.name.as_str() {
            "ask" => BeforeToolCall::Defer("the hook asks the user".into()),
            _ => BeforeToolCall::Proceed(None),
        }
    }

    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _result: &ToolResult,
    ) -> AfterToolCall {
        match call.name.as_str() {
            "note" => AfterToolCall {
                action: AfterToolCallAction::Proceed(None),
                inject: vec![ChatMessage::user("reminder: be brief")],
            },
            "trip" => {
                AfterToolCall { action: AfterToolCallAction::Abort("tripped".into()), inject: Vec::new() }
            }
            _ => AfterToolCall::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The store: the real one, its writes counted as points; a dead process's calls hang.

pub struct TestStore {
    pub inner: Arc<dyn StateStore>,
    pub world: Arc<World>,
}

impl TestStore {
    /// Runs a store call in its own task, so a crash (the caller dropped) never leaves half a call
    /// running under the next agent: the harness waits for `inflight` to drain.
    async fn call<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        struct Done(Arc<AtomicUsize>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.world.inflight.fetch_add(1, Ordering::SeqCst);
        let done = Done(Arc::clone(&self.world.inflight));
        tokio::spawn(async move {
            let _done = done;
            f.await
        })
        .await
        .expect("store task")
    }

    async fn write<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        match self.world.point(true) {
            Act::Go => self.call(f).await,
            Act::Hang => hang().await,
            Act::WriteThenHang => {
                self.call(f).await;
                hang().await
            }
        }
    }

    async fn read<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        if self.world.dead.load(Ordering::SeqCst) {
            return hang().await;
        }
        self.call(f).await
    }
}

#[async_trait]
impl StateStore for TestStore {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        let (inner, id) = (Arc::clone(&self.inner), session_id.to_string());
        self.read(async move { inner.load(&id).await }).await
    }

    async fn load_unrepaired(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        let (inner, id) = (Arc::clone(&self.inner), session_id.to_string());
        self.read(async move { inner.load_unrepaired(&id).await }).await
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        let (inner, state, events) = (Arc::clone(&self.inner), state.clone(), events.to_vec());
        self.write(async move { inner.commit(&state, &events).await }).await
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        let (inner, state) = (Arc::clone(&self.inner), state.clone());
        self.write(async move { inner.save_snapshot(&state).await }).await
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        let (inner, id) = (Arc::clone(&self.inner), session_id.to_string());
        self.write(async move { inner.delete(&id).await }).await
    }

    async fn lease(&self, session_id: &str) -> Result<SessionLease, AgentError> {
        let (inner, id) = (Arc::clone(&self.inner), session_id.to_string());
        self.read(async move { inner.lease(&id).await }).await
    }
}
