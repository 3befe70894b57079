//! `CancellationHandle`: the JS face of a [`CancellationSignal`]. The app creates one to cancel a
//! call (`ToolRegistry.execute`, the Agent's `run` and `resume`); an executor finds one in its context as
//! `signal` and can poll `cancelled` or register `onCancel`.

use super::callback::JsFn;
use super::error::{guard, guard_napi, Arg};
use crate::tool::CancellationSignal;
use napi_derive_ohos::napi;
use napi_ohos::bindgen_prelude::{Function, Unknown};
use napi_ohos::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_ohos::Env;
use tokio_util::sync::CancellationToken;

/// The reason when `cancel()` is called without one.
const DEFAULT_REASON: &str = "cancelled by the app";

/// A cancellation signal shared between ArkTS and the runtime.
#[napi]
pub struct CancellationHandle {
    signal: CancellationSignal,
    // The signal this one is a child of, when it is a call's: a child cancelled through its
    // parent has no reason of its own, so the parent's is reported.
    parent: Option<CancellationSignal>,
    // Ends the `onCancel` listeners: when the handle is collected, or when the call whose context
    // carries it finishes.
    listeners: CancellationToken,
}

impl super::error::JsClass for CancellationHandle {
    const JS_NAME: &'static str = "CancellationHandle\0";
}

impl CancellationHandle {
    /// A handle over an existing signal; `listeners` ends its `onCancel` registrations.
    pub(crate) fn with_signal(signal: CancellationSignal, listeners: CancellationToken) -> Self {
        CancellationHandle { signal, parent: None, listeners }
    }

    /// The handle of one call: `signal` is a child of `parent`.
    pub(crate) fn for_call(
        signal: CancellationSignal,
        parent: CancellationSignal,
        listeners: CancellationToken,
    ) -> Self {
        CancellationHandle { signal, parent: Some(parent), listeners }
    }

    /// The reason of this signal, else of its parent.
    fn current_reason(signal: &CancellationSignal, parent: Option<&CancellationSignal>) -> Option<String> {
        signal.reason().or_else(|| parent.and_then(CancellationSignal::reason))
    }

    /// The signal (shared, not copied).
    pub(crate) fn signal(&self) -> &CancellationSignal {
        &self.signal
    }
}

impl Drop for CancellationHandle {
    fn drop(&mut self) {
        self.listeners.cancel();
    }
}

#[napi]
impl CancellationHandle {
    /// A signal that is not cancelled.
    #[napi(constructor)]
    pub fn new(env: Env) -> napi_ohos::Result<Self> {
        guard(&env, || {
            Ok(CancellationHandle::with_signal(CancellationSignal::new(), CancellationToken::new()))
        })
    }

    /// Cancels (the first reason wins).
    #[napi]
    pub fn cancel(&self, env: Env, reason: Arg<Option<String>>) -> napi_ohos::Result<()> {
        let Arg(reason) = reason;
        guard(&env, || {
            self.signal.cancel(reason.unwrap_or_else(|| DEFAULT_REASON.to_string()));
            Ok(())
        })
    }

    /// True once cancelled.
    #[napi(getter)]
    pub fn cancelled(&self, env: Env) -> napi_ohos::Result<bool> {
        guard(&env, || Ok(self.signal.is_cancelled()))
    }

    /// The reason given to `cancel`, once cancelled.
    #[napi(getter)]
    pub fn reason(&self, env: Env) -> napi_ohos::Result<Option<String>> {
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
        let Arg(callback) = callback;
        guard_napi(&env, || {
            let callback: JsFn<String, String> = super::callback::passthrough_fn(&env, &callback)?;
            let signal = self.signal.clone();
            let parent = self.parent.clone();
            let listeners = self.listeners.clone();
            napi_ohos::bindgen_prelude::spawn(async move {
                tokio::select! {
                    biased;
                    _ = signal.cancelled() => {
                        let reason = Self::current_reason(&signal, parent.as_ref())
                            .unwrap_or_else(|| DEFAULT_REASON.to_string());
                        // The return value (or a throw) is dropped on the JS thread.
                        callback.call_with_return_value(reason, ThreadsafeFunctionCallMode::NonBlocking, |_ret, _env| Ok(()));
                    }
                    _ = listeners.cancelled() => {}
                }
            });
            Ok(())
        })
    }
}
