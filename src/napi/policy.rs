//! The app's approval policy: an ArkTS/JS function as the core [`ApprovalPolicy`], and the
//! [`PolicySlot`] the native `Agent` is built with so that `setApprovalPolicy` can install,
//! replace or remove it at any time (without one the slot answers with the core's
//! [`DefaultApprovalPolicy`]).
//!
//! The function is `(callJson, definitionJson | null) => answer | Promise<answer>`: `callJson` is
//! the call as the before-hooks left it (`{"id","name","arguments"}`), `definitionJson` the tool's
//! definition in the core's serde shape (`null` for an unknown tool), and the answer a string that
//! [`parse_policy_answer`] accepts: `allow`, `deny`, `requireConfirmation`, or
//! `{"action": ..., "reason"?: ...}`.
//!
//! # Waiting
//! The runtime asks [`ApprovalPolicy::decide_async`] inside a run's task, never on the JS thread.
//! The adapter queues the call to the JS thread and awaits the answer (or the Promise's
//! settlement), at most the timeout, or until the run is cancelled. The run's task is suspended
//! meanwhile and holds no thread: any number of runs may wait on their policies at once (each costs
//! a queued call and a timer, not an OS thread), and the runtime's workers go on with everything
//! else, the policy's own calls back into the agent (`stateJson`...) included.
//!
//! The synchronous [`decide`](ApprovalPolicy::decide) /
//! [`decide_cancellable`](ApprovalPolicy::decide_cancellable) are for direct callers only: they
//! block the calling thread on the same wait inside [`tokio::task::block_in_place`] (the worker's
//! other tasks move to another thread meanwhile; each such wait holds a thread of the runtime's
//! blocking pool). Should one be called on the JS thread itself (which would wait for itself) or
//! outside a multi-thread runtime (which cannot block), the adapter does not call the function and
//! fails closed at once.
//!
//! No deadlock: the JS thread never waits synchronously on the runtime (every export that reaches
//! the runtime returns a Promise; the synchronous ones only take locks that a waiting run does not
//! hold; the slot's lock is released before the call).
//!
//! # Failure: closed
//! A throw, a rejection, an answer that is not one of the accepted strings (`undefined`, an
//! object, an unknown action, stray keys), no answer within the timeout, a closing environment or
//! a panic never allow the call: the call needs the user's confirmation (the whole batch freezes,
//! as for a sensitive tool), with a reason that starts with the code `approval_policy_failed` and
//! says what went wrong. The failure is also logged as a warning. A late answer is dropped, and a
//! call still waiting for a busy JS thread when the timeout passes (or the run is cancelled) is
//! never made: the function is not asked about a call already decided without it (`callback`). A
//! call of an unknown tool is the exception: the policy is asked (`definitionJson` null) and its
//! denial stands, but nothing could run the call, so the user is never asked about it (the
//! runtime's rule for every policy): where the policy wants a confirmation or fails, the registry
//! answers it `tool_not_found`.

use super::callback::{call_js, passthrough_fn, CallFailure, JsFn, Settled};
use super::dto::{to_json, Text};
use super::hook::HookArgs;
use crate::approval::{parse_policy_answer, ApprovalPolicy, DefaultApprovalPolicy, PolicyDecision};
use crate::error::{codes, AgentError};
use crate::logging::redact_secrets;
use crate::message::ToolCall;
use crate::tool::{CancellationSignal, ToolDefinition};
use async_trait::async_trait;
use futures_util::FutureExt;
use napi_ohos::bindgen_prelude::{Function, Unknown};
use napi_ohos::Env;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};
use std::thread::ThreadId;
use std::time::Duration;
use tokio::runtime::{Handle, RuntimeFlavor};

/// The agent's approval policy: the app's function when one is set, else the default policy.
#[derive(Default)]
pub(crate) struct PolicySlot {
    // A std RwLock: read to clone the Arc out, written by `set`; never held while deciding.
    current: RwLock<Option<Arc<JsApprovalPolicy>>>,
}

impl PolicySlot {
    /// Installs the app's policy (`None`: back to the default policy). Runs already deciding keep
    /// the policy they asked.
    pub(crate) fn set(&self, policy: Option<JsApprovalPolicy>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = policy.map(Arc::new);
    }

    /// The app's policy, if one is set (the lock is released at once).
    fn current(&self) -> Option<Arc<JsApprovalPolicy>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl ApprovalPolicy for PolicySlot {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        self.decide_cancellable(call, definition, &CancellationSignal::new())
    }

    fn decide_cancellable(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> PolicyDecision {
        match self.current() {
            Some(policy) => policy.decide_cancellable(call, definition, cancel),
            None => DefaultApprovalPolicy.decide(call, definition),
        }
    }

    async fn decide_async(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> PolicyDecision {
        match self.current() {
            Some(policy) => policy.decide_async(call, definition, cancel).await,
            None => DefaultApprovalPolicy.decide(call, definition),
        }
    }
}

/// An app function as an approval policy.
pub(crate) struct JsApprovalPolicy {
    function: JsFn<HookArgs>,
    timeout: Duration,
    /// The JS thread the function belongs to: `decide` must never block it.
    js_thread: ThreadId,
}

impl JsApprovalPolicy {
    /// Wraps the function (call on the JS thread, when the policy is set).
    ///
    /// # Errors
    /// When the thread-safe function cannot be created.
    pub(crate) fn new(
        env: &Env,
        function: Function<'_, Unknown<'static>, Unknown<'static>>,
        timeout: Duration,
    ) -> napi_ohos::Result<Self> {
        let function = passthrough_fn(env, &function)?;
        Ok(JsApprovalPolicy { function, timeout, js_thread: std::thread::current().id() })
    }

    /// The function's decision, or why there is none.
    async fn ask(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> Result<PolicyDecision, String> {
        let args = HookArgs::from_texts(vec![Some(to_json(call)), definition.map(to_json)]);
        // A cancelled run stops waiting: it ends without running or freezing anything, so the
        // decision given here is never acted on (the late answer is dropped).
        let waited = tokio::select! {
            biased;
            waited = call_js::<_, Text>(&self.function, args, self.timeout, cancel) => Some(waited),
            () = cancel.cancelled() => None,
        };
        let Some(waited) = waited else {
            return Ok(PolicyDecision::RequireConfirmation(
                "the run was cancelled before the policy answered".to_string(),
            ));
        };
        let answer = match waited {
            Ok(Settled::Value(answer)) => answer,
            Ok(Settled::Undefined) => return Err("the policy returned undefined".to_string()),
            Ok(Settled::Invalid(why)) => {
                return Err(format!("the policy returned something that is not a string: {why}"))
            }
            // What app code threw goes into the pending item's reason (state, events): no secret.
            Ok(Settled::Threw(thrown)) => {
                return Err(format!("the policy threw: {}", redact_secrets(&thrown.text)))
            }
            Ok(Settled::Rejected(thrown)) => {
                return Err(format!("the policy's Promise rejected: {}", redact_secrets(&thrown.text)))
            }
            Err(CallFailure::TimedOut { started }) => {
                return Err(format!(
                    "the policy did not answer within {} ms{}",
                    self.timeout.as_millis(),
                    CallFailure::not_called_note(started)
                ))
            }
            Err(CallFailure::NotQueued(status)) => {
                return Err(format!(
                    "the policy could not be called ({status}); the environment may be closing"
                ))
            }
            Err(CallFailure::Binding(why)) => return Err(format!("the policy failed in the binding: {why}")),
            Err(CallFailure::EnvGone { .. }) => {
                return Err("the policy did not answer: its ArkTS environment was torn down".to_string())
            }
        };
        parse_policy_answer(&answer, &call.name).map_err(|e| e.message)
    }

    /// The runtime a synchronous caller blocks on until the answer comes, or why this thread
    /// cannot wait for it.
    fn blocking_handle(&self) -> Result<Handle, String> {
        if std::thread::current().id() == self.js_thread {
            return Err(
                "the policy was consulted on the JS thread, which cannot wait for its own answer".to_string()
            );
        }
        let handle = Handle::try_current()
            .map_err(|_| "the policy was consulted outside the module's runtime".to_string())?;
        if matches!(handle.runtime_flavor(), RuntimeFlavor::CurrentThread) {
            return Err(
                "the policy was consulted on a current-thread runtime, which cannot block".to_string()
            );
        }
        Ok(handle)
    }
}

#[async_trait]
impl ApprovalPolicy for JsApprovalPolicy {
    fn decide(&self, call: &ToolCall, definition: Option<&ToolDefinition>) -> PolicyDecision {
        self.decide_cancellable(call, definition, &CancellationSignal::new())
    }

    /// A direct caller's synchronous wait (the runtime awaits [`decide_async`](Self::decide_async)).
    fn decide_cancellable(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> PolicyDecision {
        let blocked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let handle = self.blocking_handle()?;
            Ok(tokio::task::block_in_place(|| handle.block_on(self.decide_async(call, definition, cancel))))
        }));
        let why = match blocked {
            Ok(Ok(decision)) => return decision,
            Ok(Err(why)) => why,
            Err(payload) => super::error::panic_error(payload.as_ref()).message,
        };
        fail_closed(call, definition.is_some(), why)
    }

    async fn decide_async(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
        cancel: &CancellationSignal,
    ) -> PolicyDecision {
        let why = match AssertUnwindSafe(self.ask(call, definition, cancel)).catch_unwind().await {
            Ok(Ok(decision)) => return decision,
            Ok(Err(why)) => why,
            Err(payload) => super::error::panic_error(payload.as_ref()).message,
        };
        fail_closed(call, definition.is_some(), why)
    }
}

/// The decision when the policy gave none: the user is asked (never allowed). For an unknown tool
/// (`known` false) the runtime answers the call with the registry's
/// `tool_not_found` ([`BeforeToolCallOutcome::into_batch_input`](crate::hook::BeforeToolCallOutcome::into_batch_input)).
fn fail_closed(call: &ToolCall, known: bool, why: String) -> PolicyDecision {
    let error = AgentError::of(codes::APPROVAL_POLICY_FAILED, why);
    let then = if known { "needs confirmation" } else { "is not a registered tool: the registry answers" };
    log::warn!("arkagent: {error}; call {} of {} {then}", call.id, call.name);
    PolicyDecision::RequireConfirmation(format!(
        "{}: {}; the call needs the user's confirmation",
        error.code, error.message
    ))
}
