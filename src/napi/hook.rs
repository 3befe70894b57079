//! `JsHook`: an ArkTS object whose optional methods mirror [`AgentHook`], as a core hook. Each
//! method present on the object is read once (`get_named_property`), bound to the object (so
//! `this` works) and turned into a weak thread-safe function. A method may return its decision,
//! a Promise of it, or `undefined` (no change).
//!
//! Failures are contained: a `beforeToolCall` that throws, rejects, times out or returns a wrong
//! shape denies the call with a `hook_failed` result (fail closed); an `afterToolCall` that fails
//! keeps the result unchanged and logs a warning.
//!
//! Used by the Agent class (runtime issue): nothing exports it yet, so it is not tested from Node.

use super::callback::{call_js, CallFailure, JsFn, Settled};
use super::dto::{
    AfterToolCallDecisionObject, BeforeToolCallDecisionObject, HookContextObject, ToolCallObject,
    ToolDefinitionObject, ToolResultObject,
};
use crate::error::{codes, AgentError};
use crate::hook::{AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext};
use crate::message::{ChatMessage, ToolCall};
use crate::tool::{RiskLevel, ToolDefinition, ToolResult};
use async_trait::async_trait;
use napi_ohos::bindgen_prelude::{FnArgs, Function, JsObjectValue, Object, Unknown};
use napi_ohos::{Env, ValueType};
use std::time::Duration;

type BeforeArgs = (ToolCallObject, HookContextObject, Option<ToolDefinitionObject>);
type AfterArgs = (ToolCallObject, HookContextObject, ToolResultObject);

/// An ArkTS hook object.
#[allow(dead_code)] // constructed by the Agent class (runtime issue)
pub(crate) struct JsHook {
    before_tool_call: Option<JsFn<BeforeArgs, FnArgs<BeforeArgs>>>,
    after_tool_call: Option<JsFn<AfterArgs, FnArgs<AfterArgs>>>,
    timeout: Duration,
}

#[allow(dead_code)] // used by the Agent class (runtime issue)
impl JsHook {
    /// Reads the hook's methods (call on the JS thread, when the hook is added).
    ///
    /// # Errors
    /// When a method name is present but not a function (`config_invalid`, as a JS error), or a
    /// thread-safe function cannot be created.
    pub(crate) fn from_object(env: &Env, object: Object<'_>, timeout: Duration) -> napi_ohos::Result<Self> {
        Ok(JsHook {
            before_tool_call: method(env, &object, "beforeToolCall")?,
            after_tool_call: method(env, &object, "afterToolCall")?,
            timeout,
        })
    }
}

/// The bound method `name` of `object` as a weak thread-safe function, if present.
fn method<T: 'static>(
    env: &Env,
    object: &Object<'_>,
    name: &str,
) -> napi_ohos::Result<Option<JsFn<T, FnArgs<T>>>>
where
    FnArgs<T>: napi_ohos::bindgen_prelude::JsValuesTupleIntoVec,
{
    let property: Unknown<'_> = object.get_named_property(name)?;
    match property.get_type()? {
        ValueType::Undefined | ValueType::Null => return Ok(None),
        ValueType::Function => {}
        other => {
            let error = AgentError::of(
                codes::CONFIG_INVALID,
                format!("hook property {name} must be a function, not {other}"),
            );
            return Err(super::error::js_error(env, &error));
        }
    }
    // SAFETY: checked to be a function of this env, on the JS thread.
    let function: Function<'_, Unknown<'static>, Unknown<'static>> = unsafe { property.cast()? };
    let bound = function.bind(object)?;
    let tsfn = super::callback::shield(env, &bound)?
        .build_threadsafe_function::<T>()
        .weak::<true>()
        .callee_handled::<false>()
        .build_callback(|ctx| Ok(FnArgs::from(ctx.value)))?;
    Ok(Some(tsfn))
}

fn hook_context(ctx: &HookContext<'_>) -> HookContextObject {
    HookContextObject {
        session_id: ctx.session_id.to_string(),
        run_id: ctx.run_id.to_string(),
        round: ctx.round,
    }
}

fn definition_object(d: &ToolDefinition) -> ToolDefinitionObject {
    ToolDefinitionObject {
        name: d.name.clone(),
        description: d.description.clone(),
        parameters_json: d.parameters.to_string(),
        risk_level: Some(
            match d.risk_level {
                RiskLevel::Safe => "safe",
                RiskLevel::Sensitive => "sensitive",
                RiskLevel::Dangerous => "dangerous",
            }
            .to_string(),
        ),
        idempotent: Some(d.idempotent),
        timeout_ms: d.timeout.map(|t| t.as_millis() as f64),
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
        Ok(Settled::Threw(text)) => Err(format!("{method} threw: {text}")),
        Ok(Settled::Rejected(text)) => Err(format!("{method} rejected: {text}")),
        Err(CallFailure::TimedOut) => {
            Err(format!("{method} did not settle within {} ms", timeout.as_millis()))
        }
        Err(CallFailure::NotQueued(status)) => Err(format!("{method} could not be called ({status})")),
    }
}

/// The core decision of a `beforeToolCall` answer.
///
/// # Errors
/// A description of what is wrong with it.
fn before_decision(decision: BeforeToolCallDecisionObject) -> Result<BeforeToolCall, String> {
    match decision.action.as_str() {
        "proceed" => Ok(BeforeToolCall::Proceed(decision.call.map(ToolCall::from))),
        "deny" => {
            let result = match decision.result {
                Some(r) => r.into_core()?,
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
        other => Err(format!("action must be proceed, deny, defer or abort, not {other:?}")),
    }
}

/// The core decision of an `afterToolCall` answer.
///
/// # Errors
/// A description of what is wrong with it.
fn after_decision(decision: AfterToolCallDecisionObject) -> Result<AfterToolCall, String> {
    let action = match decision.action.as_str() {
        "proceed" => {
            AfterToolCallAction::Proceed(decision.result.map(ToolResultObject::into_core).transpose()?)
        }
        "stop" => AfterToolCallAction::Stop,
        "abort" => {
            AfterToolCallAction::Abort(decision.reason.unwrap_or_else(|| "aborted by a hook".to_string()))
        }
        other => return Err(format!("action must be proceed, stop or abort, not {other:?}")),
    };
    let inject = match decision.inject_json {
        None => Vec::new(),
        Some(text) => serde_json::from_str::<Vec<ChatMessage>>(&text)
            .map_err(|e| format!("injectJson is not a JSON array of chat messages: {e}"))?,
    };
    Ok(AfterToolCall { action, inject })
}

#[async_trait]
impl AgentHook for JsHook {
    async fn before_tool_call(
        &self,
        ctx: &HookContext<'_>,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        let Some(function) = &self.before_tool_call else {
            return BeforeToolCall::Proceed(None);
        };
        let args = (ToolCallObject::from(call), hook_context(ctx), definition.map(definition_object));
        let settled = call_js::<_, _, BeforeToolCallDecisionObject>(function, args, self.timeout).await;
        match outcome("beforeToolCall", settled, self.timeout)
            .and_then(|d| d.map(before_decision).transpose())
        {
            Ok(Some(decision)) => decision,
            Ok(None) => BeforeToolCall::Proceed(None),
            Err(why) => {
                BeforeToolCall::Deny(ToolResult::from_error(&AgentError::of(codes::HOOK_FAILED, why)))
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
        let args = (ToolCallObject::from(call), hook_context(ctx), ToolResultObject::from(result.clone()));
        let settled = call_js::<_, _, AfterToolCallDecisionObject>(function, args, self.timeout).await;
        match outcome("afterToolCall", settled, self.timeout).and_then(|d| d.map(after_decision).transpose())
        {
            Ok(Some(decision)) => decision,
            Ok(None) => AfterToolCall::default(),
            Err(why) => {
                log::warn!("arkagent: {}: {why}; the result is kept unchanged", codes::HOOK_FAILED);
                AfterToolCall::default()
            }
        }
    }
}
