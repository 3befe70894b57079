//! `JsHook`: an ArkTS `AgentHookObject` as a core [`AgentHook`]. Each method present on the object
//! is read once (`get_named_property`), bound to the object (so `this` works) and turned into a
//! weak thread-safe function. Values cross as JSON text in the core's serde shapes (snake_case).
//! Every method gets the hook context first, `contextJson` = `{"session_id","run_id","round"}`:
//!
//! | method                                   | answer                                          |
//! |------------------------------------------|-------------------------------------------------|
//! | `beforeToolCall(contextJson, callJson, definitionJson \| null)` | `{action: proceed, argumentsJson?, name?}`, `{action: deny, resultJson? \| reason?}`, `{action: defer, reason}`, `{action: abort, reason}` |
//! | `afterToolCall(contextJson, callJson, resultJson)` | `{action: proceed, resultJson?}`, `{action: stop}`, `{action: abort, reason}`; `injectJson?` (user or system messages; another role fails the hook) with proceed or stop |
//! | `beforePersistState(contextJson, stateJson)` | `'persist'` or `'skip'` (a skip of a terminal state or a frozen batch is ignored) |
//! | `onRunStart(contextJson)`, `beforeModelCall(contextJson, requestJson)`, `afterModelResponse(contextJson, responseJson)`, `onApprovalRequired(contextJson, batchJson)`, `onRunEnd(contextJson, status, finalText \| null)`, `onError(contextJson, errorJson)` | ignored |
//!
//! A `resultJson` is a tool result as JSON text, in the state's spelling (`{"contents": [{"type":
//! "text", "text"} | {"type": "json", "value"}], "is_error"?, "stop"?, "metadata"?}`, what
//! `afterToolCall` is handed) or an executor's (`ToolResultObject`: `isError`, `metadataJson`,
//! `{"type": "json", "json": "<JSON text>"}`); any other key fails the hook ([`HookResultJson`]).
//! So does a key the decision object does not have, or one its method does not read
//! (`HookAnswer`). A function of the hook object spelt like a method it is not (`beforeToolcall`)
//! makes `addHook` throw `config_invalid` (`refuse_misspelt_method`); other keys are left alone.
//!
//! `requestJson` is `{"messages","tools","tool_choice"?,"temperature"?,"max_tokens"?,
//! "parallel_tool_calls"?}` (the
//! request as the runtime hands it to the client: no endpoint, no key); `errorJson` is
//! `{"layer","code","message"}`. A value is serialized only for a method the object has, so a hook
//! without `beforePersistState` costs no serialization of the state at each save.
//!
//! Each method may answer directly or with a Promise; `undefined` means "no change". Every call is
//! awaited up to the hook timeout (notifications too, so they happen in step with the run). The
//! timeout counts from when the call is queued for the JS thread: a call still waiting for a busy
//! thread when it times out, or when its run is cancelled, is never made (`callback`), so a hook is
//! never called late, for a call, a save or a run the runtime has gone on without it.
//!
//! Failures are contained: a `beforeToolCall` that throws, rejects, times out, answers a wrong
//! shape or fails in the binding on the JS thread (a panic caught there: `callback`) denies the
//! call with a `hook_failed` result (fail closed); an `afterToolCall` that fails ends the run with
//! `hook_failed`, as a panicking Rust hook does (a hook that filters results must not let an
//! unfiltered one reach the model by failing); a `beforePersistState` that fails lets the save
//! happen (saving is the safe side); a notification that fails is ignored. Each failure is logged
//! as a warning.

use super::callback::{call_js, call_unwaited, CallFailure, JsFn, Settled};
use super::dto::{
    status_name, to_json, ChatRequestView, HookContextView, HookDecisionObject, HookResultJson, KnownKeys,
    Text,
};
use super::executor::{redact_result, redact_text};
use crate::approval::PendingApprovalBatch;
use crate::error::{codes, AgentError};
use crate::hook::{
    AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext, PersistDecision,
};
use crate::logging::redact_secrets;
use crate::message::{ChatMessage, ToolCall};
use crate::provider::{ChatRequest, ModelResponse};
use crate::state::{AgentState, RunStatus};
use crate::tool::{ToolDefinition, ToolResult};
use async_trait::async_trait;
use napi_ohos::bindgen_prelude::{
    FromNapiValue, Function, JsObjectValue, JsValuesTupleIntoVec, Object, ToNapiValue, Unknown,
};
use napi_ohos::{sys, Env, ValueType};
use std::time::Duration;

/// The arguments of a hook call, in order: JSON texts, `None` for a `null`. One type for the nine
/// methods, so the thread-safe function glue (napi-ohos' `call_js_cb`, create, drop, the call's
/// future) exists once rather than once per argument tuple (BENCHMARKS.md, "Size of the stripped
/// release `.so`").
pub(crate) struct HookArgs(Vec<Option<String>>);

impl HookArgs {
    /// These JSON texts, in order (`None` for a `null`): for the approval policy, which shares
    /// the hooks' argument type and so their thread-safe function glue.
    pub(crate) fn from_texts(args: Vec<Option<String>>) -> Self {
        HookArgs(args)
    }

    /// The context's JSON text, then `rest`.
    fn new<const N: usize>(ctx: &HookContext<'_>, rest: [Option<String>; N]) -> Self {
        let mut args = Vec::with_capacity(1 + N);
        args.push(Some(context_json(ctx)));
        args.extend(rest);
        HookArgs(args)
    }
}

impl JsValuesTupleIntoVec for HookArgs {
    fn into_vec(self, env: sys::napi_env) -> napi_ohos::Result<Vec<sys::napi_value>> {
        self.0
            .into_iter()
            // SAFETY: called by napi-ohos on the JS thread, with that thread's env.
            .map(|arg| unsafe { Option::<String>::to_napi_value(env, arg) })
            .collect()
    }
}

type Method = Option<JsFn<HookArgs>>;

/// An ArkTS hook object.
pub(crate) struct JsHook {
    on_run_start: Method,
    before_model_call: Method,
    after_model_response: Method,
    before_tool_call: Method,
    after_tool_call: Method,
    on_approval_required: Method,
    before_persist_state: Method,
    on_run_end: Method,
    on_error: Method,
    timeout: Duration,
}

impl JsHook {
    /// Reads the hook's methods (call on the JS thread, when the hook is added).
    ///
    /// # Errors
    /// When a method name is present but not a function (`argument_invalid`, as a JS error), a
    /// function is spelt like a method it is not (`config_invalid`: [`refuse_misspelt_method`]),
    /// or a thread-safe function cannot be created.
    pub(crate) fn from_object(env: &Env, object: Object<'_>, timeout: Duration) -> napi_ohos::Result<Self> {
        refuse_misspelt_method(env, &object)?;
        Ok(JsHook {
            on_run_start: method(env, &object, "onRunStart")?,
            before_model_call: method(env, &object, "beforeModelCall")?,
            after_model_response: method(env, &object, "afterModelResponse")?,
            before_tool_call: method(env, &object, "beforeToolCall")?,
            after_tool_call: method(env, &object, "afterToolCall")?,
            on_approval_required: method(env, &object, "onApprovalRequired")?,
            before_persist_state: method(env, &object, "beforePersistState")?,
            on_run_end: method(env, &object, "onRunEnd")?,
            on_error: method(env, &object, "onError")?,
            timeout,
        })
    }
}

/// The methods a hook object may have, as JS spells them.
const METHODS: [&str; 9] = [
    "onRunStart",
    "beforeModelCall",
    "afterModelResponse",
    "beforeToolCall",
    "afterToolCall",
    "onApprovalRequired",
    "beforePersistState",
    "onRunEnd",
    "onError",
];

/// Refuses, as `config_invalid` (a JS error), a function of `object` (own or inherited,
/// enumerable or not) that is no hook method but is spelt like one ([`nearest_key`]: the same
/// ignoring case, or a few edits away): `beforeToolcall` was accepted and never called, a guard
/// that never guards. Other keys are left alone: a hook may be an ArkTS class instance with
/// fields and helpers of its own. Only a key near a method's name is read (a getter runs then).
///
/// [`nearest_key`]: super::dto::nearest_key
fn refuse_misspelt_method(env: &Env, object: &Object<'_>) -> napi_ohos::Result<()> {
    use napi_ohos::bindgen_prelude::{KeyCollectionMode, KeyConversion, KeyFilter};
    let names = object.get_all_property_names(
        KeyCollectionMode::IncludePrototypes,
        KeyFilter::SkipSymbols,
        KeyConversion::NumbersToStrings,
    )?;
    for i in 0..names.get_array_length()? {
        let key: String = names.get_element(i)?;
        if METHODS.contains(&key.as_str()) {
            continue;
        }
        let Some(meant) = super::dto::nearest_key(&key, &METHODS) else { continue };
        let is_function = match object.get_named_property::<Unknown<'_>>(&key) {
            Ok(value) => value.get_type()? == ValueType::Function,
            // A getter or a Proxy trap threw: not a method this check can name.
            Err(_) => {
                super::callback::take_pending_exception(env);
                false
            }
        };
        if is_function {
            let error = AgentError::of(
                codes::CONFIG_INVALID,
                format!(
                    "hook method {:?} is not one a hook has, so it would never be called (did you mean {meant}?)",
                    super::dto::shown_key(&key)
                ),
            );
            return Err(super::error::js_error(env, &error));
        }
    }
    Ok(())
}

/// The bound method `name` of `object` as a weak thread-safe function, if present.
fn method(env: &Env, object: &Object<'_>, name: &str) -> napi_ohos::Result<Method> {
    let property: Unknown<'_> = match object.get_named_property(name) {
        Ok(property) => property,
        // A getter or a Proxy trap threw: refused as a wrong argument, not thrown on as it is.
        Err(e) => {
            let why = match super::callback::take_pending_exception(env) {
                Some(thrown) => format!("reading it threw {thrown}"),
                None => e.reason.clone(),
            };
            let error = AgentError::of(
                codes::ARGUMENT_INVALID,
                format!("wrong argument: hook property {name} could not be read: {why}"),
            );
            return Err(super::error::js_error(env, &error));
        }
    };
    match property.get_type()? {
        ValueType::Undefined | ValueType::Null => return Ok(None),
        ValueType::Function => {}
        other => {
            let error = AgentError::of(
                codes::ARGUMENT_INVALID,
                format!("wrong argument: hook property {name} must be a function, not {other}"),
            );
            return Err(super::error::js_error(env, &error));
        }
    }
    // SAFETY: checked to be a function of this env, on the JS thread.
    let function: Function<'_, Unknown<'static>, Unknown<'static>> = unsafe { property.cast()? };
    let bound = function.bind(object)?;
    Ok(Some(super::callback::passthrough_fn(env, &bound)?))
}

/// Any answer (a notification's is ignored).
struct Ignored;

impl FromNapiValue for Ignored {
    unsafe fn from_napi_value(_env: sys::napi_env, _value: sys::napi_value) -> napi_ohos::Result<Self> {
        Ok(Ignored)
    }
}

/// The keys only a `beforeToolCall` answer reads, of those any answer may have (the fields of
/// [`HookDecisionObject`], its [`KnownKeys`]).
const BEFORE_ONLY: [&str; 2] = ["argumentsJson", "name"];
/// The key only an `afterToolCall` answer reads.
const AFTER_ONLY: &str = "injectJson";

/// A `beforeToolCall` or `afterToolCall` answer read as a [`HookDecisionObject`], refused when it
/// has another key with a value: the object's conversion skips such a key without a word, so a
/// misspelt rewrite (`arguments_json`, `argumentJson`) let the call run with its arguments
/// unchanged. A key whose value is `undefined` counts as absent, as the fields' own do.
struct HookAnswer(HookDecisionObject);

impl FromNapiValue for HookAnswer {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        // SAFETY (all three): on the JS thread, with the env and value of the reply being read.
        let decision = unsafe { HookDecisionObject::from_napi_value(env, value) };
        // A stray key is named first, also when the decision does not convert: `{Action:
        // 'proceed'}` lacks `action` because it is misspelt, which the hint says.
        if let Ok(object) = unsafe { Object::from_napi_value(env, value) } {
            if let Some(shown) = super::dto::unknown_key(&object, HookDecisionObject::KEYS)? {
                // With the known key it is nearest to, as an options object's refusal gives it.
                return Err(napi_ohos::Error::from_reason(super::dto::unknown_key_refusal::<
                    HookDecisionObject,
                >(&shown)));
            }
        }
        Ok(HookAnswer(decision?))
    }
}

/// `Err` naming the first key of `decision` that its method, or its action, does not read: a
/// rewrite that is not applied must not pass for one (`{action: 'defer', argumentsJson}` asked
/// the user about the call as it came; `{action: 'stop', resultJson}` kept the unfiltered
/// result). `reason` is read by any action that can use it and ignored by the others; an
/// unknown action is refused afterwards, as such.
fn unread_keys(method: &str, decision: &HookDecisionObject) -> Result<(), String> {
    let before = method == "beforeToolCall";
    let call_key =
        [(decision.arguments_json.is_some(), BEFORE_ONLY[0]), (decision.name.is_some(), BEFORE_ONLY[1])]
            .into_iter()
            .find_map(|(set, key)| set.then_some(key));
    let (actions, result_action) = if before {
        (&["proceed", "deny", "defer", "abort"][..], "deny")
    } else {
        (&["proceed", "stop", "abort"][..], "proceed")
    };
    let action: &str = &decision.action;
    let known = actions.contains(&action);
    let stray = match call_key {
        _ if before && decision.inject_json.is_some() => {
            Some((AFTER_ONLY, "belongs to an afterToolCall answer".to_string()))
        }
        // The run ends before the batch's messages are appended: they would be dropped unsaid.
        _ if action == "abort" && decision.inject_json.is_some() => Some((
            AFTER_ONLY,
            "is not read with the action abort: the run ends before it is appended".to_string(),
        )),
        Some(key) if !before => Some((key, "belongs to a beforeToolCall answer".to_string())),
        Some(key) if known && action != "proceed" => {
            Some((key, format!("is read with the action proceed only, not {action}")))
        }
        _ if known && decision.result_json.is_some() && action != result_action => {
            Some(("resultJson", format!("is read with the action {result_action} only, not {action}")))
        }
        _ => None,
    };
    match stray {
        Some((key, why)) => Err(format!("{method} returned an invalid decision: {key} {why}")),
        None => Ok(()),
    }
}

/// A hook decision, or why the call gave none.
fn outcome<R>(
    method: &str,
    settled: Result<Settled<R>, CallFailure>,
    timeout: Duration,
) -> Result<Option<R>, String> {
    match settled {
        Ok(Settled::Value(v)) => Ok(Some(v)),
        Ok(Settled::Undefined) => Ok(None),
        Ok(Settled::Invalid(why)) => Err(format!("{method} returned an invalid decision: {why}")),
        // The text reaches a hook_failed result or error (state, events): no secret.
        Ok(Settled::Threw(thrown)) => Err(format!("{method} threw: {}", redact_secrets(&thrown.text))),
        Ok(Settled::Rejected(thrown)) => Err(format!("{method} rejected: {}", redact_secrets(&thrown.text))),
        Err(CallFailure::TimedOut { started }) => Err(format!(
            "{method} did not settle within {} ms{}",
            timeout.as_millis(),
            CallFailure::not_called_note(started)
        )),
        Err(CallFailure::NotQueued(status)) => Err(format!("{method} could not be called ({status})")),
        Err(CallFailure::EnvGone { .. }) => {
            Err(format!("{method} did not answer: its ArkTS environment was torn down"))
        }
        Err(CallFailure::Binding(why)) => Err(format!("{method} failed in the binding: {why}")),
    }
}

/// A ToolResult from a hook's `resultJson`, in either spelling ([`HookResultJson`]).
fn parse_result(text: &str) -> Result<ToolResult, String> {
    let result = super::dto::from_app_json::<HookResultJson>(text)
        .map_err(|e| format!("resultJson is not a ToolResult: {e}"))?
        .into_core()
        .map_err(|why| format!("resultJson is not a ToolResult: {why}"))?;
    Ok(redact_result(result))
}

/// A hook's answer as plain strings.
struct Decision {
    action: String,
    arguments_json: Option<String>,
    name: Option<String>,
    result_json: Option<String>,
    reason: Option<String>,
    inject_json: Option<String>,
}

impl From<HookDecisionObject> for Decision {
    fn from(d: HookDecisionObject) -> Self {
        Decision {
            action: d.action.into(),
            arguments_json: d.arguments_json.map(String::from),
            name: d.name.map(String::from),
            result_json: d.result_json.map(String::from),
            reason: d.reason.map(String::from),
            inject_json: d.inject_json.map(String::from),
        }
    }
}

/// The core decision of a `beforeToolCall` answer about `call`.
///
/// # Errors
/// A description of what is wrong with it.
fn before_decision(call: &ToolCall, decision: HookDecisionObject) -> Result<BeforeToolCall, String> {
    unread_keys("beforeToolCall", &decision)?;
    let mut decision = Decision::from(decision);
    // App text on its way to the state (a frozen batch keeps the rewritten call), the events and
    // the model: without the API key.
    decision.arguments_json.iter_mut().chain(decision.reason.iter_mut()).for_each(redact_text);
    // JSON.stringify's escape of a lone surrogate reads as U+FFFD, as everywhere JSON text comes
    // from the app (the gates would refuse it as `json_invalid`).
    if let Some(text) = decision.arguments_json.as_mut() {
        if let std::borrow::Cow::Owned(fixed) = crate::json::lone_surrogate_escapes_replaced(text) {
            *text = fixed;
        }
    }
    match decision.action.as_str() {
        "proceed" => {
            let rewritten = match (decision.arguments_json, decision.name) {
                (None, None) => None,
                (arguments, name) => {
                    let mut rewritten =
                        call.with_arguments(arguments.unwrap_or_else(|| call.arguments.clone()));
                    if let Some(name) = name {
                        // The pipeline refuses a renamed call (hook_call_name_changed).
                        rewritten.name = name;
                    }
                    Some(rewritten)
                }
            };
            Ok(BeforeToolCall::Proceed(rewritten))
        }
        "deny" => {
            let result = match decision.result_json {
                Some(text) => parse_result(&text)?,
                None => ToolResult::from_error(&AgentError::of(
                    codes::TOOL_DENIED,
                    decision.reason.unwrap_or_else(|| "denied by a hook".to_string()),
                )),
            };
            Ok(BeforeToolCall::Deny(result))
        }
        "defer" => Ok(BeforeToolCall::Defer(decision.reason.unwrap_or_default())),
        "abort" => {
            Ok(BeforeToolCall::Abort(decision.reason.unwrap_or_else(|| "aborted by a hook".to_string())))
        }
        other => Err(format!("beforeToolCall action must be proceed, deny, defer or abort, not {other:?}")),
    }
}

/// The core decision of an `afterToolCall` answer.
///
/// # Errors
/// A description of what is wrong with it.
fn after_decision(decision: HookDecisionObject) -> Result<AfterToolCall, String> {
    unread_keys("afterToolCall", &decision)?;
    let mut decision = Decision::from(decision);
    decision.reason.iter_mut().for_each(redact_text);
    let action = match decision.action.as_str() {
        "proceed" => {
            AfterToolCallAction::Proceed(decision.result_json.as_deref().map(parse_result).transpose()?)
        }
        "stop" => AfterToolCallAction::Stop,
        "abort" => {
            AfterToolCallAction::Abort(decision.reason.unwrap_or_else(|| "aborted by a hook".to_string()))
        }
        other => return Err(format!("afterToolCall action must be proceed, stop or abort, not {other:?}")),
    };
    let inject = match decision.inject_json {
        None => Vec::new(),
        Some(text) => {
            let mut messages = super::dto::from_app_json::<Vec<ChatMessage>>(&text)
                .map_err(|e| format!("injectJson is not a JSON array of chat messages: {e}"))?;
            // App text on its way to the state and the model: without the API key. (Another role
            // than user or system fails the hook in the core.)
            for message in &mut messages {
                if let ChatMessage::User { content } | ChatMessage::System { content } = message {
                    redact_text(content);
                }
            }
            messages
        }
    };
    Ok(AfterToolCall { action, inject })
}

/// The hook context as `contextJson`.
fn context_json(ctx: &HookContext<'_>) -> String {
    to_json(&HookContextView { session_id: ctx.session_id, run_id: ctx.run_id, round: ctx.round })
}

/// The persist decision of a `beforePersistState` answer.
///
/// # Errors
/// A description of what is wrong with it.
fn persist_decision(answer: &str) -> Result<PersistDecision, String> {
    match answer {
        "persist" => Ok(PersistDecision::Persist),
        "skip" => Ok(PersistDecision::Skip),
        other => Err(format!("beforePersistState must answer 'persist' or 'skip', not {other:?}")),
    }
}

impl JsHook {
    /// Calls a notification method (if present; `args` are built only then) and waits for it;
    /// failures are logged. A notification of a run already cancelled (`onRunEnd` of a cancelled
    /// run, `onRunStart` of one cancelled before it started) is made all the same, without being
    /// waited for: the run does not wait on the app once cancelled, but the app hears how it
    /// ended.
    async fn notify(
        &self,
        name: &'static str,
        function: &Method,
        ctx: &HookContext<'_>,
        args: impl FnOnce() -> HookArgs,
    ) {
        let Some(function) = function else { return };
        if ctx.signal.is_cancelled() {
            let status = call_unwaited(function, args(), name);
            if status != napi_ohos::Status::Ok {
                log::warn!("arkagent: hook {name} could not be called ({status}); ignored");
            }
            return;
        }
        let settled = call_js::<_, Ignored>(function, args(), self.timeout, ctx.signal).await;
        if let Err(why) = outcome(name, settled, self.timeout) {
            log::warn!("arkagent: hook {why}; ignored");
        }
    }
}

#[async_trait]
impl AgentHook for JsHook {
    async fn on_run_start(&self, ctx: &HookContext<'_>) {
        self.notify("onRunStart", &self.on_run_start, ctx, || HookArgs::new(ctx, [])).await;
    }

    async fn before_model_call(&self, ctx: &HookContext<'_>, request: &ChatRequest) {
        self.notify("beforeModelCall", &self.before_model_call, ctx, || {
            let view = ChatRequestView {
                messages: &request.messages,
                tools: &request.tools,
                tool_choice: request.tool_choice.as_ref(),
                temperature: request.temperature,
                max_tokens: request.max_tokens,
                parallel_tool_calls: request.parallel_tool_calls,
            };
            HookArgs::new(ctx, [Some(to_json(&view))])
        })
        .await;
    }

    async fn after_model_response(&self, ctx: &HookContext<'_>, response: &ModelResponse) {
        self.notify("afterModelResponse", &self.after_model_response, ctx, || {
            HookArgs::new(ctx, [Some(to_json(response))])
        })
        .await;
    }

    async fn before_tool_call(
        &self,
        ctx: &HookContext<'_>,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        let Some(function) = &self.before_tool_call else {
            return BeforeToolCall::Proceed(None);
        };
        super::panic_point!(Hook);
        let args = HookArgs::new(ctx, [Some(to_json(call)), definition.map(to_json)]);
        let settled = call_js::<_, HookAnswer>(function, args, self.timeout, ctx.signal).await;
        match outcome("beforeToolCall", settled, self.timeout)
            .and_then(|d| d.map(|HookAnswer(d)| before_decision(call, d)).transpose())
        {
            Ok(Some(decision)) => decision,
            Ok(None) => BeforeToolCall::Proceed(None),
            Err(why) => {
                log::warn!("arkagent: {}: {why}; the call is denied", codes::HOOK_FAILED);
                BeforeToolCall::Failed(why)
            }
        }
    }

    async fn after_tool_call(
        &self,
        ctx: &HookContext<'_>,
        call: &ToolCall,
        result: &ToolResult,
    ) -> AfterToolCall {
        let Some(function) = &self.after_tool_call else {
            return AfterToolCall::default();
        };
        let args = HookArgs::new(ctx, [Some(to_json(call)), Some(to_json(result))]);
        let settled = call_js::<_, HookAnswer>(function, args, self.timeout, ctx.signal).await;
        match outcome("afterToolCall", settled, self.timeout)
            .and_then(|d| d.map(|HookAnswer(d)| after_decision(d)).transpose())
        {
            Ok(Some(decision)) => decision,
            Ok(None) => AfterToolCall::default(),
            Err(why) => {
                log::warn!("arkagent: {}: {why}; the run ends", codes::HOOK_FAILED);
                AfterToolCall { action: AfterToolCallAction::Failed(why), inject: Vec::new() }
            }
        }
    }

    async fn on_approval_required(&self, ctx: &HookContext<'_>, batch: &PendingApprovalBatch) {
        self.notify("onApprovalRequired", &self.on_approval_required, ctx, || {
            HookArgs::new(ctx, [Some(to_json(batch))])
        })
        .await;
    }

    async fn before_persist_state(&self, ctx: &HookContext<'_>, state: &AgentState) -> PersistDecision {
        let Some(function) = &self.before_persist_state else {
            return PersistDecision::Persist;
        };
        let args = HookArgs::new(ctx, [Some(to_json(state))]);
        let settled = call_js::<_, Text>(function, args, self.timeout, ctx.signal).await;
        match outcome("beforePersistState", settled, self.timeout)
            .and_then(|answer| answer.as_deref().map(persist_decision).transpose())
        {
            Ok(decision) => decision.unwrap_or_default(),
            Err(why) => {
                log::warn!("arkagent: {}: {why}; the state is saved", codes::HOOK_FAILED);
                PersistDecision::Persist
            }
        }
    }

    async fn on_run_end(&self, ctx: &HookContext<'_>, status: RunStatus, final_text: Option<&str>) {
        self.notify("onRunEnd", &self.on_run_end, ctx, || {
            HookArgs::new(ctx, [Some(status_name(status)), final_text.map(str::to_string)])
        })
        .await;
    }

    async fn on_error(&self, ctx: &HookContext<'_>, error: &AgentError) {
        self.notify("onError", &self.on_error, ctx, || HookArgs::new(ctx, [Some(to_json(error))])).await;
    }
}
