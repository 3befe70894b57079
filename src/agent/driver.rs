//! The tokio driver: performs the I/O the run state machine asks for (model calls, tool calls,
//! state commits, events) and records what happened as journal events.

use super::config::AgentConfig;
use super::delegate::{
    worker_session_id, DelegationSetup, WorkerEvents, WorkerOrigin, WorkerSinks, WrappingSink, DELEGATE_TASK,
};
use super::events::{AgentEvent, EventSink};
use super::machine::{phase, unanswered_calls, Phase};
use crate::approval::{
    plan_batch, AnsweredCall, ApprovalDecision, ApprovalPolicy, BatchCall, BatchCallInput, BatchCallPlan,
    BatchPlan, BatchSettlement, BatchStep, CallDisposition, PendingApprovalBatch, UserDecision,
};
use crate::error::{codes, AgentError};
use crate::hook::{persist_is_forced, AfterControl, AgentHook, HookContext, HookPipeline, PersistDecision};
use crate::loop_detect::{
    call_signature, diagnose_loop, DiagnosisSchedule, LoopDetector, LoopDetectorConfig, LoopDiagnoser,
};
use crate::message::{call_ids, make_call_ids_unique, unique_call_id, ChatMessage, ToolCall, Usage};
use crate::provider::{ChatModel, ChatRequest, ModelEvent, ModelResponse, ToolChoice};
use crate::state::{
    approx_tokens, mark_failed_results, repair_pairing, tool_result_message, trim_history_keeping,
    AgentState, Delegation, RepairPolicy, RunStatus, StateEvent, StateStore, ToolRunRecord,
};
use crate::tool::{
    CancellationSignal, RiskLevel, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry, ToolResult,
    ToolServiceRegistry, ToolSnapshot,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
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
        /// Usage of the session so far ([`AgentState::usage`]: its workers' included).
        usage: Usage,
        /// The finish reason of the model's last answer in this run, as the provider sent it
        /// (`stop`, `tool_calls`, `length`: cut off at the token limit, `content_filter`...);
        /// `None` when no answer came in this run or the provider sent none (an empty answer
        /// without one has `stop`), and when the run's last model request got no answer: a
        /// `failed` run whose request failed, a run cancelled during it (an earlier round's
        /// reason is not told). A `max_rounds` run tells its last answer's (`tool_calls`: the
        /// model still asked for tools; the fixed fallback is no model answer). A run that
        /// completed without `final_text` tells here why: `length` or `content_filter` (the answer was
        /// cut off or filtered), or `tool_calls` (a tool's or hook's stop ended it after a batch;
        /// `None` when that stop came in a resumed run that asked no model).
        finish_reason: Option<String>,
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
    // A std RwLock: read to take a run's snapshot of the pipeline, written by `add_hook`; never
    // held across an await.
    hooks: RwLock<HookPipeline>,
    services: Arc<ToolServiceRegistry>,
    config: AgentConfig,
    depth: u32,
    diagnoser: Option<(Arc<dyn LoopDiagnoser>, DiagnosisSchedule)>,
    // A std Mutex guarding the map of per-session locks; never held across an await. Shared with
    // the worker agents this agent builds (see `AgentBuilder::session_locks`).
    session_locks: SessionLocks,
    // Where the workers of running `delegate_task` calls send their events.
    pub(super) worker_sinks: WorkerSinks,
    // Set by `enable_delegation`: the factory its workers are prepared with (see
    // `Agent::runner_for`). A std RwLock, never held across an await.
    pub(super) delegation: RwLock<Option<DelegationSetup>>,
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
    diagnoser: Option<(Arc<dyn LoopDiagnoser>, DiagnosisSchedule)>,
    // A worker agent's: the locks of the agent that built it, so a worker session's delegating
    // call and the app's own resume of that session (through the top-level agent) wait in turn
    // instead of one failing with `session_busy` on the other's lease.
    session_locks: Option<SessionLocks>,
}

/// The per-session locks of an agent and of the worker agents it builds.
type SessionLocks = Arc<Mutex<Sessions>>;

/// Per session: its lock, and how many calls reserved their turn on it ([`Agent::reserve_turn`])
/// and have not finished. Kept under one std Mutex, never held across an await.
#[derive(Default)]
struct Sessions {
    locks: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    // An entry exists exactly while its count is not zero.
    reserved: HashMap<String, usize>,
    // When a call of this agent (or of a worker it built) last took the session (a number drawn
    // from `taken`, never given twice): a listing that sees it change around a load knows a
    // call held the session meanwhile.
    holds: HashMap<String, u64>,
    // How many holds were ever taken (the last number drawn for `holds`).
    taken: u64,
    // How many `holds` entries were pruned, ever: a session without one reads as this count, so
    // one pruned between two looks reads as changed, never as the same.
    forgotten: u64,
    // The size of `locks` and `holds` together past which idle entries are pruned.
    prune_at: usize,
    // Decisions the app made on a worker session that are on their way up to the parents'
    // mirrors ([`Agent::decide_above`]), by approval id (the same at every level): entered
    // before the worker session is let go, removed once the way up is over. A call on a parent
    // that meets the item still pending above a worker that has moved on finds it here.
    rising: HashMap<String, UserDecision>,
}

/// The fewest entries [`Sessions`] prunes at: below it, nothing is pruned.
const PRUNE_SESSIONS_AT: usize = 256;

impl Sessions {
    /// Drops the entries of sessions no call of the agent uses (a lock only the map holds, no
    /// reservation), once the maps have grown past `prune_at`, which then becomes twice what is
    /// left (at least [`PRUNE_SESSIONS_AT`]): an agent that runs one session after another for
    /// days keeps what it uses, not every id it ever saw, at a cost spread over the insertions.
    fn prune_idle(&mut self) {
        if self.locks.len() + self.holds.len() < self.prune_at.max(PRUNE_SESSIONS_AT) {
            return;
        }
        let reserved = &self.reserved;
        self.locks.retain(|id, lock| Arc::strong_count(lock) > 1 || reserved.contains_key(id));
        let (locks, before) = (&self.locks, self.holds.len());
        self.holds.retain(|id, _| locks.contains_key(id) || reserved.contains_key(id));
        self.forgotten += (before - self.holds.len()) as u64;
        self.prune_at = (2 * (self.locks.len() + self.holds.len())).max(PRUNE_SESSIONS_AT);
    }

    /// How many sessions the maps keep an entry for (for the tests of the pruning).
    fn tracked(&self) -> usize {
        self.locks.len().max(self.holds.len())
    }
}

/// A decision on its way up ([`Sessions::rising`]): removed when dropped.
struct Rising {
    sessions: SessionLocks,
    approval_ids: Vec<String>,
}

impl Drop for Rising {
    fn drop(&mut self) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        for id in &self.approval_ids {
            sessions.rising.remove(id);
        }
    }
}

/// A call's place on a session, reserved where the app asks for it ([`Agent::reserve_turn`]):
/// while it lives, a metadata change asked for is refused with `session_busy`
/// ([`Agent::metadata_turn`], [`Agent::set_metadata`]). It also holds the call's place in the
/// line for the session's lock, taken when it was reserved: a call run
/// [`within`](TurnReservation::within) it takes the session in that place, so calls reserved one
/// after the other (a run and a second run, or `approve` and then `resume`, neither awaited)
/// hold the session in the order they were reserved, whichever of their tasks starts first.
/// Dropped when the call is over (or given up), giving its place up.
pub struct TurnReservation {
    sessions: SessionLocks,
    session_id: String,
    place: Option<QueuedLock>,
}

/// A place in the line for a session's lock: the lock, and the lock itself when it was free
/// as the place was taken, or the pending acquisition that was polled once then, which put it
/// in the lock's queue.
struct QueuedLock {
    lock: Arc<tokio::sync::Mutex<()>>,
    acquire: Acquire,
}

type LockGuard = tokio::sync::OwnedMutexGuard<()>;

enum Acquire {
    Held(LockGuard),
    Queued(std::pin::Pin<Box<dyn Future<Output = LockGuard> + Send>>),
}

impl QueuedLock {
    /// Joins the line for `lock` now: holds it if it is free, else waits in the lock's queue.
    fn join(lock: Arc<tokio::sync::Mutex<()>>) -> Self {
        let mut pending: std::pin::Pin<Box<dyn Future<Output = LockGuard> + Send>> =
            Box::pin(Arc::clone(&lock).lock_owned());
        // Polled once, the acquisition enters the queue; its waker is replaced by the call's task
        // when that task polls it.
        let acquire =
            match pending.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
                std::task::Poll::Ready(guard) => Acquire::Held(guard),
                std::task::Poll::Pending => Acquire::Queued(pending),
            };
        QueuedLock { lock, acquire }
    }

    /// The lock, once this place's turn comes.
    async fn acquired(self) -> LockGuard {
        match self.acquire {
            Acquire::Held(guard) => guard,
            Acquire::Queued(pending) => pending.await,
        }
    }
}

tokio::task_local! {
    /// The place a [`TurnReservation::within`] lends to the first [`Agent::hold`] of its session.
    static RESERVED_PLACE: std::cell::RefCell<Option<(String, QueuedLock)>>;
}

impl TurnReservation {
    /// Runs `call` in the reserved place, then gives the reservation up: the first time `call`
    /// takes the reservation's session (a `run`, `resume`, `dismiss`, `approve` or `deny` of the
    /// agent that reserved it, or of a worker agent it built), it gets the session's lock in the
    /// place taken by [`Agent::reserve_turn`] instead of joining the line now. What `call` does
    /// on other sessions, or on the same session a second time, takes its place as usual.
    ///
    /// The call for which the place was reserved must run within it: the reservation holds (or
    /// waits for) the session's lock, so that call made outside it, while it lives, waits behind
    /// it for good.
    pub async fn within<F: Future>(mut self, call: F) -> F::Output {
        let place = self.place.take().map(|place| (self.session_id.clone(), place));
        let output = RESERVED_PLACE.scope(std::cell::RefCell::new(place), call).await;
        drop(self);
        output
    }

    /// The reservation once more, without its place: the session counts as reserved (a metadata
    /// change or a deletion asked for is refused with `session_busy`) until both are dropped. A
    /// binding keeps it until the app is handed the call's outcome, so that a call the app makes
    /// before that is refused whether or not the call's task is over by then (a run of a few
    /// milliseconds ends before the app's next line runs, or after: the order of the app's calls
    /// decides, not the timing). Run within it, a call takes the session as usual.
    pub fn kept(&self) -> TurnReservation {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        *sessions.reserved.entry(self.session_id.clone()).or_default() += 1;
        TurnReservation {
            sessions: Arc::clone(&self.sessions),
            session_id: self.session_id.clone(),
            place: None,
        }
    }
}

/// The place a [`TurnReservation::within`] around this task lent for `session_id`'s `lock`, if
/// any (once: it is taken).
fn reserved_place(session_id: &str, lock: &Arc<tokio::sync::Mutex<()>>) -> Option<QueuedLock> {
    RESERVED_PLACE
        .try_with(|slot| {
            let mut slot = slot.borrow_mut();
            match slot.as_ref() {
                Some((id, place)) if id == session_id && Arc::ptr_eq(&place.lock, lock) => {
                    slot.take().map(|(_, place)| place)
                }
                _ => None,
            }
        })
        .ok()
        .flatten()
}

impl std::fmt::Debug for TurnReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnReservation")
            .field("session_id", &self.session_id)
            .field("place_lent", &self.place.is_none())
            .finish()
    }
}

impl Drop for TurnReservation {
    fn drop(&mut self) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = sessions.reserved.get_mut(&self.session_id) {
            *count -= 1;
            if *count == 0 {
                sessions.reserved.remove(&self.session_id);
            }
        }
    }
}

/// What [`Agent::session_in_use`] saw of a session: whether a call of this agent holds (or
/// reserved) it now, and how many times its calls took it so far. Two looks around a read tell
/// whether a call held the session at any moment in between: in use at either, or taken between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SessionUse {
    pub(super) now: bool,
    // The number of its last hold, or (0, how many entries were pruned) without one.
    pub(super) holds: (u64, u64),
}

impl SessionUse {
    /// Whether a call held the session at some moment from `self` to `later`.
    pub(super) fn held_until(self, later: SessionUse) -> bool {
        self.now || later.now || self.holds != later.holds
    }
}

/// A session held by one call ([`Agent::hold`]). The fields drop in order: the lease, then the lock.
struct SessionHold {
    _lease: crate::state::SessionLease,
    _guard: tokio::sync::OwnedMutexGuard<()>,
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
            diagnoser: None,
            session_locks: None,
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

    /// Asks this diagnoser whether the session is looping, on the schedule's rounds (counted as
    /// the model's answers in the session: 30, 40, ... by default); a loop needs a confidence above
    /// the schedule's threshold, and a failed diagnosis counts as no loop.
    pub fn loop_diagnoser(mut self, diagnoser: Arc<dyn LoopDiagnoser>, schedule: DiagnosisSchedule) -> Self {
        self.diagnoser = Some((diagnoser, schedule));
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

    /// The agent, without checking its configuration: a bad one makes every run and resume fail
    /// with `config_invalid` before anything happens. [`try_build`](Self::try_build) checks it now.
    pub fn build(self) -> Agent {
        Agent {
            model: self.model,
            tools: RwLock::new(self.tools),
            store: self.store,
            policy: self.policy.unwrap_or_else(|| Arc::new(crate::approval::DefaultApprovalPolicy)),
            hooks: RwLock::new(HookPipeline::with_hooks(self.hooks)),
            services: self.services,
            config: self.config,
            depth: self.depth,
            diagnoser: self.diagnoser,
            session_locks: self.session_locks.unwrap_or_default(),
            worker_sinks: WorkerSinks::default(),
            delegation: RwLock::new(None),
        }
    }

    /// The agent, once its configuration is checked ([`AgentConfig::validate`]) and its tools
    /// hold no `delegate_task` of the app's.
    ///
    /// # Errors
    /// `config_invalid` naming the first bad field; `tool_name_reserved` for a `delegate_task`
    /// in [`tools`](Self::tools) (see [`Agent::register_tool`]).
    pub fn try_build(self) -> Result<Agent, AgentError> {
        self.config.validate()?;
        check_no_own_delegate_task(&self.tools.snapshot(), false)?;
        Ok(self.build())
    }
}

/// `delegate_task` is the delegation's tool: an app's tool of that name would have its calls
/// taken for delegations (a worker session recorded for each, never run). `delegates`: the agent
/// enabled delegation, so the name is taken already. Also the native `ToolRegistry`'s refusal
/// (`src/napi/registry.rs`): its tools are an app's, as [`Agent::register_tool`]'s are.
pub(crate) fn reserved_tool_name(delegates: bool) -> AgentError {
    let how = if delegates {
        "this agent delegates (enable_delegation, the native config's enableDelegation), so it has \
         that tool already"
    } else {
        "enable it with enable_delegation (the native config's enableDelegation)"
    };
    AgentError::of(
        codes::TOOL_NAME_RESERVED,
        format!(
            "the tool name {DELEGATE_TASK} is reserved for delegation to sub-agents: {how}; name the \
             app's tool otherwise"
        ),
    )
}

/// Refuses a `delegate_task` in `tools` that is not the delegation's (`delegates`: the agent
/// enabled delegation, which registered it): one the app put in the registry it built the agent
/// with ([`Agent::register_tool`] refuses it).
fn check_no_own_delegate_task(tools: &ToolSnapshot, delegates: bool) -> Result<(), AgentError> {
    if !delegates && tools.definition(DELEGATE_TASK).is_some() {
        return Err(reserved_tool_name(false));
    }
    Ok(())
}

/// Refuses a new user message (`what`: a run's input, a worker's task) that is empty or only
/// whitespace, before anything is written: strict providers refuse a message without text
/// (DashScope: "Content length must be greater than 0"), and the history would send it with every
/// later request of the session.
fn check_input(input: &str, what: &str) -> Result<(), AgentError> {
    if !input.trim().is_empty() {
        return Ok(());
    }
    let is = if input.is_empty() { "empty" } else { "only whitespace" };
    Err(AgentError::of(
        codes::ARGUMENT_INVALID,
        format!(
            "{what} is {is}: a user message needs text (providers refuse one without); nothing was \
             sent or written"
        ),
    ))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Agent {
    /// Registers a tool (see [`ToolRegistry::register`]); later model rounds see it.
    ///
    /// # Errors
    /// `tool_name_empty`, `tool_name_invalid`, `tool_name_duplicate` or a `schema_*` error;
    /// `tool_name_reserved` for `delegate_task`, the delegation's own tool
    /// ([`enable_delegation`](Self::enable_delegation)), whether delegation is enabled or not.
    pub fn register_tool(
        &self,
        definition: ToolDefinition,
        executor: Arc<dyn ToolExecutor>,
    ) -> Result<(), AgentError> {
        if definition.name == DELEGATE_TASK {
            return Err(reserved_tool_name(self.delegation_factory().is_some()));
        }
        self.register_any_tool(definition, executor)
    }

    /// Registers a tool, `delegate_task` included (`enable_delegation` registers it so).
    pub(super) fn register_any_tool(
        &self,
        definition: ToolDefinition,
        executor: Arc<dyn ToolExecutor>,
    ) -> Result<(), AgentError> {
        self.tools.write().unwrap_or_else(|p| p.into_inner()).register(definition, executor)
    }

    /// Removes a tool; returns whether it was there.
    ///
    /// # Errors
    /// `tool_name_reserved` for `delegate_task` when this agent delegates: the delegation's own
    /// tool, which nothing could register again (an agent without delegation has no
    /// `delegate_task`: `Ok(false)`).
    pub fn unregister_tool(&self, name: &str) -> Result<bool, AgentError> {
        if name == DELEGATE_TASK && self.delegation_factory().is_some() {
            return Err(AgentError::of(
                codes::TOOL_NAME_RESERVED,
                format!(
                    "{DELEGATE_TASK} is the delegation's own tool (this agent delegates: \
                     enable_delegation, the native config's enableDelegation): it cannot be \
                     unregistered; build the agent without delegation to go without it"
                ),
            ));
        }
        Ok(self.tools.write().unwrap_or_else(|p| p.into_inner()).unregister(name))
    }

    /// Adds a hook after the others. Runs that already started keep the hooks they started with;
    /// later runs (and resumes) use this one too.
    pub fn add_hook(&self, hook: Arc<dyn AgentHook>) {
        self.hooks.write().unwrap_or_else(|p| p.into_inner()).push(hook);
    }

    /// The hooks as they are now (a snapshot: cheap, the hooks are shared).
    pub fn hooks(&self) -> HookPipeline {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The tools as they are now.
    pub fn tools(&self) -> ToolSnapshot {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).snapshot()
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Checks the configuration before a run or resume does anything ([`AgentConfig::validate`]),
    /// and a `tool_choice` naming a function against the tools registered now (it is sent only
    /// when some are).
    fn check_config(&self) -> Result<(), AgentError> {
        self.config.validate()?;
        let tools = self.tools();
        check_no_own_delegate_task(&tools, self.delegation_factory().is_some())?;
        self.check_tool_choice(&tools)
    }

    /// A `tool_choice` naming a function against `tools` (it is sent only when there are some).
    /// Only requests to the model carry it: [`dismiss`](Self::dismiss), which asks no model, skips
    /// this check; each model round checks it again against the tools it sends (one may have been
    /// unregistered since the run started).
    fn check_tool_choice(&self, tools: &ToolSnapshot) -> Result<(), AgentError> {
        if let Some(ToolChoice::Function(name)) = &self.config.tool_choice {
            if tools.definition(name).is_none() && !tools.definitions().is_empty() {
                return Err(AgentError::of(
                    codes::CONFIG_INVALID,
                    format!("tool_choice names the tool {name:?}, which is not registered"),
                ));
            }
        }
        Ok(())
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
            hooks: self.hooks().hooks().to_vec(),
            services: Arc::clone(&self.services),
            config: self.config.clone(),
            depth: self.depth,
            diagnoser: self.diagnoser.clone(),
            session_locks: Some(Arc::clone(&self.session_locks)),
        }
    }

    /// Holds a session for one call: this agent's lock on it (its calls on one session wait in
    /// turn; the worker agents it builds share the locks), then the store's lease (another agent
    /// or process gets `session_busy`). Dropped, it releases the lease first, so a call waiting
    /// on the lock never finds the lease still taken.
    async fn hold(&self, session_id: &str) -> Result<SessionHold, AgentError> {
        let lock = self.session_lock(session_id);
        let guard = match reserved_place(session_id, &lock) {
            Some(place) => place.acquired().await,
            None => lock.lock_owned().await,
        };
        {
            let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
            sessions.taken += 1;
            let taken = sessions.taken;
            sessions.holds.insert(session_id.to_string(), taken);
        }
        let lease = self.store.lease(session_id).await?;
        Ok(SessionHold { _lease: lease, _guard: guard })
    }

    pub(super) fn session_lock(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        if !sessions.locks.contains_key(session_id) {
            sessions.prune_idle();
        }
        Arc::clone(sessions.locks.entry(session_id.to_string()).or_default())
    }

    /// How many sessions this agent keeps a lock or a hold count for (the tests of the pruning).
    #[doc(hidden)]
    pub fn tracked_sessions(&self) -> usize {
        self.session_locks.lock().unwrap_or_else(|p| p.into_inner()).tracked()
    }

    /// Reserves a call's place on a session where the app asks for it: a binding that runs
    /// `run`, `resume`, `dismiss`, `approve` or `deny` on its runtime reserves on the caller's
    /// thread first and runs the call [`within`](TurnReservation::within) the reservation. The
    /// reservation joins the line for the session's lock at once (holding the lock if it is
    /// free), and the call takes the session in that place: calls reserved one after the other
    /// hold the session in that order, whichever task starts first (`approve` then `resume`,
    /// neither awaited, approve first). Meanwhile a metadata change asked for after it is
    /// refused with `session_busy` ([`Agent::metadata_turn`], [`Agent::set_metadata`]), as it is
    /// while the call holds the session, instead of slipping in first; so is a deletion. A
    /// metadata change asked for before it (its turn already taken) still applies first, and the
    /// call sees it. Shared with the worker agents this agent builds, as the session locks are.
    ///
    /// # Errors
    /// `session_id_invalid`.
    pub fn reserve_turn(&self, session_id: &str) -> Result<TurnReservation, AgentError> {
        crate::state::validate_session_id(session_id)?;
        let place = QueuedLock::join(self.session_lock(session_id));
        let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        *sessions.reserved.entry(session_id.to_string()).or_default() += 1;
        Ok(TurnReservation {
            sessions: Arc::clone(&self.session_locks),
            session_id: session_id.to_string(),
            place: Some(place),
        })
    }

    /// Takes a deletion's turn on a session where the app asks for it: a binding that runs
    /// [`Agent::delete_session`] on its runtime takes the turn on the caller's thread first and
    /// runs the deletion [`within`](TurnReservation::within) it, as it reserves a run's place
    /// ([`Agent::reserve_turn`]). The turn holds the session's lock at once (or waits behind
    /// the metadata changes that hold it, taken before it: [`Agent::metadata_turn`]), so a call
    /// reserved after it (a `run` of a new conversation under the same id, not awaited) takes
    /// the session once the deletion is over and starts a new session; a metadata change asked
    /// for after it is refused with `session_busy`, as while a deletion holds the session. A
    /// deletion asked for while a call of this agent (or of a worker agent it built) holds the
    /// session, but for a metadata change, or reserved its turn on it and has not finished (a
    /// run asked for just before, not awaited; a deletion too), is refused now, as
    /// [`Agent::delete_session`] refuses it while that call holds the session: whether it
    /// applies depends on the order of the calls, not on when their tasks start.
    ///
    /// # Errors
    /// `session_id_invalid`; `session_busy` in those cases.
    pub fn deletion_turn(&self, session_id: &str) -> Result<TurnReservation, AgentError> {
        crate::state::validate_session_id(session_id)?;
        let lock = self.session_lock(session_id);
        let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        // A call reserved before comes first, though it may not hold the lock yet.
        if sessions.reserved.contains_key(session_id) {
            return Err(deletion_busy(session_id));
        }
        // Free: held from now. Held by metadata changes asked for before (not awaited): the
        // deletion waits behind them, as a run would. Held by any other call: refused.
        let place =
            super::metadata::with_changes_seen(&lock, |changing| match Arc::clone(&lock).try_lock_owned() {
                Ok(guard) => Some(QueuedLock { lock: Arc::clone(&lock), acquire: Acquire::Held(guard) }),
                Err(_) if changing => Some(QueuedLock::join(Arc::clone(&lock))),
                Err(_) => None,
            })
            .ok_or_else(|| deletion_busy(session_id))?;
        *sessions.reserved.entry(session_id.to_string()).or_default() += 1;
        Ok(TurnReservation {
            sessions: Arc::clone(&self.session_locks),
            session_id: session_id.to_string(),
            place: Some(place),
        })
    }

    /// Whether a call of this agent (or of a worker agent it built) holds the session now (a run,
    /// resume, dismissal, decision or deletion), or reserved its turn on it and has not finished.
    /// Creates no lock for a session that has none, and never takes one: a call holding or
    /// waiting for a session's lock holds a clone of it (see [`session_lock`](Self::session_lock)),
    /// so a lock shared beyond the map is in use. (Taking it to look would make a deletion asked
    /// for at that instant fail with `session_busy`.)
    pub(super) fn session_in_use(&self, session_id: &str) -> SessionUse {
        let sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        SessionUse {
            now: sessions.reserved.contains_key(session_id)
                || sessions.locks.get(session_id).is_some_and(|lock| Arc::strong_count(lock) > 1),
            holds: match sessions.holds.get(session_id) {
                Some(&taken) => (taken, 0),
                None => (0, sessions.forgotten),
            },
        }
    }

    /// Enters `decision` on each of `approval_ids` as on its way up ([`Sessions::rising`]) until
    /// the returned guard drops.
    fn rising(&self, approval_ids: Vec<String>, decision: &UserDecision) -> Rising {
        let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        for id in &approval_ids {
            sessions.rising.insert(id.clone(), decision.clone());
        }
        Rising { sessions: Arc::clone(&self.session_locks), approval_ids }
    }

    /// The decision on its way up on this item, if any ([`Sessions::rising`]).
    fn rising_decision(&self, approval_id: &str) -> Option<UserDecision> {
        let sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        sessions.rising.get(approval_id).cloned()
    }

    /// Whether a call reserved its turn on the session and has not finished ([`Agent::reserve_turn`]).
    pub(super) fn turn_reserved(&self, session_id: &str) -> bool {
        let sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        sessions.reserved.contains_key(session_id)
    }

    /// The persisted state of a session, as [`StateStore::load`] gives it: repaired, so a call that
    /// started and never finished (the process died) shows the result `tool_interrupted` it will
    /// get. But while a run holds the session, its calls that started are running, not
    /// interrupted: the state is shown as saved, without that repair. A run of this agent, or of
    /// another agent or process (a run that stands part way whose [lease](StateStore::lease_held)
    /// is held; a store that cannot tell counts as not held).
    ///
    /// # Errors
    /// The store's errors.
    pub async fn state(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        if self.session_in_use(session_id).now {
            return self.store.load_unrepaired(session_id).await;
        }
        let state = self.store.load(session_id).await?;
        if state.as_ref().is_some_and(|s| s.status.is_part_way())
            && self.store.lease_held(session_id).await?.unwrap_or(false)
        {
            // Running elsewhere (or here, since the load): shown as saved.
            return self.store.load_unrepaired(session_id).await;
        }
        Ok(state)
    }

    /// The tokens a session has used so far (`None`: no such session): its
    /// [`AgentState::usage`] and, while it is frozen on a batch that mirrors a worker's, what the
    /// workers down that chain used until they froze, and the workers frozen beside it (parallel
    /// delegations of the same batch), each counted once. Those are not in the session's own usage
    /// yet: a worker's usage is added there when its delegating call finishes, or with the end of
    /// a batch a dismissal settles (see the `delegate` module). A suspended run's usage is this.
    ///
    /// # Errors
    /// The store's errors.
    pub async fn usage_so_far(&self, session_id: &str) -> Result<Option<Usage>, AgentError> {
        let Some(state) = self.state(session_id).await? else { return Ok(None) };
        let mut usage = state.usage;
        let mirror = state.pending_approval.as_ref().filter(|b| b.worker_session.is_some());
        if let Some(batch) = mirror.filter(|_| state.status == RunStatus::AwaitingApproval) {
            usage.add(&self.mirror_worker(batch).await?.1);
            // The workers frozen beside the mirrored one (parallel delegations), each with what
            // its own workers used: none of it is counted above them yet either.
            for worker in sibling_workers(&state, batch) {
                if let Some(used) = Box::pin(self.usage_so_far(&worker)).await? {
                    usage.add(&used);
                }
            }
        }
        Ok(Some(usage))
    }

    /// Deletes a session's persisted state, with the sessions of the workers its delegations ran
    /// (theirs too, at any depth); returns whether the session existed. A session this agent is
    /// running, resuming or deciding is not deleted (cancel the run first), nor one another agent
    /// or process is writing, nor one whose worker is being written (e.g. resumed directly):
    /// nothing is written then. A session that does not exist is not touched (nothing is created
    /// for it either, not even a lease's lock file). Nor one a call reserved its turn on
    /// ([`Agent::reserve_turn`]) that has not finished, though it may not hold the session yet.
    /// Run [`within`](TurnReservation::within) a turn taken with [`Agent::deletion_turn`], the
    /// deletion takes the session in that turn's place (held since it was taken).
    ///
    /// A worker session ([`AgentState::delegation`]) belongs to its parent: it is refused while
    /// the parent session exists and names it (its list of workers, or its frozen batch; a
    /// parent no load reads counts as naming it): delete the parent, which deletes it. Deleted
    /// apart, a worker whose parent awaits its batch would be run again from scratch by the
    /// parent's resume, and the parent's list of workers would name a session that is gone. A
    /// worker whose parent is gone, or whose parent's id now names a session that never
    /// delegated to it (a new session after the parent was deleted unread), is deleted as any
    /// session.
    ///
    /// The workers go first: a deletion cut short (a crash, a store error) leaves the session and
    /// its list of workers, so deleting it again finishes the job; no worker is left behind
    /// without a session that names it. Before them, a session whose run may go on (`running`
    /// after a crash, or awaiting approval) is durably made `cancelled`, its frozen batch
    /// cleared: left by a deletion cut short, it is not resumed (`invalid_state`) into running
    /// its delegations again from scratch in new workers; a new message answers their calls
    /// `interrupted`. So is each of its workers that delegated in turn (a worker can be resumed
    /// directly).
    ///
    /// A session no load of this version can read is deleted all the same, as a worker session
    /// of it is: deleting is the app's only way to be rid of it. That is a damaged session
    /// (`state_corrupt`; with a [`FileStore`](crate::state::FileStore), also a file or link
    /// standing where its directory should be), one a newer version wrote
    /// (`state_version_unsupported`), one whose migration fails (`state_migration_failed`) and
    /// one whose files cannot be read at all (`state_io`: an unreadable file, a bad flash block);
    /// its lease is taken as for any session, so one another process holds is refused with
    /// `session_busy`. Its own workers, which only its state names, are left as orphans (each
    /// deleted as any session).
    ///
    /// # Errors
    /// `session_busy` in those cases, `invalid_state` (a worker session its parent owns, naming
    /// the parent; nothing is deleted), `session_id_invalid`, the store's errors.
    pub async fn delete_session(&self, session_id: &str) -> Result<bool, AgentError> {
        crate::state::validate_session_id(session_id)?;
        let lock = self.session_lock(session_id);
        let _guard = match reserved_place(session_id, &lock) {
            // Taken where the app asked for the deletion (`Agent::deletion_turn`).
            Some(place) => place.acquired().await,
            // A call reserved before it comes first, though it may not hold the lock (yet, or
            // any more: kept until the app is handed its outcome, see `TurnReservation::kept`).
            None if self.turn_reserved(session_id) => return Err(deletion_busy(session_id)),
            None => Arc::clone(&lock).try_lock_owned().map_err(|_| deletion_busy(session_id))?,
        };
        match self.store.exists(session_id).await {
            // Nothing to delete, and nothing is created for it (a lease's lock file).
            Ok(false) => return Ok(false),
            // `StateStore::exists`' default loads the session: one no load reads is there.
            Ok(true) => {}
            Err(e) if unreadable(&e) => {}
            Err(e) => return Err(e),
        }
        let _lease = self.store.lease(session_id).await?;
        let state = readable_for_deletion(session_id, self.store.load(session_id).await)?;
        if let Some(parent) = self.owning_parent(state.as_ref()).await? {
            return Err(AgentError::of(
                codes::INVALID_STATE,
                format!(
                    "session {session_id} is the worker of a delegation by session {parent}, which \
                     still names it: delete session {parent}, which deletes its workers (a worker \
                     deleted apart would be run again from scratch when its parent resumes; a \
                     parent deleted unreadable leaves them, each then deleted as any session)"
                ),
            ));
        }
        // A worker runs only inside its parent's run, which the lock and the lease above exclude.
        // Every worker below the session, each after the one that ran it (breadth first).
        let mut found: Vec<String> = state.map(|s| s.workers).unwrap_or_default();
        // The sessions that delegated: the session itself and every worker that has workers.
        let mut delegating: Vec<String> = Vec::new();
        if !found.is_empty() {
            delegating.push(session_id.to_string());
        }
        // Per worker in `found`: whether its run may still go on (it could be written elsewhere).
        let mut live: Vec<bool> = Vec::new();
        let mut next = 0;
        while let Some(worker) = found.get(next).cloned() {
            next += 1;
            let state = readable_for_deletion(&worker, self.store.load(&worker).await)?;
            live.push(state.as_ref().is_none_or(|s| !s.status.is_terminal()));
            if let Some(state) = state {
                if !state.workers.is_empty() {
                    delegating.push(worker.clone());
                }
                for w in state.workers {
                    if w != session_id && !found.contains(&w) {
                        found.push(w);
                    }
                }
            }
        }
        // A session whose run may go on (running after a crash, or frozen) is first made one no
        // resume continues: cancelled, its batch cleared. Cut short after its workers went, it
        // would otherwise run its delegations again from scratch in new workers (the calls they
        // had made run a second time); cancelled, a new message answers them `interrupted`.
        // The workers' leases are taken before that: a worker written elsewhere (the app resumed
        // it directly) refuses the deletion (`session_busy`) before anything is written. Those
        // of workers whose run may go on are held until each is deleted; a worker whose run
        // ended is resumed by nobody, so its lease is only checked here and taken again to
        // delete it (a session of many delegations holds few lock files open at once).
        let mut leases = Vec::with_capacity(found.len());
        for (worker, live) in found.iter().zip(&live) {
            let lease = self.store.lease(worker).await.map_err(|mut e| {
                // The app asked about `session_id`: say that its worker is the one in use.
                if e.code == codes::SESSION_BUSY {
                    e.message = format!("cannot delete session {session_id}: its worker {}", e.message);
                }
                e
            })?;
            leases.push(live.then_some(lease));
        }
        // A worker that delegated in turn is ended too: left running or frozen by a deletion cut
        // short, a resume of it (directly) would run its own delegation again from scratch.
        for id in &delegating {
            self.end_part_way(id).await?;
        }
        // Deepest first, so a cut-short deletion never leaves a worker unnamed. Each lease is
        // released once its worker is gone (its lock file goes with it).
        for worker in found.iter().rev() {
            let _lease = match leases.pop().flatten() {
                Some(held) => held,
                None => self.store.lease(worker).await?,
            };
            self.store.delete(worker).await?;
        }
        self.store.delete(session_id).await
    }

    /// Durably ends a session whose run may go on (`running`, or awaiting approval) and must not:
    /// `cancelled`, its frozen batch cleared. That is a session about to be deleted (see
    /// [`delete_session`](Self::delete_session)), and a worker frozen in a batch whose parent's
    /// run ended cancelled or aborted (see [`end_frozen_worker`](Self::end_frozen_worker)).
    /// The caller holds its lease. Written on the state as stored (no repair made durable).
    async fn end_part_way(&self, session_id: &str) -> Result<(), AgentError> {
        let Some(mut state) = self.store.load_unrepaired(session_id).await? else { return Ok(()) };
        if !state.status.is_part_way() {
            return Ok(());
        }
        let mut events = vec![StateEvent::StatusChanged {
            status: RunStatus::Cancelled,
            finish_reason: None,
            error: None,
        }];
        if state.pending_approval.is_some() {
            events.push(StateEvent::ApprovalCleared);
        }
        for event in &events {
            state.apply(event);
        }
        self.store.commit(&state, &events).await
    }

    /// Durably ends a worker session left frozen by its parent's run, which ended cancelled or
    /// aborted in the middle of the batch that delegated to it (its own delegating call, or one
    /// beside it, frozen; the others still running then ended with the cancel): `cancelled`, its
    /// frozen batch cleared, as a deletion does, and so on down its own frozen workers. Its
    /// answer has no reader any more: the parent's next run answers the delegating call
    /// `tool_interrupted` (counting what the worker used), and a cancelled parent is not resumed;
    /// left awaiting, its own approve and resume would run its calls for nobody. A worker no
    /// longer frozen (the app settled it directly meanwhile) is left as it stands.
    ///
    /// Its run, whose events ended with `ApprovalRequired`, is told ended as every run is: on
    /// `sink` (the parent's, wrapped as the delegating call's), a segment of its own,
    /// `RunStarted` (resumed) then `RunFinished` (`cancelled`), once the end is saved; the
    /// workers below it end in between, each wrapped once more (as a worker's worker's events
    /// come). Left without it, the app would see that run await approval for good.
    ///
    /// # Errors
    /// `session_busy` (held by another process), the store's errors.
    async fn end_frozen_worker(&self, worker: &str, sink: &dyn EventSink) -> Result<(), AgentError> {
        let held = self.hold(worker).await?;
        let Some(state) = self.store.load_unrepaired(worker).await? else { return Ok(()) };
        let frozen = state.pending_approval.as_ref().filter(|_| state.status == RunStatus::AwaitingApproval);
        let Some(batch) = frozen else { return Ok(()) };
        let batch_call_id = batch_id_of(&state);
        // Each worker below, with the call of this worker's batch that delegated to it.
        let below: Vec<(String, String)> = batch
            .worker_session
            .iter()
            .cloned()
            .chain(sibling_workers(&state, batch))
            .map(|below| {
                let call = batch.calls.iter().find(|c| {
                    c.call.name == DELEGATE_TASK
                        && worker_session_id(worker, &batch_call_id, &c.call.id) == below
                });
                let call_id = call.map(|c| c.call.id.clone()).unwrap_or_default();
                (below, call_id)
            })
            .collect();
        self.end_part_way(worker).await?;
        drop(held);
        let run_id = state.run_id.clone().unwrap_or_default();
        sink.emit(AgentEvent::RunStarted { session_id: worker.to_string(), run_id, resumed: true });
        let mut ended = Ok(());
        for (below, call_id) in below {
            let wrapped = WrappingSink { origin: WorkerOrigin { call_id, session_id: below.clone() }, sink };
            // Each is ended (best effort); the first error is returned.
            let result = Box::pin(self.end_frozen_worker(&below, &wrapped)).await;
            ended = ended.and(result);
        }
        sink.emit(AgentEvent::RunFinished {
            status: RunStatus::Cancelled,
            final_text: None,
            usage: state.usage,
            finish_reason: None,
            error: None,
        });
        ended
    }

    /// Runs the agent on a new user message until it answers, suspends for approval, or ends.
    ///
    /// A worker session (a `delegate_task` call's, [`AgentState::delegation`]) takes no new
    /// message: its parent reads only the answer to the task it delegated; send the message on
    /// the parent session.
    ///
    /// # Errors
    /// `config_invalid` for a bad configuration (before anything is asked, run or written),
    /// `argument_invalid` for an input that is empty or only whitespace (nothing written: a
    /// provider refuses a user message without text), `invalid_state` for a worker session
    /// (nothing written), `approval_pending` when the session awaits decisions, the store's
    /// errors. Model and tool
    /// failures do not come as errors: they end the run with a status (or go back to the model).
    pub async fn run(
        &self,
        session_id: &str,
        input: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<RunOutcome, AgentError> {
        self.check_config()?;
        crate::state::validate_session_id(session_id)?;
        check_input(input, "the input")?;
        let _held = self.hold(session_id).await?;
        let state = match self.store.load_unrepaired(session_id).await? {
            Some(state) => {
                if let Some(delegation) = &state.delegation {
                    // Refused before anything is written (a repair too).
                    return Err(AgentError::of(
                        codes::INVALID_STATE,
                        format!(
                            "session {session_id} is the worker of a delegation by session {}: it takes \
                             no new message (its parent reads only the answer to the task it delegated); \
                             send the message on the parent session. Approve, deny, resume or dismiss \
                             work on the worker session",
                            delegation.parent_session
                        ),
                    ));
                }
                self.repair_loaded(state, false).await?
            }
            None => AgentState::new(session_id),
        };
        Ok(self.start_run(state, Vec::new(), None, input, sink, cancel).await?.0)
    }

    /// [`run`](Self::run) on the session's state as loaded (and repaired), under its lock and
    /// lease; `prelude` is recorded first (a new worker's inherited metadata), `delegation` with
    /// the run's start (a worker's). Returns the state the run left too.
    async fn start_run(
        &self,
        state: AgentState,
        prelude: Vec<StateEvent>,
        delegation: Option<Delegation>,
        input: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<(RunOutcome, AgentState), AgentError> {
        let session_id = state.session_id.clone();
        if state.status == RunStatus::AwaitingApproval {
            let decided = state.pending_approval.as_ref().is_some_and(|b| b.is_fully_decided());
            return Err(AgentError::of(
                codes::APPROVAL_PENDING,
                if decided {
                    "the session's frozen batch is decided but not settled: resume it before a new message"
                } else {
                    "the session awaits approval decisions: approve or deny them, then resume"
                },
            ));
        }
        let mut run = Run::new(self, state, sink, cancel.clone());
        for event in prelude {
            run.record(event);
        }
        if run.state.pending_approval.is_some() {
            run.record(StateEvent::ApprovalCleared);
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        run.record(StateEvent::RunStarted { run_id: run_id.clone(), delegation });
        if run.state.messages.is_empty() {
            // An empty or blank system prompt is none: strict providers refuse a message without
            // text, and it would go with every request of the session.
            if let Some(system) = self.config.system_prompt.as_ref().filter(|s| !s.trim().is_empty()) {
                run.record(StateEvent::MessageAppended { message: ChatMessage::system(system.clone()) });
            }
        }
        run.record(StateEvent::MessageAppended { message: ChatMessage::user(input) });
        sink.emit(AgentEvent::RunStarted { session_id, run_id, resumed: false });
        run.hooks_run_start().await;
        run.persist(true).await?;
        let outcome = run.drive().await?;
        Ok((outcome, run.state))
    }

    /// Continues a suspended run once every pending item is decided, or a run that was interrupted
    /// by a crash (finished calls are not run again; started but unfinished calls are answered as
    /// interrupted unless their tool is idempotent). A batch that mirrors a worker's runs the
    /// delegating call again, which continues the worker where it stands, or reads its answer
    /// when the worker's run is over (also when the app resumed the worker directly; see
    /// [`approve`](Self::approve)).
    ///
    /// A worker session below this agent (the app resumes a worker directly) runs as its
    /// delegation runs it: on the worker's tools (this agent's without `delegate_task`, the
    /// [`WorkerFactory`](super::WorkerFactory) applied) at the worker's depth, never with this
    /// agent's tools.
    ///
    /// A batch that mirrors a worker's first takes the decisions made on the worker sessions
    /// below that have not reached it: one the app asked for just before (a binding reserves
    /// each call's turn: `approve(worker)` and then `resume(parent)`, neither awaited, is waited
    /// for), or one that could not reach it then (another process held this session).
    ///
    /// # Errors
    /// `config_invalid` (as [`run`](Self::run)), `session_not_found` (no such session, or its
    /// batch mirrors a worker session that is gone: its deletion was cut short, delete the session
    /// again; nothing written), `approval_pending`
    /// (undecided items), `invalid_state` (nothing to resume; or a worker session while this
    /// agent does not delegate, so it cannot run it with the worker's tools),
    /// `delegation_depth_exceeded` (a worker session deeper than this agent's limit), the store's
    /// errors.
    pub async fn resume(
        &self,
        session_id: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<RunOutcome, AgentError> {
        self.check_config()?;
        self.check_exists(session_id).await?;
        let _held = self.hold(session_id).await?;
        self.resume_held(session_id, sink, cancel, None).await
    }

    /// Ends a suspended run without asking the model again, for a user who moved on instead of
    /// deciding: every item still pending is denied with `reason` (durably, as [`deny`](Self::deny)
    /// does), the batch is settled (with a denied item none of its calls runs; each call gets its
    /// result, the denials with `reason`) and the run completes. The next [`run`](Self::run)
    /// starts from a valid history in which the model reads the denials before the new message.
    /// A batch whose items were all approved already runs them first (and when one of its
    /// delegations meets a new freeze, that batch is returned suspended, without this stop). For
    /// a batch that mirrors a worker's, the denial reaches the worker's batch, the worker is not
    /// continued (its model is not asked either): its run completes with the denial (settled as
    /// a dismissal of it settles it, and so on down its own workers; none of its calls runs, even
    /// those approved, as the user denied an item of this batch, its own or one of a worker frozen
    /// beside it, answered `tool_not_run` with `reason`), so it no longer looks
    /// resumable, and its session is deleted with this one (a worker held by another process
    /// then, or that a store error stopped, is logged and left as decided); the delegating call
    /// and the calls not run yet are answered `tool_not_run` with `reason` (calls that finished
    /// keep their results). When that worker has moved on
    /// instead (the app decided its batch on the worker session and resumed it directly), the
    /// denial does not reach it: the delegating call runs again and is answered with what the
    /// worker answered (a worker still frozen on a later batch freezes this session on it), and
    /// the run still completes without this session's model. The session is held from the
    /// first denial to the end: a `resume`, decision or run of the app meanwhile waits for it.
    ///
    /// A worker session may be dismissed directly: it settles as [`resume`](Self::resume) runs it
    /// (the worker's tools and depth) and completes; the denials then reach the batch of its
    /// parent that mirrors it (as a [`deny`](Self::deny) on a worker does), whose resume or
    /// dismissal settles it as for a worker resumed directly (the delegating call reads the
    /// worker's answer).
    ///
    /// # Errors
    /// `no_pending_approval` when the session is not suspended, otherwise as
    /// [`deny`](Self::deny) and [`resume`](Self::resume) (a worker session this agent cannot run
    /// is refused before any denial is written); but a `tool_choice` naming a tool that is not
    /// registered is no `config_invalid` here (only requests to the model carry it).
    pub async fn dismiss(
        &self,
        session_id: &str,
        reason: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<RunOutcome, AgentError> {
        // The whole check but `tool_choice`'s: a dismissal asks no model (the run completes with the
        // batch settled; a worker its approved delegations run checks its own config).
        self.config.validate()?;
        self.check_reason(reason)?;
        // One hold of the session from the first denial to the settled batch: a resume from the
        // app in between would settle the denials without this dismissal and ask the model.
        self.check_exists(session_id).await?;
        let held = self.hold(session_id).await?;
        let state = self.load_existing(session_id).await?;
        // A worker session this agent cannot run as its delegation does is refused before any
        // denial is written.
        self.runner_for(&state)?;
        let batch = match (state.status, state.pending_approval) {
            (RunStatus::AwaitingApproval, Some(batch)) => batch,
            _ => return Err(AgentError::of(codes::NO_PENDING_APPROVAL, "no approval is pending")),
        };
        let parent = state.delegation.map(|d| d.parent_session);
        let deny = UserDecision::Deny(reason.to_string());
        // The items this dismissal denied, for the parent's mirror of a worker dismissed directly.
        let mut denied = Vec::new();
        for item in batch.pending_items() {
            match self.decide_held(session_id, &item.approval_id, &deny, false).await {
                // Decided meanwhile (another call of the app): that decision stands. A worker's
                // batch decided on the worker session directly: the mirror takes its decision.
                Err(e) if e.code == codes::APPROVAL_ALREADY_DECIDED => {
                    if let Some(decided) = self.decided_below(&batch, &item.approval_id).await? {
                        self.decide_held(session_id, &item.approval_id, &decided, false).await?;
                    }
                }
                other => {
                    other?;
                    denied.push(item.approval_id.clone());
                }
            }
        }
        let dismissal = Dismissal { reason, denied_above: false };
        let outcome = self.resume_held(session_id, sink, cancel, Some(dismissal)).await;
        // On their way up from before the session is let go (see `decide_here`).
        let _rising = parent.is_some().then(|| self.rising(denied.clone(), &deny));
        drop(held);
        for approval_id in &denied {
            self.decide_above(session_id, parent.clone(), approval_id, &deny).await;
        }
        outcome
    }

    /// [`resume`](Self::resume); with a dismissal's reason, the run completes once the batch is
    /// settled. The caller holds the session's lock and lease.
    async fn resume_held(
        &self,
        session_id: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
        dismissal: Option<Dismissal<'_>>,
    ) -> Result<RunOutcome, AgentError> {
        let state =
            self.store.load_unrepaired(session_id).await?.ok_or_else(|| {
                AgentError::of(codes::SESSION_NOT_FOUND, format!("no session {session_id}"))
            })?;
        // A batch mirroring a worker that is gone (a deletion cut short) is not settled: the
        // delegation would run again from scratch (see `decide_held`). Nothing is written.
        self.check_mirrored_worker(&state).await?;
        // A worker session runs as its delegation runs it, on the worker's agent (the lock and
        // lease held here are the session's: that agent takes neither). One this agent cannot
        // run is refused before anything is written.
        let runner = self.runner_for(&state)?;
        let agent = match &runner {
            Some(worker) => {
                worker.check_config()?;
                worker.as_ref()
            }
            None => self,
        };
        let state = self.take_decisions_below(state).await?;
        let state = agent.repair_loaded(state, true).await?;
        // The app's own resume: a batch it freezes on is announced to the hooks, also a worker's.
        Ok(agent.resume_loaded(state, sink, cancel, dismissal, true).await?.0)
    }

    /// [`resume_held`](Self::resume_held) on the session's state as loaded (and repaired for a
    /// resume), under its lock and lease. Returns the state the run left too. `by_app`: the app
    /// resumed this session itself (not a delegating call): a batch the run freezes on is
    /// announced to the hooks (`on_approval_required`) at any depth.
    async fn resume_loaded(
        &self,
        state: AgentState,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
        dismissal: Option<Dismissal<'_>>,
        by_app: bool,
    ) -> Result<(RunOutcome, AgentState), AgentError> {
        let session_id = state.session_id.clone();
        match state.status {
            RunStatus::AwaitingApproval => {
                if let Some(batch) = &state.pending_approval {
                    if !batch.is_fully_decided() {
                        let message = if batch.worker_session.is_some() && self.mirror_worker(batch).await?.0
                        {
                            "some approval items are still pending here, though the worker they come from \
                             has moved on: approve, deny or dismiss them on this session to settle it"
                        } else {
                            "some approval items are still pending"
                        };
                        return Err(AgentError::of(codes::APPROVAL_PENDING, message));
                    }
                }
            }
            RunStatus::Running => {}
            other => {
                return Err(AgentError::of(
                    codes::INVALID_STATE,
                    format!("nothing to resume: the session is {other}"),
                ))
            }
        }
        let run_id = state.run_id.clone().unwrap_or_default();
        let mut run = Run::new(self, state, sink, cancel.clone());
        run.announces_approvals |= by_app;
        if let (Some(dismissal), RunStatus::AwaitingApproval) = (dismissal, run.state.status) {
            // The dismissal is saved with the batch (the one place the run reads it from), so a
            // kill mid-batch does not lose it: the resumed run settles it as this dismissal.
            let unsaved = |b: &PendingApprovalBatch| {
                b.dismissed.is_none() || (dismissal.denied_above && !b.denied_above)
            };
            if let Some(mut batch) = run.state.pending_approval.clone().filter(unsaved) {
                batch.dismissed.get_or_insert_with(|| dismissal.reason.to_string());
                batch.denied_above |= dismissal.denied_above;
                let announced = run.state.approval_announced;
                run.record(StateEvent::ApprovalRequested { batch, announced });
            }
        }
        if run.state.status == RunStatus::AwaitingApproval {
            // Running from here on: after a crash mid-batch, repair answers what did not finish
            // instead of keeping the batch as if still awaiting (no call runs twice).
            run.record(StateEvent::StatusChanged {
                status: RunStatus::Running,
                finish_reason: None,
                error: None,
            });
        } else if phase(&run.state) == Phase::NeedsModel
            && (run.state.pending_approval.is_some() || !run.state.tool_runs.is_empty())
        {
            // A batch whose last results repair supplied (the process died before the batch
            // completed): it completes now, with the stop its results or its hooks asked for, and
            // then the messages its hooks injected, as the batch would have.
            let (hooks_stop, recorded) = run.recorded_after_hooks();
            let mut injected =
                run.state.pending_approval.as_ref().map(|b| b.injected.clone()).unwrap_or_default();
            injected.extend(recorded);
            let stop_requested = hooks_stop
                || run
                    .state
                    .pending_approval
                    .as_ref()
                    .is_some_and(|b| b.stop_requested || b.dismissed.is_some())
                || run
                    .state
                    .tool_runs
                    .values()
                    .any(|r| matches!(r, ToolRunRecord::Finished { result, .. } if result.stop));
            run.record(StateEvent::BatchCompleted { stop_requested });
            if run.state.pending_approval.is_some() {
                run.record(StateEvent::ApprovalCleared);
            }
            for message in injected {
                run.record(StateEvent::MessageAppended { message });
            }
        }
        sink.emit(AgentEvent::RunStarted { session_id, run_id, resumed: true });
        run.hooks_run_start().await;
        let outcome = run.drive().await?;
        Ok((outcome, run.state))
    }

    /// Makes the pairing invariant hold (durably) on a session's state loaded unrepaired:
    /// finished calls get their recorded results, anything else unanswered is `interrupted`,
    /// except a batch awaiting approval and, with `rerun_idempotent`, the started calls of
    /// idempotent tools (of this agent's tools: a worker session is repaired by its worker's
    /// agent).
    async fn repair_loaded(
        &self,
        mut state: AgentState,
        rerun_idempotent: bool,
    ) -> Result<AgentState, AgentError> {
        if rerun_idempotent && !state.status.is_part_way() {
            // Nothing to resume: `resume` refuses it, and a refused call writes nothing. (The
            // resume policy would also leave an idempotent call unanswered behind the others'
            // answers, so the next run's repair answered it out of call order.)
            return Ok(state);
        }
        let policy = if rerun_idempotent {
            let tools = self.tools();
            // An approved batch (or a batch never planned) continues after a crash: its calls that
            // never started are left for the run, which plans or settles them.
            RepairPolicy::with_idempotent(move |name| tools.definition(name).is_some_and(|d| d.idempotent))
                .resume_unstarted(true)
        } else {
            RepairPolicy::conservative()
        };
        let mut report = repair_pairing(&mut state, &policy);
        if rerun_idempotent && (!report.rerun.is_empty() || !report.resume.is_empty()) {
            hold_answers_for_the_batch(&mut state, &mut report);
        }
        // A delegating call answered `interrupted` here never finishes, so its worker's usage is
        // counted now, with the answer (a cancelled run, or a crash followed by a new run).
        let abandoned = self.abandoned_workers_usage(&state, &report.interrupted).await;
        if abandoned != Usage::default() {
            let event = StateEvent::UsageAdded { usage: abandoned };
            state.apply(&event);
            report.events.push(event);
        }
        // Saved before the run starts, without `before_persist_state` or `StatePersisted`: the
        // run's `RunStarted` stays its first event, and the pairing must hold on disk whatever a
        // hook would say (documented on `AgentHook::before_persist_state`).
        if report.needs_snapshot {
            self.store.save_snapshot(&state).await?;
        } else if !report.events.is_empty() {
            self.store.commit(&state, &report.events).await?;
        }
        Ok(state)
    }

    /// The usage of the workers of `state`'s delegating calls among `calls` (started, never
    /// finished), and of the workers their own unfinished delegating calls left, down the chain:
    /// none of it was counted above them (a worker's usage is added when its delegating call
    /// finishes). A worker session that is gone or unreadable counts nothing.
    async fn abandoned_workers_usage(&self, state: &AgentState, calls: &[String]) -> Usage {
        let mut usage = Usage::default();
        // (the session, its batch's id, its unfinished delegating calls), down the chain.
        let mut open = vec![(state.session_id.clone(), batch_id_of(state), delegations_of(state, calls))];
        // Bounded: a chain is at most the delegation depth long.
        let mut loads = 0usize;
        while let Some((session, batch_call_id, ids)) = open.pop() {
            for id in ids {
                let worker = worker_session_id(&session, &batch_call_id, &id);
                loads += 1;
                if loads > 64 {
                    return usage;
                }
                let Some(loaded) = self.read_worker(&worker).await else { continue };
                usage.add(&loaded.usage);
                let below = unanswered_started_delegations(&loaded);
                if !below.is_empty() {
                    let batch = batch_id_of(&loaded);
                    open.push((worker, batch, below));
                }
            }
        }
        usage
    }

    /// Runs or continues the worker session of a `delegate_task` call where it stands (see
    /// [`super::delegate`]), loading it once: a new session starts its run on `task` with the
    /// parent's `metadata` (saved with the run's first commit); an idle one starts its run; one
    /// awaiting undecided items is returned suspended as it is; a decided or interrupted one is
    /// resumed; one whose run ended is returned finished, as its state tells (the answer only if
    /// the history ends with one, the finish reason and the error it saved). Returns the state
    /// the worker was left in too.
    ///
    /// # Errors
    /// As [`run`](Self::run) and [`resume`](Self::resume).
    pub(crate) async fn run_worker(
        &self,
        session_id: &str,
        parent_session: &str,
        task: &str,
        metadata: &std::collections::BTreeMap<String, serde_json::Value>,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<(RunOutcome, AgentState), AgentError> {
        self.check_config()?;
        crate::state::validate_session_id(session_id)?;
        let _held = self.hold(session_id).await?;
        let delegation = Some(Delegation { parent_session: parent_session.to_string(), depth: self.depth });
        // A worker that starts a run takes the task as its user message.
        let task_checked = || check_input(task, "the task of delegate_task");
        let Some(mut state) = self.store.load_unrepaired(session_id).await? else {
            task_checked()?;
            let inherited = metadata
                .iter()
                .map(|(key, value)| StateEvent::MetadataSet { key: key.clone(), value: value.clone() })
                .collect();
            return self
                .start_run(AgentState::new(session_id), inherited, delegation, task, sink, cancel)
                .await;
        };
        match (state.status, &state.pending_approval) {
            (RunStatus::AwaitingApproval, Some(batch)) if !batch.is_fully_decided() => {
                let batch = batch.clone();
                Ok((RunOutcome::Suspended { batch }, state))
            }
            (RunStatus::AwaitingApproval | RunStatus::Running, _) => {
                self.check_mirrored_worker(&state).await?;
                let state = self.repair_loaded(state, true).await?;
                self.resume_loaded(state, sink, cancel, None, false).await
            }
            (RunStatus::Idle, _) => {
                task_checked()?;
                let state = self.repair_loaded(state, false).await?;
                self.start_run(state, Vec::new(), delegation, task, sink, cancel).await
            }
            (status, _) => {
                // Read as `load` gives it: repaired in memory, nothing written.
                repair_pairing(&mut state, &RepairPolicy::conservative());
                let outcome = RunOutcome::Finished {
                    status,
                    // The answer only if the history ends with one (an empty answer is not
                    // recorded: the last assistant message may be a tool call's preamble).
                    final_text: final_answer_text(&state.messages),
                    // The error that ended it, as the run reported it (`None` in states saved
                    // before it was kept: the status alone then answers).
                    error: state.run_error.clone(),
                    usage: state.usage,
                    // As the run reported it (`None` in states saved before it was kept: the
                    // results it ended on then stand).
                    finish_reason: state.finish_reason.clone(),
                };
                Ok((outcome, state))
            }
        }
    }

    /// The parent that owns a worker session (`state`'s [`AgentState::delegation`]): the parent
    /// session while it exists and still names the worker, in its list of workers (it deletes
    /// the worker with itself) or as the worker of its frozen batch (its resume continues it).
    /// A parent whose state no load reads (`state_corrupt`) counts as owning: it may name the
    /// worker (a copy read back would resume it); deleting it leaves the worker an orphan.
    /// `None` for other sessions, for a worker whose parent is gone, and for one whose parent's
    /// id now names another session (a new session under the id of a parent deleted unread): it
    /// never delegated to the worker, which is an orphan as any other.
    ///
    /// # Errors
    /// The store's errors reading the parent (but `state_corrupt`).
    pub(super) async fn owning_parent(
        &self,
        state: Option<&AgentState>,
    ) -> Result<Option<String>, AgentError> {
        let Some(state) = state else { return Ok(None) };
        let Some(delegation) = state.delegation.as_ref() else { return Ok(None) };
        let parent = &delegation.parent_session;
        let names_it = match self.store.load_unrepaired(parent).await {
            Ok(None) => false,
            Ok(Some(p)) => {
                p.workers.contains(&state.session_id)
                    || p.pending_approval
                        .is_some_and(|b| b.worker_session.as_ref() == Some(&state.session_id))
            }
            Err(e) if unreadable(&e) => true,
            Err(e) => return Err(e),
        };
        Ok(names_it.then(|| parent.clone()))
    }

    /// `session_not_found` when the session does not exist, asked before a call that acts only
    /// on an existing session takes its lease: such a call on a missing session leaves nothing on
    /// disk (a lease may create a lock file). The call checks again under its lease.
    async fn check_exists(&self, session_id: &str) -> Result<(), AgentError> {
        if self.store.exists(session_id).await? {
            Ok(())
        } else {
            Err(AgentError::of(codes::SESSION_NOT_FOUND, format!("no session {session_id}")))
        }
    }

    async fn load_existing(&self, session_id: &str) -> Result<AgentState, AgentError> {
        self.store
            .load(session_id)
            .await?
            .ok_or_else(|| AgentError::of(codes::SESSION_NOT_FOUND, format!("no session {session_id}")))
    }

    /// Approves one pending item; the decision is durable when this returns.
    ///
    /// On a batch that mirrors a worker's (`worker_session`), the worker's batch is decided
    /// first. When the worker has moved on (the app decided its batch on the worker session and
    /// resumed the worker directly, and that decision could not reach this mirror then: below),
    /// the decision is recorded on the mirror alone: the worker's own decision stood, and
    /// [`resume`](Self::resume) runs the delegating call again, which reads the worker's answer,
    /// or freezes this session on the worker's new batch.
    ///
    /// On a worker session itself the decision is recorded as on any session (nothing runs; its
    /// [`resume`](Self::resume) runs it with the worker's tools), then on the batch of its parent
    /// that mirrors it, and so on up, where the item still waits: the parent shows what was
    /// decided, and a different decision there is `approval_already_decided`. A parent that
    /// cannot take it at that moment (held by another process, a store error) is logged and
    /// left; the worker's decision is durable all the same.
    ///
    /// # Errors
    /// `session_not_found` (no such session, or the worker session a mirrored batch names is gone:
    /// its deletion was cut short, delete the session again), `no_pending_approval`,
    /// `approval_not_found`, `approval_already_decided` (also when a decision that reached the
    /// worker's session before a crash differs), the store's errors.
    pub async fn approve(
        &self,
        session_id: &str,
        approval_id: &str,
    ) -> Result<PendingApprovalBatch, AgentError> {
        self.decide_here(session_id, approval_id, &UserDecision::Approve).await
    }

    /// Denies one pending item; the decision is durable when this returns. A mirror whose worker
    /// has moved on records it alone, as [`approve`](Self::approve) does.
    ///
    /// # Errors
    /// `session_not_found` (no such session, or the worker session a mirrored batch names is gone:
    /// its deletion was cut short, delete the session again), `no_pending_approval`,
    /// `approval_not_found`, `approval_already_decided` (also when a decision that reached the
    /// worker's session before a crash differs), `argument_invalid` for a reason longer than
    /// `max_result_bytes` (nothing written), the store's errors.
    pub async fn deny(
        &self,
        session_id: &str,
        approval_id: &str,
        reason: &str,
    ) -> Result<PendingApprovalBatch, AgentError> {
        self.check_reason(reason)?;
        self.decide_here(session_id, approval_id, &UserDecision::Deny(reason.to_string())).await
    }

    /// Approves every item of the session's frozen batch still pending, with the outcome of
    /// approving each in turn with [`approve`](Self::approve), and returns the batch as it does.
    /// The items of this session's own calls are recorded in one durable commit (all of them or
    /// none, whatever a crash cuts short); items held in a worker's batch (a mirror's) are
    /// decided one by one, each first in its worker, as `approve` decides them. A batch with no
    /// item pending is returned as it stands, nothing written. On a worker session the decisions
    /// then reach the batch of its parent that mirrors it, as `approve`'s do.
    ///
    /// # Errors
    /// As [`approve`](Self::approve) (an item that cannot be decided stops the items after it
    /// that are held in a worker's batch, and the commit of the others).
    pub async fn approve_all(&self, session_id: &str) -> Result<PendingApprovalBatch, AgentError> {
        self.decide_all_here(session_id, &UserDecision::Approve).await
    }

    /// Denies every item of the session's frozen batch still pending with `reason`, as
    /// [`approve_all`](Self::approve_all) approves them (the outcome of denying each in turn with
    /// [`deny`](Self::deny)). Nothing runs: the next [`resume`](Self::resume) answers the batch
    /// and asks the model again ([`dismiss`](Self::dismiss) also ends the run).
    ///
    /// # Errors
    /// As [`deny`](Self::deny).
    pub async fn deny_all(&self, session_id: &str, reason: &str) -> Result<PendingApprovalBatch, AgentError> {
        self.check_reason(reason)?;
        self.decide_all_here(session_id, &UserDecision::Deny(reason.to_string())).await
    }

    /// A denial's reason goes to the model as the call's result (`denied by user: <reason>`)
    /// and with every later request of the session: like a tool's result, it may take at most
    /// `max_result_bytes`. A longer one is refused before anything is written.
    fn check_reason(&self, reason: &str) -> Result<(), AgentError> {
        let limit = self.config.max_result_bytes;
        if reason.len() <= limit {
            return Ok(());
        }
        Err(AgentError::of(
            codes::ARGUMENT_INVALID,
            format!(
                "the denial's reason is {} bytes; it goes to the model as the call's result, so it \
                 may take at most max_result_bytes ({limit}): give a shorter one",
                reason.len()
            ),
        ))
    }

    /// [`decide`](Self::decide) on the session the app named (never `None` there).
    async fn decide_here(
        &self,
        session_id: &str,
        approval_id: &str,
        decision: &UserDecision,
    ) -> Result<PendingApprovalBatch, AgentError> {
        self.check_exists(session_id).await?;
        let held = self.hold(session_id).await?;
        let decided = self.decide_held(session_id, approval_id, decision, false).await?;
        let Decided { batch, parent } =
            decided.ok_or_else(|| AgentError::of(codes::NO_PENDING_APPROVAL, "no approval is pending"))?;
        // On its way up from before the session is let go: a call on a parent that takes this
        // session next, or waits for it, finds the decision even if the worker moves on first.
        let _rising = parent.is_some().then(|| self.rising(vec![approval_id.to_string()], decision));
        drop(held);
        self.decide_above(session_id, parent, approval_id, decision).await;
        Ok(batch)
    }

    /// [`decide_here`](Self::decide_here) of every item still pending in the session's batch:
    /// those held in a worker's batch one by one (`decide_held` decides each in its worker
    /// first), the others in one commit.
    async fn decide_all_here(
        &self,
        session_id: &str,
        decision: &UserDecision,
    ) -> Result<PendingApprovalBatch, AgentError> {
        self.check_exists(session_id).await?;
        let held = self.hold(session_id).await?;
        let no_batch = || AgentError::of(codes::NO_PENDING_APPROVAL, "no approval is pending");
        let mut state = self.load_existing(session_id).await?;
        let batch = state.pending_approval.as_ref().ok_or_else(no_batch)?;
        let pending: Vec<String> = batch.pending_items().map(|i| i.approval_id.clone()).collect();
        let (below, here): (Vec<&String>, Vec<&String>) =
            pending.iter().partition(|id| batch.item_worker(id).is_some());
        if !below.is_empty() {
            for approval_id in below {
                self.decide_held(session_id, approval_id, decision, false).await?;
            }
            state = self.load_existing(session_id).await?;
        }
        let batch = state.pending_approval.as_mut().ok_or_else(no_batch)?;
        let now = now_ms();
        let mut events = Vec::with_capacity(here.len());
        for approval_id in here {
            let item = batch.decide(approval_id, decision.clone(), now)?;
            events.push(item.decided_event().expect("a decided item has a decision event"));
        }
        if !events.is_empty() {
            self.store.commit(&state, &events).await?;
        }
        let parent = state.delegation.map(|d| d.parent_session);
        let batch = state.pending_approval.ok_or_else(no_batch)?;
        // On their way up from before the session is let go, as in `decide_here`.
        let _rising = parent.is_some().then(|| self.rising(pending.clone(), decision));
        drop(held);
        if parent.is_some() {
            for approval_id in &pending {
                self.decide_above(session_id, parent.clone(), approval_id, decision).await;
            }
        }
        Ok(batch)
    }

    /// Records a decision made on a worker session on the batch of its parent that mirrors it,
    /// and so on up a nested delegation, so the parent's batch shows what the app decided (and a
    /// different decision on it later is `approval_already_decided`, as it is on the worker: the
    /// worker's decision stands, and may already have been acted on). Only where that item still
    /// waits there; a level that no longer waits on it (it took the decision from below and ran
    /// on) is passed, up to the levels above. Each parent is taken after the worker was let go (a parent's run takes its
    /// worker while it holds itself). Best effort: the worker's decision is durable already; a
    /// parent that cannot take it now (held by another process, a store error: logged) catches up
    /// as before, when a decision on it reaches the worker or finds it moved on (`decide`).
    async fn decide_above(
        &self,
        worker: &str,
        parent: Option<String>,
        approval_id: &str,
        decision: &UserDecision,
    ) {
        let (mut worker, mut parent) = (worker.to_string(), parent);
        while let Some(above) = parent.take() {
            let mirrors = |state: &AgentState| {
                state.pending_approval.as_ref().is_some_and(|b| {
                    b.item_worker(approval_id) == Some(worker.as_str())
                        && b.item(approval_id).is_some_and(|i| i.decision == ApprovalDecision::Pending)
                })
            };
            let decided = async {
                // A look first: a parent that does not wait on this item is not held at all.
                let Some(state) = self.store.load(&above).await? else { return Ok::<_, AgentError>(None) };
                let waits = mirrors(&state);
                let next = state.delegation.map(|d| d.parent_session);
                if !waits {
                    // Moved on (it took the decision from below and ran on), or never waited:
                    // a level above may still wait on the item (its mirror of this one).
                    return Ok(Some(next));
                }
                let _held = self.hold(&above).await?;
                match self.decide_held(&above, approval_id, decision, false).await {
                    Ok(decided) => Ok(decided.map(|d| d.parent)),
                    // Decided there meanwhile (it took the decision from below, or the app's
                    // decision on it reached this worker), or it moved on between the look and
                    // the hold (settled, dismissed): the levels above may still wait.
                    Err(e)
                        if matches!(
                            e.code.as_ref(),
                            codes::APPROVAL_ALREADY_DECIDED
                                | codes::APPROVAL_NOT_FOUND
                                | codes::NO_PENDING_APPROVAL
                        ) =>
                    {
                        Ok(Some(next))
                    }
                    Err(e) => Err(e),
                }
            };
            match decided.await {
                Ok(Some(next)) => parent = next,
                Ok(None) => return,
                Err(e) => {
                    log::warn!("arkagent: a worker's decision did not reach its parent's batch yet: {e}");
                    return;
                }
            }
            worker = above;
        }
    }

    /// Applies one decision, durably. A batch that mirrors a worker's (`worker_session`) has the
    /// worker's batch decided first, as that is what the worker's resumed run settles, and so on
    /// down a nested delegation. `mirrored` marks such an inner call: there the same decision
    /// already made is fine (a crash between the two commits, or the app decided the worker
    /// session itself).
    ///
    /// `None` (only with `mirrored`): the worker session has moved on, it no longer holds the
    /// item (the app decided its batch on the worker session and resumed the worker directly,
    /// which then completed or froze on a later batch). A worker session that is gone (a
    /// deletion of its parent cut short) is `session_not_found`, nothing written. Nothing is
    /// written there: the worker's own decision stood and was acted on. The mirror above then
    /// records the decision alone, which settles it: its resume runs the delegating call again,
    /// which reads the worker's answer (or mirrors its new batch).
    async fn decide(
        &self,
        session_id: &str,
        approval_id: &str,
        decision: &UserDecision,
        mirrored: bool,
    ) -> Result<Option<Decided>, AgentError> {
        let _held = self.hold(session_id).await?;
        self.decide_held(session_id, approval_id, decision, mirrored).await
    }

    /// [`decide`](Self::decide) by a caller that holds the session's lock and lease.
    async fn decide_held(
        &self,
        session_id: &str,
        approval_id: &str,
        decision: &UserDecision,
        mirrored: bool,
    ) -> Result<Option<Decided>, AgentError> {
        let mut state = if mirrored {
            match self.store.load(session_id).await? {
                Some(state) => state,
                // A worker session outlives its parent's batch (it is deleted with its parent):
                // gone, a deletion of the parent was cut short. Settled, the mirror would run the
                // delegation again from scratch in a new worker; the app deletes it again instead.
                None => return Err(worker_gone(session_id)),
            }
        } else {
            self.load_existing(session_id).await?
        };
        if mirrored && state.pending_approval.as_ref().is_none_or(|b| b.item(approval_id).is_none()) {
            return Ok(None);
        }
        let batch = state
            .pending_approval
            .as_mut()
            .ok_or_else(|| AgentError::of(codes::NO_PENDING_APPROVAL, "no approval is pending"))?;
        let decided = batch.item(approval_id).map(|i| i.decision);
        if mirrored && decided == Some(decision.outcome()) {
            return Ok(Some(Decided { batch: batch.clone(), parent: None }));
        }
        // The worker whose batch holds the item (a mirror's: the mirrored worker's, or one frozen
        // beside it).
        if let Some(worker) = batch.item_worker(approval_id).map(str::to_owned) {
            if mirrored || decided == Some(ApprovalDecision::Pending) {
                // `None`: the worker moved on; this mirror records the decision alone, unless
                // the app decided otherwise on the worker session and that decision is still
                // on its way up (the worker moved on with it).
                let below = Box::pin(self.decide(&worker, approval_id, decision, true)).await?;
                if below.is_none() {
                    if let Some(rising) = self.rising_decision(approval_id) {
                        if rising.outcome() != decision.outcome() {
                            return Err(AgentError::of(
                                codes::APPROVAL_ALREADY_DECIDED,
                                format!(
                                    "approval {approval_id} was decided on the worker session already ({:?})",
                                    rising.outcome()
                                ),
                            ));
                        }
                    }
                }
            }
        }
        let event = batch
            .decide(approval_id, decision.clone(), now_ms())?
            .decided_event()
            .expect("a decided item has a decision event");
        self.store.commit(&state, std::slice::from_ref(&event)).await?;
        let parent = state.delegation.map(|d| d.parent_session);
        Ok(state.pending_approval.map(|batch| Decided { batch, parent }))
    }

    /// `state` (held by the caller) once its frozen batch, when it mirrors a worker's, took the
    /// decisions made below that have not reached it: a decision the app asked for on a worker
    /// session just before this resume (neither awaited; this waits for the calls of this agent
    /// on the sessions below), or one that could not reach it then (the parent was held by
    /// another process). Each is recorded as a decision on this session would be.
    async fn take_decisions_below(&self, state: AgentState) -> Result<AgentState, AgentError> {
        let mirror = state.pending_approval.as_ref().filter(|b| b.worker_session.is_some());
        let Some(batch) = mirror.filter(|_| state.status == RunStatus::AwaitingApproval) else {
            return Ok(state);
        };
        let mut took = false;
        for item in batch.pending_items() {
            if let Some(decided) = self.decided_below(batch, &item.approval_id).await? {
                self.decide_held(&state.session_id, &item.approval_id, &decided, false).await?;
                took = true;
            }
        }
        if !took {
            return Ok(state);
        }
        self.store.load_unrepaired(&state.session_id).await?.ok_or_else(|| {
            AgentError::of(codes::SESSION_NOT_FOUND, format!("no session {}", state.session_id))
        })
    }

    /// The decision made on `approval_id` below `batch`, a mirror of a worker's: on the first
    /// session down its chain of workers that holds the item decided (a worker's worker's, at
    /// any depth), else the app's decision on a worker session still on its way up
    /// ([`Sessions::rising`]: the worker may have moved on with it). `None` when every session
    /// down the chain that holds it still waits, or the chain ends (a worker that moved on, or
    /// is gone), and no decision is on its way up. A call of this agent on a session of the
    /// chain (a decision reserved before the caller's call) is waited for before it is read;
    /// the caller holds the session above, so this takes the locks in the order a parent's run
    /// takes them.
    async fn decided_below(
        &self,
        batch: &PendingApprovalBatch,
        approval_id: &str,
    ) -> Result<Option<UserDecision>, AgentError> {
        let mut next = batch.item_worker(approval_id).map(str::to_owned);
        while let Some(worker) = next.take() {
            if self.session_in_use(&worker).now {
                drop(self.session_lock(&worker).lock_owned().await);
            }
            let Some(b) = self.store.load(&worker).await?.and_then(|s| s.pending_approval) else {
                break;
            };
            match b.item(approval_id) {
                None => break,
                Some(i) => match i.decision {
                    ApprovalDecision::Pending => next = b.item_worker(approval_id).map(str::to_owned),
                    ApprovalDecision::Approved => return Ok(Some(UserDecision::Approve)),
                    ApprovalDecision::Denied => {
                        return Ok(Some(UserDecision::Deny(i.deny_reason.clone().unwrap_or_default())))
                    }
                },
            }
        }
        Ok(self.rising_decision(approval_id))
    }

    /// A worker session's state as saved, for what its parent reads of it (its usage, its frozen
    /// batch): `None` when it is gone or unreadable (logged), which is never a reason to fail the
    /// parent's run.
    async fn read_worker(&self, worker: &str) -> Option<AgentState> {
        match self.store.load_unrepaired(worker).await {
            Ok(state) => state,
            Err(e) => {
                log::warn!("arkagent: the worker session of a delegation could not be read: {e}");
                None
            }
        }
    }

    /// The usage a worker session saved (`None` when it is gone or unreadable: usage is an
    /// account, never a reason to fail the parent's run).
    async fn worker_usage(&self, worker: &str) -> Option<Usage> {
        self.read_worker(worker).await.map(|s| s.usage)
    }

    /// `session_not_found` when `state` is frozen on (or settling) a batch that mirrors a worker
    /// session which is gone: a deletion cut short (workers go first). Settled, the batch would
    /// run the delegation again from scratch in a new worker (its model asked again, the calls it
    /// had made run again). Asked with `exists` (no load: the worker's resume loads it), at each
    /// level of a nested delegation as its resume reaches it: below the first, the refusal
    /// answers the delegating call above (a tool error) instead of refusing the app's resume.
    async fn check_mirrored_worker(&self, state: &AgentState) -> Result<(), AgentError> {
        if !matches!(state.status, RunStatus::AwaitingApproval | RunStatus::Running) {
            return Ok(());
        }
        let Some(worker) = state.pending_approval.as_ref().and_then(|b| b.worker_session.as_ref()) else {
            return Ok(());
        };
        if self.store.exists(worker).await? {
            Ok(())
        } else {
            Err(worker_gone(worker))
        }
    }

    /// Where the worker a mirror (a batch with a `worker_session`) was frozen on stands: whether
    /// it has moved on (some session down its chain of workers exists but no longer holds the
    /// mirror's items; see [`decide`](Self::decide); a session that is gone continues nothing),
    /// and the usage of the sessions down the chain that still hold them (none of their
    /// delegating calls finished, so none of it is counted above them yet).
    async fn mirror_worker(&self, batch: &PendingApprovalBatch) -> Result<(bool, Usage), AgentError> {
        let mut usage = Usage::default();
        let Some(first) = batch.items.first() else { return Ok((false, usage)) };
        let mut next = batch.worker_session.clone();
        while let Some(worker) = next.take() {
            let Some(state) = self.store.load(&worker).await? else { return Ok((false, usage)) };
            match state.pending_approval {
                Some(b) if b.item(&first.approval_id).is_some() => {
                    usage.add(&state.usage);
                    next = b.item_worker(&first.approval_id).map(str::to_owned);
                }
                _ => return Ok((true, usage)),
            }
        }
        Ok((false, usage))
    }
}

/// The id of the batch `state` runs now, its run's and round's (`ToolContext::batch_call_id`, and
/// part of a worker's session id: see `worker_session_id`).
fn batch_id_of(state: &AgentState) -> String {
    format!("{}:{}", state.run_id.as_deref().unwrap_or_default(), state.round)
}

/// The workers of `state`'s frozen `batch` besides the one it mirrors (`worker_session`): those
/// of its delegating calls still to run, which froze in the same chunk (parallel delegations; a
/// call not reached has no worker session yet). The parent's resume runs each call again, which
/// continues its worker (or mirrors its batch in turn).
fn sibling_workers(state: &AgentState, batch: &PendingApprovalBatch) -> Vec<String> {
    let batch_call_id = batch_id_of(state);
    batch
        .calls
        .iter()
        .filter(|c| c.call.name == DELEGATE_TASK && matches!(c.plan, BatchCallPlan::Run))
        .map(|c| worker_session_id(&state.session_id, &batch_call_id, &c.call.id))
        .filter(|worker| batch.worker_session.as_ref() != Some(worker))
        .collect()
}

/// A call a denied or dismissed batch answers `tool_not_run` that could not have run anyway (an
/// unknown tool, arguments that are no JSON object or fail the schema: the registry's gates,
/// which are pure) is answered with the gate's error instead, as it would have been had the batch
/// run: told only that another call was denied, the model would make it again as it was. The
/// call is checked as the batch would have run it (as its before-hooks left it); nothing runs.
/// The error is cut to `limit` bytes (`max_result_bytes`) as a gate's error of a call run is.
fn not_run_or_gate_error(
    step: BatchStep,
    batch: &PendingApprovalBatch,
    tools: &ToolSnapshot,
    limit: usize,
) -> BatchStep {
    let BatchStep::Answer(answered) = step else { return step };
    let code =
        answered.result.metadata.as_ref().and_then(|m| m.get("code")).and_then(serde_json::Value::as_str);
    if code != Some(codes::TOOL_NOT_RUN) {
        return BatchStep::Answer(answered);
    }
    let planned =
        batch.calls.iter().find(|c| c.call.id == answered.call.id).map_or(&answered.call, |c| &c.call);
    match tools.prepare(planned) {
        Err(e) => {
            let result = within_size(ToolResult::from_error(&e), &planned.name, limit);
            BatchStep::Answer(AnsweredCall { call: answered.call, result })
        }
        Ok(_) => BatchStep::Answer(answered),
    }
}

/// The answer of a call a dismissal (`reason`) did not run.
fn not_run_dismissed(call: &ToolCall, reason: &str) -> BatchStep {
    BatchStep::Answer(AnsweredCall {
        call: call.clone(),
        result: ToolResult::from_error(&AgentError::of(
            codes::TOOL_NOT_RUN,
            format!("not run: the user dismissed the batch ({reason})"),
        )),
    })
}

/// The answer of a call planned to run in a batch that was already running (a worker froze it)
/// whose tool now needs the user's confirmation (`reason`, the policy's): nobody was asked, so it
/// does not run.
fn not_run_unasked(call: &ToolCall, reason: &str) -> BatchStep {
    BatchStep::Answer(AnsweredCall {
        call: call.clone(),
        result: ToolResult::from_error(&AgentError::of(
            codes::TOOL_NOT_RUN,
            format!(
                "not run: {} needs the user's confirmation now ({reason}), which it did not need \
                 when its batch was planned; nobody was asked. Call it again to ask the user",
                call.name
            ),
        )),
    })
}

/// A decision recorded on a session ([`Agent::decide`]): its batch as it now stands, and the
/// session that delegated to it when it is a worker's (whose mirror takes the decision too:
/// [`Agent::decide_above`]).
struct Decided {
    batch: PendingApprovalBatch,
    parent: Option<String>,
}

/// A dismissal (`Agent::dismiss`) a resume settles the session's batch with.
#[derive(Clone, Copy)]
struct Dismissal<'a> {
    reason: &'a str,
    /// Of the parent's batch, which the user did not approve entirely: none of this session's
    /// batch runs (see [`PendingApprovalBatch::denied_above`]).
    denied_above: bool,
}

// One value per step of the driver, moved once: its size costs nothing, a box would cost an
// allocation at the end of every run.
#[allow(clippy::large_enum_variant)]
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
    // The agent's hooks when the run started.
    hooks: HookPipeline,
    turn_tools: Option<ToolSnapshot>,
    stop_requested: bool,
    // The finish reason of the answer to the run's last model request (`None` while it is
    // asked, and when it failed or was cancelled).
    finish_reason: Option<String>,
    // Usage to add with the end of the batch being settled (a dismissed worker's).
    batch_usage: Option<Usage>,
    // Whether a batch this run freezes on goes to the `on_approval_required` hooks: a run the app
    // started or resumed itself. A worker's run under a delegating call is not (its batch is
    // announced once, by the parent that mirrors it).
    announces_approvals: bool,
    // The approval ids of worker batches this run found frozen and announced already (by the
    // app's own resume of the worker session): a mirror of them is not announced again.
    announced_elsewhere: HashSet<String>,
    // The calls of the batch under way whose `ToolResult` this run emitted: a run that ends
    // before the batch's end gives the others theirs (see `finish`).
    reported: HashSet<String>,
}

impl<'a> Run<'a> {
    fn new(agent: &'a Agent, state: AgentState, sink: &'a dyn EventSink, cancel: CancellationSignal) -> Self {
        let hooks = agent.hooks();
        Run {
            agent,
            state,
            unsaved: Vec::new(),
            sink,
            cancel,
            hooks,
            turn_tools: None,
            stop_requested: false,
            finish_reason: None,
            batch_usage: None,
            announces_approvals: agent.depth() == 0,
            announced_elsewhere: HashSet::new(),
            reported: HashSet::new(),
        }
    }

    /// Emits a call's `ToolResult`, once per call of the batch under way.
    fn report_result(&mut self, call: &ToolCall, result: &ToolResult) {
        if self.reported.insert(call.id.clone()) {
            self.sink.emit(AgentEvent::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                result: result.clone(),
            });
        }
    }

    fn record(&mut self, event: StateEvent) {
        self.state.apply(&event);
        self.unsaved.push(event);
    }

    fn run_id(&self) -> String {
        self.state.run_id.clone().unwrap_or_default()
    }

    /// The model's last answer, whose calls a batch is made of (an empty answer if none).
    fn last_answer(&self) -> ChatMessage {
        let answer = self.state.messages.iter().rev().find(|m| matches!(m, ChatMessage::Assistant { .. }));
        answer.cloned().unwrap_or_else(|| ChatMessage::assistant_text(""))
    }

    /// What the after-hooks of the current batch's calls that finished in an earlier process (or
    /// an earlier run of the batch) asked, from the calls' records, in call order: a stop, and the
    /// messages to append after the batch's results. A mirror's calls answered when its worker
    /// froze are left out: the mirror carries what their hooks asked (its `stop_requested` and
    /// `injected`).
    fn recorded_after_hooks(&self) -> (bool, Vec<ChatMessage>) {
        let carried: HashSet<&str> = match &self.state.pending_approval {
            Some(batch) if batch.worker_session.is_some() => batch
                .calls
                .iter()
                .filter(|c| matches!(c.plan, BatchCallPlan::Answer { .. }))
                .map(|c| c.call.id.as_str())
                .collect(),
            _ => HashSet::new(),
        };
        let answer = self.last_answer();
        let mut seen = HashSet::new();
        let mut stop = false;
        let mut injected = Vec::new();
        for call in answer.tool_calls() {
            if carried.contains(call.id.as_str()) || !seen.insert(call.id.as_str()) {
                continue;
            }
            if let Some(ToolRunRecord::Finished { stop_requested, injected: messages, .. }) =
                self.state.tool_runs.get(&call.id)
            {
                stop |= *stop_requested;
                injected.extend(messages.iter().cloned());
            }
        }
        (stop, injected)
    }

    fn ids(&self) -> (String, String, u32) {
        (self.state.session_id.clone(), self.run_id(), self.state.round)
    }

    /// Logs a hook notification's failure (a panicking hook); the run goes on.
    fn note_hook_failure(result: Result<(), AgentError>) {
        if let Err(e) = result {
            log::warn!("{e}");
        }
    }

    /// Hears a hook notification out, unless the run is cancelled first (see [`unless_cancelled`]).
    async fn notify(&self, notification: impl Future<Output = Result<(), AgentError>>) {
        if let Some(result) = unless_cancelled(&self.cancel, notification).await {
            Self::note_hook_failure(result);
        }
    }

    async fn hooks_run_start(&self) {
        let (s, r, round) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        self.notify(self.hooks.on_run_start(&ctx)).await;
    }

    /// Durably commits the recorded events. `force` ignores a hook's request to skip (terminal
    /// states, frozen batches and tool starts are always persisted).
    async fn persist(&mut self, force: bool) -> Result<(), AgentError> {
        if self.unsaved.is_empty() {
            return Ok(());
        }
        let forced = force || persist_is_forced(self.state.status);
        let (s, r, round) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        // A cancelled run saves: the hook's answer is not waited for.
        let decision =
            unless_cancelled(&self.cancel, self.hooks.before_persist_state(&ctx, &self.state, forced));
        if decision.await == Some(PersistDecision::Skip) {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unsaved);
        self.agent.store.commit(&self.state, &events).await?;
        self.sink.emit(AgentEvent::StatePersisted { events: events.len() });
        Ok(())
    }

    async fn drive(&mut self) -> Result<RunOutcome, AgentError> {
        loop {
            // A dismissed batch with a denial (here or above) runs nothing: it is answered even
            // when cancelled, so the denials reach the history.
            let answers_only = self
                .state
                .pending_approval
                .as_ref()
                .is_some_and(|b| b.dismissed.is_some() && b.runs_nothing());
            if self.cancel.is_cancelled() && !answers_only {
                return self.finish(RunStatus::Cancelled, None, None).await;
            }
            let flow = match phase(&self.state) {
                Phase::Inactive => {
                    return Ok(RunOutcome::Finished {
                        status: self.state.status,
                        final_text: None,
                        error: None,
                        usage: self.state.usage,
                        finish_reason: None,
                    })
                }
                Phase::Answered { text } => return self.finish(RunStatus::Completed, text, None).await,
                Phase::AwaitingApproval => {
                    let batch = self.state.pending_approval.clone().expect("awaiting approval has a batch");
                    return Ok(RunOutcome::Suspended { batch });
                }
                Phase::NeedsModel => {
                    if self.stop_requested || self.state.stop_requested {
                        let text = final_answer_text(&self.state.messages);
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
        // The reason is the answer to this round's request: a request that fails or is cancelled
        // (or is never sent) has none, not the earlier round's.
        self.finish_reason = None;
        let tools = self.agent.tools();
        // A provider refuses a `tool_choice` naming a tool the request does not list: the run
        // ends as its start would have refused it, before this round is counted or sent.
        if let Err(e) = self.agent.check_tool_choice(&tools) {
            return self.finish(RunStatus::Failed, None, Some(e)).await.map(Flow::Done);
        }
        let round = self.state.round + 1;
        self.record(StateEvent::RoundStarted { round });
        let config = &self.agent.config;
        // The history moves into the request and back: no copy per round (a hook or model that
        // keeps the request makes the move back a copy instead).
        let messages = Arc::new(std::mem::take(&mut self.state.messages));
        let sent = match config.context_budget_tokens {
            Some(budget) => Arc::new(
                trim_history_keeping(&messages, budget, approx_tokens, self.state.turn_question).messages,
            ),
            None => Arc::clone(&messages),
        };
        // A failed result saved before results were marked is marked in what is sent.
        let sent = mark_failed_results(join_successive_questions(system_message_first_only(sent)));
        let request = ChatRequest {
            messages: sent,
            tools: Arc::clone(tools.definitions()),
            tool_choice: if tools.definitions().is_empty() { None } else { config.tool_choice.clone() },
            temperature: config.temperature,
            max_tokens: config.max_tokens,
            parallel_tool_calls: config.parallel_tool_calls,
            argument_limits: tools.limits(),
        };
        let (s, r, _) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        self.notify(self.hooks.before_model_call(&ctx, &request)).await;
        // Each result is paired with its call by id, in the whole history (the saved one, not only
        // what is sent): an id it holds already is taken, as some servers number the calls per
        // answer (`call_0` every round).
        let used = call_ids(&messages);
        let cancel = self.cancel.clone();
        let answer = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = self.call_model(&request, tools.limits(), &used) => Some(r),
        };
        // A model (or a ChatModel of the app's) that repeats an id, within one answer or of the
        // history, or leaves one empty, gets unique ids here, before anything records the answer.
        let answer = answer.map(|r| {
            r.map(|mut response| {
                let renamed = make_call_ids_unique(&mut response.tool_calls, |c| used.contains(c));
                if renamed > 0 {
                    log::warn!("arkagent: {renamed} tool call id(s) of the model's answer were missing or used already; made unique");
                }
                response
            })
        });
        drop(used);
        drop(request);
        self.state.messages = Arc::try_unwrap(messages).unwrap_or_else(|shared| (*shared).clone());
        let mut response = match answer {
            None => return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done),
            Some(Err(e)) => return self.finish(RunStatus::Failed, None, Some(e)).await.map(Flow::Done),
            Some(Ok(r)) => r,
        };
        let refused = refuse_arguments_over_limits(&tools, &mut response.tool_calls);
        self.notify(self.hooks.after_model_response(&ctx, &response)).await;
        self.finish_reason = response.finish_reason.clone();
        if response.is_empty() {
            // Neither text nor calls (reasoning cut off at the token limit, a `content_filter`
            // stop, an empty `stop`): not recorded, since an empty assistant message in the history
            // makes strict providers refuse every later request. Its usage counts; the run
            // completes without a final text and the finish reason tells why.
            log::warn!(
                "arkagent: the model's answer has neither text nor tool calls (finish reason {:?}); not recorded",
                response.finish_reason
            );
            if let Some(usage) = response.usage {
                self.record(StateEvent::UsageAdded { usage });
            }
            // An empty answer always says why it ended: without a reason of the provider's it is
            // `stop`, never taken for a run a tool's stop ended (which has none, or `tool_calls`).
            self.finish_reason.get_or_insert_with(|| "stop".to_string());
            return self.finish(RunStatus::Completed, None, None).await.map(Flow::Done);
        }
        self.record(StateEvent::MessageAppended { message: response.to_message() });
        if let Some(usage) = response.usage {
            self.record(StateEvent::UsageAdded { usage });
        }
        for (call, error) in refused {
            self.record_answer(&call, ToolResult::from_error(&error));
        }
        if response.finish_reason.as_deref() == Some("length") {
            self.answer_truncated_calls(&response.tool_calls);
        }
        // No sync here: the answer becomes durable with the next commit of this turn (its batch's
        // first commit, before any tool runs, or the terminal state): one sync less per round.
        self.turn_tools = Some(tools);
        Ok(Flow::Continue)
    }

    /// The calls of an answer cut off at the token limit whose arguments are not valid JSON (cut
    /// in the middle) are answered at once with `tool_arguments_truncated`: recorded as finished,
    /// so the batch answers them from their record in call order (durably, like any finished call)
    /// without hooks, approval or a run: there is nothing to run. The other calls run as usual.
    fn answer_truncated_calls(&mut self, calls: &[ToolCall]) {
        let limits = self.agent.tool_limits();
        for call in calls {
            let Err(e) = crate::json::parse_object(&call.arguments, &limits) else { continue };
            if e.code != codes::JSON_INVALID {
                continue;
            }
            let error = AgentError::of(
                codes::TOOL_ARGUMENTS_TRUNCATED,
                format!(
                    "the arguments of {} were cut off: the model's output reached its token limit \
                     (finish reason \"length\") in the middle of them, so the call did not run. \
                     Raise max_tokens, or make the call with shorter arguments ({})",
                    call.name, e.message
                ),
            );
            self.record_answer(call, ToolResult::from_error(&error));
        }
    }

    /// Records `call` as finished with `result`, answered without running: as soon as the
    /// model's answer is recorded (the batch answers it from its record), or before the batch's
    /// other calls run (see `execute`).
    fn record_answer(&mut self, call: &ToolCall, result: ToolResult) {
        self.record(StateEvent::ToolFinished {
            call_id: call.id.clone(),
            name: call.name.clone(),
            result,
            stop_requested: false,
            injected: Vec::new(),
        });
    }

    /// Asks the model; a streamed call's `ToolCallFinished` carries its arguments as the history
    /// will (`"{}"` when they are over `limits`, see [`refuse_arguments_over_limits`]).
    async fn call_model(
        &self,
        request: &ChatRequest,
        limits: crate::json::JsonLimits,
        used: &HashSet<&str>,
    ) -> Result<ModelResponse, AgentError> {
        if !self.agent.config.streaming {
            return self.agent.model.complete(request).await;
        }
        let mut stream = self.agent.model.stream(request).await?;
        // The ids the events announce, per stream index: (as the model sent it, unique). The
        // provider's own stream is unique within the answer; an id the history holds (`used`) is
        // taken too, and an app's `ChatModel` may repeat or omit ids: the events must name the
        // calls as the history and the results will.
        let mut announced: Vec<(usize, String, String)> = Vec::new();
        while let Some(event) = stream.next().await {
            match event? {
                ModelEvent::TextDelta(delta) => self.sink.emit(AgentEvent::TextDelta { delta }),
                ModelEvent::ReasoningDelta(delta) => self.sink.emit(AgentEvent::ReasoningDelta { delta }),
                ModelEvent::ToolCallStarted { index, id, name } => {
                    let position = announced.len();
                    let unique = unique_call_id(&id, position, |c| {
                        used.contains(c) || announced.iter().any(|a| a.2 == c)
                    })
                    .unwrap_or_else(|| id.clone());
                    announced.push((index, id, unique.clone()));
                    self.sink.emit(AgentEvent::ToolCallStarted { index, id: unique, name })
                }
                ModelEvent::ToolCallArgumentsDelta { index, delta } => {
                    self.sink.emit(AgentEvent::ToolCallArgumentsDelta { index, delta })
                }
                ModelEvent::ToolCallFinished { index, mut call } => {
                    if let Some(a) = announced.iter().find(|a| a.0 == index) {
                        call.id = a.2.clone();
                    }
                    if crate::json::over_limits(&call.arguments, &limits).is_some() {
                        call.arguments = EMPTY_ARGUMENTS.to_string();
                    }
                    self.sink.emit(AgentEvent::ToolCallFinished { index, call })
                }
                ModelEvent::Usage(_) => {}
                ModelEvent::Finished(mut response) => {
                    // The answer's calls in the order they were announced get the announced ids;
                    // `model_round` then only has to fill in what the events never named.
                    let same_calls = response.tool_calls.len() == announced.len()
                        && response.tool_calls.iter().zip(&announced).all(|(c, a)| c.id == a.1);
                    if same_calls {
                        for (call, a) in response.tool_calls.iter_mut().zip(announced) {
                            call.id = a.2;
                        }
                    }
                    return Ok(response);
                }
            }
        }
        Err(AgentError::of(codes::PROVIDER_STREAM_INTERRUPTED, "the model stream ended without finishing"))
    }

    /// A fresh batch: before-hooks, then the policy; the planner freezes the whole batch if any
    /// call needs confirmation, else its steps run.
    async fn tool_batch(&mut self, calls: Vec<ToolCall>) -> Result<Flow, AgentError> {
        self.reported.clear();
        let tools = self.turn_tools.clone().unwrap_or_else(|| self.agent.tools());
        let (s, r, round) = self.ids();
        let mut inputs = Vec::with_capacity(calls.len());
        for call in calls {
            // A call with a record is from an earlier process: never plan it again. Repair on load
            // answers every record but the started calls of idempotent tools, which run again.
            match self.state.tool_runs.get(&call.id) {
                Some(ToolRunRecord::Finished { result, .. }) => {
                    inputs.push(crate::approval::BatchCallInput {
                        risk_level: RiskLevel::Safe,
                        disposition: crate::approval::CallDisposition::Answer(result.clone()),
                        call,
                    });
                    continue;
                }
                // A started call of a tool that is not idempotent (its answer held back for
                // the batch, see `hold_answers_for_the_batch`) is never run again.
                Some(ToolRunRecord::Started { name })
                    if !tools.definition(name).is_some_and(|d| d.idempotent) =>
                {
                    inputs.push(crate::approval::BatchCallInput {
                        risk_level: RiskLevel::Safe,
                        disposition: crate::approval::CallDisposition::Answer(
                            crate::state::repair::interrupted_result(&call),
                        ),
                        call,
                    });
                    continue;
                }
                // A started call (an idempotent one repair left to run again) is planned as a
                // fresh one: its before-hooks' rewrite was not saved, so they run again.
                Some(ToolRunRecord::Started { .. }) | None => {}
            }
            let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
            let definition = tools.definition(&call.name);
            let hooked = unless_cancelled(&self.cancel, self.hooks.before_tool_call(&ctx, call, definition));
            let Some(outcome) = hooked.await else {
                return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done);
            };
            if let crate::hook::BeforeToolCallOutcome::Refused { error, .. } = &outcome {
                self.notify(self.hooks.on_error(&ctx, error)).await;
            }
            match outcome
                .into_batch_input_cancellable(self.agent.policy.as_ref(), definition, &self.cancel)
                .await
            {
                Ok(input) => inputs.push(self.answer_within_size(input)),
                Err(abort) => {
                    return self.finish(RunStatus::Aborted, None, Some(abort)).await.map(Flow::Done)
                }
            }
            // A cancel while the hooks or the policy ran (ArkTS ones wait for the JS thread) ends
            // the run before anything more is asked, frozen or run.
            if self.cancel.is_cancelled() {
                return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done);
            }
        }
        match plan_batch(&self.run_id(), self.last_answer(), inputs, now_ms()) {
            BatchPlan::Run(steps) => {
                let (stop_requested, injected) = self.recorded_after_hooks();
                self.stop_requested |= stop_requested;
                self.execute(steps, &tools, injected).await
            }
            BatchPlan::Freeze(batch) => self.freeze(batch).await,
        }
    }

    /// Freezes the batch: persisted first, then `ApprovalRequired` and the hooks, then suspended.
    async fn freeze(&mut self, batch: PendingApprovalBatch) -> Result<Flow, AgentError> {
        // A mirror of a worker batch the app's own resume of the worker announced already.
        let announced = batch.worker_session.is_some()
            && !batch.items.is_empty()
            && batch.items.iter().all(|i| self.announced_elsewhere.contains(&i.approval_id));
        self.record(StateEvent::ApprovalRequested { batch: batch.clone(), announced });
        self.persist(true).await?;
        // A batch is announced to the hooks once: a worker's by the parent that mirrors it (with
        // its `worker_session`), as hooks are shared with workers and would hear it twice; a
        // worker session the app resumed itself announces its own (the app's call waits on it),
        // and its parent, finding it frozen on that batch later, does not again.
        let announces = self.announces_approvals && !announced;
        if announces && self.state.delegation.is_some() {
            // A worker session saves that it announced its batch: hooks, then that save (its
            // `before_persist_state` and `StatePersisted` as every save), then `ApprovalRequired`,
            // which stays the last event of every run that suspends.
            self.announce(&batch).await;
            self.save_announced(&batch).await;
            self.sink.emit(AgentEvent::ApprovalRequired { batch: batch.clone() });
        } else {
            // Every run that suspends ends its events with it (the app reads its outcome there).
            self.sink.emit(AgentEvent::ApprovalRequired { batch: batch.clone() });
            if announces {
                self.announce(&batch).await;
            }
        }
        Ok(Flow::Done(RunOutcome::Suspended { batch }))
    }

    /// Tells the hooks (`on_approval_required`) of a batch frozen and persisted.
    async fn announce(&self, batch: &PendingApprovalBatch) {
        let (s, r, round) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        self.notify(self.hooks.on_approval_required(&ctx, batch)).await;
    }

    /// Saves that a worker session's frozen batch was announced (after the hooks were told, so a
    /// crash before leaves it to the parent to announce: never lost, twice only after a crash).
    /// A save as every other ([`persist`](Self::persist): `before_persist_state` inspects it, a
    /// `Skip` is ignored as for every frozen batch, `StatePersisted` reports it). A failure is
    /// logged: the batch stands unmarked, and the parent may announce it again.
    async fn save_announced(&mut self, batch: &PendingApprovalBatch) {
        if !self.unsaved.is_empty() {
            // Unreachable: the freeze's save is forced. Its events go first, or not this one.
            return;
        }
        let before = self.state.approval_announced;
        self.record(StateEvent::ApprovalRequested { batch: batch.clone(), announced: true });
        if let Err(e) = self.persist(true).await {
            log::warn!("arkagent: that a worker's frozen batch was announced could not be saved: {e}");
            self.unsaved.clear();
            self.state.approval_announced = before;
        }
    }

    /// A fully decided frozen batch: all approved -> its steps run; any denied -> nothing runs.
    /// Only the calls still `unanswered` are settled: after a crash mid-batch, repair on load has
    /// already answered the calls that started (and the finished ones).
    ///
    /// The calls planned to run when the batch was frozen are asked about again before anything
    /// runs (see [`recheck_planned_run`](Self::recheck_planned_run)): one that now needs the
    /// user's confirmation freezes the batch again, with what was decided kept.
    async fn settle_batch(&mut self, unanswered: Vec<ToolCall>) -> Result<Flow, AgentError> {
        self.reported.clear();
        let mut batch = self.state.pending_approval.clone().expect("settling needs a batch");
        let tools = self.agent.tools();
        let open: HashSet<&str> = unanswered.iter().map(|c| c.id.as_str()).collect();
        let mut dismissal =
            batch.dismissed.clone().filter(|_| batch.worker_session.is_some() && batch.runs_nothing());
        // A dismissal whose denial never reached the worker (below).
        let mut dismissed_after_worker = None;
        if dismissal.is_some() {
            let (moved_on, usage) = self.agent.mirror_worker(&batch).await?;
            if moved_on {
                // The denial never reached the worker: the app settled the worker's batch on its
                // session and resumed it directly. The delegating call runs again and reads what
                // the worker answered; the calls not run yet stay not run, as in any dismissal
                // (which still ends the run without this session's model).
                dismissed_after_worker = dismissal.take();
            } else {
                // What the worker used until it froze counts here, with the batch's end.
                self.batch_usage = Some(usage);
                if let (Some(worker), Some(reason)) = (&batch.worker_session, &dismissal) {
                    self.dismiss_worker(worker, &unanswered, reason).await;
                }
            }
            // The workers frozen beside the mirrored one (parallel delegations): the dismissal
            // answers their calls not run too, so each is settled with the same denial (left
            // awaiting, its resume would run its calls for nobody), and what it used counts here,
            // with the batch's end (it asks no model: what it used until it froze).
            if let Some(reason) = dismissal.clone().or_else(|| dismissed_after_worker.clone()) {
                let batch_call_id = batch_id_of(&self.state);
                let unanswered_workers: HashSet<String> =
                    unanswered.iter().filter_map(|call| self.worker_of(&batch_call_id, call)).collect();
                let siblings = sibling_workers(&self.state, &batch).into_iter();
                for worker in siblings.filter(|w| unanswered_workers.contains(w)) {
                    if let Some(used) = self.agent.usage_so_far(&worker).await? {
                        self.batch_usage.get_or_insert_with(Usage::default).add(&used);
                    }
                    self.dismiss_worker(&worker, &unanswered, &reason).await;
                }
            }
        }
        let steps = if let Some(reason) = dismissal {
            // Dismissed: the worker is not continued (its model would be asked; it was settled
            // with the denial above), and nothing of the parent's batch runs: what was answered
            // keeps its answer, the rest is not run.
            unanswered
                .iter()
                .map(|call| match batch.calls.iter().find(|c| c.call.id == call.id).map(|c| &c.plan) {
                    Some(BatchCallPlan::Answer { result }) => {
                        BatchStep::Answer(AnsweredCall { call: call.clone(), result: result.clone() })
                    }
                    _ => not_run_dismissed(call, &reason),
                })
                .collect()
        } else if batch.worker_session.is_some() {
            // The items were a worker's, decided in its session too: the parent's batch continues
            // as it was running (finished calls answered from their records, the delegating call
            // run again, which continues the worker, the calls not reached yet run as planned).
            if batch.calls.is_empty() {
                // A mirror persisted without the parent's plan: its calls are planned anew.
                self.record(StateEvent::ApprovalCleared);
                return self.tool_batch(unanswered).await;
            }
            self.stop_requested |= batch.stop_requested;
            let steps = batch.mirrored_steps();
            match dismissed_after_worker {
                // Only the delegating call runs (again), to read the worker's answer.
                Some(reason) => {
                    let batch_call_id = batch_id_of(&self.state);
                    steps
                        .into_iter()
                        .map(|step| match step {
                            BatchStep::Execute(call)
                                if self.worker_of(&batch_call_id, &call) != batch.worker_session =>
                            {
                                not_run_dismissed(&call, &reason)
                            }
                            step => step,
                        })
                        .collect()
                }
                None => self.recheck_mirrored(steps, &batch, &tools, &open).await,
            }
        } else {
            if !batch.runs_nothing() {
                // The policy's answers are awaited first: the batch replans with them.
                let mut rechecked = HashMap::new();
                for call in batch.planned_runs()? {
                    if let Some(input) = self.recheck_planned_run(&tools, &open, &call).await {
                        rechecked.insert(call.id, input);
                    }
                }
                let asked = batch.replan_runs(|call| rechecked.remove(&call.id), now_ms())?;
                // A cancel while the policy answered (an ArkTS one waits for the JS thread).
                if self.cancel.is_cancelled() {
                    return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done);
                }
                if asked {
                    let Some(reason) = batch.dismissed.clone() else {
                        return self.freeze(batch).await;
                    };
                    // A dismissal denies what is pending: the new items too, so none of it runs.
                    let pending: Vec<String> = batch.pending_items().map(|i| i.approval_id.clone()).collect();
                    for approval_id in pending {
                        batch.deny(&approval_id, reason.clone(), now_ms())?;
                    }
                }
            }
            match (batch.settle()?, &batch.dismissed) {
                // Dismissed with the parent's batch, which the user did not approve entirely:
                // what was approved here is not run either.
                (BatchSettlement::Run(steps), Some(reason)) if batch.denied_above => steps
                    .into_iter()
                    .map(|step| match step {
                        BatchStep::Execute(call) => not_run_dismissed(&call, reason),
                        step => step,
                    })
                    .collect(),
                (BatchSettlement::Run(steps), _) => steps,
                (BatchSettlement::Denied(answers), _) => answers.into_iter().map(BatchStep::Answer).collect(),
            }
        };
        // A call the batch does not run that could not have run anyway is told why (see
        // `not_run_or_gate_error`).
        let limit = self.agent.config.max_result_bytes;
        let steps: Vec<BatchStep> =
            steps.into_iter().map(|step| not_run_or_gate_error(step, &batch, &tools, limit)).collect();
        // Calls that ran (or started) in an earlier process keep what the journal knows: a
        // finished call its result; a started one is never run again unless its tool is
        // idempotent (repair leaves exactly those unanswered), else it "may or may not have
        // taken effect".
        let steps = steps
            .into_iter()
            .filter(|step| open.contains(step.call().id.as_str()))
            .map(|step| {
                let call = step.call();
                match self.state.tool_runs.get(&call.id) {
                    Some(ToolRunRecord::Finished { result, .. }) => {
                        BatchStep::Answer(AnsweredCall { call: call.clone(), result: result.clone() })
                    }
                    Some(ToolRunRecord::Started { .. })
                        if !tools.definition(&call.name).is_some_and(|d| d.idempotent) =>
                    {
                        let result = crate::state::repair::interrupted_result(call);
                        BatchStep::Answer(AnsweredCall { call: call.clone(), result })
                    }
                    _ => step,
                }
            })
            .collect();
        let (stop_requested, recorded) = self.recorded_after_hooks();
        self.stop_requested |= stop_requested;
        let mut injected = batch.injected;
        injected.extend(recorded);
        self.execute(steps, &tools, injected).await
    }

    /// What the policy says now about a call of a frozen batch that was planned to run: the tool
    /// may have been registered anew (dangerous now) or the policy changed since the batch was
    /// planned, and nobody was asked about the call. Its before-hooks are not asked again (their
    /// word is in the plan). `None` for a call the batch no longer settles (not in `open`) or with
    /// a record: it ran or started in an earlier process, and is never planned again.
    async fn recheck_planned_run(
        &self,
        tools: &ToolSnapshot,
        open: &HashSet<&str>,
        call: &ToolCall,
    ) -> Option<BatchCallInput> {
        if !open.contains(call.id.as_str()) || self.state.tool_runs.contains_key(&call.id) {
            return None;
        }
        let outcome = crate::hook::BeforeToolCallOutcome::Proceed(call.clone());
        let input = outcome
            .into_batch_input_cancellable(
                self.agent.policy.as_ref(),
                tools.definition(&call.name),
                &self.cancel,
            )
            .await
            // Unreachable: only a hook's `Abort` is an error.
            .unwrap_or_else(|e| BatchCallInput {
                call: call.clone(),
                risk_level: RiskLevel::Safe,
                disposition: CallDisposition::Answer(ToolResult::from_error(&e)),
            });
        Some(self.answer_within_size(input))
    }

    /// `input` with the answer a hook or the policy gave the call (a `Deny`, the policy's
    /// `denied by policy: <reason>`) held to `max_result_bytes` as a tool's result is
    /// ([`within_size`]): it goes to the model as the call's result and is saved with the session.
    /// It is cut rather than refused: the hook and the policy are the app's code, and the run
    /// has nobody to give the refusal to.
    fn answer_within_size(&self, mut input: BatchCallInput) -> BatchCallInput {
        if let CallDisposition::Answer(result) = input.disposition {
            let limit = self.agent.config.max_result_bytes;
            input.disposition = CallDisposition::Answer(answer_within_limit(result, &input.call.name, limit));
        }
        input
    }

    /// The steps of a mirror's batch (see [`PendingApprovalBatch::approved_calls`]): the calls
    /// not reached when the worker froze run now, unless the policy now denies them or asks for a
    /// confirmation the user did not give (the parent's batch was already running: it is not
    /// frozen again; such a call is answered `tool_not_run`).
    async fn recheck_mirrored(
        &self,
        steps: Vec<BatchStep>,
        batch: &PendingApprovalBatch,
        tools: &ToolSnapshot,
        open: &HashSet<&str>,
    ) -> Vec<BatchStep> {
        let Some(approved) = &batch.approved_calls else { return steps };
        let mut rechecked = Vec::with_capacity(steps.len());
        for step in steps {
            rechecked.push(match step {
                BatchStep::Execute(call) if !approved.contains(&call.id) => {
                    match self.recheck_planned_run(tools, open, &call).await.map(|input| input.disposition) {
                        Some(CallDisposition::Answer(result)) => {
                            BatchStep::Answer(AnsweredCall { call, result })
                        }
                        Some(CallDisposition::Confirm(reason)) => not_run_unasked(&call, &reason),
                        Some(CallDisposition::Run) | None => BatchStep::Execute(call),
                    }
                }
                step => step,
            });
        }
        rechecked
    }

    /// Runs the `Execute` steps (each journaled `started` before it runs and `finished` after),
    /// then appends every call's result in call order, then the messages after-hooks injected
    /// (`injected` holds those of calls that finished before a worker froze the batch).
    async fn execute(
        &mut self,
        steps: Vec<BatchStep>,
        tools: &ToolSnapshot,
        mut injected: Vec<ChatMessage>,
    ) -> Result<Flow, AgentError> {
        let calls: Vec<ToolCall> = steps.iter().map(|s| s.call().clone()).collect();
        let mut results: HashMap<String, ToolResult> = HashMap::new();
        let runs_any = steps.iter().any(|step| matches!(step, BatchStep::Execute(_)));
        let mut to_run = Vec::new();
        for step in steps {
            let (call, result) = match step {
                BatchStep::Answer(AnsweredCall { call, result }) => (call, result),
                BatchStep::Execute(call) => {
                    to_run.push(call);
                    continue;
                }
            };
            // An answer decided without running (a denial by the policy, a hook or the user, a
            // call not run) is recorded as finished when calls run after it, saved with their
            // `started` commit: a cancel or a crash in the middle of the batch then reads it back
            // as it was reported, not as a call the run cut short. (Recorded results keep theirs.)
            if runs_any && !self.state.tool_runs.contains_key(&call.id) {
                self.record_answer(&call, result.clone());
            }
            // Answers known before execution (denials, recorded results) are reported first.
            self.report_result(&call, &result);
            results.insert(call.id, result);
        }
        let all_safe =
            to_run.iter().all(|c| tools.definition(&c.name).is_none_or(|d| d.risk_level == RiskLevel::Safe));
        let width = if all_safe { self.agent.config.max_parallel_tools.max(1) } else { 1 };
        let batch_call_id = batch_id_of(&self.state);
        // A `delegate_task` call runs a worker only when the delegation's tool is registered (the
        // name is reserved for it): else the registry answers `tool_not_found` (a model that
        // names it unasked), and no worker session is recorded for a worker that never existed.
        let delegates = tools.definition(DELEGATE_TASK).is_some();
        let view = Arc::new(self.state.readonly_view());
        let mut abort: Option<AgentError> = None;
        let mut waiting: Option<PendingApprovalBatch> = None;
        // Only a batch that delegates has a channel for its workers' events.
        let mut workers: Option<WorkerEvents> = None;

        'chunks: for chunk in to_run.chunks(width) {
            for call in chunk {
                let worker_session = self.worker_of(&batch_call_id, call).filter(|_| delegates);
                self.record(StateEvent::ToolStarted {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    worker_session,
                });
            }
            self.persist(true).await?;
            // The chunk's calls hear the run's cancel, and an abort by a hook (below).
            let chunk_cancel = self.cancel.child();
            let mut running: FuturesUnordered<_> = chunk
                .iter()
                .map(|call| {
                    let ctx = ToolContext {
                        session_id: self.state.session_id.clone(),
                        state: Arc::clone(&view),
                        batch_call_id: batch_call_id.clone(),
                        call_id: call.id.clone(),
                        signal: chunk_cancel.child(),
                        services: Arc::clone(&self.agent.services),
                    };
                    let timeout = call_timeout(call, tools.definition(&call.name), &self.agent.config);
                    let forward = self.worker_of(&batch_call_id, call).filter(|_| delegates).map(|worker| {
                        workers.get_or_insert_with(WorkerEvents::new).forward(self.agent, worker, &call.id)
                    });
                    let run = run_one(tools.clone(), call.clone(), ctx, timeout);
                    async move {
                        let (call, outcome) = run.await;
                        let report = forward.as_ref().map(|f| f.take_report());
                        (call, outcome, report)
                    }
                })
                .collect();
            // The chunk's delegations still running: on a cancel they are let end (below).
            let mut delegations: HashSet<String> =
                chunk.iter().filter(|c| c.name == DELEGATE_TASK).map(|c| c.id.clone()).collect();
            loop {
                let cancel = self.cancel.clone();
                let next = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => None,
                    event = WorkerEvents::recv(&mut workers), if workers.is_some() => {
                        self.sink.emit(event);
                        WorkerEvents::drain(&mut workers, self.sink);
                        continue;
                    }
                    n = running.next() => n,
                };
                // A worker's events come before its delegating call's result (or the cancel).
                WorkerEvents::drain(&mut workers, self.sink);
                let Some((call, outcome, mut report)) = next else {
                    if self.cancel.is_cancelled() {
                        return self.ended_mid_chunk(running, delegations, &mut workers, None).await;
                    }
                    break;
                };
                delegations.remove(&call.id);
                let result = match outcome {
                    Ok(r) => r,
                    // A cancelled run is not backfilled: the call stays `started`.
                    Err(e) if e.is_cancelled() && self.cancel.is_cancelled() => {
                        return self.ended_mid_chunk(running, delegations, &mut workers, None).await;
                    }
                    Err(e) if e.code == codes::WORKER_AWAITING_APPROVAL && call.name == DELEGATE_TASK => {
                        let frozen = report.as_mut().and_then(|r| r.frozen.take());
                        let announced = report.as_ref().is_some_and(|r| r.announced);
                        match self.worker_awaiting(&batch_call_id, &call, frozen, announced).await {
                            // The call stays `started`: it runs again once the user decided.
                            Some(mirror) => {
                                match &mut waiting {
                                    None => waiting = Some(mirror),
                                    // A worker frozen beside the first (parallel delegations):
                                    // its items are offered with the first's, so the user
                                    // decides them all at once, each in its own worker.
                                    Some(first) => first.add_beside(mirror),
                                }
                                continue;
                            }
                            None => ToolResult::from_error(&e),
                        }
                    }
                    Err(e) => ToolResult::from_error(&e),
                };
                let (s, r, round) = self.ids();
                let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
                // Cancelled before the after-hooks answered: the result they never released is
                // not recorded (the call stays `started`; the next run answers it interrupted).
                let hooked = unless_cancelled(&self.cancel, self.hooks.after_tool_call(&ctx, &call, result));
                let Some(after) = hooked.await else {
                    return self.ended_mid_chunk(running, delegations, &mut workers, None).await;
                };
                let stop_requested = match after.control {
                    AfterControl::Continue => false,
                    AfterControl::Stop => true,
                    AfterControl::Abort(e) => {
                        abort = Some(e);
                        false
                    }
                };
                self.stop_requested |= stop_requested;
                let result = within_size(after.result, &call.name, self.agent.config.max_result_bytes);
                // Calls of the chunk still run (in parallel): what this call asked (a stop, its
                // own or a hook's, messages to inject) is made durable now, not with the chunk's
                // end, which a slow call may put off long enough for the process to die first.
                let asks = stop_requested || result.stop || !after.inject.is_empty();
                let durable_now = asks && !running.is_empty();
                // The hooks' stop and messages are saved with the call, so a process that dies
                // later in the batch loses neither (see `recorded_after_hooks`).
                self.record(StateEvent::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    result: result.clone(),
                    stop_requested,
                    injected: after.inject.clone(),
                });
                injected.extend(after.inject);
                if durable_now {
                    if let Err(e) = self.persist(true).await {
                        // The calls still running are told, as on an abort; the run ends with the
                        // store's error, as when a chunk's start cannot be saved.
                        chunk_cancel.cancel("the run ended: its state could not be saved");
                        return Err(e);
                    }
                }
                if let Some(worker) = self.worker_of(&batch_call_id, &call).filter(|_| delegates) {
                    // The worker's usage counts in this session's, added once, with the call's
                    // result (after it: a commit cut short never counts it twice).
                    let usage = match report.take().and_then(|r| r.usage) {
                        Some(usage) => Some(usage),
                        // Timed out, or failed before its outcome: what its session saved.
                        None => self.agent.worker_usage(&worker).await,
                    };
                    self.add_usage(usage);
                }
                // Group commit: finished records become durable with the next chunk's `started`
                // commit or the batch's last commit (or at once when they ask something of the
                // run, `durable_now` above). A crash before that reports the call as
                // interrupted ("may or may not have taken effect"): never run twice.
                self.report_result(&call, &result);
                results.insert(call.id.clone(), result);
                if let Some(e) = abort {
                    // The calls of the chunk still running are told, as on a cancel, and the run
                    // ends as a cancelled one does: delegations are let end, other calls are not
                    // waited for (they stay `started`; the next run answers them interrupted).
                    chunk_cancel.cancel(ABORTED_BY_HOOK);
                    return self.ended_mid_chunk(running, delegations, &mut workers, Some(e)).await;
                }
            }
            if waiting.is_some() {
                break 'chunks;
            }
        }
        if let Some(mut mirror) = waiting {
            // A worker awaits the user: the parent freezes too, on the worker's items, and keeps
            // how its own batch stands, so it continues from there once the user decided: what
            // was answered (before or while running) keeps its answer, the rest runs as planned.
            mirror.calls = calls
                .iter()
                .map(|call| BatchCall {
                    call: call.clone(),
                    plan: match results.remove(&call.id) {
                        Some(result) => BatchCallPlan::Answer { result },
                        None => BatchCallPlan::Run,
                    },
                })
                .collect();
            mirror.injected = injected;
            mirror.stop_requested = self.stop_requested;
            mirror.approved_calls = match &self.state.pending_approval {
                // Settling a mirror: what it kept.
                Some(settled) if settled.worker_session.is_some() => settled.approved_calls.clone(),
                Some(settled) => Some(
                    settled
                        .items
                        .iter()
                        .filter(|i| i.decision == ApprovalDecision::Approved)
                        .map(|i| i.tool_call.id.clone())
                        .collect(),
                ),
                // A batch planned just now: nobody was asked.
                None => Some(Vec::new()),
            };
            return self.freeze(mirror).await;
        }

        for call in &calls {
            let result =
                results.remove(&call.id).unwrap_or_else(|| crate::state::repair::interrupted_result(call));
            if result.stop {
                self.stop_requested = true;
            }
            self.record(StateEvent::MessageAppended { message: tool_result_message(call, &result) });
        }
        // A dismissal (`Agent::dismiss`, saved on the batch being settled) asks no model: its
        // stop is saved with the batch like any other (a kill before the run's end must not lead
        // to a model round), but never carried into a mirror frozen on the way.
        let dismissed = self.state.pending_approval.as_ref().is_some_and(|b| b.dismissed.is_some());
        self.record(StateEvent::BatchCompleted { stop_requested: self.stop_requested || dismissed });
        let usage = self.batch_usage.take();
        self.add_usage(usage);
        if self.state.pending_approval.is_some() {
            self.record(StateEvent::ApprovalCleared);
        }
        for message in injected {
            self.record(StateEvent::MessageAppended { message });
        }
        let mut looped = self.observe_loop(&calls);
        if dismissed {
            // No diagnosis either, and no loop verdict: it ends completed (the window is kept).
            looped = None;
        } else if looped.is_none() {
            // A diagnosis asks a model: cancelling the run does not wait for it.
            let cancel = self.cancel.clone();
            let diagnosed = tokio::select! {
                biased;
                _ = cancel.cancelled() => None,
                d = self.diagnose() => Some(d),
            };
            match diagnosed {
                None => return self.finish(RunStatus::Cancelled, None, None).await.map(Flow::Done),
                Some(d) => looped = d,
            }
        }
        self.persist(false).await?;
        if let Some(e) = looped {
            return self.finish(RunStatus::LoopDetected, None, Some(e)).await.map(Flow::Done);
        }
        Ok(Flow::Continue)
    }

    /// Ends the run in the middle of a chunk: cancelled, or aborted by a hook (`aborted`, once
    /// the chunk's signal was cancelled). It keeps polling the chunk (`running`) until its
    /// delegations (`open`) have ended: their workers see the cancel (a child signal) and end
    /// their own runs promptly, durably `cancelled` (dropped mid-run instead, a worker's session
    /// stayed `running` for good and its hooks never heard its run end), and what they said is
    /// forwarded; the workers of the batch left frozen are ended `cancelled` too (by `finish`). Other tools
    /// are not waited for: they are dropped with the chunk and stay `started`, as before.
    async fn ended_mid_chunk<S, R>(
        &mut self,
        mut running: S,
        mut open: HashSet<String>,
        workers: &mut Option<WorkerEvents>,
        aborted: Option<AgentError>,
    ) -> Result<Flow, AgentError>
    where
        S: futures_util::Stream<Item = (ToolCall, Result<ToolResult, AgentError>, R)> + Unpin,
    {
        while !open.is_empty() {
            match running.next().await {
                Some((call, _, _)) => {
                    open.remove(&call.id);
                }
                None => break,
            }
        }
        WorkerEvents::drain(workers, self.sink);
        drop(running);
        // A worker frozen in the batch (its delegating call stays `started`) is ended by `finish`,
        // as the workers still running ended with the cancel.
        let status = if aborted.is_some() { RunStatus::Aborted } else { RunStatus::Cancelled };
        self.finish(status, None, aborted).await.map(Flow::Done)
    }

    /// Ends the workers of `calls` (the batch's delegations) that are frozen: the run that would
    /// continue them ends first. Each one's run is told ended through this run's sink, wrapped as
    /// its delegating call's. Best effort: one that cannot be ended now is logged and left.
    async fn end_frozen_workers(&self, calls: &[ToolCall]) {
        let batch_call_id = batch_id_of(&self.state);
        for call in calls {
            let Some(worker) = self.worker_of(&batch_call_id, call) else { continue };
            let origin = WorkerOrigin { call_id: call.id.clone(), session_id: worker.clone() };
            let sink = WrappingSink { origin, sink: self.sink };
            if let Err(e) = self.agent.end_frozen_worker(&worker, &sink).await {
                log::warn!("arkagent: a worker frozen in a batch whose run ended was not ended: {e}");
            }
        }
    }

    /// Ends the run of the worker a dismissed mirror was frozen on, or of one frozen beside it
    /// (parallel delegations), with the same dismissal: its batch holds the denials already (a
    /// worker beside the mirrored one has what is pending denied here first), so it completes
    /// with them, without its model (and so on down its own workers). The parent's batch holds a
    /// denial, so none of the worker's calls runs, even when every item of its own was approved
    /// (marked [`denied_above`](PendingApprovalBatch::denied_above)). Its answer has no reader
    /// any more (the delegating call is answered `tool_not_run`): left awaiting, it would look
    /// resumable, and its resume would ask its model for an answer nobody reads (and run its
    /// calls). Its events reach this run's sink wrapped as the
    /// delegating call's. Best effort, as [`Agent::decide_above`]: a worker that cannot be
    /// settled now (held by another process, a store error) is logged and left as decided.
    async fn dismiss_worker(&self, worker: &str, unanswered: &[ToolCall], reason: &str) {
        let batch_call_id = batch_id_of(&self.state);
        let call_id = unanswered
            .iter()
            .find(|call| self.worker_of(&batch_call_id, call).as_deref() == Some(worker))
            .map(|call| call.id.clone())
            .unwrap_or_default();
        let origin = WorkerOrigin { call_id, session_id: worker.to_string() };
        let sink = WrappingSink { origin, sink: self.sink };
        let settled = async {
            let _held = self.agent.hold(worker).await?;
            let Some(state) = self.agent.store.load_unrepaired(worker).await? else { return Ok(()) };
            let Some(batch) = state.pending_approval.filter(|_| state.status == RunStatus::AwaitingApproval)
            else {
                // Settled meanwhile (the app resumed it directly): nothing left to dismiss.
                return Ok(());
            };
            // A mirrored worker's items were denied through its parent's mirror; a worker frozen
            // beside it (parallel delegations) has them denied here, as `Agent::dismiss` would.
            let deny = UserDecision::Deny(reason.to_string());
            for item in batch.pending_items() {
                match self.agent.decide_held(worker, &item.approval_id, &deny, false).await {
                    Err(e) if e.code == codes::APPROVAL_ALREADY_DECIDED => {}
                    other => {
                        other?;
                    }
                }
            }
            // Boxed: the worker's own dismissal settles its workers through this again.
            // The parent's batch holds a denial (it runs nothing): so does the worker's, though
            // the user approved every item of it.
            let dismissal = Dismissal { reason, denied_above: true };
            Box::pin(self.agent.resume_held(worker, &sink, &self.cancel, Some(dismissal))).await.map(drop)
        };
        if let Err(e) = settled.await {
            log::warn!("arkagent: the worker session of a dismissed batch was not settled: {e}");
        }
    }

    /// The session of the worker a `delegate_task` call runs (`None` for other calls). Computed
    /// where it is needed rather than kept per chunk: calls that delegate are rare, and the common
    /// batch pays no allocation for them.
    fn worker_of(&self, batch_call_id: &str, call: &ToolCall) -> Option<String> {
        (call.name == DELEGATE_TASK)
            .then(|| worker_session_id(&self.state.session_id, batch_call_id, &call.id))
    }

    /// The frozen batch of the worker a `delegate_task` call suspended, as this session's batch
    /// (see [`PendingApprovalBatch::worker_session`]): the one the call reported (`frozen`), else
    /// the one its session holds. `None` when there is no undecided batch (the error then becomes
    /// the call's result, as any tool error does).
    async fn worker_awaiting(
        &mut self,
        batch_call_id: &str,
        call: &ToolCall,
        frozen: Option<PendingApprovalBatch>,
        announced: bool,
    ) -> Option<PendingApprovalBatch> {
        let worker = self.worker_of(batch_call_id, call)?;
        let (frozen, announced) = match frozen {
            Some(batch) => (Some(batch), announced),
            None => match self.agent.read_worker(&worker).await {
                Some(s) => (s.pending_approval, s.approval_announced),
                None => (None, false),
            },
        };
        let batch = frozen.filter(|b| !b.is_fully_decided())?;
        if announced {
            self.announced_elsewhere.extend(batch.items.iter().map(|i| i.approval_id.clone()));
        }
        Some(PendingApprovalBatch {
            batch_id: uuid::Uuid::new_v4().to_string(),
            run_id: self.run_id(),
            items: batch.items,
            assistant_message: self.last_answer(),
            created_at_ms: now_ms(),
            // Filled in by `execute` with the parent's batch as it stands.
            calls: Vec::new(),
            worker_session: Some(worker),
            item_workers: BTreeMap::new(),
            injected: Vec::new(),
            stop_requested: false,
            dismissed: None,
            denied_above: false,
            approved_calls: None,
        })
    }

    /// Adds a worker's (or a loop diagnosis's) usage to this session's (nothing when it used none).
    fn add_usage(&mut self, usage: Option<Usage>) {
        if let Some(usage) = usage.filter(|u| *u != Usage::default()) {
            self.record(StateEvent::UsageAdded { usage });
        }
    }

    /// The optional LLM diagnosis, on its schedule (rounds counted over the session's model
    /// answers: the fixed answers of runs that reached the round limit are not the model's). The
    /// tokens it used count in the session's usage (saved with the batch's end).
    async fn diagnose(&mut self) -> Option<AgentError> {
        let (diagnoser, schedule) = self.agent.diagnoser.as_ref()?;
        let answers =
            self.state.messages.iter().filter(|m| matches!(m, ChatMessage::Assistant { .. })).count();
        let answers = answers.saturating_sub(self.state.fallback_answers as usize);
        let round = u32::try_from(answers).unwrap_or(u32::MAX);
        let (check, usage) = diagnose_loop(diagnoser.as_ref(), schedule, round, &self.state.messages).await;
        self.add_usage(usage);
        check.to_error()
    }

    /// Counts the batch's model answer in the loop detector, records its window, and says whether
    /// it is a loop. What is signed is what the model asked for: the calls of the assistant
    /// message the batch's calls come from (matched by id), not the calls as before-hooks
    /// rewrote them (an audit id added by a hook must not hide a loop, nor a rewrite to the same
    /// arguments make one), and the whole answer at once, also when an earlier process ran part
    /// of it (the window is committed with the batch's end, so an answer counts once).
    fn observe_loop(&mut self, calls: &[ToolCall]) -> Option<AgentError> {
        let config = &self.agent.config;
        let detector = LoopDetector::from_window(
            &LoopDetectorConfig { window: config.loop_window },
            self.state.loop_window.clone(),
        )
        .and_then(|d| d.with_max_cycle_period(config.loop_max_cycle_period));
        // Unreachable after `check_config`; kept as an error rather than a panic.
        let mut detector = match detector {
            Ok(d) => d,
            Err(e) => return Some(e),
        };
        let answer = calls.first().and_then(|first| {
            self.state
                .messages
                .iter()
                .rev()
                .map(ChatMessage::tool_calls)
                .find(|c| c.iter().any(|c| c.id == first.id))
        });
        let check = detector.record_batch(answer.unwrap_or(calls).iter().map(call_signature));
        self.record(StateEvent::LoopWindow { window: detector.window() });
        check.to_error()
    }

    async fn finish(
        &mut self,
        status: RunStatus,
        text: Option<String>,
        error: Option<AgentError>,
    ) -> Result<RunOutcome, AgentError> {
        // The calls of the model's last answer the run ends without answering (a cancel or an
        // abort cut the batch short, before or while they ran) and whose `ToolResult` it did not
        // emit: the state does not record their answers, the next load's repair gives them.
        let cut_short = unanswered_calls(&self.state.messages);
        // A worker frozen under such a call (the batch cut short mid-way, or a mirror's batch the
        // run was to settle) could no longer be continued: it is ended, its run told ended.
        // Boxed: `finish` is part of every run's future, nested runs (a dismissal settling its
        // workers) included, and this is rarely needed.
        Box::pin(self.end_frozen_workers(&cut_short)).await;
        if let Some(e) = &error {
            // Every error that ends a run is told (a provider's, a hook's abort or failure, a
            // loop), before the run's end is saved, as a refused call's is when it happens.
            let (s, r, round) = self.ids();
            let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
            self.notify(self.hooks.on_error(&ctx, e)).await;
        }
        let mut final_text = text;
        if status == RunStatus::MaxRounds {
            // Counted in `AgentState::fallback_answers` with the status.
            let fallback = self.agent.config.max_rounds_fallback.clone();
            self.record(StateEvent::MessageAppended {
                message: ChatMessage::assistant_text(fallback.clone()),
            });
            final_text = Some(fallback);
        }
        if self.state.pending_approval.is_some() {
            // A run that ends while it settles a decided batch (cancelled, aborted, failed) keeps
            // no batch: it could no longer be resumed, decided or dismissed, yet `state` (and the
            // app's `pendingApproval()`) would still show it. Calls it did not answer are answered
            // by the next run's repair, as for any ended run (a worker frozen under one is ended
            // above).
            self.record(StateEvent::ApprovalCleared);
        }
        // The finish reason and the error are saved with the status, so the session tells them
        // after the run (a worker found ended when its delegating call runs again answers as it
        // did live).
        let finish_reason = self.finish_reason.clone();
        self.record(StateEvent::StatusChanged {
            status,
            finish_reason: finish_reason.clone(),
            error: error.clone(),
        });
        self.persist(true).await?;
        // Each gets its `ToolResult` now that the run's end is saved, with that answer (a
        // finished call's recorded result, else `tool_interrupted`), so a UI that pairs every
        // call with its result closes them all before `RunFinished`.
        for call in cut_short {
            let result = match self.state.tool_runs.get(&call.id) {
                Some(ToolRunRecord::Finished { result, .. }) => result.clone(),
                Some(ToolRunRecord::Started { .. }) => crate::state::repair::interrupted_result(&call),
                None => crate::state::repair::not_started_result(&call),
            };
            self.report_result(&call, &result);
        }
        let (s, r, round) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        // Told, but not waited for once the run is cancelled (a cancel ends the run at once).
        self.notify(self.hooks.on_run_end(&ctx, status, final_text.as_deref())).await;
        self.sink.emit(AgentEvent::RunFinished {
            status,
            final_text: final_text.clone(),
            usage: self.state.usage,
            finish_reason: finish_reason.clone(),
            error: error.clone(),
        });
        Ok(RunOutcome::Finished { status, final_text, error, usage: self.state.usage, finish_reason })
    }
}

/// Some calls of the last answer run (again) now: the answers repair gave its other calls (a
/// finished call's recorded result, a started one's `interrupted`) are taken back out, for the
/// batch to give every call its result in call order, from the same records (see `tool_batch`
/// and `settle_batch`). Appended at once, they put the re-run calls' results after them, out of
/// call order. Not when repair answered a call of it as never started: that answer stays, and so
/// do the others.
fn hold_answers_for_the_batch(state: &mut AgentState, report: &mut crate::state::RepairReport) {
    let Some(pos) = state.messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { .. })) else {
        return;
    };
    let calls: HashSet<&str> = state.messages[pos].tool_calls().iter().map(|c| c.id.as_str()).collect();
    if report.not_started.iter().any(|id| calls.contains(id.as_str())) {
        return;
    }
    let held: HashSet<String> = report
        .recorded
        .iter()
        .chain(&report.interrupted)
        .filter(|id| calls.contains(id.as_str()))
        .cloned()
        .collect();
    if held.is_empty() {
        return;
    }
    let is_held = |m: &ChatMessage| m.tool_call_id().is_some_and(|id| held.contains(id));
    let tail = state.messages.split_off(pos + 1);
    state.messages.extend(tail.into_iter().filter(|m| !is_held(m)));
    report.events.retain(|e| !matches!(e, StateEvent::MessageAppended { message } if is_held(message)));
}

/// `result` when it takes at most `limit` bytes ([`AgentConfig::max_result_bytes`]); else an
/// error result cut to fit ([`ToolResult::cut_error`]: its code and metadata say what failed,
/// "ask for less" would not), a successful one replaced by the error `tool_result_too_large`,
/// itself cut so under a limit shorter than its message. The stop flag is kept.
fn within_size(result: ToolResult, tool: &str, limit: usize) -> ToolResult {
    within_size_of(result, tool, limit, true)
}

/// [`within_size`] of an answer the tool did not give (a hook's or the policy's denial): the
/// model is not told to ask the tool for less, as it never ran.
fn answer_within_limit(result: ToolResult, tool: &str, limit: usize) -> ToolResult {
    within_size_of(result, tool, limit, false)
}

fn within_size_of(result: ToolResult, tool: &str, limit: usize, ran: bool) -> ToolResult {
    let size = result.size_bytes();
    if size <= limit {
        return result;
    }
    let error = if result.is_error {
        result
    } else {
        let advice = if ran {
            "ask the tool for less (a page, a filter, a summary)"
        } else {
            "the app's answer for the call, given instead of running it, was left out"
        };
        ToolResult::from_error(&AgentError::of(
            codes::TOOL_RESULT_TOO_LARGE,
            format!("the result of {tool} takes {size} bytes, more than the limit of {limit}: {advice}"),
        ))
        .with_stop(result.stop)
    };
    if error.size_bytes() <= limit {
        return error;
    }
    error.cut_error(limit)
}

/// What a call's arguments are recorded as when the registry refuses them for their size or depth:
/// what the provider is sent for them in any case, the request carrying the same limits
/// ([`ChatRequest::argument_limits`], see [`crate::provider::convert::wire_arguments`]).
const EMPTY_ARGUMENTS: &str = "{}";

/// The calls of an answer whose arguments are over the argument limits of `tools` (`json_too_large`,
/// `json_too_deep`), with the registry's refusal of each (`tool_not_found` first for a tool it
/// does not have, as its gates go), their arguments replaced by `"{}"`.
///
/// Such a call never runs, and its arguments would be saved with the session, shown to the hooks
/// with every later request and re-read with every run, while the provider is sent `"{}"` for
/// them: replaced as the answer comes in, the state, the hooks, `messages()` and the requests
/// agree. The call is answered at once with the refusal (which tells the model the size or depth
/// of what it sent and the limit), without hooks, approval or a run, as a call cut off at the
/// token limit is (`answer_truncated_calls`).
fn refuse_arguments_over_limits(tools: &ToolSnapshot, calls: &mut [ToolCall]) -> Vec<(ToolCall, AgentError)> {
    let limits = tools.limits();
    let mut refused = Vec::new();
    for call in calls {
        let Some(over) = crate::json::over_limits(&call.arguments, &limits) else { continue };
        let error = tools.prepare(call).err().unwrap_or(over);
        call.arguments = EMPTY_ARGUMENTS.to_string();
        refused.push((call.clone(), error));
    }
    refused
}

/// A call's time limit: its definition's, else the config's `tool_timeout`; none for a
/// `delegate_task` without its own (see [`AgentConfig::tool_timeout`]).
fn call_timeout(
    call: &ToolCall,
    definition: Option<&ToolDefinition>,
    config: &AgentConfig,
) -> Option<std::time::Duration> {
    match definition.and_then(|d| d.timeout) {
        Some(timeout) => Some(timeout),
        None if call.name == DELEGATE_TASK => None,
        None => Some(config.tool_timeout),
    }
}

/// Runs one call with its timeout (none: untimed); returns the call with its outcome. A call cut
/// off at a time limit (this one, or an adapter's own: `tool_timeout`) is reported as one that
/// may have taken effect.
async fn run_one(
    tools: ToolSnapshot,
    call: ToolCall,
    ctx: ToolContext,
    timeout: Option<std::time::Duration>,
) -> (ToolCall, Result<ToolResult, AgentError>) {
    let signal = ctx.signal.clone();
    let outcome = match timeout {
        None => tools.execute(&call, ctx).await,
        Some(timeout) => match tokio::time::timeout(timeout, tools.execute(&call, ctx)).await {
            Ok(r) => r,
            Err(_) => {
                signal.cancel(crate::tool::TIMEOUT_REASON);
                Err(AgentError::of(
                    codes::TOOL_TIMEOUT,
                    format!("{} did not finish within {} ms", call.name, timeout.as_millis()),
                ))
            }
        },
    };
    (call, outcome.map_err(may_have_taken_effect))
}

/// What a `tool_timeout` says: the call was cut off, not undone. What it did before (an order
/// placed, a message sent) may stand, and a foreign executor may go on after the cancel; a model
/// told only that it timed out calls it again.
fn may_have_taken_effect(mut e: AgentError) -> AgentError {
    const CAVEAT: &str = "it may or may not have taken effect, so check before calling it again";
    if e.code == codes::TOOL_TIMEOUT && !e.message.contains(CAVEAT) {
        e.message = format!("{}; {CAVEAT}", e.message);
    }
    e
}

/// The text of the answer a history ends with: its last message when that is an assistant
/// message without calls (a run a stop ended after a batch ends with results, and the assistant
/// message before them is the calls' preamble, no answer).
pub(super) fn final_answer_text(messages: &[ChatMessage]) -> Option<String> {
    match messages.last() {
        Some(ChatMessage::Assistant { content, tool_calls, .. }) if tool_calls.is_empty() => content.clone(),
        _ => None,
    }
}

/// Whether `state` started the call `id` as a delegation and did not finish it.
fn started_delegation(state: &AgentState, id: &str) -> bool {
    matches!(state.tool_runs.get(id), Some(ToolRunRecord::Started { name }) if name == DELEGATE_TASK)
}

/// Those of `calls` that are delegating calls `state` started (and did not finish).
fn delegations_of(state: &AgentState, calls: &[String]) -> Vec<String> {
    calls.iter().filter(|id| started_delegation(state, id)).cloned().collect()
}

/// The delegating calls of the last assistant message of `state` that started and have no answer
/// in its history (a worker's calls left unfinished when its run was cut short).
fn unanswered_started_delegations(state: &AgentState) -> Vec<String> {
    let Some(at) = state
        .messages
        .iter()
        .rposition(|m| matches!(m, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
    else {
        return Vec::new();
    };
    let ChatMessage::Assistant { tool_calls, .. } = &state.messages[at] else { return Vec::new() };
    let answered: HashSet<&str> = state.messages[at + 1..]
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    tool_calls
        .iter()
        .filter(|c| !answered.contains(c.id.as_str()) && started_delegation(state, &c.id))
        .map(|c| c.id.clone())
        .collect()
}

/// The history as sent, with every system message but a first one as a user message, in its
/// place: a reminder an after-hook injected as a system message lands mid-history (or, trimmed,
/// right after the system prompt), and DeepSeek's reasoner ("the system message ... must be put on
/// the beginning of the message sequence"), Qwen and the Qwen chat templates of vLLM or llama.cpp
/// gateways ("System message must be at the beginning", also for a second one right after the
/// first) answer 400 to a system message anywhere but first; OpenAI reads either. Then
/// [`join_successive_questions`] joins it with a user message beside it. The history itself keeps
/// the system role; without a later system message (the common case) the same `Arc` is returned.
fn system_message_first_only(messages: Arc<Vec<ChatMessage>>) -> Arc<Vec<ChatMessage>> {
    if !messages.iter().skip(1).any(|m| matches!(m, ChatMessage::System { .. })) {
        return messages;
    }
    let mut sent = Arc::unwrap_or_clone(messages);
    for m in sent.iter_mut().skip(1) {
        if let ChatMessage::System { content } = m {
            *m = ChatMessage::User { content: std::mem::take(content) };
        }
    }
    Arc::new(sent)
}

/// The history as sent, with successive user messages as one (their texts joined by a blank
/// line): a question whose run ended without an answer (its model call failed or was cancelled,
/// or the answer was empty and not recorded) and the next turn's question, or a reminder a hook
/// injected before it. DeepSeek's reasoner answers 400 to successive user messages, so the session
/// would fail for good; no provider needs them apart. An empty answer saved by an earlier version,
/// which is not sent, does not separate them. The history itself keeps every message; without
/// successive questions (the common case) the same `Arc` is returned, nothing is copied.
fn join_successive_questions(messages: Arc<Vec<ChatMessage>>) -> Arc<Vec<ChatMessage>> {
    let mut last_user = false;
    let successive = messages.iter().filter(|m| !m.is_empty_answer()).any(|m| {
        let user = matches!(m, ChatMessage::User { .. });
        std::mem::replace(&mut last_user, user) && user
    });
    if !successive {
        return messages;
    }
    let mut joined: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    for m in messages.iter().filter(|m| !m.is_empty_answer()) {
        match (joined.last_mut(), m) {
            (Some(ChatMessage::User { content: previous }), ChatMessage::User { content }) => {
                previous.push_str("\n\n");
                previous.push_str(content);
            }
            _ => joined.push(m.clone()),
        }
    }
    Arc::new(joined)
}

/// The reason the calls still running hear when an after-hook aborts the run.
const ABORTED_BY_HOOK: &str = "the run was aborted by a hook";

/// `future`'s output, or `None` when `cancel` fires first: an app's hook or notification waits for
/// its thread (an ArkTS one at most its timeout) and must not hold a cancelled run that long. The
/// future is polled first, so one that answers at once is always heard.
async fn unless_cancelled<T>(cancel: &CancellationSignal, future: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        value = future => Some(value),
        () = cancel.cancelled() => None,
    }
}

/// `session_not_found` for the worker session a frozen batch mirrors, which is gone.
fn worker_gone(worker: &str) -> AgentError {
    AgentError::of(
        codes::SESSION_NOT_FOUND,
        format!(
            "the worker session {worker} this batch mirrors is gone: a deletion of the session was cut \
             short (its workers go first); delete the session again"
        ),
    )
}

/// Whether a load's error says that this version cannot read what is stored (damaged, written by
/// a newer version, or not migratable), not that it could not be read now (`state_io`).
fn unreadable(e: &AgentError) -> bool {
    [codes::STATE_CORRUPT, codes::STATE_VERSION_UNSUPPORTED, codes::STATE_MIGRATION_FAILED]
        .contains(&e.code.as_ref())
}

/// A session's state as [`Agent::delete_session`] reads it: one that no load of this version can
/// read ([`unreadable`]), or that cannot be read at all (`state_io`: an unreadable file, a bad
/// flash block), counts as a session without workers or delegation, so it is still deleted
/// (logged): else the app could never be rid of it. Its workers, which only its state names, are
/// left, each listed as a worker whose parent is gone and deleted as any session.
fn readable_for_deletion(
    session_id: &str,
    loaded: Result<Option<AgentState>, AgentError>,
) -> Result<Option<AgentState>, AgentError> {
    match loaded {
        Err(e) if unreadable(&e) || e.code == codes::STATE_IO => {
            log::warn!("arkagent: session {session_id} is deleted unread: {e}");
            Ok(None)
        }
        other => other,
    }
}

/// The refusal of a deletion while a call of this agent holds the session, or was asked for
/// before it and has not finished ([`Agent::delete_session`], [`Agent::deletion_turn`]).
fn deletion_busy(session_id: &str) -> AgentError {
    AgentError::of(
        codes::SESSION_BUSY,
        format!(
            "session {session_id} is in use by this agent (a run, resume, decision, metadata change \
             or deletion, running or asked for before the deletion); cancel its run, or await it, \
             before deleting it"
        ),
    )
}
