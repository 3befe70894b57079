//! What an executor may see besides its arguments: the session id, a read-only view of the state,
//! the batch id, a cancellation signal and a whitelist of services. There is no API key here and no
//! global "current context": everything a tool can reach is in this type.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The part of the agent state a tool may read: schema version, session id and metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadonlyAgentState {
    /// The state's schema version.
    pub schema_version: u32,
    /// The session id.
    pub session_id: String,
    /// App metadata of the session.
    pub metadata: BTreeMap<String, Value>,
}

/// The reason a call's signal gives when the call is cut off at its time limit, whichever limit
/// fired first (the runtime's or an adapter's own).
pub const TIMEOUT_REASON: &str = "timeout";

/// A cancellation signal shared by the runtime, the executors and the HTTP stream. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct CancellationSignal {
    token: CancellationToken,
    // A std Mutex: held only to copy a short string, never across an await.
    reason: Arc<Mutex<Option<String>>>,
    // The parent's signal, whose reason a child reports when the parent cancelled it.
    parent: Option<Arc<CancellationSignal>>,
}

impl CancellationSignal {
    /// A signal that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels, with a reason (the first reason wins).
    pub fn cancel(&self, reason: impl Into<String>) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_none() {
                *r = Some(reason.into());
            }
        }
        self.token.cancel();
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason given to [`cancel`](Self::cancel).
    pub fn reason(&self) -> Option<String> {
        let own = self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone();
        own.or_else(|| self.parent.as_ref().and_then(|p| p.reason()))
    }

    /// Completes when cancelled.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// A child signal: cancelled when this one is, and cancellable on its own without affecting
    /// this one (used per tool call and per sub-agent).
    pub fn child(&self) -> CancellationSignal {
        CancellationSignal {
            token: self.token.child_token(),
            reason: Arc::default(),
            parent: Some(Arc::new(self.clone())),
        }
    }

    /// The underlying token (for `tokio::select!` in drivers).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// Whether a call's executor was entered, settled once by whichever side comes first: the side
/// that reaches the app's code marks the call started ([`start`](Self::start)), or the runtime
/// gives the call up ([`give_up`](Self::give_up): its run ended first), after which it never
/// starts. So a run that ends while a call waits to start (a later call of a parallel chunk, an
/// executor of a binding queued for a busy JS thread) knows it did not run. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct CallStart(Arc<AtomicU8>);

/// Neither started nor given up yet.
const NOT_STARTED: u8 = 0;
/// The executor was entered.
const STARTED: u8 = 1;
/// Given up before it started: it never will.
const GIVEN_UP: u8 = 2;

impl CallStart {
    /// A call that has not started.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the call started, unless it was given up (or started) before: whether the app's
    /// code may run now.
    pub fn start(&self) -> bool {
        self.0.compare_exchange(NOT_STARTED, STARTED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Gives the call up unless it started: whether it never did (now it never will).
    pub fn give_up(&self) -> bool {
        match self.0.compare_exchange(NOT_STARTED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => state == GIVEN_UP,
        }
    }

    /// Whether the call was given up before it started.
    pub fn is_given_up(&self) -> bool {
        self.0.load(Ordering::Acquire) == GIVEN_UP
    }
}

/// A service an app offers to its tools (a database handle, an HTTP client of its own...).
pub trait ToolService: Send + Sync + 'static {
    /// The id tools look the service up by.
    fn service_id(&self) -> &str;
    /// For downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
}

/// A fixed whitelist of services, not a service locator: only what the app registered is there.
#[derive(Default, Clone)]
pub struct ToolServiceRegistry {
    services: HashMap<String, Arc<dyn ToolService>>,
}

impl ToolServiceRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a service; returns false (and keeps the first) when the id is taken.
    pub fn register(&mut self, service: Arc<dyn ToolService>) -> bool {
        let id = service.service_id().to_string();
        if self.services.contains_key(&id) {
            return false;
        }
        self.services.insert(id, service);
        true
    }

    /// The service with this id.
    pub fn get(&self, service_id: &str) -> Option<Arc<dyn ToolService>> {
        self.services.get(service_id).cloned()
    }

    /// The registered ids, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.services.keys().cloned().collect();
        ids.sort();
        ids
    }
}

impl std::fmt::Debug for ToolServiceRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolServiceRegistry").field("ids", &self.ids()).finish()
    }
}

/// The explicit context handed to an executor.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session id.
    pub session_id: String,
    /// Read-only state view.
    pub state: Arc<ReadonlyAgentState>,
    /// Shared by every call of one batch (for log correlation).
    pub batch_call_id: String,
    /// The id of this call.
    pub call_id: String,
    /// Cancellation: executors should check it and stop cooperatively.
    pub signal: CancellationSignal,
    /// The app's services.
    pub services: Arc<ToolServiceRegistry>,
    /// Whether the executor was entered: the registry marks it as it calls the executor, or an
    /// executor that [marks its own start](super::ToolExecutor::marks_own_start) as the app's code
    /// is reached. A run that ends first gives the call up, and answers it as not run.
    pub started: CallStart,
}

impl ToolContext {
    /// A context for tests and simple uses: fresh signal, no services.
    pub fn detached(session_id: impl Into<String>, call_id: impl Into<String>) -> Self {
        let session_id = session_id.into();
        ToolContext {
            state: Arc::new(ReadonlyAgentState {
                schema_version: crate::state::SCHEMA_VERSION,
                session_id: session_id.clone(),
                metadata: BTreeMap::new(),
            }),
            session_id,
            batch_call_id: String::new(),
            call_id: call_id.into(),
            signal: CancellationSignal::new(),
            services: Arc::new(ToolServiceRegistry::new()),
            started: CallStart::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Db;
    impl ToolService for Db {
        fn service_id(&self) -> &str {
            "db"
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn duplicate_service_ids_are_refused() {
        let mut s = ToolServiceRegistry::new();
        assert!(s.register(Arc::new(Db)));
        assert!(!s.register(Arc::new(Db)));
        assert!(s.get("db").unwrap().as_any().downcast_ref::<Db>().is_some());
        assert!(s.get("anything").is_none());
    }

    #[test]
    fn a_call_is_started_or_given_up_whichever_comes_first() {
        let start = CallStart::new();
        assert!(start.start());
        assert!(!start.give_up() && !start.is_given_up());
        assert!(!start.start());
        let given_up = CallStart::new();
        assert!(given_up.give_up() && given_up.is_given_up());
        assert!(!given_up.start());
        assert!(given_up.give_up());
    }

    #[test]
    fn child_signal_follows_parent_not_the_reverse() {
        let parent = CancellationSignal::new();
        let child = parent.child();
        child.cancel("only me");
        assert!(!parent.is_cancelled());
        let child2 = parent.child();
        parent.cancel("all");
        assert!(child2.is_cancelled());
        assert_eq!(child2.reason().as_deref(), Some("all"));
        assert_eq!(child.reason().as_deref(), Some("only me"));
        assert_eq!(parent.reason().as_deref(), Some("all"));
    }
}
