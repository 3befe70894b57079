//! [`MemoryStore`]: a [`StateStore`] in memory, for tests and for apps that persist nothing.

use super::repair::{repair_pairing, RepairPolicy};
use super::session_id::validate_session_id;
use super::{AgentState, StateEvent, StateStore};
use crate::error::AgentError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;

/// Keeps each session's latest committed state in a map. Nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    // A std Mutex: held only to clone or replace a state, never across an await.
    sessions: Mutex<HashMap<String, AgentState>>,
    repair: RepairPolicy,
}

impl MemoryStore {
    /// An empty store whose `load` repairs with [`RepairPolicy::conservative`].
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// The same store with the repair policy `load` applies.
    pub fn with_repair_policy(mut self, policy: RepairPolicy) -> Self {
        self.repair = policy;
        self
    }

    /// The ids of the stored sessions, sorted.
    pub fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AgentState>> {
        // A panic while holding the lock cannot leave a half-written state (insert is atomic).
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        let mut state = self.load_unrepaired(session_id).await?;
        if let Some(s) = state.as_mut() {
            repair_pairing(s, &self.repair);
        }
        Ok(state)
    }

    async fn load_unrepaired(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        validate_session_id(session_id)?;
        Ok(self.lock().get(session_id).cloned())
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        validate_session_id(&state.session_id)?;
        let mut sessions = self.lock();
        match sessions.get_mut(&state.session_id) {
            // Like a journal: apply the events to the stored state (which equals `state` before
            // them), so a commit costs what its events cost, not what the history costs.
            Some(stored) if !events.is_empty() => events.iter().for_each(|e| stored.apply(e)),
            _ => {
                sessions.insert(state.session_id.clone(), state.clone());
            }
        }
        Ok(())
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        validate_session_id(&state.session_id)?;
        self.lock().insert(state.session_id.clone(), state.clone());
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        validate_session_id(session_id)?;
        Ok(self.lock().remove(session_id).is_some())
    }
}
