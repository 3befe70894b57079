//! Events to ArkTS: the Agent's listener (`(eventJson: string) => void`) as a core
//! [`EventSink`]. Each [`AgentEvent`] is serialised (serde, snake_case) on the runtime thread and
//! queued to the JS thread through the Agent's one weak thread-safe function, non-blocking: the
//! queue is FIFO, so the listener sees a run's events in the order the run emitted them.
//!
//! Which listener an event goes to is decided on the JS thread as it is delivered: the queue's
//! function is a shield ([`shield_with`](super::callback::shield_with)) that calls the one
//! `onEvent` set last. So once `onEvent` returns (on the JS thread, maybe from inside the
//! listener), the previous listener is called no more and its reference is deleted (its hold on
//! what it captures goes with it); the events still queued go to the new one, in order, none lost
//! or twice, or with none set are dropped as the JS thread reaches them. (With a thread-safe
//! function per listener, the events queued before a swap went on reaching the old one, for
//! seconds behind a slow listener, and the new one missed them.) While no listener is set, the
//! runs queue nothing.
//!
//! The listener's return value is ignored and a throw is contained (the event is dropped, the run
//! goes on), as is an async listener's rejected Promise (logged: unhandled, Node would end the
//! process); so is a failure of the binding on the JS thread (a panic while the event's argument
//! is made or the reply is read: the event is dropped, with a warning in the log).
//!
//! When a run ends, [`RunEvents::delivered`] waits until its last event was handed to the
//! listener, so `run()` resolves after the listener saw every event of the run, unless that takes
//! more than [`DELIVERY_WAIT`] (a listener slower than the run, or a JS thread blocked): then
//! `run()` resolves and the events still queued are delivered after it. The run waits the same
//! way before it calls the executors of a batch ([`EventSink::flushed`]): the listener is handed
//! the answer's events and the `state_persisted` of the calls' `started` records before any
//! executor is called, though both go to the JS thread by different thread-safe functions. The queue has no bound:
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
use napi_ohos::bindgen_prelude::{Function, FunctionRef, JsValue, Unknown};
use napi_ohos::{Env, Status};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// The longest wait for the listener to have seen a run's last event (a JS thread blocked for
/// longer than this does not hold the run's Promise back).
const DELIVERY_WAIT: Duration = Duration::from_secs(5);

/// A JS reference to the listener function (deleted when dropped: on the JS thread only).
type ListenerRef = FunctionRef<Unknown<'static>, Unknown<'static>>;

/// The Agent's listener, on the JS thread (held by the Agent object, finalized there): the
/// function set by `onEvent`, and the queue the runs send their events to, which calls it.
#[derive(Default)]
pub(crate) struct EventListener {
    // Read by the queue's shield on the JS thread as each event is delivered, replaced by
    // `onEvent` (on the JS thread too): never borrowed while app code runs. An `Rc`: the
    // reference may only be deleted on the JS thread, and the Agent and the shield are dropped
    // there.
    current: Rc<RefCell<Option<ListenerRef>>>,
    queue: Arc<EventQueue>,
}

impl EventListener {
    /// Sets the listener, or removes it (`None`) (call on the JS thread). Every event delivered
    /// from now on goes to it, the ones already queued included; a removed listener is
    /// released at once (its reference deleted), and hears nothing more.
    ///
    /// # Errors
    /// When the reference or the thread-safe function cannot be created (nothing changed then).
    pub(crate) fn set(
        &self,
        env: &Env,
        function: Option<Function<'_, Unknown<'static>, Unknown<'static>>>,
    ) -> napi_ohos::Result<()> {
        let function = match function {
            Some(function) => {
                let function = function.create_ref()?;
                self.queue.open(env, &self.current)?;
                Some(function)
            }
            None => None,
        };
        let listening = function.is_some();
        let previous = self.current.replace(function);
        self.queue.listening.store(listening, Ordering::Release);
        // Its reference deleted here, on the JS thread.
        drop(previous);
        Ok(())
    }

    /// The queue the runs send their events to.
    pub(crate) fn queue(&self) -> Arc<EventQueue> {
        Arc::clone(&self.queue)
    }
}

/// The way of an Agent's events to the JS thread, shared with its runs: one weak thread-safe
/// function (FIFO), whose shield calls the listener set when the JS thread gets to each event.
#[derive(Default)]
pub(crate) struct EventQueue {
    /// Made with the first listener (on the JS thread, of the Agent's environment).
    to_js: OnceLock<JsFn<String>>,
    /// Whether a listener is set: while none is, the runs' events are not queued at all.
    listening: AtomicBool,
}

impl EventQueue {
    /// Makes the thread-safe function, unless made already (call on the JS thread).
    fn open(&self, env: &Env, current: &Rc<RefCell<Option<ListenerRef>>>) -> napi_ohos::Result<()> {
        if self.to_js.get().is_some() {
            return Ok(());
        }
        let current = Rc::clone(current);
        let shielded = super::callback::shield_with(env, move |env| {
            // The borrow ends before the listener is called (it may call `onEvent`); the handle
            // keeps the function alive for the call even when it does.
            current.borrow().as_ref().map(|function| function.borrow_back(env).map(|f| f.raw())).transpose()
        })?;
        let to_js = super::callback::passthrough_shielded(env, shielded)?;
        // Only the JS thread sets it, and it just found it unset.
        let _ = self.to_js.set(to_js);
        Ok(())
    }

    /// The thread-safe function, while a listener is set.
    fn listener(&self) -> Option<&JsFn<String>> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        self.to_js.get()
    }
}

/// The sink of one run: sends to the Agent's current listener.
pub(crate) struct RunEvents {
    queue: Arc<EventQueue>,
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
    pub(crate) fn new(queue: Arc<EventQueue>) -> Self {
        RunEvents {
            queue,
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
        let Some(listener) = self.queue.listener() else { return };
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

    /// [`RunEvents::delivered`]: the driver awaits it before it calls a chunk's executors, which
    /// reach the JS thread through their own thread-safe functions; so the listener is handed
    /// the events emitted before (at most [`DELIVERY_WAIT`] behind a slow listener) first.
    fn flushed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.delivered())
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
