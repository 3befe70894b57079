//! The request body of each round, without re-serialising or copying the whole history.
//!
//! The last body is kept in one buffer: the part before the first message
//! (`{"model":…,"messages":[`), every message's wire JSON joined by commas (a message that is not
//! sent, an answer with neither text nor calls, has an empty entry and no comma), then the rest of
//! the request. Each message's JSON is kept with a key of the message it was serialised from (its
//! fields' bytes, one after the other in one arena), so a round checks the history by comparing
//! bytes (exact: no hash, no collisions) and serialises only the messages that are new or changed.
//! When the history only grew, the buffer is cut after the last message and the new messages and
//! the rest are appended in place; the body handed to the HTTP client is a shared view of that
//! buffer ([`Bytes`], no copy). A message that changed (a rewrite, trimming, repair, another
//! session on the same client) and every later position is written again (unchanged later messages
//! from their kept JSON); a body still held elsewhere (a retry, a request in flight) is never
//! written to: the buffer is copied first. The body is byte for byte what serialising the whole
//! request gives (tested).

use super::config::ProviderQuirks;
use super::convert::{sends_reasoning, to_wire_request, turn_start, wire_envelope, wire_message};
use super::ChatRequest;
use crate::message::ChatMessage;
use bytes::Bytes;
use std::sync::{Arc, Mutex};

/// One cached message: where its JSON lies in the buffer and where the key it was serialised
/// from lies in the key arena.
struct Entry {
    start: usize,
    end: usize,
    key_start: usize,
    key_end: usize,
}

/// The key of `message`: every field [`wire_message`] reads, each string as its length and bytes,
/// and whether its reasoning is sent, in this order. Equal keys serialise to equal JSON. One
/// description for both uses: [`KeyWriter`] appends the key, [`KeyReader`] compares a stored key
/// with a message in place (false at the first difference).
fn visit_key(v: &mut impl KeyVisitor, message: &ChatMessage, with_reasoning: bool) -> bool {
    v.byte(u8::from(with_reasoning))
        && match message {
            ChatMessage::System { content } => v.byte(0) && v.text(content),
            ChatMessage::User { content } => v.byte(1) && v.text(content),
            ChatMessage::Assistant { content, reasoning_content, tool_calls } => {
                v.byte(2)
                    && v.optional(content.as_deref())
                    && v.optional(reasoning_content.as_deref())
                    && v.len(tool_calls.len())
                    && tool_calls.iter().all(|c| v.text(&c.id) && v.text(&c.name) && v.text(&c.arguments))
            }
            ChatMessage::Tool { tool_call_id, name, content, is_error } => {
                v.byte(3)
                    && v.text(tool_call_id)
                    && v.text(name)
                    && v.text(content)
                    && v.byte(u8::from(*is_error))
            }
        }
}

/// The parts of a key, in [`visit_key`]'s order; each answers whether it matched (a writer always
/// does).
trait KeyVisitor {
    fn byte(&mut self, b: u8) -> bool;
    fn len(&mut self, n: usize) -> bool;
    fn text(&mut self, s: &str) -> bool;
    fn optional(&mut self, s: Option<&str>) -> bool {
        self.byte(u8::from(s.is_some())) && self.text(s.unwrap_or(""))
    }
}

/// Appends a key to the key arena.
struct KeyWriter<'a>(&'a mut Vec<u8>);

impl KeyVisitor for KeyWriter<'_> {
    fn byte(&mut self, b: u8) -> bool {
        self.0.push(b);
        true
    }

    fn len(&mut self, n: usize) -> bool {
        self.0.extend_from_slice(&n.to_ne_bytes());
        true
    }

    fn text(&mut self, s: &str) -> bool {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
        true
    }
}

/// Appends the key of `message` (see [`visit_key`]).
fn write_key(keys: &mut Vec<u8>, message: &ChatMessage, with_reasoning: bool) {
    visit_key(&mut KeyWriter(keys), message, with_reasoning);
}

/// Reads a key back, comparing it with a message as it goes.
struct KeyReader<'a> {
    key: &'a [u8],
    at: usize,
}

impl KeyVisitor for KeyReader<'_> {
    fn byte(&mut self, b: u8) -> bool {
        let ok = self.key.get(self.at) == Some(&b);
        self.at += 1;
        ok
    }

    fn len(&mut self, n: usize) -> bool {
        let ok = word(self.key, self.at) == Some(n.to_ne_bytes());
        self.at += size_of::<usize>();
        ok
    }

    fn text(&mut self, s: &str) -> bool {
        if !self.len(s.len()) {
            return false;
        }
        let ok = self.key.get(self.at..self.at + s.len()).is_some_and(|k| same_bytes(k, s.as_bytes()));
        self.at += s.len();
        ok
    }
}

/// The `usize`-sized word at `at`.
#[inline]
fn word(bytes: &[u8], at: usize) -> Option<[u8; size_of::<usize>()]> {
    bytes.get(at..at + size_of::<usize>())?.try_into().ok()
}

/// `a == b` for two slices of the same length, without a call for short ones. A round compares a
/// few strings per message of the history, most of them short (ids, names), and a `memcmp` call
/// per string cost more than the bytes it compared.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0..8 => a.iter().zip(b).all(|(x, y)| x == y),
        8..=32 => {
            // Words at 0, 8, 16 and the last one (which may overlap the one before).
            let mut at = 0;
            while at + 8 < n {
                if word8(a, at) != word8(b, at) {
                    return false;
                }
                at += 8;
            }
            word8(a, n - 8) == word8(b, n - 8)
        }
        _ => a == b,
    }
}

#[inline]
fn word8(bytes: &[u8], at: usize) -> Option<[u8; 8]> {
    bytes.get(at..at + 8)?.try_into().ok()
}

/// Whether `key` is the key [`write_key`] writes for `message` (the same bytes, read back without
/// writing them: the key arena is read in order, the message where it lies).
fn key_matches(key: &[u8], message: &ChatMessage, with_reasoning: bool) -> bool {
    let mut r = KeyReader { key, at: 0 };
    visit_key(&mut r, message, with_reasoning) && r.at == key.len()
}

/// The last body and what it was built from.
#[derive(Default)]
struct Cached {
    /// The last body. Shared with the [`Bytes`] handed out; written only when no one else holds it.
    buf: Arc<Vec<u8>>,
    /// Length of the part before the first message.
    head: usize,
    /// End of the last message's JSON (the rest of the request follows).
    messages_end: usize,
    /// One per message of the last body, in order.
    entries: Vec<Entry>,
    /// The keys of the entries' messages, one after the other (see [`write_key`]).
    keys: Vec<u8>,
    /// The argument limits the entries were written with ([`ChatRequest::argument_limits`]).
    limits: crate::json::JsonLimits,
    /// The names of the tools the entries were written with: a call of a name model APIs refuse
    /// goes by a stand-in free of them ([`wire_message`]).
    tool_names: Vec<String>,
}

/// The owner behind a body's [`Bytes`]: keeps the buffer alive and unwritable while it is held.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Per-client cache of the request body, by message position.
#[derive(Default)]
pub(crate) struct BodyCache {
    // A std Mutex: held while the body is assembled (no await inside).
    cached: Mutex<Cached>,
}

impl BodyCache {
    /// The JSON body of `request` (what `serde_json::to_vec(&to_wire_request(..))` gives).
    pub(crate) fn body(
        &self,
        request: &ChatRequest,
        model: &str,
        quirks: &ProviderQuirks,
        stream: bool,
    ) -> serde_json::Result<Bytes> {
        let rest = serde_json::to_vec(&wire_envelope(request, model, quirks, stream))?;
        // `model` comes first and is a JSON string, so the first `"messages":[]` is the field.
        let needle = br#""messages":[]"#;
        let Some(at) = memchr::memmem::find(&rest, needle).map(|i| i + needle.len() - 1) else {
            // Not the expected shape: serialise the whole request.
            return serde_json::to_vec(&to_wire_request(request, model, quirks, stream)).map(Bytes::from);
        };
        let (head, tail) = rest.split_at(at);
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        let result = fill(&mut cached, request, head, tail, quirks);
        if result.is_err() {
            // The buffer may be half written: start over next time.
            *cached = Cached::default();
        }
        result
    }
}

/// Brings `c` up to date with `messages` and returns the body.
fn fill(
    c: &mut Cached,
    request: &ChatRequest,
    head: &[u8],
    tail: &[u8],
    quirks: &ProviderQuirks,
) -> serde_json::Result<Bytes> {
    let (messages, limits) = (&request.messages[..], &request.argument_limits);
    let same_tools = c.tool_names.iter().eq(request.tools.iter().map(|t| &t.name));
    if c.buf.get(..c.head) != Some(head) || c.limits != *limits || !same_tools {
        // Another model name, other argument limits or other tools (or a first call): nothing
        // kept applies.
        c.limits = *limits;
        if !same_tools {
            c.tool_names = request.tools.iter().map(|t| t.name.clone()).collect();
        }
        let buf = Arc::make_mut(&mut c.buf);
        buf.clear();
        buf.extend_from_slice(head);
        c.head = head.len();
        c.messages_end = head.len();
        c.entries.clear();
        c.keys.clear();
    }
    let turn = turn_start(messages);
    let keys = &c.keys;
    let first_stale = messages
        .iter()
        .zip(&c.entries)
        .enumerate()
        .position(|(i, (m, e))| {
            !key_matches(&keys[e.key_start..e.key_end], m, sends_reasoning(quirks, m, i, turn))
        })
        .unwrap_or(messages.len().min(c.entries.len()));
    // Copies the buffer first if a body handed out earlier is still held.
    let buf = Arc::make_mut(&mut c.buf);
    let stale = c.entries.split_off(first_stale);
    // Later messages may be unchanged (one message rewritten in the middle): their JSON and keys
    // are kept aside before the buffer and the arena are cut.
    let (kept, kept_keys, base, key_base) = match stale.first() {
        Some(e) => {
            (buf[e.start..c.messages_end].to_vec(), c.keys[e.key_start..].to_vec(), e.start, e.key_start)
        }
        None => (Vec::new(), Vec::new(), 0, 0),
    };
    buf.truncate(c.entries.last().map_or(c.head, |e| e.end));
    c.keys.truncate(c.entries.last().map_or(0, |e| e.key_end));
    let mut stale = stale.into_iter();
    for (i, m) in messages.iter().enumerate().skip(first_stale) {
        let with_reasoning = sends_reasoning(quirks, m, i, turn);
        // A message that is not sent (an empty answer) has an empty entry: a comma goes before a
        // message only when one was written before it.
        let comma = buf.len() > c.head;
        let key_start = c.keys.len();
        match stale.next() {
            Some(e)
                if key_matches(
                    &kept_keys[e.key_start - key_base..e.key_end - key_base],
                    m,
                    with_reasoning,
                ) =>
            {
                if comma && e.end > e.start {
                    buf.push(b',');
                }
                let start = buf.len();
                buf.extend_from_slice(&kept[e.start - base..e.end - base]);
                c.keys.extend_from_slice(&kept_keys[e.key_start - key_base..e.key_end - key_base]);
                c.entries.push(Entry { start, end: buf.len(), key_start, key_end: c.keys.len() });
            }
            _ => {
                let wire = wire_message(m, with_reasoning, quirks, limits, &request.tools);
                if comma && wire.is_some() {
                    buf.push(b',');
                }
                let start = buf.len();
                if let Some(wire) = wire {
                    serde_json::to_writer(&mut *buf, &wire)?;
                }
                write_key(&mut c.keys, m, with_reasoning);
                c.entries.push(Entry { start, end: buf.len(), key_start, key_end: c.keys.len() });
            }
        }
    }
    c.messages_end = buf.len();
    buf.extend_from_slice(tail);
    Ok(Bytes::from_owner(Shared(Arc::clone(&c.buf))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use crate::provider::config::ProviderPreset;
    use crate::tool::ToolDefinition;
    use std::sync::Arc;

    fn whole(request: &ChatRequest, quirks: &ProviderQuirks) -> Vec<u8> {
        serde_json::to_vec(&to_wire_request(request, "m\"odel", quirks, true)).unwrap()
    }

    fn request(messages: Vec<ChatMessage>) -> ChatRequest {
        let tools: Arc<[ToolDefinition]> =
            vec![ToolDefinition::new("t", "d", serde_json::json!({"type":"object"}))].into();
        ChatRequest::new(Arc::new(messages), tools)
    }

    fn assistant(i: usize, reasoning: &str) -> ChatMessage {
        ChatMessage::Assistant {
            content: None,
            reasoning_content: Some(reasoning.into()),
            tool_calls: vec![ToolCall::new(
                format!("c{i}"),
                "t",
                format!("{{\"i\":{i},\"s\":\"\\\"q\\\"\"}}"),
            )],
        }
    }

    fn tool(i: usize, content: &str) -> ChatMessage {
        ChatMessage::Tool {
            tool_call_id: format!("c{i}"),
            name: "t".into(),
            content: content.into(),
            is_error: false,
        }
    }

    #[test]
    fn bodies_equal_whole_serialisation_as_the_history_grows_changes_and_shrinks() {
        for preset in [ProviderPreset::OpenAi, ProviderPreset::DeepSeek] {
            let quirks = preset.quirks();
            let cache = BodyCache::default();
            let mut history = vec![ChatMessage::system("sys"), ChatMessage::user("订单 \"20261010\"\n")];
            for i in 0..6 {
                history.push(assistant(i, &format!("think {i}")));
                history.push(tool(i, "ok"));
                let r = request(history.clone());
                assert_eq!(cache.body(&r, "m\"odel", &quirks, true).unwrap(), whole(&r, &quirks));
                if i == 3 {
                    // A new user turn changes which reasoning is sent back (DeepSeek).
                    history.push(ChatMessage::user("next"));
                }
            }
            // A message changed in place (repair, trimming) is serialised again.
            history[3] = tool(0, "changed");
            let r = request(history.clone());
            assert_eq!(cache.body(&r, "m\"odel", &quirks, true).unwrap(), whole(&r, &quirks));
            // A shorter, different history (another session on the same client).
            let other = request(vec![ChatMessage::user("hi")]);
            assert_eq!(
                cache.body(&other, "m\"odel", &quirks, false).unwrap(),
                whole_nostream(&other, &quirks)
            );
            let r = request(history);
            assert_eq!(cache.body(&r, "m\"odel", &quirks, true).unwrap(), whole(&r, &quirks));
        }
    }

    fn whole_nostream(request: &ChatRequest, quirks: &ProviderQuirks) -> Vec<u8> {
        serde_json::to_vec(&to_wire_request(request, "m\"odel", quirks, false)).unwrap()
    }

    #[test]
    fn other_argument_limits_serialise_the_calls_again() {
        // The same history under other limits (another agent's registry on the same client): a
        // call's arguments kept from the first body would go as the other limits do not say.
        let quirks = ProviderPreset::OpenAi.quirks();
        let cache = BodyCache::default();
        let history = grown(2);
        let tight = crate::json::JsonLimits { max_bytes: 8, ..Default::default() };
        for limits in [Default::default(), tight, Default::default()] {
            let r = ChatRequest { argument_limits: limits, ..request(history.clone()) };
            let body = cache.body(&r, "m\"odel", &quirks, true).unwrap();
            assert_eq!(body, whole(&r, &quirks), "{limits:?}");
            assert_eq!(memchr::memmem::find(&body, br#""arguments":"{}""#).is_some(), limits == tight);
        }
    }

    #[test]
    fn other_tools_serialise_the_calls_again() {
        // A call of a name model APIs refuse goes by a stand-in free of the offered tools' names:
        // once a tool of that name is offered, the call kept from the first body would show as a
        // call of the real tool.
        let quirks = ProviderPreset::OpenAi.quirks();
        let cache = BodyCache::default();
        let call = ToolCall::new("c0", "query order", "{}");
        let history = vec![
            ChatMessage::user("q"),
            ChatMessage::Assistant { content: None, reasoning_content: None, tool_calls: vec![call] },
            ChatMessage::Tool {
                tool_call_id: "c0".into(),
                name: "query order".into(),
                content: "e".into(),
                is_error: true,
            },
        ];
        let offered = ToolDefinition::new("query_order", "d", serde_json::json!({"type":"object"}));
        for (tools, stand_in) in [(vec![], "query_order"), (vec![offered], "query_order_1")] {
            let r = ChatRequest::new(Arc::new(history.clone()), tools.into());
            let body = cache.body(&r, "m\"odel", &quirks, true).unwrap();
            assert_eq!(body, whole(&r, &quirks), "{stand_in}");
            let needle = format!(r#""name":"{stand_in}""#);
            assert!(memchr::memmem::find(&body, needle.as_bytes()).is_some(), "{stand_in}");
        }
    }

    #[test]
    fn an_empty_history_is_serialised_as_is() {
        let quirks = ProviderPreset::OpenAi.quirks();
        let r = request(vec![]);
        assert_eq!(
            BodyCache::default().body(&r, "m", &quirks, true).unwrap(),
            serde_json::to_vec(&to_wire_request(&r, "m", &quirks, true)).unwrap()
        );
    }

    fn check(cache: &BodyCache, history: &[ChatMessage], quirks: &ProviderQuirks) -> Bytes {
        let r = request(history.to_vec());
        let body = cache.body(&r, "m\"odel", quirks, true).unwrap();
        assert_eq!(body, whole(&r, quirks), "history: {history:?}");
        body
    }

    fn grown(n: usize) -> Vec<ChatMessage> {
        let mut h = vec![ChatMessage::system("sys"), ChatMessage::user("go")];
        for i in 0..n {
            h.push(assistant(i, "r"));
            h.push(tool(i, "ok"));
        }
        h
    }

    #[test]
    fn a_message_rewritten_in_place_is_serialised_again() {
        for preset in ProviderPreset::ALL {
            let quirks = preset.quirks();
            let cache = BodyCache::default();
            let mut history = grown(5);
            check(&cache, &history, &quirks);
            // The same length, one string changed in place (what a hook or a repair may do).
            if let ChatMessage::Tool { content, .. } = &mut history[5] {
                content.replace_range(0..2, "no");
            }
            check(&cache, &history, &quirks);
            // A tool call's arguments inside an assistant message.
            if let ChatMessage::Assistant { tool_calls, .. } = &mut history[4] {
                tool_calls[0].arguments.push(' ');
            }
            check(&cache, &history, &quirks);
            // The first message, and the last.
            history[0] = ChatMessage::system("sys\u{2028}\"");
            check(&cache, &history, &quirks);
            let last = history.len() - 1;
            history[last] = tool(9, "\u{0}\u{1f}\\");
            check(&cache, &history, &quirks);
            // Only the error flag (not sent): the body is unchanged and still right.
            if let ChatMessage::Tool { is_error, .. } = &mut history[3] {
                *is_error = true;
            }
            check(&cache, &history, &quirks);
        }
    }

    #[test]
    fn removed_inserted_and_reordered_messages() {
        for preset in [ProviderPreset::OpenAi, ProviderPreset::DeepSeek, ProviderPreset::Zhipu] {
            let quirks = preset.quirks();
            let cache = BodyCache::default();
            let mut history = grown(6);
            check(&cache, &history, &quirks);
            history.remove(4);
            check(&cache, &history, &quirks);
            history.insert(2, ChatMessage::user("inserted"));
            check(&cache, &history, &quirks);
            history.swap(3, 6);
            check(&cache, &history, &quirks);
            // Trimmed from the front (compaction), then grown again.
            history.drain(1..5);
            check(&cache, &history, &quirks);
            history.push(assistant(40, "late"));
            check(&cache, &history, &quirks);
            history.truncate(1);
            check(&cache, &history, &quirks);
            history.clear();
            check(&cache, &history, &quirks);
            history.extend(grown(2));
            check(&cache, &history, &quirks);
        }
    }

    #[test]
    fn another_model_or_options_rebuild_the_head_and_the_rest() {
        let quirks = ProviderPreset::OpenAi.quirks();
        let cache = BodyCache::default();
        let history = grown(3);
        let mut r = request(history.clone());
        check(&cache, &history, &quirks);
        for (model, stream) in [("other", true), ("other", false), ("m\"odel", false)] {
            let expected = serde_json::to_vec(&to_wire_request(&r, model, &quirks, stream)).unwrap();
            assert_eq!(cache.body(&r, model, &quirks, stream).unwrap(), expected);
        }
        r.tool_choice = Some(crate::provider::ToolChoice::Required);
        r.temperature = Some(0.7);
        r.max_tokens = Some(9);
        r.tools = Arc::from(Vec::new());
        let expected = serde_json::to_vec(&to_wire_request(&r, "m\"odel", &quirks, true)).unwrap();
        assert_eq!(cache.body(&r, "m\"odel", &quirks, true).unwrap(), expected);
    }

    #[test]
    fn a_body_still_held_is_never_written_to() {
        let quirks = ProviderPreset::DeepSeek.quirks();
        let cache = BodyCache::default();
        let mut history = grown(3);
        let first = check(&cache, &history, &quirks);
        let first_copy = first.to_vec();
        // Grown (appended in place when no one holds the buffer), rewritten, shrunk, while the
        // first body (a retry, a request in flight) is still held.
        history.push(ChatMessage::user("more"));
        let second = check(&cache, &history, &quirks);
        history[2] = tool(7, "rewritten");
        let third = check(&cache, &history, &quirks);
        history.truncate(2);
        check(&cache, &history, &quirks);
        assert_eq!(first, first_copy);
        assert_eq!(
            second,
            whole(&request(grown(3).into_iter().chain([ChatMessage::user("more")]).collect()), &quirks)
        );
        drop(second);
        let mut again = grown(3);
        again.push(ChatMessage::user("more"));
        again[2] = tool(7, "rewritten");
        assert_eq!(third, whole(&request(again), &quirks));
    }

    #[test]
    fn an_unheld_buffer_is_extended_in_place() {
        // Not a timing: when the last body was dropped, a grown history reuses the buffer (the
        // allocation stays where it was while its capacity suffices) instead of copying it.
        let quirks = ProviderPreset::OpenAi.quirks();
        let cache = BodyCache::default();
        let mut history = grown(2);
        drop(check(&cache, &history, &quirks));
        Arc::make_mut(&mut cache.cached.lock().unwrap().buf).reserve(1 << 16);
        let at = cache.cached.lock().unwrap().buf.as_ptr();
        for i in 2..20 {
            history.push(assistant(i, "r"));
            history.push(tool(i, "ok"));
            let body = check(&cache, &history, &quirks);
            assert_eq!(body.as_ptr(), at);
        }
        // A held body makes the next one a copy elsewhere.
        let held = check(&cache, &history, &quirks);
        history.push(tool(99, "x"));
        assert_ne!(check(&cache, &history, &quirks).as_ptr(), held.as_ptr());
    }

    #[test]
    fn messages_left_out_of_the_body_anywhere_in_the_history() {
        let empty = || ChatMessage::Assistant {
            content: None,
            reasoning_content: Some("r".into()),
            tool_calls: vec![],
        };
        for preset in [ProviderPreset::OpenAi, ProviderPreset::DeepSeek, ProviderPreset::Moonshot] {
            let quirks = preset.quirks();
            let cache = BodyCache::default();
            // First, in the middle, last; then only empty ones; then rewritten to be sent.
            let mut history = vec![empty(), ChatMessage::user("go"), empty(), empty()];
            check(&cache, &history, &quirks);
            history.push(assistant(1, "r"));
            history.push(tool(1, "ok"));
            history.push(empty());
            check(&cache, &history, &quirks);
            history.remove(1);
            check(&cache, &history, &quirks);
            history[0] = ChatMessage::assistant_text("now sent");
            check(&cache, &history, &quirks);
            history[0] = empty();
            let body = check(&cache, &history, &quirks);
            assert!(!String::from_utf8_lossy(&body).contains("[,"), "{body:?}");
            history.truncate(3);
            check(&cache, &history, &quirks);
            history.insert(0, ChatMessage::system("s"));
            check(&cache, &history, &quirks);
        }
    }

    #[test]
    fn same_bytes_tells_every_one_byte_difference_apart() {
        for n in 0..=70usize {
            let a: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!same_bytes(&a, &b), "{n} {at}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same_bytes(&a, &longer), "{n}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Message text with what JSON must escape, non-ASCII and long runs.
        fn text() -> impl Strategy<Value = String> {
            prop_oneof!["[a-z]{0,6}", "[\"\\\\\n\t\u{0}\u{1f}\u{7f}\u{2028}é中😀a]{0,12}", "\\PC{0,40}",]
        }

        fn message() -> impl Strategy<Value = ChatMessage> {
            let call = (text(), text(), text()).prop_map(|(id, name, args)| ToolCall::new(id, name, args));
            prop_oneof![
                text().prop_map(ChatMessage::system),
                text().prop_map(ChatMessage::user),
                (
                    proptest::option::of(text()),
                    proptest::option::of(text()),
                    proptest::collection::vec(call, 0..3)
                )
                    .prop_map(|(content, reasoning_content, tool_calls)| {
                        ChatMessage::Assistant { content, reasoning_content, tool_calls }
                    }),
                (text(), text(), text(), any::<bool>()).prop_map(
                    |(tool_call_id, name, content, is_error)| {
                        ChatMessage::Tool { tool_call_id, name, content, is_error }
                    }
                ),
            ]
        }

        #[derive(Debug, Clone)]
        enum Edit {
            Push(ChatMessage),
            Replace(usize, ChatMessage),
            Insert(usize, ChatMessage),
            Remove(usize),
            Truncate(usize),
            DrainFront(usize),
            Swap(usize, usize),
            Unchanged,
        }

        fn edit() -> impl Strategy<Value = Edit> {
            prop_oneof![
                6 => message().prop_map(Edit::Push),
                2 => (any::<usize>(), message()).prop_map(|(i, m)| Edit::Replace(i, m)),
                1 => (any::<usize>(), message()).prop_map(|(i, m)| Edit::Insert(i, m)),
                1 => any::<usize>().prop_map(Edit::Remove),
                1 => any::<usize>().prop_map(Edit::Truncate),
                1 => (0usize..4).prop_map(Edit::DrainFront),
                1 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Edit::Swap(i, j)),
                1 => Just(Edit::Unchanged),
            ]
        }

        fn apply(history: &mut Vec<ChatMessage>, e: Edit) {
            let n = history.len();
            match e {
                Edit::Push(m) => history.push(m),
                Edit::Replace(i, m) if n > 0 => history[i % n] = m,
                Edit::Insert(i, m) => history.insert(i % (n + 1), m),
                Edit::Remove(i) if n > 0 => {
                    history.remove(i % n);
                }
                Edit::Truncate(i) => history.truncate(i % (n + 1)),
                Edit::DrainFront(k) => {
                    history.drain(..k.min(n));
                }
                Edit::Swap(i, j) if n > 0 => history.swap(i % n, j % n),
                _ => {}
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// A key matches exactly the message (and reasoning flag) it was written from: never
            /// another, even one that differs only in a field the wire leaves out.
            #[test]
            fn a_key_matches_exactly_its_message(
                a in message(),
                b in message(),
                wa in any::<bool>(),
                wb in any::<bool>(),
            ) {
                let mut keys = Vec::new();
                write_key(&mut keys, &a, wa);
                prop_assert!(key_matches(&keys, &a, wa));
                prop_assert_eq!(key_matches(&keys, &b, wb), a == b && wa == wb);
                // A key cut short or with a byte more matches nothing.
                prop_assert!(!key_matches(&keys[..keys.len() - 1], &a, wa));
                keys.push(0);
                prop_assert!(!key_matches(&keys, &a, wa));
            }

            /// Small edits of one message (a byte of one string, a flag) are told apart.
            #[test]
            fn a_key_tells_a_one_byte_edit_apart(a in message(), pick in any::<usize>()) {
                let mut keys = Vec::new();
                write_key(&mut keys, &a, false);
                let mut b = a.clone();
                match &mut b {
                    ChatMessage::System { content } | ChatMessage::User { content } => content.push('x'),
                    ChatMessage::Assistant { content, tool_calls, .. } => match tool_calls.len() {
                        0 => *content = Some(format!("{}!", content.as_deref().unwrap_or(""))),
                        n => tool_calls[pick % n].arguments.insert(0, ' '),
                    },
                    ChatMessage::Tool { is_error, .. } => *is_error = !*is_error,
                }
                prop_assert!(!key_matches(&keys, &b, false));
            }

            /// After every edit of a random history, the body equals a plain serde_json
            /// serialisation of the whole request, under every preset's quirks, streaming or not,
            /// whether or not earlier bodies are still held.
            #[test]
            fn bodies_equal_plain_serialisation_under_random_edits(
                start in proptest::collection::vec(message(), 0..6),
                edits in proptest::collection::vec((edit(), any::<bool>(), any::<bool>()), 1..24),
                preset in 0usize..ProviderPreset::ALL.len(),
            ) {
                let quirks = ProviderPreset::ALL[preset].quirks();
                let cache = BodyCache::default();
                let mut history = start;
                let mut held = Vec::new();
                for (e, stream, hold) in edits {
                    apply(&mut history, e);
                    let r = request(history.clone());
                    let body = cache.body(&r, "m\"odel", &quirks, stream).unwrap();
                    let expected = serde_json::to_vec(&to_wire_request(&r, "m\"odel", &quirks, stream)).unwrap();
                    prop_assert_eq!(&body[..], &expected[..]);
                    if hold {
                        held.push((body, expected));
                    }
                }
                for (body, expected) in held {
                    prop_assert_eq!(&body[..], &expected[..]);
                }
            }
        }
    }
}
