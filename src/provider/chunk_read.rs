//! The hot path of stream assembly: one chunk payload read by hand-written serde visitors
//! (`DeserializeSeed`s writing in place) into a [`ChunkRecord`] on the stack, instead of the derived
//! [`ChatCompletionChunk`](super::wire::ChatCompletionChunk) with its `Vec` of choices and `Vec` of
//! call fragments (two allocations per chunk) and its values moved into them.
//!
//! It reads a subset of what the derived types read, with the same leaf types (`Option<u32>`,
//! [`WireUsage`]; strings are borrowed from the payload when they hold no escapes; arguments that
//! are a string, as [`WireArguments`] reads one), so whatever it reads, the derived parse reads as
//! the same chunk (an index that is not a `u32` fails here, and the derived parse reads it as
//! none). Everything else makes
//! it give up ([`read_chunk`] returns an error, whose text is not used): any JSON error, an `error`
//! or a delta's legacy `function_call` that is not `null`, a `base_resp` that is not an object or whose `status_code` is not 0, a
//! repeated field (the derived parse rejects it), a struct written as an array (which the derived
//! parse accepts), `tool_calls`, a call fragment or a `function` of another JSON type than the usual
//! (which the derived parse reads leniently), arguments that are not a string or `null` (an
//! object, kept as written by the derived parse), a second choice 0, more than [`INLINE_FRAGMENTS`]
//! call fragments in one choice, a `content` that is not a string or `null` (an array of parts,
//! Mistral's reasoning models: see [`WireContent`](super::wire::WireContent)). The caller then
//! parses the payload the derived way, which decides: the same chunk, the same errors and the same
//! error texts as before, and the assembler is only changed once a payload was read whole.
//!
//! A `content` is read as a string or `null` here, as before: reading it as any JSON value (to take
//! an array of parts in place too) cost every text chunk ~60 more instructions (serde_json's
//! `deserialize_any` is not inlined), 1.4% more for a stream of text chunks (cachegrind); a stream
//! with parts is rare, and read the derived way at about twice the instructions per chunk.

use super::wire::{WireArguments, WireBaseResp, WireUsage};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Call fragments one choice may hold here: one, as providers stream calls; a delta with several
/// (Mistral sends whole calls together) is read the derived way. (Two made the .so 1 KB larger.)
pub(crate) const INLINE_FRAGMENTS: usize = 1;

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
    /// Whether the fragment had a `function` object (`name` and `arguments` may still be `None`).
    pub has_function: bool,
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
    Node::Chunk(&mut record).deserialize(&mut de)?;
    de.end()?;
    Ok(record)
}

fn give_up<E: de::Error>() -> E {
    E::custom("not read on the fast path")
}

/// A node of the payload that is read, and the record its fields go to. One visitor for all of
/// them: serde_json's object, array and `null` parsing is then instantiated once, not once per
/// level (a visitor per level, all inlined into one another, was ~7 KB more code for no more
/// speed).
enum Node<'r, 'a> {
    /// The payload's object: `choices`, `usage`, `error`.
    Chunk(&'r mut ChunkRecord<'a>),
    /// `choices`: choice 0 is kept in the record, the others are read and dropped.
    Choices(&'r mut ChunkRecord<'a>),
    /// One choice: `index`, `delta`, `finish_reason`, `usage`.
    Choice(&'r mut ChoiceRecord<'a>),
    /// A choice's `delta`: `content`, `reasoning_content`, `tool_calls`.
    Delta(&'r mut ChoiceRecord<'a>),
    /// A delta's `tool_calls`, into the choice's inline fragments.
    Fragments(&'r mut ChoiceRecord<'a>),
    /// One call fragment: `index`, `id`, `function`.
    Fragment(&'r mut FragmentRecord<'a>),
    /// A fragment's `function`: `name`, `arguments`.
    Function(&'r mut FragmentRecord<'a>),
}

/// What to do with one field's value.
enum Field<'r, 'a> {
    Str(&'r mut Option<Cow<'a, str>>),
    Index(&'r mut Option<u32>),
    Usage(&'r mut Option<WireUsage>),
    Arguments(&'r mut Option<WireArguments<'a>>),
    /// An object or array, or `null`.
    Node(Node<'r, 'a>),
    /// The chunk's `error`, a delta's legacy `function_call`: `null`, or the parse gives up (the
    /// derived one reports it).
    Error,
    /// MiniMax's `base_resp`: a status of 0 (or none), or the parse gives up (the derived one
    /// reports a failed one, and reads one that is not an object as none).
    BaseResp,
    Skip,
}

impl<'de, 'r> DeserializeSeed<'de> for Node<'r, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self {
            Node::Choices(_) | Node::Fragments(_) => d.deserialize_seq(self),
            _ => d.deserialize_map(self),
        }
    }
}

impl<'de, 'r> Visitor<'de> for Node<'r, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chunk")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if matches!(self, Node::Choices(_) | Node::Fragments(_)) {
            return Err(give_up());
        }
        if let Node::Function(f) = &mut self {
            f.has_function = true;
        }
        // One bit per known field: one seen twice makes the parse give up (the derived parse
        // rejects it). Other fields have no bit.
        let mut seen = 0u8;
        while let Some(Key(key)) = map.next_key()? {
            let (bit, field) = match (&mut self, &*key) {
                (Node::Chunk(r), "choices") => (1, Field::Node(Node::Choices(r))),
                (Node::Chunk(r), "usage") => (2, Field::Usage(&mut r.usage)),
                (Node::Chunk(_), "error") => (4, Field::Error),
                (Node::Chunk(_), "base_resp") => (8, Field::BaseResp),
                (Node::Choice(c), "index") => (1, Field::Index(&mut c.index)),
                (Node::Choice(c), "delta") => (2, Field::Node(Node::Delta(c))),
                (Node::Choice(c), "finish_reason") => (4, Field::Str(&mut c.finish_reason)),
                (Node::Choice(c), "usage") => (8, Field::Usage(&mut c.usage)),
                (Node::Delta(c), "content") => (1, Field::Str(&mut c.content)),
                (Node::Delta(c), "reasoning_content") => (2, Field::Str(&mut c.reasoning)),
                (Node::Delta(c), "tool_calls") => (4, Field::Node(Node::Fragments(c))),
                (Node::Delta(_), "function_call") => (8, Field::Error),
                (Node::Fragment(f), "index") => (1, Field::Index(&mut f.index)),
                (Node::Fragment(f), "id") => (2, Field::Str(&mut f.id)),
                (Node::Fragment(f), "function") => (4, Field::Node(Node::Function(f))),
                (Node::Function(f), "name") => (1, Field::Str(&mut f.name)),
                (Node::Function(f), "arguments") => (2, Field::Arguments(&mut f.arguments)),
                _ => (0, Field::Skip),
            };
            if seen & bit != 0 {
                return Err(give_up());
            }
            seen |= bit;
            match field {
                Field::Str(to) => *to = map.next_value::<OptStr<'de>>()?.0,
                Field::Index(to) => *to = map.next_value()?,
                Field::Usage(to) => *to = map.next_value()?,
                // A string (or `null`) is read as `WireArguments` reads it, by a visitor: the
                // `RawValue` that type goes through to keep an object's text as written, and a
                // second parse of a string with escapes, cost the assembly ~10% (BENCHMARKS.md,
                // "Session 21"). Arguments of another JSON type make the parse give up.
                Field::Arguments(to) => *to = map.next_value::<OptStr<'de>>()?.0.map(WireArguments),
                Field::Node(node) => map.next_value_seed(NullOr(node))?,
                Field::Error => {
                    if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                        return Err(give_up());
                    }
                }
                Field::BaseResp => {
                    if map.next_value::<Option<WireBaseResp>>()?.is_some_and(|b| b.failed()) {
                        return Err(give_up());
                    }
                }
                Field::Skip => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self {
            Node::Choices(record) => {
                // Another choice after choice 0 (n > 1, rare) is read into `other`.
                let mut other = None;
                loop {
                    let had_choice = record.choice.is_some();
                    let slot = if had_choice { &mut other } else { &mut record.choice };
                    let choice = slot.insert(ChoiceRecord::default());
                    let read = seq.next_element_seed(Node::Choice(&mut *choice))?.is_some();
                    let is_zero = choice.index.unwrap_or(0) == 0;
                    if !read || !is_zero {
                        *slot = None;
                    } else if had_choice {
                        // A second choice 0.
                        return Err(give_up());
                    }
                    if !read {
                        return Ok(());
                    }
                }
            }
            Node::Fragments(choice) => loop {
                // No inline slot left: the parse gives up.
                let Some(slot) = choice.fragments.get_mut(choice.fragment_count) else {
                    return match seq.next_element::<IgnoredAny>()? {
                        Some(_) => Err(give_up()),
                        None => Ok(()),
                    };
                };
                if seq.next_element_seed(Node::Fragment(slot))?.is_none() {
                    return Ok(());
                }
                choice.fragment_count += 1;
            },
            _ => Err(give_up()),
        }
    }
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
        assert!(c.fragments[0].has_function);
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
            r#" {"usage":null,"error":null,"x":[1,{"y":null}],"choices":[{"finish_reason":null,"delta":{"tool_calls":[{"function":{"arguments":"{\"k\":[1,2]}","name":null},"extra":true,"id":null,"ind\u0065x":1}],"content":null},"usage":null,"index":null}]} "#,
        );
        let c = r.choice.unwrap();
        assert_eq!((c.fragment_count, c.fragments[0].index), (1, Some(1)));
        assert_eq!(c.fragments[0].arguments.as_ref().map(|a| &*a.0), Some(r#"{"k":[1,2]}"#));
        assert!(c.fragments[0].id.is_none() && c.fragments[0].name.is_none());
        // A `function` object marks the fragment, even an empty one; `null` or none does not.
        for (function, has) in [(r#","function":{}"#, true), (r#","function":null"#, false), ("", false)] {
            let payload =
                format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":0{function}}}]}}}}]}}"#);
            let c = fast(&payload).choice.unwrap();
            assert_eq!((c.fragment_count, c.fragments[0].has_function), (1, has), "{payload}");
        }
        for payload in [
            r#"{"choices":null}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":[{"delta":null}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":null}]}}]}"#,
            r#"{}"#,
            // MiniMax's status of success (on its last chunk), or none.
            r#"{"choices":[],"base_resp":{"status_code":0,"status_msg":""}}"#,
            r#"{"choices":[],"base_resp":{"status_code":"0"}}"#,
            r#"{"choices":[],"base_resp":null}"#,
        ] {
            let r = fast(payload);
            assert!(r.choice.map_or(0, |c| c.fragment_count) <= 1, "{payload}");
        }
    }

    #[test]
    fn other_choices_are_read_and_dropped() {
        let r = fast(
            r#"{"choices":[{"index":1,"delta":{"content":"one"}},{"delta":{"content":"zero"}},{"index":2,"delta":{"tool_calls":[{}]}}]}"#,
        );
        assert_eq!(r.choice.unwrap().content.as_deref(), Some("zero"));
        assert!(fast(r#"{"choices":[{"index":3,"delta":{"content":"three"}}]}"#).choice.is_none());
        let r = fast(r#"{"choices":[{"delta":{"tool_calls":[{"index":1}]}}]}"#);
        assert_eq!(r.choice.unwrap().fragment_count, INLINE_FRAGMENTS);
    }

    #[test]
    fn everything_else_is_left_to_the_derived_parse() {
        for payload in [
            // An error in the stream, whatever its place or shape.
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[{"delta":{"content":"x"}}],"error":"boom"}"#,
            // MiniMax's failed status (beside choices too), or one that is not an object.
            r#"{"choices":[{"delta":{"content":"x"}}],"base_resp":{"status_code":1027}}"#,
            r#"{"base_resp":{"status_code":"1002","status_msg":"rate limit"}}"#,
            r#"{"choices":[],"base_resp":"odd"}"#,
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
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0},{"index":1}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{},{},{}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{},{},{}]},"index":1}]}"#,
            // Call fragments of odd shapes (the derived parse reads them leniently).
            r#"{"choices":[{"delta":{"tool_calls":{}}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":"none"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[null]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":"f"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":["f"]}]}}]}"#,
            // Arguments that are not a string (the derived parse keeps their text as written).
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":{"k":[1,2]}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":[1]}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":7}}]}}]}"#,
            // Bad types and bad JSON.
            r#"{"choices":{}}"#,
            r#"{"choices":[{"index":-1}]}"#,
            r#"{"choices":[{"delta":{"content":1}}]}"#,
            r#"{"choices":[{"delta":{"content":{"type":"text","text":"x"}}}]}"#,
            // Content as parts (the derived parse reads it, or reports a bad part).
            r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm"}]}]}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"2 + 2 = 4"}]}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":2}]}}]}"#,
            r#"{"usage":{"prompt_tokens":1e999}}"#,
            r#"{"choices":[]} x"#,
            r#"{"choices":[{"del"#,
            "hello",
        ] {
            assert!(read_chunk(payload).is_err(), "{payload}");
        }
    }
}
