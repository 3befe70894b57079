//! An assistant message's `content` as providers send it, in a whole answer's `message` and in a
//! streamed `delta` alike: a string (the usual case), `null`, or an array of parts. Mistral's
//! reasoning models (Magistral, and its other models with reasoning on) answer
//! `[{"type":"thinking","thinking":[{"type":"text","text":"..."}]},{"type":"text","text":"..."}]`,
//! whole or one part per chunk; some gateways send `[{"type":"text","text":"..."}]`.
//!
//! The text parts are the answer's text, joined in order. The thinking parts (`thinking` a string
//! or an array of text parts) are its reasoning, kept where `reasoning_content` is kept, after
//! that field's text when a message has both. A part of another type (Mistral's `reference`, an
//! image...) is left out, and so is one without a `type` unless its `text` is a string (then it is
//! text), and one whose `text` or `thinking` is missing or `null`. A part that is not an object, a
//! text part whose `text` is another JSON value than a string, a thinking part whose `thinking`
//! is neither a string nor an array of parts, and a `content` of another JSON type (a number, an
//! object, a boolean) are errors: the payload or body is then refused with `provider_decode`, as
//! any value of the wrong type is.
//!
//! A string is read as before, borrowed from the payload when it holds no escapes, into the same
//! `Cow` (no allocation). The chunk read in place (`provider::chunk_read`) still reads `content`
//! as a string or `null` only, and leaves a payload with parts to the derived types: the usual
//! chunk pays nothing for the array form.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// `content` that is not `null` (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireContent<'a> {
    /// A string.
    Text(Cow<'a, str>),
    /// An array of parts, read into its text and its reasoning. Boxed: rare, and a chunk's delta
    /// stays as small as with a string (see [`wire::chunk`](super::chunk)).
    Parts(Box<ContentParts<'a>>),
}

/// What an array of parts holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentParts<'a> {
    /// The text parts, joined; `None` without any.
    pub text: Option<Cow<'a, str>>,
    /// The thinking parts, joined; `None` without any.
    pub thinking: Option<Cow<'a, str>>,
}

impl<'a> WireContent<'a> {
    /// The answer text and the reasoning of a message (or a delta) whose `content` is `content`
    /// and `reasoning_content` is `reasoning_content`: the reasoning is that field's text, then
    /// the thinking parts'. A string `content` and the field are passed through as they are.
    pub fn text_and_reasoning(
        content: Option<WireContent<'a>>,
        reasoning_content: Option<Cow<'a, str>>,
    ) -> (Option<Cow<'a, str>>, Option<Cow<'a, str>>) {
        match content {
            None => (None, reasoning_content),
            Some(WireContent::Text(text)) => (Some(text), reasoning_content),
            Some(WireContent::Parts(parts)) => {
                let ContentParts { text, thinking } = *parts;
                let mut reasoning = reasoning_content;
                if let Some(thinking) = thinking {
                    append(&mut reasoning, thinking);
                }
                (text, reasoning)
            }
        }
    }
}

/// Appends `piece` to `to` (a copy only when both hold text).
fn append<'a>(to: &mut Option<Cow<'a, str>>, piece: Cow<'a, str>) {
    match to {
        Some(text) if !text.is_empty() => {
            if !piece.is_empty() {
                text.to_mut().push_str(&piece);
            }
        }
        _ => *to = Some(piece),
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for WireContent<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        optional_content(d)?.ok_or_else(|| de::Error::invalid_type(de::Unexpected::Unit, &ContentVisitor))
    }
}

/// `content` that may be `null` (none), read in one `deserialize_any` (as an `Option` it would be
/// looked at twice).
pub(crate) fn optional_content<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<WireContent<'de>>, D::Error> {
    d.deserialize_any(ContentVisitor)
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Option<WireContent<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, null or an array of content parts")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(WireContent::Text(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(WireContent::Text(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(WireContent::Text(Cow::Owned(v))))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        read_parts(seq).map(|parts| Some(WireContent::Parts(Box::new(parts))))
    }
}

/// Reads an array of parts (each must be an object) into its text and its thinking.
fn read_parts<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<ContentParts<'de>, A::Error> {
    let mut parts = ContentParts::default();
    while let Some(part) = seq.next_element::<Part<'de>>()? {
        match part {
            Part::Text(text) => append(&mut parts.text, text),
            Part::Thinking(thinking) => append(&mut parts.thinking, thinking),
            Part::Other => {}
        }
    }
    Ok(parts)
}

/// One part, by what it adds.
enum Part<'a> {
    Text(Cow<'a, str>),
    Thinking(Cow<'a, str>),
    /// A part of another type, or one whose text is missing or `null`.
    Other,
}

impl<'de> Deserialize<'de> for Part<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PartVisitor)
    }
}

/// The fields of a part that are read; the others are skipped.
#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum PartField {
    Type,
    Text,
    Thinking,
    #[serde(other)]
    Other,
}

struct PartVisitor;

impl<'de> Visitor<'de> for PartVisitor {
    type Value = Part<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content part (an object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Part<'de>, A::Error> {
        // The type may come after the text: every field is read first, judged at the end.
        let (mut kind, mut text, mut thinking) = (None, None, None);
        while let Some(field) = map.next_key::<PartField>()? {
            match field {
                PartField::Type => kind = Some(map.next_value_seed(Loose::read(false))?),
                PartField::Text => text = Some(map.next_value_seed(Loose::read(false))?),
                PartField::Thinking => thinking = Some(map.next_value_seed(Loose::read(true))?),
                PartField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kind = match &kind {
            Some(Loose::Str(kind)) => Some(&**kind),
            // `"type": null` is no type; one of another JSON type names no part read here.
            Some(Loose::Null) | None => None,
            Some(_) => Some(""),
        };
        match (kind, text, thinking) {
            (Some("text") | None, Some(Loose::Str(text)), _) => Ok(Part::Text(text)),
            (Some("text"), Some(Loose::Null) | None, _) => Ok(Part::Other),
            (Some("text"), _, _) => {
                Err(de::Error::custom("a text content part whose `text` is not a string"))
            }
            (Some("thinking"), _, Some(Loose::Str(thinking))) => Ok(Part::Thinking(thinking)),
            (Some("thinking"), _, Some(Loose::Parts(parts))) => {
                // Mistral's `thinking` is an array of text parts.
                let ContentParts { text, thinking } = parts;
                let mut joined = text;
                if let Some(thinking) = thinking {
                    append(&mut joined, thinking);
                }
                Ok(joined.map_or(Part::Other, Part::Thinking))
            }
            (Some("thinking"), _, Some(Loose::Null) | None) => Ok(Part::Other),
            (Some("thinking"), _, _) => Err(de::Error::custom(
                "a thinking content part whose `thinking` is neither a string nor an array of parts",
            )),
            _ => Ok(Part::Other),
        }
    }
}

/// A field of a part, whatever its JSON type: a string is kept, and an array of parts where
/// one may stand (`thinking`); any other value is only told apart from `null`.
enum Loose<'a> {
    Str(Cow<'a, str>),
    Parts(ContentParts<'a>),
    Null,
    Other,
}

impl Loose<'_> {
    /// Reads one field; an array as parts when `parts`, else as any other value.
    fn read(parts: bool) -> LooseVisitor {
        LooseVisitor { parts }
    }
}

struct LooseVisitor {
    parts: bool,
}

impl<'de> de::DeserializeSeed<'de> for LooseVisitor {
    type Value = Loose<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Loose<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Loose<'de>, E> {
        Ok(Loose::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Loose<'de>, E> {
        Ok(Loose::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Loose<'de>, E> {
        Ok(Loose::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Loose<'de>, A::Error> {
        if self.parts {
            return read_parts(seq).map(Loose::Parts);
        }
        IgnoredAny::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Loose::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Loose<'de>, A::Error> {
        IgnoredAny::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Loose::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Loose<'de>, E> {
        Ok(Loose::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Loose<'de>, E> {
        Ok(Loose::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Loose<'de>, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Loose<'de>, E> {
        Ok(Loose::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Loose<'de>, E> {
        Ok(Loose::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Loose<'de>, E> {
        Ok(Loose::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Loose<'de>, E> {
        Ok(Loose::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Holder<'a> {
        #[serde(borrow, default, deserialize_with = "optional_content")]
        content: Option<WireContent<'a>>,
    }

    fn read(content: &str) -> Result<(Option<String>, Option<String>), serde_json::Error> {
        let json = format!(r#"{{"content":{content}}}"#);
        let h: Holder<'_> = serde_json::from_str(&json)?;
        let (text, reasoning) = WireContent::text_and_reasoning(h.content, None);
        Ok((text.map(Cow::into_owned), reasoning.map(Cow::into_owned)))
    }

    fn both(text: Option<&str>, reasoning: Option<&str>) -> (Option<String>, Option<String>) {
        (text.map(str::to_string), reasoning.map(str::to_string))
    }

    #[test]
    fn a_string_is_read_as_before_and_stays_as_small() {
        let h: Holder<'_> = serde_json::from_str(r#"{"content":"hi"}"#).unwrap();
        assert_eq!(h.content, Some(WireContent::Text(Cow::Borrowed("hi"))));
        assert_eq!(read(r#""a\"b""#).unwrap(), both(Some("a\"b"), None));
        assert_eq!(read("null").unwrap(), both(None, None));
        assert!(serde_json::from_str::<Holder<'_>>("{}").unwrap().content.is_none());
        // A chunk's delta holds it where it held an `Option<Cow<str>>` (see `wire::chunk`).
        assert_eq!(
            std::mem::size_of::<Option<WireContent<'_>>>(),
            std::mem::size_of::<Option<Cow<'_, str>>>()
        );
    }

    #[test]
    fn parts_are_split_into_text_and_thinking() {
        // Magistral's whole answer, and its streamed deltas.
        let magistral = r#"[{"type":"thinking","thinking":[{"type":"text","text":"The user wants "},{"type":"text","text":"READY."}],"closed":true},{"type":"text","text":"READ"},{"type":"text","text":"Y"}]"#;
        assert_eq!(read(magistral).unwrap(), both(Some("READY"), Some("The user wants READY.")));
        assert_eq!(
            read(r#"[{"type":"thinking","thinking":[{"type":"text","text":" by 2 is"}]}]"#).unwrap(),
            both(None, Some(" by 2 is"))
        );
        assert_eq!(read(r#"[{"type":"text","text":"2 + 2 = 4"}]"#).unwrap(), both(Some("2 + 2 = 4"), None));
        // `thinking` as a string; the type after the text; a part without a type.
        assert_eq!(
            read(r#"[{"thinking":"hmm","type":"thinking"},{"text":"a","type":"text"},{"text":"b"}]"#)
                .unwrap(),
            both(Some("ab"), Some("hmm"))
        );
        // Empty arrays, empty text, null fields: nothing.
        for nothing in [
            "[]",
            r#"[{"type":"thinking","thinking":[]}]"#,
            r#"[{"type":"text","text":null},{"type":"thinking","thinking":null},{"type":"text"}]"#,
        ] {
            assert_eq!(read(nothing).unwrap(), both(None, None), "{nothing}");
        }
        // A single text part is borrowed from the payload.
        let h: Holder<'_> = serde_json::from_str(r#"{"content":[{"type":"text","text":"x"}]}"#).unwrap();
        let (text, _) = WireContent::text_and_reasoning(h.content, None);
        assert!(matches!(text, Some(Cow::Borrowed("x"))));
    }

    #[test]
    fn parts_of_other_types_are_left_out() {
        let odd = r#"[{"type":"reference","reference_ids":[1,2]},{"type":"image_url","image_url":{"url":"u"}},
            {"type":"text","text":"kept"},{"type":"audio","text":7,"thinking":{"x":[null]}},{"type":5,"text":"no"},
            {"type":"thinking","thinking":[{"type":"reference","reference_ids":[3]},{"type":"text","text":"t"}]}]"#;
        assert_eq!(read(odd).unwrap(), both(Some("kept"), Some("t")));
    }

    #[test]
    fn thinking_parts_come_after_reasoning_content() {
        let parts = WireContent::Parts(Box::new(ContentParts { text: None, thinking: Some(" then".into()) }));
        let (_, reasoning) = WireContent::text_and_reasoning(Some(parts.clone()), Some("first".into()));
        assert_eq!(reasoning.as_deref(), Some("first then"));
        let (_, reasoning) = WireContent::text_and_reasoning(Some(parts), Some("".into()));
        assert_eq!(reasoning.as_deref(), Some(" then"));
        let (text, reasoning) =
            WireContent::text_and_reasoning(Some(WireContent::Text("t".into())), Some("r".into()));
        assert_eq!((text.as_deref(), reasoning.as_deref()), (Some("t"), Some("r")));
    }

    #[test]
    fn other_shapes_are_errors() {
        for bad in [
            "1",
            "true",
            r#"{"type":"text","text":"x"}"#,
            r#"["text"]"#,
            r#"[{"type":"text","text":"a"},null]"#,
            r#"[[{"type":"text","text":"a"}]]"#,
            r#"[{"type":"text","text":1}]"#,
            r#"[{"type":"text","text":["a"]}]"#,
            r#"[{"type":"thinking","thinking":{"text":"a"}}]"#,
            r#"[{"type":"thinking","thinking":["a"]}]"#,
            r#"[{"type":"text","text":"a"},]"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let e = read("42").unwrap_err().to_string();
        assert!(e.contains("a string, null or an array of content parts"), "{e}");
        let e = read(r#"["x"]"#).unwrap_err().to_string();
        assert!(e.contains("a content part (an object)"), "{e}");
    }
}
