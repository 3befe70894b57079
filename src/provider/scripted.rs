//! [`ScriptedModel`]: a [`ChatModel`] that replays given answers in order, deterministically, both
//! whole (`complete`) and as a stream of small deltas (`stream`), and records every request it
//! received. For tests and the offline demo.

use super::{ChatModel, ChatRequest, ModelEvent, ModelEventStream, ModelResponse};
use crate::error::{codes, AgentError};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::Mutex;

/// One scripted step.
#[derive(Debug, Clone)]
pub enum ScriptStep {
    /// Answer with this response.
    Respond(ModelResponse),
    /// Fail with this error (as `complete`'s error, or `stream`'s error before any event).
    Fail(AgentError),
    /// Stream these events, then fail with this error (a stream breaking off); `complete` fails
    /// with the error at once.
    BreakOff(Vec<ModelEvent>, AgentError),
}

impl From<ModelResponse> for ScriptStep {
    fn from(r: ModelResponse) -> Self {
        ScriptStep::Respond(r)
    }
}

// A std Mutex: it is never held across an `.await` (every method locks, copies, unlocks).
#[derive(Debug, Default)]
struct Script {
    steps: VecDeque<ScriptStep>,
    requests: Vec<ChatRequest>,
    // How many requests came (kept or not).
    received: usize,
}

/// A model that replays a script. Running out gives `provider_script_exhausted`.
#[derive(Debug)]
pub struct ScriptedModel {
    script: Mutex<Script>,
    chunk_chars: usize,
    keep_requests: bool,
}

impl ScriptedModel {
    /// A model answering with these responses, in order.
    pub fn new(responses: impl IntoIterator<Item = ModelResponse>) -> Self {
        ScriptedModel::from_steps(responses.into_iter().map(ScriptStep::Respond))
    }

    /// A model following these steps, in order.
    pub fn from_steps(steps: impl IntoIterator<Item = ScriptStep>) -> Self {
        ScriptedModel {
            script: Mutex::new(Script { steps: steps.into_iter().collect(), ..Script::default() }),
            chunk_chars: 4,
            keep_requests: true,
        }
    }

    /// The same model keeping no copy of the requests it receives ([`requests`](Self::requests)
    /// stays empty): for a model that lives as long as an app (the native module's `scripted`
    /// provider, the offline demo), where a copy of every request (each holding the history as
    /// it stood) grew with the square of a session's length, and, shared with the run, made it
    /// copy the history at every round.
    pub fn without_requests(mut self) -> Self {
        self.keep_requests = false;
        self
    }

    /// The same model streaming text, reasoning and arguments in pieces of `chars` characters
    /// (at least 1; the default is 4).
    pub fn with_chunk_chars(mut self, chars: usize) -> Self {
        self.chunk_chars = chars.max(1);
        self
    }

    /// Appends a step.
    pub fn push(&self, step: impl Into<ScriptStep>) {
        self.lock().steps.push_back(step.into());
    }

    /// Steps not yet used.
    pub fn remaining(&self) -> usize {
        self.lock().steps.len()
    }

    /// Every request received so far, in order (one per `complete` or `stream` call); none for a
    /// model made [`without_requests`](Self::without_requests).
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_step(&self, request: &ChatRequest) -> Result<ScriptStep, AgentError> {
        let mut script = self.lock();
        if self.keep_requests {
            script.requests.push(request.clone());
        }
        script.received += 1;
        let round = script.received;
        script.steps.pop_front().ok_or_else(|| {
            AgentError::of(
                codes::PROVIDER_SCRIPT_EXHAUSTED,
                format!("the script has no answer for request #{round}"),
            )
        })
    }

    /// The events a streamed answer is replayed as: reasoning, text, then per call `Started` and
    /// argument pieces, then every `ToolCallFinished`, `Usage` and `Finished`.
    pub fn events_for(&self, response: &ModelResponse) -> Vec<ModelEvent> {
        let mut out = Vec::new();
        if let Some(r) = &response.reasoning_content {
            out.extend(pieces(r, self.chunk_chars).map(ModelEvent::ReasoningDelta));
        }
        if let Some(c) = &response.content {
            out.extend(pieces(c, self.chunk_chars).map(ModelEvent::TextDelta));
        }
        for (index, call) in response.tool_calls.iter().enumerate() {
            out.push(ModelEvent::ToolCallStarted { index, id: call.id.clone(), name: call.name.clone() });
            out.extend(
                pieces(&call.arguments, self.chunk_chars)
                    .map(|delta| ModelEvent::ToolCallArgumentsDelta { index, delta }),
            );
        }
        for (index, call) in response.tool_calls.iter().enumerate() {
            out.push(ModelEvent::ToolCallFinished { index, call: call.clone() });
        }
        if let Some(u) = response.usage {
            out.push(ModelEvent::Usage(u));
        }
        out.push(ModelEvent::Finished(response.clone()));
        out
    }
}

fn pieces(text: &str, chars: usize) -> impl Iterator<Item = String> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = rest.char_indices().nth(chars).map(|(i, _)| i).unwrap_or(rest.len());
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head.to_string())
    })
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        match self.next_step(request)? {
            ScriptStep::Respond(r) => Ok(r),
            ScriptStep::Fail(e) | ScriptStep::BreakOff(_, e) => Err(e),
        }
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let items: Vec<Result<ModelEvent, AgentError>> = match self.next_step(request)? {
            ScriptStep::Respond(r) => self.events_for(&r).into_iter().map(Ok).collect(),
            ScriptStep::Fail(e) => return Err(e),
            ScriptStep::BreakOff(events, e) => {
                events.into_iter().map(Ok).chain(std::iter::once(Err(e))).collect()
            }
        };
        Ok(Box::pin(futures_util::stream::iter(items)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_on_characters() {
        assert_eq!(pieces("你好世界!", 2).collect::<Vec<_>>(), vec!["你好", "世界", "!"]);
        assert_eq!(pieces("", 3).count(), 0);
    }

    #[tokio::test]
    async fn a_model_without_requests_keeps_no_copy_of_them() {
        let request = ChatRequest::new(
            std::sync::Arc::new(vec![crate::message::ChatMessage::user("q")]),
            std::sync::Arc::from(Vec::new()),
        );
        for keep in [true, false] {
            let answer = || ModelResponse { content: Some("a".into()), ..ModelResponse::default() };
            let model = ScriptedModel::new([answer(), answer()]);
            let model = if keep { model } else { model.without_requests() };
            model.complete(&request).await.unwrap();
            model.complete(&request).await.unwrap();
            assert_eq!(model.requests().len(), if keep { 2 } else { 0 });
            // Requests are still counted.
            let e = model.complete(&request).await.unwrap_err();
            assert!(e.message.contains("request #3"), "{e}");
        }
    }
}
