//! One run over one session's state ([`Run`]): the model rounds (the request as sent, the answer
//! assembled and recorded), the loop checks and the diagnosis, and the run's end (`finish`).

use super::*;

/// The history as sent, with every system message but a first one as a user message, in its
/// place: a reminder an after-hook injected as a system message lands mid-history (or, trimmed,
/// right after the system prompt), and DeepSeek's reasoner ("the system message ... must be put on
/// the beginning of the message sequence"), Qwen and the Qwen chat templates of vLLM or llama.cpp
/// gateways ("System message must be at the beginning", also for a second one right after the
/// first) answer 400 to a system message anywhere but first; OpenAI reads either. Then
/// [`join_successive_questions`] joins it with a user message beside it. The history itself keeps
/// the system role; without a later system message (the common case) the same `Arc` is returned.
pub(super) fn system_message_first_only(messages: Arc<Vec<ChatMessage>>) -> Arc<Vec<ChatMessage>> {
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
pub(super) fn join_successive_questions(messages: Arc<Vec<ChatMessage>>) -> Arc<Vec<ChatMessage>> {
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

impl<'a> Run<'a> {
    pub(super) fn new(
        agent: &'a Agent,
        state: AgentState,
        sink: &'a dyn EventSink,
        cancel: CancellationSignal,
    ) -> Self {
        let hooks = agent.hooks();
        Run {
            agent,
            state,
            unsaved: Vec::new(),
            sink,
            cancel,
            hooks,
            stop_requested: false,
            finish_reason: None,
            batch_usage: None,
            announces_approvals: agent.depth() == 0,
            announced_elsewhere: HashSet::new(),
            reported: HashSet::new(),
        }
    }

    /// Emits a call's `ToolResult`, once per call of the batch under way.
    pub(super) fn report_result(&mut self, call: &ToolCall, result: &ToolResult) {
        if self.reported.insert(call.id.clone()) {
            self.sink.emit(AgentEvent::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                result: result.clone(),
            });
        }
    }

    pub(super) fn record(&mut self, event: StateEvent) {
        self.state.apply(&event);
        self.unsaved.push(event);
    }

    pub(super) fn run_id(&self) -> String {
        self.state.run_id.clone().unwrap_or_default()
    }

    /// The model's last answer, whose calls a batch is made of (an empty answer if none).
    pub(super) fn last_answer(&self) -> ChatMessage {
        let answer = self.state.messages.iter().rev().find(|m| matches!(m, ChatMessage::Assistant { .. }));
        answer.cloned().unwrap_or_else(|| ChatMessage::assistant_text(""))
    }

    /// The `delegate_task` calls of the model's last answer, answered or not: the batch the run
    /// stands in, or ended in (none once the model answered without calls).
    pub(super) fn batch_delegations(&self) -> Vec<ToolCall> {
        let last = self.state.messages.iter().rev().find(|m| matches!(m, ChatMessage::Assistant { .. }));
        let calls = last.map(ChatMessage::tool_calls).unwrap_or_default();
        calls.iter().filter(|c| c.name == DELEGATE_TASK).cloned().collect()
    }

    /// What the after-hooks of the current batch's calls that finished in an earlier process (or
    /// an earlier run of the batch) asked, from the calls' records, in call order: a stop, and the
    /// messages to append after the batch's results. A mirror's calls answered when its worker
    /// froze are left out: the mirror carries what their hooks asked (its `stop_requested` and
    /// `injected`).
    pub(super) fn recorded_after_hooks(&self) -> (bool, Vec<ChatMessage>) {
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

    /// Completes a batch the process died in before its completion was saved, once repair
    /// answered every call of it (the session still `running`, the history ending with the
    /// batch's results, its tool-run records or its decided batch still there): records the
    /// completion with the stop its results or its hooks asked for (or a dismissal saved on the
    /// batch), clears the batch, then appends the messages its hooks injected (those a mirror
    /// carries, then those of the calls' `finished` records, in call order), as the batch would
    /// have. Both a resume and a new message go through here, so the history the model reads does
    /// not depend on whether the death came before or after the batch's completion commit. Any
    /// other state is left as it is: a cancelled or aborted run's batch is not completed (nothing
    /// is injected then), and a completed batch has no records left to read (never twice).
    pub(super) fn complete_cut_short_batch(&mut self) {
        if phase(&self.state) != Phase::NeedsModel
            || (self.state.pending_approval.is_none() && self.state.tool_runs.is_empty())
        {
            return;
        }
        let (hooks_stop, recorded) = self.recorded_after_hooks();
        let batch = self.state.pending_approval.as_ref();
        let mut injected = batch.map(|b| b.injected.clone()).unwrap_or_default();
        injected.extend(recorded);
        let stop_requested = hooks_stop
            || batch.is_some_and(|b| b.stop_requested || b.dismissed.is_some())
            || self
                .state
                .tool_runs
                .values()
                .any(|r| matches!(r, ToolRunRecord::Finished { result, .. } if result.stop));
        self.record(StateEvent::BatchCompleted { stop_requested });
        if self.state.pending_approval.is_some() {
            self.record(StateEvent::ApprovalCleared);
        }
        for message in injected {
            self.record(StateEvent::MessageAppended { message });
        }
    }

    pub(super) fn ids(&self) -> (String, String, u32) {
        (self.state.session_id.clone(), self.run_id(), self.state.round)
    }

    /// Logs a hook notification's failure (a panicking hook); the run goes on.
    pub(super) fn note_hook_failure(result: Result<(), AgentError>) {
        if let Err(e) = result {
            log::warn!("{e}");
        }
    }

    /// Hears a hook notification out, unless the run is cancelled first (see [`unless_cancelled`]).
    pub(super) async fn notify(&self, notification: impl Future<Output = Result<(), AgentError>>) {
        if let Some(result) = unless_cancelled(&self.cancel, notification).await {
            Self::note_hook_failure(result);
        }
    }

    pub(super) async fn hooks_run_start(&self) {
        let (s, r, round) = self.ids();
        let ctx = HookContext { session_id: &s, run_id: &r, round, signal: &self.cancel };
        self.notify(self.hooks.on_run_start(&ctx)).await;
    }

    /// Durably commits the recorded events. `force` ignores a hook's request to skip (terminal
    /// states, frozen batches and tool starts are always persisted).
    pub(super) async fn persist(&mut self, force: bool) -> Result<(), AgentError> {
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

    pub(super) async fn drive(&mut self) -> Result<RunOutcome, AgentError> {
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

    pub(super) async fn model_round(&mut self) -> Result<Flow, AgentError> {
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
        // The batch takes the tools as they are when it starts (see `tool_batch`).
        Ok(Flow::Continue)
    }

    /// The calls of an answer cut off at the token limit whose arguments are not valid JSON (cut
    /// in the middle) are answered at once with `tool_arguments_truncated`: recorded as finished,
    /// so the batch answers them from their record in call order (durably, like any finished call)
    /// without hooks, approval or a run: there is nothing to run. The other calls run as usual.
    pub(super) fn answer_truncated_calls(&mut self, calls: &[ToolCall]) {
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
    pub(super) fn record_answer(&mut self, call: &ToolCall, result: ToolResult) {
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
    pub(super) async fn call_model(
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

    /// Adds a worker's (or a loop diagnosis's) usage to this session's (nothing when it used none).
    pub(super) fn add_usage(&mut self, usage: Option<Usage>) {
        if let Some(usage) = usage.filter(|u| *u != Usage::default()) {
            self.record(StateEvent::UsageAdded { usage });
        }
    }

    /// The optional LLM diagnosis, on its schedule (rounds counted over the session's model
    /// answers: the fixed answers of runs that reached the round limit are not the model's). The
    /// tokens it used count in the session's usage (saved with the batch's end).
    pub(super) async fn diagnose(&mut self) -> Option<AgentError> {
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
    pub(super) fn observe_loop(&mut self, calls: &[ToolCall]) -> Option<AgentError> {
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

    pub(super) async fn finish(
        &mut self,
        status: RunStatus,
        text: Option<String>,
        error: Option<AgentError>,
    ) -> Result<RunOutcome, AgentError> {
        // The calls of the model's last answer the run ends without answering (a cancel or an
        // abort cut the batch short, before or while they ran) and whose `ToolResult` it did not
        // emit: the state does not record their answers, the next load's repair gives them.
        let cut_short = unanswered_calls(&self.state.messages);
        // The run ends: no delegating call of its batch is continued any more, answered or not
        // (cut short by a cancel or an abort, answered `tool_not_run` by a dismissal before its
        // worker, left by a kill, was reached). A worker of one that stands part way (frozen, or
        // `running` after a kill) is ended, a frozen one's run told ended. Boxed: `finish` is
        // part of every run's future, nested runs (a dismissal settling its workers) included,
        // and this is rarely needed.
        let delegations = self.batch_delegations();
        if !delegations.is_empty() {
            Box::pin(self.end_unread_workers(&delegations)).await;
        }
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
