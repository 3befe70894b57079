//! Models: the [`ChatModel`] trait the runtime talks to (so it never depends on HTTP), the request
//! and response domain types, and the streamed [`ModelEvent`]s.
//!
//! # Layout
//! - [`wire`]: OpenAI chat-completions wire types (request, response, chunk, error), no transport.
//! - [`convert`]: domain request -> wire request (under a preset's quirks); response body -> [`ModelResponse`].
//! - [`config`]: [`ClientConfig`], [`ProviderPreset`], [`ProviderQuirks`], [`ApiKey`], timeouts, retries.
//! - [`sse`]: the incremental SSE parser.
//! - [`assemble`]: chunks -> [`ModelEvent`]s; every provider difference in streamed tool calls is
//!   normalised there ([`StreamDecoder`] = SSE framing + assembly).
//! - `chunk_read`: the hot path of assembly, a chunk payload read in place by hand-written serde
//!   visitors (no `Vec`s per chunk); anything unusual is left to the derived [`wire`] types.
//! - [`client`]: [`OpenAiCompatibleClient`] over reqwest + rustls (retries, timeouts, limits).
//! - [`tls`]: the rustls configuration (ring, bundled webpki roots, extra PEM roots).
//! - [`scripted`]: [`ScriptedModel`], a deterministic replaying model for tests and the offline demo.

use crate::error::AgentError;
use crate::message::{ChatMessage, ToolCall, Usage};
use crate::tool::ToolDefinition;
use async_trait::async_trait;
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub mod assemble;
mod body_cache;
mod chunk_read;
pub mod client;
pub mod config;
pub mod convert;
pub mod scripted;
pub mod sse;
pub mod tls;
pub mod wire;

pub use assemble::{decode_sse_body, StreamAssembler, StreamDecoder};
pub use client::OpenAiCompatibleClient;
pub use config::{
    ApiKey, ClientConfig, MaxTokensField, ProviderPreset, ProviderQuirks, RetryPolicy, TimeoutConflict,
    TimeoutLimit, TimeoutOverrides, Timeouts, ToolChoiceSupport,
};
pub use scripted::{ScriptStep, ScriptedModel};
pub use sse::{SseEvent, SseParser};

/// How the model may use tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool.
    Function(String),
}

/// One request to a model.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Arc<Vec<ChatMessage>>,
    /// The tools of this turn (a registry snapshot).
    pub tools: Arc<[ToolDefinition]>,
    /// Tool choice; `None` leaves it out of the request.
    pub tool_choice: Option<ToolChoice>,
    /// Sampling temperature; `None` uses the client's default (0.2 when tools are present).
    pub temperature: Option<f32>,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// `parallel_tool_calls`: whether the model may call several tools in one answer; `None`
    /// leaves it out (the provider's default). Sent only with tools.
    pub parallel_tool_calls: Option<bool>,
    /// The argument limits of the registry the history's calls were checked with (the agent's
    /// registry sets them; [`JsonLimits::default`](crate::json::JsonLimits::default) otherwise):
    /// a call's arguments over them go as `"{}"`, as the agent recorded them
    /// ([`wire_arguments`](convert::wire_arguments)).
    pub argument_limits: crate::json::JsonLimits,
}

impl ChatRequest {
    /// A request with the messages and tools and every option left to the client.
    pub fn new(messages: Arc<Vec<ChatMessage>>, tools: Arc<[ToolDefinition]>) -> Self {
        ChatRequest {
            messages,
            tools,
            tool_choice: None,
            temperature: None,
            max_tokens: None,
            parallel_tool_calls: None,
            argument_limits: crate::json::JsonLimits::default(),
        }
    }
}

/// A whole model answer. Every field may be left out when deserialising (scripts for the
/// [`ScriptedModel`] are written as JSON by hand).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelResponse {
    /// Visible text.
    pub content: Option<String>,
    /// Reasoning text (DeepSeek, Grok).
    pub reasoning_content: Option<String>,
    /// Tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// The provider's finish reason (not trusted to say whether there are tool calls).
    pub finish_reason: Option<String>,
    /// Token usage, when reported.
    pub usage: Option<Usage>,
}

impl ModelResponse {
    /// A text-only answer (finish reason `stop`).
    pub fn text(content: impl Into<String>) -> Self {
        ModelResponse {
            content: Some(content.into()),
            finish_reason: Some("stop".into()),
            ..Default::default()
        }
    }

    /// An answer with these tool calls (finish reason `tool_calls`).
    pub fn with_tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        ModelResponse { tool_calls, finish_reason: Some("tool_calls".into()), ..Default::default() }
    }

    /// True when the answer has neither text (none, or `""`) nor tool calls: a reasoning-only
    /// answer cut off at the token limit, a `content_filter` stop, an empty `stop`. The runtime
    /// does not record such an answer, and the request builder never sends one back.
    pub fn is_empty(&self) -> bool {
        self.tool_calls.is_empty() && self.content.as_deref().is_none_or(str::is_empty)
    }

    /// The assistant message for the history.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            content: self.content.clone(),
            reasoning_content: self.reasoning_content.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// One event of a streamed answer. A stream ends with exactly one `Finished`.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// A piece of visible text.
    TextDelta(String),
    /// A piece of reasoning text.
    ReasoningDelta(String),
    /// A tool call began (its id and whole name are known: a name streamed in pieces is
    /// announced once its arguments start, another call starts or the stream ends).
    ToolCallStarted {
        /// Position of the call in the answer (0-based, normalised; a streamed call that is left
        /// out at the end, one that never had a `function`, leaves its position unused).
        index: usize,
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A piece of a call's arguments.
    ToolCallArgumentsDelta {
        /// Position of the call.
        index: usize,
        /// The piece.
        delta: String,
    },
    /// A call is complete.
    ToolCallFinished {
        /// Position of the call.
        index: usize,
        /// The assembled call.
        call: ToolCall,
    },
    /// Token usage.
    Usage(Usage),
    /// The answer is complete.
    Finished(ModelResponse),
}

impl ModelEvent {
    /// The events of a streamed answer for an answer that came whole (a provider that answered a
    /// streamed request with a JSON body): reasoning, text, then per call `ToolCallStarted`, its
    /// arguments in one piece and `ToolCallFinished`, then `Usage` (when reported) and `Finished`:
    /// the kinds of events a stream gives, each piece whole.
    pub fn for_whole_answer(response: ModelResponse) -> Vec<ModelEvent> {
        let mut out = Vec::with_capacity(3 + 3 * response.tool_calls.len());
        if let Some(r) = &response.reasoning_content {
            out.push(ModelEvent::ReasoningDelta(r.clone()));
        }
        if let Some(c) = &response.content {
            out.push(ModelEvent::TextDelta(c.clone()));
        }
        for (index, call) in response.tool_calls.iter().enumerate() {
            out.push(ModelEvent::ToolCallStarted { index, id: call.id.clone(), name: call.name.clone() });
            if !call.arguments.is_empty() {
                out.push(ModelEvent::ToolCallArgumentsDelta { index, delta: call.arguments.clone() });
            }
            out.push(ModelEvent::ToolCallFinished { index, call: call.clone() });
        }
        if let Some(u) = response.usage {
            out.push(ModelEvent::Usage(u));
        }
        out.push(ModelEvent::Finished(response));
        out
    }
}

/// A stream of model events.
pub type ModelEventStream = BoxStream<'static, Result<ModelEvent, AgentError>>;

/// A chat model. Dropping a returned future or stream cancels the request.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// One whole answer.
    ///
    /// # Errors
    /// A provider-layer error.
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError>;

    /// A streamed answer.
    ///
    /// # Errors
    /// A provider-layer error before the stream starts; errors after that come as stream items.
    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_empty_without_text_and_calls() {
        let reasoning_only = ModelResponse {
            reasoning_content: Some("thinking".into()),
            finish_reason: Some("length".into()),
            ..ModelResponse::default()
        };
        assert!(reasoning_only.is_empty());
        assert!(ModelResponse { content: Some(String::new()), ..ModelResponse::default() }.is_empty());
        assert!(!ModelResponse::text(" ").is_empty());
        assert!(!ModelResponse::with_tool_calls(vec![ToolCall::new("c", "t", "{}")]).is_empty());
    }
}
