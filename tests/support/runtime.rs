//! Test doubles for runtime tests: a scripted model that records requests, an in-memory store,
//! and the demo's order tools. (The provider and state modules ship their own; these keep the
//! runtime tests independent of HTTP and disk.)
#![allow(dead_code)]

use arkagent::error::AgentError;
use arkagent::message::{ToolCall, Usage};
use arkagent::provider::{ChatModel, ChatRequest, ModelEvent, ModelEventStream, ModelResponse};
use arkagent::state::{AgentState, StateEvent, StateStore};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;

/// Replays responses in order; records every request.
#[derive(Default)]
pub struct Script {
    pub responses: Mutex<Vec<ModelResponse>>,
    pub requests: Mutex<Vec<ChatRequest>>,
    /// Sleep this long before answering (to test cancellation mid-request).
    pub delay_ms: u64,
}

impl Script {
    pub fn new(responses: Vec<ModelResponse>) -> Self {
        let mut r = responses;
        r.reverse();
        Script { responses: Mutex::new(r), requests: Mutex::new(Vec::new()), delay_ms: 0 }
    }

    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

pub fn calls(calls: &[(&str, &str, &str)]) -> ModelResponse {
    ModelResponse {
        content: None,
        reasoning_content: None,
        tool_calls: calls.iter().map(|(id, n, a)| ToolCall::new(*id, *n, *a)).collect(),
        finish_reason: Some("tool_calls".into()),
        usage: Some(Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }),
    }
}

pub fn answer(text: &str) -> ModelResponse {
    ModelResponse {
        content: Some(text.into()),
        reasoning_content: None,
        tool_calls: vec![],
        finish_reason: Some("stop".into()),
        usage: None,
    }
}

#[async_trait]
impl ChatModel for Script {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        self.requests.lock().unwrap().push(request.clone());
        if self.delay_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(self.delay_ms)).await;
        }
        self.responses
            .lock()
            .unwrap()
            .pop()
            .ok_or_else(|| AgentError::of(arkagent::codes::PROVIDER_SCRIPT_EXHAUSTED, "script exhausted"))
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let response = self.complete(request).await?;
        let mut events = Vec::new();
        if let Some(text) = &response.content {
            for piece in text.chars().collect::<Vec<_>>().chunks(4) {
                events.push(Ok(ModelEvent::TextDelta(piece.iter().collect())));
            }
        }
        for (index, call) in response.tool_calls.iter().enumerate() {
            events.push(Ok(ModelEvent::ToolCallStarted {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            }));
            events.push(Ok(ModelEvent::ToolCallArgumentsDelta { index, delta: call.arguments.clone() }));
            events.push(Ok(ModelEvent::ToolCallFinished { index, call: call.clone() }));
        }
        events.push(Ok(ModelEvent::Finished(response)));
        Ok(Box::pin(futures_util::stream::iter(events)))
    }
}

/// Keeps snapshots and journals in memory; `commits` counts durable commits.
#[derive(Default)]
pub struct MemStore {
    pub states: Mutex<HashMap<String, (AgentState, Vec<StateEvent>)>>,
}

#[async_trait]
impl StateStore for MemStore {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        Ok(self.states.lock().unwrap().get(session_id).map(|(snap, journal)| {
            let mut s = snap.clone();
            for e in journal {
                s.apply(e);
            }
            s
        }))
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        let mut m = self.states.lock().unwrap();
        let entry = m
            .entry(state.session_id.clone())
            .or_insert_with(|| (AgentState::new(&state.session_id), Vec::new()));
        entry.1.extend_from_slice(events);
        Ok(())
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        self.states.lock().unwrap().insert(state.session_id.clone(), (state.clone(), Vec::new()));
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        Ok(self.states.lock().unwrap().remove(session_id).is_some())
    }
}
