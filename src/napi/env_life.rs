//! The life of each JS environment the module was loaded in: the main thread's, and each ArkTS
//! Worker's or TaskPool thread's (each Node worker's), which may be torn down while the module
//! still has work of it in flight on the runtime.
//!
//! Each environment has one signal, `gone`, cancelled when the environment is torn down (napi's
//! env cleanup hook, registered for it the first time the module asks) or as soon as the binding
//! sees that it can no longer run JS (it is terminating: [`can_run_js`]). What the module started
//! in that environment listens to it: the runs of its Agents are cancelled, as `cancel()` would
//! (their state saved, their sessions let go at once), and every call waiting on one of its JS
//! functions is answered at once instead of at its deadline (`callback::call_js`).

use crate::tool::CancellationSignal;
use napi_ohos::{sys, Env};
use std::cell::RefCell;

/// The reason a run of an Agent whose environment was torn down is cancelled with.
pub(crate) const GONE_REASON: &str = "the ArkTS environment (worker) the Agent was created in was torn down";

thread_local! {
    /// The environments of this (JS) thread the module has seen and that are not torn down yet,
    /// each with its `gone` signal. Few: one per module load on the thread.
    static ENVS: RefCell<Vec<(usize, CancellationSignal)>> = const { RefCell::new(Vec::new()) };
}

/// The `gone` signal of `env` (see the module docs). Call on the env's JS thread.
pub(crate) fn gone(env: &Env) -> CancellationSignal {
    let key = env.raw() as usize;
    let known = ENVS.with_borrow(|envs| envs.iter().find(|(k, _)| *k == key).map(|(_, s)| s.clone()));
    if let Some(signal) = known {
        return signal;
    }
    let signal = CancellationSignal::new();
    let hook = Box::into_raw(Box::new((key, signal.clone())));
    // SAFETY: on the env's JS thread; the hook gets back the box given here, once.
    let status = unsafe { sys::napi_add_env_cleanup_hook(env.raw(), Some(torn_down), hook.cast()) };
    if status == sys::Status::napi_ok {
        ENVS.with_borrow_mut(|envs| envs.push((key, signal.clone())));
    } else {
        // SAFETY: not registered: the box is still ours.
        drop(unsafe { Box::from_raw(hook) });
        // An environment that cannot take a hook any more is already closing.
        signal.cancel(GONE_REASON);
    }
    signal
}

/// Marks `env` as gone now: the binding saw it can no longer run JS (it is terminating), before
/// its cleanup hook runs. Call on the env's JS thread.
pub(crate) fn end(env: &Env) {
    gone(env).cancel(GONE_REASON);
}

/// The env cleanup hook: the environment is torn down.
unsafe extern "C" fn torn_down(data: *mut std::ffi::c_void) {
    // SAFETY: the box `gone` registered this hook with, given back once.
    let (key, signal) = *unsafe { Box::from_raw(data.cast::<(usize, CancellationSignal)>()) };
    // Nothing here may unwind out of this `extern "C"` function.
    let _ = std::panic::catch_unwind(|| {
        signal.cancel(GONE_REASON);
        let _ = ENVS.try_with(|envs| {
            if let Ok(mut envs) = envs.try_borrow_mut() {
                envs.retain(|(k, _)| *k != key);
            }
        });
    });
}

/// Whether `env` can still run JS. No exception may be pending (one pending makes this `false`
/// too). Node refuses every call that may run JS in an environment that is terminating (a worker
/// told to end, `process.exit()` in it) with `napi_pending_exception`, an exception that cannot be
/// cleared: something thrown then cannot be thrown, and a call that failed then was cut off by the
/// termination, not thrown out of by the app. Call on the env's JS thread.
pub(crate) fn can_run_js(env: &Env) -> bool {
    let raw = env.raw();
    let mut undefined = std::ptr::null_mut();
    let mut boolean = std::ptr::null_mut();
    // SAFETY: on the env's JS thread; coercing `undefined` runs no JS and has no effect.
    unsafe {
        sys::napi_get_undefined(raw, &mut undefined) == sys::Status::napi_ok
            && sys::napi_coerce_to_bool(raw, undefined, &mut boolean) == sys::Status::napi_ok
    }
}
