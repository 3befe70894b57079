//! One streamed chunk (`chat.completion.chunk`): every field optional, strings borrowed from the
//! SSE payload when they hold no escapes (the hot path of stream assembly parses these typed, never
//! through `serde_json::Value`).
//!
//! [`ChatCompletionChunk`] is the whole payload. The assembler's per-chunk path parses the
//! crate-private [`StreamChunk`] instead: the same fields read the same way, but the rare parts
//! (an error's details, a usage block inside a choice) are skipped or boxed, so the values built
//! and moved for every chunk stay small (the full layout made `memmove` ~9% of the assembly).

use super::{null_as_default, ProviderErrorDetail, WireArguments, WireUsage};
use serde::de::IgnoredAny;
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

/// The assembler's view of one payload: [`ChatCompletionChunk`] with the error's details skipped
/// (only whether an `error` field is present; the payload is then read again whole).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamChunk<'a> {
    /// As [`ChatCompletionChunk::choices`].
    #[serde(borrow, default, deserialize_with = "null_as_default")]
    pub choices: Vec<StreamChoice<'a>>,
    /// As [`ChatCompletionChunk::usage`].
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// Present (and not `null`) when the payload carries an error.
    #[serde(default)]
    pub error: Option<IgnoredAny>,
}

/// [`ChunkChoice`] with the rare usage block boxed.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamChoice<'a> {
    /// As [`ChunkChoice::index`].
    #[serde(default)]
    pub index: Option<u32>,
    /// As [`ChunkChoice::delta`].
    #[serde(borrow, default)]
    pub delta: Option<ChunkDelta<'a>>,
    /// As [`ChunkChoice::finish_reason`].
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
    /// As [`ChunkChoice::usage`].
    #[serde(default)]
    pub usage: Option<Box<WireUsage>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts read the same payloads alike (the error's details apart).
    #[test]
    fn the_stream_layout_reads_what_the_full_one_reads() {
        let payloads = [
            r#"{"id":"x","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"content":"a\"b","tool_calls":[{"index":1,"id":"c","type":"function","function":{"name":"n","arguments":"{\"k\":"}}]},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"r"},"finish_reason":"stop","usage":{"prompt_tokens":3,"completion_tokens":4}}],"usage":null}"#,
            r#"{"choices":null,"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#,
            r#"{"choices":[{"index":2,"delta":null},{"delta":{"tool_calls":null}}],"error":null}"#,
        ];
        for p in payloads {
            let full: ChatCompletionChunk<'_> = serde_json::from_str(p).unwrap();
            let lean: StreamChunk<'_> = serde_json::from_str(p).unwrap();
            assert!(lean.error.is_none());
            assert_eq!(format!("{:?}", full.usage), format!("{:?}", lean.usage), "{p}");
            assert_eq!(full.choices.len(), lean.choices.len());
            for (f, l) in full.choices.iter().zip(&lean.choices) {
                assert_eq!(f.index, l.index);
                assert_eq!(format!("{:?}", f.delta), format!("{:?}", l.delta));
                assert_eq!(f.finish_reason, l.finish_reason);
                assert_eq!(f.usage, l.usage.as_deref().copied());
            }
        }
        let lean: StreamChunk<'_> = serde_json::from_str(r#"{"error":{"message":"m"}}"#).unwrap();
        assert!(lean.error.is_some());
        // Shapes the full layout rejects, the stream layout rejects too.
        for bad in [
            r#"{"choices":{}}"#,
            r#"{"choices":[{"index":-1}]}"#,
            r#"{"usage":"x"}"#,
            r#"{"choices":[],"choices":[]}"#,
        ] {
            assert!(serde_json::from_str::<ChatCompletionChunk<'_>>(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<StreamChunk<'_>>(bad).is_err(), "{bad}");
        }
    }
}
