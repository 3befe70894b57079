//! The app's session metadata ([`Agent::set_metadata`]): one durable writer of
//! [`AgentState::metadata`], which tools read as `ToolContext.state.metadata` (e.g. a `userId`).
//!
//! Decisions:
//! - A key is set, or removed with `null`, one at a time; each change is one journal event
//!   (`MetadataSet`), durable when the call returns.
//! - A run owns its session's state in memory and writes it as it goes, so a change in the middle
//!   of a run could be overwritten by the run's next snapshot, or appear halfway through a batch.
//!   Instead the change is refused at once with `session_busy` while this agent runs, resumes,
//!   decides or deletes the session, and while another agent or process holds its lease. Nothing
//!   is written then; the app sets it again once the run is over. A session suspended for
//!   approval is not held: the change applies and the resumed run sees it. But a batch under
//!   way without a run (frozen on a sub-agent's call, or stopped mid-batch by a dead process)
//!   refuses it with `invalid_state`: the rest of that batch would see it.
//! - A binding takes the session's turn where the app calls ([`Agent::metadata_turn`], then
//!   [`Agent::set_metadata_in_turn`] on its runtime), so a run the app asks for right after a
//!   change it did not await waits for it rather than making it `session_busy`. A change asked
//!   for while another one holds the session (not awaited either) waits behind it: the session
//!   goes from change to change in the order they were asked for, then to the runs waiting.
//! - The reverse order is kept too: a binding reserves a run's, resume's or decision's place where
//!   the app calls it ([`Agent::reserve_turn`]), though the call takes the session only once it
//!   runs. A change asked for after it, while it has not finished, is refused with `session_busy`
//!   ([`Agent::metadata_turn`] and [`Agent::set_metadata`] both look), rather than waiting behind
//!   it: it is the rule for a run that holds the session (a change never waits out a run, which
//!   may take minutes of model and tool calls), and the app sees at once that the change did not
//!   apply, instead of a value that appears (or not) depending on when the run got the lock. A
//!   change that waits behind another change is not handed the session past a reserved run
//!   either: it is refused when asked for, so the queue holds only changes asked for first.
//! - A deletion takes its turn where the app calls too ([`Agent::deletion_turn`]): asked for after
//!   changes that hold the session, it waits behind them (the session is deleted with them); a
//!   change asked for after it is refused with `session_busy`, as after a reserved run.
//! - Setting metadata on a session that does not exist creates it (idle, no messages), as `run`
//!   does: an app sets the user's id before the session's first run.
//! - A worker of `delegate_task` acts for the same user: its new session starts with a copy of
//!   the parent's metadata, saved with the worker's first commit (`MetadataSet` events recorded
//!   before its run starts, see `Agent::run_worker`). A later change of the parent's does not
//!   reach a worker already started (it ran, or froze, for the task as delegated). A change on
//!   the worker session itself is refused with `invalid_state` naming the parent, while the
//!   parent owns it (exists and names it, see `Agent::owning_parent`): a worker frozen on a
//!   dangerous call would otherwise run it, once approved through its parent, for another user
//!   than the one its task was delegated for. A worker whose parent is gone, or whose parent's
//!   id now names a session that never delegated to it, is an ordinary session here.

use super::driver::Agent;
use crate::error::{codes, AgentError};
use crate::state::{check_metadata_entry, validate_session_id, AgentState, RunStatus, StateEvent};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

/// A session's turn for one metadata change ([`Agent::metadata_turn`]): holds the session as a
/// run does, until it is used or dropped; or waits, in order, behind the metadata changes of the
/// session taken before it, which hand the session on to it without letting it go.
#[derive(Debug)]
pub struct MetadataTurn {
    session_id: String,
    /// The address of the session's lock the turn was taken on: the agent (and the workers it
    /// builds, which share its locks) that can use the turn.
    key: usize,
    place: Place,
}

/// Where a [`MetadataTurn`] stands: holding the session, or waiting to be handed it.
#[derive(Debug)]
enum Place {
    Held(Holding),
    Waiting(tokio::sync::oneshot::Receiver<Holding>),
}

/// The session's lock held by a metadata turn. Dropped, it hands the lock to the next turn
/// waiting for it ([`HANDOFFS`]), or lets it go when none waits.
#[derive(Debug)]
struct Holding {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    key: usize,
}

/// The metadata turns waiting for a session's lock, by the lock's address, while a metadata turn
/// holds it (the entry exists exactly then; the holder keeps the lock, so its address, alive). A
/// change asked for while another change holds the session waits its turn here; one asked for
/// while a run, resume, decision or deletion holds it is `session_busy`. Process-wide, as the
/// locks are shared by an agent and the workers it builds.
type Handoffs = HashMap<usize, VecDeque<tokio::sync::oneshot::Sender<Holding>>>;
static HANDOFFS: LazyLock<Mutex<Handoffs>> = LazyLock::new(Default::default);

fn handoffs() -> std::sync::MutexGuard<'static, Handoffs> {
    HANDOFFS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Holding {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else { return };
        let mut handoffs = handoffs();
        let mut next = Holding { guard: Some(guard), key: self.key };
        if let Some(waiting) = handoffs.get_mut(&self.key) {
            while let Some(waiter) = waiting.pop_front() {
                // A waiter whose change was dropped gives it back: the next one gets it.
                match waiter.send(next) {
                    Ok(()) => return,
                    Err(back) => next = back,
                }
            }
        }
        handoffs.remove(&self.key);
        // Let go while no other turn can look (the map's lock is held), so a change asked for now
        // finds either the entry or the session free.
        drop(next.guard.take());
    }
}

/// Runs `look` on whether a metadata change holds `lock` (or is handing it on to the next change
/// waiting), with the changes' handoffs locked: a change takes the lock and enters its handoff,
/// or leaves its handoff and lets the lock go, under the same lock, so what `look` sees of the
/// lock agrees with that answer ([`Agent::deletion_turn`] queues behind the changes).
pub(super) fn with_changes_seen<R>(
    lock: &std::sync::Arc<tokio::sync::Mutex<()>>,
    look: impl FnOnce(bool) -> R,
) -> R {
    let handoffs = handoffs();
    look(handoffs.contains_key(&(std::sync::Arc::as_ptr(lock) as usize)))
}

fn busy(session_id: &str) -> AgentError {
    AgentError::of(
        codes::SESSION_BUSY,
        format!(
            "session {session_id} is in use by this agent (a run, resume, decision or deletion, \
             running or asked for); set its metadata once that is over"
        ),
    )
}

impl Agent {
    /// Sets one key of a session's app metadata to `value`, or removes the key when `value` is
    /// `null`; durable when this returns. Tools see the metadata in `ToolContext.state.metadata`
    /// from the next run (or resume) on, and [`Agent::state`] shows it. A session that does not
    /// exist is created (idle, without messages); removing a key that is not there writes
    /// nothing and creates nothing.
    ///
    /// Refused while the session is held: a run, resume, decision or deletion of this agent on
    /// it, or another agent or process writing it (its lease); and while a call reserved its turn
    /// on it ([`Agent::reserve_turn`]) and has not finished. Nothing is written then; set it
    /// again once the run is over. A session suspended for approval is not held, but one in the
    /// middle of a batch is refused with `invalid_state`: frozen on a sub-agent's call (calls
    /// before it ran, the worker started with a copy of the metadata) or stopped mid-batch (its
    /// process died); the rest of the batch runs on resume and would see the change. Refused on a
    /// worker session of a `delegate_task` call while its parent session owns it (exists and
    /// names it; see the module docs): set it on the parent.
    ///
    /// Limits (see [`crate::state::metadata`]): a key of 1 to 128 bytes without control
    /// characters; a value of at most 64 KiB of compact JSON and 64 levels; at most 256 KiB for
    /// the session's whole metadata.
    ///
    /// # Errors
    /// `session_id_invalid`, `metadata_key_invalid`, `json_too_deep` and `json_too_large` (the
    /// value), `metadata_too_large` (the whole metadata), `session_busy`, the store's errors
    /// (`state_io`, `state_corrupt`, `state_version_unsupported`), `invalid_state` (a worker
    /// session its parent owns, naming the parent; a batch under way; nothing written).
    pub async fn set_metadata(&self, session_id: &str, key: &str, value: Value) -> Result<(), AgentError> {
        validate_session_id(session_id)?;
        // The cheap checks first, so a bad key costs no I/O and takes no lock.
        check_metadata_entry(&Default::default(), key, &value)?;
        if value.is_null() && !self.store().exists(session_id).await? {
            // Nothing to remove, and nothing is created for it (a session, a lease's lock file).
            return Ok(());
        }
        let lock = self.session_lock(session_id);
        let Ok(_guard) = lock.try_lock() else {
            return Err(busy(session_id));
        };
        if self.turn_reserved(session_id) {
            // A run, resume or decision asked for already (it waits for the lock): it comes first.
            return Err(busy(session_id));
        }
        self.commit_metadata(session_id, key, value).await
    }

    /// Takes the session's turn for a metadata change now, where the app asks for it, rather
    /// than when the change runs: a binding that runs the change on its runtime takes the turn on
    /// the caller's thread first, so that a `run` (or a decision) the app asks for right after
    /// waits for the change, as it would had the app awaited it, instead of taking the session
    /// first and making the change `session_busy`. A turn taken while another metadata change
    /// holds the session (one not awaited) waits behind it, in the order they were taken, and
    /// the session goes from one to the next: a run asked for after both sees both. Give the turn
    /// to [`Agent::set_metadata_in_turn`]; dropping it gives the session back (or on to the next).
    ///
    /// # Errors
    /// `session_id_invalid`; `session_busy` while a run, resume, decision or deletion of this
    /// agent holds the session, or while a call reserved its turn on it ([`Agent::reserve_turn`])
    /// and has not finished (even if it has not taken the session yet).
    pub fn metadata_turn(&self, session_id: &str) -> Result<MetadataTurn, AgentError> {
        validate_session_id(session_id)?;
        if self.turn_reserved(session_id) {
            // A run, resume or decision asked for before this change comes first: refused, as
            // while it holds the session (it may not even have taken the lock yet).
            return Err(busy(session_id));
        }
        let lock = self.session_lock(session_id);
        let key = std::sync::Arc::as_ptr(&lock) as usize;
        let mut handoffs = handoffs();
        let place = match lock.try_lock_owned() {
            Ok(guard) => {
                handoffs.insert(key, VecDeque::new());
                Place::Held(Holding { guard: Some(guard), key })
            }
            Err(_) => {
                // Held by a metadata change (it has an entry): wait behind it. Else by a run.
                let waiting = handoffs.get_mut(&key).ok_or_else(|| busy(session_id))?;
                let (tx, rx) = tokio::sync::oneshot::channel();
                waiting.push_back(tx);
                Place::Waiting(rx)
            }
        };
        Ok(MetadataTurn { session_id: session_id.to_string(), key, place })
    }

    /// [`Agent::set_metadata`] in a turn taken with [`Agent::metadata_turn`], on the turn's session
    /// (once the changes taken before it are done).
    ///
    /// # Errors
    /// As [`Agent::set_metadata`], but never `session_busy` for this agent's own runs (the turn
    /// holds the session); `session_busy` still when another agent or process holds its lease.
    /// `argument_invalid` for a turn another agent (one that does not share this agent's session
    /// locks) took: it holds nothing of this agent's, so its runs could write the session
    /// meanwhile; nothing is written, and the turn is given back.
    pub async fn set_metadata_in_turn(
        &self,
        turn: MetadataTurn,
        key: &str,
        value: Value,
    ) -> Result<(), AgentError> {
        let session_id = turn.session_id.as_str();
        if std::sync::Arc::as_ptr(&self.session_lock(session_id)) as usize != turn.key {
            return Err(AgentError::of(
                codes::ARGUMENT_INVALID,
                format!(
                    "the metadata turn on session {session_id} was taken by another agent: take \
                     it with this agent's metadata_turn"
                ),
            ));
        }
        let _held = match turn.place {
            Place::Held(held) => held,
            // The holder always hands the lock on (or to a later waiter when this one is gone).
            Place::Waiting(rx) => rx.await.map_err(|_| busy(session_id))?,
        };
        check_metadata_entry(&Default::default(), key, &value)?;
        if value.is_null() && !self.store().exists(session_id).await? {
            return Ok(());
        }
        self.commit_metadata(session_id, key, value).await
    }

    /// The change itself, with the session's lock held: under the lease, on the state as stored.
    async fn commit_metadata(&self, session_id: &str, key: &str, value: Value) -> Result<(), AgentError> {
        let _lease = self.store().lease(session_id).await?;
        // As stored, without the in-memory pairing repair: this commit adds one event to what is
        // on disk and must not make a repair durable that a later `resume` would do differently.
        let loaded = self.store().load_unrepaired(session_id).await?;
        if let Some(parent) = self.owning_parent(loaded.as_ref()).await? {
            return Err(AgentError::of(
                codes::INVALID_STATE,
                format!(
                    "session {session_id} is the worker of a delegation by session {parent}: its \
                     metadata is the copy of the parent's its task was delegated with; set it on \
                     session {parent} (its next delegations start with it)"
                ),
            ));
        }
        let mut state = loaded.unwrap_or_else(|| AgentState::new(session_id));
        if value.is_null() && !state.metadata.contains_key(key) {
            // Nothing to remove: nothing is written (and no session is created for it).
            return Ok(());
        }
        if let Some((why, way_out)) = batch_under_way(&state) {
            return Err(AgentError::of(
                codes::INVALID_STATE,
                format!(
                    "session {session_id} is in the middle of a batch ({why}): the rest of it would run \
                     with the new metadata; {way_out} first, then set it"
                ),
            ));
        }

        check_metadata_entry(&state.metadata, key, &value)?;
        let event = StateEvent::MetadataSet { key: key.to_string(), value };
        state.apply(&event);
        self.store().commit(&state, std::slice::from_ref(&event)).await
    }
}

/// Why the session's batch is under way, when it is, and what ends it: a batch frozen on a
/// sub-agent's call (the batch's calls before it ran, and the worker started with a copy of the
/// metadata), which a resume or a dismissal ends, or a batch that started and never finished (its
/// process died), which only a resume (or a run) ends: nothing awaits a decision, so there is
/// nothing to dismiss. The rest of either runs on resume, so a metadata change now would show
/// halfway through it.
fn batch_under_way(state: &AgentState) -> Option<(&'static str, &'static str)> {
    match state.status {
        RunStatus::AwaitingApproval
            if state.pending_approval.as_ref().is_some_and(|b| b.worker_session.is_some()) =>
        {
            Some(("frozen on a sub-agent's call", "resume or dismiss it"))
        }
        RunStatus::Running if !state.tool_runs.is_empty() => {
            Some(("its run stopped while it ran", "resume it (or run it with a new message)"))
        }
        _ => None,
    }
}
