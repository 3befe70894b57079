//! The non-streaming response of `POST /chat/completions`, and the usage block shared with chunks.
//!
//! `message.tool_calls` is read as the seed's `ResponseParser` reads it: anything but an array
//! (`null`, an object, a string...) is no calls, an entry that is not an object is left out, and a
//! `function` that is not an object is none (see `wire::lenient`); the runtime then
//! leaves out an entry without a `function` (see `convert::parse_response`).

use super::lenient::{object_or_none, objects_or_none};
use super::{null_as_default, WireArguments, WireContent};
use serde::Deserialize;
use std::borrow::Cow;

/// The whole response body.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionResponse<'a> {
    /// The choices (only choice 0 is used: see `is_choice_zero`, else
    /// the first).
    #[serde(borrow, default, deserialize_with = "null_as_default")]
    pub choices: Vec<ResponseChoice<'a>>,
    /// Token usage.
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// MiniMax's status block (`status_code` 0 on success): one with another code makes the body
    /// an error, choices or not (see [`ProviderErrorDetail::of_body`](super::ProviderErrorDetail::of_body)).
    /// Anything but an object is none.
    #[serde(default, deserialize_with = "object_or_none")]
    pub base_resp: Option<WireBaseResp>,
}

/// MiniMax's `base_resp`, only its `status_code` (a number or a number as text).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WireBaseResp {
    /// 0 on success.
    #[serde(default)]
    pub status_code: Option<serde_json::Value>,
}

impl WireBaseResp {
    /// Whether `status_code` says the request failed (it is there and other than 0).
    pub fn failed(&self) -> bool {
        self.status_code.as_ref().is_some_and(super::error::is_failure_code)
    }
}

/// Whether a `base_resp` says the request failed; anything but an object says nothing.
pub(crate) fn failed_base_resp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(object_or_none::<D, WireBaseResp>(d)?.is_some_and(|b| b.failed()))
}

/// One choice.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseChoice<'a> {
    /// Its index (several choices with `n` > 1; a gateway may list them in any order). A whole
    /// number or its text (`0.0`, `"1"`) is that integer; another value (`-1`, `1.5`) is none, as
    /// a missing one is.
    #[serde(default, deserialize_with = "super::lenient::index_or_none")]
    pub index: Option<u32>,
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
    /// Visible text: a string, or an array of parts (Mistral's reasoning models), whose thinking
    /// parts are reasoning too (see [`WireContent`]).
    #[serde(borrow, default, deserialize_with = "super::content::optional_content")]
    pub content: Option<WireContent<'a>>,
    /// Reasoning text (DeepSeek, Grok, Qwen thinking).
    #[serde(borrow, default)]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// Calls: the object entries of an array; anything else reads as no calls.
    #[serde(borrow, default, deserialize_with = "objects_or_none")]
    pub tool_calls: Vec<ResponseToolCall<'a>>,
    /// A legacy `function_call` object (the deprecated functions API) was there: a call the
    /// agent, which asks with `tools` and reads `tool_calls`, does not take.
    #[serde(rename = "function_call", default, deserialize_with = "super::lenient::is_object")]
    pub legacy_function_call: bool,
}

/// One call of a response.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseToolCall<'a> {
    /// Call id (some providers omit it; the parser makes one up then).
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    /// Name and arguments; `None` when missing or not an object.
    #[serde(borrow, default, deserialize_with = "object_or_none")]
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
///
/// A count that is not a whole number `>= 0` never fails the answer it comes with: OpenAI's o3
/// reported `"completion_tokens": -35` (async-openai issue #404), and gateways send floats or
/// strings. A negative count reads as 0, a fraction is cut off, a string of digits is read, any
/// other value is left out.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub struct WireUsage {
    /// Prompt tokens.
    #[serde(default, deserialize_with = "token_count")]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, deserialize_with = "token_count")]
    pub completion_tokens: Option<u64>,
    /// Total tokens.
    #[serde(default, deserialize_with = "token_count")]
    pub total_tokens: Option<u64>,
}

/// One count of a [`WireUsage`], read as its doc says.
fn token_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Count;
    impl<'de> Visitor<'de> for Count {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a token count")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(u64::try_from(v).unwrap_or(0)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // `as` saturates: a negative count is 0, a huge one u64::MAX.
            Ok(Some(v as u64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Count)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(Count)
}

impl From<WireUsage> for crate::message::Usage {
    fn from(u: WireUsage) -> Self {
        let prompt = u.prompt_tokens.unwrap_or(0);
        let completion = u.completion_tokens.unwrap_or(0);
        crate::message::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: u.total_tokens.unwrap_or(prompt.saturating_add(completion)),
        }
    }
}
