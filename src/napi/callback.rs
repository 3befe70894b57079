//! Calling an ArkTS/JS function from Rust: a weak thread-safe function (it never keeps the event
//! loop alive), called with `call_with_return_value` in non-blocking mode; the JS thread sends the
//! outcome on a oneshot. A Promise is awaited through `then`/`catch` attached on the JS thread, so
//! no napi handle ever crosses to a worker thread. `call_async` is never used: with
//! `CalleeHandled = false` it turns a synchronous throw into an uncaught exception.
//!
//! # Panics on the JS thread
//! napi-ohos runs the binding's closures on the JS thread from `extern "C"` callbacks (a
//! thread-safe function's call, a native function's trampoline, a Promise's `then`): a panic
//! unwinding out of one aborts the process, and an `Err` returned from a thread-safe function's
//! callback is raised as an uncaught exception. So every such closure runs under a guard:
//! - the arguments of a call are made by [`call_args`]: a panic or an error there refuses the call
//!   (no arguments at all, which the [`shield`] takes as "do not call the app function"), with
//!   the reason left for the call's reply on this thread;
//! - the [`shield`] itself: a panic there refuses the call the same way;
//! - every reply (the closure given to `call_with_return_value`) first takes the refusal, if any
//!   ([`in_reply`]), then runs under a guard; in [`call_js`], so do the `then`/`catch` attached to
//!   a returned Promise. There a refusal or a panic is the call's [`CallFailure::Binding`], sent at
//!   once: the waiting side never waits for an answer that cannot come (the listener's and
//!   `onCancel`'s replies, which nothing waits on but the event's delivery, log it instead).
//!
//! A refusal only lives between the two: napi-ohos makes the arguments, calls the shield and runs
//! the reply in one callback, and every call of a [`JsFn`] is made with a reply
//! (`call_with_return_value`: a bare `call` would leave its refusal to the next call's reply);
//! while it is pending no app code runs (the shield does not call the function), so nothing can
//! call back into the module, and no later call can find it. Only [`call_args`] makes a
//! [`JsArgs`] (its field is private), and it refuses an empty one: a call without arguments is
//! always a refused one.
//!
//! # Calls nobody waits for any more
//! The JS thread reaches a queued call only when it is free. While it was busy (the app's own
//! synchronous work, a synchronous executor or hook), the [`call_js`] that queued the call may have
//! stopped waiting: it timed out, or its future was dropped (a cancelled run), and the runtime has
//! gone on as it does without an answer (`tool_timeout`, a hook's or the policy's failure) or
//! ended the run. Each waited-for call carries a flag that its [`Waiting`] sets when it ends, and
//! [`call_args`] reads it first: such a call is refused, so the app function never runs for a call
//! the runtime has already dealt with. It carries the signal its caller stops waiting on too (the
//! run's, for a hook or the policy; the call's, for an executor), which [`call_args`] reads as
//! well: a cancel ends the wait only a moment later, on a worker thread, and the JS thread, free
//! again right after the app's `cancel()`, must not make the call in between. (One the JS thread starts just before the timeout is made,
//! and its late answer dropped.) The flag is a [`CallStart`] that either side sets first: the JS
//! thread marks the call started, the waiting side gives it up, so a timeout knows whether the
//! function ever ran ([`CallFailure::TimedOut`]`{ started }`). An executor's call uses its
//! context's ([`ToolContext::started`](crate::tool::ToolContext::started)): a run that ends while
//! the call is queued gives it up, and knows it never ran.
//!
//! # Calls of an environment torn down
//! A [`JsFn`] carries the `gone` signal of its environment (`env_life`). Once that environment is
//! torn down (a worker terminated), nothing of its calls can come back: a [`call_js`] still waiting
//! is answered at once ([`CallFailure::EnvGone`]`{ started }`), not at its deadline. A call the
//! termination cut off on the JS thread (the function's call failed with the termination pending,
//! which is no throw of the app's) is refused, and ends the environment there and then.

use crate::tool::{CallStart, CancellationSignal};
use napi_ohos::bindgen_prelude::{
    FromNapiValue, Function, JsValue, JsValuesTupleIntoVec, PromiseRaw, ToNapiValue, Unknown,
};
use napi_ohos::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_ohos::{sys, Env, Status, ValueType};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;

/// The thread-safe function of a [`JsFn`]: weak, and not error-first (`CalleeHandled = false`).
pub(crate) type RawJsFn<T> = ThreadsafeFunction<Queued<T>, Unknown<'static>, JsArgs, Status, false, true>;

/// A JS function callable from any thread: `T` is the Rust data queued per call ([`Queued`]),
/// turned into [`JsArgs`] on the JS thread; with the `gone` signal of its environment
/// (`env_life`), which answers at once every call still waiting when that environment is torn
/// down ([`call_js`]).
pub(crate) struct JsFn<T: 'static> {
    function: RawJsFn<T>,
    gone: CancellationSignal,
}

impl<T: 'static> JsFn<T> {
    /// `function`, of `env` (call on its JS thread).
    pub(crate) fn new(env: &Env, function: RawJsFn<T>) -> Self {
        JsFn { function, gone: super::env_life::gone(env) }
    }

    /// Queues a call without blocking; `reply` runs on the JS thread with what it returned.
    pub(crate) fn call_with_return_value(
        &self,
        value: Queued<T>,
        reply: impl FnOnce(napi_ohos::Result<Unknown<'static>>, Env) -> napi_ohos::Result<()> + 'static,
    ) -> Status {
        self.function.call_with_return_value(value, ThreadsafeFunctionCallMode::NonBlocking, reply)
    }
}

/// One call of a [`JsFn`] on its way to the JS thread: its Rust data, and for a call whose answer
/// is waited for ([`call_js`]), whether the waiting side has stopped waiting.
pub(crate) struct Queued<T> {
    value: T,
    /// `None` for a call nothing waits on.
    waited: Option<Waited>,
}

impl<T> Queued<T> {
    /// A call nothing waits on (the event listener's, an `onCancel` callback's): always made.
    pub(crate) fn unwaited(value: T) -> Self {
        Queued { value, waited: None }
    }
}

/// What a call whose answer is waited for carries to the JS thread.
struct Waited {
    /// Started (on the JS thread as the call is made) or given up (by the call's [`Waiting`] when
    /// [`call_js`] returns or its future is dropped, by the run that ends while it is queued, or
    /// on the JS thread for a call whose run was cancelled), whichever comes first.
    flag: CallStart,
    /// The signal the wait ends on (the run's, the call's): once it fired, the wait is dropped.
    cancel: CancellationSignal,
}

impl Waited {
    /// On the JS thread, as the call is about to be made: whether it may be (then it is marked
    /// started). Not when the waiting side gave up first, nor once its signal fired: the wait
    /// ends on a worker thread a moment after the cancel, and the JS thread (which the cancel
    /// itself may have come from) must not make the call in between.
    fn start(&self) -> bool {
        if self.cancel.is_cancelled() {
            self.flag.give_up();
            return false;
        }
        self.flag.start()
    }
}

/// The JS arguments of one call, made on the JS thread by [`call_args`]; none when making them
/// failed (the call is refused).
pub(crate) struct JsArgs(Vec<sys::napi_value>);

impl JsValuesTupleIntoVec for JsArgs {
    fn into_vec(self, _env: sys::napi_env) -> napi_ohos::Result<Vec<sys::napi_value>> {
        Ok(self.0)
    }
}

thread_local! {
    /// Why the call being made on this (JS) thread was refused: set by [`call_args`] or the
    /// [`shield`] and taken by the same call's reply ([`in_reply`]), within the one napi-ohos
    /// callback that makes the call and runs its reply.
    static REFUSED: Cell<Option<String>> = const { Cell::new(None) };
    /// Whether the value the shield just returned on this (JS) thread is what the app function
    /// threw (see [`shield`]): set by the shield, taken by the same call's reply ([`in_reply`]),
    /// within the one napi-ohos callback, as [`REFUSED`].
    static THREW: Cell<bool> = const { Cell::new(false) };
}

/// Why a call cut off by the teardown of its environment failed ([`CallFailure::EnvGone`]).
const ENV_GONE: &str = "its environment was torn down (the worker ended)";

/// Refuses the call being made: its reason is left for its reply.
fn refuse(why: String) {
    REFUSED.set(Some(why));
}

/// `body` on the JS thread under a panic guard: a panic is its message (redacted of secrets),
/// and the exception it may have left pending is cleared.
pub(crate) fn caught<T>(env: &Env, body: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).map_err(|payload| panicked(env, payload))
}

/// What [`caught`] makes of a panic (not generic: one instance for every body).
fn panicked(env: &Env, payload: Box<dyn std::any::Any + Send>) -> String {
    clear_pending_exception(env);
    super::error::panic_error(payload.as_ref()).message
}

/// On the JS thread, in a thread-safe function's callback: the JS arguments of a call, made by
/// `make` from the queued value under a panic guard. A call its waiting side has stopped waiting
/// for (see "Calls nobody waits for any more" above), a panic or an error refuses the call: no
/// arguments (the [`shield`] then does not call the app function), and why for its reply. Never
/// fails: an `Err` from the callback would be raised as an uncaught exception, and the reply
/// (with the sender the Rust side waits on) dropped unanswered.
pub(crate) fn call_args<T>(
    env: &Env,
    queued: Queued<T>,
    make: impl FnOnce(&Env, T) -> napi_ohos::Result<Vec<sys::napi_value>>,
) -> JsArgs {
    let Queued { value, waited } = queued;
    // A terminating environment still drains its queued calls, but runs no JS: such a call is
    // never made. It is given up, not started (before, it was marked started and answered as
    // cut off while it ran, "may or may not have taken effect"), and ends the environment.
    if !super::env_life::can_run_js(env) && !exception_pending(env) {
        if let Some(waited) = &waited {
            waited.flag.give_up();
        }
        super::env_life::end(env);
        refuse(ENV_GONE.to_string());
        return JsArgs(Vec::new());
    }
    if waited.is_some_and(|waited| !waited.start()) {
        return abandoned_args();
    }
    let made = caught(env, || {
        super::panic_point!(Args);
        make(env, value)
    });
    made_args(env, made)
}

/// The refusal of a call nobody waits for any more ([`call_args`]; not generic, as [`made_args`]).
fn abandoned_args() -> JsArgs {
    refuse("nobody waited for its answer any more (a timeout or a cancel came first)".to_string());
    JsArgs(Vec::new())
}

/// The [`JsArgs`] of what [`call_args`] made, or the refusal (not generic: one instance for every
/// kind of call).
fn made_args(env: &Env, made: Result<napi_ohos::Result<Vec<sys::napi_value>>, String>) -> JsArgs {
    match made {
        Ok(Ok(args)) if !args.is_empty() => return JsArgs(args),
        Ok(Ok(_)) => refuse("the call has no arguments".to_string()),
        Ok(Err(error)) => {
            clear_pending_exception(env);
            refuse(format!("its arguments could not be made: {}", error.reason));
        }
        Err(why) => refuse(why),
    }
    JsArgs(Vec::new())
}

/// On the JS thread, in the reply of a call whose answer the binding does not wait for (the event
/// listener, an `onCancel` callback): `ret` as [`in_reply`]'s body gets it. A throw was contained
/// already (`threw`); an error of napi-ohos' leaves no exception pending; and an `async` function's
/// Promise gets a rejection handler that logs the rejection, as a throw is contained: unhandled,
/// the environment would see it (Node ends the process on an unhandled rejection).
pub(crate) fn drop_reply(env: &Env, ret: &napi_ohos::Result<Unknown<'static>>, threw: bool, what: &str) {
    let value = match ret {
        Err(_) => return clear_pending_exception(env),
        Ok(_) if threw => return,
        Ok(value) => value,
    };
    if !matches!(value.is_promise(), Ok(true)) {
        return;
    }
    let promise: PromiseRaw<'_, Unknown<'static>> = PromiseRaw::new(env.raw(), value.raw());
    let what = what.to_string();
    let attached =
        promise.catch(move |ctx: napi_ohos::bindgen_prelude::CallbackContext<Unknown<'static>>| {
            let text = caught(&ctx.env, || thrown(&ctx.env, &ctx.value).text)
                .unwrap_or_else(|why| format!("<unreadable: {why}>"));
            log::warn!("arkagent: {what} rejected: {text}; ignored");
            Ok(())
        });
    if attached.is_err() {
        clear_pending_exception(env);
    }
}

/// Calls `function` with `data` without waiting for it: the call is always made (see
/// [`Queued::unwaited`]), and what it returns, throws or rejects with is dropped on the JS thread
/// ([`drop_reply`], logged as `what`'s).
pub(crate) fn call_unwaited<T: 'static>(function: &JsFn<T>, data: T, what: &'static str) -> Status {
    function.call_with_return_value(Queued::unwaited(data), move |ret, env| {
        // Run from napi-ohos' `extern "C"` callback: under the binding's guard.
        if let Err(why) = in_reply(&env, |threw| drop_reply(&env, &ret, threw, what)) {
            log::warn!("arkagent: {what} may not have been called: {why}");
        }
        Ok(())
    })
}

/// On the JS thread, first in every reply of a call made through a [`JsFn`]: why the call was
/// refused (no app function was called, or its answer is lost), else `body` under a panic guard,
/// told whether the value the reply got is what the app function threw ([`shield`]).
pub(crate) fn in_reply<T>(env: &Env, body: impl FnOnce(bool) -> T) -> Result<T, String> {
    let threw = THREW.take();
    if let Some(why) = REFUSED.take() {
        clear_pending_exception(env);
        return Err(why);
    }
    caught(env, || body(threw))
}

/// A JS value created on the JS thread for the arguments of the call being made there. It only
/// lives for that callback; a raw handle (not `Unknown<'static>`) keeps the async code free of
/// napi lifetimes.
pub(crate) struct RawJsValue(pub(crate) sys::napi_value);

impl ToNapiValue for RawJsValue {
    unsafe fn to_napi_value(_env: sys::napi_env, value: Self) -> napi_ohos::Result<sys::napi_value> {
        Ok(value.0)
    }
}

/// Wraps an app function in a native function that forwards its arguments and return value, and
/// returns what it throws instead of throwing it on, with [`THREW`] set for the call's reply: every
/// app function is called through this shield. napi-ohos does not see the throw, so it neither
/// reads the thrown value's text itself (its reading builds a `String` from the engine's bytes
/// unchecked: `text`) nor takes a reference to it (Node refuses references to primitives, which
/// napi-ohos then raised as an uncaught exception). A call without arguments is a refused one
/// ([`call_args`]): the app function is not called. Call on the JS thread.
///
/// # Errors
/// When the reference or the native function cannot be created.
pub(crate) fn shield<'env>(
    env: &'env Env,
    function: &Function<'_, Unknown<'static>, Unknown<'static>>,
) -> napi_ohos::Result<Function<'env, Unknown<'static>, Unknown<'static>>> {
    let target = function.create_ref()?;
    shield_with(env, move |env| target.borrow_back(env).map(|target| Some(target.raw())))
}

/// A [`shield`] whose app function is the one `target` names as each call is made (on the JS
/// thread: a handle of the call's scope); none, and the call is not made (it returns `undefined`).
/// What the Agent's listener is called through: the function set when the JS thread gets to
/// an event, not the one set when it was queued. Call on the JS thread.
///
/// # Errors
/// When the native function cannot be created.
pub(crate) fn shield_with<'env>(
    env: &'env Env,
    target: impl Fn(&Env) -> napi_ohos::Result<Option<sys::napi_value>> + 'static,
) -> napi_ohos::Result<Function<'env, Unknown<'static>, Unknown<'static>>> {
    let native =
        env.create_function_from_closure::<Unknown<'static>, _, _>("arkagentShield", move |ctx| {
            // Run from napi-ohos' trampoline (`extern "C"`): a panic is caught, and refuses the
            // call as [`call_args`] does (no exception: the reply takes the refusal).
            let mut undefined = std::ptr::null_mut();
            // SAFETY: on the JS thread, with this env.
            unsafe { sys::napi_get_undefined(ctx.env.raw(), &mut undefined) };
            match caught(ctx.env, || forward(&ctx, target(ctx.env)?, undefined)) {
                Ok(forwarded) => forwarded,
                Err(why) => {
                    refuse(why);
                    Ok(RawJsValue(undefined))
                }
            }
        })?;
    // SAFETY: a function of this env, on the JS thread; only its declared return type changes.
    unsafe { Function::from_napi_value(env.raw(), native.raw()) }
}

/// The shield's body: calls `target` (the app function, a handle of this call's scope) with the
/// call's arguments, or not at all when there are none (a refused call: the module never calls
/// an app function without arguments) or there is no target.
fn forward(
    ctx: &napi_ohos::bindgen_prelude::FunctionCallContext<'_>,
    target: Option<sys::napi_value>,
    undefined: sys::napi_value,
) -> napi_ohos::Result<RawJsValue> {
    super::panic_point!(Shield);
    let Some(target) = target.filter(|_| ctx.length() > 0) else {
        return Ok(RawJsValue(undefined));
    };
    let env = ctx.env.raw();
    let args: Vec<Unknown<'_>> = ctx.arguments()?;
    let raw_args: Vec<sys::napi_value> = args.iter().map(|a| a.raw()).collect();
    let mut result = std::ptr::null_mut();
    // SAFETY: on the JS thread, with values of this env.
    let status = unsafe {
        sys::napi_call_function(env, undefined, target, raw_args.len(), raw_args.as_ptr(), &mut result)
    };
    if status == sys::Status::napi_ok {
        return Ok(RawJsValue(result));
    }
    let mut pending = false;
    let mut exception = std::ptr::null_mut();
    // SAFETY: as above; the exception is taken (and returned as the call's value).
    let took = unsafe {
        sys::napi_is_exception_pending(env, &mut pending) == sys::Status::napi_ok
            && pending
            && sys::napi_get_and_clear_last_exception(env, &mut exception) == sys::Status::napi_ok
    };
    // The environment is terminating (a worker told to end, `process.exit()` in it): the function
    // was cut off, or never entered, by the termination; what "threw" is the termination itself.
    if !super::env_life::can_run_js(ctx.env) {
        super::env_life::end(ctx.env);
        refuse(ENV_GONE.to_string());
        return Ok(RawJsValue(undefined));
    }
    if took {
        THREW.set(true);
        return Ok(RawJsValue(exception));
    }
    // Not called (no exception to say why): refused, as a call whose arguments failed.
    refuse(format!("the app function could not be called ({status})"));
    Ok(RawJsValue(undefined))
}

/// An app function as a [`JsFn`] (shielded, weak, not error-first) whose queued value is its own
/// JS arguments: what the hooks, the approval policy, the event listener and the cancel callbacks
/// call. Call on the JS thread.
///
/// # Errors
/// When the shield or the thread-safe function cannot be created.
pub(crate) fn passthrough_fn<T: 'static + JsValuesTupleIntoVec>(
    env: &Env,
    function: &Function<'_, Unknown<'static>, Unknown<'static>>,
) -> napi_ohos::Result<JsFn<T>> {
    passthrough_shielded(env, shield(env, function)?)
}

/// [`passthrough_fn`] of a function shielded already ([`shield`], [`shield_with`]).
///
/// # Errors
/// When the thread-safe function cannot be created.
pub(crate) fn passthrough_shielded<T: 'static + JsValuesTupleIntoVec>(
    env: &Env,
    shielded: Function<'_, Unknown<'static>, Unknown<'static>>,
) -> napi_ohos::Result<JsFn<T>> {
    let function = shielded
        .build_threadsafe_function::<Queued<T>>()
        .weak::<true>()
        .callee_handled::<false>()
        .build_callback(|ctx| Ok(call_args(&ctx.env, ctx.value, |env, value| value.into_vec(env.raw()))))?;
    Ok(JsFn::new(env, function))
}

/// How a JS call ended, with its value converted to `R` on the JS thread.
pub(crate) enum Settled<R> {
    /// A value (directly or through a resolved Promise) of the expected shape.
    Value(R),
    /// `undefined` (directly or resolved).
    Undefined,
    /// A value that is not of the expected shape (the conversion's message).
    Invalid(String),
    /// The function threw synchronously.
    Threw(Thrown),
    /// The returned Promise was rejected.
    Rejected(Thrown),
}

/// What a JS function threw, or rejected its Promise with.
pub(crate) struct Thrown {
    /// `String(value)` (for an `Error`, without its stack).
    pub(crate) text: String,
    /// The value's own stable code and message, when it carries one (see [`domain_error`]).
    pub(crate) domain: Option<DomainError>,
}

/// A domain error thrown by app code: an object whose `code` property is a stable code
/// ([`is_stable_code`](crate::error::is_stable_code)), such as the bindings' `ArkAgentError`.
pub(crate) struct DomainError {
    /// The `code` property.
    pub(crate) code: String,
    /// The `message` property when it is a non-empty string, else what stands for it ([`domain_error`]).
    pub(crate) message: String,
}

/// Why no outcome came back.
pub(crate) enum CallFailure {
    /// The call could not be queued (the environment is closing).
    NotQueued(Status),
    /// The binding failed on the JS thread (a panic caught in its glue, or the call's arguments
    /// could not be made): the function was not called, or what it answered is lost. The text
    /// says why (a panic's message is redacted of secrets).
    Binding(String),
    /// No outcome within the timeout (a Promise that never settles or was collected unsettled,
    /// a busy JS thread). `started`: whether the function was called; a call the JS thread had
    /// not reached by then never is.
    TimedOut {
        /// Whether the function was called.
        started: bool,
    },
    /// The function's environment was torn down (its worker ended) before it answered, or cut
    /// the call off. `started`: whether the function was called (then it may or may not have
    /// done what it was asked); a call it had not made never is.
    EnvGone {
        /// Whether the function was called.
        started: bool,
    },
}

impl CallFailure {
    /// What a timeout adds to its message: nothing for a call that was made, that it never was
    /// for one the JS thread had not reached.
    pub(crate) fn not_called_note(started: bool) -> &'static str {
        if started {
            ""
        } else {
            " (the JS thread was busy all along: it was never called)"
        }
    }
}

/// The calls of [`call_js`] waiting for an answer, in the process.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// One call of [`call_js`] while it waits: counted in [`WAITING`], and, once it ends (an answer, a
/// timeout, or its future dropped), marking its queued call abandoned: should the JS thread reach
/// that call only now, it is not made ([`call_args`]).
struct Waiting {
    /// Whether no other call was waiting when this one started.
    alone: bool,
    /// The queued call's flag ([`Waited`]).
    flag: CallStart,
    /// The signal its caller stops waiting on ([`call_js`]).
    cancel: CancellationSignal,
}

impl Waiting {
    fn enter(cancel: &CancellationSignal, flag: CallStart) -> Self {
        Waiting { alone: WAITING.fetch_add(1, Ordering::Relaxed) == 0, flag, cancel: cancel.clone() }
    }

    /// `value` queued as this call's.
    fn queued<T>(&self, value: T) -> Queued<T> {
        let waited = Waited { flag: self.flag.clone(), cancel: self.cancel.clone() };
        Queued { value, waited: Some(waited) }
    }

    /// What the call's `answer` makes it. A refusal of the JS thread for the cancel ([`Waited`])
    /// is no answer: the caller stops waiting on that cancel and hears it instead, at once (at
    /// the latest, at the deadline, a timeout of a call never made), rather than a binding
    /// failure of a call that was never going to be made.
    async fn answered<R>(
        &self,
        answer: Answer<R>,
        deadline: tokio::time::Instant,
    ) -> Result<Settled<R>, CallFailure> {
        if answer.is_err() && self.flag.is_given_up() {
            tokio::time::sleep_until(deadline).await;
            return Err(CallFailure::TimedOut { started: false });
        }
        answer.map_err(CallFailure::Binding)
    }

    /// Stops waiting, the function's environment torn down: the call's [`CallFailure::EnvGone`],
    /// which says whether the JS thread had made it (else it never will).
    fn env_gone(&self) -> CallFailure {
        CallFailure::EnvGone { started: !self.flag.give_up() }
    }

    /// Stops waiting: the call's [`CallFailure::TimedOut`], which says whether the JS thread had
    /// made it (else it never will).
    fn timed_out(&self) -> CallFailure {
        CallFailure::TimedOut { started: !self.flag.give_up() }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // Once answered, the flag is no longer read: the call was made.
        self.flag.give_up();
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a call of [`call_js`] made while no other waits looks for its answer before it parks
/// its worker.
const SPIN: Duration = Duration::from_micros(100);

/// Calls the function and waits (at most `timeout`) for its value or its Promise's settlement. A
/// call the JS thread reaches only after this has returned or been dropped, or after `cancel` (the
/// signal the caller stops waiting on: its run's, its call's) fired, is never made (see "Calls
/// nobody waits for any more" above).
pub(crate) async fn call_js<T, R>(
    function: &JsFn<T>,
    data: T,
    timeout: Duration,
    cancel: &CancellationSignal,
) -> Result<Settled<R>, CallFailure>
where
    T: 'static,
    R: FromNapiValue + Send + 'static,
{
    call_js_marked(function, data, timeout, cancel, CallStart::new()).await
}

/// [`call_js`], the call marked started in `started` as the JS thread makes it (an executor's
/// [`ToolContext::started`](crate::tool::ToolContext::started)), and never made once that is
/// given up.
pub(crate) async fn call_js_marked<T, R>(
    function: &JsFn<T>,
    data: T,
    timeout: Duration,
    cancel: &CancellationSignal,
    started: CallStart,
) -> Result<Settled<R>, CallFailure>
where
    T: 'static,
    R: FromNapiValue + Send + 'static,
{
    let (tx, rx) = oneshot::channel::<Answer<R>>();
    let waiting = Waiting::enter(cancel, started);
    let status = function.call_with_return_value(waiting.queued(data), move |ret, env| {
        reply(ret, &env, tx);
        // Never Err here: napi-ohos would raise it as an uncaught exception.
        Ok(())
    });
    if status != Status::Ok {
        return Err(CallFailure::NotQueued(status));
    }
    // Its environment torn down, the call is answered at once: nothing of it can come any more
    // (its thread-safe function is finalized, its Promise's callbacks never run).
    // A refusal of the JS thread for the termination (it ends the environment first) is that too.
    tokio::select! {
        biased;
        () = function.gone.cancelled() => Err(waiting.env_gone()),
        waited = wait_for(&waiting, rx, timeout) => match waited {
            Err(CallFailure::Binding(_)) if function.gone.is_cancelled() => Err(waiting.env_gone()),
            waited => waited,
        },
    }
}

/// [`call_js`]'s wait for the answer of its queued call (at most `timeout`).
async fn wait_for<R>(
    waiting: &Waiting,
    rx: oneshot::Receiver<Answer<R>>,
    timeout: Duration,
) -> Result<Settled<R>, CallFailure> {
    let deadline = tokio::time::Instant::now() + timeout;
    // Most functions answer within tens of microseconds, and a worker that parks takes about as
    // long again to be woken (BENCHMARKS.md, "NAPI"). So a call made while no other is waiting
    // looks for its answer for a short while before it parks on the channel, yielding the thread
    // (to the JS thread, if it shares the core) and the worker (to its other tasks) between looks.
    // Calls made while others wait do not: under load, spinning only takes the core from them.
    let mut rx = rx;
    if waiting.alone {
        let spin_until = std::time::Instant::now() + SPIN;
        while std::time::Instant::now() < spin_until {
            match rx.try_recv() {
                Ok(answer) => return waiting.answered(answer, deadline).await,
                Err(oneshot::error::TryRecvError::Empty) => {
                    std::thread::yield_now();
                    tokio::task::yield_now().await;
                }
                Err(oneshot::error::TryRecvError::Closed) => break,
            }
        }
    }
    match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(answer)) => waiting.answered(answer, deadline).await,
        // The sender goes away unanswered when the function's Promise is garbage-collected before
        // it settled (nothing could ever settle it). That is a Promise that never settles: report
        // it as such, at the deadline, so the outcome never depends on when the GC runs.
        Ok(Err(_)) => {
            tokio::time::sleep_until(deadline).await;
            Err(waiting.timed_out())
        }
        Err(_) => Err(waiting.timed_out()),
    }
}

/// What the JS thread sends back for a call: how it settled, or why the binding failed there.
type Answer<R> = Result<Settled<R>, String>;

/// The sender of a call's answer, shared by its reply and the `then`/`catch` of its Promise:
/// whichever answers first takes it.
type AnswerSlot<R> = Rc<Cell<Option<oneshot::Sender<Answer<R>>>>>;

/// Sends `answer` if nothing was sent yet.
fn answer<R>(slot: &AnswerSlot<R>, answer: Answer<R>) {
    if let Some(tx) = slot.take() {
        let _ = tx.send(answer);
    }
}

/// The reply of a [`call_js`] call, on the JS thread: the refusal or the panic of the binding
/// ([`in_reply`]) is answered at once; else the value is settled.
fn reply<R: FromNapiValue + Send + 'static>(
    ret: napi_ohos::Result<Unknown<'static>>,
    env: &Env,
    tx: oneshot::Sender<Answer<R>>,
) {
    let slot: AnswerSlot<R> = Rc::new(Cell::new(Some(tx)));
    if let Err(why) = in_reply(env, |threw| {
        super::panic_point!(Reply);
        settle(ret, threw, env, &slot);
    }) {
        // A panic after the Promise's callbacks were attached: they find the sender taken.
        answer(&slot, Err(why));
    }
}

/// On the JS thread: classifies a return value (`threw`: what the function threw, [`shield`]), or
/// attaches to its Promise.
fn settle<R: FromNapiValue + Send + 'static>(
    ret: napi_ohos::Result<Unknown<'static>>,
    threw: bool,
    env: &Env,
    slot: &AnswerSlot<R>,
) {
    let value = match ret {
        Ok(value) if threw => {
            answer(slot, Ok(Settled::Threw(thrown(env, &value))));
            return;
        }
        Ok(value) => value,
        // The shield never throws (an app function's throw is its value): napi-ohos failed to call
        // it. Its error's text is left alone (napi-ohos read it unchecked); the thrown value, if
        // it kept one, is read here.
        Err(_) if !super::env_life::can_run_js(env) && !exception_pending(env) => {
            // Not called, or cut off: the environment is terminating.
            super::env_life::end(env);
            answer(slot, Err(ENV_GONE.to_string()));
            return;
        }
        Err(error) => {
            // SAFETY: on the JS thread, with this env; napi-ohos hands back the value it
            // referenced (releasing the reference) or creates an Error of its text.
            let thrown = match unsafe { ToNapiValue::to_napi_value(env.raw(), error) } {
                // SAFETY: a value of this env, on the JS thread.
                Ok(raw) => self::thrown(env, &unsafe { Unknown::from_raw_unchecked(env.raw(), raw) }),
                Err(_) => {
                    clear_pending_exception(env);
                    Thrown { text: "<the app function could not be called>".to_string(), domain: None }
                }
            };
            answer(slot, Ok(Settled::Threw(thrown)));
            return;
        }
    };
    if !matches!(value.is_promise(), Ok(true)) {
        answer(slot, Ok(classify(env, value)));
        return;
    }
    let on_resolve = Rc::clone(slot);
    let on_reject = Rc::clone(slot);
    let promise: PromiseRaw<'_, Unknown<'static>> = PromiseRaw::new(env.raw(), value.raw());
    // Each callback runs from napi-ohos' `extern "C"` trampoline: under a panic guard, whose
    // panic is the call's answer.
    let attached = promise
        .then(move |ctx| {
            let settled = caught(&ctx.env, || {
                super::panic_point!(Then);
                classify(&ctx.env, ctx.value)
            });
            answer(&on_resolve, settled);
            Ok(())
        })
        .and_then(|chained| {
            chained.catch(move |ctx: napi_ohos::bindgen_prelude::CallbackContext<Unknown<'static>>| {
                let settled = caught(&ctx.env, || {
                    super::panic_point!(Then);
                    Settled::Rejected(thrown(&ctx.env, &ctx.value))
                });
                answer(&on_reject, settled);
                Ok(())
            })
        });
    if let Err(error) = attached {
        clear_pending_exception(env);
        answer(slot, Err(format!("the Promise's callbacks could not be attached: {}", error.reason)));
    }
}

/// `undefined`, a value of the expected shape, or why not. This runs inside napi-ohos' callbacks
/// on the JS thread (`extern "C"`: a panic unwinding out of them aborts the process), so a panic
/// while the value is converted is caught here and makes the value `Invalid`.
fn classify<R: FromNapiValue>(env: &Env, value: Unknown<'_>) -> Settled<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| classify_unguarded(env, value)))
        .unwrap_or_else(|payload| Settled::Invalid(super::error::panic_error(payload.as_ref()).message))
}

/// [`classify`], without the panic guard.
fn classify_unguarded<R: FromNapiValue>(env: &Env, value: Unknown<'_>) -> Settled<R> {
    super::panic_point!(Answer);
    if matches!(value.get_type(), Ok(ValueType::Undefined)) {
        return Settled::Undefined;
    }
    // SAFETY: a live value of this env, on the JS thread.
    match unsafe { R::from_napi_value(env.raw(), value.raw()) } {
        Ok(converted) => Settled::Value(converted),
        Err(error) => {
            clear_pending_exception(env);
            // In the app's terms, as an argument's refusal (`contents[0].text: expected a string`).
            Settled::Invalid(super::error::js_terms(&error.reason))
        }
    }
}

/// Whether `raw` is an object (or a function): what may carry `code` and `message`.
fn is_object(env: &Env, raw: sys::napi_value) -> bool {
    let mut kind = 0;
    // SAFETY: on the JS thread, with a value of this env.
    let typed = unsafe { sys::napi_typeof(env.raw(), raw, &mut kind) };
    typed == sys::Status::napi_ok
        && (kind == sys::ValueType::napi_object || kind == sys::ValueType::napi_function)
}

/// The property `name` of the object `raw` when it is a string (own or inherited); `None` for
/// another type, text that is not UTF-8, or a read that throws (a getter, a Proxy), whose
/// exception is cleared.
fn string_property(env: &Env, raw: sys::napi_value, name: &std::ffi::CStr) -> Option<String> {
    let raw_env = env.raw();
    let mut value = std::ptr::null_mut();
    // SAFETY (every block below): on the JS thread, with values of this env; a property read that
    // throws leaves its exception pending, cleared before returning.
    if unsafe { sys::napi_get_named_property(raw_env, raw, name.as_ptr(), &mut value) }
        != sys::Status::napi_ok
    {
        clear_pending_exception(env);
        return None;
    }
    let mut kind = 0;
    if unsafe { sys::napi_typeof(raw_env, value, &mut kind) } != sys::Status::napi_ok
        || kind != sys::ValueType::napi_string
    {
        return None;
    }
    unsafe { super::text::read_text(raw_env, value) }.ok()
}

/// The stable code and message of a thrown value: an object (an `Error` or any other) whose own or
/// inherited `code` property is a string with the form of a stable code. `None` for everything
/// else: a value that is not an object, no `code`, a code of another form (Node's `ERR_*`,
/// `ENOENT`), or a property read that throws (a getter, a Proxy), whose exception is cleared.
///
/// The message is the `message` property when it is a non-empty string, else the value's `text`
/// ([`thrown`]'s: its own `toString` may speak for it), else, when that says nothing either (an
/// `Error` without a message reads as its bare `name`), `<code> (no message)`: never an empty
/// message or `[object Object]` for the model to read after the code.
fn domain_error(env: &Env, raw: sys::napi_value, text: &str) -> Option<DomainError> {
    if !is_object(env, raw) {
        return None;
    }
    let code = string_property(env, raw, c"code").filter(|code| crate::error::is_stable_code(code))?;
    let says_nothing = text.is_empty()
        || text == "[object Object]"
        || string_property(env, raw, c"name").is_some_and(|name| name == text);
    let message = match string_property(env, raw, c"message").filter(|m| !m.is_empty()) {
        Some(message) => message,
        None if says_nothing => no_message(&code),
        None => text.to_string(),
    };
    Some(DomainError { code, message })
}

/// What stands for the message of an error that has a code but none: `<code> (no message)`.
fn no_message(code: &str) -> String {
    format!("{code} (no message)")
}

/// What a JS function threw or rejected with: its text and its domain error, if it is one. A
/// plain object that is not an `Error` (`throw {code: 'E_DISK', message: 'disk full'}`) reads
/// `[object Object]` as a string: its `message` (after its `code`, when it has one) stands for it,
/// or with no (non-empty) message its code, as `E_DISK (no message)`. (An object with neither
/// still reads `[object Object]`.)
fn thrown(env: &Env, value: &Unknown<'_>) -> Thrown {
    let mut text = value_text(value);
    if text == "[object Object]" && is_object(env, value.raw()) {
        let message = string_property(env, value.raw(), c"message").filter(|m| !m.is_empty());
        let code = string_property(env, value.raw(), c"code").filter(|c| !c.is_empty());
        match (code, message) {
            (Some(code), Some(message)) => text = format!("{code}: {message}"),
            (None, Some(message)) => text = message,
            (Some(code), None) => text = no_message(&code),
            (None, None) => {}
        }
    }
    let domain = domain_error(env, value.raw(), &text);
    Thrown { text, domain }
}

/// `String(value)` (read checked: `text`), or a placeholder when even that throws or its text is
/// not UTF-8.
fn value_text(value: &Unknown<'_>) -> String {
    let env = value.value().env;
    let mut string = std::ptr::null_mut();
    // SAFETY: a live value of this env, on the JS thread.
    let text = unsafe {
        if sys::napi_coerce_to_string(env, value.raw(), &mut string) == sys::Status::napi_ok {
            super::text::read_text(env, string).ok()
        } else {
            None
        }
    };
    text.unwrap_or_else(|| {
        clear_pending_exception(&Env::from_raw(env));
        "<a value that cannot be converted to a string>".to_string()
    })
}

/// Takes the pending exception, if any, and returns `String(value)` of it: what a getter or a
/// Proxy trap threw while napi read an argument. Left pending, it would be thrown to the caller as
/// it is (no `code`, not even an `Error` for `throw "x"`) instead of the binding's coded error.
/// Call on the JS thread.
pub(crate) fn take_pending_exception(env: &Env) -> Option<String> {
    let mut pending = false;
    let mut exception = std::ptr::null_mut();
    // SAFETY: a valid env on the JS thread; only its exception slot is inspected and cleared.
    unsafe {
        if sys::napi_is_exception_pending(env.raw(), &mut pending) != sys::Status::napi_ok
            || !pending
            || sys::napi_get_and_clear_last_exception(env.raw(), &mut exception) != sys::Status::napi_ok
        {
            return None;
        }
        Some(value_text(&Unknown::from_raw_unchecked(env.raw(), exception)))
    }
}

/// Whether an exception is pending in `env`. Call on the JS thread.
pub(crate) fn exception_pending(env: &Env) -> bool {
    let mut pending = false;
    // SAFETY: a valid env on the JS thread; only its exception slot is inspected.
    let status = unsafe { sys::napi_is_exception_pending(env.raw(), &mut pending) };
    status == sys::Status::napi_ok && pending
}

/// Clears an exception a failed conversion may have left pending, so the next call starts clean.
/// (Also what a fire-and-forget call does with a throw: napi-ohos reads the thrown value's message
/// to build its error, and a value whose reads throw, such as a Proxy, leaves that second exception
/// pending; left there, Node reports it as an uncaught exception.)
pub(crate) fn clear_pending_exception(env: &Env) {
    let mut pending = false;
    // SAFETY: a valid env on the JS thread; both calls only inspect and clear its exception slot.
    unsafe {
        if sys::napi_is_exception_pending(env.raw(), &mut pending) == sys::Status::napi_ok && pending {
            let mut exception = std::ptr::null_mut();
            sys::napi_get_and_clear_last_exception(env.raw(), &mut exception);
        }
    }
}
