//! The optional LLM loop diagnosis: another model reads the recent history and says whether the
//! agent is stuck. It is a heuristic, so it is cautious: it is considered only from a round on and
//! then every few rounds, it counts only above a confidence threshold, and a diagnosis that fails
//! or cannot be parsed counts as "no loop". The tokens a diagnosis used count in the session's
//! usage, as those of any model request of the run do.

use super::{LoopCheck, LoopFinding, LoopKind};
use crate::error::{codes, AgentError};
use crate::message::{ChatMessage, Usage};
use crate::provider::{ChatModel, ChatRequest};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// A model's verdict on the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopDiagnosis {
    /// The model thinks the agent is looping.
    pub is_loop: bool,
    /// How sure it is, 0.0 to 1.0.
    pub confidence: f64,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// The tokens the diagnosis used (the model answer's usage report), added to the session's
    /// usage by the run that asked; `None` when none was reported (or no model was asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Something that diagnoses loops. Usable as `dyn LoopDiagnoser`.
#[async_trait]
pub trait LoopDiagnoser: Send + Sync {
    /// Diagnoses the history (oldest first).
    ///
    /// # Errors
    /// Any error; [`diagnose_loop`] turns it into "no loop". An error tells no usage: a diagnoser
    /// whose model answered with something it cannot use answers "no loop" with the answer's
    /// usage instead (as [`ModelLoopDiagnoser`] does), so the tokens still count.
    async fn diagnose(&self, history: &[ChatMessage]) -> Result<LoopDiagnosis, AgentError>;
}

/// When a diagnosis is asked and when it counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiagnosisSchedule {
    /// The first round considered (default 30).
    #[serde(default = "default_first_round")]
    pub first_round: u32,
    /// Then every this many rounds (default 10; 0 means only `first_round`).
    #[serde(default = "default_every")]
    pub every: u32,
    /// A loop counts only with a confidence strictly above this (default 0.8).
    #[serde(default = "default_min_confidence")]
    pub min_confidence: f64,
}

fn default_first_round() -> u32 {
    30
}
fn default_every() -> u32 {
    10
}
fn default_min_confidence() -> f64 {
    0.8
}

impl Default for DiagnosisSchedule {
    fn default() -> Self {
        DiagnosisSchedule {
            first_round: default_first_round(),
            every: default_every(),
            min_confidence: default_min_confidence(),
        }
    }
}

impl DiagnosisSchedule {
    /// True when the diagnosis is asked at this round: `first_round`, then every `every` rounds
    /// (30, 40, 50... by default).
    pub fn is_due(&self, round: u32) -> bool {
        if round < self.first_round {
            return false;
        }
        // `is_multiple_of(0)` is true only for 0: `every == 0` means `first_round` alone.
        (round - self.first_round).is_multiple_of(self.every)
    }
}

/// Asks the diagnoser if the schedule says so at this round, and tells the tokens the diagnosis
/// used ([`LoopDiagnosis::usage`]; `None` when not asked or not reported). A loop only when the
/// diagnosis says `is_loop` with a confidence above the threshold; not due, an error or a low
/// confidence is [`LoopCheck::NoLoop`] (errors are logged).
pub async fn diagnose_loop(
    diagnoser: &dyn LoopDiagnoser,
    schedule: &DiagnosisSchedule,
    round: u32,
    history: &[ChatMessage],
) -> (LoopCheck, Option<Usage>) {
    if !schedule.is_due(round) {
        return (LoopCheck::NoLoop, None);
    }
    match diagnoser.diagnose(history).await {
        Ok(d) if d.is_loop && d.confidence.is_finite() && d.confidence > schedule.min_confidence => {
            let kind = LoopKind::Diagnosed { confidence: d.confidence, reason: d.reason };
            (LoopCheck::Loop(LoopFinding { kind }), d.usage)
        }
        Ok(d) => (LoopCheck::NoLoop, d.usage),
        Err(e) => {
            log::warn!("loop diagnosis failed, counted as no loop: {e}");
            (LoopCheck::NoLoop, None)
        }
    }
}

/// The system prompt of [`ModelLoopDiagnoser`].
pub const DIAGNOSIS_PROMPT: &str = "You are an AI Loop Diagnosis Expert.\n\
Analyze the following conversation history.\n\
Determine if the Agent is stuck in a meaningless loop.\n\
Return JSON: { \"is_loop\": true/false, \"reason\": \"...\", \"confidence\": 0.0-1.0 }";

/// A diagnoser that asks a [`ChatModel`] (no tools) and parses its JSON answer.
pub struct ModelLoopDiagnoser {
    model: Arc<dyn ChatModel>,
    max_messages: usize,
    max_chars_per_message: usize,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl ModelLoopDiagnoser {
    /// Shows the model the last 40 messages, each cut to 600 characters, and sends no
    /// temperature (the provider's default: some models refuse any other, e.g. Kimi K2.5 and
    /// OpenAI's reasoning models) and no token limit.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        ModelLoopDiagnoser {
            model,
            max_messages: 40,
            max_chars_per_message: 600,
            temperature: None,
            max_tokens: None,
        }
    }

    /// The same diagnoser asking with this temperature (e.g. `Some(0.0)` for a steadier verdict
    /// from a model that accepts it).
    pub fn with_temperature(mut self, temperature: Option<f32>) -> Self {
        self.temperature = temperature;
        self
    }

    /// The same diagnoser asking for at most this many completion tokens (the request's
    /// `max_tokens`; `None` sends none: the provider's default). The native module gives it the
    /// agent's `maxTokens`, so a diagnosis never asks for more than the agent's other requests.
    /// The verdict is a short JSON object, but a reasoning model's thinking counts in the limit
    /// too: a limit too low cuts the verdict off, which then counts as no loop.
    pub fn with_max_tokens(mut self, max_tokens: Option<u32>) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// The same diagnoser showing the last `max_messages` messages, each cut to
    /// `max_chars_per_message` characters.
    pub fn with_limits(mut self, max_messages: usize, max_chars_per_message: usize) -> Self {
        self.max_messages = max_messages;
        self.max_chars_per_message = max_chars_per_message;
        self
    }

    /// The request sent to the model: the prompt as the system message and the transcript of the
    /// recent history as one user message.
    pub fn request(&self, history: &[ChatMessage]) -> ChatRequest {
        let start = history.len().saturating_sub(self.max_messages);
        let mut transcript = String::new();
        for message in &history[start..] {
            let line = match message {
                ChatMessage::System { content } => format!("system: {content}"),
                ChatMessage::User { content } => format!("user: {content}"),
                ChatMessage::Assistant { content, tool_calls, .. } => {
                    let mut line = format!("assistant: {}", content.as_deref().unwrap_or(""));
                    for call in tool_calls {
                        line.push_str(&format!(" [call {}({})]", call.name, call.arguments));
                    }
                    line
                }
                ChatMessage::Tool { name, content, is_error, .. } => {
                    // A failed result's text already starts with `error` (the tool message's mark).
                    let kind = match is_error {
                        true if crate::message::reads_as_error(content) => "",
                        true => " error",
                        false => " result",
                    };
                    format!("tool {name}{kind}: {content}")
                }
            };
            transcript.push_str(&cut(&line, self.max_chars_per_message));
            transcript.push('\n');
        }
        let mut request = ChatRequest::new(
            vec![ChatMessage::system(DIAGNOSIS_PROMPT), ChatMessage::user(transcript)].into(),
            Vec::new().into(),
        );
        request.temperature = self.temperature;
        request.max_tokens = self.max_tokens;
        request
    }
}

#[async_trait]
impl LoopDiagnoser for ModelLoopDiagnoser {
    /// # Errors
    /// The model request's. An answer that cannot be parsed is no error: it is logged and answers
    /// "no loop" (confidence 0, the parse error as the reason) with the answer's usage, whose
    /// tokens were spent all the same.
    async fn diagnose(&self, history: &[ChatMessage]) -> Result<LoopDiagnosis, AgentError> {
        let response = self.model.complete(&self.request(history)).await?;
        let usage = response.usage;
        match parse_diagnosis(response.content.as_deref().unwrap_or("")) {
            Ok(diagnosis) => Ok(LoopDiagnosis { usage, ..diagnosis }),
            Err(e) => {
                log::warn!("loop diagnosis unreadable, counted as no loop: {e}");
                Ok(LoopDiagnosis { is_loop: false, confidence: 0.0, reason: e.message, usage })
            }
        }
    }
}

/// Parses a model's diagnosis: the JSON object in the text (code fences and words around it are
/// tolerated), with a boolean `is_loop`, a `confidence` number in 0..=1 and an optional string
/// `reason`.
///
/// # Errors
/// `provider_decode` when there is no such object.
pub fn parse_diagnosis(text: &str) -> Result<LoopDiagnosis, AgentError> {
    let bad = |why: &str| {
        AgentError::of(codes::PROVIDER_DECODE, format!("loop diagnosis: {why}: {}", cut(text, 200)))
    };
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return Err(bad("no JSON object"));
    };
    if end < start {
        return Err(bad("no JSON object"));
    }
    let value: Value = serde_json::from_str(&text[start..=end]).map_err(|_| bad("invalid JSON"))?;
    let is_loop =
        value.get("is_loop").and_then(Value::as_bool).ok_or_else(|| bad("is_loop is not a boolean"))?;
    let confidence = value
        .get("confidence")
        .and_then(Value::as_f64)
        .filter(|c| (0.0..=1.0).contains(c))
        .ok_or_else(|| bad("confidence is not a number between 0 and 1"))?;
    let reason = match value.get("reason") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("reason is not a string")),
    };
    Ok(LoopDiagnosis { is_loop, confidence, reason, usage: None })
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_defaults_are_30_then_every_10() {
        let s = DiagnosisSchedule::default();
        let due: Vec<u32> = (0..=60).filter(|r| s.is_due(*r)).collect();
        assert_eq!(due, vec![30, 40, 50, 60]);
        let once = DiagnosisSchedule { every: 0, ..s };
        assert_eq!((0..=60).filter(|r| once.is_due(*r)).count(), 1);
    }

    #[test]
    fn the_transcript_names_a_failed_result_once() {
        let tool = |content: &str, is_error: bool| ChatMessage::Tool {
            tool_call_id: "c1".into(),
            name: "lookup".into(),
            content: content.into(),
            is_error,
        };
        let model = Arc::new(crate::provider::ScriptedModel::new(Vec::new()));
        let request = ModelLoopDiagnoser::new(model).request(&[
            tool("error: unknown record: r9", true),
            tool("errorCount: 2", true),
            tool("{\"id\":\"r9\"}", false),
        ]);
        let ChatMessage::User { content } = &request.messages[1] else { panic!("a user message") };
        assert_eq!(
            content,
            "tool lookup: error: unknown record: r9\ntool lookup error: errorCount: 2\n\
             tool lookup result: {\"id\":\"r9\"}\n"
        );
    }

    #[test]
    fn parse_tolerates_fences_and_rejects_bad_fields() {
        let d = parse_diagnosis(
            "```json\n{\"is_loop\": true, \"confidence\": 0.9, \"reason\": \"same query\"}\n```",
        )
        .unwrap();
        assert!(d.is_loop);
        assert_eq!(d.reason, "same query");
        for bad in [
            "no json here",
            "} {",
            "{\"is_loop\": \"yes\", \"confidence\": 0.9}",
            "{\"is_loop\": true, \"confidence\": 1.5}",
            "{\"is_loop\": true, \"confidence\": \"high\"}",
            "{\"is_loop\": true}",
            "{\"is_loop\": true, \"confidence\": 0.9, \"reason\": 3}",
        ] {
            assert_eq!(parse_diagnosis(bad).unwrap_err().code, codes::PROVIDER_DECODE, "{bad}");
        }
    }
}
