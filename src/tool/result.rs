//! What a tool returns: content parts, and the error and stop flags.

use crate::error::AgentError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One part of a tool's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A JSON value (sent to the model as compact JSON text).
    Json {
        /// The value.
        value: Value,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    /// A JSON part.
    pub fn json(value: Value) -> Self {
        ContentPart::Json { value }
    }
}

/// The result of one tool call. Errors are results too (`is_error`), so the model can change course.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The output parts.
    pub contents: Vec<ContentPart>,
    /// True when the call failed; never dress a failure up as success.
    #[serde(default)]
    pub is_error: bool,
    /// True when the run should end after this batch.
    #[serde(default)]
    pub stop: bool,
    /// Free-form data for the app (not shown to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// How deep a result's JSON may nest: a JSON part's value and the metadata, each counted from its
/// own root (the root container is level 1). A result is saved inside the journal's records, a
/// few levels deeper, and serde_json reads back at most 128 levels: a deeper result would be
/// saved but not read back (the record lost with it). 64 is the arguments' default too
/// ([`JsonLimits`](crate::json::JsonLimits)).
pub const MAX_RESULT_DEPTH: usize = 64;

/// The metadata keys a cut error result keeps when its metadata leaves no room
/// ([`ToolResult::cut_error`]): the ones the runtime's own error results carry.
const KEPT_ERROR_KEYS: [&str; 3] = ["code", "layer", "approval_id"];

/// The most bytes an error result cut to fit `max_result_bytes` takes, whatever the limit (its
/// code, metadata and flags are kept, its text cut):
/// the metadata's kept keys with values of at most 64 bytes of JSON text each, quotes aside
/// (231 bytes), the text's `error [code]: ` with a code of at most 64 bytes (74 bytes), and the
/// note with a 20-digit count (41 bytes).
pub const MAX_CUT_ERROR_BYTES: usize = 346;

/// The note ending a cut error text: `… [N more bytes cut]`.
fn cut_note(cut: usize) -> String {
    format!("… [{cut} more bytes cut]")
}

/// The length of the `error [code]: ` an error's model text starts with
/// ([`AgentError::to_model_text`], a stable code: [`is_stable_code`](crate::error::is_stable_code)),
/// 0 when it has none (an executor's own text).
fn code_prefix_len(text: &str) -> usize {
    let Some(rest) = text.strip_prefix("error [") else { return 0 };
    match rest.split_once("]: ") {
        Some((code, _)) if crate::error::is_stable_code(code) => "error [".len() + code.len() + "]: ".len(),
        _ => 0,
    }
}

/// The start of a failed result's model text that a cut keeps whatever the limit: what tells the
/// model it failed. Its `error [code]: ` ([`code_prefix_len`]); else the `error: ` it starts with
/// (ASCII case ignored: the tool message's mark, which [`ToolResult::cut_error`] puts before a
/// text that does not say it failed), else the word `error` it starts with
/// ([`reads_as_error`](crate::message::reads_as_error)); 0 for another text.
fn kept_prefix_len(text: &str) -> usize {
    const MARK: &str = "error: ";
    match code_prefix_len(text) {
        0 if text.get(..MARK.len()).is_some_and(|s| s.eq_ignore_ascii_case(MARK)) => MARK.len(),
        0 if crate::message::reads_as_error(text) => "error".len(),
        n => n,
    }
}

impl ToolResult {
    /// `tool_result_invalid` when a JSON part or the metadata nests deeper than
    /// [`MAX_RESULT_DEPTH`] levels (`from` names who made the result, for the message).
    ///
    /// # Errors
    /// `tool_result_invalid`.
    pub fn check_depth(&self, from: &str) -> Result<(), AgentError> {
        let too_deep = |value: &Value| crate::json::depth_exceeds(value, MAX_RESULT_DEPTH);
        let part =
            self.contents.iter().position(|p| matches!(p, ContentPart::Json { value } if too_deep(value)));
        let what = match part {
            Some(i) => format!("contents[{i}].json"),
            None if self
                .metadata
                .as_ref()
                .is_some_and(|m| m.values().any(|v| crate::json::depth_exceeds(v, MAX_RESULT_DEPTH - 1))) =>
            {
                "metadata".to_string()
            }
            None => return Ok(()),
        };
        Err(AgentError::of(
            crate::error::codes::TOOL_RESULT_INVALID,
            format!("{from} returned a result whose {what} nests deeper than {MAX_RESULT_DEPTH} levels"),
        ))
    }

    /// A successful result with one text part.
    pub fn text(text: impl Into<String>) -> Self {
        ToolResult { contents: vec![ContentPart::text(text)], is_error: false, stop: false, metadata: None }
    }

    /// A successful result with one JSON part.
    pub fn json(value: Value) -> Self {
        ToolResult { contents: vec![ContentPart::json(value)], is_error: false, stop: false, metadata: None }
    }

    /// A failed result with one text part.
    pub fn error_text(text: impl Into<String>) -> Self {
        ToolResult { contents: vec![ContentPart::text(text)], is_error: true, stop: false, metadata: None }
    }

    /// The result the model sees for an error (its code and message).
    pub fn from_error(error: &AgentError) -> Self {
        let mut r = ToolResult::error_text(error.to_model_text());
        let mut meta = Map::new();
        meta.insert("code".into(), Value::String(error.code.to_string()));
        meta.insert("layer".into(), Value::String(error.layer.as_str().to_string()));
        r.metadata = Some(meta);
        r
    }

    /// The same result with the stop flag set.
    pub fn with_stop(mut self, stop: bool) -> Self {
        self.stop = stop;
        self
    }

    /// The bytes the result takes: its texts, its JSON parts and its metadata as compact JSON
    /// (what is saved and, but for the metadata, sent to the model).
    pub fn size_bytes(&self) -> usize {
        use crate::json::compact_len;
        // Uncapped, the count never stops early: there is always a length.
        let parts: usize = self
            .contents
            .iter()
            .map(|part| match part {
                ContentPart::Text { text } => text.len(),
                ContentPart::Json { value } => compact_len(value, usize::MAX).unwrap_or(usize::MAX),
            })
            .fold(0, usize::saturating_add);
        let metadata = self.metadata.as_ref().map_or(0, |m| compact_len(m, usize::MAX).unwrap_or(usize::MAX));
        parts.saturating_add(metadata)
    }

    /// This error result cut to take at most `limit` bytes ([`size_bytes`](Self::size_bytes)):
    /// its model text, cut at a character boundary and ended by a note of how many bytes were
    /// cut (`… [N more bytes cut]`), becomes its one text part; the flags and the metadata (the
    /// code, layer, approval id: what the app and the model need to tell the failure) are kept.
    /// So is the text's `error [code]: `, whatever the limit: the code is all the model is told
    /// of the failure (the metadata is not sent); the message after it is what is cut. A text
    /// without a code keeps the word `error` it starts with, or is cut after the `error: ` the
    /// tool message marks it with (put in the cut text, so counted), so what is left always
    /// reads as a failure and ends with the note ([`kept_prefix_len`]).
    /// Metadata that leaves no room for the note is reduced to its `code`, `layer` and
    /// `approval_id` (each kept when a string of at most [`crate::error::MAX_CODE_LEN`] bytes as
    /// JSON text, quotes aside);
    /// if those and the note still do not fit (a limit of a few hundred bytes), the result takes
    /// more than `limit`, by at most [`MAX_CUT_ERROR_BYTES`] in all.
    pub(crate) fn cut_error(self, limit: usize) -> ToolResult {
        use crate::json::compact_len;
        let text = self.to_model_text();
        let meta_len = |m: &Option<Map<String, Value>>| {
            m.as_ref().map_or(0, |m| compact_len(m, usize::MAX).unwrap_or(usize::MAX))
        };
        // The note's longest form: at most the whole text is cut.
        let note_len = cut_note(text.len()).len();
        let mut metadata = self.metadata;
        if meta_len(&metadata).saturating_add(note_len) > limit {
            metadata = metadata.map(|m| {
                m.into_iter()
                    .filter(|(key, value)| {
                        KEPT_ERROR_KEYS.contains(&key.as_str())
                            && value.is_string()
                            && compact_len(value, crate::error::MAX_CODE_LEN + 2).is_some()
                    })
                    .collect()
            });
        }
        let room = limit.saturating_sub(meta_len(&metadata).saturating_add(note_len));
        // A failed text to cut that does not say it failed (an executor's own `unknown record:
        // ...`) is cut as the model reads it, after the tool message's `error: ` mark
        // ([`tool_result_message`](crate::state::repair::tool_result_message)): the mark is kept
        // and counted, and what is left never passes for the mark by chance (`errors found: 3`
        // cut to `error…`).
        let text = if self.is_error && text.len() > room && !crate::message::reads_as_error(&text) {
            format!("error: {text}")
        } else {
            text
        };
        let kept = crate::text::floor_char_boundary(&text, room.max(kept_prefix_len(&text)));
        let cut = match text.len() - kept {
            // Only the metadata was too large.
            0 => text,
            n => format!("{}{}", &text[..kept], cut_note(n)),
        };
        ToolResult {
            contents: vec![ContentPart::text(cut)],
            is_error: self.is_error,
            stop: self.stop,
            metadata,
        }
    }

    /// The text the model is shown: text parts as they are, JSON parts as compact JSON, joined by
    /// newlines.
    pub fn to_model_text(&self) -> String {
        let mut out = String::new();
        for (i, part) in self.contents.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            match part {
                ContentPart::Text { text } => out.push_str(text),
                ContentPart::Json { value } => out.push_str(&value.to_string()),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;
    use serde_json::json;

    #[test]
    fn model_text_joins_parts() {
        let r = ToolResult {
            contents: vec![ContentPart::text("a"), ContentPart::json(json!({"b":1}))],
            is_error: false,
            stop: false,
            metadata: None,
        };
        assert_eq!(r.to_model_text(), "a\n{\"b\":1}");
    }

    #[test]
    fn size_counts_texts_json_and_metadata() {
        let mut r = ToolResult::text("héllo");
        assert_eq!(r.size_bytes(), 6);
        r.contents.push(ContentPart::json(json!({"a": [1, "x"]})));
        assert_eq!(r.size_bytes(), 6 + r#"{"a":[1,"x"]}"#.len());
        r.metadata = Some(json!({"k": true}).as_object().cloned().unwrap_or_default());
        assert_eq!(r.size_bytes(), 6 + 13 + r#"{"k":true}"#.len());
    }

    fn denied(reason: &str) -> ToolResult {
        let mut r =
            ToolResult::from_error(&AgentError::of(codes::TOOL_DENIED, format!("denied by user: {reason}")));
        r.metadata
            .as_mut()
            .unwrap()
            .insert("approval_id".into(), json!("0b1c1d3e-0000-4000-8000-000000000000"));
        r.with_stop(true)
    }

    #[test]
    fn a_cut_error_keeps_its_flags_and_metadata_and_fits() {
        // "é" is two bytes: no cut falls inside one.
        let r = denied(&"é".repeat(500));
        let size = r.size_bytes();
        let meta = r.metadata.clone();
        for limit in [200, 201, 202, 300, size - 1] {
            let cut = r.clone().cut_error(limit);
            // Less only by a character's other byte and a digit of the count reserved for the note.
            assert!(cut.size_bytes() <= limit && cut.size_bytes() >= limit - 2, "{limit}: {cut:?}");
            assert!(cut.is_error && cut.stop && cut.metadata == meta, "{cut:?}");
            let text = cut.to_model_text();
            let (kept, note) = text.rsplit_once("… [").unwrap();
            assert!(text.starts_with("error [tool_denied]: denied by user: é"), "{text}");
            assert!(r.to_model_text().starts_with(kept));
            assert_eq!(note, format!("{} more bytes cut]", r.to_model_text().len() - kept.len()));
        }
    }

    #[test]
    fn metadata_that_leaves_no_room_keeps_the_runtime_keys() {
        let mut r = denied("no");
        r.metadata.as_mut().unwrap().insert("app".into(), json!("x".repeat(1000)));
        // The text fits once the app's key is left out: it is kept whole.
        let cut = r.clone().cut_error(200);
        assert_eq!(cut.to_model_text(), "error [tool_denied]: denied by user: no");
        let meta = cut.metadata.unwrap();
        assert_eq!(meta.keys().collect::<Vec<_>>(), ["approval_id", "code", "layer"]);
        assert_eq!(meta["approval_id"], "0b1c1d3e-0000-4000-8000-000000000000");

        // The worst case: a limit of one byte, the kept keys and the code at their longest, the
        // longest note.
        let long = "c".repeat(crate::error::MAX_CODE_LEN);
        let mut r = ToolResult::error_text(format!("error [{long}]: {}", "x".repeat(100_000)));
        r.metadata = Some(
            json!({"code": long, "layer": long, "approval_id": long, "other": 1})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let cut = r.cut_error(1);
        assert_eq!(cut.to_model_text(), format!("error [{long}]: … [100000 more bytes cut]"));
        assert_eq!(cut.size_bytes(), MAX_CUT_ERROR_BYTES - 14, "a 6-digit count, not 20");
        // A longer value is not kept.
        let mut r = ToolResult::error_text("x");
        r.metadata = Some(json!({"code": format!("{long}c")}).as_object().cloned().unwrap());
        assert_eq!(r.cut_error(1).metadata, Some(Map::new()));
    }

    #[test]
    fn a_tiny_limit_keeps_the_code_the_model_is_shown_and_cuts_the_message() {
        let r = denied(&"é".repeat(500));
        for limit in [1, 40, 150] {
            let text = r.clone().cut_error(limit).to_model_text();
            let (kept, note) = text.split_once('…').unwrap();
            assert!(kept.starts_with("error [tool_denied]: "), "{limit}: {text}");
            assert!(r.to_model_text().starts_with(kept) && note.ends_with("more bytes cut]"), "{text}");
        }
        assert_eq!(
            r.clone().cut_error(1).to_model_text(),
            format!("error [tool_denied]: … [{} more bytes cut]", r.to_model_text().len() - 21)
        );
    }

    #[test]
    fn a_text_without_a_code_is_cut_after_the_error_mark_the_model_reads() {
        let call = crate::message::ToolCall { id: "c".into(), name: "t".into(), arguments: "{}".into() };
        // What the model reads: the tool message's content (marked `error: ` unless it reads as an
        // error already).
        let read = |r: &ToolResult| match crate::state::repair::tool_result_message(&call, r) {
            crate::message::ChatMessage::Tool { content, .. } => content,
            other => panic!("{other:?}"),
        };
        let cases = [
            // An executor's own text: the mark is the kept start, so the cut says it failed and
            // that it was cut (before, only `… [500 more bytes cut]` was kept).
            ("x".repeat(500), 1, "error: … [500 more bytes cut]".to_string()),
            // What is left is never taken for the mark by chance: `errors found` is no error word.
            (
                format!("errors found: {}", "x".repeat(486)),
                36,
                "error: error… [495 more bytes cut]".to_string(),
            ),
            // The word `error` of a text that says it failed (without a code) is kept.
            (
                format!("error [Not A Code]: {}", "x".repeat(500)),
                1,
                "error… [515 more bytes cut]".to_string(),
            ),
            (
                format!("unknown record: {}", "x".repeat(484)),
                60,
                format!("error: unknown record: {}… [471 more bytes cut]", "x".repeat(13)),
            ),
        ];
        for (text, limit, expected) in cases {
            let cut = ToolResult::error_text(text.clone()).cut_error(limit);
            assert_eq!(cut.to_model_text(), expected, "{limit}");
            // Counted in the limit: the model reads the cut text as it is.
            assert_eq!(read(&cut), expected);
            assert!(cut.size_bytes() <= limit.max("error: … [500 more bytes cut]".len()), "{limit}: {cut:?}");
        }
        // A text that fits is left as it is (the tool message marks it).
        let r = ToolResult::error_text("no such record");
        assert_eq!(r.clone().cut_error(100), r);
        assert_eq!(read(&r), "error: no such record");
    }

    #[test]
    fn error_results_carry_the_code() {
        let r = ToolResult::from_error(&AgentError::of(codes::TOOL_NOT_FOUND, "Tool not found: x"));
        assert!(r.is_error);
        assert_eq!(r.to_model_text(), "error [tool_not_found]: Tool not found: x");
        assert_eq!(r.metadata.unwrap()["code"], "tool_not_found");
    }
}
