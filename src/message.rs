//! Conversation messages and tool calls: the domain types every part shares. Provider wire types
//! live apart, in `provider`, and convert from these.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The characters Unicode says a renderer shows nothing for when it does not support them, the
/// `Default_Ignorable_Code_Point` property (DerivedCoreProperties.txt, Unicode 16.0): the soft
/// hyphen, the combining grapheme joiner, the Arabic letter mark, the Hangul fillers, the Khmer
/// inherent vowels, the Mongolian variation selectors and vowel separator, the zero-width space,
/// non-joiner and joiner, the left-to-right and right-to-left marks, the bidi embeddings,
/// overrides and isolates, the word joiner and invisible operators, the variation selectors, the
/// byte order mark, the shorthand format controls, the musical beam and phrase controls, and the
/// tag characters (reserved code points of these blocks included, as the property does). None is
/// whitespace to [`char::is_whitespace`]. Sorted, inclusive ranges.
const DEFAULT_IGNORABLE: [(char, char); 17] = [
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` is one of the invisible characters of [`is_blank_text`] (Unicode's
/// `Default_Ignorable_Code_Point`: zero-width characters, direction marks, fillers, variation
/// selectors, tags...).
pub(crate) fn is_invisible(c: char) -> bool {
    // Every range starts at U+00AD or later: ASCII and most text leave at once.
    c >= '\u{00AD}' && DEFAULT_IGNORABLE.iter().any(|&(from, to)| (from..=to).contains(&c))
}

/// Whether `text` shows nothing: empty, or only whitespace and invisible characters (Unicode's
/// `Default_Ignorable_Code_Point`: U+200B..U+200F, U+2060..U+206F, U+FEFF, U+00AD, U+3164, the
/// variation selectors, the tag characters...: see [`is_invisible`]). A message of such text looks
/// empty to the model and to the user, and strict providers refuse an empty one: the runtime sends
/// none.
pub(crate) fn is_blank_text(text: &str) -> bool {
    text.chars().all(|c| c.is_whitespace() || is_invisible(c))
}

/// One tool call as the model asked for it. `arguments` is the raw JSON text the model produced:
/// it is parsed and validated by the registry, never silently replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id; every tool result echoes it.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The raw arguments text (`{}` for a parameterless call that sent `""`).
    pub arguments: String,
}

impl ToolCall {
    /// A call with the given id, name and raw arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }
    }

    /// The same call (same id) with other arguments.
    pub fn with_arguments(&self, arguments: impl Into<String>) -> Self {
        ToolCall { id: self.id.clone(), name: self.name.clone(), arguments: arguments.into() }
    }
}

/// The id a call gets at `position` of its answer when `taken` says its own is missing or already
/// used (by an earlier call of the same answer, or of the session's history): `call_<position>`
/// for a missing id, `<id>_<position>` for a repeated one, and `_2`, `_3`... appended to that while
/// it is taken too (so an id a model repeats every round grows by a counter, not by a suffix per
/// round). A repeated id of exactly 9 ASCII letters and digits keeps that shape, which Mistral
/// requires of every id it is sent back (400 otherwise): its end is replaced by a counter from
/// `position` up, written in base 62 (`D681PevKs` at position 2 becomes `D681PevK2`, then
/// `D681PevK3`...), the first one not taken (`nine_alphanumeric_id`). `None` when the id is fine
/// as it is.
pub fn unique_call_id(id: &str, position: usize, taken: impl Fn(&str) -> bool) -> Option<String> {
    if !id.is_empty() && !taken(id) {
        return None;
    }
    if id.len() == MISTRAL_ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Some(
            (position..).map(|n| nine_alphanumeric_id(id, n)).find(|c| !taken(c)).unwrap_or_default(),
        );
    }
    let base = if id.is_empty() { format!("call_{position}") } else { format!("{id}_{position}") };
    if !taken(&base) {
        return Some(base);
    }
    let mut n = 2usize;
    loop {
        let unique = format!("{base}_{n}");
        if !taken(&unique) {
            return Some(unique);
        }
        n += 1;
    }
}

/// The length of the ids Mistral gives and requires back: 9 ASCII letters and digits.
const MISTRAL_ID_LEN: usize = 9;

/// `id` (9 ASCII letters and digits) with its end replaced by `n` written in base 62 (digits, then
/// upper-case and lower-case letters): 9 letters and digits again, another for each `n` below
/// 62^9.
fn nine_alphanumeric_id(id: &str, n: usize) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut counter = Vec::new();
    let mut rest = n;
    loop {
        counter.push(DIGITS[rest % 62]);
        rest /= 62;
        if rest == 0 || counter.len() == MISTRAL_ID_LEN {
            break;
        }
    }
    let mut unique = id[..MISTRAL_ID_LEN - counter.len()].to_string();
    unique.extend(counter.iter().rev().map(|&b| char::from(b)));
    unique
}

/// Makes the call ids of one model answer unique and non-empty, in place (see [`unique_call_id`]):
/// every result is paired with its call by id, so two calls with one id would get one result
/// between them. Providers that omit ids, or repeat one within an answer (some local servers and
/// gateways), are the reason; `used` names the ids taken already (the history's, see
/// [`call_ids`]: some servers number the calls per answer, `call_0` every round), which no call
/// of the answer may take either. Returns how many ids changed.
pub fn make_call_ids_unique(calls: &mut [ToolCall], used: impl Fn(&str) -> bool) -> usize {
    let mut changed = 0;
    for i in 0..calls.len() {
        let (earlier, rest) = calls.split_at_mut(i);
        let call = &mut rest[0];
        if let Some(id) = unique_call_id(&call.id, i, |c| used(c) || earlier.iter().any(|e| e.id == c)) {
            call.id = id;
            changed += 1;
        }
    }
    changed
}

/// The call ids `messages` hold: of the assistant messages' calls and of the tool results.
pub fn call_ids(messages: &[ChatMessage]) -> HashSet<&str> {
    let mut ids = HashSet::new();
    for message in messages {
        ids.extend(message.tool_calls().iter().map(|c| c.id.as_str()));
        ids.extend(message.tool_call_id());
    }
    ids
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    /// Instructions for the model.
    System {
        /// The text.
        content: String,
    },
    /// What the user said.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The visible text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// A provider's reasoning text (DeepSeek, Grok), kept so it can be sent back where required.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
        /// The tool calls, in the order the model gave them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, paired with its call id.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name (some providers want it).
        name: String,
        /// The text the model is shown.
        content: String,
        /// True when the call failed (the model is told so in `content` too).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage::System { content: content.into() }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage::User { content: content.into() }
    }

    /// An assistant message with text only.
    pub fn assistant_text(content: impl Into<String>) -> Self {
        ChatMessage::Assistant {
            content: Some(content.into()),
            reasoning_content: None,
            tool_calls: Vec::new(),
        }
    }

    /// The tool calls of an assistant message (empty for every other message).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }

    /// An assistant message with neither text nor calls (an answer cut off or filtered, saved by
    /// an earlier version): it is never sent to a model, since strict providers refuse it.
    pub fn is_empty_answer(&self) -> bool {
        matches!(self, ChatMessage::Assistant { content, tool_calls, .. }
            if tool_calls.is_empty() && content.as_deref().is_none_or(str::is_empty))
    }

    /// The call id a tool message answers.
    pub fn tool_call_id(&self) -> Option<&str> {
        match self {
            ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id),
            _ => None,
        }
    }

    /// The role name as the OpenAI wire format spells it.
    pub fn role(&self) -> &'static str {
        match self {
            ChatMessage::System { .. } => "system",
            ChatMessage::User { .. } => "user",
            ChatMessage::Assistant { .. } => "assistant",
            ChatMessage::Tool { .. } => "tool",
        }
    }
}

/// Token counts reported by a provider (summed over a run in the state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u64,
    /// Tokens of the completion.
    pub completion_tokens: u64,
    /// Their total as the provider reports it.
    pub total_tokens: u64,
}

impl Usage {
    /// Adds another report to this one (saturating: counts come from the provider).
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// Whether a tool message's text already says it failed: it starts with the word `error` (ASCII
/// case ignored), as the runtime's own `error [code]: ...` does. `errors found: 0` or
/// `errorCount: 2` does not: the word must end there.
pub fn reads_as_error(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 5
        && bytes[..5].eq_ignore_ascii_case(b"error")
        && bytes.get(5).is_none_or(|b| !b.is_ascii_alphanumeric() && *b != b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_text_is_whitespace_and_default_ignorable_characters_only() {
        for blank in ["", " \n", "\u{00AD}", "\u{200E}\u{200F}", "\u{3164}", "\u{E0020}\u{E0FFF}", "\u{FE0F}"]
        {
            assert!(is_blank_text(blank), "{blank:?}");
        }
        // The characters next to each range show something.
        for text in
            ["a", "你", "\u{00AC}", "\u{00AE}", "\u{2070}", "\u{FE10}", "\u{E1000}", "\u{200B}x\u{200B}"]
        {
            assert!(!is_blank_text(text), "{text:?}");
        }
        assert!(DEFAULT_IGNORABLE.windows(2).all(|w| w[0].1 < w[1].0));
    }

    #[test]
    fn reads_as_error_wants_the_word_error_first() {
        for marked in ["error", "error: x", "Error: x", "ERROR [tool_timeout]: x", "error\nx"] {
            assert!(reads_as_error(marked), "{marked:?}");
        }
        for plain in ["", "erro", "errors found: 0", "errorCount: 2", "error_code 5", "an error", "é error"]
        {
            assert!(!reads_as_error(plain), "{plain:?}");
        }
    }

    fn ids(calls: &[ToolCall]) -> Vec<&str> {
        calls.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn call_ids_of_one_answer_become_unique_and_non_empty() {
        let mut calls: Vec<ToolCall> = ["a", "b", "a", "", "call_3", "a_2", "a"]
            .iter()
            .map(|id| ToolCall::new(*id, "t", "{}"))
            .collect();
        assert_eq!(make_call_ids_unique(&mut calls, |_| false), 5);
        assert_eq!(ids(&calls), ["a", "b", "a_2", "call_3", "call_3_4", "a_2_5", "a_6"]);
        let mut seen = std::collections::HashSet::new();
        assert!(calls.iter().all(|c| seen.insert(c.id.clone())));
        // Unique ids are left alone, and the pass is idempotent.
        assert_eq!(make_call_ids_unique(&mut calls, |_| false), 0);
        let mut fine = vec![ToolCall::new("x", "t", "{}"), ToolCall::new("y", "t", "{}")];
        assert_eq!(make_call_ids_unique(&mut fine, |_| false), 0);
        assert_eq!(ids(&fine), ["x", "y"]);
    }

    fn result(call_id: &str) -> ChatMessage {
        ChatMessage::Tool {
            tool_call_id: call_id.into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    /// A history that took `rounds` answers of `calls()`, each with its ids made unique against
    /// the history (as the driver records them) and every call answered: each round's ids, how
    /// many of them were renamed, and the history.
    fn answered_rounds(
        rounds: usize,
        calls: impl Fn() -> Vec<ToolCall>,
    ) -> (Vec<String>, Vec<usize>, Vec<ChatMessage>) {
        let mut history = vec![ChatMessage::user("q")];
        let (mut given, mut renamed) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut calls = calls();
            let used = call_ids(&history);
            renamed.push(make_call_ids_unique(&mut calls, |c| used.contains(c)));
            given.push(ids(&calls).join(" "));
            let results: Vec<ChatMessage> = calls.iter().map(|c| result(&c.id)).collect();
            history.push(ChatMessage::Assistant {
                content: None,
                reasoning_content: None,
                tool_calls: calls,
            });
            history.extend(results);
        }
        (given, renamed, history)
    }

    #[test]
    fn call_ids_the_history_holds_are_taken_and_a_repeat_grows_by_a_counter() {
        // A server numbering its calls per answer sends `call_0` every round.
        let (given, renamed, history) = answered_rounds(5, || {
            vec![ToolCall::new("call_0", "t", "{}"), ToolCall::new("call_1", "t", "{}")]
        });
        assert_eq!(renamed, [0, 2, 2, 2, 2]);
        assert_eq!(
            given,
            [
                "call_0 call_1",
                "call_0_0 call_1_1",
                "call_0_0_2 call_1_1_2",
                "call_0_0_3 call_1_1_3",
                "call_0_0_4 call_1_1_4"
            ]
        );
        let all: Vec<&str> = history.iter().flat_map(|m| m.tool_calls()).map(|c| c.id.as_str()).collect();
        assert_eq!(all.len(), 10);
        assert_eq!(call_ids(&history).len(), 10, "each id once: {all:?}");
        // A tool result's id counts too (a history saved with an orphan result).
        let orphan = [result("x")];
        let mut calls = vec![ToolCall::new("x", "t", "{}")];
        let used = call_ids(&orphan);
        assert_eq!(make_call_ids_unique(&mut calls, |c| used.contains(c)), 1);
        assert_eq!(ids(&calls), ["x_0"]);
    }

    #[test]
    fn a_repeated_id_of_nine_letters_and_digits_keeps_that_shape() {
        // Mistral gives ids of 9 letters and digits and refuses any other back.
        let mistral_shaped = |id: &str| id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric());
        let (given, _, history) = answered_rounds(3, || {
            vec![
                ToolCall::new("D681PevKs", "t", "{}"),
                ToolCall::new("D681PevKs", "t", "{}"),
                ToolCall::new("D681PevK2", "t", "{}"),
            ]
        });
        assert_eq!(
            given,
            [
                "D681PevKs D681PevK1 D681PevK2",
                "D681PevK0 D681PevK3 D681PevK4",
                "D681PevK5 D681PevK6 D681PevK7"
            ]
        );
        let all: Vec<&str> = history.iter().flat_map(|m| m.tool_calls()).map(|c| c.id.as_str()).collect();
        assert!(all.iter().all(|id| mistral_shaped(id)), "{all:?}");
        assert_eq!(call_ids(&history).len(), 9, "each id once: {all:?}");
        // Past one character, the counter takes more of the end.
        let taken: HashSet<String> = (0..62).map(|n| nine_alphanumeric_id("abcdefghi", n)).collect();
        assert!(taken.contains("abcdefghz") && taken.contains("abcdefghA"));
        assert_eq!(
            unique_call_id("abcdefghi", 0, |c| c == "abcdefghi" || taken.contains(c)).unwrap(),
            "abcdefg10"
        );
        // Other ids keep the suffix rule: 8 or 10 characters, or one not a letter or digit.
        for id in ["abcdefgh", "abcdefghij", "abcd_fghi", "abcdéfgh"] {
            assert_eq!(unique_call_id(id, 1, |c| c == id).unwrap(), format!("{id}_1"));
        }
    }

    #[test]
    fn messages_serialise_with_role_tags_and_no_empty_fields() {
        let m = ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: vec![ToolCall::new("c1", "query_order", "{}")],
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["role"], "assistant");
        assert!(v.get("content").is_none());
        let back: ChatMessage = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        let t = ChatMessage::Tool {
            tool_call_id: "c1".into(),
            name: "query_order".into(),
            content: "ok".into(),
            is_error: false,
        };
        assert!(serde_json::to_value(&t).unwrap().get("is_error").is_none());
    }

    #[test]
    fn with_arguments_keeps_the_id() {
        let c = ToolCall::new("c1", "t", "{}");
        let r = c.with_arguments("{\"a\":1}");
        assert_eq!(r.id, "c1");
        assert_eq!(r.arguments, "{\"a\":1}");
    }
}
