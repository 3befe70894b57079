//! `CancellationHandle`: the JS face of a [`CancellationSignal`]. The app creates one to cancel a
//! call (`ToolRegistry.execute`, the Agent's `run` and `resume`); an executor finds one in its context as
//! `signal` and can poll `cancelled` or register `onCancel`.

use super::callback::{JsFn, Queued};
use super::dto::{ReasonArg, Text};
use super::error::{check_new, check_this, guard, guard_napi, Arg, ClassTag};
use crate::tool::CancellationSignal;
use napi_derive_ohos::napi;
use napi_ohos::bindgen_prelude::{Function, This, Unknown};
use napi_ohos::{sys, Env};
use tokio_util::sync::CancellationToken;

/// The reason when `cancel()` is called without one.
const DEFAULT_REASON: &str = "cancelled by the app";

/// A cancellation signal shared between ArkTS and the runtime.
#[napi]
#[repr(C)]
pub struct CancellationHandle {
    // First: which class this is (see `ClassTag`).
    tag: ClassTag,
    signal: CancellationSignal,
    // The signal this one is a child of, when it is a call's: a child cancelled through its
    // parent has no reason of its own, so the parent's is reported.
    parent: Option<CancellationSignal>,
    // Ends the `onCancel` listeners: when the app's handle is collected, or when the call whose
    // context carries it finishes (not when that context's handle is collected: see `Drop`).
    listeners: CancellationToken,
}

// SAFETY: `#[repr(C)]`, its tag first.
unsafe impl super::error::JsClass for CancellationHandle {
    const JS_NAME: &'static str = "CancellationHandle\0";
    const TAG: ClassTag = ClassTag::CANCELLATION_HANDLE;
}

impl CancellationHandle {
    /// A handle over an existing signal; `listeners` ends its `onCancel` registrations.
    pub(crate) fn with_signal(signal: CancellationSignal, listeners: CancellationToken) -> Self {
        CancellationHandle { tag: ClassTag::CANCELLATION_HANDLE, signal, parent: None, listeners }
    }

    /// The handle of one call: `signal` is a child of `parent`.
    pub(crate) fn for_call(
        signal: CancellationSignal,
        parent: CancellationSignal,
        listeners: CancellationToken,
    ) -> Self {
        CancellationHandle { tag: ClassTag::CANCELLATION_HANDLE, signal, parent: Some(parent), listeners }
    }

    /// The reason of this signal, else of its parent.
    fn current_reason(signal: &CancellationSignal, parent: Option<&CancellationSignal>) -> Option<String> {
        signal.reason().or_else(|| parent.and_then(CancellationSignal::reason))
    }

    /// The signal (shared, not copied).
    pub(crate) fn signal(&self) -> &CancellationSignal {
        &self.signal
    }

    /// This handle as a JS object that the GC collects like one made with `new` (call on the JS
    /// thread): a call's `context.signal`.
    ///
    /// napi-ohos' `ToNapiValue` of a class (`new_instance`) keeps the reference `napi_wrap` hands
    /// back (a count of 1 on ArkUI, and on Node with the host shim) and never releases it: the
    /// object, and the handle in it, would live as long as the process, one per executor call.
    /// Its constructor path releases that reference, so the object is made with the class
    /// constructor and its fresh handle replaced by this one.
    ///
    /// # Errors
    /// When the class is not registered or the object cannot be made.
    pub(crate) fn into_js(self, env: &Env) -> napi_ohos::Result<sys::napi_value> {
        use napi_ohos::bindgen_prelude::FromNapiMutRef;
        let name = <Self as super::error::JsClass>::JS_NAME;
        let ctor_ref = napi_ohos::bindgen_prelude::get_class_constructor(name)
            .ok_or_else(|| napi_ohos::Error::from_reason("class CancellationHandle is not registered"))?;
        let mut ctor = std::ptr::null_mut();
        let mut instance = std::ptr::null_mut();
        // SAFETY: on the JS thread with this env; the constructor reference is held by napi-ohos
        // for the module's lifetime, and the new instance wraps a `CancellationHandle`.
        unsafe {
            napi_ohos::check_status!(sys::napi_get_reference_value(env.raw(), ctor_ref, &mut ctor))?;
            napi_ohos::check_status!(sys::napi_new_instance(
                env.raw(),
                ctor,
                0,
                std::ptr::null(),
                &mut instance
            ))?;
            let slot = Self::from_napi_mut_ref(env.raw(), instance)?;
            // The fresh handle is dropped here: that only ends its own (empty) listeners.
            *slot = self;
        }
        Ok(instance)
    }
}

impl Drop for CancellationHandle {
    fn drop(&mut self) {
        // A call's registrations end with the call (its drop guard), not with this object: the
        // executor may keep only its callback, and the run still cancels the call's signal
        // (a cancel, a timeout) after the context object was collected. The app's own handle
        // can only be cancelled through this object: once it is collected, nothing can.
        if self.parent.is_none() {
            // Run by the GC's finalizer (`extern "C"`): a panic must not unwind out of it.
            let listeners = &self.listeners;
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| listeners.cancel())).is_err() {
                log::warn!(
                    "arkagent: a collected CancellationHandle could not end its onCancel registrations"
                );
            }
        }
    }
}

#[napi]
impl CancellationHandle {
    /// A signal that is not cancelled.
    #[napi(constructor)]
    pub fn new(env: Env, this: This<Unknown>) -> napi_ohos::Result<Self> {
        check_new::<Self>(&env, &this)?;
        guard(&env, || {
            Ok(CancellationHandle::with_signal(CancellationSignal::new(), CancellationToken::new()))
        })
    }

    /// Cancels (the first reason wins).
    #[napi]
    pub fn cancel(&self, env: Env, reason: Arg<Option<Text<ReasonArg>>>) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let Arg(reason) = reason;
        guard(&env, || {
            self.signal.cancel(reason.map_or_else(|| DEFAULT_REASON.to_string(), String::from));
            Ok(())
        })
    }

    /// True once cancelled.
    #[napi(getter)]
    pub fn cancelled(&self, env: Env) -> napi_ohos::Result<bool> {
        check_this(&env, self)?;
        guard(&env, || Ok(self.signal.is_cancelled()))
    }

    /// The reason given to `cancel`, once cancelled.
    #[napi(getter)]
    pub fn reason(&self, env: Env) -> napi_ohos::Result<Option<String>> {
        check_this(&env, self)?;
        guard(&env, || Ok(Self::current_reason(&self.signal, self.parent.as_ref())))
    }

    /// Calls `callback(reason)` once, when the signal is cancelled (soon, if it already is). A
    /// throw in the callback is ignored. The registration never keeps the process alive.
    #[napi]
    pub fn on_cancel(
        &self,
        env: Env,
        callback: Arg<Function<'_, Unknown<'static>, Unknown<'static>>>,
    ) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let Arg(callback) = callback;
        guard_napi(&env, || {
            let callback: JsFn<String> = super::callback::passthrough_fn(&env, &callback)?;
            let signal = self.signal.clone();
            let parent = self.parent.clone();
            let listeners = self.listeners.clone();
            super::runtime()?.spawn(async move {
                tokio::select! {
                    biased;
                    _ = signal.cancelled() => {
                        let reason = Self::current_reason(&signal, parent.as_ref())
                            .unwrap_or_else(|| DEFAULT_REASON.to_string());
                        // The return value (or a throw) is dropped on the JS thread, under the
                        // binding's guard (the reply runs from napi-ohos' `extern "C"` callback).
                        callback.call_with_return_value(Queued::unwaited(reason), |ret, env| {
                            let replied = super::callback::in_reply(&env, |threw| {
                                super::panic_point!(Cancel);
                                super::callback::drop_reply(&env, &ret, threw, "an onCancel callback");
                            });
                            if let Err(why) = replied {
                                log::warn!("arkagent: an onCancel callback may not have been called: {why}");
                            }
                            Ok(())
                        });
                    }
                    _ = listeners.cancelled() => {}
                }
            });
            Ok(())
        })
    }
}
