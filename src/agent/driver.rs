//! The tokio driver: performs the I/O the run state machine asks for (model calls, tool calls,
//! state commits, events) and records what happened as journal events.

use super::config::AgentConfig;
use super::events::{AgentEvent, EventSink};
use super::machine::{fully_decided, phase, unanswered_calls, Phase};
use crate::approval::{
    ApprovalDecision, ApprovalPolicy, PendingApprovalBatch, PendingApprovalItem, PolicyDecision,
};
use crate::error::{codes, AgentError};
use crate::hook::{AfterToolCallAction, AgentHook, BeforeToolCall, HookContext, PersistDecision};
use crate::message::{ChatMessage, ToolCall, Usage};
use crate::provider::{ChatModel, ChatRequest, ModelEvent, ModelResponse};
use crate::state::{AgentState, RunStatus, StateEvent, StateStore, ToolRunRecord};
use crate::tool::{
    CancellationSignal, RiskLevel, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry, ToolResult,
    ToolServiceRegistry, ToolSnapshot,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// How a call to [`Agent::run`] or [`Agent::resume`] ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// The run ended (completed, max_rounds, loop_detected, aborted, cancelled or failed).
    Finished {
        /// How it ended.
        status: RunStatus,
        /// The final answer, if any.
        final_text: Option<String>,
        /// The error that ended a failed or aborted run.
        error: Option<AgentError>,
        /// Usage of the session so far.
        usage: Usage,
    },
    /// A batch is frozen until the user decides; the state is persisted. Decide with
    /// [`Agent::approve`] / [`Agent::deny`], then [`Agent::resume`] (in this process or another).
    Suspended {
        /// The frozen batch.
        batch: PendingApprovalBatch,
    },
}

impl RunOutcome {
    /// The status the session is in after this outcome.
    pub fn status(&self) -> RunStatus {
        match self {
            RunOutcome::Finished { status, .. } => *status,
            RunOutcome::Suspended { .. } => RunStatus::AwaitingApproval,
        }
    }
}

/// An agent: a model, tools, a state store, an approval policy and hooks.
pub struct Agent {
    model: Arc<dyn ChatModel>,
    tools: RwLock<ToolRegistry>,
    store: Arc<dyn StateStore>,
    policy: Arc<dyn ApprovalPolicy>,
    hooks: Vec<Arc<dyn AgentHook>>,
    services: Arc<ToolServiceRegistry>,
    config: AgentConfig,
    depth: u32,
    // A std Mutex guarding the map of per-session locks; never held across an await.
    session_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    model: Arc<dyn ChatModel>,
    store: Arc<dyn StateStore>,
    tools: ToolRegistry,
    policy: Option<Arc<dyn ApprovalPolicy>>,
    hooks: Vec<Arc<dyn AgentHook>>,
    services: Arc<ToolServiceRegistry>,
    config: AgentConfig,
    depth: u32,
}

impl AgentBuilder {
    /// A builder for a model and a state store.
    pub fn new(model: Arc<dyn ChatModel>, store: Arc<dyn StateStore>) -> Self {
        AgentBuilder {
            model,
            store,
            tools: ToolRegistry::new(),
            policy: None,
            hooks: Vec::new(),
            services: Arc::new(ToolServiceRegistry::new()),
            config: AgentConfig::default(),
            depth: 0,
        }
    }

    /// Uses these tools.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Uses this approval policy instead of the default.
    pub fn policy(mut self, policy: Arc<dyn ApprovalPolicy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Adds a hook (hooks run in the order they are added).
    pub fn hook(mut self, hook: Arc<dyn AgentHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Uses these services for tools.
    pub fn services(mut self, services: ToolServiceRegistry) -> Self {
        self.services = Arc::new(services);
        self
    }

    /// The nesting depth of a worker agent (0 for a top-level agent).
    pub(crate) fn depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// Uses this configuration.
    pub fn config(mut self, config: AgentConfig) -> Self {
        self.config = config;
        self
    }

    /// The agent.
    pub fn build(self) -> Agent {
        Agent {
            model: self.model,
            tools: RwLock::new(self.tools),
            store: self.store,
            policy: self.policy.unwrap_or_else(|| Arc::new(crate::approval::DefaultApprovalPolicy)),
            hooks: self.hooks,
            services: self.services,
            config: self.config,
            depth: self.depth,
            session_locks: Mutex::new(HashMap::new()),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Agent {
    /// Registers a tool (see [`ToolRegistry::register`]); later model rounds see it.
    ///
    /// # Errors
    /// `tool_name_empty`, `tool_name_duplicate` or a `schema_*` error.
    pub fn register_tool(
        &self,
        definition: ToolDefinition,
        executor: Arc<dyn ToolExecutor>,
    ) -> Result<(), AgentError> {
        self.tools.write().unwrap_or_else(|p| p.into_inner()).register(definition, executor)
    }

    /// Removes a tool; returns whether it was there.
    pub fn unregister_tool(&self, name: &str) -> bool {
        self.tools.write().unwrap_or_else(|p| p.into_inner()).unregister(name)
    }

    /// The tools as they are now.
    pub fn tools(&self) -> ToolSnapshot {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).snapshot()
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The state store.
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// 0 for a top-level agent, 1 for its workers, ...
    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub(crate) fn tool_limits(&self) -> crate::json::JsonLimits {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).limits()
    }

    pub(crate) fn copy_tools_into(
        &self,
        target: &mut ToolRegistry,
        excluded: &[&str],
    ) -> Result<(), AgentError> {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).copy_into_excluding(target, excluded)
    }

    /// A builder for a worker: this agent's model, store, policy, hooks, services and config.
    pub(crate) fn worker_builder(&self) -> AgentBuilder {
        AgentBuilder {
            model: Arc::clone(&self.model),
            store: Arc::clone(&self.store),
            tools: ToolRegistry::new(),
            policy: Some(Arc::clone(&self.policy)),
            hooks: self.hooks.clone(),
            services: Arc::clone(&self.services),
            config: self.config.clone(),
            depth: self.depth,
        }
    }

    fn session_lock(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(session_id.to_string()).or_default())
    }

    /// The persisted state of a session.
    ///
    /// # Errors
    /// The store's errors.
    pub async fn state(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        self.store.load(session_id).await
    }

    /// Runs the agent on a new user message until it answers, suspends for approval, or ends.
    ///
    /// # Errors
    /// `approval_pending` when the session awaits decisions, the store's errors. Model and tool
    /// failures do not come as errors: they end the run with a status (or go back to the model).
    pub async fn run(
        &self,
        session_id: &str,
        input: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<RunOutcome, AgentError> {
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let state = self.store.load(session_id).await?.unwrap_or_else(|| AgentState::new(session_id));
        if state.status == RunStatus::AwaitingApproval {
            return Err(AgentError::of(
                codes::APPROVAL_PENDING,
                "the session awaits approval decisions: approve or deny them, then resume",
            ));
        }
        let mut run = Run::new(self, state, sink, cancel.clone());
        run.answer_orphans(false);
        let run_id = uuid::Uuid::new_v4().to_string();
        run.record(StateEvent::RunStarted { run_id: run_id.clone() });
        if run.state.messages.is_empty() {
            if let Some(system) = &self.config.system_prompt {
                run.record(StateEvent::MessageAppended { message: ChatMessage::system(system.clone()) });
            }
        }
        run.record(StateEvent::MessageAppended { message: ChatMessage::user(input) });
        sink.emit(AgentEvent::RunStarted { session_id: session_id.to_string(), run_id, resumed: false });
        run.hooks_run_start().await;
        run.persist(true).await?;
        run.drive().await
    }

    /// Continues a suspended run once every pending item is decided, or a run that was interrupted
    /// by a crash (finished calls are not run again; started but unfinished calls are answered as
    /// interrupted unless their tool is idempotent).
    ///
    /// # Errors
    /// `session_not_found`, `approval_pending` (undecided items), `invalid_state` (nothing to
    /// resume), the store's errors.
    pub async fn resume(
        &self,
        session_id: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<RunOutcome, AgentError> {
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let state = self.load_existing(session_id).await?;
        match state.status {
            RunStatus::AwaitingApproval => {
                if let Some(batch) = &state.pending_approval {
                    if !fully_decided(batch) {
                        return Err(AgentError::of(
                            codes::APPROVAL_PENDING,
                            "some approval items are still pending",
                        ));
                    }
                }
            }
            RunStatus::Running => {}
            other => {
                return Err(AgentError::of(
                    codes::INVALID_STATE,
                    format!("nothing to resume: the session is {other:?}"),
                ))
            }
        }
        let run_id = state.run_id.clone().unwrap_or_default();
        let mut run = Run::new(self, state, sink, cancel.clone());
        if run.state.status == RunStatus::AwaitingApproval {
            run.record(StateEvent::StatusChanged { status: RunStatus::Running });
        }
        sink.emit(AgentEvent::RunStarted { session_id: session_id.to_string(), run_id, resumed: true });
        run.hooks_run_start().await;
        run.drive().await
    }

    async fn load_existing(&self, session_id: &str) -> Result<AgentState, AgentError> {
        self.store
            .load(session_id)
            .await?
            .ok_or_else(|| AgentError::of(codes::SESSION_NOT_FOUND, format!("no session {session_id}")))
    }

    /// Approves one pending item; the decision is durable when this returns.
    ///
    /// # Errors
    /// `no_pending_approval`, `approval_not_found`, `approval_already_decided`, the store's errors.
    pub async fn approve(
        &self,
        session_id: &str,
        approval_id: &str,
    ) -> Result<PendingApprovalBatch, AgentError> {
        self.decide(session_id, approval_id, ApprovalDecision::Approved, None).await
    }

    /// Denies one pending item; the decision is durable when this returns.
    ///
    /// # Errors
    /// `no_pending_approval`, `approval_not_found`, `approval_already_decided`, the store's errors.
    pub async fn deny(
        &self,
        session_id: &str,
        approval_id: &str,
        reason: &str,
    ) -> Result<PendingApprovalBatch, AgentError> {
        self.decide(session_id, approval_id, ApprovalDecision::Denied, Some(reason.to_string())).await
    }

    async fn decide(
        &self,
        session_id: &str,
        approval_id: &str,
        decision: ApprovalDecision,
        deny_reason: Option<String>,
    ) -> Result<PendingApprovalBatch, AgentError> {
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let mut state = self.load_existing(session_id).await?;
        let batch = state
            .pending_approval
            .as_ref()
            .ok_or_else(|| AgentError::of(codes::NO_PENDING_APPROVAL, "no approval is pending"))?;
        let item = batch.items.iter().find(|i| i.approval_id == approval_id).ok_or_else(|| {
            AgentError::of(codes::APPROVAL_NOT_FOUND, format!("no pending approval {approval_id}"))
        })?;
        if item.decision != ApprovalDecision::Pending {
            return Err(AgentError::of(
                codes::APPROVAL_ALREADY_DECIDED,
                format!("approval {approval_id} is already {:?}", item.decision),
            ));
        }
        let event = StateEvent::ApprovalDecided {
            approval_id: approval_id.to_string(),
            decision,
            deny_reason,
            decided_at_ms: now_ms(),
        };
        state.apply(&event);
        self.store.commit(&state, std::slice::from_ref(&event)).await?;
        Ok(state.pending_approval.clone().expect("batch present"))
    }
}

/// What a planned call turns into before execution.
enum Plan {
    Execute,
    Result(ToolResult),
    Confirm(String),
}

enum Flow {
    Continue,
    Done(RunOutcome),
}

/// One run of the driver over one session's state.
struct Run<'a> {
    agent: &'a Agent,
    state: AgentState,
    unsaved: Vec<StateEvent>,
    sink: &'a dyn EventSink,
    cancel: CancellationSignal,
    turn_tools: Option<ToolSnapshot>,
    stop_requested: bool,
}

impl<'a> Run<'a> {
    fn new(agent: &'a Agent, state: AgentState, sink: &'a dyn EventSink, cancel: CancellationSignal) -> Self {
        Run { agent, state, unsaved: Vec::new(), sink, cancel, turn_tools: None, stop_requested: false }
    }

    fn record(&mut self, event: StateEvent) {
        self.state.apply(&event);
        self.unsaved.push(event);
    }

    fn run_id(&self) -> String {
        self.state.run_id.clone().unwrap_or_default()
    }

    fn ctx(&self) -> (String, String, u32) {
        (self.state.session_id.clone(), self.run_id(), self.state.round)
    }

    async fn hooks_run_start(&self) {
        let (s, r, round) = self.ctx();
        let ctx = HookContext { session_id: &s, run_id: &r, round };
        for h in &self.agent.hooks {
            h.on_run_start(&ctx).await;
        }
    }

    /// Durably commits the recorded events. `force` ignores a hook's request to skip (terminal
    /// states, frozen batches and tool starts are always persisted).
    async fn persist(&mut self, force: bool) -> Result<(), AgentError> {
        if self.unsaved.is_empty() {
            return Ok(());
        }
        let terminal = force || self.state.status.is_terminal();
        let (s, r, round) = self.ctx();
        let ctx = HookContext { session_id: &s, run_id: &r, round };
        let mut skip = false;
        for h in &self.agent.hooks {
            if h.before_persist_state(&ctx, &self.state).await == PersistDecision::Skip {
                skip = true;
                break;
            }
        }
        if skip && !terminal {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unsaved);
        self.agent.store.commit(&self.state, &events).await?;
        self.sink.emit(AgentEvent::StatePersisted { events: events.len() });
        Ok(())
    }

    /// Answers the unanswered calls left by an earlier run that ended without results (cancel,
    /// crash, abort): a finished call keeps its recorded result, anything else is `interrupted`.
    fn answer_orphans(&mut self, keep_idempotent: bool) {
        let calls = unanswered_calls(&self.state.messages);
        if calls.is_empty() {
            return;
        }
        let tools = self.agent.tools();
        for call in calls {
            let result = match self.state.tool_runs.get(&call.id) {
                Some(ToolRunRecord::Finished { result, .. }) => result.clone(),
                _ if keep_idempotent && tools.definition(&call.name).is_some_and(|d| d.idempotent) => {
                    continue
                }
                _ => interrupted_result(),
            };
            self.record(StateEvent::MessageAppended { message: tool_message(&call, &result) });
        }
        self.record(StateEvent::BatchCompleted);
        if self.state.pending_approval.is_some() {
            self.record(StateEvent::ApprovalCleared);
        }
    }

    async fn drive(&mut self) -> Result<RunOutcome, AgentError> {
        loop {
            if self.cancel.is_cancelled() {
                return self.finish(RunStatus::Cancelled, None, None).await;
            }
            let flow = match phase(&self.state) {
                Phase::Inactive => {
                    return Ok(RunOutcome::Finished {
                        status: self.state.status,
                        final_text: None,
                        error: None,
                        usage: self.state.usage,
                    })
                }
                Phase::Answered { text } => return self.finish(RunStatus::Completed, text, None).await,
                Phase::AwaitingApproval => {
                    let batch = self.state.pending_approval.clone().expect("awaiting approval has a batch");
                    return Ok(RunOutcome::Suspended { batch });
                }
                Phase::NeedsModel => {
                    if self.stop_requested {
                        let text = last_assistant_text(&self.state.messages);
                        return self.finish(RunStatus::Completed, text, None).await;
                    }
                    if self.state.round >= self.agent.config.max_rounds {
                        return self.finish(RunStatus::MaxRounds, None, None).await;
                    }
                    self.model_round().await?
                }
                Phase::ToolBatch { calls } => self.tool_batch(calls).await?,
                Phase::ApprovedBatch { calls } => self.settle_batch(calls).await?,
            };
            if let Flow::Done(outcome) = flow {
                return Ok(outcome);
            }
        }
    }

    async fn model_round(&mut self) -> Result<Flow, AgentError> {
        let round = self.state.round + 1;
        self.record(StateEvent::RoundStarted { round });
        let tools = self.agent.tools();
        let config = &self.agent.config;
        let request = ChatRequest {
            messages: self.state.messages.clone().into(),
            tools: Arc::clone(tools.definitions()),
            tool_choice: if tools.definitions().is_empty() { None } else { config.tool_choice.clone() },
            temperature: config.temperature,
            max_tokens: config.max_tokens,
        };
        let (s, r, _) = self.ctx();
        let ctx = HookContext { session_id: &s, run_id: &r, round };
        for h in &self.agent.hooks {
            h.before_model_call(&ctx, &request).await;
        }
        let cancel = self.cancel.clone();
        let answer = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = self.call_model(&request) => Some(r),
        };
        let response = match answer {
            None => return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done),
            Some(Err(e)) => {
                for h in &self.agent.hooks {
                    h.on_error(&ctx, &e).await;
                }
                return self.finish(RunStatus::Failed, None, Some(e)).await.map(Flow::Done);
            }
            Some(Ok(r)) => r,
        };
        for h in &self.agent.hooks {
            h.after_model_response(&ctx, &response).await;
        }
        self.record(StateEvent::MessageAppended { message: response.to_message() });
        if let Some(usage) = response.usage {
            self.record(StateEvent::UsageAdded { usage });
        }
        self.persist(false).await?;
        self.turn_tools = Some(tools);
        Ok(Flow::Continue)
    }

    async fn call_model(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        if !self.agent.config.streaming {
            return self.agent.model.complete(request).await;
        }
        let mut stream = self.agent.model.stream(request).await?;
        while let Some(event) = stream.next().await {
            match event? {
                ModelEvent::TextDelta(delta) => self.sink.emit(AgentEvent::TextDelta { delta }),
                ModelEvent::ReasoningDelta(delta) => self.sink.emit(AgentEvent::ReasoningDelta { delta }),
                ModelEvent::ToolCallStarted { index, id, name } => {
                    self.sink.emit(AgentEvent::ToolCallStarted { index, id, name })
                }
                ModelEvent::ToolCallArgumentsDelta { index, delta } => {
                    self.sink.emit(AgentEvent::ToolCallArgumentsDelta { index, delta })
                }
                ModelEvent::ToolCallFinished { index, call } => {
                    self.sink.emit(AgentEvent::ToolCallFinished { index, call })
                }
                ModelEvent::Usage(_) => {}
                ModelEvent::Finished(response) => return Ok(response),
            }
        }
        Err(AgentError::of(codes::PROVIDER_STREAM_INTERRUPTED, "the model stream ended without finishing"))
    }

    /// A fresh batch: before-hooks, then the policy; freeze the whole batch if any call needs
    /// confirmation, else execute.
    async fn tool_batch(&mut self, calls: Vec<ToolCall>) -> Result<Flow, AgentError> {
        let tools = self.turn_tools.clone().unwrap_or_else(|| self.agent.tools());
        let (s, r, round) = self.ctx();
        let mut planned: Vec<(ToolCall, Plan)> = Vec::with_capacity(calls.len());
        for call in calls {
            match self.state.tool_runs.get(&call.id) {
                // Known from an earlier process: never plan (or run) it again here.
                Some(ToolRunRecord::Finished { result, .. }) => {
                    planned.push((call, Plan::Result(result.clone())));
                    continue;
                }
                Some(ToolRunRecord::Started { .. }) => {
                    let idempotent = tools.definition(&call.name).is_some_and(|d| d.idempotent);
                    let plan = if idempotent { Plan::Execute } else { Plan::Result(interrupted_result()) };
                    planned.push((call, plan));
                    continue;
                }
                None => {}
            }
            let definition = tools.definition(&call.name);
            let ctx = HookContext { session_id: &s, run_id: &r, round };
            let mut current = call.clone();
            let mut hook_plan = None;
            for h in &self.agent.hooks {
                match h.before_tool_call(&ctx, &current, definition).await {
                    BeforeToolCall::Proceed(Some(rewritten)) => {
                        // The call id is preserved whatever the hook returned.
                        current = ToolCall { id: call.id.clone(), ..rewritten };
                    }
                    BeforeToolCall::Proceed(None) => {}
                    BeforeToolCall::Deny(result) => {
                        hook_plan = Some(Plan::Result(result));
                        break;
                    }
                    BeforeToolCall::Defer(reason) => {
                        hook_plan = Some(Plan::Confirm(reason));
                        break;
                    }
                    BeforeToolCall::Abort(reason) => {
                        let e = AgentError::of(codes::HOOK_ABORTED, reason);
                        return self.finish(RunStatus::Aborted, None, Some(e)).await.map(Flow::Done);
                    }
                }
            }
            let plan = match hook_plan {
                Some(p) => p,
                None => match self.agent.policy.decide(&current, tools.definition(&current.name)) {
                    PolicyDecision::Allow => Plan::Execute,
                    PolicyDecision::Deny(reason) => Plan::Result(ToolResult::from_error(&AgentError::of(
                        codes::TOOL_DENIED,
                        format!("denied by policy: {reason}"),
                    ))),
                    PolicyDecision::RequireConfirmation(reason) => Plan::Confirm(reason),
                },
            };
            planned.push((current, plan));
        }

        if planned.iter().any(|(_, p)| matches!(p, Plan::Confirm(_))) {
            return self.freeze(planned, &tools).await;
        }
        let calls: Vec<ToolCall> = planned.iter().map(|(c, _)| c.clone()).collect();
        let mut ready = HashMap::new();
        let mut to_run = Vec::new();
        for (call, plan) in planned {
            match plan {
                Plan::Result(result) => {
                    ready.insert(call.id.clone(), result);
                }
                Plan::Execute => to_run.push(call),
                Plan::Confirm(_) => unreachable!("handled above"),
            }
        }
        self.execute(calls, to_run, ready, &tools).await
    }

    /// Freezes the batch: persisted first, then `ApprovalRequired`, then suspended.
    async fn freeze(
        &mut self,
        planned: Vec<(ToolCall, Plan)>,
        tools: &ToolSnapshot,
    ) -> Result<Flow, AgentError> {
        let created = now_ms();
        let mut items = Vec::new();
        for (call, plan) in &planned {
            match plan {
                Plan::Confirm(reason) => items.push(PendingApprovalItem {
                    approval_id: uuid::Uuid::new_v4().to_string(),
                    arguments_hash: crate::approval::arguments_hash(&call.arguments),
                    tool_call: call.clone(),
                    risk_level: tools.definition(&call.name).map(|d| d.risk_level).unwrap_or(RiskLevel::Safe),
                    reason: reason.clone(),
                    created_at_ms: created,
                    decision: ApprovalDecision::Pending,
                    deny_reason: None,
                    decided_at_ms: None,
                }),
                Plan::Result(result) if !self.state.tool_runs.contains_key(&call.id) => {
                    // Hook or policy denials are answers already: record them so a resume uses them.
                    self.record(StateEvent::ToolFinished {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        result: result.clone(),
                    });
                }
                _ => {}
            }
        }
        let assistant = last_assistant(&self.state.messages);
        let batch = PendingApprovalBatch {
            batch_id: uuid::Uuid::new_v4().to_string(),
            run_id: self.run_id(),
            items,
            assistant_message: ChatMessage::Assistant {
                content: assistant.0,
                reasoning_content: assistant.1,
                tool_calls: planned.iter().map(|(c, _)| c.clone()).collect(),
            },
            created_at_ms: created,
        };
        self.record(StateEvent::ApprovalRequested { batch: batch.clone() });
        self.persist(true).await?;
        self.sink.emit(AgentEvent::ApprovalRequired { batch: batch.clone() });
        let (s, r, round) = self.ctx();
        let ctx = HookContext { session_id: &s, run_id: &r, round };
        for h in &self.agent.hooks {
            h.on_approval_required(&ctx, &batch).await;
        }
        Ok(Flow::Done(RunOutcome::Suspended { batch }))
    }

    /// A fully decided frozen batch: all approved -> run it; any denied -> nothing runs.
    async fn settle_batch(&mut self, unanswered: Vec<ToolCall>) -> Result<Flow, AgentError> {
        let batch = self.state.pending_approval.clone().expect("settling needs a batch");
        let tools = self.agent.tools();
        // The calls as planned before the freeze (hook rewrites included), in call order.
        let planned: HashMap<&str, &ToolCall> =
            batch.assistant_message.tool_calls().iter().map(|c| (c.id.as_str(), c)).collect();
        let calls: Vec<ToolCall> = unanswered
            .iter()
            .map(|c| planned.get(c.id.as_str()).map(|p| (*p).clone()).unwrap_or(c.clone()))
            .collect();
        let denied = batch.items.iter().any(|i| i.decision == ApprovalDecision::Denied);
        let mut ready = HashMap::new();
        let mut to_run = Vec::new();
        for call in &calls {
            let item = batch.items.iter().find(|i| i.tool_call.id == call.id);
            let result = match (self.state.tool_runs.get(&call.id), item) {
                (Some(ToolRunRecord::Finished { result, .. }), _) => Some(result.clone()),
                (Some(ToolRunRecord::Started { .. }), _)
                    if !tools.definition(&call.name).is_some_and(|d| d.idempotent) =>
                {
                    Some(interrupted_result())
                }
                (_, Some(i)) if i.decision == ApprovalDecision::Denied => {
                    Some(ToolResult::from_error(&AgentError::of(
                        codes::TOOL_DENIED,
                        format!("denied by user: {}", i.deny_reason.clone().unwrap_or_default()),
                    )))
                }
                _ if denied => Some(ToolResult::from_error(&AgentError::of(
                    codes::TOOL_NOT_RUN,
                    "not run: another call of this batch was denied by the user",
                ))),
                _ => None,
            };
            match result {
                Some(r) => {
                    ready.insert(call.id.clone(), r);
                }
                None => to_run.push(call.clone()),
            }
        }
        self.execute(calls, to_run, ready, &tools).await
    }

    /// Runs `to_run` (each journaled `started` before it runs and `finished` after), then appends
    /// every call's result in call order.
    async fn execute(
        &mut self,
        calls: Vec<ToolCall>,
        to_run: Vec<ToolCall>,
        mut results: HashMap<String, ToolResult>,
        tools: &ToolSnapshot,
    ) -> Result<Flow, AgentError> {
        let all_safe =
            to_run.iter().all(|c| tools.definition(&c.name).is_none_or(|d| d.risk_level == RiskLevel::Safe));
        let width = if all_safe { self.agent.config.max_parallel_tools.max(1) } else { 1 };
        let batch_call_id = self.run_id() + ":" + &self.state.round.to_string();
        let view = Arc::new(self.state.readonly_view());
        let mut injected = Vec::new();
        let mut abort: Option<String> = None;

        // Answers known before execution (denials, recorded results) are reported first.
        for call in &calls {
            if let Some(result) = results.get(&call.id) {
                self.sink.emit(AgentEvent::ToolResult {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    result: result.clone(),
                });
            }
        }

        for chunk in to_run.chunks(width) {
            for call in chunk {
                self.record(StateEvent::ToolStarted { call_id: call.id.clone(), name: call.name.clone() });
            }
            self.persist(true).await?;
            let mut running: FuturesUnordered<_> = chunk
                .iter()
                .map(|call| {
                    let ctx = ToolContext {
                        session_id: self.state.session_id.clone(),
                        state: Arc::clone(&view),
                        batch_call_id: batch_call_id.clone(),
                        call_id: call.id.clone(),
                        signal: self.cancel.child(),
                        services: Arc::clone(&self.agent.services),
                    };
                    let timeout = tools
                        .definition(&call.name)
                        .and_then(|d| d.timeout)
                        .unwrap_or(self.agent.config.tool_timeout);
                    run_one(tools.clone(), call.clone(), ctx, timeout)
                })
                .collect();
            loop {
                let cancel = self.cancel.clone();
                let next = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => None,
                    n = running.next() => n,
                };
                let Some((call, result)) = next else {
                    if self.cancel.is_cancelled() {
                        drop(running);
                        return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done);
                    }
                    break;
                };
                let result = match result {
                    Ok(r) => r,
                    Err(e) if e.is_cancelled() && self.cancel.is_cancelled() => {
                        drop(running);
                        return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done);
                    }
                    Err(e) => ToolResult::from_error(&e),
                };
                let (s, r, round) = self.ctx();
                let ctx = HookContext { session_id: &s, run_id: &r, round };
                let mut result = result;
                for h in &self.agent.hooks {
                    let after = h.after_tool_call(&ctx, &call, &result).await;
                    injected.extend(after.inject);
                    match after.action {
                        AfterToolCallAction::Proceed(Some(rewritten)) => result = rewritten,
                        AfterToolCallAction::Proceed(None) => {}
                        AfterToolCallAction::Stop => {
                            self.stop_requested = true;
                            break;
                        }
                        AfterToolCallAction::Abort(reason) => {
                            abort = Some(reason);
                            break;
                        }
                    }
                }
                self.record(StateEvent::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    result: result.clone(),
                });
                self.persist(true).await?;
                self.sink.emit(AgentEvent::ToolResult {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    result: result.clone(),
                });
                results.insert(call.id.clone(), result);
                if abort.is_some() {
                    break;
                }
            }
            if abort.is_some() {
                break;
            }
        }
        if let Some(reason) = abort {
            let e = AgentError::of(codes::HOOK_ABORTED, reason);
            return self.finish(RunStatus::Aborted, None, Some(e)).await.map(Flow::Done);
        }

        for call in &calls {
            let result = results.remove(&call.id).unwrap_or_else(interrupted_result);
            if result.stop {
                self.stop_requested = true;
            }
            self.record(StateEvent::MessageAppended { message: tool_message(call, &result) });
        }
        self.record(StateEvent::BatchCompleted);
        if self.state.pending_approval.is_some() {
            self.record(StateEvent::ApprovalCleared);
        }
        for message in injected {
            self.record(StateEvent::MessageAppended { message });
        }
        let looped = self.observe_loop(&calls);
        self.persist(false).await?;
        if let Some(e) = looped {
            return self.finish(RunStatus::LoopDetected, None, Some(e)).await.map(Flow::Done);
        }
        Ok(Flow::Continue)
    }

    /// Feeds the batch's calls to the loop detector; records its window.
    fn observe_loop(&mut self, calls: &[ToolCall]) -> Option<AgentError> {
        let mut detector = crate::loop_detect::LoopDetector::with_window(
            crate::loop_detect::LoopDetectorConfig { window: self.agent.config.loop_window },
            self.state.loop_window.clone(),
        );
        let mut verdict = None;
        for call in calls {
            if let Err(e) = detector.record(call) {
                verdict = Some(e);
            }
        }
        self.record(StateEvent::LoopWindow { window: detector.window() });
        verdict
    }

    async fn finish(
        &mut self,
        status: RunStatus,
        text: Option<String>,
        error: Option<AgentError>,
    ) -> Result<RunOutcome, AgentError> {
        let mut final_text = text;
        if status == RunStatus::MaxRounds {
            let fallback = self.agent.config.max_rounds_fallback.clone();
            self.record(StateEvent::MessageAppended {
                message: ChatMessage::assistant_text(fallback.clone()),
            });
            final_text = Some(fallback);
        }
        self.record(StateEvent::StatusChanged { status });
        self.persist(true).await?;
        let (s, r, round) = self.ctx();
        let ctx = HookContext { session_id: &s, run_id: &r, round };
        for h in &self.agent.hooks {
            h.on_run_end(&ctx, status, final_text.as_deref()).await;
        }
        self.sink.emit(AgentEvent::RunFinished {
            status,
            final_text: final_text.clone(),
            usage: self.state.usage,
        });
        Ok(RunOutcome::Finished { status, final_text, error, usage: self.state.usage })
    }
}

/// Runs one call with its timeout; returns the call with its outcome.
async fn run_one(
    tools: ToolSnapshot,
    call: ToolCall,
    ctx: ToolContext,
    timeout: std::time::Duration,
) -> (ToolCall, Result<ToolResult, AgentError>) {
    let signal = ctx.signal.clone();
    let outcome = match tokio::time::timeout(timeout, tools.execute(&call, ctx)).await {
        Ok(r) => r,
        Err(_) => {
            signal.cancel("tool timed out");
            Err(AgentError::of(
                codes::TOOL_TIMEOUT,
                format!("{} did not finish within {} ms", call.name, timeout.as_millis()),
            ))
        }
    };
    (call, outcome)
}

fn interrupted_result() -> ToolResult {
    ToolResult::from_error(&AgentError::of(
        codes::TOOL_INTERRUPTED,
        "the call was interrupted before it finished; it may or may not have taken effect",
    ))
}

fn tool_message(call: &ToolCall, result: &ToolResult) -> ChatMessage {
    ChatMessage::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content: result.to_model_text(),
        is_error: result.is_error,
    }
}

fn last_assistant(messages: &[ChatMessage]) -> (Option<String>, Option<String>) {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::Assistant { content, reasoning_content, .. } => {
                Some((content.clone(), reasoning_content.clone()))
            }
            _ => None,
        })
        .unwrap_or((None, None))
}

fn last_assistant_text(messages: &[ChatMessage]) -> Option<String> {
    last_assistant(messages).0
}
