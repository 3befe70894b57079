//! OpenAI chat-completions wire types, one file per API group, kept apart from the domain types
//! (`ChatRequest`, `ModelResponse`, `ChatMessage`) and from the transport: nothing here needs
//! reqwest. Every optional field of a request is `skip_serializing_if`, so `null` or an unknown
//! field is never sent (compatible gateways reject them), but for an assistant message's
//! `content`, which is `null` beside tool calls (gateways reject a tool-call message without it). Response types are lenient: unknown
//! fields are ignored and every field a provider may omit is optional.

pub mod chunk;
pub mod content;
pub mod error;
mod lenient;
pub mod request;
pub mod response;

pub use chunk::{ChatCompletionChunk, ChunkChoice, ChunkDelta, ChunkFunction, ChunkToolCall};
pub use content::{ContentParts, WireContent};
pub use error::{ErrorBodyForm, ProviderErrorBody, ProviderErrorDetail};
pub use request::{
    ChatCompletionRequest, StreamOptions, ThinkingOff, WireFunction, WireFunctionCall, WireMessage, WireTool,
    WireToolCall, WireToolChoice, WireToolChoiceFunction,
};
pub use response::{
    ChatCompletionResponse, ResponseChoice, ResponseFunction, ResponseMessage, ResponseToolCall,
    WireBaseResp, WireUsage,
};

use crate::json::raw_compact;
use serde::de::{self, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A tool call's `arguments` as a provider sent it: normally a JSON string (kept as is), but some
/// gateways send the arguments as a JSON object (or array, number...). Those are kept as the text
/// the provider wrote, without the whitespace outside its strings, never rebuilt through a
/// `serde_json::Value`, so the registry reads what the model wrote either way: a key repeated in
/// one object is still `json_invalid`, a number keeps its digits, keys their order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireArguments<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for WireArguments<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?.get();
        let Some(text) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
            return raw_compact(raw)
                .map(|v| WireArguments(Cow::Owned(String::from(Box::<str>::from(v)))))
                .map_err(de::Error::custom);
        };
        if !text.contains('\\') {
            return Ok(WireArguments(Cow::Borrowed(text)));
        }
        serde_json::from_str::<String>(raw).map(|s| WireArguments(Cow::Owned(s))).map_err(de::Error::custom)
    }
}

/// Whether a choice whose `index` was read as `index` is choice 0, the one assembled: index 0, or
/// none (missing, or not read: see `lenient::index_or_none`) when no choice of its list has index 0
/// (`list_has_zero`). A gateway's odd index never wins over an explicit 0.
pub(crate) fn is_choice_zero(index: Option<u32>, list_has_zero: bool) -> bool {
    index.map_or(!list_has_zero, |i| i == 0)
}

/// Deserialises `null` as the type's default (providers send `"choices": null`, `"tool_calls": null`).
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

use serde::Deserialize as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Holder<'a> {
        #[serde(borrow)]
        arguments: Option<WireArguments<'a>>,
    }

    #[test]
    fn arguments_string_is_borrowed_when_unescaped() {
        let h: Holder<'_> = serde_json::from_str(r#"{"arguments":"{}"}"#).unwrap();
        assert!(matches!(h.arguments.unwrap().0, Cow::Borrowed("{}")));
        let h: Holder<'_> = serde_json::from_str(r#"{"arguments":"{\"a\":1}"}"#).unwrap();
        assert_eq!(h.arguments.unwrap().0, r#"{"a":1}"#);
    }

    #[test]
    fn arguments_object_is_kept_as_written_without_its_whitespace() {
        let h: Holder<'_> = serde_json::from_str(r#"{"arguments":{"city":"Paris","n":[1,2]}}"#).unwrap();
        assert_eq!(h.arguments.unwrap().0, r#"{"city":"Paris","n":[1,2]}"#);
        let h: Holder<'_> = serde_json::from_str(r#"{"arguments":null}"#).unwrap();
        assert!(h.arguments.is_none());
        // Not rebuilt: a repeated key stays (the registry refuses it), numbers keep their digits,
        // keys their order, strings their bytes.
        let h: Holder<'_> = serde_json::from_str(
            "{\"arguments\": { \"q\" : \"a b\\n\", \"z\":1.50,\n \"big\":123456789012345678901234567890, \"q\":\"DROP\"}}",
        )
        .unwrap();
        assert_eq!(
            h.arguments.unwrap().0,
            r#"{"q":"a b\n","z":1.50,"big":123456789012345678901234567890,"q":"DROP"}"#
        );
        for (value, want) in
            [("[1, 2e3]", "[1,2e3]"), ("-0.0", "-0.0"), ("true", "true"), (r#""\u0041""#, "A")]
        {
            let text = format!(r#"{{"arguments":{value}}}"#);
            let h: Holder<'_> = serde_json::from_str(&text).unwrap();
            assert_eq!(h.arguments.unwrap().0, want, "{value}");
        }
    }
}
