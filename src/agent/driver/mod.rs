//! The tokio driver: performs the I/O the run state machine asks for (model calls, tool calls,
//! state commits, events) and records what happened as journal events.
//!
//! # Layout
//! - this file: [`Agent`] and its builder, and the calls that start, resume, dismiss, read and
//!   delete sessions;
//! - `turns`: the per-session locks and leases, and the app's reserved turns ([`TurnReservation`]);
//! - `decisions`: the user's approval decisions, carried to worker and parent sessions;
//! - `run`: one run over a session (model rounds, loop checks, the run's end);
//! - `batch`: a run's tool batches (hooks, policy, approval freeze, gates, execution).

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
use crate::message::{
    call_ids, is_blank_text, is_invisible, make_call_ids_unique, unique_call_id, ChatMessage, ToolCall, Usage,
};
use crate::provider::{ChatModel, ChatRequest, ModelEvent, ModelResponse, ToolChoice};
use crate::state::{
    approx_tokens, mark_failed_results, repair_pairing, tool_result_message, trim_history_keeping,
    AgentState, Delegation, RepairPolicy, RunStatus, StateEvent, StateStore, ToolRunRecord,
};
use crate::tool::{
    CallStart, CancellationSignal, RiskLevel, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry,
    ToolResult, ToolServiceRegistry, ToolSnapshot,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

mod batch;
mod decisions;
mod run;
mod turns;

use batch::refuse_arguments_over_limits;
pub use turns::TurnReservation;
use turns::{deletion_busy, reserved_place, Sessions};

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
/// whitespace and invisible characters ([`is_blank_text`]), before anything is written: strict providers refuse a message without text
/// (DashScope: "Content length must be greater than 0"), and the history would send it with every
/// later request of the session.
fn check_input(input: &str, what: &str) -> Result<(), AgentError> {
    if !is_blank_text(input) {
        return Ok(());
    }
    let is = if input.is_empty() {
        "empty"
    } else if input.chars().any(is_invisible) {
        "only whitespace and invisible characters"
    } else {
        "only whitespace"
    };
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
    /// for it either, not even a lease's lock file), but for the lock file a process killed
    /// while it held the session's lease left, which goes unless a lease holds it
    /// ([`StateStore::remove_stale_lease`]). Nor one a call reserved its turn on
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
    /// `interrupted`. So is each of its workers whose run may go on, before it (deepest first):
    /// a deletion cut short never leaves a worker part way below an ended session, where a
    /// resume of it (directly) would run its model and calls for nobody.
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
            // Nothing to delete, and nothing is created for it (a lease's lock file); but a lock
            // file a killed process left (its deletion killed after it moved the session away)
            // goes, unless a lease holds it. Best effort: nothing of the session is left.
            Ok(false) => {
                if let Err(e) = self.store.remove_stale_lease(session_id).await {
                    log::warn!("arkagent: the lock file of deleted session {session_id} stays: {e}");
                }
                return Ok(false);
            }
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
        // Per worker in `found`: whether its run may still go on (it could be written elsewhere),
        // and whether it was read standing part way (it is ended before any worker goes).
        let mut live: Vec<bool> = Vec::new();
        let mut part_way: Vec<bool> = Vec::new();
        let mut next = 0;
        while let Some(worker) = found.get(next).cloned() {
            next += 1;
            let state = readable_for_deletion(&worker, self.store.load(&worker).await)?;
            live.push(state.as_ref().is_none_or(|s| !s.status.is_terminal()));
            part_way.push(state.as_ref().is_some_and(|s| s.status.is_part_way()));
            if let Some(state) = state {
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
        // Every worker whose run may go on is ended too, deepest first and the session last, so
        // a deletion cut short at any point leaves no worker part way below a session that is
        // ended: nothing reads its answer then, and a resume of it (directly) ran its model and
        // calls for nobody (or, for a worker that delegated in turn, its own delegation again
        // from scratch). Each one's lease is held (`leases`: its run may go on); one no load
        // reads is deleted as it stands.
        for (worker, part_way) in found.iter().zip(&part_way).rev() {
            if *part_way {
                self.end_part_way(worker).await?;
            }
        }
        if !found.is_empty() {
            self.end_part_way(session_id).await?;
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
    /// [`delete_session`](Self::delete_session)), and a worker whose answer nobody reads any
    /// more (see [`end_unread_worker`](Self::end_unread_worker)).
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

    /// Durably ends a worker session whose answer nobody reads any more, and the workers below
    /// it whose answers it would have read: its delegating call was answered without it, or the
    /// parent's run that would have continued it ended (cancelled, aborted, dismissed, or any
    /// end of the run of the batch that delegated to it; see `Run::end_unread_workers`), or a
    /// new message answers the call `tool_interrupted` (see
    /// [`end_abandoned_workers`](Self::end_abandoned_workers)). One left part way (`running`
    /// after a kill, or frozen) is made `cancelled`, its frozen batch cleared, as a deletion
    /// does: left so, it was listed interrupted (or awaiting) for good, and its own approve and
    /// resume ran its model and calls for nobody. A worker whose run ended (its answer was
    /// read, or the app settled it directly meanwhile), or that is gone, is left as it stands.
    ///
    /// Ended under its hold: a run of it in this process (the app resumed it directly) is
    /// waited for, never ended under its feet; one held by another process refuses
    /// (`session_busy`). The workers below go first (deepest first), so a kill part way never
    /// leaves a worker part way below one already ended, which nothing would continue.
    ///
    /// A frozen worker's run, whose events ended with `ApprovalRequired`, is told ended as every
    /// run is: on `sink` (the parent's, wrapped as the delegating call's), a segment of its own,
    /// `RunStarted` (resumed) then `RunFinished` (`cancelled`) once its end is saved; the workers
    /// below it end in between, each wrapped once more (as a worker's worker's events come).
    /// Left without it, the app would see that run await approval for good. A worker left
    /// `running` by a kill has no run going on to tell ended.
    ///
    /// # Errors
    /// `session_busy` (held by another process), the store's errors; the workers below are each
    /// ended (best effort) and the first error is returned.
    async fn end_unread_worker(&self, worker: &str, sink: &dyn EventSink) -> Result<(), AgentError> {
        // Looked at first without its hold: a worker whose run ended, the common case, is not
        // waited for.
        let Some(state) = self.read_worker(worker).await.filter(|s| s.status.is_part_way()) else {
            return Ok(());
        };
        let frozen = state.pending_approval.as_ref().filter(|_| state.status == RunStatus::AwaitingApproval);
        let batch_call_id = batch_id_of(&state);
        // Each worker below, with the call of this worker's batch that delegated to it: those of
        // its delegating calls that started and have no answer, and, frozen, the worker its batch
        // mirrors and those frozen beside it.
        let mut below: Vec<(String, String)> = unanswered_started_delegations(&state)
            .into_iter()
            .map(|call_id| (worker_session_id(worker, &batch_call_id, &call_id), call_id))
            .collect();
        for mirrored in frozen
            .into_iter()
            .flat_map(|b| b.worker_session.iter().cloned().chain(sibling_workers(&state, b)))
        {
            if below.iter().all(|(w, _)| *w != mirrored) {
                let call = frozen.and_then(|b| {
                    b.calls.iter().find(|c| {
                        c.call.name == DELEGATE_TASK
                            && worker_session_id(worker, &batch_call_id, &c.call.id) == mirrored
                    })
                });
                below.push((mirrored, call.map(|c| c.call.id.clone()).unwrap_or_default()));
            }
        }
        let told = frozen.is_some();
        if told {
            let run_id = state.run_id.clone().unwrap_or_default();
            sink.emit(AgentEvent::RunStarted { session_id: worker.to_string(), run_id, resumed: true });
        }
        let mut ended = Ok(());
        for (below, call_id) in below {
            let wrapped = WrappingSink { origin: WorkerOrigin { call_id, session_id: below.clone() }, sink };
            let result = Box::pin(self.end_unread_worker(&below, &wrapped)).await;
            ended = ended.and(result);
        }
        let this = async {
            let _held = self.hold(worker).await?;
            // As it stands once held (a run of the app's may have moved it on meanwhile).
            self.end_part_way(worker).await
        };
        ended = this.await.and(ended);
        if told {
            sink.emit(AgentEvent::RunFinished {
                status: RunStatus::Cancelled,
                final_text: None,
                usage: state.usage,
                finish_reason: None,
                error: None,
            });
        }
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
    /// `argument_invalid` for an input that is empty or only whitespace and invisible
    /// characters (Unicode's `Default_Ignorable_Code_Point`: U+200B..U+200F, U+2060..U+206F,
    /// U+FEFF, U+00AD, U+3164, variation selectors, tags...; nothing written: a
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
        // A batch the process died in (its last results supplied by repair) completes first, as
        // it would have: what its hooks injected goes before the new message. (Its stop is moot:
        // the new message asks the model; `RunStarted` clears it.)
        run.complete_cut_short_batch();
        if run.state.pending_approval.is_some() {
            run.record(StateEvent::ApprovalCleared);
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        run.record(StateEvent::RunStarted { run_id: run_id.clone(), delegation });
        if run.state.messages.is_empty() {
            // An empty or blank system prompt is none: strict providers refuse a message without
            // text, and it would go with every request of the session.
            if let Some(system) = self.config.system_prompt.as_ref().filter(|s| !is_blank_text(s)) {
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
    /// agent does not delegate, so it cannot run it with the worker's tools; or a batch that
    /// mirrors a worker's while this agent does not delegate, so it cannot continue the worker:
    /// nothing written, an agent with delegation enabled resumes it),
    /// `delegation_depth_exceeded` (a worker session deeper than this agent's limit), the store's
    /// errors.
    pub async fn resume(
        &self,
        session_id: &str,
        sink: &dyn EventSink,
        cancel: &CancellationSignal,
    ) -> Result<RunOutcome, AgentError> {
        self.check_config()?;
        let _held = self.hold_existing(session_id).await?;
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
        let held = self.hold_existing(session_id).await?;
        let state = self.load_existing(session_id).await?;
        // A worker session this agent cannot run as its delegation does, or a batch mirroring a
        // worker it cannot continue, is refused before any denial is written.
        let runner = self.runner_for(&state)?;
        runner.as_deref().unwrap_or(self).check_continues_workers(&state)?;
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
        agent.check_continues_workers(&state)?;
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
        } else {
            // The batch the process died in, its last results supplied by repair, completes now,
            // with the stop its results or its hooks asked for.
            run.complete_cut_short_batch();
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
        let (abandoned, workers) = self.abandoned_workers(&state, &report.interrupted).await;
        // Nobody reads those workers' answers now: each one left part way is ended before the
        // answer is saved (see `end_abandoned_workers`).
        self.end_abandoned_workers(&workers).await;
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

    /// The workers of `state`'s delegating calls among `calls` (started, never finished), and
    /// the workers their own unfinished delegating calls left, down the chain (each after the one
    /// that delegated to it), with their usage: none of it was counted above them (a worker's
    /// usage is added when its delegating call finishes). A worker session that is gone or
    /// unreadable counts nothing and is not listed.
    async fn abandoned_workers(&self, state: &AgentState, calls: &[String]) -> (Usage, Vec<String>) {
        let mut usage = Usage::default();
        let mut workers = Vec::new();
        // (the session, its batch's id, its unfinished delegating calls), down the chain.
        let mut open = vec![(state.session_id.clone(), batch_id_of(state), delegations_of(state, calls))];
        // Bounded: a chain is at most the delegation depth long.
        let mut loads = 0usize;
        while let Some((session, batch_call_id, ids)) = open.pop() {
            for id in ids {
                let worker = worker_session_id(&session, &batch_call_id, &id);
                loads += 1;
                if loads > 64 {
                    return (usage, workers);
                }
                let Some(loaded) = self.read_worker(&worker).await else { continue };
                usage.add(&loaded.usage);
                workers.push(worker.clone());
                let below = unanswered_started_delegations(&loaded);
                if !below.is_empty() {
                    let batch = batch_id_of(&loaded);
                    open.push((worker, batch, below));
                }
            }
        }
        (usage, workers)
    }

    /// Durably ends the `workers` (see [`abandoned_workers`](Self::abandoned_workers)) whose run
    /// stands part way, deepest first, as [`end_unread_worker`](Self::end_unread_worker) does:
    /// their delegating calls are being answered `tool_interrupted` (a new message on a parent
    /// whose run a dead process cut short mid-delegation, or an agent that cannot continue them),
    /// so their answers have no reader: left `running`, such a worker was listed interrupted for
    /// good, and a resume of it ran its model for nobody (or, without delegation, it could be
    /// neither resumed nor deleted but with its parent). Done before the parent's answer is
    /// saved, so a kill in between leaves the call to answer again; nothing is told (the new
    /// run's `RunStarted` stays its first event). Best effort: a worker that cannot be ended now
    /// (held by another process, a store error) is logged and left.
    async fn end_abandoned_workers(&self, workers: &[String]) {
        for worker in workers.iter().rev() {
            if let Err(e) = self.end_unread_worker(worker, &super::events::NoEvents).await {
                log::warn!(
                    "arkagent: a worker whose delegating call was answered interrupted was not ended: {e}"
                );
            }
        }
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

    /// `session_not_found` when the session does not exist, asked once a call that acts only on
    /// an existing session holds its lock, before it takes its lease ([`hold_existing`]): such a
    /// call on a missing session leaves nothing on disk (a lease may create a lock file). The call
    /// checks again under its lease.
    ///
    /// [`hold_existing`]: Self::hold_existing
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

/// What a call's arguments are recorded as when the registry refuses them for their size or depth:
/// what the provider is sent for them in any case, the request carrying the same limits
/// ([`ChatRequest::argument_limits`], see [`crate::provider::convert::wire_arguments`]).
const EMPTY_ARGUMENTS: &str = "{}";

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
