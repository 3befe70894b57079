//! The user's decisions on a frozen batch (`approve`, `deny`, `approve_all`, `deny_all`): each
//! recorded on its session, carried down to a mirrored worker's session it belongs to and up to
//! the parents whose mirrors still wait on it.

use super::*;

impl Agent {
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
    pub(super) fn check_reason(&self, reason: &str) -> Result<(), AgentError> {
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
    pub(super) async fn decide_here(
        &self,
        session_id: &str,
        approval_id: &str,
        decision: &UserDecision,
    ) -> Result<PendingApprovalBatch, AgentError> {
        let held = self.hold_existing(session_id).await?;
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
    pub(super) async fn decide_all_here(
        &self,
        session_id: &str,
        decision: &UserDecision,
    ) -> Result<PendingApprovalBatch, AgentError> {
        let held = self.hold_existing(session_id).await?;
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
    pub(super) async fn decide_above(
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
    pub(super) async fn decide(
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
    pub(super) async fn decide_held(
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
    pub(super) async fn take_decisions_below(&self, state: AgentState) -> Result<AgentState, AgentError> {
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
    pub(super) async fn decided_below(
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
    pub(super) async fn read_worker(&self, worker: &str) -> Option<AgentState> {
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
    pub(super) async fn worker_usage(&self, worker: &str) -> Option<Usage> {
        self.read_worker(worker).await.map(|s| s.usage)
    }

    /// `session_not_found` when `state` is frozen on (or settling) a batch that mirrors a worker
    /// session which is gone: a deletion cut short (workers go first). Settled, the batch would
    /// run the delegation again from scratch in a new worker (its model asked again, the calls it
    /// had made run again). Asked with `exists` (no load: the worker's resume loads it), at each
    /// level of a nested delegation as its resume reaches it: below the first, the refusal
    /// answers the delegating call above (a tool error) instead of refusing the app's resume.
    pub(super) async fn check_mirrored_worker(&self, state: &AgentState) -> Result<(), AgentError> {
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
    pub(super) async fn mirror_worker(
        &self,
        batch: &PendingApprovalBatch,
    ) -> Result<(bool, Usage), AgentError> {
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
