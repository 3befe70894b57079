//! `JsToolExecutor`: an ArkTS/JS function `(argumentsJson, context) => ToolResult | Promise<ToolResult>`
//! as a core [`ToolExecutor`]. Every way the function can misbehave becomes a structured tool
//! error; none crashes or hangs the runtime:
//!
//! | the function                                            | error code                    |
//! |---------------------------------------------------------|-------------------------------|
//! | throws / rejects with a domain error (below)            | its own code (layer `tool`)   |
//! | throws / rejects with anything else                     | `tool_execution_failed`       |
//! | returns / resolves `undefined`                          | `tool_result_invalid`         |
//! | returns / resolves a wrong shape                        | `tool_result_invalid`         |
//! | does not settle within the timeout                      | `tool_timeout`                |
//! | the call is cancelled meanwhile                         | `tool_cancelled`              |
//! | (timed out before the JS thread reached it: never called) | `tool_not_started`           |
//! | (cancelled before the JS thread reached it)               | never called                  |
//! | (the binding panics or fails on the JS thread)           | `tool_execution_failed`       |
//!
//! A domain error is an object whose `code` property is a stable code (snake_case, at most 64
//! bytes: [`is_stable_code`](crate::error::is_stable_code)), such as the bindings' `ArkAgentError`;
//! it keeps that code and its `message` (`<code> (no message)` without one:
//! [`domain_error`](super::callback)), unwrapped, as a Rust executor's own `AgentError` passes
//! through the registry (the seed's `ArkAgentError` rule): the upper layers can act on the exact
//! code. Anything else (a plain `Error`, Node's `ERR_*` or `ENOENT` codes, a value that is not an
//! object) is wrapped, so no implementation detail of the executor leaks up as a code.
//!
//! The context object carries `sessionId`, `callId`, `batchCallId`, `schemaVersion` (of the
//! session state), `metadataJson` and `signal`; services are ArkTS objects, added by the bindings.
//!
//! Cancellation reaches the function through `context.signal` (a `CancellationHandle`: poll
//! `cancelled`, or register `onCancel`). A timeout cancels that signal too, with reason `timeout`.

use super::callback::{call_args, call_js_marked, shield, CallFailure, JsFn, Queued, Settled, Thrown};
use super::dto::{
    unknown_key, unknown_key_refusal, Checked, ContentPartObject, KnownKeys, ToolDefinitionObject,
    ToolResultObject,
};
use super::signal::CancellationHandle;
use crate::error::{codes, AgentError};
use crate::tool::{CancellationSignal, ContentPart, ToolContext, ToolDefinition, ToolExecutor, ToolResult};
use async_trait::async_trait;
use napi_ohos::bindgen_prelude::{
    Array, FromNapiValue, Function, JsObjectValue, JsValue, Object, ToNapiValue, Unknown,
};
use napi_ohos::{sys, Env};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A tool's core half: its definition and its executor.
pub(crate) type CoreTool = (ToolDefinition, Arc<dyn ToolExecutor>);

/// A tool registered from ArkTS: its core definition and an executor calling `executor`, whose
/// timeout is the definition's `timeoutMs` or `default_timeout`. The outer error is napi's (the
/// function could not be wrapped), the inner one the definition's (`config_invalid`...).
pub(crate) fn js_tool(
    env: &Env,
    definition: Checked<ToolDefinitionObject>,
    executor: Function<'_, Unknown<'static>, Unknown<'static>>,
    default_timeout: Duration,
) -> napi_ohos::Result<Result<CoreTool, AgentError>> {
    let definition = match definition.known() {
        Ok(definition) => definition,
        Err(e) => return Ok(Err(e)),
    };
    // An invalid timeoutMs is reported by into_core below; the default stands in meanwhile.
    let timeout = definition
        .timeout_ms
        .and_then(|ms| super::dto::millis("timeoutMs", ms).ok())
        .unwrap_or(default_timeout);
    let executor = JsToolExecutor::new(env, definition.name.0.clone(), executor, timeout)?;
    Ok(definition.into_core().map(|d| (d, Arc::new(executor) as Arc<dyn ToolExecutor>)))
}

/// What one call sends to the JS thread.
pub(crate) struct ExecutorCall {
    arguments_json: String,
    session_id: String,
    call_id: String,
    batch_call_id: String,
    schema_version: u32,
    metadata_json: String,
    signal: CancellationSignal,
    parent: CancellationSignal,
    listeners: CancellationToken,
}

/// The executor's JS arguments for one call, `(argumentsJson, context)`, on the JS thread.
///
/// # Errors
/// When a value cannot be created (the call is then refused: [`call_args`]).
fn executor_args(env: &Env, call: ExecutorCall) -> napi_ohos::Result<Vec<sys::napi_value>> {
    // The JS thread reaches a queued call only when it is free: while it was busy (the app's own
    // work on the UI thread, a synchronous executor), the call may have timed out or its run been
    // cancelled, and the runtime has answered it already (`tool_timeout`, or nothing in a cancelled
    // run). Starting the tool now would do what the history says did not happen: the call is
    // refused instead, and the function never runs. [`call_args`] refuses a call whose `call_js`
    // has stopped waiting; the signal is checked here too, as a cancel reaches it at once, before
    // the waiting side has acted on it. (`signal` is a child of the run's: its cancel reaches it.)
    if let Some(reason) = cancelled_reason(&call.signal) {
        return Err(napi_ohos::Error::from_reason(format!(
            "the call was cancelled ({reason}) before the JS thread could start it"
        )));
    }
    let handle = CancellationHandle::for_call(call.signal, call.parent, call.listeners);
    let mut context = Object::new(env)?;
    context.set_named_property("sessionId", call.session_id)?;
    context.set_named_property("callId", call.call_id)?;
    context.set_named_property("batchCallId", call.batch_call_id)?;
    context.set_named_property("schemaVersion", call.schema_version)?;
    context.set_named_property("metadataJson", call.metadata_json)?;
    context.set_named_property("signal", super::callback::RawJsValue(handle.into_js(env)?))?;
    // SAFETY: on the JS thread, with this env.
    let arguments = unsafe { String::to_napi_value(env.raw(), call.arguments_json)? };
    Ok(vec![arguments, context.raw()])
}

/// What an executor returned, read as a [`ToolResultObject`]; refused when it also carries the
/// state's snake_case spelling of a field (`is_error`, `metadata`, as a hook's `resultJson` may),
/// or any other key that it or one of its content parts does not have (`iserror`, `Stop`): the
/// object's conversion skips such a key without a word, so `{ iserror: true }` was read as a
/// success. A key whose value is `undefined` counts as absent.
struct ExecutorResult(ToolResultObject);

/// The result fields an executor spells otherwise: (the state's spelling, the executor's).
const OTHER_SPELLINGS: [(&std::ffi::CStr, &str); 2] =
    [(c"is_error", "isError"), (c"metadata", "metadataJson")];

impl FromNapiValue for ExecutorResult {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        let mut kind = sys::ValueType::napi_undefined;
        // SAFETY: on the JS thread, with the env and value of the reply being read.
        unsafe { napi_ohos::check_status!(sys::napi_typeof(env, value, &mut kind))? };
        if kind == sys::ValueType::napi_object {
            for (theirs, ours) in OTHER_SPELLINGS {
                let mut has = false;
                // SAFETY: as above, with a NUL-terminated name.
                unsafe {
                    napi_ohos::check_status!(sys::napi_has_named_property(
                        env,
                        value,
                        theirs.as_ptr(),
                        &mut has
                    ))?
                };
                if has {
                    let theirs = theirs.to_str().unwrap_or_default();
                    return Err(napi_ohos::Error::from_reason(format!(
                        "{theirs}: an executor's result spells it {ours}"
                    )));
                }
            }
        }
        // SAFETY: as above.
        let result = unsafe { ToolResultObject::from_napi_value(env, value) }?;
        // SAFETY: as above; read as a ToolResultObject, the value is an object.
        let object = unsafe { Object::from_napi_value(env, value) }?;
        if let Some(key) = unknown_key(&object, ToolResultObject::KEYS)? {
            return Err(napi_ohos::Error::from_reason(unknown_key_refusal::<ToolResultObject>(&key)));
        }
        let contents: Array<'_> = object.get_named_property("contents")?;
        for index in 0..contents.len() {
            let Some(part) = contents.get::<Object<'_>>(index)? else { continue };
            if let Some(key) = unknown_key(&part, ContentPartObject::KEYS)? {
                return Err(napi_ohos::Error::from_reason(format!(
                    "contents[{index}]: {}",
                    unknown_key_refusal::<ContentPartObject>(&key)
                )));
            }
        }
        Ok(ExecutorResult(result))
    }
}

/// The reason of `signal` if it is cancelled.
fn cancelled_reason(signal: &CancellationSignal) -> Option<String> {
    signal.is_cancelled().then(|| signal.reason().unwrap_or_else(|| "no reason".to_string()))
}

/// An ArkTS/JS executor function.
pub(crate) struct JsToolExecutor {
    tool_name: String,
    function: JsFn<ExecutorCall>,
    timeout: Duration,
}

impl JsToolExecutor {
    /// Wraps a JS function (call on the JS thread, at registration).
    ///
    /// # Errors
    /// When the thread-safe function cannot be created.
    pub(crate) fn new(
        env: &Env,
        tool_name: String,
        function: Function<'_, Unknown<'static>, Unknown<'static>>,
        timeout: Duration,
    ) -> napi_ohos::Result<Self> {
        let function = shield(env, &function)?
            .build_threadsafe_function::<Queued<ExecutorCall>>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|ctx| Ok(call_args(&ctx.env, ctx.value, executor_args)))?;
        Ok(JsToolExecutor { tool_name, function: JsFn::new(env, function), timeout })
    }
}

/// The session metadata as JSON text (keys in order, as `Value::Object` writes them). Built by
/// inserting: `collect` into a map sorts first, with a sort instantiated for this one iterator
/// (BENCHMARKS.md, "Size of the stripped release `.so`").
fn metadata_json(metadata: &BTreeMap<String, Value>) -> String {
    let mut map = Map::new();
    for (key, value) in metadata {
        map.insert(key.clone(), value.clone());
    }
    Value::Object(map).to_string()
}

/// The tool error of what an executor threw (`how`: "threw" or "rejected"): a domain error with
/// its code and message, anything else `tool_execution_failed` with its text. Either message is
/// app text on its way to the state, the events and the model: the API key (a secret registered
/// with the process logger) is removed from it, should the app have put it there.
fn thrown_error(name: &str, how: &str, thrown: Thrown) -> AgentError {
    use crate::logging::redact_secrets;
    match thrown.domain {
        Some(domain) => AgentError::tool(domain.code, redact_secrets(&domain.message)),
        None => AgentError::execution_failed(format!(
            "executor of {name} {how}: {}",
            redact_secrets(&thrown.text)
        )),
    }
}

/// `result` without the API key (a secret registered with the process logger; see
/// [`thrown_error`]), in its texts, and the strings and object keys of its JSON parts and its
/// metadata: what an executor or a hook of the app returned, on its way to the state, the events
/// and the model.
pub(crate) fn redact_result(mut result: ToolResult) -> ToolResult {
    for part in &mut result.contents {
        match part {
            ContentPart::Text { text } => redact_text(text),
            ContentPart::Json { value } => redact_value(value),
        }
    }
    if let Some(metadata) = result.metadata.as_mut() {
        redact_map(metadata);
    }
    result
}

/// `text` without the API key, in place (untouched, and not copied, when it has none).
pub(crate) fn redact_text(text: &mut String) {
    if let Cow::Owned(clean) = crate::logging::redact_secrets(text) {
        *text = clean;
    }
}

/// `value` without the API key in any string or object key ([`redact_map`]), in place.
pub(crate) fn redact_value(value: &mut Value) {
    match value {
        Value::String(text) => redact_text(text),
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => redact_map(map),
        _ => {}
    }
}

/// `map` without the API key in its values and its keys, in place (rebuilt only when a key holds
/// it). A key holding it is renamed: the key becomes [`REDACTED`](crate::logging::REDACTED) in it.
/// Should that name be taken (`{"sk-…": 1, "[REDACTED]": 2}`, or two keys that differ only where
/// each had the key), both entries are kept, not merged: a key the redaction leaves as it is keeps
/// its name, and a renamed one takes the first free name of `name`, `name (2)`, `name (3)`... in
/// the order of the original keys (sorted: the map is a `BTreeMap`), so the result is the same on
/// every run and no entry of the app's is lost.
fn redact_map(map: &mut Map<String, Value>) {
    map.values_mut().for_each(redact_value);
    let holds_secret = |key: &String| matches!(crate::logging::redact_secrets(key), Cow::Owned(_));
    if !map.keys().any(holds_secret) {
        return;
    }
    let mut renamed = Vec::new();
    for (key, value) in std::mem::take(map) {
        match crate::logging::redact_secrets(&key) {
            Cow::Owned(clean) => renamed.push((clean, value)),
            Cow::Borrowed(_) => {
                map.insert(key, value);
            }
        }
    }
    for (clean, value) in renamed {
        let mut name = clean.clone();
        let mut n = 2;
        while map.contains_key(&name) {
            name = format!("{clean} ({n})");
            n += 1;
        }
        map.insert(name, value);
    }
}

#[async_trait]
impl ToolExecutor for JsToolExecutor {
    /// The call is marked started on the JS thread, as the app's function is called
    /// ([`call_js_marked`]): a run that ends while the call waits for the JS thread knows it
    /// never ran.
    fn marks_own_start(&self) -> bool {
        true
    }

    async fn execute(
        &self,
        arguments: Map<String, Value>,
        context: ToolContext,
    ) -> Result<ToolResult, AgentError> {
        super::panic_point!(Executor);
        let signal = context.signal.child();
        let listeners = CancellationToken::new();
        // Ends the `onCancel` registrations of this call however the call ends.
        let _listeners_guard = listeners.clone().drop_guard();
        let call = ExecutorCall {
            arguments_json: Value::Object(arguments).to_string(),
            session_id: context.session_id.clone(),
            call_id: context.call_id.clone(),
            batch_call_id: context.batch_call_id.clone(),
            schema_version: context.state.schema_version,
            metadata_json: metadata_json(&context.state.metadata),
            signal: signal.clone(),
            parent: context.signal.clone(),
            listeners,
        };
        let name = &self.tool_name;
        let outcome = tokio::select! {
            biased;
            _ = context.signal.cancelled() => {
                let reason = context.signal.reason().unwrap_or_else(|| "Tool cancelled".to_string());
                return Err(AgentError::of(codes::TOOL_CANCELLED, reason));
            }
            outcome = call_js_marked::<_, ExecutorResult>(
                &self.function, call, self.timeout, &context.signal, context.started.clone(),
            ) => outcome,
        };
        match outcome {
            Ok(Settled::Value(ExecutorResult(result))) => {
                result.into_core().map(redact_result).map_err(|why| {
                    AgentError::of(
                        codes::TOOL_RESULT_INVALID,
                        format!("executor of {name} returned an invalid ToolResult: {why}"),
                    )
                })
            }
            Ok(Settled::Undefined) => Err(AgentError::of(
                codes::TOOL_RESULT_INVALID,
                format!(
                    "executor of {name} returned undefined; it must return a ToolResult or a Promise of one"
                ),
            )),
            Ok(Settled::Invalid(why)) => Err(AgentError::of(
                codes::TOOL_RESULT_INVALID,
                format!("executor of {name} returned something that is not a ToolResult: {why}"),
            )),
            Ok(Settled::Threw(thrown)) => Err(thrown_error(name, "threw", thrown)),
            Ok(Settled::Rejected(thrown)) => Err(thrown_error(name, "rejected", thrown)),
            Err(CallFailure::TimedOut { started }) => {
                signal.cancel(crate::tool::TIMEOUT_REASON);
                let ms = self.timeout.as_millis();
                Err(if started {
                    AgentError::of(
                        codes::TOOL_TIMEOUT,
                        format!("executor of {name} did not finish within {ms} ms"),
                    )
                } else {
                    // Never called: nothing of it can have taken effect (no tool_timeout caveat),
                    // and calling it again is safe.
                    AgentError::of(
                        codes::TOOL_NOT_STARTED,
                        format!(
                            "executor of {name} was not started within {ms} ms: the app was busy, and the \
                             tool did not run"
                        ),
                    )
                })
            }
            // The worker the executor belongs to ended: as a call a kill cut short (repair's
            // answers), never "threw", which invites calling it again.
            Err(CallFailure::EnvGone { started: true }) => Err(AgentError::of(
                codes::TOOL_INTERRUPTED,
                format!(
                    "executor of {name} was interrupted while it ran (its ArkTS environment was torn \
                     down); it may or may not have taken effect, so check before calling it again"
                ),
            )),
            Err(CallFailure::EnvGone { started: false }) => Err(AgentError::of(
                codes::TOOL_NOT_STARTED,
                format!(
                    "executor of {name} was not started: its ArkTS environment was torn down first, \
                     and the tool did not run"
                ),
            )),
            Err(CallFailure::NotQueued(status)) => Err(AgentError::execution_failed(format!(
                "executor of {name} could not be called ({status}); the ArkTS environment may be closing"
            ))),
            // As a Rust executor's panic is: the call failed, the registry goes on.
            Err(CallFailure::Binding(why)) => {
                Err(AgentError::execution_failed(format!("executor of {name} failed in the binding: {why}")))
            }
        }
    }
}
