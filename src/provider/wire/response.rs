//! The non-streaming response of `POST /chat/completions`, and the usage block shared with chunks.

use super::{null_as_default, WireArguments};
use serde::Deserialize;
use std::borrow::Cow;

/// The whole response body.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionResponse<'a> {
    /// The choices (only the first is used).
    #[serde(borrow, default, deserialize_with = "null_as_default")]
    pub choices: Vec<ResponseChoice<'a>>,
    /// Token usage.
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

/// One choice.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseChoice<'a> {
    /// The answer.
    #[serde(borrow, default)]
    pub message: Option<ResponseMessage<'a>>,
    /// Why the model stopped.
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
}

/// The assistant message of a choice.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseMessage<'a> {
    /// Visible text.
    #[serde(borrow, default)]
    pub content: Option<Cow<'a, str>>,
    /// Reasoning text (DeepSeek, Grok, Qwen thinking).
    #[serde(borrow, default)]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// Calls.
    #[serde(borrow, default, deserialize_with = "null_as_default")]
    pub tool_calls: Vec<ResponseToolCall<'a>>,
}

/// One call of a response.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseToolCall<'a> {
    /// Call id (some providers omit it; the parser makes one up then).
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    /// Name and arguments.
    #[serde(borrow, default)]
    pub function: Option<ResponseFunction<'a>>,
}

/// `function` of a response call.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFunction<'a> {
    /// Tool name.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// Arguments (string or object).
    #[serde(borrow, default)]
    pub arguments: Option<WireArguments<'a>>,
}

/// Token usage as providers report it (extra fields such as timings or costs are ignored).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub struct WireUsage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Total tokens.
    #[serde(default)]
    pub total_tokens: Option<u64>,
}

impl From<WireUsage> for crate::message::Usage {
    fn from(u: WireUsage) -> Self {
        let prompt = u.prompt_tokens.unwrap_or(0);
        let completion = u.completion_tokens.unwrap_or(0);
        crate::message::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: u.total_tokens.unwrap_or(prompt + completion),
        }
    }
}
