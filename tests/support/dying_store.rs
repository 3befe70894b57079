//! A memory store that "dies" at a session's first batch completion: from that commit on, every
//! commit is refused (`state_io`), as if the process had been killed just before it.
#![allow(dead_code)]

use arkagent::state::{AgentState, MemoryStore, StateEvent, StateStore};
use arkagent::AgentError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Refuses every commit from `session`'s first `BatchCompleted` on.
pub struct DiesAtBatchEnd {
    pub inner: Arc<MemoryStore>,
    pub session: &'static str,
    pub dead: AtomicBool,
}

impl DiesAtBatchEnd {
    pub fn new(inner: Arc<MemoryStore>, session: &'static str) -> Self {
        DiesAtBatchEnd { inner, session, dead: AtomicBool::new(false) }
    }
}

#[async_trait::async_trait]
impl StateStore for DiesAtBatchEnd {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        self.inner.load(session_id).await
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        let completes = events.iter().any(|e| matches!(e, StateEvent::BatchCompleted { .. }));
        if self.dead.load(Ordering::SeqCst) || (state.session_id == self.session && completes) {
            self.dead.store(true, Ordering::SeqCst);
            return Err(AgentError::of(arkagent::codes::STATE_IO, "the process died"));
        }
        self.inner.commit(state, events).await
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        self.inner.save_snapshot(state).await
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        self.inner.delete(session_id).await
    }
}
