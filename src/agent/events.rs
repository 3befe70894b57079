//! Events for a UI. Order within a run:
//!
//! 1. `RunStarted` (once, also on resume).
//! 2. Per model round: `TextDelta` / `ReasoningDelta` / `ToolCallStarted` / `ToolCallArgumentsDelta`
//!    / `ToolCallFinished` as the answer streams (a call's `Started` precedes its deltas, which
//!    precede its `Finished`). A stream that fails after it announced a call (an error mid-answer,
//!    its idle timeout) brings no answer: that call gets no `ToolCallFinished` and no `ToolResult`
//!    (it is no call of an answer, nothing records or runs it), and `RunFinished` (`failed`) ends
//!    the run. Such a stream is never retried: the events would come twice.
//! 3. Per tool batch: either `StatePersisted` (the frozen batch, with the answer) then
//!    `ApprovalRequired`, and the run returns suspended; or `StatePersisted` (the answer and the
//!    `started` records of the calls about to run: durable, and [`EventSink::flushed`], before any
//!    executor runs), one
//!    `ToolResult` per call as each finishes (answers known without running come first), and
//!    `StatePersisted` for the batch's results. Calls that run one after another add a
//!    `StatePersisted` before each further call. (Group commit: about two syncs per round.)
//!    A worker session the app resumes (or dismisses) directly that freezes tells the hooks
//!    (`on_approval_required`) first and saves that it did: one more `StatePersisted` (one
//!    journal event), then `ApprovalRequired`, still the run's last event.
//! 4. `RunFinished` last (after the terminal state was persisted), unless the run was suspended,
//!    or a save failed (the store's error, e.g. `state_io` on a full disk, is then the run's own
//!    error: `run`/`resume` return it, and no `RunFinished` says the run ended).
//!
//! Every call of a model answer gets exactly one `ToolResult`, also when the run ends before its
//! batch does (cancelled, or aborted by a hook, while calls ran or before they could): right after
//! the terminal `StatePersisted` and before `RunFinished`, each call of the batch that had none
//! gets one, in call order, with the answer the state gives it when read back (the run records
//! none, the next load's repair does): a finished call's recorded result, else `tool_interrupted`,
//! "may or may not have taken effect" for a call that started, "did not run" for one that did not.
//! The exceptions: the calls of a batch frozen for approval (theirs come when a resume settles
//! it), a run whose save failed (no `RunFinished` either), and the calls a crash cut short, which
//! the repair answers before a resumed run starts (no event tells them).
//!
//! A `delegate_task` call's worker runs between the call's `StatePersisted` (its `started` record)
//! and the call's `ToolResult`: its own events, in this same order, arrive in between, each wrapped
//! in a `WorkerEvent` naming the delegating call and the worker's session (a worker's worker nests
//! one level more). Calls running in parallel interleave. A worker that suspends for approval
//! forwards its `ApprovalRequired` (for information: decide on the parent's own `ApprovalRequired`,
//! which follows), and its resumed run forwards again when the parent resumes. A worker left
//! frozen in a batch whose parent's run ends cancelled or aborted is ended (durably
//! `cancelled`, never continued), and its run says so as any run ends: a segment of its own,
//! `RunStarted` (resumed) then `RunFinished` (`cancelled`), wrapped as the delegating call's,
//! before the parent's `RunFinished` (so does each worker frozen below it, one wrapper deeper).

use crate::approval::PendingApprovalBatch;
use crate::error::AgentError;
use crate::message::{ToolCall, Usage};
use crate::state::RunStatus;
use crate::tool::ToolResult;
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// Something that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// A run started or resumed.
    RunStarted {
        /// The session.
        session_id: String,
        /// The run.
        run_id: String,
        /// True when this continues a suspended or interrupted run.
        resumed: bool,
    },
    /// A piece of the answer's text.
    TextDelta {
        /// The text.
        delta: String,
    },
    /// A piece of the provider's reasoning text.
    ReasoningDelta {
        /// The text.
        delta: String,
    },
    /// The model began a tool call (announced with its whole name: one streamed in pieces once
    /// its arguments start, another call starts or the answer ends).
    ToolCallStarted {
        /// Position in the answer (0-based). A number may be skipped: a streamed call that never
        /// had a `function` is left out of the answer and keeps its position unused, so pair a
        /// call's events by `index` rather than by counting them.
        index: usize,
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A piece of a call's arguments.
    ToolCallArgumentsDelta {
        /// Position in the answer.
        index: usize,
        /// The piece.
        delta: String,
    },
    /// The model finished a tool call: the call as the history records it (arguments the
    /// registry refuses for their size or depth, which the deltas streamed as the model sent them,
    /// are `"{}"` here, as in the state and in every later request; the call never runs).
    ToolCallFinished {
        /// Position in the answer.
        index: usize,
        /// The call.
        call: ToolCall,
    },
    /// A batch is frozen until the user decides (already persisted).
    ApprovalRequired {
        /// The batch.
        batch: PendingApprovalBatch,
    },
    /// A call has its result (errors included): one per call, also for a call a cancel or an
    /// abort cut short (see the order above).
    ToolResult {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// The result.
        result: ToolResult,
    },
    /// State was durably saved by the run (each save its `before_persist_state` hooks were asked
    /// about; see [`AgentHook::before_persist_state`](crate::hook::AgentHook::before_persist_state)
    /// for the saves made outside a run's events).
    StatePersisted {
        /// Journal events written.
        events: usize,
    },
    /// The run ended.
    RunFinished {
        /// How it ended.
        status: RunStatus,
        /// The final answer, if any.
        final_text: Option<String>,
        /// Usage of the session so far (the usage of the workers its delegations ran included).
        usage: Usage,
        /// The finish reason of the model's last answer in this run (see
        /// [`RunOutcome::Finished`](super::RunOutcome::Finished)); left out of the JSON when there
        /// is none.
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The error that ended a failed, aborted or loop-detected run: the one
        /// [`RunOutcome::Finished`](super::RunOutcome::Finished) carries (a provider's error has the
        /// API key removed from its message by the client); left out of the JSON when there is
        /// none. Serialised as `{"layer", "code", "message"}`.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<AgentError>,
    },
    /// An event of the worker a `delegate_task` call of this run is running (see the order above).
    WorkerEvent {
        /// The parent's delegating call.
        call_id: String,
        /// The worker's session.
        session_id: String,
        /// The worker's event (a `WorkerEvent` again for a worker's worker).
        event: Box<AgentEvent>,
    },
}

/// Receives events. Called from the driver's task; keep it quick (forward to a channel or UI).
pub trait EventSink: Send + Sync {
    /// One event.
    fn emit(&self, event: AgentEvent);

    /// Resolves once the events emitted so far have reached whoever consumes them: at once by
    /// default (a sink that takes them as they are emitted). A sink that hands them to another
    /// thread (the NAPI listener, on the JS thread) waits for that. The driver awaits it, unless
    /// the run is cancelled first, before it calls the executors of a chunk of calls: so the
    /// consumer hears the answer and the `StatePersisted` of the calls' `started` records before
    /// any of them runs (step 3 above), even when the executors are called on its thread.
    fn flushed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

/// A sink that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: AgentEvent) {}
}

/// A sink that keeps every event (tests, logs).
#[derive(Debug, Default)]
pub struct EventLog {
    // A std Mutex: held only to push or clone, never across an await.
    events: Mutex<Vec<AgentEvent>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The events so far.
    pub fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl EventSink for EventLog {
    fn emit(&self, event: AgentEvent) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }
}

impl<F: Fn(AgentEvent) + Send + Sync> EventSink for F {
    fn emit(&self, event: AgentEvent) {
        self(event)
    }
}
