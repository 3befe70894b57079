//! [`MemoryStore`]: a [`StateStore`] in memory, for tests and for apps that persist nothing.

use super::repair::{repair_pairing, RepairPolicy};
use super::session_id::validate_session_id;
use super::{AgentState, SessionLease, StateEvent, StateStore};
use crate::error::{codes, AgentError};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Keeps each session's latest committed state in a map. Nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    // A std Mutex: held only to clone or replace a state, never across an await.
    sessions: Mutex<HashMap<String, AgentState>>,
    // The sessions under a lease (shared with the leases, which remove themselves when dropped).
    leased: Arc<Mutex<HashSet<String>>>,
    // When each session was last committed or saved (ms since the epoch), for `updated_at_ms`.
    // A std Mutex, never held across an await (nor together with `sessions`).
    written: Mutex<HashMap<String, u64>>,
    repair: RepairPolicy,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A MemoryStore lease: the session's entry in the leased set, removed on drop.
struct Leased {
    set: Arc<Mutex<HashSet<String>>>,
    session_id: String,
}

impl Drop for Leased {
    fn drop(&mut self) {
        self.set.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.session_id);
    }
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

    fn touch(&self, session_id: &str) {
        self.written.lock().unwrap_or_else(|p| p.into_inner()).insert(session_id.to_string(), now_ms());
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

    async fn exists(&self, session_id: &str) -> Result<bool, AgentError> {
        validate_session_id(session_id)?;
        Ok(self.lock().contains_key(session_id))
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
        drop(sessions);
        self.touch(&state.session_id);
        Ok(())
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        validate_session_id(&state.session_id)?;
        self.lock().insert(state.session_id.clone(), state.clone());
        self.touch(&state.session_id);
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        validate_session_id(session_id)?;
        let existed = self.lock().remove(session_id).is_some();
        self.written.lock().unwrap_or_else(|p| p.into_inner()).remove(session_id);
        Ok(existed)
    }

    /// [`session_ids`](MemoryStore::session_ids): every stored session, sorted.
    async fn list(&self) -> Result<Vec<String>, AgentError> {
        Ok(self.session_ids())
    }

    /// The time of the session's last commit or snapshot in this process.
    async fn updated_at_ms(&self, session_id: &str) -> Result<Option<u64>, AgentError> {
        validate_session_id(session_id)?;
        Ok(self.written.lock().unwrap_or_else(|p| p.into_inner()).get(session_id).copied())
    }

    async fn lease(&self, session_id: &str) -> Result<SessionLease, AgentError> {
        validate_session_id(session_id)?;
        let mut leased = self.leased.lock().unwrap_or_else(|p| p.into_inner());
        if !leased.insert(session_id.to_string()) {
            return Err(AgentError::of(
                codes::SESSION_BUSY,
                format!(
                    "session {session_id} is being written (a run, resume or decision of an agent holds it); \
                     try again when it has finished"
                ),
            ));
        }
        Ok(SessionLease::holding(Leased {
            set: Arc::clone(&self.leased),
            session_id: session_id.to_string(),
        }))
    }

    /// Whether a lease of this store holds the session now (a `MemoryStore` is shared by the
    /// agents of one process, never across processes).
    async fn lease_held(&self, session_id: &str) -> Result<Option<bool>, AgentError> {
        validate_session_id(session_id)?;
        Ok(Some(self.leased.lock().unwrap_or_else(|p| p.into_inner()).contains(session_id)))
    }
}
