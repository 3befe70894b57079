//! Durable state: the versioned [`AgentState`], the [`StateEvent`]s a run appends to its journal,
//! the [`StateStore`] trait and its two stores, migrations, recovery and the pairing invariant.
//!
//! # Layout
//! - this file: [`AgentState`] (schema version [`SCHEMA_VERSION`]), [`RunStatus`],
//!   [`ToolRunRecord`], [`StateEvent`] with [`AgentState::apply`], and the [`StateStore`] trait.
//! - [`migrate`][]: ordered migration steps over JSON, from version 1 on.
//! - [`codec`][]: the byte formats of snapshots and journals (checksummed records), as pure functions.
//! - [`file_store`][]: [`FileStore`], the crash-safe default (snapshot + journal per session).
//! - [`memory_store`][]: [`MemoryStore`].
//! - [`metadata`][]: the limits of a session's app metadata ([`check_metadata_entry`]).
//! - [`repair`][]: the pairing invariant and "no tool run twice" on load ([`repair_pairing`]).
//! - [`trim`][]: history trimming for the context window ([`trim_history`]).
//! - [`session_id`][]: session id checks.
//!
//! # How the runtime uses it
//! Apply each event to the in-memory state with [`AgentState::apply`], then `commit(&state,
//! &events)` once per step (all of a step's events go out in one sync). Journal `ToolStarted`
//! before an executor runs and `ToolFinished` after; persist a frozen batch (`ApprovalRequested`)
//! before telling anyone about it; always commit terminal statuses.

pub mod codec;
pub mod file_store;
pub mod memory_store;
pub mod metadata;
pub mod migrate;
pub mod repair;
pub mod session_id;
pub mod trim;

pub use file_store::{
    FileStore, FileStoreOptions, LOCK_DIR, MAX_CACHED_STATES, MAX_OPEN_JOURNALS, TRASH_DIR,
};
pub use memory_store::MemoryStore;
pub use metadata::{check_metadata_entry, MAX_METADATA_BYTES, MAX_METADATA_KEY_LEN, METADATA_VALUE_LIMITS};
pub use repair::{
    check_pairing, mark_failed_results, repair_pairing, tool_result_message, RepairPolicy, RepairReport,
};
pub use session_id::{validate_session_id, MAX_SESSION_ID_LEN};
pub use trim::{approx_tokens, trim_history, trim_history_keeping, TrimmedHistory};

use crate::approval::{ApprovalDecision, PendingApprovalBatch};
use crate::error::{codes, AgentError};
use crate::message::{ChatMessage, Usage};
use crate::tool::{ReadonlyAgentState, ToolResult};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The schema version this code writes.
pub const SCHEMA_VERSION: u32 = 2;

/// Where a session's run stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// No run yet.
    #[default]
    Idle,
    /// A run is going on (or was, when the process died).
    Running,
    /// A batch is frozen until the user decides.
    AwaitingApproval,
    /// Finished with a final answer (or a stop flag).
    Completed,
    /// Cancelled.
    Cancelled,
    /// Failed with an error.
    Failed,
    /// Ended by the loop detector.
    LoopDetected,
    /// Aborted by a hook.
    Aborted,
    /// Ended by the round limit.
    MaxRounds,
}

impl RunStatus {
    /// Its name as the state, the events and the binding spell it (`awaiting_approval`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Idle => "idle",
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Completed => "completed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Failed => "failed",
            RunStatus::LoopDetected => "loop_detected",
            RunStatus::Aborted => "aborted",
            RunStatus::MaxRounds => "max_rounds",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunStatus {
    /// True for the states a run ends in.
    pub fn is_terminal(self) -> bool {
        self != RunStatus::Idle && !self.is_part_way()
    }

    /// True while a run stands part way: `running`, or awaiting approval (what `resume` may
    /// continue, what a deletion must end first, what may be going on elsewhere or cut short).
    pub fn is_part_way(self) -> bool {
        matches!(self, RunStatus::Running | RunStatus::AwaitingApproval)
    }
}

/// What is known about one call of the current batch (for "no tool run twice").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum ToolRunRecord {
    /// Journaled before the executor ran.
    Started {
        /// The tool.
        name: String,
    },
    /// Journaled after, with the result.
    Finished {
        /// The tool.
        name: String,
        /// The result (errors included).
        result: ToolResult,
        /// The call's after-hooks asked to end the run (see [`StateEvent::ToolFinished`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stop_requested: bool,
        /// The messages the call's after-hooks injected, for after the batch's results.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        injected: Vec<ChatMessage>,
    },
}

/// The whole state of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// Schema version ([`SCHEMA_VERSION`] once loaded).
    pub schema_version: u32,
    /// The session id.
    pub session_id: String,
    /// App metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    /// The conversation.
    #[serde(default)]
    pub messages: Vec<ChatMessage>,
    /// The run status.
    #[serde(default)]
    pub status: RunStatus,
    /// The current or last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Model rounds of the current run.
    #[serde(default)]
    pub round: u32,
    /// The frozen batch, while awaiting approval (and while its calls run after approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_approval: Option<PendingApprovalBatch>,
    /// For a worker session: the items of its frozen batch were announced to the hooks'
    /// `on_approval_required` already (by a resume the app made on the worker session itself,
    /// saved once the hooks were told; or by the session below whose batch it mirrors), so a
    /// parent that finds it frozen and mirrors the batch does not announce it again. False for a
    /// batch frozen inside a delegating call (the parent announces it), with no batch, and in
    /// states saved before it existed (the parent then announces, as it did).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval_announced: bool,
    /// Calls of the current batch that started or finished, by call id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_runs: BTreeMap<String, ToolRunRecord>,
    /// The loop detector's window of signatures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loop_window: Vec<String>,
    /// Token usage summed over the session, the usage of the workers its delegations ran
    /// included (each worker's added once, when its delegating call finishes).
    #[serde(default)]
    pub usage: Usage,
    /// The sessions of the workers this session's delegations (`delegate_task`) ran, in the order
    /// they started: deleted with this session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
    /// The last completed batch asked to end the run (a result's `stop`, an after-hook's stop):
    /// the run completes instead of asking the model again, also when it is resumed after the
    /// process died before the run's end was saved. Cleared by the next run or status change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_requested: bool,
    /// The current run's input, as its ordinal among the history's user messages (set when a run
    /// starts; `None` in states saved before it existed). History trimming keeps it: after-hooks
    /// may inject reminders, user messages too, after it. An ordinal, not an index: repair may
    /// remove stray tool messages, never a user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_question: Option<usize>,
    /// The finish reason of the model's last answer in the run that ended, as the run's outcome
    /// reported it ([`RunOutcome::Finished`](crate::agent::RunOutcome::Finished)'s
    /// `finish_reason`), so a session read after its run tells what the live run told: a run that
    /// completed without an answer because it was cut off (`length`) or filtered
    /// (`content_filter`), not because a tool's stop ended it (`tool_calls` or none). `None`
    /// while a run goes on, when no answer came in the run or its last model request got none
    /// (failed, cancelled), and in states saved before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The error that ended the last run (failed, aborted, ...), as its outcome
    /// ([`RunOutcome::Finished`](crate::agent::RunOutcome::Finished)'s `error`) and its
    /// `RunFinished` event reported it (its code, layer and message), so a session read after its
    /// run tells why it ended: a worker found failed when its delegating call runs again (after a
    /// crash) answers its parent with this error, as the live run did. `None` while a run goes
    /// on, for a run that ended without one, and in states saved before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_error: Option<AgentError>,
    /// For the session of a worker (a `delegate_task` call's): the session that delegated and the
    /// worker's depth, recorded with its first run ([`StateEvent::RunStarted`]'s `delegation`).
    /// The runtime runs such a session as its delegation does, also when the app resumes it
    /// directly, and takes no new message on it (see [`crate::agent::Agent::run`]). `None` for
    /// other sessions, and for workers saved before it existed (they read as other sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<Delegation>,
    /// The fixed answers of the runs that reached their round limit, in `messages` (one per run
    /// that ended `max_rounds`: counted with its [`StateEvent::StatusChanged`]): assistant
    /// messages no model gave, left out where the model's answers are counted (the loop
    /// diagnosis's schedule). 0 in states saved before it existed (their fallbacks count as
    /// answers there, as they did).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fallback_answers: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where a worker session comes from ([`AgentState::delegation`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delegation {
    /// The session whose `delegate_task` call runs this worker.
    pub parent_session: String,
    /// The worker agent's depth (1 for the worker of a top-level session, 2 for its worker, ...).
    pub depth: u32,
}

impl AgentState {
    /// A fresh state for a session.
    pub fn new(session_id: impl Into<String>) -> Self {
        AgentState {
            schema_version: SCHEMA_VERSION,
            session_id: session_id.into(),
            metadata: BTreeMap::new(),
            messages: Vec::new(),
            status: RunStatus::Idle,
            run_id: None,
            round: 0,
            pending_approval: None,
            approval_announced: false,
            tool_runs: BTreeMap::new(),
            loop_window: Vec::new(),
            usage: Usage::default(),
            workers: Vec::new(),
            stop_requested: false,
            turn_question: None,
            finish_reason: None,
            run_error: None,
            delegation: None,
            fallback_answers: 0,
        }
    }

    /// The view a tool may read.
    pub fn readonly_view(&self) -> ReadonlyAgentState {
        ReadonlyAgentState {
            schema_version: self.schema_version,
            session_id: self.session_id.clone(),
            metadata: self.metadata.clone(),
        }
    }
}

/// One journal record: a change to the state. Folding a snapshot's events over it gives the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StateEvent {
    /// A run started (status running, round 0, tool runs cleared).
    RunStarted {
        /// The run id.
        run_id: String,
        /// For a worker's first run: where the worker comes from ([`AgentState::delegation`],
        /// kept by later runs). Absent otherwise, so the record reads as it did before the field
        /// existed (and readers that predate it ignore it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delegation: Option<Delegation>,
    },
    /// A model round began.
    RoundStarted {
        /// The round number.
        round: u32,
    },
    /// A message joined the history.
    MessageAppended {
        /// The message.
        message: ChatMessage,
    },
    /// A batch was frozen (status awaiting_approval).
    ApprovalRequested {
        /// The batch.
        batch: PendingApprovalBatch,
        /// Its items were announced to the hooks' `on_approval_required`
        /// ([`AgentState::approval_announced`]). Absent when false, so the record reads as it did
        /// before the field existed (and readers that predate it ignore it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        announced: bool,
    },
    /// One pending item was decided.
    ApprovalDecided {
        /// The item.
        approval_id: String,
        /// Approved or denied.
        decision: ApprovalDecision,
        /// The denial reason.
        deny_reason: Option<String>,
        /// When.
        decided_at_ms: u64,
    },
    /// The frozen batch was settled (its results are in the history).
    ApprovalCleared,
    /// A call is about to run.
    ToolStarted {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// For a `delegate_task` call: the worker's session, added to
        /// [`AgentState::workers`]. (A field, not an event of its own: readers that predate it
        /// ignore it instead of taking the record for corruption.)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_session: Option<String>,
    },
    /// A call finished, or was answered without running (its arguments were cut off at the
    /// model's token limit: `tool_arguments_truncated`; or it was denied, by the policy, a hook
    /// or the user, in a batch whose other calls run).
    ToolFinished {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// The result.
        result: ToolResult,
        /// The call's after-hooks asked to end the run after the batch (a result's own `stop` is
        /// in `result`). Saved with the call, not only with the batch's completion: a process
        /// that dies later in the batch loses neither this nor `injected`, which the resumed run
        /// applies as the batch would have. Absent when false, so the record reads as it did
        /// before the field existed (a reader that predates it ignores it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stop_requested: bool,
        /// The messages the call's after-hooks injected, appended after the batch's results.
        /// Absent when empty, as `stop_requested`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        injected: Vec<ChatMessage>,
    },
    /// The batch's results are in the history; the tool-run records are cleared.
    BatchCompleted {
        /// The batch asked to end the run ([`AgentState::stop_requested`]). Absent when false,
        /// so the record reads as it did before the field existed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stop_requested: bool,
    },
    /// The loop detector's window changed.
    LoopWindow {
        /// The window.
        window: Vec<String>,
    },
    /// Usage to add.
    UsageAdded {
        /// The usage.
        usage: Usage,
    },
    /// The status changed.
    StatusChanged {
        /// The new status.
        status: RunStatus,
        /// For the status a run ends in: the finish reason of the model's last answer in the run
        /// ([`AgentState::finish_reason`]). Absent when there is none, so the record reads as it
        /// did before the field existed (and readers that predate it ignore it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// For the status a run ends in: the error that ended it ([`AgentState::run_error`]), as
        /// the run's outcome reported it. Absent when there is none, so the record reads as it
        /// did before the field existed (and readers that predate it ignore it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<AgentError>,
    },
    /// App metadata set (`Agent::set_metadata`): the key now has this value; `null` removes the
    /// key (a reader that predates removals keeps it with a null value, which a tool reads the
    /// same way as a missing key).
    MetadataSet {
        /// Key.
        key: String,
        /// Value (`null`: the key is removed).
        value: Value,
    },
}

/// Where states live. Usable as `dyn StateStore`.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Loads a session (snapshot + journal, migrated and repaired); `None` when it does not exist.
    ///
    /// The repair is [`repair_pairing`] with the store's [`RepairPolicy`] (by default
    /// [`RepairPolicy::conservative`]). Loading never writes: commit the repair's
    /// [`RepairReport::events`] (or `save_snapshot`) to make it durable.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`, `state_corrupt`, `state_version_unsupported`.
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError>;

    /// Loads a session migrated but without the pairing repair, for a runtime that applies
    /// [`repair_pairing`] itself with its own policy (to re-run idempotent calls). The default
    /// returns [`load`](StateStore::load)'s repaired state, which is safe: repair is idempotent and
    /// the conservative policy never runs anything twice.
    ///
    /// # Errors
    /// As [`load`](StateStore::load).
    async fn load_unrepaired(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        self.load(session_id).await
    }

    /// Whether the store holds anything of the session, without reading or writing it: `false`
    /// means [`load`](StateStore::load) finds nothing and [`delete`](StateStore::delete) has
    /// nothing to remove (`true` does not promise a state: a [`FileStore`] answers for the
    /// session's directory, which may hold only what a first commit cut short left, or for a
    /// stray file standing in its place, which its `delete` removes). The runtime
    /// asks it before taking a [lease](StateStore::lease) for a call that only acts on an
    /// existing session, so a call on a session that does not exist leaves nothing behind (a
    /// lease may create a lock file). The default loads the session.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io` (and the errors of `load` for the default).
    async fn exists(&self, session_id: &str) -> Result<bool, AgentError> {
        Ok(self.load_unrepaired(session_id).await?.is_some())
    }

    /// Durably records events that were applied to `state` (which is the state after them), in one
    /// sync, as one unit: after a crash a load sees all of them or none. The store may fold the journal into a new snapshot of `state` when it sees fit; a
    /// session's first commit (or one after its files became unreadable) writes a snapshot of
    /// `state`, which then holds the events.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`, `state_version_unsupported` (the session on disk was
    /// written by a newer version: nothing is written).
    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError>;

    /// Writes a full snapshot of `state` and clears the journal.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`, `state_version_unsupported`.
    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError>;

    /// Deletes a session; returns whether it existed.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`.
    async fn delete(&self, session_id: &str) -> Result<bool, AgentError>;

    /// The ids of the sessions the store holds, sorted (byte order of the ids), for an app that
    /// shows its conversations or looks for the run a kill cut short. Writes no session and takes
    /// no lease (a store may tidy what is no session: a [`FileStore`]'s first listing sweeps what
    /// killed deletions left in its trash). A session listed may be one no load reads (`state_corrupt`,
    /// `state_version_unsupported`): the listing names what is there, `load` tells what it holds.
    /// Sessions a deletion removed are not listed, nor what holds no state a load would return.
    ///
    /// The default refuses with `state_list_unsupported`, not an empty list: a store written before
    /// this method existed may hold sessions, and an empty list would tell the app it has no
    /// conversations (a chat app would show none, and never offer to continue an interrupted run)
    /// where the truth is "unknown". A refusal with a stable code lets the app say so, or fall back
    /// to ids it keeps itself.
    ///
    /// # Errors
    /// `state_list_unsupported` (the default), `state_io`.
    async fn list(&self) -> Result<Vec<String>, AgentError> {
        Err(AgentError::of(
            codes::STATE_LIST_UNSUPPORTED,
            "this state store does not list its sessions (StateStore::list is not implemented)",
        ))
    }

    /// When the session was last written, in ms since the Unix epoch, when the store knows
    /// (`None` otherwise, and for a session it does not hold): [`AgentState`] holds no time, so it
    /// is the store's to tell. [`FileStore`] answers with the newest modification time of the
    /// session's files, [`MemoryStore`] with the time of its last commit. The default knows
    /// nothing. Never writes.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`.
    async fn updated_at_ms(&self, session_id: &str) -> Result<Option<u64>, AgentError> {
        validate_session_id(session_id)?;
        Ok(None)
    }

    /// Reserves a session for one writer until the lease is dropped. The runtime takes a lease for
    /// each run, resume, decision and deletion, so two agents (or two processes) sharing a store
    /// can never interleave two histories in one session: the second is refused, at once. The
    /// default reserves nothing, which is right for a store only one agent writes (the agent
    /// already serialises its own operations on a session).
    ///
    /// # Errors
    /// `session_busy` while another lease on the session is alive; `session_id_invalid`,
    /// `state_io`.
    async fn lease(&self, session_id: &str) -> Result<SessionLease, AgentError> {
        validate_session_id(session_id)?;
        Ok(SessionLease::default())
    }

    /// Removes what a [lease](StateStore::lease) left of a session that does not exist, when no
    /// lease holds it now: a [`FileStore`]'s lock file that a process killed while it held the
    /// lease left (a deletion killed after it moved the session away, a session whose first
    /// commit never came). Never creates anything, and never removes what a live lease holds.
    /// The runtime asks it when a deletion finds no session
    /// ([`Agent::delete_session`](crate::agent::Agent::delete_session)). The default does
    /// nothing (a store whose leases a killed process cannot leave behind).
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`.
    async fn remove_stale_lease(&self, session_id: &str) -> Result<(), AgentError> {
        validate_session_id(session_id)?;
        Ok(())
    }

    /// Whether a [lease](StateStore::lease) on the session is alive at this moment, whoever holds
    /// it (another store or process on the same root, or a lease of this very store):
    /// `Some(true)` held, `Some(false)` free, `None` when the store cannot tell. A look at one
    /// moment: a lease may be taken or released right after. It takes no lease, creates and
    /// writes nothing, and never makes a concurrent [`lease`](StateStore::lease) fail. The
    /// listing ([`Agent::list_sessions`](crate::agent::Agent::list_sessions)) asks it to tell a
    /// session another agent or process is running now
    /// ([`SessionSummary::busy`](crate::agent::SessionSummary::busy)) from a run a kill cut
    /// short: a killed process holds no lease. [`FileStore`] probes the session's lock file,
    /// [`MemoryStore`] its table of leases. The default answers `None` (unknown), so a store
    /// written before this method existed keeps compiling: its sessions are never listed busy.
    ///
    /// # Errors
    /// `session_id_invalid`, `state_io`.
    async fn lease_held(&self, session_id: &str) -> Result<Option<bool>, AgentError> {
        validate_session_id(session_id)?;
        Ok(None)
    }
}

/// A session reserved for one writer ([`StateStore::lease`]); dropping it releases the session.
#[must_use = "the session is released as soon as the lease is dropped"]
#[derive(Default)]
pub struct SessionLease {
    _held: Option<Box<dyn Send + Sync>>,
}

impl SessionLease {
    /// A lease that holds `guard` (a locked file, an entry in a table...) until it is dropped.
    pub fn holding(guard: impl Send + Sync + 'static) -> Self {
        SessionLease { _held: Some(Box::new(guard)) }
    }
}

impl std::fmt::Debug for SessionLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLease").field("holds", &self._held.is_some()).finish()
    }
}

impl AgentState {
    /// Applies one journal event. The runtime applies each event to its in-memory state and commits
    /// the same events; loading folds the journal with this very function, so both agree.
    pub fn apply(&mut self, event: &StateEvent) {
        match event {
            StateEvent::RunStarted { run_id, delegation } => {
                self.run_id = Some(run_id.clone());
                if delegation.is_some() {
                    self.delegation = delegation.clone();
                }
                self.stop_requested = false;
                self.finish_reason = None;
                self.run_error = None;
                // The run's input is the next user message.
                self.turn_question =
                    Some(self.messages.iter().filter(|m| matches!(m, ChatMessage::User { .. })).count());
                self.status = RunStatus::Running;
                self.round = 0;
                self.tool_runs.clear();
                // A loop is the model repeating itself within one run: a new user message that
                // asks the same again is not one.
                self.loop_window.clear();
            }
            StateEvent::RoundStarted { round } => self.round = *round,
            StateEvent::MessageAppended { message } => self.messages.push(message.clone()),
            StateEvent::ApprovalRequested { batch, announced } => {
                self.pending_approval = Some(batch.clone());
                self.approval_announced = *announced;
                self.status = RunStatus::AwaitingApproval;
            }
            StateEvent::ApprovalDecided { approval_id, decision, deny_reason, decided_at_ms } => {
                if let Some(batch) = self.pending_approval.as_mut() {
                    if let Some(item) = batch.items.iter_mut().find(|i| &i.approval_id == approval_id) {
                        item.decision = *decision;
                        item.deny_reason = deny_reason.clone();
                        item.decided_at_ms = Some(*decided_at_ms);
                    }
                }
            }
            StateEvent::ApprovalCleared => {
                self.pending_approval = None;
                self.approval_announced = false;
            }
            StateEvent::ToolStarted { call_id, name, worker_session } => {
                self.tool_runs.insert(call_id.clone(), ToolRunRecord::Started { name: name.clone() });
                if let Some(worker) = worker_session {
                    if !self.workers.contains(worker) {
                        self.workers.push(worker.clone());
                    }
                }
            }
            StateEvent::ToolFinished { call_id, name, result, stop_requested, injected } => {
                self.tool_runs.insert(
                    call_id.clone(),
                    ToolRunRecord::Finished {
                        name: name.clone(),
                        result: result.clone(),
                        stop_requested: *stop_requested,
                        injected: injected.clone(),
                    },
                );
            }
            StateEvent::BatchCompleted { stop_requested } => {
                self.tool_runs.clear();
                self.stop_requested = *stop_requested;
            }
            StateEvent::LoopWindow { window } => self.loop_window = window.clone(),
            StateEvent::UsageAdded { usage } => self.usage.add(usage),
            StateEvent::StatusChanged { status, finish_reason, error } => {
                if *status == RunStatus::MaxRounds {
                    // The run appended its fixed answer just before.
                    self.fallback_answers = self.fallback_answers.saturating_add(1);
                }
                self.status = *status;
                self.stop_requested = false;
                self.finish_reason = finish_reason.clone();
                self.run_error = error.clone();
            }
            StateEvent::MetadataSet { key, value } => {
                if value.is_null() {
                    self.metadata.remove(key);
                } else {
                    self.metadata.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RunStatus;

    #[test]
    fn a_status_reads_as_it_is_saved() {
        use RunStatus::*;
        for status in
            [Idle, Running, AwaitingApproval, Completed, Cancelled, Failed, LoopDetected, Aborted, MaxRounds]
        {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str(), "{status:?}");
            assert_eq!(status.to_string(), status.as_str());
        }
    }
}
