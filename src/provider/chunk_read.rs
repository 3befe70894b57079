//! The hot path of stream assembly: one chunk payload read by hand-written serde visitors
//! (`DeserializeSeed`s writing in place) into a [`ChunkRecord`] on the stack, instead of the derived
//! [`ChatCompletionChunk`](super::wire::ChatCompletionChunk) with its `Vec` of choices and `Vec` of
//! call fragments (two allocations per chunk) and its values moved into them.
//!
//! It reads a subset of what the derived types read, with the same leaf types (`Option<u32>`,
//! [`WireArguments`], [`WireUsage`]; strings are borrowed from the payload when they hold no
//! escapes), so whatever it reads, the derived parse reads as the same chunk. Everything else makes
//! it give up ([`read_chunk`] returns an error, whose text is not used): any JSON error, an `error`
//! that is not `null`, a repeated field (the derived parse rejects it), a struct written as an array
//! (which the derived parse accepts), a second choice 0, more than [`INLINE_FRAGMENTS`] call
//! fragments in one choice. The caller then parses the payload the derived way, which decides: the
//! same chunk, the same errors and the same error texts as before, and the assembler is only changed
//! once a payload was read whole.

use super::wire::{WireArguments, WireUsage};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Call fragments one choice may hold here; a choice with more is read the derived way.
pub(crate) const INLINE_FRAGMENTS: usize = 2;

/// What one payload adds: the chunk's `usage` and its choice 0.
#[derive(Debug, Default)]
pub(crate) struct ChunkRecord<'a> {
    pub usage: Option<WireUsage>,
    /// Choice 0 (a choice without `index` is choice 0); `None` when the chunk has none.
    pub choice: Option<ChoiceRecord<'a>>,
}

/// One choice, its delta flattened.
#[derive(Debug, Default)]
pub(crate) struct ChoiceRecord<'a> {
    pub index: Option<u32>,
    pub content: Option<Cow<'a, str>>,
    pub reasoning: Option<Cow<'a, str>>,
    pub fragments: [FragmentRecord<'a>; INLINE_FRAGMENTS],
    pub fragment_count: usize,
    pub finish_reason: Option<Cow<'a, str>>,
    pub usage: Option<WireUsage>,
}

/// One call fragment, its `function` flattened.
#[derive(Debug, Default)]
pub(crate) struct FragmentRecord<'a> {
    pub index: Option<u32>,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub arguments: Option<WireArguments<'a>>,
}

/// Reads `data` as one chunk, or gives up (see the module doc).
///
/// # Errors
/// Whenever the payload is not read here; the error's text means nothing.
pub(crate) fn read_chunk(data: &str) -> Result<ChunkRecord<'_>, serde_json::Error> {
    let mut record = ChunkRecord::default();
    let mut de = serde_json::Deserializer::from_str(data);
    de.deserialize_map(ChunkVisitor(&mut record))?;
    de.end()?;
    Ok(record)
}

fn give_up<E: de::Error>() -> E {
    E::custom("not read on the fast path")
}

/// Marks `bit` of `seen`; a field seen twice makes the parse give up (the derived one rejects it).
fn first_time<E: de::Error>(seen: &mut u8, bit: u8) -> Result<(), E> {
    if *seen & bit != 0 {
        return Err(give_up());
    }
    *seen |= bit;
    Ok(())
}

/// A key, borrowed when it holds no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_identifier(StrVisitor).map(Key)
    }
}

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// `Option<Cow<str>>` as the derived types read it (a string or `null`), borrowed when possible.
struct OptStr<'a>(Option<Cow<'a, str>>);

impl<'de> de::Deserialize<'de> for OptStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OptStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OptStr(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_str(StrVisitor).map(|s| OptStr(Some(s)))
            }
        }
        d.deserialize_option(V)
    }
}

/// A `null` or a value read by the seed `T`.
struct NullOr<T>(T);

impl<'de, T: DeserializeSeed<'de, Value = ()>> DeserializeSeed<'de> for NullOr<T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, T: DeserializeSeed<'de, Value = ()>> Visitor<'de> for NullOr<T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.deserialize(d)
    }
}

/// The payload's object: `choices`, `usage`, `error`; other fields skipped.
struct ChunkVisitor<'r, 'a>(&'r mut ChunkRecord<'a>);

impl<'de, 'r> Visitor<'de> for ChunkVisitor<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chunk object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "choices" => {
                    first_time(&mut seen, 1)?;
                    map.next_value_seed(NullOr(Choices(self.0)))?;
                }
                "usage" => {
                    first_time(&mut seen, 2)?;
                    self.0.usage = map.next_value()?;
                }
                "error" => {
                    first_time(&mut seen, 4)?;
                    // An error in the stream: the derived parse reads it and reports it.
                    if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                        return Err(give_up());
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `choices`: choice 0 is kept in the record, the others are read and dropped.
struct Choices<'r, 'a>(&'r mut ChunkRecord<'a>);

impl<'de, 'r> DeserializeSeed<'de> for Choices<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, 'r> Visitor<'de> for Choices<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            if self.0.choice.is_none() {
                let choice = self.0.choice.insert(ChoiceRecord::default());
                if seq.next_element_seed(ChoiceSeed(&mut *choice))?.is_none() {
                    self.0.choice = None;
                    return Ok(());
                }
                if choice.index.unwrap_or(0) != 0 {
                    self.0.choice = None;
                }
            } else {
                // Rare: another choice after choice 0 (n > 1).
                let mut other = ChoiceRecord::default();
                if seq.next_element_seed(ChoiceSeed(&mut other))?.is_none() {
                    return Ok(());
                }
                if other.index.unwrap_or(0) == 0 {
                    return Err(give_up());
                }
            }
        }
    }
}

/// One choice: `index`, `delta`, `finish_reason`, `usage`.
struct ChoiceSeed<'r, 'a>(&'r mut ChoiceRecord<'a>);

impl<'de, 'r> DeserializeSeed<'de> for ChoiceSeed<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'r> Visitor<'de> for ChoiceSeed<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a choice object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "index" => {
                    first_time(&mut seen, 1)?;
                    self.0.index = map.next_value()?;
                }
                "delta" => {
                    first_time(&mut seen, 2)?;
                    map.next_value_seed(NullOr(DeltaSeed(&mut *self.0)))?;
                }
                "finish_reason" => {
                    first_time(&mut seen, 4)?;
                    self.0.finish_reason = map.next_value::<OptStr<'de>>()?.0;
                }
                "usage" => {
                    first_time(&mut seen, 8)?;
                    self.0.usage = map.next_value()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A choice's `delta`: `content`, `reasoning_content`, `tool_calls`.
struct DeltaSeed<'r, 'a>(&'r mut ChoiceRecord<'a>);

impl<'de, 'r> DeserializeSeed<'de> for DeltaSeed<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'r> Visitor<'de> for DeltaSeed<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a delta object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "content" => {
                    first_time(&mut seen, 1)?;
                    self.0.content = map.next_value::<OptStr<'de>>()?.0;
                }
                "reasoning_content" => {
                    first_time(&mut seen, 2)?;
                    self.0.reasoning = map.next_value::<OptStr<'de>>()?.0;
                }
                "tool_calls" => {
                    first_time(&mut seen, 4)?;
                    map.next_value_seed(NullOr(Fragments(&mut *self.0)))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A delta's `tool_calls`, into the choice's inline fragments.
struct Fragments<'r, 'a>(&'r mut ChoiceRecord<'a>);

impl<'de, 'r> DeserializeSeed<'de> for Fragments<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, 'r> Visitor<'de> for Fragments<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let choice = self.0;
        loop {
            let seed = match choice.fragments.get_mut(choice.fragment_count) {
                Some(slot) => FragmentSeed(Some(slot)),
                None => FragmentSeed(None),
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            choice.fragment_count += 1;
        }
    }
}

/// One call fragment: `index`, `id`, `function`. Without a slot (the inline ones are taken) it
/// gives up.
struct FragmentSeed<'r, 'a>(Option<&'r mut FragmentRecord<'a>>);

impl<'de, 'r> DeserializeSeed<'de> for FragmentSeed<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.0 {
            Some(slot) => d.deserialize_map(FragmentVisitor(slot)),
            None => Err(give_up()),
        }
    }
}

struct FragmentVisitor<'r, 'a>(&'r mut FragmentRecord<'a>);

impl<'de, 'r> Visitor<'de> for FragmentVisitor<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a call fragment object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "index" => {
                    first_time(&mut seen, 1)?;
                    self.0.index = map.next_value()?;
                }
                "id" => {
                    first_time(&mut seen, 2)?;
                    self.0.id = map.next_value::<OptStr<'de>>()?.0;
                }
                "function" => {
                    first_time(&mut seen, 4)?;
                    map.next_value_seed(NullOr(FunctionSeed(&mut *self.0)))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A fragment's `function`: `name`, `arguments`.
struct FunctionSeed<'r, 'a>(&'r mut FragmentRecord<'a>);

impl<'de, 'r> DeserializeSeed<'de> for FunctionSeed<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'r> Visitor<'de> for FunctionSeed<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a function object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "name" => {
                    first_time(&mut seen, 1)?;
                    self.0.name = map.next_value::<OptStr<'de>>()?.0;
                }
                "arguments" => {
                    first_time(&mut seen, 2)?;
                    self.0.arguments = map.next_value()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast(payload: &str) -> ChunkRecord<'_> {
        read_chunk(payload).unwrap_or_else(|e| panic!("{payload}: not read on the fast path ({e})"))
    }

    #[test]
    fn the_usual_chunks_are_read_here() {
        let r = fast(
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":2,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"a\""}}]},"logprobs":null,"finish_reason":null}]}"#,
        );
        let c = r.choice.unwrap();
        assert_eq!((c.fragment_count, c.fragments[0].index), (1, Some(2)));
        assert_eq!(c.fragments[0].id.as_deref(), Some("call_1"));
        assert_eq!(c.fragments[0].name.as_deref(), Some("get"));
        assert_eq!(c.fragments[0].arguments.as_ref().map(|a| &*a.0), Some(r#"{"a""#));
        // Unescaped strings are borrowed from the payload.
        assert!(matches!(c.fragments[0].id, Some(Cow::Borrowed(_))));
        assert!(c.finish_reason.is_none() && c.content.is_none() && r.usage.is_none());

        let r = fast(
            r#"{"choices":[{"delta":{"content":"hi","reasoning_content":"r"},"finish_reason":"stop","usage":{"prompt_tokens":1}}],"usage":{"completion_tokens":2}}"#,
        );
        let c = r.choice.unwrap();
        assert_eq!((c.content.as_deref(), c.reasoning.as_deref()), (Some("hi"), Some("r")));
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!(c.usage.and_then(|u| u.prompt_tokens), Some(1));
        assert_eq!(r.usage.and_then(|u| u.completion_tokens), Some(2));
    }

    #[test]
    fn key_order_nulls_and_unknown_fields_are_read_here() {
        // `index` after `function`, `choices` after the usage, escaped keys, nulls everywhere the
        // derived types take them, unknown fields of every JSON type.
        let r = fast(
            r#" {"usage":null,"error":null,"x":[1,{"y":null}],"choices":[{"finish_reason":null,"delta":{"tool_calls":[{"function":{"arguments":{"k":[1,2]},"name":null},"extra":true,"id":null,"ind\u0065x":1}],"content":null},"usage":null,"index":null}]} "#,
        );
        let c = r.choice.unwrap();
        assert_eq!((c.fragment_count, c.fragments[0].index), (1, Some(1)));
        assert_eq!(c.fragments[0].arguments.as_ref().map(|a| &*a.0), Some(r#"{"k":[1,2]}"#));
        assert!(c.fragments[0].id.is_none() && c.fragments[0].name.is_none());
        for payload in [
            r#"{"choices":null}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":[{"delta":null}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":null}]}}]}"#,
            r#"{}"#,
        ] {
            let r = fast(payload);
            assert!(r.choice.map_or(0, |c| c.fragment_count) <= 1, "{payload}");
        }
    }

    #[test]
    fn other_choices_are_read_and_dropped() {
        let r = fast(
            r#"{"choices":[{"index":1,"delta":{"content":"one"}},{"delta":{"content":"zero"}},{"index":2,"delta":{"tool_calls":[{},{}]}}]}"#,
        );
        assert_eq!(r.choice.unwrap().content.as_deref(), Some("zero"));
        assert!(fast(r#"{"choices":[{"index":3,"delta":{"content":"three"}}]}"#).choice.is_none());
        let r = fast(r#"{"choices":[{"delta":{"tool_calls":[{"index":0},{"index":1}]}}]}"#);
        assert_eq!(r.choice.unwrap().fragment_count, INLINE_FRAGMENTS);
    }

    #[test]
    fn everything_else_is_left_to_the_derived_parse() {
        for payload in [
            // An error in the stream, whatever its place or shape.
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[{"delta":{"content":"x"}}],"error":"boom"}"#,
            // Repeated fields (the derived parse rejects them).
            r#"{"choices":[],"choices":[]}"#,
            r#"{"error":null,"error":null}"#,
            r#"{"choices":[{"index":0,"index":0}]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"a","name":"b"}}]}}]}"#,
            // Structs written as arrays (the derived parse reads them by position).
            r#"[[]]"#,
            r#"{"choices":[[0,{"content":"x"}]]}"#,
            r#"{"choices":[{"delta":[]}]}"#,
            // Two choices 0, more fragments than the inline ones.
            r#"{"choices":[{"delta":{}},{"index":0,"delta":{}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{},{},{}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{},{},{}]},"index":1}]}"#,
            // Bad types and bad JSON.
            r#"{"choices":{}}"#,
            r#"{"choices":[{"index":-1}]}"#,
            r#"{"choices":[{"delta":{"content":1}}]}"#,
            r#"{"usage":{"prompt_tokens":-1}}"#,
            r#"{"choices":[]} x"#,
            r#"{"choices":[{"del"#,
            "hello",
        ] {
            assert!(read_chunk(payload).is_err(), "{payload}");
        }
    }
}
