//! Events to ArkTS: the Agent's listener (`(eventJson: string) => void`) as a core
//! [`EventSink`]. Each [`AgentEvent`] is serialised (serde, snake_case) on the runtime thread and
//! queued to the listener through one weak thread-safe function, non-blocking: the queue is FIFO,
//! so the listener sees a run's events in the order the run emitted them. Its return value is
//! ignored and a throw is contained (the event is dropped, the run goes on), as is an async
//! listener's rejected Promise (logged: unhandled, Node would end the process); so is a failure of
//! the binding on the JS thread (a panic while the event's argument is made or the reply is
//! read: the event is dropped, with a warning in the log).
//!
//! When a run ends, [`RunEvents::delivered`] waits until its last event was handed to the
//! listener, so `run()` resolves after the listener saw every event of the run, unless that takes
//! more than [`DELIVERY_WAIT`] (a listener slower than the run, or a JS thread blocked): then
//! `run()` resolves and the events still queued are delivered after it. The queue has no bound:
//! the events of a run wait for a slow listener in memory (a few hundred bytes each).
//!
//! One listener hears every run of the Agent (several may be in flight on different sessions), so
//! each event goes out with the id of its run: the core's JSON plus `"run_id"`, taken from the
//! run's first event (`run_started`, which has it already). A worker's event, inside its
//! `worker_event` wrapper, gets the worker's run id (from the worker's own `run_started`), the
//! wrapper the parent's.

use super::callback::JsFn;
use super::dto::to_json;
use crate::agent::{AgentEvent, EventSink};
use napi_ohos::bindgen_prelude::{Function, Unknown};
use napi_ohos::{Env, Status};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// The longest wait for the listener to have seen a run's last event (a JS thread blocked for
/// longer than this does not hold the run's Promise back).
const DELIVERY_WAIT: Duration = Duration::from_secs(5);

type Listener = JsFn<String>;

/// The Agent's listener slot (replaced by `onEvent`).
#[derive(Default)]
pub(crate) struct EventListener {
    // A std RwLock: read once per event, written by `onEvent`; never held across an await.
    current: RwLock<Option<Arc<Listener>>>,
}

impl EventListener {
    /// Sets the listener, or removes it (`None`) (call on the JS thread). Events of runs
    /// already going go to the new listener from their next one.
    ///
    /// # Errors
    /// When the thread-safe function cannot be created.
    pub(crate) fn set(
        &self,
        env: &Env,
        function: Option<Function<'_, Unknown<'static>, Unknown<'static>>>,
    ) -> napi_ohos::Result<()> {
        let listener = match function {
            Some(function) => Some(Arc::new(super::callback::passthrough_fn(env, &function)?)),
            None => None,
        };
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = listener;
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
    /// The run's id, from its `run_started`.
    run_id: OnceLock<String>,
    // The run ids of the workers of this run's delegations, by worker session (from their
    // `run_started`). A std Mutex: held only while a worker's event is tagged and serialised.
    worker_runs: Mutex<HashMap<String, String>>,
    /// Whether an event of this run could not be queued to the listener (logged once).
    unqueued: AtomicBool,
}

impl RunEvents {
    /// A sink for one run.
    pub(crate) fn new(listener: Arc<EventListener>) -> Self {
        RunEvents {
            listener,
            last: Mutex::new(None),
            run_id: OnceLock::new(),
            worker_runs: Mutex::new(HashMap::new()),
            unqueued: AtomicBool::new(false),
        }
    }

    /// The event's JSON with its run id (see the module docs); notes the run ids it announces.
    fn wire_json(&self, event: &AgentEvent) -> String {
        match event {
            AgentEvent::RunStarted { run_id, .. } => {
                // A sink serves one run: its first `run_started` names it.
                let _ = self.run_id.set(run_id.clone());
                to_json(event)
            }
            AgentEvent::WorkerEvent { .. } => {
                let mut workers = self.worker_runs.lock().unwrap_or_else(|p| p.into_inner());
                let mut inner = event;
                while let AgentEvent::WorkerEvent { event, .. } = inner {
                    inner = &**event;
                }
                if let AgentEvent::RunStarted { session_id, run_id, .. } = inner {
                    workers.insert(session_id.clone(), run_id.clone());
                }
                to_json(&Wire { event, run_id: self.run_id.get().map(String::as_str), workers: &workers })
            }
            _ => to_json(&Wire {
                event,
                run_id: self.run_id.get().map(String::as_str),
                workers: &HashMap::new(),
            }),
        }
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
        super::panic_point!(Event);
        let Some(listener) = self.listener.get() else { return };
        let (tx, rx) = oneshot::channel();
        let status = listener.call_with_return_value(
            super::callback::Queued::unwaited(self.wire_json(&event)),
            move |ret, env| {
                // Run from napi-ohos' `extern "C"` callback: under the binding's guard, which
                // turns a refused call or a panic into a dropped event (logged).
                let replied = super::callback::in_reply(&env, |threw| {
                    super::panic_point!(Listener);
                    // A throw in the listener arrives here as its value (the shield's: `threw`),
                    // dropped on the JS thread; an error of napi-ohos' as `ret`; an async
                    // listener's rejection is logged and dropped.
                    super::callback::drop_reply(&env, &ret, threw, "the event listener");
                });
                if let Err(why) = replied {
                    log::warn!("arkagent: an event may not have reached the listener: {why}; dropped");
                }
                let _ = tx.send(());
                Ok(())
            },
        );
        if status == Status::Ok {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(rx);
        } else if !self.unqueued.swap(true, Ordering::Relaxed) {
            // Once per run: a listener whose environment is closing refuses every later event.
            log::warn!(
                "arkagent: an event could not be queued to the listener ({status}); the run's later \
                 events that cannot be are dropped unlogged"
            );
        }
    }
}

/// An event as the listener gets it: the core's serde form with `run_id` (left out while
/// unknown; `run_started` has its own), a worker's event inside its wrapper with the worker's.
struct Wire<'a> {
    event: &'a AgentEvent,
    run_id: Option<&'a str>,
    workers: &'a HashMap<String, String>,
}

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.event {
            AgentEvent::RunStarted { .. } => self.event.serialize(serializer),
            AgentEvent::WorkerEvent { call_id, session_id, event } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", "worker_event")?;
                if let Some(run_id) = self.run_id {
                    map.serialize_entry("run_id", run_id)?;
                }
                map.serialize_entry("call_id", call_id)?;
                map.serialize_entry("session_id", session_id)?;
                let inner = Wire {
                    event,
                    run_id: self.workers.get(session_id).map(String::as_str),
                    workers: self.workers,
                };
                map.serialize_entry("event", &inner)?;
                map.end()
            }
            event => {
                #[derive(serde::Serialize)]
                struct Tagged<'a> {
                    #[serde(flatten)]
                    event: &'a AgentEvent,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    run_id: Option<&'a str>,
                }
                Tagged { event, run_id: self.run_id }.serialize(serializer)
            }
        }
    }
}
