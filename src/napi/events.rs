//! Events to ArkTS: the Agent's listener (`(eventJson: string) => void`) as a core
//! [`EventSink`]. Each [`AgentEvent`] is serialised (serde, snake_case) on the runtime thread and
//! queued to the listener through one weak thread-safe function, non-blocking: the queue is FIFO,
//! so the listener sees a run's events in the order the run emitted them. Its return value is
//! ignored and a throw is contained (the event is dropped, the run goes on).
//!
//! When a run ends, [`RunEvents::delivered`] waits until its last event was handed to the
//! listener, so `run()` resolves after the listener saw every event of the run.

use super::callback::JsFn;
use super::dto::to_json;
use crate::agent::{AgentEvent, EventSink};
use napi_ohos::bindgen_prelude::{Function, Unknown};
use napi_ohos::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_ohos::{Env, Status};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// The longest wait for the listener to have seen a run's last event (a JS thread blocked for
/// longer than this does not hold the run's Promise back).
const DELIVERY_WAIT: Duration = Duration::from_secs(5);

type Listener = JsFn<String, String>;

/// The Agent's listener slot (replaced by `onEvent`).
#[derive(Default)]
pub(crate) struct EventListener {
    // A std RwLock: read once per event, written by `onEvent`; never held across an await.
    current: RwLock<Option<Arc<Listener>>>,
}

impl EventListener {
    /// Sets the listener (call on the JS thread).
    ///
    /// # Errors
    /// When the thread-safe function cannot be created.
    pub(crate) fn set(
        &self,
        env: &Env,
        function: Function<'_, Unknown<'static>, Unknown<'static>>,
    ) -> napi_ohos::Result<()> {
        let listener: Listener = super::callback::passthrough_fn(env, &function)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(listener));
        Ok(())
    }

    fn get(&self) -> Option<Arc<Listener>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The sink of one run: sends to the Agent's current listener.
pub(crate) struct RunEvents {
    listener: Arc<EventListener>,
    // A std Mutex: held only to swap the receiver, never across an await.
    last: Mutex<Option<oneshot::Receiver<()>>>,
}

impl RunEvents {
    /// A sink for one run.
    pub(crate) fn new(listener: Arc<EventListener>) -> Self {
        RunEvents { listener, last: Mutex::new(None) }
    }

    /// Waits until the listener was called with the last event sent (at most [`DELIVERY_WAIT`]).
    pub(crate) async fn delivered(&self) {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rx) = last {
            // An Err means the call was dropped unanswered (the environment is closing).
            let _ = tokio::time::timeout(DELIVERY_WAIT, rx).await;
        }
    }
}

impl EventSink for RunEvents {
    fn emit(&self, event: AgentEvent) {
        let Some(listener) = self.listener.get() else { return };
        let (tx, rx) = oneshot::channel();
        let status = listener.call_with_return_value(
            to_json(&event),
            ThreadsafeFunctionCallMode::NonBlocking,
            move |ret, env| {
                // A throw in the listener arrives here as `ret` and is dropped on the JS thread.
                if ret.is_err() {
                    super::callback::clear_pending_exception(&env);
                }
                let _ = tx.send(());
                Ok(())
            },
        );
        if status == Status::Ok {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(rx);
        } else {
            log::warn!("arkagent: an event could not be queued to the listener ({status})");
        }
    }
}
