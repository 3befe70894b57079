//! Sub-agents: the `delegate_task` tool runs a worker agent with its own history on a copy of the
//! parent's tools without `delegate_task` (no recursive delegation), up to a depth limit. The
//! worker's answer is the tool's result (a worker its tool's or hook's stop ended answers with the
//! successful results it ended on; one whose answer was cut off or filtered gives an error result
//! naming the finish reason). The worker's new session starts with a copy of the parent
//! session's app metadata (its tools see the same `userId`). The worker uses the parent's model,
//! store, approval policy, hooks and services, so its dangerous calls still go through approval:
//!
//! 1. The worker's batch freezes in the worker's session, and `execute` fails with
//!    `worker_awaiting_approval`.
//! 2. The parent's runtime then freezes its own batch on the worker's items
//!    ([`PendingApprovalBatch::worker_session`](crate::approval::PendingApprovalBatch)); the
//!    delegating call stays `started`. The app sees one `approval_required`, on the parent.
//!    Workers that froze beside it (parallel delegations of the same chunk) have their items
//!    offered in the same batch, after the first's
//!    ([`PendingApprovalBatch::item_workers`](crate::approval::PendingApprovalBatch)).
//! 3. A decision on the parent goes to the batch of the worker that holds the item first
//!    ([`PendingApprovalBatch::item_worker`](crate::approval::PendingApprovalBatch::item_worker)),
//!    then to the parent's.
//! 4. On the parent's resume the delegating call runs again. The call is idempotent: it continues
//!    the worker session (one per delegating call and batch) where it stands, so the approved call
//!    runs once, in the worker, and the worker's answer becomes the parent's result. The same holds
//!    after a crash during a delegation: a worker found completed then answers as its live run
//!    did (its state saves the finish reason of its last answer, so a cut-off answer is still an
//!    error, not the results it ended on), and one found failed or aborted answers with the error
//!    that ended it (its state saves it: `AgentState::run_error`), not only with its status. The rest of the parent's batch continues as it stood when
//!    the worker froze (the mirror keeps it): calls already allowed or approved run without being
//!    asked again, and what the parent's after-hooks injected or asked (a stop) is kept.
//! 5. The app may also decide on the worker's session and resume the worker directly. A
//!    decision made there (or the denials of a dismissal of the worker) reaches the parent's
//!    mirror, and the mirror above that, once the worker's session is let go
//!    (`Agent::decide_above`): the parent shows it, and refuses a different decision. The
//!    worker then moves on (completes, or freezes on a later batch); the parent's resume runs the
//!    delegating call again, which reads the worker's answer as the call's result (or mirrors
//!    the worker's new batch). Where the decision could not reach the parent (held by another
//!    process then), the parent still awaits its mirror and stays settleable: a decision on it
//!    finds the worker's batch gone and is recorded on the mirror alone (the worker's own
//!    decision stood), and its resume goes on as above. A dismissal of such a parent does the
//!    same, without the parent's model. This holds at any depth.
//!
//! A worker session stays a worker's when the app acts on it directly: its state records where it
//! comes from ([`AgentState::delegation`](crate::state::AgentState): the delegating session and the
//! worker's depth, saved with its first run), and
//! - [`resume`](Agent::resume) and [`dismiss`](Agent::dismiss) through the app's (top-level)
//!   agent run it on the agent its delegation runs it on, built the same way (`Agent::runner_for`,
//!   level by level for a worker's worker): the parent's tools without `delegate_task`, the
//!   factory applied, the worker's depth and so its depth limit. It never gets the app agent's
//!   `delegate_task`, nor a tool the factory took away. An agent that does not delegate (no
//!   `enable_delegation`: it does not know the factory) refuses with `invalid_state`, before
//!   anything is written; a worker whose depth is now over the limit, with
//!   `delegation_depth_exceeded`. The worker's events then go to the app's sink as they are (no
//!   [`AgentEvent::WorkerEvent`] wrapping: no delegating call runs), and a batch it freezes on
//!   is announced to the hooks' `on_approval_required`, as a top-level session's is. That is
//!   saved with the batch ([`AgentState::approval_announced`](crate::state::AgentState), once the
//!   hooks were told), so the parent, whose delegating call finds the worker frozen on it later
//!   and mirrors it, does not announce it again (its run still ends with its own
//!   `approval_required` event); a batch frozen inside a delegating call, or one whose
//!   announcement a crash cut short, is announced by the parent. The worker
//!   agents of a delegation share the session locks of the agent that built them, so a parent's
//!   delegating call that reaches the worker meanwhile waits for that resume to end and reads
//!   its answer (rather than failing with `session_busy` on its lease). A worker session that
//!   another Agent object or process holds (its lease) is asked for again, with growing pauses,
//!   until it is free or the call is cancelled (the run's cancel, the call's timeout): the
//!   delegating call then reads the worker's answer too, instead of taking `session_busy` for it.
//! - [`approve`](Agent::approve) and [`deny`](Agent::deny) only record a decision (no tool or
//!   model runs), as on any session.
//! - [`run`](Agent::run) with a new message is refused with `invalid_state` naming the parent
//!   session, before anything is written: the parent reads only the answer to the task it
//!   delegated, never the answer to a message the app adds, so that message would be lost to it.
//!   The app talks to the parent session instead.
//!
//! Workers saved before the origin was recorded read as ordinary sessions.
//!
//! The worker's token usage counts in the parent's ([`AgentState::usage`](crate::state::AgentState),
//! so in its outcomes and `RunFinished`): when the delegating call finishes, the usage of its
//! worker session (the worker's own rounds over all its runs, its workers' included) is added to
//! the parent's, once, journaled right after the call's `finished` record. A dismissal of the
//! parent's mirror adds what the worker used until it froze with the batch's end (the worker's
//! run then completes with the denial, without its model: nobody reads its answer any more, so
//! it is not left looking resumable). While the parent is suspended on the mirror, what the
//! frozen workers used is not in its usage yet: [`Agent::usage_so_far`] adds it (a suspended
//! outcome's usage in the bindings). A delegating call that never finishes (its run cancelled,
//! or killed and followed by a new run rather than a resume) adds what its worker, and the
//! workers below it left unfinished, saved, when the next run answers it `interrupted`
//! (journaled with that answer).
//!
//! The worker's events reach the parent's sink wrapped in [`AgentEvent::WorkerEvent`]: before a
//! `delegate_task` call runs, the parent's driver registers a forwarding sink for the call's worker
//! session on the parent agent ([`WorkerEvents::forward`]); the call's `execute` runs the worker
//! with it, and the driver emits what arrives from its own task, in order, before the call's
//! `ToolResult`. Through the same registration the call reports back what the driver needs of
//! the worker (its usage, or its frozen batch; [`WorkerReport`]): each time the delegating call
//! runs, the worker's session is loaded once, by the run or resume that continues it
//! (`Agent::run_worker`), and by nothing else of the delegation.
use super::driver::{Agent, RunOutcome};
use super::events::{AgentEvent, EventSink, NoEvents};
use crate::approval::PendingApprovalBatch;
use crate::error::{codes, AgentError};
use crate::message::{ChatMessage, Usage};
use crate::provider::ToolChoice;
use crate::state::{AgentState, RunStatus};
use crate::tool::{ToolContext, ToolDefinition, ToolExecutor, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// The name of the delegation tool.
pub const DELEGATE_TASK: &str = "delegate_task";

/// Adjusts a worker's tools and configuration before it runs. Whatever it does, the worker never
/// gets the parent's `delegate_task`.
pub trait WorkerFactory: Send + Sync {
    /// Changes the worker's tools (already a copy of the parent's without `delegate_task`).
    fn prepare_tools(&self, _tools: &mut ToolRegistry) {}
}

/// The `delegate_task` definition: one required string, the task.
pub fn delegate_task_definition() -> ToolDefinition {
    ToolDefinition::new(
        DELEGATE_TASK,
        "Delegate a self-contained sub-task to a worker agent and get its answer.",
        json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the worker should do"}},
            "required": ["task"]
        }),
    )
    // Running it again continues the same worker session (see `DelegateTask::execute`).
    .idempotent(true)
}

pub(crate) struct DelegateTask {
    parent: Weak<Agent>,
    factory: Option<Arc<dyn WorkerFactory>>,
}

impl Agent {
    /// Registers `delegate_task` on this agent (see the module docs).
    ///
    /// # Errors
    /// `tool_name_duplicate` when already enabled; `delegation_depth_exceeded` when this agent is
    /// already at the depth limit.
    pub fn enable_delegation(
        self: &Arc<Self>,
        factory: Option<Arc<dyn WorkerFactory>>,
    ) -> Result<(), AgentError> {
        if self.depth() >= self.config().max_delegation_depth {
            return Err(AgentError::of(
                codes::DELEGATION_DEPTH_EXCEEDED,
                format!(
                    "agent depth {} is at the limit {}",
                    self.depth(),
                    self.config().max_delegation_depth
                ),
            ));
        }
        let executor = DelegateTask { parent: Arc::downgrade(self), factory: factory.clone() };
        self.register_any_tool(delegate_task_definition(), Arc::new(executor))?;
        *self.delegation.write().unwrap_or_else(|p| p.into_inner()) = Some(DelegationSetup { factory });
        Ok(())
    }

    /// The agent a worker of this agent runs on, as a delegation builds it: this agent's tools
    /// without `delegate_task`, the factory applied, one level deeper, and delegating in turn
    /// (with the same factory) below the depth limit.
    ///
    /// # Errors
    /// `delegation_depth_exceeded` when the worker's depth would be over the limit.
    fn worker_agent(&self, factory: Option<Arc<dyn WorkerFactory>>) -> Result<Arc<Agent>, AgentError> {
        let depth = self.depth() + 1;
        if depth > self.config().max_delegation_depth {
            return Err(AgentError::of(
                codes::DELEGATION_DEPTH_EXCEEDED,
                format!("depth {depth} is over the limit"),
            ));
        }
        let mut tools = ToolRegistry::with_limits(self.tool_limits());
        self.copy_tools_into(&mut tools, &[DELEGATE_TASK])?;
        if let Some(factory) = &factory {
            factory.prepare_tools(&mut tools);
        }
        // Whatever the factory added, the worker cannot delegate with the parent's tool.
        tools.unregister(DELEGATE_TASK);
        // A `tool_choice` naming a tool the worker does not have (`delegate_task`, or one the
        // factory took away) is not the worker's: it would refuse every run (`config_invalid`).
        let mut config = self.config().clone();
        if let Some(ToolChoice::Function(name)) = &config.tool_choice {
            if tools.definition(name).is_none() {
                config.tool_choice = None;
            }
        }
        let worker = Arc::new(self.worker_builder().tools(tools).config(config).depth(depth).build());
        if depth < self.config().max_delegation_depth {
            worker.enable_delegation(factory)?;
        }
        Ok(worker)
    }

    /// The agent that runs `state`'s session when the app resumes or dismisses it through this
    /// one: `None` (this agent) for a session that is no worker, or a worker at this agent's
    /// depth or above; for a worker below it, the agent its delegation runs it on (built level by
    /// level as [`DelegateTask`] does), so it gets the worker's tools and depth, never this
    /// agent's.
    ///
    /// # Errors
    /// `invalid_state` when this agent does not delegate (`delegate_task` was never enabled: it
    /// does not know the worker's factory); `delegation_depth_exceeded` when the worker's depth is
    /// over this agent's limit now.
    pub(crate) fn runner_for(&self, state: &AgentState) -> Result<Option<Arc<Agent>>, AgentError> {
        let Some(delegation) = state.delegation.as_ref().filter(|d| d.depth > self.depth()) else {
            return Ok(None);
        };
        let Some(factory) = self.delegation_factory() else {
            return Err(AgentError::of(
                codes::INVALID_STATE,
                format!(
                    "session {} is the worker of a delegation by session {}, and this agent does not \
                     delegate (delegate_task is not enabled): it cannot run the worker with the \
                     worker's tools",
                    state.session_id, delegation.parent_session
                ),
            ));
        };
        let mut agent = self.worker_agent(factory.clone())?;
        while agent.depth() < delegation.depth {
            agent = agent.worker_agent(factory.clone())?;
        }
        Ok(Some(agent))
    }

    /// `invalid_state` when `state`'s run stands on a frozen batch that mirrors a worker
    /// session's (its `worker_session`: awaiting the user's decisions, or settling them when a
    /// process died) and this agent does not delegate: only its `delegate_task` continues the
    /// worker. Settled without it, the delegating call would be answered without the worker, the
    /// user's decisions dropped with it, and the worker left awaiting approval for good (an app
    /// update that turned delegation off). Nothing is written: an agent with delegation enabled
    /// continues the session as it stands.
    ///
    /// # Errors
    /// `invalid_state`, as above.
    pub(crate) fn check_continues_workers(&self, state: &AgentState) -> Result<(), AgentError> {
        if self.delegation_factory().is_some()
            || !matches!(state.status, RunStatus::AwaitingApproval | RunStatus::Running)
        {
            return Ok(());
        }
        let Some(worker) = state.pending_approval.as_ref().and_then(|b| b.worker_session.as_ref()) else {
            return Ok(());
        };
        Err(AgentError::of(
            codes::INVALID_STATE,
            format!(
                "session {} is frozen on the batch of its worker session {worker} (a delegate_task \
                 call), and this agent does not delegate (delegate_task is not enabled): it cannot \
                 continue the worker; enable delegation to continue this session",
                state.session_id
            ),
        ))
    }

    /// The factory `enable_delegation` set (`None`: delegation was never enabled).
    pub(super) fn delegation_factory(&self) -> Option<Option<Arc<dyn WorkerFactory>>> {
        self.delegation.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|d| d.factory.clone())
    }
}

/// What `enable_delegation` set up on an agent: its workers' factory.
pub(crate) struct DelegationSetup {
    factory: Option<Arc<dyn WorkerFactory>>,
}

/// The worker's session: one per delegating call, the same when that call runs again in the same
/// batch. The batch id (run and round) is part of it because providers reuse call ids across
/// rounds (`call_0` every round): a later delegation must not continue an earlier worker's history.
pub(crate) fn worker_session_id(parent: &str, batch_call_id: &str, call_id: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [parent, batch_call_id, call_id] {
        // Length-prefixed, so no two triples hash the same input.
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let digest = ctx.finish();
    let mut id = String::with_capacity(33);
    id.push('w');
    crate::approval::push_hex(&mut id, &digest.as_ref()[..16]);
    id
}

/// The links of an agent's running delegations, by worker session (see [`WorkerEvents`]).
#[derive(Default)]
pub(crate) struct WorkerSinks {
    // A std Mutex: held only to insert, look up or remove, never across an await.
    sinks: Mutex<HashMap<String, Arc<WorkerLink>>>,
}

impl WorkerSinks {
    /// The link of the worker of this session (none: the call runs outside a driver).
    fn get(&self, worker_session: &str) -> Option<Arc<WorkerLink>> {
        self.sinks.lock().unwrap_or_else(|p| p.into_inner()).get(worker_session).cloned()
    }
}

/// What a running `delegate_task` call and its parent's driver share: the sink the worker emits
/// to, and what the call reports back besides its result.
pub(crate) struct WorkerLink {
    sink: ForwardSink,
    // A std Mutex: set once by the call, taken once by the driver; never held across an await.
    report: Mutex<WorkerReport>,
}

/// What a delegating call reports to its parent's driver, so the driver reads nothing of the
/// worker's session itself.
#[derive(Default)]
pub(crate) struct WorkerReport {
    /// The worker session's usage when the call finished with a result (the whole delegation's:
    /// one worker session per delegating call).
    pub(crate) usage: Option<Usage>,
    /// The worker's frozen batch when the call failed with `worker_awaiting_approval`.
    pub(crate) frozen: Option<PendingApprovalBatch>,
    /// That frozen batch was announced to the hooks already
    /// ([`AgentState::approval_announced`]): the parent's mirror of it is not announced again.
    pub(crate) announced: bool,
}

impl WorkerLink {
    fn report(&self, outcome: &RunOutcome, state: &AgentState) {
        let mut report = self.report.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            RunOutcome::Finished { usage, .. } => report.usage = Some(*usage),
            RunOutcome::Suspended { batch } => {
                report.frozen = Some(batch.clone());
                report.announced = state.approval_announced;
            }
        }
    }
}

/// Where a worker's events come from: the parent's delegating call and the worker's session.
pub(crate) struct WorkerOrigin {
    pub(crate) call_id: String,
    pub(crate) session_id: String,
}

impl WorkerOrigin {
    /// `event` wrapped as the parent sees it.
    fn wrap(&self, event: AgentEvent) -> AgentEvent {
        AgentEvent::WorkerEvent {
            call_id: self.call_id.clone(),
            session_id: self.session_id.clone(),
            event: Box::new(event),
        }
    }
}

/// Forwards a worker's events, wrapped, into its parent driver's channel.
struct ForwardSink {
    origin: WorkerOrigin,
    tx: UnboundedSender<AgentEvent>,
}

impl EventSink for ForwardSink {
    fn emit(&self, event: AgentEvent) {
        // The receiver lives as long as the batch; a send after it is gone has no one to tell.
        let _ = self.tx.send(self.origin.wrap(event));
    }
}

/// Wraps a worker's events as its delegating call's, straight into the parent's sink: for a worker
/// the parent's own task settles (a dismissal's, see `Run::dismiss_worker`), so no channel is
/// needed.
pub(crate) struct WrappingSink<'a> {
    pub(crate) origin: WorkerOrigin,
    pub(crate) sink: &'a dyn EventSink,
}

impl EventSink for WrappingSink<'_> {
    fn emit(&self, event: AgentEvent) {
        self.sink.emit(self.origin.wrap(event));
    }

    fn flushed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        self.sink.flushed()
    }
}

/// The events of the workers of one batch's `delegate_task` calls, on their way to the parent's
/// sink. A channel, because the parent's sink is borrowed by its driver, whose task polls the
/// calls: the driver drains it while the calls run and before each `ToolResult`. Made only for a
/// batch that delegates.
pub(crate) struct WorkerEvents {
    tx: UnboundedSender<AgentEvent>,
    rx: UnboundedReceiver<AgentEvent>,
}

impl WorkerEvents {
    pub(crate) fn new() -> Self {
        let (tx, rx) = unbounded_channel();
        WorkerEvents { tx, rx }
    }

    /// Registers on `agent` the sink of the worker that the call `call_id` runs in `worker_session`,
    /// until the guard is dropped (the call ended, timed out or was dropped on cancel or abort).
    pub(crate) fn forward<'a>(
        &self,
        agent: &'a Agent,
        worker_session: String,
        call_id: &str,
    ) -> WorkerSinkGuard<'a> {
        let origin = WorkerOrigin { call_id: call_id.to_string(), session_id: worker_session.clone() };
        let sink = ForwardSink { origin, tx: self.tx.clone() };
        let link = Arc::new(WorkerLink { sink, report: Mutex::default() });
        agent
            .worker_sinks
            .sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(worker_session.clone(), Arc::clone(&link));
        WorkerSinkGuard { agent, worker_session, link }
    }

    /// The next worker event, for the driver's select loop (which polls it only with a channel;
    /// without one it never finishes).
    pub(crate) async fn recv(events: &mut Option<WorkerEvents>) -> AgentEvent {
        let Some(events) = events else { return std::future::pending().await };
        match events.rx.recv().await {
            Some(event) => event,
            // Unreachable: `events` holds a sender, so the channel never closes.
            None => std::future::pending().await,
        }
    }

    /// Emits on `sink` every worker event received so far.
    pub(crate) fn drain(events: &mut Option<WorkerEvents>, sink: &dyn EventSink) {
        if let Some(events) = events {
            while let Ok(event) = events.rx.try_recv() {
                sink.emit(event);
            }
        }
    }
}

/// Unregisters a worker's sink when dropped.
pub(crate) struct WorkerSinkGuard<'a> {
    agent: &'a Agent,
    worker_session: String,
    link: Arc<WorkerLink>,
}

impl WorkerSinkGuard<'_> {
    /// What the call reported (once it ended).
    pub(crate) fn take_report(&self) -> WorkerReport {
        std::mem::take(&mut *self.link.report.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for WorkerSinkGuard<'_> {
    fn drop(&mut self) {
        self.agent.worker_sinks.sinks.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.worker_session);
    }
}

#[async_trait]
impl ToolExecutor for DelegateTask {
    async fn execute(
        &self,
        arguments: Map<String, Value>,
        context: ToolContext,
    ) -> Result<ToolResult, AgentError> {
        let parent =
            self.parent.upgrade().ok_or_else(|| AgentError::execution_failed("the parent agent is gone"))?;
        let task = arguments.get("task").and_then(Value::as_str).unwrap_or_default().to_string();
        let worker = parent.worker_agent(self.factory.clone())?;
        let session = worker_session_id(&context.session_id, &context.batch_call_id, &context.call_id);
        let link = parent.worker_sinks.get(&session);
        let sink: &dyn EventSink = match &link {
            Some(link) => &link.sink,
            None => &NoEvents,
        };
        // Running this call again (after the parent's approval of the worker's batch, or after a
        // crash) continues the worker where it stands: the call is idempotent. The worker's
        // session is loaded once, by this.
        let mut pause = BUSY_WORKER_FIRST_PAUSE;
        let (outcome, state) = loop {
            let ran = worker
                .run_worker(
                    &session,
                    &context.session_id,
                    &task,
                    &context.state.metadata,
                    sink,
                    &context.signal,
                )
                .await;
            match ran {
                // Another Agent object or process holds the worker session (the app resumes the
                // worker there): wait for that to end and read its answer, as a resume of this
                // agent's is waited for on the session's lock. A lease is taken without waiting,
                // so it is asked again, until the call is cancelled (the run's cancel, the call's
                // timeout). Nothing was done when it is refused.
                Err(e) if e.code == codes::SESSION_BUSY => {
                    tokio::select! {
                        () = context.signal.cancelled() => {
                            return Err(crate::tool::cancelled_error(&context.signal));
                        }
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(BUSY_WORKER_MAX_PAUSE);
                }
                other => break other?,
            }
        };
        if let Some(link) = &link {
            link.report(&outcome, &state);
        }
        match outcome {
            RunOutcome::Finished { status: RunStatus::Completed, final_text: Some(text), .. }
                if !text.trim().is_empty() =>
            {
                Ok(ToolResult::text(text))
            }
            // No text answer. A worker its own tool's (or hook's) stop ended answers with the
            // results it ended on; one whose answer was cut off or filtered (a finish reason other
            // than `tool_calls`) has no answer: the parent's model must not take "" for one. A
            // worker found completed when this call runs again (after a crash) answers the same,
            // from the finish reason its state saved.
            RunOutcome::Finished { status: RunStatus::Completed, finish_reason, .. } => {
                let results = match finish_reason.as_deref() {
                    None | Some("tool_calls") => trailing_results(&state.messages),
                    Some(_) => None,
                };
                Ok(results.unwrap_or_else(|| {
                    ToolResult::from_error(&AgentError::execution_failed(format!(
                        "the worker finished without an answer (finish reason: {})",
                        finish_reason.as_deref().unwrap_or("none given")
                    )))
                }))
            }
            RunOutcome::Finished { status, error, .. } => {
                Ok(ToolResult::from_error(&error.unwrap_or_else(|| {
                    AgentError::execution_failed(format!("the worker ended with status {status}"))
                })))
            }
            // An error, not a result: the parent's runtime turns it into its own frozen batch that
            // mirrors the worker's (see `worker_awaiting`), so the user decides through the parent.
            RunOutcome::Suspended { batch } => {
                let ids: Vec<&str> = batch.items.iter().map(|i| i.approval_id.as_str()).collect();
                Err(AgentError::of(
                    codes::WORKER_AWAITING_APPROVAL,
                    format!(
                        "the worker session {session} awaits user approval ({}); nothing of its batch ran",
                        ids.join(", ")
                    ),
                ))
            }
        }
    }
}

/// The first pause before a delegating call asks again for a worker session another Agent object
/// or process holds; it doubles up to [`BUSY_WORKER_MAX_PAUSE`].
const BUSY_WORKER_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
const BUSY_WORKER_MAX_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// The result of a worker a stop ended: the tool results its history ends with (before any
/// reminders after-hooks injected after them), oldest first, one per line: the successful ones,
/// or, when every one failed, their errors as an error result. `None` when the history does not
/// end with results.
fn trailing_results(messages: &[ChatMessage]) -> Option<ToolResult> {
    let end = messages
        .iter()
        .rposition(|m| !matches!(m, ChatMessage::User { .. } | ChatMessage::System { .. }))
        .map_or(0, |i| i + 1);
    let messages = &messages[..end];
    let start = messages.iter().rposition(|m| !matches!(m, ChatMessage::Tool { .. })).map_or(0, |i| i + 1);
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for m in &messages[start..] {
        if let ChatMessage::Tool { content, is_error, .. } = m {
            if *is_error {
                failed.push(content.as_str())
            } else {
                ok.push(content.as_str())
            }
        }
    }
    if !ok.is_empty() {
        Some(ToolResult::text(ok.join("\n")))
    } else if !failed.is_empty() {
        Some(ToolResult::error_text(failed.join("\n")))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentBuilder, EventLog};
    use crate::provider::ScriptedModel;
    use crate::state::MemoryStore;

    #[test]
    fn a_worker_session_id_is_stable_across_versions() {
        // Saved parents name their workers by this id: it must never change. The value is
        // SHA-256 over the length-prefixed parts, computed outside this crate (Python hashlib).
        assert_eq!(worker_session_id("parent", "batch-1", "call_7"), "wdc90fa5d163b66b378bfe296879c8406");
        assert_ne!(
            worker_session_id("parent", "batch-1", "call_7"),
            worker_session_id("parent", "batch-1c", "all_7")
        );
    }

    #[test]
    fn a_forwarded_sink_wraps_until_its_guard_is_dropped() {
        let agent =
            AgentBuilder::new(Arc::new(ScriptedModel::new(vec![])), Arc::new(MemoryStore::new())).build();
        let mut events = Some(WorkerEvents::new());
        let guard = events.as_ref().unwrap().forward(&agent, "w-1".into(), "call-1");
        let link = agent.worker_sinks.get("w-1").expect("registered");
        assert!(agent.worker_sinks.get("w-2").is_none());
        link.sink.emit(AgentEvent::TextDelta { delta: "hi".into() });
        drop(guard);
        assert!(agent.worker_sinks.get("w-1").is_none(), "unregistered");
        let log = EventLog::new();
        WorkerEvents::drain(&mut events, &log);
        WorkerEvents::drain(&mut None, &log);
        assert_eq!(
            log.events(),
            [AgentEvent::WorkerEvent {
                call_id: "call-1".into(),
                session_id: "w-1".into(),
                event: Box::new(AgentEvent::TextDelta { delta: "hi".into() }),
            }]
        );
        let wire = serde_json::to_value(&log.events()[0]).unwrap();
        assert_eq!(
            wire,
            json!({"type": "worker_event", "call_id": "call-1", "session_id": "w-1",
                   "event": {"type": "text_delta", "delta": "hi"}})
        );
    }
}
