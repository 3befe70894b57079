//! A test store that wraps another and changes some of its calls ([`Wrapped`]): a store that
//! "dies" at a given commit, one whose deletion of a session fails, one that counts loads. The
//! calls a test does not change go to the inner store; which of the optional methods do is the
//! test's choice ([`StoreHooks::FORWARD`]), since a store of the app's that implements only the
//! required ones gets the trait's defaults, and some tests are about exactly that.
#![allow(dead_code)]

use arkagent::state::{validate_session_id, AgentState, SessionLease, StateEvent, StateStore};
use arkagent::AgentError;
use async_trait::async_trait;
use std::sync::Arc;

/// Which optional [`StateStore`] methods reach the inner store; the others behave as the trait's
/// defaults (`load_unrepaired` loads, `exists` loads unrepaired, `lease` reserves nothing).
#[derive(Debug, Clone, Copy)]
pub struct Forward {
    pub load_unrepaired: bool,
    pub exists: bool,
    pub lease: bool,
}

impl Forward {
    /// Only the required methods: a store that keeps every default.
    pub const REQUIRED: Forward = Forward { load_unrepaired: false, exists: false, lease: false };
}

/// What a [`Wrapped`] store changes. Each method is given the inner store and, by default, passes
/// the call on unchanged.
#[async_trait]
pub trait StoreHooks: Send + Sync + 'static {
    /// The optional methods that reach the inner store.
    const FORWARD: Forward = Forward::REQUIRED;

    /// Called with the session of every load that reaches the inner store.
    fn on_load(&self, _session_id: &str) {}

    /// A load (after [`on_load`](StoreHooks::on_load)); by default the inner store's.
    async fn load(&self, inner: &dyn StateStore, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        inner.load(session_id).await
    }

    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), AgentError> {
        inner.commit(state, events).await
    }

    async fn save_snapshot(&self, inner: &dyn StateStore, state: &AgentState) -> Result<(), AgentError> {
        inner.save_snapshot(state).await
    }

    async fn delete(&self, inner: &dyn StateStore, session_id: &str) -> Result<bool, AgentError> {
        inner.delete(session_id).await
    }
}

/// The inner store with the calls `hooks` changes.
pub struct Wrapped<H> {
    pub inner: Arc<dyn StateStore>,
    pub hooks: H,
}

impl<H: StoreHooks> Wrapped<H> {
    pub fn new(inner: Arc<dyn StateStore>, hooks: H) -> Self {
        Wrapped { inner, hooks }
    }
}

#[async_trait]
impl<H: StoreHooks> StateStore for Wrapped<H> {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        self.hooks.on_load(session_id);
        self.hooks.load(&*self.inner, session_id).await
    }

    async fn list(&self) -> Result<Vec<String>, AgentError> {
        self.inner.list().await
    }

    async fn load_unrepaired(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        if H::FORWARD.load_unrepaired {
            self.hooks.on_load(session_id);
            self.inner.load_unrepaired(session_id).await
        } else {
            self.load(session_id).await
        }
    }

    async fn exists(&self, session_id: &str) -> Result<bool, AgentError> {
        if H::FORWARD.exists {
            self.inner.exists(session_id).await
        } else {
            Ok(self.load_unrepaired(session_id).await?.is_some())
        }
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        self.hooks.commit(&*self.inner, state, events).await
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        self.hooks.save_snapshot(&*self.inner, state).await
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        self.hooks.delete(&*self.inner, session_id).await
    }

    async fn lease(&self, session_id: &str) -> Result<SessionLease, AgentError> {
        if H::FORWARD.lease {
            self.inner.lease(session_id).await
        } else {
            validate_session_id(session_id)?;
            Ok(SessionLease::default())
        }
    }
}

/// Refuses every commit (`state_io`) from the first batch completion of a session it is given
/// for on, as if the process had been killed just before that commit. Snapshots still pass.
pub struct DiesAtBatchEnd {
    /// Whether a batch completion of this session (the state after the commit) is the one.
    pub of: Box<dyn Fn(&AgentState) -> bool + Send + Sync>,
    pub dead: std::sync::atomic::AtomicBool,
}

impl DiesAtBatchEnd {
    /// The memory store `inner`, dying at `session`'s first batch completion.
    pub fn wrap(inner: Arc<arkagent::state::MemoryStore>, session: &'static str) -> Wrapped<Self> {
        DiesAtBatchEnd::wrap_when(inner, move |state| state.session_id == session)
    }

    /// The memory store `inner`, dying at the first batch completion of a session `of` picks.
    pub fn wrap_when(
        inner: Arc<arkagent::state::MemoryStore>,
        of: impl Fn(&AgentState) -> bool + Send + Sync + 'static,
    ) -> Wrapped<Self> {
        Wrapped::new(inner, DiesAtBatchEnd { of: Box::new(of), dead: Default::default() })
    }
}

#[async_trait]
impl StoreHooks for DiesAtBatchEnd {
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), AgentError> {
        use std::sync::atomic::Ordering;
        let completes = events.iter().any(|e| matches!(e, StateEvent::BatchCompleted { .. }));
        if self.dead.load(Ordering::SeqCst) || ((self.of)(state) && completes) {
            self.dead.store(true, Ordering::SeqCst);
            return Err(AgentError::of(arkagent::codes::STATE_IO, "the process died"));
        }
        inner.commit(state, events).await
    }
}
