//! One streamed chunk (`chat.completion.chunk`): every field optional, strings borrowed from the
//! SSE payload when they hold no escapes (the hot path of stream assembly parses these typed, never
//! through `serde_json::Value`).

use super::{null_as_default, ProviderErrorDetail, WireArguments, WireUsage};
use serde::Deserialize;
use std::borrow::Cow;

/// One SSE payload.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChatCompletionChunk<'a> {
    /// Choices; empty on a usage-only chunk.
    #[serde(borrow, default, deserialize_with = "null_as_default")]
    pub choices: Vec<ChunkChoice<'a>>,
    /// Usage (a final chunk with `stream_options.include_usage`, or on the last choice chunk).
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// An error sent inside the stream.
    #[serde(default)]
    pub error: Option<ProviderErrorDetail>,
}

/// One choice of a chunk.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChunkChoice<'a> {
    /// Choice index (only choice 0 is assembled).
    #[serde(default)]
    pub index: Option<u32>,
    /// The delta.
    #[serde(borrow, default)]
    pub delta: Option<ChunkDelta<'a>>,
    /// Why the model stopped.
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
    /// Usage inside the choice (Moonshot).
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

/// What a chunk adds.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChunkDelta<'a> {
    /// Visible text.
    #[serde(borrow, default)]
    pub content: Option<Cow<'a, str>>,
    /// Reasoning text.
    #[serde(borrow, default)]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// Call fragments.
    #[serde(borrow, default, deserialize_with = "null_as_default")]
    pub tool_calls: Vec<ChunkToolCall<'a>>,
}

/// A fragment of one call.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChunkToolCall<'a> {
    /// Position of the call (missing with some providers, from 1 with others).
    #[serde(default)]
    pub index: Option<u32>,
    /// Call id (usually only on the first fragment; `""` on continuations with some providers).
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    /// Name and arguments fragment.
    #[serde(borrow, default)]
    pub function: Option<ChunkFunction<'a>>,
}

/// `function` of a fragment.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChunkFunction<'a> {
    /// Tool name (first fragment, sometimes late, `""` on continuations with some providers).
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// An arguments fragment, or the whole arguments (string or object).
    #[serde(borrow, default)]
    pub arguments: Option<WireArguments<'a>>,
}
