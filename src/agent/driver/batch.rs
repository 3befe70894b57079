//! A run's tool batches: before-hooks and the policy, the approval freeze and its announcement,
//! the settling of a frozen batch once decided (re-checked against the registry), the gates and
//! the execution of each call, and the workers frozen under a batch.

use super::*;

/// A call a denied or dismissed batch answers `tool_not_run` that could not have run anyway (an
/// unknown tool, arguments that are no JSON object or fail the schema: the registry's gates,
/// which are pure) is answered with the gate's error instead, as it would have been had the batch
/// run: told only that another call was denied, the model would make it again as it was. The
/// call is checked as the batch would have run it (as its before-hooks left it); nothing runs.
/// The error is not cut here: the settlement holds every answer to `max_result_bytes`
/// ([`step_within_limit`]).
pub(super) fn not_run_or_gate_error(
    step: BatchStep,
    batch: &PendingApprovalBatch,
    tools: &ToolSnapshot,
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
        Err(e) => BatchStep::Answer(AnsweredCall { call: answered.call, result: ToolResult::from_error(&e) }),
        Ok(_) => BatchStep::Answer(answered),
    }
}

/// `step` with its answer (a user's denial, a call not run, an answer planned before the freeze)
/// held to `limit` bytes (`max_result_bytes`) as any answer given instead of running the call
/// ([`answer_within_limit`]): the user's reason is checked alone, without its `denied by user: `
/// prefix and metadata, and the agent that settles a batch may have a lower limit than the one
/// that froze it (an app update). Before, such an answer was recorded and sent over the limit.
pub(super) fn step_within_limit(step: BatchStep, limit: usize) -> BatchStep {
    match step {
        BatchStep::Answer(AnsweredCall { call, result }) => {
            let result = answer_within_limit(result, &call.name, limit);
            BatchStep::Answer(AnsweredCall { call, result })
        }
        step => step,
    }
}

/// The answer of a call a dismissal (`reason`) did not run.
pub(super) fn not_run_dismissed(call: &ToolCall, reason: &str) -> BatchStep {
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
pub(super) fn not_run_unasked(call: &ToolCall, reason: &str) -> BatchStep {
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

/// The answer of a call that started in an earlier process and is not run again by the batch
/// that settles it (its tool idempotent, it was to run again, but `answer` came instead: the
/// user's denial of it, a dismissal, the policy's denial, a call not run). It may have acted
/// before the process died, so it is `tool_interrupted` ("may or may not have taken effect") and
/// says why it did not run again, the answer's other metadata (an approval id) kept. Before, it
/// was answered with the denial alone: the model and the user were told it never ran.
pub(super) fn interrupted_not_run_again(call: &ToolCall, answer: &ToolResult) -> ToolResult {
    let mut result = crate::state::repair::interrupted_result(call).with_stop(answer.stop);
    let text = format!("{}. It was not run again: {}", result.to_model_text(), answer.to_model_text());
    result.contents = vec![crate::tool::ContentPart::text(text)];
    if let (Some(meta), Some(extra)) = (result.metadata.as_mut(), answer.metadata.as_ref()) {
        for (key, value) in extra {
            meta.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    result
}

/// `result` when it takes at most `limit` bytes ([`AgentConfig::max_result_bytes`]); else an
/// error result cut to fit ([`ToolResult::cut_error`]: its code and metadata say what failed,
/// "ask for less" would not), a successful one replaced by the error `tool_result_too_large`,
/// itself cut so under a limit shorter than its message. The stop flag is kept.
pub(super) fn within_size(result: ToolResult, tool: &str, limit: usize) -> ToolResult {
    within_size_of(result, tool, limit, true)
}

/// [`within_size`] of an answer the tool did not give (a hook's or the policy's denial): the
/// model is not told to ask the tool for less, as it never ran.
pub(super) fn answer_within_limit(result: ToolResult, tool: &str, limit: usize) -> ToolResult {
    within_size_of(result, tool, limit, false)
}

pub(super) fn within_size_of(result: ToolResult, tool: &str, limit: usize, ran: bool) -> ToolResult {
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
pub(super) fn refuse_arguments_over_limits(
    tools: &ToolSnapshot,
    calls: &mut [ToolCall],
) -> Vec<(ToolCall, AgentError)> {
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
pub(super) fn call_timeout(
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

/// Gate one as the agent's registry stands when the call reaches it (`current`): the call's batch
/// was planned with the tools as they were when it started (`planned`: the before-hooks saw
/// their definitions, the policy their risk levels), and since then an executor, a hook or the
/// policy may have changed the registry. `Ok` when the call's tool is the same registration in
/// both (or in neither: the planned snapshot's gate answers `tool_not_found`). A tool
/// unregistered since is answered `tool_not_found`; one registered (anew) since is not run,
/// `tool_not_run`: neither the executor it replaced nor its own, which was checked by nobody (a
/// dangerous one would run unasked). The model may call it again, to have it checked as it is.
pub(super) fn registered_as_planned(
    planned: &ToolSnapshot,
    current: &ToolSnapshot,
    name: &str,
) -> Result<(), AgentError> {
    match (planned.get(name), current.get(name)) {
        (Some(planned), Some(current)) if Arc::ptr_eq(planned, current) => Ok(()),
        (None, None) => Ok(()),
        (Some(_), None) => Err(AgentError::of(
            codes::TOOL_NOT_FOUND,
            format!("Tool not found: {name} (it was unregistered while its batch ran; the call did not run)"),
        )),
        (_, Some(_)) => Err(AgentError::of(
            codes::TOOL_NOT_RUN,
            format!(
                "not run: {name} was registered anew while its batch ran, after the call had been \
                 checked (hooks, approval) against the tool as it was; nothing of it ran. Call it \
                 again to have it checked as it is now"
            ),
        )),
    }
}

/// Runs one call: the registry's gates, then the executor with its timeout (none: untimed);
/// returns the call with its outcome. Gate one is passed against the agent's registry as it is
/// then, before the other gates and again right after them, before the executor
/// ([`registered_as_planned`]): `tools` (the batch's snapshot) runs the call only while its tool
/// is still that registration. The timeout bounds the gates and then, apart, the
/// executor: a validation that outlasts it (a slow `pattern`, on the blocking pool) is answered
/// `tool_not_started`, and one cut short by a cancel never starts the executor. A call cut off
/// at a time limit (this one, or an adapter's own: `tool_timeout`) is reported as one that may
/// have taken effect, unless its executor had not been entered by then (`ctx.started`, which the
/// cut gives up: it is never entered after), which is `tool_not_started` whichever limit fired
/// first.
pub(super) async fn run_one(
    agent: &Agent,
    tools: ToolSnapshot,
    call: ToolCall,
    ctx: ToolContext,
    timeout: Option<std::time::Duration>,
) -> (ToolCall, Result<ToolResult, AgentError>) {
    let signal = ctx.signal.clone();
    if let Err(e) = registered_as_planned(&tools, &agent.tools(), &call.name) {
        return (call, Err(e));
    }
    // The gates get the tool's time too, apart from the executor's: a backtracking pattern that
    // outlasts it answers the call as never started, instead of holding the run for as long as
    // the pattern takes.
    let prepared = match tools.prepare_within(&call, &signal, timeout).await {
        Ok(prepared) => prepared,
        Err(e) => return (call, Err(e)),
    };
    // Again once the arguments are checked (on the blocking pool, that may take a while): the
    // executor runs only while its tool is still registered as the batch planned it.
    if let Err(e) = registered_as_planned(&tools, &agent.tools(), &call.name) {
        return (call, Err(e));
    }
    let outcome = match timeout {
        None => prepared.run(ctx).await,
        Some(timeout) => {
            let started = ctx.started.clone();
            match tokio::time::timeout(timeout, prepared.run(ctx)).await {
                Ok(r) => r,
                Err(_) => {
                    signal.cancel(crate::tool::TIMEOUT_REASON);
                    Err(crate::tool::timed_out_error(&call.name, timeout, &started))
                }
            }
        }
    };
    (call, outcome.map_err(may_have_taken_effect))
}

/// What a `tool_timeout` says: the call was cut off, not undone. What it did before (an order
/// placed, a message sent) may stand, and a foreign executor may go on after the cancel; a model
/// told only that it timed out calls it again.
pub(super) fn may_have_taken_effect(mut e: AgentError) -> AgentError {
    const CAVEAT: &str = "it may or may not have taken effect, so check before calling it again";
    if e.code == codes::TOOL_TIMEOUT && !e.message.contains(CAVEAT) {
        e.message = format!("{}; {CAVEAT}", e.message);
    }
    e
}

impl<'a> Run<'a> {
    /// A fresh batch: before-hooks, then the policy; the planner freezes the whole batch if any
    /// call needs confirmation, else its steps run.
    pub(super) async fn tool_batch(&mut self, calls: Vec<ToolCall>) -> Result<Flow, AgentError> {
        self.reported.clear();
        // The tools as they are when the batch starts (after the answer's hooks): the before-hooks
        // see these definitions, the policy these risk levels. Each call is then gated by the
        // registry as it is when the call reaches its gate (`run_one`): a hook, the policy or an
        // executor that unregisters or replaces a tool meanwhile stops its later calls.
        let tools = self.agent.tools();
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
    pub(super) async fn freeze(&mut self, batch: PendingApprovalBatch) -> Result<Flow, AgentError> {
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
    pub(super) async fn announce(&self, batch: &PendingApprovalBatch) {
        let (s, r, round) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        self.notify(self.hooks.on_approval_required(&ctx, batch)).await;
    }

    /// Saves that a worker session's frozen batch was announced (after the hooks were told, so a
    /// crash before leaves it to the parent to announce: never lost, twice only after a crash).
    /// A save as every other ([`persist`](Self::persist): `before_persist_state` inspects it, a
    /// `Skip` is ignored as for every frozen batch, `StatePersisted` reports it). A failure is
    /// logged: the batch stands unmarked, and the parent may announce it again.
    pub(super) async fn save_announced(&mut self, batch: &PendingApprovalBatch) {
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
    pub(super) async fn settle_batch(&mut self, unanswered: Vec<ToolCall>) -> Result<Flow, AgentError> {
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
            // A call of it that started before (a process died while the batch ran) may have
            // taken effect: the calls a denial does not run are not told none of it ran.
            let part_run =
                batch.assistant_message.tool_calls().iter().any(|c| self.state.tool_runs.contains_key(&c.id));
            let settled = if part_run { batch.settle_part_run()? } else { batch.settle()? };
            match (settled, &batch.dismissed) {
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
        // `not_run_or_gate_error`); every answer is held to this agent's limit.
        let limit = self.agent.config.max_result_bytes;
        let steps: Vec<BatchStep> = steps
            .into_iter()
            .map(|step| step_within_limit(not_run_or_gate_error(step, &batch, &tools), limit))
            .collect();
        // Calls that ran (or started) in an earlier process keep what the journal knows: a
        // finished call its result; a started one is never run again unless its tool is
        // idempotent (repair leaves exactly those unanswered), else it "may or may not have
        // taken effect", also when the batch answers it instead of running it again (denied or
        // dismissed after it started).
        let steps = steps
            .into_iter()
            .filter(|step| open.contains(step.call().id.as_str()))
            .map(|step| match (self.state.tool_runs.get(&step.call().id), step) {
                (Some(ToolRunRecord::Finished { result, .. }), step) => {
                    BatchStep::Answer(AnsweredCall { call: step.call().clone(), result: result.clone() })
                }
                (Some(ToolRunRecord::Started { .. }), step)
                    if !tools.definition(&step.call().name).is_some_and(|d| d.idempotent) =>
                {
                    let result = crate::state::repair::interrupted_result(step.call());
                    BatchStep::Answer(AnsweredCall { call: step.call().clone(), result })
                }
                (Some(ToolRunRecord::Started { .. }), BatchStep::Answer(AnsweredCall { call, result })) => {
                    let result =
                        answer_within_limit(interrupted_not_run_again(&call, &result), &call.name, limit);
                    BatchStep::Answer(AnsweredCall { call, result })
                }
                (_, step) => step,
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
    /// word is in the plan). `None` for a call the batch no longer settles (not in `open`) or
    /// that does not run now ([`runs_now`](Self::runs_now): it finished, or started and is
    /// answered interrupted). A call of an idempotent tool that started in an earlier process
    /// runs again, so it is asked about as one that never started: before, it ran again unasked
    /// although its tool had become dangerous.
    pub(super) async fn recheck_planned_run(
        &self,
        tools: &ToolSnapshot,
        open: &HashSet<&str>,
        call: &ToolCall,
    ) -> Option<BatchCallInput> {
        if !open.contains(call.id.as_str()) || !self.runs_now(tools, call) {
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

    /// Whether `call`, of the batch being settled, runs when its plan says so: it has no record,
    /// or it started in an earlier process and its tool, as registered now, is idempotent (it
    /// runs again; any other started call is answered interrupted, a finished one with its
    /// result: see [`settle_batch`](Self::settle_batch)).
    pub(super) fn runs_now(&self, tools: &ToolSnapshot, call: &ToolCall) -> bool {
        match self.state.tool_runs.get(&call.id) {
            None => true,
            Some(ToolRunRecord::Started { .. }) => tools.definition(&call.name).is_some_and(|d| d.idempotent),
            Some(ToolRunRecord::Finished { .. }) => false,
        }
    }

    /// `input` with the answer a hook or the policy gave the call (a `Deny`, the policy's
    /// `denied by policy: <reason>`) held to `max_result_bytes` as a tool's result is
    /// ([`within_size`]): it goes to the model as the call's result and is saved with the session.
    /// It is cut rather than refused: the hook and the policy are the app's code, and the run
    /// has nobody to give the refusal to.
    pub(super) fn answer_within_size(&self, mut input: BatchCallInput) -> BatchCallInput {
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
    pub(super) async fn recheck_mirrored(
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
                // A delegating call that started continues its worker (frozen under this batch, or
                // beside the one it mirrors), which holds the user's decisions on its own calls.
                BatchStep::Execute(call)
                    if !approved.contains(&call.id) && !started_delegation(&self.state, &call.id) =>
                {
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
    pub(super) async fn execute(
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
            // Whether each call's executor was entered: a run that ends mid-chunk gives up the
            // calls it came before, and answers them as not run (see `ended_mid_chunk`).
            let starts: Vec<(&ToolCall, CallStart)> =
                chunk.iter().map(|call| (call, CallStart::new())).collect();
            for call in chunk {
                let worker_session = self.worker_of(&batch_call_id, call).filter(|_| delegates);
                self.record(StateEvent::ToolStarted {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    worker_session,
                });
            }
            self.persist(true).await?;
            // The sink's consumer hears what was emitted so far (the answer, the `started` records
            // saved) before any executor of the chunk is called (the app's listener and its
            // executors share the JS thread, through separate queues).
            unless_cancelled(&self.cancel, self.sink.flushed()).await;
            // The chunk's calls hear the run's cancel, and an abort by a hook (below).
            let chunk_cancel = self.cancel.child();
            let mut running: FuturesUnordered<_> = starts
                .iter()
                .map(|(call, started)| {
                    let ctx = ToolContext {
                        session_id: self.state.session_id.clone(),
                        state: Arc::clone(&view),
                        batch_call_id: batch_call_id.clone(),
                        call_id: call.id.clone(),
                        signal: chunk_cancel.child(),
                        services: Arc::clone(&self.agent.services),
                        started: started.clone(),
                    };
                    let timeout = call_timeout(call, tools.definition(&call.name), &self.agent.config);
                    let forward = self.worker_of(&batch_call_id, call).filter(|_| delegates).map(|worker| {
                        workers.get_or_insert_with(WorkerEvents::new).forward(self.agent, worker, &call.id)
                    });
                    let run = run_one(self.agent, tools.clone(), (*call).clone(), ctx, timeout);
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
                        return self.ended_mid_chunk(running, &starts, delegations, &mut workers, None).await;
                    }
                    break;
                };
                delegations.remove(&call.id);
                let result = match outcome {
                    Ok(r) => r,
                    // A cancelled run is not backfilled: the call stays `started`.
                    Err(e) if e.is_cancelled() && self.cancel.is_cancelled() => {
                        return self.ended_mid_chunk(running, &starts, delegations, &mut workers, None).await;
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
                    return self.ended_mid_chunk(running, &starts, delegations, &mut workers, None).await;
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
                    return self.ended_mid_chunk(running, &starts, delegations, &mut workers, Some(e)).await;
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
    /// forwarded; the workers of the batch left part way are ended `cancelled` too (by `finish`). Other tools
    /// are not waited for: they are dropped with the chunk and stay `started`, as before, but for
    /// the calls of the chunk whose executor was never entered (`starts`): given up, they never
    /// start, and are answered as not run.
    pub(super) async fn ended_mid_chunk<S, R>(
        &mut self,
        mut running: S,
        starts: &[(&ToolCall, CallStart)],
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
        // A call of the chunk the end came before (a parallel call the cancel reached first, a
        // binding's executor whose JS thread had not reached it) never ran, and given up now it
        // never will: answered as not run, not as one that "may or may not have taken effect".
        // Its `started` record, saved before the chunk ran, stands until the run's end is saved
        // with this answer: a process that dies first still reads it as one that may have acted.
        for (call, started) in starts {
            let recorded_started =
                matches!(self.state.tool_runs.get(&call.id), Some(ToolRunRecord::Started { .. }));
            if recorded_started && started.give_up() {
                self.record_answer(call, crate::state::repair::not_started_result(call));
            }
        }
        // A worker frozen in the batch (its delegating call stays `started`), or one a kill left
        // `running` that the batch had not reached, is ended by `finish`, as the workers still
        // running ended with the cancel.
        let status = if aborted.is_some() { RunStatus::Aborted } else { RunStatus::Cancelled };
        self.finish(status, None, aborted).await.map(Flow::Done)
    }

    /// Ends the workers of the batch's delegations `calls` that stand part way (frozen, or
    /// `running` after a kill): the run that would continue them ends (see
    /// [`Agent::end_unread_worker`]). A frozen one's run is told ended through this run's sink,
    /// wrapped as its delegating call's. Best effort: one that cannot be ended now is logged and
    /// left.
    pub(super) async fn end_unread_workers(&self, calls: &[ToolCall]) {
        let batch_call_id = batch_id_of(&self.state);
        for call in calls {
            let Some(worker) = self.worker_of(&batch_call_id, call) else { continue };
            let origin = WorkerOrigin { call_id: call.id.clone(), session_id: worker.clone() };
            let sink = WrappingSink { origin, sink: self.sink };
            if let Err(e) = self.agent.end_unread_worker(&worker, &sink).await {
                log::warn!("arkagent: a worker of a batch whose run ended was not ended: {e}");
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
    pub(super) async fn dismiss_worker(&self, worker: &str, unanswered: &[ToolCall], reason: &str) {
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
    pub(super) fn worker_of(&self, batch_call_id: &str, call: &ToolCall) -> Option<String> {
        (call.name == DELEGATE_TASK)
            .then(|| worker_session_id(&self.state.session_id, batch_call_id, &call.id))
    }

    /// The frozen batch of the worker a `delegate_task` call suspended, as this session's batch
    /// (see [`PendingApprovalBatch::worker_session`]): the one the call reported (`frozen`), else
    /// the one its session holds. `None` when there is no undecided batch (the error then becomes
    /// the call's result, as any tool error does).
    pub(super) async fn worker_awaiting(
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
}
