//! The request body of each round, without re-serialising the whole history: every message's wire
//! JSON is kept by its position and a fingerprint of what it serialises from, so a round costs a
//! hash of the history (several times cheaper than escaping it) plus the new messages' JSON. A
//! message that changed (trimming, repair, another session on the same client) misses and is
//! serialised again; the body is byte for byte what serialising the whole request gives (tested).

use super::config::ProviderQuirks;
use super::convert::to_wire_request;
use super::wire::ChatCompletionRequest;
use super::ChatRequest;
use crate::message::ChatMessage;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

struct Entry {
    key: u64,
    json: Vec<u8>,
}

/// Per-client cache of messages' wire JSON, by position.
#[derive(Default)]
pub(crate) struct BodyCache {
    // A std Mutex: held while the body is assembled (no await inside).
    entries: Mutex<Vec<Entry>>,
}

fn fingerprint(message: &ChatMessage, with_reasoning: bool) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(0x61726b).build_hasher();
    let mut text = |s: &str| {
        h.write_usize(s.len());
        h.write(s.as_bytes());
    };
    match message {
        ChatMessage::System { content } => {
            text("system");
            text(content);
        }
        ChatMessage::User { content } => {
            text("user");
            text(content);
        }
        ChatMessage::Assistant { content, reasoning_content, tool_calls } => {
            text("assistant");
            text(content.as_deref().unwrap_or("\u{0}none"));
            if with_reasoning {
                text(reasoning_content.as_deref().unwrap_or("\u{0}none"));
            }
            for c in tool_calls {
                text(&c.id);
                text(&c.name);
                text(&c.arguments);
            }
        }
        ChatMessage::Tool { tool_call_id, name, content, is_error } => {
            text("tool");
            text(tool_call_id);
            text(name);
            text(content);
            text(if *is_error { "e" } else { "o" });
        }
    }
    h.finish()
}

impl BodyCache {
    /// The JSON body of `request` (what `serde_json::to_vec(&to_wire_request(..))` gives).
    pub(crate) fn body(
        &self,
        request: &ChatRequest,
        model: &str,
        quirks: &ProviderQuirks,
        stream: bool,
    ) -> serde_json::Result<Vec<u8>> {
        let mut wire: ChatCompletionRequest<'_> = to_wire_request(request, model, quirks, stream);
        let messages = std::mem::take(&mut wire.messages);
        let rest = serde_json::to_vec(&wire)?;
        // `model` comes first and is a JSON string, so the first `"messages":[]` is the field.
        let needle = br#""messages":[]"#;
        let at = memchr::memmem::find(&rest, needle).map(|i| i + needle.len() - 1);
        let Some(at) = at else {
            // Not the expected shape: serialise the whole request.
            wire.messages = messages;
            return serde_json::to_vec(&wire);
        };
        let turn_start =
            request.messages.iter().rposition(|m| matches!(m, ChatMessage::User { .. })).unwrap_or(0);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.truncate(messages.len());
        let mut out =
            Vec::with_capacity(rest.len() + entries.iter().map(|e| e.json.len() + 1).sum::<usize>() + 256);
        out.extend_from_slice(&rest[..at]);
        for (i, (domain, wire_message)) in request.messages.iter().zip(&messages).enumerate() {
            let with_reasoning = quirks.send_reasoning_content && i > turn_start;
            let key = fingerprint(domain, with_reasoning);
            if i > 0 {
                out.push(b',');
            }
            match entries.get_mut(i) {
                Some(e) if e.key == key => out.extend_from_slice(&e.json),
                slot => {
                    let json = serde_json::to_vec(wire_message)?;
                    out.extend_from_slice(&json);
                    match slot {
                        Some(e) => *e = Entry { key, json },
                        None => entries.push(Entry { key, json }),
                    }
                }
            }
        }
        out.extend_from_slice(&rest[at..]);
        Ok(out)
    }
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
    fn an_empty_history_is_serialised_as_is() {
        let quirks = ProviderPreset::OpenAi.quirks();
        let r = request(vec![]);
        assert_eq!(
            BodyCache::default().body(&r, "m", &quirks, true).unwrap(),
            serde_json::to_vec(&to_wire_request(&r, "m", &quirks, true)).unwrap()
        );
    }
}
