//! The `Agent` class: a core [`Agent`] built from an `AgentConfigObject`, with ArkTS tools, hooks,
//! an event listener and a state store. Each method is one core call plus one error conversion;
//! the async ones run on the module's runtime under [`spawn_guarded`].
//!
//! - Provider: a preset (`openai`, `deepseek`, `zhipu`, `qwen`, `moonshot`, `custom` and their
//!   aliases) becomes an [`OpenAiCompatibleClient`]; `scripted` replays `scriptJson` with a
//!   [`ScriptedModel`]. The API key goes straight into the client's [`ApiKey`] and is registered
//!   with the process logger as a secret (redacted from every log line).
//! - Store: `stateDir` -> [`FileStore`] (a directory per session), else [`MemoryStore`].
//! - `loopDiagnosis` -> a [`ModelLoopDiagnoser`] on the agent's own model (same provider, endpoint
//!   and key, the agent's `maxTokens`), on the schedule the object gives (core defaults for what it
//!   leaves out).
//! - Hooks and tools may be added at any time; a run uses those present when it starts.
//! - Timeouts: `toolTimeoutMs` is the timeout of executors whose definition has none, and of each
//!   hook call (and of each approval policy call, unless `setApprovalPolicy` is given its own).
//!   `connectTimeoutMs`, `firstByteTimeoutMs`, `idleTimeoutMs`, `totalTimeoutMs` and
//!   `afterFinishTimeoutMs` are the provider's (and the loop diagnosis's) HTTP timeouts, on top of
//!   the model's defaults ([`AgentConfigObject::provider_timeouts`]); checked for `scripted` too,
//!   which has no HTTP.
//! - Approval policy: the core default until `setApprovalPolicy(fn)` installs the app's function
//!   (see `policy` for its contract, blocking and fail-closed rules); `null` restores the default.
//! - The `CancellationHandle` given to `run`/`resume` is the run's signal: cancelling it stops the
//!   model request (the HTTP stream is dropped) and reaches executors through `context.signal`.

use super::dto::{
    to_json, AgentConfigObject, ApprovalIdArg, Checked, Id, InputArg, LoopDiagnosisObject, MetadataKeyArg,
    ReasonArg, RunOutcomeObject, SessionIdArg, Text, ToolDefinitionObject, ToolNameArg, ValueJsonArg,
};
use super::error::{
    check_new, check_this, guard, guard_napi, spawn_guarded, spawn_guarded_keeping, Arg, ArgRef, ClassTag,
};
use super::events::{EventListener, RunEvents};
use super::hook::JsHook;
use super::policy::{JsApprovalPolicy, PolicySlot};
use super::signal::CancellationHandle;
use crate::agent::{Agent, AgentBuilder, RunOutcome, TurnReservation};
use crate::error::{codes, AgentError};
use crate::loop_detect::ModelLoopDiagnoser;
use crate::provider::{
    ApiKey, ChatModel, ChatRequest, ClientConfig, ModelEventStream, ModelResponse, OpenAiCompatibleClient,
    ProviderPreset, ScriptedModel, Timeouts,
};
use crate::state::{FileStore, MemoryStore, StateStore};
use crate::tool::CancellationSignal;
use napi_derive_ohos::napi;
use napi_ohos::bindgen_prelude::{Function, Object, PromiseRaw, This, Unknown};
use napi_ohos::{Env, ValueType};
use std::sync::Arc;
use std::time::Duration;

/// The provider name of the offline replaying model.
const SCRIPTED: &str = "scripted";

fn config_invalid(message: String) -> AgentError {
    AgentError::of(codes::CONFIG_INVALID, message)
}

/// The model of a config: the scripted model, or the HTTP client of a preset with `timeouts`.
///
/// # Errors
/// `config_invalid` (naming the field), `insecure_url`, `provider_tls`.
fn model(config: &mut AgentConfigObject, timeouts: Timeouts) -> Result<Arc<dyn ChatModel>, AgentError> {
    if config.provider.trim().eq_ignore_ascii_case(SCRIPTED) {
        let script = config
            .script_json
            .as_deref()
            .ok_or_else(|| config_invalid("scriptJson: required for the scripted provider".into()))?;
        let answers: Vec<ModelResponse> = serde_json::from_str(script)
            .map_err(|e| config_invalid(format!("scriptJson: not a JSON array of model answers: {e}")))?;
        return Ok(Arc::new(ScriptedModel::new(answers).without_requests()));
    }
    let preset = ProviderPreset::from_name(&config.provider)
        .map_err(|e| config_invalid(format!("provider: {}", e.message)))?;
    let key = config.api_key.take().unwrap_or_default();
    let secret = crate::logging::register_secret(&key);
    let mut client = ClientConfig::new(preset, config.model.take().unwrap_or_default(), ApiKey::new(key));
    if let Some(url) = config.base_url.take() {
        client = client.with_base_url(url);
    }
    client = client.with_timeouts(timeouts);
    config.provider_options(&mut client);
    client.allow_insecure_http = config.allow_insecure_http.unwrap_or(false);
    if let Some(pem) = config.extra_roots_pem.take() {
        client = client.with_extra_root_pem(pem);
    }
    // `js_error` names the field `apiKey` in the message.
    client.check_api_key()?;
    Ok(Arc::new(KeyedModel { client: OpenAiCompatibleClient::new(client)?, _secret: secret }))
}

/// The HTTP client of an Agent with its API key's registration with the process logger: the key
/// is redacted from logs and app texts for as long as something can use it (the Agent, a run still
/// going after the Agent was collected, its workers and loop diagnoser), and no longer after.
struct KeyedModel {
    client: OpenAiCompatibleClient,
    _secret: crate::logging::SecretRegistration,
}

#[async_trait::async_trait]
impl ChatModel for KeyedModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        self.client.complete(request).await
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        self.client.stream(request).await
    }
}

/// The directory `stateDir` names, made absolute once: a relative one is taken from the working
/// directory when the agent is made, not at each call (a `chdir` later would split its sessions
/// over two directories, each with its own locks).
///
/// # Errors
/// `config_invalid` for an empty name, one holding a NUL, or one that names something other than
/// a directory (a file: every call would fail with `state_io` about a path inside it).
fn state_root(dir: &str) -> Result<std::path::PathBuf, AgentError> {
    if dir.trim().is_empty() {
        return Err(config_invalid("stateDir: empty".into()));
    }
    if dir.contains('\0') {
        return Err(config_invalid("stateDir: holds a NUL character, which no path can".into()));
    }
    let root = std::path::absolute(dir)
        .map_err(|e| config_invalid(format!("stateDir: {dir:?} cannot be made absolute: {e}")))?;
    match std::fs::metadata(&root) {
        Ok(m) if !m.is_dir() => {
            Err(config_invalid(format!("stateDir: {} exists and is not a directory", root.display())))
        }
        // Absent (made at the first save), a directory, or unreadable (a later call says why).
        _ => Ok(root),
    }
}

/// The core agent of a config, deciding approvals through `policy`, and its tool (and hook)
/// timeout.
///
/// # Errors
/// As [`model`], and `config_invalid` for a bad limit or an empty `stateDir`.
fn core_agent(
    mut config: AgentConfigObject,
    policy: Arc<PolicySlot>,
) -> Result<(Arc<Agent>, Duration), AgentError> {
    let agent_config = config.agent_config()?;
    let max_tokens = agent_config.max_tokens;
    let diagnosis = config.loop_diagnosis.take().map(Checked::known).transpose()?;
    let diagnosis = diagnosis.as_ref().map(LoopDiagnosisObject::schedule).transpose()?;
    let timeouts = config.provider_timeouts()?;
    let model = model(&mut config, timeouts)?;
    let store: Arc<dyn StateStore> = match config.state_dir.as_ref() {
        Some(dir) => Arc::new(FileStore::new(state_root(&dir.0)?)),
        None => Arc::new(MemoryStore::new()),
    };
    let timeout = agent_config.tool_timeout;
    let mut builder = AgentBuilder::new(Arc::clone(&model), store).config(agent_config).policy(policy);
    if let Some(schedule) = diagnosis {
        // The agent's own model and provider (same endpoint and key) reads the history, within
        // the agent's token limit.
        let diagnoser = ModelLoopDiagnoser::new(model).with_max_tokens(max_tokens);
        builder = builder.loop_diagnoser(Arc::new(diagnoser), schedule);
    }
    let agent = Arc::new(builder.build());
    if config.enable_delegation.unwrap_or(false) {
        agent.enable_delegation(None)?;
    }
    Ok((agent, timeout))
}

/// The signal of a run: the app's handle, or one nobody cancels.
fn run_signal(signal: Option<&CancellationHandle>) -> CancellationSignal {
    signal.map_or_else(CancellationSignal::new, |h| h.signal().clone())
}

/// The outcome object; a suspended outcome carries no usage, so the session's is read, with what
/// the workers its batch was frozen on used until then ([`Agent::usage_so_far`]).
///
/// # Errors
/// The store's errors.
async fn outcome_object(
    agent: &Agent,
    session_id: &str,
    outcome: RunOutcome,
) -> Result<RunOutcomeObject, AgentError> {
    let usage = match &outcome {
        RunOutcome::Finished { usage, .. } => *usage,
        RunOutcome::Suspended { .. } => agent.usage_so_far(session_id).await?.unwrap_or_default(),
    };
    Ok(RunOutcomeObject::new(outcome, usage))
}

/// `run`, its `signal` cancelled (as the app's `cancel()` would: the state saved, the session let
/// go) should the Agent's environment be torn down first (`gone`): nobody is left to answer its
/// executors, hooks or policy, nor to hear its outcome.
async fn cancelled_with_env<F: std::future::Future>(
    run: F,
    gone: &CancellationSignal,
    signal: &CancellationSignal,
) -> F::Output {
    tokio::pin!(run);
    tokio::select! {
        biased;
        outcome = &mut run => outcome,
        () = gone.cancelled() => {
            signal.cancel(super::env_life::GONE_REASON);
            run.await
        }
    }
}

fn same<T>(value: T) -> T {
    value
}

/// What a run promise does ([`JsAgent::run_promise`]).
enum RunCall {
    /// `run` on this user message.
    Run(String),
    /// `resume`.
    Resume,
    /// `dismiss` with this reason.
    Dismiss(String),
}

impl JsAgent {
    /// The promise of a decision on `session_id`'s batch (`approve`, `deny`, `approveAll`,
    /// `denyAll`): reserved now, and kept until settled, as a run is (see `run_promise`); resolves
    /// to the batch JSON.
    fn decision_promise<'env, F>(
        &self,
        env: &'env Env,
        session_id: String,
        decide: impl FnOnce(Arc<Agent>, String) -> F,
    ) -> napi_ohos::Result<PromiseRaw<'env, String>>
    where
        F: std::future::Future<Output = Result<crate::approval::PendingApprovalBatch, AgentError>>
            + Send
            + 'static,
    {
        let core = Arc::clone(&self.core);
        guard_napi(env, || {
            let reservation = core.reserve_turn(&session_id);
            let kept = reservation.as_ref().ok().map(TurnReservation::kept);
            let decided = decide(core, session_id);
            spawn_guarded_keeping(
                env,
                kept,
                async move { reservation?.within(decided).await.map(|b| to_json(&b)) },
                same,
            )
        })
    }

    /// The promise of a run, resume or dismissal: resolves to the outcome once the listener saw
    /// every event of the run (one glue for the three exports).
    fn run_promise<'env>(
        &self,
        env: &'env Env,
        session_id: String,
        call: RunCall,
        signal: Option<&CancellationHandle>,
    ) -> napi_ohos::Result<PromiseRaw<'env, RunOutcomeObject>> {
        let core = Arc::clone(&self.core);
        let events = RunEvents::new(self.listener.queue());
        let signal = run_signal(signal);
        let gone = self.gone.clone();
        guard_napi(env, || {
            // The call's place is reserved now, in the order the app calls: calls on the session
            // not awaited hold it in that order (`approve` then `resume`: approve first), and a
            // setMetadata called right after is session_busy instead of applying first.
            // It is kept until the app is handed the outcome: a call made before that (not
            // awaited) finds the session reserved, however soon the run's task ended.
            let reservation = core.reserve_turn(&session_id);
            let kept = reservation.as_ref().ok().map(TurnReservation::kept);
            spawn_guarded_keeping(
                env,
                kept,
                async move {
                    let reservation = reservation?;
                    let run = reservation.within(async {
                        match call {
                            RunCall::Run(input) => core.run(&session_id, &input, &events, &signal).await,
                            RunCall::Resume => core.resume(&session_id, &events, &signal).await,
                            RunCall::Dismiss(reason) => {
                                core.dismiss(&session_id, &reason, &events, &signal).await
                            }
                        }
                    });
                    let outcome = cancelled_with_env(run, &gone, &signal).await;
                    events.delivered().await;
                    outcome_object(&core, &session_id, outcome?).await
                },
                same,
            )
        })
    }
}

/// The agent: a model, tools, hooks, the approval policy and a state store.
#[napi(js_name = "Agent")]
#[repr(C)]
pub struct JsAgent {
    // First: which class this is (see `ClassTag`).
    tag: ClassTag,
    core: Arc<Agent>,
    listener: EventListener,
    tool_timeout: Duration,
    policy: Arc<PolicySlot>,
    /// The `gone` signal of the environment it was created in (`env_life`): ends its runs.
    gone: CancellationSignal,
}

// SAFETY: `#[repr(C)]`, its tag first.
unsafe impl super::error::JsClass for JsAgent {
    const JS_NAME: &'static str = "Agent\0";
    const TAG: ClassTag = ClassTag::AGENT;
}

#[napi]
impl JsAgent {
    /// An agent for the config.
    ///
    /// # Errors
    /// `config_invalid` (the message names the field), `insecure_url`, `provider_tls`.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        this: This<Unknown>,
        config: Arg<Checked<AgentConfigObject>>,
    ) -> napi_ohos::Result<Self> {
        check_new::<Self>(&env, &this)?;
        let Arg(config) = config;
        guard(&env, || {
            let policy = Arc::new(PolicySlot::default());
            let (core, tool_timeout) = core_agent(config.known()?, Arc::clone(&policy))?;
            Ok(JsAgent {
                tag: ClassTag::AGENT,
                core,
                listener: EventListener::default(),
                tool_timeout,
                policy,
                gone: super::env_life::gone(&env),
            })
        })
    }

    /// Registers a tool, as `ToolRegistry.register`.
    ///
    /// # Errors
    /// `tool_name_empty`, `tool_name_invalid`, `tool_name_duplicate`, a `schema_*` error, or
    /// `config_invalid`; `tool_name_reserved` for `delegate_task` (the tool `enableDelegation`
    /// registers).
    #[napi]
    pub fn register_tool(
        &self,
        env: Env,
        definition: Arg<Checked<ToolDefinitionObject>>,
        executor: Arg<Function<'_, Unknown<'static>, Unknown<'static>>>,
    ) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let (Arg(definition), Arg(executor)) = (definition, executor);
        guard_napi(&env, || {
            let tool = super::executor::js_tool(&env, definition, executor, self.tool_timeout)?;
            guard(&env, || {
                let (definition, executor) = tool?;
                self.core.register_tool(definition, executor)
            })
        })
    }

    /// Removes a tool; returns whether it was there.
    ///
    /// # Errors
    /// `tool_name_reserved` for `delegate_task` when the agent delegates (`enableDelegation`).
    #[napi]
    pub fn unregister_tool(&self, env: Env, name: Arg<Id<ToolNameArg>>) -> napi_ohos::Result<bool> {
        check_this(&env, self)?;
        let Arg(Id(name, _)) = name;
        guard(&env, || self.core.unregister_tool(&name))
    }

    /// The registered tool names, in registration order.
    #[napi]
    pub fn tool_names(&self, env: Env) -> napi_ohos::Result<Vec<String>> {
        check_this(&env, self)?;
        guard(&env, || Ok(self.core.tools().definitions().iter().map(|d| d.name.clone()).collect()))
    }

    /// Adds a hook after the others.
    ///
    /// # Errors
    /// `config_invalid` when a hook property is not a function.
    #[napi]
    pub fn add_hook(&self, env: Env, hook: Arg<Object<'_>>) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let Arg(hook) = hook;
        guard_napi(&env, || {
            let hook = JsHook::from_object(&env, hook, self.tool_timeout)?;
            self.core.add_hook(Arc::new(hook));
            Ok(())
        })
    }

    /// Sets the app's approval policy (replaces the previous one; `null` restores the default
    /// policy): `policy(callJson, definitionJson | null)` answers `allow`, `deny`,
    /// `requireConfirmation` or `{"action", "reason"?}`, directly or with a Promise, within
    /// `timeoutMs` (default `toolTimeoutMs`). Any failure requires confirmation (fail closed).
    /// Runs that already started use the new policy for their next batch.
    ///
    /// # Errors
    /// `config_invalid` for a policy that is neither a function nor null, or a `timeoutMs` that
    /// is not a whole number from 1 to 86400000.
    #[napi]
    pub fn set_approval_policy(
        &self,
        env: Env,
        policy: Option<Unknown<'_>>,
        timeout_ms: Arg<Option<f64>>,
    ) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let Arg(timeout_ms) = timeout_ms;
        guard_napi(&env, || {
            let timeout =
                guard(&env, || timeout_ms.map(|ms| super::dto::millis("timeoutMs", ms)).transpose())?
                    .unwrap_or(self.tool_timeout);
            let policy = match policy {
                None => None,
                Some(value) => match value.get_type()? {
                    ValueType::Undefined | ValueType::Null => None,
                    // SAFETY: checked to be a function of this env, on the JS thread.
                    ValueType::Function => {
                        Some(JsApprovalPolicy::new(&env, unsafe { value.cast()? }, timeout)?)
                    }
                    other => {
                        return guard(&env, || {
                            Err(AgentError::of(
                                codes::ARGUMENT_INVALID,
                                format!("wrong argument: policy must be a function or null, not {other}"),
                            ))
                        })
                    }
                },
            };
            self.policy.set(policy);
            Ok(())
        })
    }

    /// Sets the event listener (replaces the previous one); `null` or `undefined` removes it
    /// (and with it the listener's hold on what it captures). The events still queued go to it
    /// (see `events.rs`): the previous listener hears nothing once this returns.
    #[napi]
    pub fn on_event(
        &self,
        env: Env,
        listener: Arg<Option<Function<'_, Unknown<'static>, Unknown<'static>>>>,
    ) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let Arg(listener) = listener;
        guard_napi(&env, || self.listener.set(&env, listener))
    }

    /// Runs on a new user message; resolves when the run ends or suspends for approval, after the
    /// listener saw every event of the run. A sub-agent's (worker) session takes no new message.
    ///
    /// # Errors
    /// Rejects with `approval_pending`, `invalid_state` (a worker session: its parent would never
    /// read the answer; nothing was written), `argument_invalid` (an input that is empty or only
    /// whitespace; nothing was written), `session_id_invalid` or a persistence error.
    #[napi]
    pub fn run<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        input: Arg<Text<InputArg>>,
        signal: Option<ArgRef<CancellationHandle>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, RunOutcomeObject>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), Arg(input), signal) = (session_id, input, signal.map(|s| s.0));
        self.run_promise(env, session_id, RunCall::Run(input.into()), signal)
    }

    /// Continues a suspended run once every item is decided (or a run interrupted by a crash). A
    /// sub-agent's (worker) session runs with the worker's tools and depth (see `Agent::resume`).
    ///
    /// # Errors
    /// Rejects with `session_not_found`, `approval_pending`, `invalid_state` (also: a worker
    /// session while delegation is not enabled on this agent), `delegation_depth_exceeded`,
    /// `session_id_invalid` or a persistence error.
    #[napi]
    pub fn resume<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        signal: Option<ArgRef<CancellationHandle>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, RunOutcomeObject>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), signal) = (session_id, signal.map(|s| s.0));
        self.run_promise(env, session_id, RunCall::Resume, signal)
    }

    /// Ends a suspended run without asking the model again: every pending item is denied with
    /// `reason`, the batch is answered and the run completes (see `Agent::dismiss`). A worker
    /// session runs as `resume` runs it.
    ///
    /// # Errors
    /// Rejects with `no_pending_approval`, `session_not_found`, `invalid_state` and
    /// `delegation_depth_exceeded` (a worker session, as `resume`), `session_id_invalid`,
    /// `session_busy` or a persistence error.
    #[napi]
    pub fn dismiss<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        reason: Arg<Text<ReasonArg>>,
        signal: Option<ArgRef<CancellationHandle>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, RunOutcomeObject>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), Arg(reason), signal) = (session_id, reason, signal.map(|s| s.0));
        self.run_promise(env, session_id, RunCall::Dismiss(reason.into()), signal)
    }

    /// Approves one pending item (durable when this resolves); resolves to the batch JSON.
    ///
    /// # Errors
    /// Rejects with `session_not_found`, `no_pending_approval`, `approval_not_found`,
    /// `approval_already_decided` or a persistence error.
    #[napi]
    pub fn approve<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        approval_id: Arg<Id<ApprovalIdArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, String>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), Arg(Id(approval_id, _))) = (session_id, approval_id);
        self.decision_promise(env, session_id, move |core, id| async move {
            core.approve(&id, &approval_id).await
        })
    }

    /// Denies one pending item (durable when this resolves); resolves to the batch JSON.
    ///
    /// # Errors
    /// As `approve`.
    #[napi]
    pub fn deny<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        approval_id: Arg<Id<ApprovalIdArg>>,
        reason: Arg<Text<ReasonArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, String>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), Arg(Id(approval_id, _)), Arg(reason)) =
            (session_id, approval_id, reason);
        self.decision_promise(env, session_id, move |core, id| async move {
            core.deny(&id, &approval_id, &reason).await
        })
    }

    /// Approves every item of the batch still pending in one durable commit (see
    /// `Agent::approve_all`); resolves to the batch JSON.
    ///
    /// # Errors
    /// As `approve`.
    #[napi]
    pub fn approve_all<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, String>> {
        check_this(env, self)?;
        let Arg(Id(session_id, _)) = session_id;
        self.decision_promise(env, session_id, move |core, id| async move { core.approve_all(&id).await })
    }

    /// Denies every item of the batch still pending with `reason`, in one durable commit (see
    /// `Agent::deny_all`); resolves to the batch JSON.
    ///
    /// # Errors
    /// As `deny`.
    #[napi]
    pub fn deny_all<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        reason: Arg<Text<ReasonArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, String>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), Arg(reason)) = (session_id, reason);
        self.decision_promise(
            env,
            session_id,
            move |core, id| async move { core.deny_all(&id, &reason).await },
        )
    }

    /// The persisted state of a session as JSON, or null.
    ///
    /// # Errors
    /// Rejects with `session_id_invalid` or a persistence error.
    #[napi]
    pub fn state_json<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, Option<String>>> {
        check_this(env, self)?;
        let Arg(Id(session_id, _)) = session_id;
        let core = Arc::clone(&self.core);
        guard_napi(env, || {
            spawn_guarded(
                env,
                async move { core.state(&session_id).await.map(|s| s.map(|s| to_json(&s))) },
                same,
            )
        })
    }

    /// Sets one key of a session's app metadata to the JSON value `valueJson`, or removes the key
    /// when it is `null` (see `Agent::set_metadata`); resolves once durable. Executors of the
    /// next run read it in `context.metadataJson`. A missing session is created (not for a
    /// removal).
    ///
    /// # Errors
    /// Rejects with `json_invalid` (also for a key twice in an object), `json_too_deep`,
    /// `json_too_large` (the value; each names the metadata key), `metadata_key_invalid`, `metadata_too_large`, `session_busy` (a run, resume, dismissal or
    /// decision holds the session, or was asked for before and has not finished),
    /// `invalid_state` (a worker session whose parent still names it), `session_id_invalid` or a
    /// persistence error.
    #[napi]
    pub fn set_metadata<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
        key: Arg<Id<MetadataKeyArg>>,
        value_json: Arg<Text<ValueJsonArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, ()>> {
        check_this(env, self)?;
        let (Arg(Id(session_id, _)), Arg(Id(key, _)), Arg(value_json)) = (session_id, key, value_json);
        let core = Arc::clone(&self.core);
        guard_napi(env, || {
            // The session's turn is taken now, in the order the app calls: a run() called right
            // after an un-awaited setMetadata waits for it instead of making it session_busy.
            let turn = core.metadata_turn(&session_id);
            spawn_guarded(
                env,
                async move {
                    // Text up to the general limit parses; the value's own (smaller) limits are
                    // the core's, on its compact form (`set_metadata_in_turn` checks them). A bad
                    // value is refused as such while the session is busy too, as
                    // `Agent::set_metadata` does (the soak found json_invalid answered
                    // session_busy): without a turn, the entry is checked here before the refusal.
                    let value_json = crate::json::lone_surrogate_escapes_replaced(&value_json);
                    // A key twice is refused, as in arguments: which value was meant is
                    // ambiguous, and the app would read back one it may not have meant.
                    let mut value =
                        crate::json::parse_value_unique(&value_json, &crate::json::JsonLimits::default())
                            .map_err(|mut e| {
                                // Named as the core names it in its own refusals of a value.
                                e.message = format!(
                                    "the value of metadata key {:?}: {}",
                                    super::dto::shown_key(&key),
                                    e.message
                                );
                                e
                            })?;
                    // App text on its way to the state and every executor's context: no API key.
                    super::executor::redact_value(&mut value);
                    let turn = turn.or_else(|busy| {
                        crate::state::metadata::check_metadata_entry(&Default::default(), &key, &value)
                            .and(Err(busy))
                    })?;
                    core.set_metadata_in_turn(turn, &key, value).await
                },
                same,
            )
        })
    }

    /// The pending approval batch of a session as JSON, or null.
    ///
    /// # Errors
    /// Rejects with `session_id_invalid` or a persistence error.
    #[napi]
    pub fn pending_approval_json<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, Option<String>>> {
        check_this(env, self)?;
        let Arg(Id(session_id, _)) = session_id;
        let core = Arc::clone(&self.core);
        guard_napi(env, || {
            spawn_guarded(
                env,
                async move {
                    let state = core.state(&session_id).await?;
                    Ok(state.and_then(|s| s.pending_approval).map(|b| to_json(&b)))
                },
                same,
            )
        })
    }

    /// The sessions of the store as a JSON array of `SessionSummary` (snake_case keys:
    /// `session_id`, `status`, `approval_pending`, `interrupted`, `busy`, `message_count`,
    /// `updated_at_ms`, `title`, `last_message`, `run_error`, `parent_session`, `error`), sorted
    /// by id: the conversations (`Agent::list_sessions`), or every session, the sub-agents'
    /// workers included, when `includeWorkers` is true (`Agent::list_all_sessions`). Reads only
    /// (no lease, nothing written); an unreadable session is an entry with its `error`, not a
    /// rejection.
    ///
    /// # Errors
    /// Rejects with `argument_invalid` (`includeWorkers` not a boolean), `state_io` (the
    /// `stateDir` cannot be read).
    #[napi]
    pub fn list_sessions_json<'env>(
        &self,
        env: &'env Env,
        include_workers: Arg<Option<bool>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, String>> {
        check_this(env, self)?;
        let Arg(include_workers) = include_workers;
        let core = Arc::clone(&self.core);
        guard_napi(env, || {
            spawn_guarded(
                env,
                async move {
                    let list = if include_workers.unwrap_or(false) {
                        core.list_all_sessions().await?
                    } else {
                        core.list_sessions().await?
                    };
                    Ok(to_json(&list))
                },
                same,
            )
        })
    }

    /// The registered tool definitions as a JSON array, in registration order, in the core's
    /// serialised shape (as `ToolRegistry.definitionsJson`).
    ///
    /// # Errors
    /// `internal_panic` if a definition does not serialise (none can).
    #[napi]
    pub fn definitions_json(&self, env: Env) -> napi_ohos::Result<String> {
        check_this(&env, self)?;
        guard(&env, || {
            let snapshot = self.core.tools();
            serde_json::to_string(&snapshot.definitions()[..]).map_err(|e| {
                AgentError::of(codes::INTERNAL_PANIC, format!("definitions did not serialise: {e}"))
            })
        })
    }

    /// Deletes a session; resolves to whether it existed. Takes its turn on the session when
    /// called (see `Agent::deletion_turn`).
    ///
    /// # Errors
    /// Rejects with `session_busy` (a call of this agent on the session holds it, or was called
    /// before and has not settled; or it is being written elsewhere),
    /// `invalid_state` (a worker session whose parent still names it: delete the parent),
    /// `session_id_invalid` or a persistence error.
    #[napi]
    pub fn delete_session<'env>(
        &self,
        env: &'env Env,
        session_id: Arg<Id<SessionIdArg>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, bool>> {
        check_this(env, self)?;
        let Arg(Id(session_id, _)) = session_id;
        let core = Arc::clone(&self.core);
        guard_napi(env, || {
            // The deletion's turn is taken now, in the order the app calls, and kept until
            // settled (see `run_promise`): a run called right after waits for it (and starts a
            // new session), while a run called before and not settled makes it session_busy,
            // whichever task starts or ends first.
            let turn = core.deletion_turn(&session_id);
            let kept = turn.as_ref().ok().map(TurnReservation::kept);
            spawn_guarded_keeping(
                env,
                kept,
                async move { turn?.within(core.delete_session(&session_id)).await },
                same,
            )
        })
    }
}
