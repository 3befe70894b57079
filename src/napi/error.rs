//! The one error conversion of the binding, and the panic guards every export runs in.
//!
//! An [`AgentError`] reaches ArkTS as an `Error` whose `message` is the error's message, with two
//! extra string properties: `code` (the stable snake_case code) and `layer`. A Rust panic inside an
//! export becomes the same kind of error with code `internal_panic`: never an abort.

use crate::error::{codes, AgentError};
use futures_util::FutureExt;
use napi_ohos::bindgen_prelude::{
    FromNapiRef, FromNapiValue, JsObjectValue, JsValue, PromiseRaw, ToNapiValue, ValidateNapiValue,
};
use napi_ohos::{sys, Env, Status};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

/// Builds the JS `Error` for an [`AgentError`] (call on the JS thread).
pub(crate) fn js_error(env: &Env, error: &AgentError) -> napi_ohos::Error {
    let message = if error.code == codes::CONFIG_INVALID {
        js_field_names(&error.message)
    } else {
        error.message.clone()
    };
    let build = || -> napi_ohos::Result<napi_ohos::Error> {
        let mut object = env.create_error(napi_ohos::Error::new(Status::GenericFailure, message.clone()))?;
        object.set_named_property("code", error.code.as_ref())?;
        object.set_named_property("layer", error.layer.as_str())?;
        // The napi error keeps a reference to this object and throws (or rejects with) it as is.
        Ok(napi_ohos::Error::from(object.to_unknown()))
    };
    build().unwrap_or_else(|_| {
        unthrowable(env, napi_ohos::Error::new(Status::GenericFailure, error.to_string()))
    })
}

/// `error`, or when `env` can no longer run JS (an exception is pending that the binding could
/// not clear: the environment is terminating), an error of status `PendingException`: napi-ohos
/// then leaves the pending exception as it is instead of throwing `error`, a throw that fails
/// there (in a debug build its assertion then fired inside an `extern "C"` callback, and the whole
/// process aborted, not only the worker ending). Call on the JS thread.
pub(crate) fn unthrowable(env: &Env, error: napi_ohos::Error) -> napi_ohos::Error {
    if error.status == Status::PendingException || super::env_life::can_run_js(env) {
        return error;
    }
    // With an exception pending (an app getter threw), the same outcome as before: napi-ohos
    // would have thrown that exception on. With none, only a terminating env refuses to run JS.
    if !super::callback::exception_pending(env) {
        super::env_life::end(env);
    }
    napi_ohos::Error::new(Status::PendingException, error.reason.clone())
}

/// The core's config fields a `config_invalid` message may name, with the Agent config's names
/// for them in JS.
const JS_FIELD_NAMES: [(&str, &str); 5] = [
    ("base_url", "baseUrl"),
    ("api_key", "apiKey"),
    ("tool_choice", "toolChoice"),
    ("max_rounds", "maxRounds"),
    ("max_response_bytes", "maxResponseBytes"),
];

/// A `config_invalid` message of the core in the app's terms: every core field name of
/// [`JS_FIELD_NAMES`] standing as a word becomes the Agent config's name for it (`base_url: not
/// a URL` -> `baseUrl: not a URL`), as the binding's own checks name fields.
fn js_field_names(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, js) in JS_FIELD_NAMES {
        let mut from = 0;
        while let Some(at) = out[from..].find(rust).map(|i| i + from) {
            let end = at + rust.len();
            let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let alone = !out[..at].ends_with(word) && !out[end..].starts_with(word);
            if alone {
                out.replace_range(at..end, js);
                from = at + js.len();
            } else {
                from = end;
            }
        }
    }
    out
}

/// The `internal_panic` error for a caught panic payload.
pub(crate) fn panic_error(payload: &(dyn std::any::Any + Send)) -> AgentError {
    let detail = crate::logging::panic_text(payload).unwrap_or("unknown panic payload".into());
    AgentError::of(codes::INTERNAL_PANIC, format!("a Rust panic was caught at the binding: {detail}"))
}

/// Runs the body of a synchronous export: an `Err` or a panic becomes a coded JS error.
///
/// # Errors
/// The body's error, or `internal_panic`, as a JS error with `code` and `layer`.
pub(crate) fn guard<T>(env: &Env, body: impl FnOnce() -> Result<T, AgentError>) -> napi_ohos::Result<T> {
    guard_napi(env, || body().map_err(|error| js_error(env, &error)))
}

/// Runs the body of a synchronous export whose errors are already JS errors (napi calls); only a
/// panic is converted, to `internal_panic`.
///
/// # Errors
/// The body's error, or `internal_panic`.
pub(crate) fn guard_napi<T>(env: &Env, body: impl FnOnce() -> napi_ohos::Result<T>) -> napi_ohos::Result<T> {
    #[cfg(feature = "napi-panic-test")]
    let body = || {
        super::panic_point!(Sync);
        body()
    };
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result.map_err(|error| unthrowable(env, error)),
        Err(payload) => Err(js_error(env, &panic_error(payload.as_ref()))),
    }
}

/// A resolved value waiting to cross to JS: converts itself to a JS value on the JS thread.
type ToJs = Box<dyn FnOnce(sys::napi_env) -> napi_ohos::Result<sys::napi_value> + Send>;

/// The future of an async export, with its value's type erased.
type Pending = Pin<Box<dyn Future<Output = Result<ToJs, AgentError>> + Send>>;

/// Runs an async export on the module's runtime and returns its Promise. The future's `Err` or a
/// panic rejects the Promise with a coded JS error; `Ok` is converted by `to_js` on the JS thread.
///
/// Only the boxing is generic: the promise glue under it (a thread-safe function, the task and
/// the settlement, several KB of code per instance) is instantiated once for every export in
/// [`spawn_pending`] instead of once per export (BENCHMARKS.md, "Size of the stripped release
/// `.so`"). It costs two small allocations per call.
///
/// # Errors
/// Only when the Promise itself cannot be created.
pub(crate) fn spawn_guarded<'env, T, V, F>(
    env: &'env Env,
    future: F,
    to_js: fn(T) -> V,
) -> napi_ohos::Result<PromiseRaw<'env, V>>
where
    T: Send + 'static,
    V: ToNapiValue + 'static,
    F: Future<Output = Result<T, AgentError>> + Send + 'static,
{
    spawn_guarded_keeping(env, (), future, to_js)
}

/// [`spawn_guarded`], keeping `kept` until the Promise is settled on the JS thread (or its
/// settlement is dropped, its environment gone), whether it resolves or rejects: a call's
/// place on its session stays reserved until the app is handed the outcome, not only until the
/// call's task ends (see `TurnReservation::kept`).
///
/// # Errors
/// Only when the Promise itself cannot be created.
pub(crate) fn spawn_guarded_keeping<'env, K, T, V, F>(
    env: &'env Env,
    kept: K,
    future: F,
    to_js: fn(T) -> V,
) -> napi_ohos::Result<PromiseRaw<'env, V>>
where
    K: Send + 'static,
    T: Send + 'static,
    V: ToNapiValue + 'static,
    F: Future<Output = Result<T, AgentError>> + Send + 'static,
{
    super::panic_point!(Promise);
    let pending: Pending = Box::pin(async move {
        super::panic_point!(Future);
        let value = future.await?;
        let convert: ToJs = Box::new(move |env| {
            super::panic_point!(Convert);
            // SAFETY: the resolver runs on the JS thread with that thread's env (spawn_pending).
            unsafe { V::to_napi_value(env, to_js(value)) }
        });
        Ok(convert)
    });
    let promise = spawn_pending(env, pending, Box::new(kept))?;
    Ok(PromiseRaw::new(env.raw(), promise))
}

/// A Promise's deferred and how its future ended, on their way to the JS thread, with the
/// function that carries them there (released once they arrived).
struct Settlement {
    deferred: sys::napi_deferred,
    outcome: Result<ToJs, AgentError>,
    tsfn: sys::napi_threadsafe_function,
    // What the export keeps until its Promise is settled ([`spawn_guarded_keeping`]).
    _kept: Kept,
}

/// What an async export keeps until its Promise is settled, with its type erased.
type Kept = Box<dyn Send>;

/// The thread-safe function that settles one Promise on its JS thread, guarded against the
/// teardown of its environment.
///
/// napi-ohos' `spawn_future_with_callback` is not used: its deferred calls a raw thread-safe
/// function that nothing guards against that teardown. A Promise of an environment that went away
/// before its future ended (an ArkTS or Node worker terminated while a run or a call was in
/// flight) was then settled through a freed function, and the whole process aborted. Here the
/// function's finalizer (run by the teardown) clears `alive` under a write lock, and a settlement
/// is only queued under the read lock while `alive` holds: after the teardown it is dropped.
/// Like napi-ohos' deferred, the function is referenced (a pending Promise keeps the event loop,
/// and the process, alive) and released on the JS thread once the Promise is settled (or here,
/// when the future is dropped unsettled or the settlement could not be queued).
struct Settler {
    tsfn: sys::napi_threadsafe_function,
    alive: Arc<RwLock<bool>>,
    deferred: sys::napi_deferred,
}

// SAFETY: the function is called and released from any thread (what napi allows), under the guard;
// the deferred is only used on the JS thread (in `call_settle`), reached through the function.
unsafe impl Send for Settler {}

impl Settler {
    /// The Promise and its settler (call on the JS thread).
    fn new(env: &Env) -> napi_ohos::Result<(sys::napi_value, Settler)> {
        let raw = env.raw();
        let mut deferred = std::ptr::null_mut();
        let mut promise = std::ptr::null_mut();
        let mut name = std::ptr::null_mut();
        let mut tsfn = std::ptr::null_mut();
        let alive = Arc::new(RwLock::new(true));
        let finalize_data = Arc::into_raw(Arc::clone(&alive));
        // SAFETY: on the JS thread, with this env. The finalizer gets back the `Arc` given here.
        unsafe {
            napi_ohos::check_status!(sys::napi_create_promise(raw, &mut deferred, &mut promise))?;
            napi_ohos::check_status!(sys::napi_create_string_utf8(
                raw,
                c"arkagentSettle".as_ptr(),
                14,
                &mut name
            ))?;
            let status = sys::napi_create_threadsafe_function(
                raw,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                name,
                0,
                1,
                finalize_data.cast_mut().cast(),
                Some(settler_finalized),
                std::ptr::null_mut(),
                Some(call_settle),
                &mut tsfn,
            );
            if status != sys::Status::napi_ok {
                drop(Arc::from_raw(finalize_data));
                napi_ohos::check_status!(status)?;
            }
        }
        Ok((promise, Settler { tsfn, alive, deferred }))
    }

    /// Queues the settlement to the JS thread, which releases the function once it settled the
    /// Promise; if the environment is gone, the settlement is dropped here.
    fn settle(mut self, outcome: Result<ToJs, AgentError>, kept: Kept) {
        let settlement = Box::into_raw(Box::new(Settlement {
            deferred: self.deferred,
            outcome,
            tsfn: self.tsfn,
            _kept: kept,
        }));
        let alive = self.alive.read().unwrap_or_else(|p| p.into_inner());
        let queued = *alive
            // SAFETY: the function is alive (its finalizer has not run: it waits for this lock).
            && unsafe {
                sys::napi_call_threadsafe_function(
                    self.tsfn,
                    settlement.cast(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                )
            } == sys::Status::napi_ok;
        drop(alive);
        if queued {
            // The JS thread releases it (`call_settle`).
            self.tsfn = std::ptr::null_mut();
        } else {
            // SAFETY: not queued, so still ours; it holds no napi handle that needs the JS thread.
            drop(unsafe { Box::from_raw(settlement) });
        }
    }

    /// Releases the function (once), unless its environment already finalized it.
    fn release(&mut self) {
        let tsfn = std::mem::replace(&mut self.tsfn, std::ptr::null_mut());
        let alive = self.alive.read().unwrap_or_else(|p| p.into_inner());
        if *alive && !tsfn.is_null() {
            // SAFETY: alive, and released once (the pointer was taken above).
            unsafe {
                sys::napi_release_threadsafe_function(tsfn, sys::ThreadsafeFunctionReleaseMode::release)
            };
        }
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        // A future dropped unsettled (the runtime shut down): the event loop must not wait for it.
        self.release();
    }
}

/// The function's finalizer (the last release, or the environment's teardown): nothing may call
/// it any more.
unsafe extern "C" fn settler_finalized(
    _env: sys::napi_env,
    data: *mut std::ffi::c_void,
    _hint: *mut std::ffi::c_void,
) {
    // SAFETY: `data` is the `Arc` leaked in `Settler::new`, given back once.
    let alive = unsafe { Arc::from_raw(data.cast_const().cast::<RwLock<bool>>()) };
    *alive.write().unwrap_or_else(|p| p.into_inner()) = false;
}

/// The function's call on the JS thread: settles the Promise. A null env means the environment
/// is being torn down: the settlement is only dropped.
unsafe extern "C" fn call_settle(
    env: sys::napi_env,
    _js_callback: sys::napi_value,
    _context: *mut std::ffi::c_void,
    data: *mut std::ffi::c_void,
) {
    // SAFETY: `data` is the settlement queued by `Settler::settle`, handed over once.
    let settlement = unsafe { Box::from_raw(data.cast::<Settlement>()) };
    if env.is_null() {
        // The teardown finalizes the function itself.
        return;
    }
    let tsfn = settlement.tsfn;
    settle(&Env::from_raw(env), *settlement);
    // SAFETY: on the JS thread, before the finalizer can run; the one release of this function.
    unsafe { sys::napi_release_threadsafe_function(tsfn, sys::ThreadsafeFunctionReleaseMode::release) };
}

/// The non-generic part of [`spawn_guarded`]: spawns the future under `catch_unwind` and returns
/// the raw Promise, settled through a [`Settler`], which drops `kept` as it settles it.
///
/// # Errors
/// Only when the Promise itself cannot be created, or the runtime is missing.
fn spawn_pending(env: &Env, pending: Pending, kept: Kept) -> napi_ohos::Result<sys::napi_value> {
    let runtime = super::runtime()?;
    let (promise, settler) = Settler::new(env)?;
    runtime.spawn(async move {
        let outcome = match AssertUnwindSafe(pending).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(payload) => Err(panic_error(payload.as_ref())),
        };
        settler.settle(outcome, kept);
    });
    Ok(promise)
}

/// On the JS thread: resolves the Promise with the converted value, or rejects it with the coded
/// error (a value that cannot be converted rejects it with napi's error, one whose conversion
/// panics with `internal_panic`).
fn settle(env: &Env, settlement: Settlement) {
    let Settlement { deferred, outcome, _kept: kept, .. } = settlement;
    // Given up before the outcome reaches the app: code that runs once the Promise is settled
    // finds the session free.
    drop(kept);
    let raw = env.raw();
    let value = match outcome {
        // This runs under `call_settle`, an `extern "C"` function: a panic unwinding out of it
        // aborts the process, so it is caught here.
        Ok(convert) => std::panic::catch_unwind(AssertUnwindSafe(|| convert(raw)))
            .unwrap_or_else(|payload| Err(js_error(env, &panic_error(payload.as_ref())))),
        Err(error) => Err(js_error(env, &error)),
    };
    // SAFETY: on the JS thread of the deferred's env; each deferred is settled exactly once.
    unsafe {
        match value {
            Ok(value) => {
                sys::napi_resolve_deferred(raw, deferred, value);
            }
            Err(error) => {
                let mut pending = false;
                if sys::napi_is_exception_pending(raw, &mut pending) == sys::Status::napi_ok && pending {
                    let mut exception = std::ptr::null_mut();
                    sys::napi_get_and_clear_last_exception(raw, &mut exception);
                }
                let mut reason = std::ptr::null_mut();
                if let Ok(value) = napi_ohos::Error::to_napi_value(raw, error) {
                    reason = value;
                } else {
                    let text = "arkagent: the outcome could not be converted to a JS value";
                    let mut message = std::ptr::null_mut();
                    sys::napi_create_string_utf8(
                        raw,
                        text.as_ptr().cast(),
                        text.len() as isize,
                        &mut message,
                    );
                    sys::napi_create_error(raw, std::ptr::null_mut(), message, &mut reason);
                }
                sys::napi_reject_deferred(raw, deferred, reason);
            }
        }
    }
}

/// napi's refusal of an argument as the binding's coded error (one instance for every `Arg`).
fn refused(env: sys::napi_env, e: napi_ohos::Error) -> napi_ohos::Error {
    let env = Env::from_raw(env);
    let mut reason = js_terms(&e.reason);
    // A getter or a Proxy trap of the argument threw while napi read it.
    if let Some(thrown) = super::callback::take_pending_exception(&env) {
        reason = match reason.strip_suffix("could not be read") {
            Some(head) => format!("{head}reading it threw {thrown}"),
            None => format!("{reason}: reading it threw {thrown}"),
        };
    }
    let error = AgentError::of(codes::ARGUMENT_INVALID, format!("wrong argument: {reason}"));
    js_error(&env, &error)
}

/// napi's refusal in the caller's terms: JavaScript types and the field's name instead of Rust
/// types and struct names (`Failed to convert JavaScript value `Number 1 ` into rust type `String`
/// on AgentConfigObject.provider` -> `provider: expected a string, got a number (1)`). A reason of
/// another shape is kept as it is.
pub(crate) fn js_terms(reason: &str) -> String {
    fn article(ty: &str) -> String {
        let ty = match ty {
            "String" => "string",
            "bool" | "Boolean" => "boolean",
            "f64" | "f32" | "i64" | "i32" | "u32" | "u64" | "Number" => "number",
            "BigInt" => "bigint",
            "Object" => "object",
            "Function" => "function",
            "Symbol" => "symbol",
            "Undefined" => return "undefined".into(),
            "Null" => return "null".into(),
            other => return other.to_string(),
        };
        let a = if ty.starts_with('o') { "an" } else { "a" };
        format!("{a} {ty}")
    }
    let (body, field) = match reason.rsplit_once(" on ") {
        Some((body, place)) if !place.contains(' ') => (body, place.rsplit('.').next()),
        _ => (reason, None),
    };
    let plain = if let Some(rest) = body.strip_prefix("Expect value to be ") {
        match rest.split_once(", but received ") {
            Some((want, got)) => match want.strip_prefix("Option<").and_then(|w| w.strip_suffix('>')) {
                Some(want) => format!("expected {}, null or undefined, got {}", article(want), article(got)),
                None => format!("expected {}, got {}", article(want), article(got)),
            },
            None => body.to_string(),
        }
    } else if let Some(rest) = body.strip_prefix("Failed to convert JavaScript value `") {
        match rest.split_once(" ` into rust type `") {
            Some((got, want)) => {
                let got = match got.split_once(' ') {
                    Some((ty, value)) if !value.is_empty() => format!("{} ({value})", article(ty)),
                    _ => article(got),
                };
                format!("expected {}, got {got}", article(want.trim_end_matches('`')))
            }
            None => body.to_string(),
        }
    } else if body.starts_with("Failed to get property") || body.starts_with("Failed to get element") {
        "could not be read".to_string()
    } else if body == "Failed to get Array length" {
        "its length could not be read".to_string()
    } else if let Some(rest) = body.strip_prefix("Failed to convert napi value ") {
        match rest.strip_prefix("into rust type `") {
            Some(want) => format!("expected {}", article(want.trim_end_matches('`'))),
            None => match rest.split_once(" into rust type `") {
                Some((got, want)) => {
                    format!("expected {}, got {}", article(want.trim_end_matches('`')), article(got))
                }
                None => body.to_string(),
            },
        }
    } else {
        body.to_string()
    };
    match field {
        // An element of an array field: `contents[0]...` (`JsArray`); a field of an object field
        // read by hand: `loopDiagnosis.firstRound...` (`LoopDiagnosisObject`).
        Some(field) if plain.starts_with(['[', '.']) => format!("{field}{plain}"),
        Some(field) => format!("{field}: {plain}"),
        None => plain,
    }
}

/// An export's argument: checked and converted as `T` is, but a value of the wrong type or shape
/// is refused with the binding's coded error (`argument_invalid`, with `code` and `layer`) instead
/// of napi's own (`StringExpected`, `InvalidArg`, no layer). napi does not check the type of a
/// `Function` or `Object` argument at all; this does (`typeof`), so a wrong one is refused before
/// the export's body runs. The conversion runs under a panic guard (a panic there is thrown as
/// `internal_panic`): napi's glue converts the arguments before the body's own [`guard`] runs.
pub struct Arg<T>(pub T);

impl<T: FromNapiValue + ValidateNapiValue> FromNapiValue for Arg<T> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        let converted = converting(env, || {
            // SAFETY: called by the export's glue on the JS thread with the env and a value of
            // this call, as `T::from_napi_value` itself would be.
            unsafe { T::validate(env, value).and_then(|_| T::from_napi_value(env, value)) }
        })?;
        converted.map(Arg).map_err(|e| refused(env, e))
    }
}

/// Runs the conversion of an export's argument, which napi's glue does before the export's body
/// (and its [`guard`]) runs, from the export's `extern "C"` function: a panic there would abort
/// the process. It is caught here and becomes the call's `internal_panic` error (thrown, or the
/// async export's only outcome: it has no Promise yet).
fn converting<T>(env: sys::napi_env, convert: impl FnOnce() -> T) -> napi_ohos::Result<T> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        super::panic_point!(Argument);
        convert()
    }))
    .map_err(|payload| argument_panicked(env, payload))
}

/// The `internal_panic` error of a panic caught while an argument was converted (not generic: one
/// instance for every argument type).
fn argument_panicked(env: sys::napi_env, payload: Box<dyn std::any::Any + Send>) -> napi_ohos::Error {
    let env = Env::from_raw(env);
    super::callback::clear_pending_exception(&env);
    js_error(&env, &panic_error(payload.as_ref()))
}

/// The first field of every class of the module (each is `#[repr(C)]`): which class the native
/// object behind a JS object is, read before the object is used as one.
///
/// JS can hand a method, a getter or an argument an object of another class: a getter taken off
/// one class's prototype and called on an instance of another (`Reflect.get(proto, 'reason',
/// agent)`), or an object whose prototype chain says one class while another's constructor made
/// it (`CancellationHandle.call(Object.create(ToolRegistry.prototype))`, `Object.setPrototypeOf`),
/// which `instanceof` takes for the class it claims. napi's unwrap gives back the native pointer
/// whatever class made it: read as the wrong type, it crashed the process or hung it. Every class
/// starting with its tag, an object of another class of the module shows a tag that does not
/// match, and nothing else of it is read.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassTag(u64);

impl ClassTag {
    pub(crate) const AGENT: ClassTag = ClassTag(0x6172_6b61_6701_a6e7);
    pub(crate) const TOOL_REGISTRY: ClassTag = ClassTag(0x6172_6b61_6702_7265);
    pub(crate) const CANCELLATION_HANDLE: ClassTag = ClassTag(0x6172_6b61_6703_6368);
}

/// A class of this module: exports take it as an argument ([`ArgRef`]), its methods check their
/// `this` ([`check_this`]).
///
/// # Safety
/// The type is `#[repr(C)]` and its first field is a [`ClassTag`] holding `TAG`, which no other
/// class of the module holds.
pub unsafe trait JsClass: FromNapiRef + 'static {
    /// The name it is exported under, NUL-terminated (napi-ohos' key for its constructor).
    const JS_NAME: &'static str;
    /// Its tag.
    const TAG: ClassTag;

    /// The name it is exported under, for messages.
    fn name() -> &'static str {
        Self::JS_NAME.trim_end_matches('\0')
    }
}

/// The tag at the start of the native object `ptr` points at.
///
/// # Safety
/// `ptr` is the pointer napi-ohos wrapped into an object of one of the module's classes: each
/// begins with its [`ClassTag`] ([`JsClass`]).
unsafe fn tag_at(ptr: *const std::ffi::c_void) -> ClassTag {
    // SAFETY: by the caller, `ptr` points at a `#[repr(C)]` class whose first field is a tag.
    unsafe { std::ptr::read(ptr.cast::<ClassTag>()) }
}

/// Refuses a method or getter of class `T` called on an object of another class (see
/// [`ClassTag`]) with `argument_invalid`. Called first thing, before `this` is used.
///
/// # Errors
/// `argument_invalid`.
pub(crate) fn check_this<T: JsClass>(env: &Env, this: &T) -> napi_ohos::Result<()> {
    // SAFETY: `this` is the pointer napi-ohos unwrapped from the call's `this`, which only
    // objects of the module's classes carry (see `tag_at`).
    if unsafe { tag_at((this as *const T).cast()) } == T::TAG {
        return Ok(());
    }
    let name = T::name();
    let error = AgentError::of(
        codes::ARGUMENT_INVALID,
        format!("wrong this: a method of {name} was called on an object that is not a {name}"),
    );
    Err(js_error(env, &error))
}

/// Whether `value` is an instance of class `T` (`value instanceof T`, through its prototype chain).
///
/// # Safety
/// On the JS thread, with the env and a value of the current call.
unsafe fn is_instance<T: JsClass>(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<bool> {
    let name = T::name();
    let ctor_ref = napi_ohos::bindgen_prelude::get_class_constructor(T::JS_NAME)
        .ok_or_else(|| napi_ohos::Error::from_reason(format!("class {name} is not registered")))?;
    let mut ctor = std::ptr::null_mut();
    let mut is_instance = false;
    // SAFETY: by the caller, and the class's constructor reference is held by napi-ohos for the
    // module's lifetime.
    unsafe {
        napi_ohos::check_status!(sys::napi_get_reference_value(env, ctor_ref, &mut ctor))?;
        napi_ohos::check_status!(sys::napi_instanceof(env, value, ctor, &mut is_instance))?;
    }
    Ok(is_instance)
}

/// Refuses a constructor of class `T` called without `new` with `argument_invalid`, before
/// anything is built. napi-ohos' constructor wraps its native object into whatever `this` is:
/// `ToolRegistry()` wrapped the global object (and returned it), after which every other
/// constructor called that way failed with napi's "Failed to initialize class"; and
/// `ToolRegistry.call(registry)` on a live object failed the same obscure way. `this` must be an
/// object other than the global object that wraps nothing yet, as the fresh object of a `new` (of
/// the class or a subclass) is. It is not checked with `instanceof`: napi-ohos keeps one
/// constructor per class and thread, the last module load's, so after a second load of the module
/// on the thread (`process.dlopen` twice) `new` of the first load's classes would be refused.
///
/// # Errors
/// `argument_invalid`.
pub(crate) fn check_new<T: JsClass>(
    env: &Env,
    this: &napi_ohos::bindgen_prelude::Unknown,
) -> napi_ohos::Result<()> {
    let raw_env = env.raw();
    let value = this.value().value;
    let fresh = converting(raw_env, || -> napi_ohos::Result<bool> {
        let mut kind = sys::ValueType::napi_undefined;
        let mut global = std::ptr::null_mut();
        let mut is_global = false;
        // SAFETY: on the JS thread, with this call's env and its `this`.
        unsafe {
            napi_ohos::check_status!(sys::napi_typeof(raw_env, value, &mut kind))?;
            if kind != sys::ValueType::napi_object {
                return Ok(false);
            }
            napi_ohos::check_status!(sys::napi_get_global(raw_env, &mut global))?;
            napi_ohos::check_status!(sys::napi_strict_equals(raw_env, value, global, &mut is_global))?;
        }
        if is_global {
            return Ok(false);
        }
        let mut wrapped = std::ptr::null_mut();
        // SAFETY: as above; napi_unwrap fails on an object that wraps nothing, the case wanted.
        let status = unsafe { sys::napi_unwrap(raw_env, value, &mut wrapped) };
        Ok(status != sys::Status::napi_ok || wrapped.is_null())
    })??;
    if fresh {
        return Ok(());
    }
    let name = T::name();
    let error = AgentError::of(
        codes::ARGUMENT_INVALID,
        format!("{name} is a class: create one with `new {name}(...)`"),
    );
    Err(js_error(env, &error))
}

/// An export's argument that must be an instance of one of the module's classes, checked with
/// `instanceof` and then by its [`ClassTag`] before it is read; a wrong value is refused as
/// [`Arg`] refuses it.
///
/// napi's own `&T` argument only unwraps: an instance of another class of the module (a
/// `CancellationHandle` given for a `ToolRegistry`) was then read as the wrong type. And napi's
/// own class check looks the constructor up by the Rust name, which fails for a class exported
/// under another name (`ToolRegistry`).
pub struct ArgRef<T: 'static>(pub &'static T);

impl<T: JsClass> FromNapiValue for ArgRef<T> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        let name = T::name();
        let checked = converting(env, || {
            // SAFETY: on the JS thread, with this call's env and value.
            if !unsafe { is_instance::<T>(env, value) }? {
                return Err(napi_ohos::Error::from_reason(format!("expected a {name}")));
            }
            let mut wrapped = std::ptr::null_mut();
            // SAFETY: on the JS thread, with this call's env and value.
            unsafe { napi_ohos::check_status!(sys::napi_unwrap(env, value, &mut wrapped)) }
                .map_err(|_| napi_ohos::Error::from_reason(format!("expected a {name}")))?;
            // SAFETY: the value's prototype chain is one of the module's classes, and it wraps a
            // native object: one of the module's (see `tag_at`). An object of another class (its
            // prototype changed) shows another tag and is refused before it is read as a `T`.
            if wrapped.is_null() || unsafe { tag_at(wrapped) } != T::TAG {
                return Err(napi_ohos::Error::from_reason(format!(
                    "expected a {name}, got an object of another class"
                )));
            }
            // SAFETY: `wrapped` is a `T` (its tag), which napi-ohos keeps while the object lives.
            Ok(unsafe { &*wrapped.cast::<T>() })
        })?;
        checked.map(ArgRef).map_err(|e| refused(env, e))
    }
}
