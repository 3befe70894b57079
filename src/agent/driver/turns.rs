//! Whose turn it is on a session: the per-session locks an agent shares with the worker agents it
//! builds, the places the app reserves for its calls ([`TurnReservation`]), a deletion's turn, the
//! holds a call takes (lock, then the store's lease) and the decisions on their way up to the
//! parents' mirrors.

use super::*;

/// Per session: its lock, and how many calls reserved their turn on it ([`Agent::reserve_turn`])
/// and have not finished. Kept under one std Mutex, never held across an await.
#[derive(Default)]
pub(super) struct Sessions {
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
    pub(super) fn prune_idle(&mut self) {
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
    pub(super) fn tracked(&self) -> usize {
        self.locks.len().max(self.holds.len())
    }
}

/// A decision on its way up ([`Sessions::rising`]): removed when dropped.
pub(super) struct Rising {
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
pub(super) struct QueuedLock {
    lock: Arc<tokio::sync::Mutex<()>>,
    acquire: Acquire,
}

pub(super) type LockGuard = tokio::sync::OwnedMutexGuard<()>;

pub(super) enum Acquire {
    Held(LockGuard),
    Queued(std::pin::Pin<Box<dyn Future<Output = LockGuard> + Send>>),
}

impl QueuedLock {
    /// Joins the line for `lock` now: holds it if it is free, else waits in the lock's queue.
    pub(super) fn join(lock: Arc<tokio::sync::Mutex<()>>) -> Self {
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
    pub(super) async fn acquired(self) -> LockGuard {
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
pub(super) fn reserved_place(session_id: &str, lock: &Arc<tokio::sync::Mutex<()>>) -> Option<QueuedLock> {
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
pub(in crate::agent) struct SessionUse {
    pub(in crate::agent) now: bool,
    // The number of its last hold, or (0, how many entries were pruned) without one.
    pub(in crate::agent) holds: (u64, u64),
}

impl SessionUse {
    /// Whether a call held the session at some moment from `self` to `later`.
    pub(in crate::agent) fn held_until(self, later: SessionUse) -> bool {
        self.now || later.now || self.holds != later.holds
    }
}

/// A session held by one call ([`Agent::hold`]). The fields drop in order: the lease, then the lock.
pub(super) struct SessionHold {
    _lease: crate::state::SessionLease,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

/// The refusal of a deletion while a call of this agent holds the session, or was asked for
/// before it and has not finished ([`Agent::delete_session`], [`Agent::deletion_turn`]).
pub(super) fn deletion_busy(session_id: &str) -> AgentError {
    AgentError::of(
        codes::SESSION_BUSY,
        format!(
            "session {session_id} is in use by this agent (a run, resume, decision, metadata change \
             or deletion, running or asked for before the deletion); cancel its run, or await it, \
             before deleting it"
        ),
    )
}

impl Agent {
    /// Holds a session for one call: this agent's lock on it (its calls on one session wait in
    /// turn; the worker agents it builds share the locks), then the store's lease (another agent
    /// or process gets `session_busy`). Dropped, it releases the lease first, so a call waiting
    /// on the lock never finds the lease still taken.
    pub(super) async fn hold(&self, session_id: &str) -> Result<SessionHold, AgentError> {
        let guard = self.lock_in_turn(session_id).await;
        self.lease_locked(session_id, guard).await
    }

    /// [`hold`](Self::hold) for a call that acts only on an existing session (a resume, a
    /// dismissal, a decision): `session_not_found` when the session does not exist once the
    /// call's turn comes, before the lease (which may create a lock file: nothing is left on disk
    /// for a missing session). Looked at in its turn, not before: a call reserved after a run that
    /// creates the session (`run` then `approve_all` on a new session, neither awaited) waits for
    /// the run, then finds the session it wrote. The call checks again under the lease.
    pub(super) async fn hold_existing(&self, session_id: &str) -> Result<SessionHold, AgentError> {
        let guard = self.lock_in_turn(session_id).await;
        self.check_exists(session_id).await?;
        self.lease_locked(session_id, guard).await
    }

    /// This agent's lock on the session, in the place reserved for the call
    /// ([`reserved_place`]) or else at the end of the line now.
    async fn lock_in_turn(&self, session_id: &str) -> LockGuard {
        let lock = self.session_lock(session_id);
        match reserved_place(session_id, &lock) {
            Some(place) => place.acquired().await,
            None => lock.lock_owned().await,
        }
    }

    /// The rest of a hold, with the session's lock taken: the hold counted, then the store's lease.
    async fn lease_locked(&self, session_id: &str, guard: LockGuard) -> Result<SessionHold, AgentError> {
        {
            let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
            sessions.taken += 1;
            let taken = sessions.taken;
            sessions.holds.insert(session_id.to_string(), taken);
        }
        let lease = self.store.lease(session_id).await?;
        Ok(SessionHold { _lease: lease, _guard: guard })
    }

    pub(in crate::agent) fn session_lock(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
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
        let place = super::super::metadata::with_changes_seen(&lock, |changing| {
            match Arc::clone(&lock).try_lock_owned() {
                Ok(guard) => Some(QueuedLock { lock: Arc::clone(&lock), acquire: Acquire::Held(guard) }),
                Err(_) if changing => Some(QueuedLock::join(Arc::clone(&lock))),
                Err(_) => None,
            }
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
    pub(in crate::agent) fn session_in_use(&self, session_id: &str) -> SessionUse {
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
    pub(super) fn rising(&self, approval_ids: Vec<String>, decision: &UserDecision) -> Rising {
        let mut sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        for id in &approval_ids {
            sessions.rising.insert(id.clone(), decision.clone());
        }
        Rising { sessions: Arc::clone(&self.session_locks), approval_ids }
    }

    /// The decision on its way up on this item, if any ([`Sessions::rising`]).
    pub(super) fn rising_decision(&self, approval_id: &str) -> Option<UserDecision> {
        let sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        sessions.rising.get(approval_id).cloned()
    }

    /// Whether a call reserved its turn on the session and has not finished ([`Agent::reserve_turn`]).
    pub(in crate::agent) fn turn_reserved(&self, session_id: &str) -> bool {
        let sessions = self.session_locks.lock().unwrap_or_else(|p| p.into_inner());
        sessions.reserved.contains_key(session_id)
    }
}
