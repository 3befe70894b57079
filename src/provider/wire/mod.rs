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

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A tool call's `arguments` as a provider sent it: normally a JSON string (kept as is), but some
/// gateways send the arguments as a JSON object (or array, number...). Those are serialised back
/// to compact JSON text, so the registry sees the same thing either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireArguments<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for WireArguments<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ArgsVisitor;
        impl<'de> Visitor<'de> for ArgsVisitor {
            type Value = WireArguments<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Owned(v)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let v: serde_json::Value =
                    serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(WireArguments(Cow::Owned(v.to_string())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let v: serde_json::Value =
                    serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(WireArguments(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(WireArguments(Cow::Owned(serde_json::Value::from(v).to_string())))
            }
        }
        d.deserialize_any(ArgsVisitor)
    }
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
    fn arguments_object_is_serialised_back_to_text() {
        let h: Holder<'_> = serde_json::from_str(r#"{"arguments":{"city":"Paris","n":[1,2]}}"#).unwrap();
        assert_eq!(h.arguments.unwrap().0, r#"{"city":"Paris","n":[1,2]}"#);
        let h: Holder<'_> = serde_json::from_str(r#"{"arguments":null}"#).unwrap();
        assert!(h.arguments.is_none());
    }
}
