//! One streamed chunk (`chat.completion.chunk`): every field optional, strings borrowed from the
//! SSE payload when they hold no escapes (the hot path of stream assembly parses these typed, never
//! through `serde_json::Value`).
//!
//! `tool_calls` and each fragment's `function` are read leniently, as in a whole answer (see
//! `wire::lenient`): `tool_calls` that is not an array holds no fragment, an entry
//! that is not an object is left out, and a `function` that is not an object is none.
//!
//! The rare parts (an error's details, a usage block inside a choice) are boxed: a chunk and a
//! choice stay small values (88 and 120 bytes), which the parse builds and moves for every chunk
//! without a `memmove` call (with them inline, at 168 and 152 bytes, `memmove` was ~9% of the
//! assembly's time).

use super::lenient::{object_or_none, objects_or_none};
use super::{null_as_default, ProviderErrorDetail, WireArguments, WireContent, WireUsage};
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
    /// An error sent inside the stream (`"error": false` is none; `"error": true` one whose
    /// details are beside the flag, read by [`ProviderErrorDetail::of_body`]).
    #[serde(default, deserialize_with = "super::error::error_field")]
    pub error: Option<Box<ProviderErrorDetail>>,
    /// MiniMax's `base_resp` says the request failed (a `status_code` other than 0): the payload
    /// is the stream's error, choices or not (see [`wire::error`](super::error)). A `base_resp`
    /// that is not an object says nothing.
    #[serde(rename = "base_resp", default, deserialize_with = "super::response::failed_base_resp")]
    pub failed_base_resp: bool,
}

/// One choice of a chunk.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChunkChoice<'a> {
    /// Choice index (only choice 0 is assembled: see `is_choice_zero`).
    /// A whole number or its text (`0.0`, `"1"`) is that integer, another value (`-1`, `1.5`) none, as in a whole answer.
    #[serde(default, deserialize_with = "super::lenient::index_or_none")]
    pub index: Option<u32>,
    /// The delta.
    #[serde(borrow, default)]
    pub delta: Option<ChunkDelta<'a>>,
    /// Why the model stopped.
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
    /// Usage inside the choice (Moonshot).
    #[serde(default)]
    pub usage: Option<Box<WireUsage>>,
}

/// What a chunk adds.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChunkDelta<'a> {
    /// Visible text: a string, or an array of parts (Mistral's reasoning models), whose thinking
    /// parts are reasoning too (see [`WireContent`]).
    #[serde(borrow, default, deserialize_with = "super::content::optional_content")]
    pub content: Option<WireContent<'a>>,
    /// Reasoning text.
    #[serde(borrow, default)]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// Call fragments: the object entries of an array; anything else reads as none.
    #[serde(borrow, default, deserialize_with = "objects_or_none")]
    pub tool_calls: Vec<ChunkToolCall<'a>>,
    /// A fragment of a legacy `function_call` object (the deprecated functions API) was there
    /// (see [`ResponseMessage`](super::ResponseMessage)).
    #[serde(rename = "function_call", default, deserialize_with = "super::lenient::is_object")]
    pub legacy_function_call: bool,
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
    /// Name and arguments fragment; `None` when missing or not an object.
    #[serde(borrow, default, deserialize_with = "object_or_none")]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Per chunk the parse builds and moves these values: above 128 bytes each move becomes a
    /// `memmove` call (see the module doc).
    #[test]
    fn per_chunk_values_stay_small() {
        assert!(std::mem::size_of::<ChatCompletionChunk<'_>>() <= 128);
        assert!(std::mem::size_of::<ChunkChoice<'_>>() <= 128);
        assert!(std::mem::size_of::<ChunkToolCall<'_>>() <= 128);
    }

    #[test]
    fn boxed_parts_read_as_before() {
        let c: ChatCompletionChunk<'_> = serde_json::from_str(
            r#"{"choices":[{"delta":{},"usage":{"prompt_tokens":3,"completion_tokens":4}}],"error":{"code":1214,"message":"bad"}}"#,
        )
        .unwrap();
        assert_eq!(c.choices[0].usage.as_deref().and_then(|u| u.completion_tokens), Some(4));
        assert_eq!(c.error.as_deref().map(ProviderErrorDetail::describe).as_deref(), Some("[1214] bad"));
        let c: ChatCompletionChunk<'_> =
            serde_json::from_str(r#"{"choices":[{"usage":null}],"error":null}"#).unwrap();
        assert!(c.choices[0].usage.is_none() && c.error.is_none());
    }
}
