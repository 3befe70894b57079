//! The loop detector: a sliding window of call signatures (tool name + `:` + the RFC 8785
//! canonical arguments), plus an optional LLM diagnosis (in `diagnosis`).
//!
//! # Rules
//! - The signature of a call is `name:canonical-arguments`; arguments that do not parse as JSON
//!   are used as their raw text. The same arguments in another key order or spacing give the same
//!   signature; different arguments never do.
//! - A loop is the last `window` signatures (default 5) all identical ("N identical in a row"),
//!   or, beyond the seed, a short cycle: the last `max(window, 3 * p)` signatures repeating with
//!   period `p` (2 or 3 by default, see [`LoopDetector::with_max_cycle_period`]), i.e. at least
//!   three whole turns of `A,B` or `A,B,C` that also fill the window. Two turns are not enough:
//!   a model that retries a failed batch once, or repeats a step and then changes course, is not
//!   looping.
//! - Batches: a model answer's calls are counted together with [`LoopDetector::record_batch`],
//!   which checks the identical-in-a-row rule after each call and cycles once, after the whole
//!   batch, so a prefix of a batch that changes course (`a,b | a,b | a,c`) never counts as a
//!   cycle. [`LoopDetector::record`] and [`LoopDetector::commit`] count one call and check both
//!   rules at once (for callers without batches).
//! - Streaming: [`LoopDetector::update`] notes the latest signature of a call id that is still
//!   being streamed and counts nothing; [`LoopDetector::commit`] counts the call's final signature
//!   once. Ids only merge the updates of a call in flight: once committed, a later call with the
//!   same id counts again, because some providers reuse ids across answers (`call_0` every round)
//!   and a loop must not hide behind them. So commit (or [`LoopDetector::record`]) each final call
//!   exactly once.
//! - The window is plain strings ([`LoopDetector::window`] / [`LoopDetector::from_window`]), so
//!   the runtime persists it in `AgentState::loop_window` and a resumed run keeps counting. A new
//!   run (a new user message) starts with an empty window.
//!
//! A loop ends the run with `loop_detected` (runtime layer): see [`LoopFinding::to_error`].

mod diagnosis;

pub use diagnosis::{
    diagnose_loop, parse_diagnosis, DiagnosisSchedule, LoopDiagnoser, LoopDiagnosis, ModelLoopDiagnoser,
};

use crate::error::{codes, AgentError};
use crate::message::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// Loop detector settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopDetectorConfig {
    /// Window length; the window full of identical signatures is a loop (default 5).
    pub window: usize,
}

impl Default for LoopDetectorConfig {
    fn default() -> Self {
        LoopDetectorConfig { window: 5 }
    }
}

/// The smallest window accepted (a window of 1 would call every call a loop).
pub const MIN_WINDOW: usize = 2;
/// The largest window accepted.
pub const MAX_WINDOW: usize = 1000;
/// The longest cycle period looked for by default (and the longest accepted).
pub const DEFAULT_MAX_CYCLE_PERIOD: usize = 3;
/// How many whole turns a cycle of period 2 or more must repeat to be a loop.
pub const CYCLE_TURNS: usize = 3;

/// The signature of a call: `name:` and its canonical arguments (raw text if not JSON).
pub fn signature(name: &str, arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value) => signature_of_value(name, &value),
        Err(_) => compact(format!("{name}:{arguments}")),
    }
}

/// The signature of a call whose arguments are already parsed.
pub fn signature_of_value(name: &str, arguments: &Value) -> String {
    compact(format!("{name}:{}", crate::json::canonicalize(arguments)))
}

/// The longest signature kept whole, in bytes. A longer one keeps its start and the SHA-256 of
/// the whole: the window is saved with the session and held in memory, and arguments may take a
/// megabyte each; the messages show a signature's first 120 bytes anyway.
pub const SIGNATURE_KEPT_BYTES: usize = 256;

/// `signature`, or for a longer one than [`SIGNATURE_KEPT_BYTES`] its first 128 bytes (at a
/// character boundary), `…`, and the SHA-256 of the whole: equal signatures stay equal, unequal
/// ones unequal (but for a SHA-256 collision).
fn compact(signature: String) -> String {
    if signature.len() <= SIGNATURE_KEPT_BYTES {
        return signature;
    }
    let end = crate::text::floor_char_boundary(&signature, 128);
    format!(
        "{}… ({} bytes, {})",
        &signature[..end],
        signature.len(),
        crate::approval::sha256_text(signature.as_bytes())
    )
}

/// The signature of a call.
pub fn call_signature(call: &ToolCall) -> String {
    signature(&call.name, &call.arguments)
}

/// What kind of loop was found.
#[derive(Debug, Clone, PartialEq)]
pub enum LoopKind {
    /// The same signature filled the window.
    Repeat {
        /// The signature.
        signature: String,
        /// How many times in a row.
        times: usize,
    },
    /// A short cycle filled the window.
    Cycle {
        /// The cycle length.
        period: usize,
        /// One turn of the cycle, oldest first.
        signatures: Vec<String>,
    },
    /// The LLM diagnosis said so.
    Diagnosed {
        /// The model's confidence.
        confidence: f64,
        /// The model's reason.
        reason: String,
    },
}

/// A loop that was found.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopFinding {
    /// What kind.
    pub kind: LoopKind,
}

impl LoopFinding {
    /// A sentence for people and the error message (signatures shortened).
    pub fn message(&self) -> String {
        match &self.kind {
            LoopKind::Repeat { signature, times } => {
                format!("tool call loop: the same call {times} times in a row: {}", shorten(signature))
            }
            LoopKind::Cycle { period, signatures } => format!(
                "tool call loop: a cycle of {period} calls repeating: {}",
                signatures.iter().map(|s| shorten(s)).collect::<Vec<_>>().join(" -> ")
            ),
            LoopKind::Diagnosed { confidence, reason } => {
                format!("loop diagnosed by the model (confidence {confidence:.2}): {reason}")
            }
        }
    }

    /// The `loop_detected` error (runtime layer) that ends the run.
    pub fn to_error(&self) -> AgentError {
        AgentError::of(codes::LOOP_DETECTED, self.message())
    }
}

/// The answer of a check.
#[derive(Debug, Clone, PartialEq)]
pub enum LoopCheck {
    /// No loop.
    NoLoop,
    /// A loop.
    Loop(LoopFinding),
}

impl LoopCheck {
    /// True for a loop.
    pub fn is_loop(&self) -> bool {
        matches!(self, LoopCheck::Loop(_))
    }

    /// The `loop_detected` error, for a loop.
    pub fn to_error(&self) -> Option<AgentError> {
        match self {
            LoopCheck::Loop(finding) => Some(finding.to_error()),
            LoopCheck::NoLoop => None,
        }
    }
}

/// The signature window. Pure: no clock, no I/O.
#[derive(Debug, Clone)]
pub struct LoopDetector {
    window: usize,
    max_period: usize,
    history: VecDeque<String>,
    /// Calls being streamed: id and latest signature, in order of first appearance.
    streaming: Vec<(String, String)>,
}

impl LoopDetector {
    /// An empty detector.
    ///
    /// # Errors
    /// `config_invalid` when the window is outside `MIN_WINDOW..=MAX_WINDOW`.
    pub fn new(config: &LoopDetectorConfig) -> Result<Self, AgentError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&config.window) {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!("loop window must be between {MIN_WINDOW} and {MAX_WINDOW}, got {}", config.window),
            ));
        }
        Ok(LoopDetector {
            window: config.window,
            max_period: DEFAULT_MAX_CYCLE_PERIOD,
            history: VecDeque::new(),
            streaming: Vec::new(),
        })
    }

    /// A detector that continues from a persisted window (oldest first). Extra old entries are
    /// dropped.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn from_window(config: &LoopDetectorConfig, window: Vec<String>) -> Result<Self, AgentError> {
        let mut detector = LoopDetector::new(config)?;
        for signature in window {
            // A window saved before signatures were compacted holds them whole.
            detector.push(compact(signature));
        }
        Ok(detector)
    }

    /// The same detector looking for cycles up to `max_period` (1 turns cycle detection off;
    /// default [`DEFAULT_MAX_CYCLE_PERIOD`]).
    ///
    /// # Errors
    /// `config_invalid` for a period of 0 or above 3.
    pub fn with_max_cycle_period(mut self, max_period: usize) -> Result<Self, AgentError> {
        if !(1..=DEFAULT_MAX_CYCLE_PERIOD).contains(&max_period) {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!(
                    "loop cycle period must be between 1 and {DEFAULT_MAX_CYCLE_PERIOD}, got {max_period}"
                ),
            ));
        }
        self.max_period = max_period;
        while self.history.len() > self.capacity() {
            self.history.pop_front();
        }
        Ok(self)
    }

    /// The window to persist: the counted signatures, oldest first (calls still streaming are not
    /// in it).
    pub fn window(&self) -> Vec<String> {
        self.history.iter().cloned().collect()
    }

    /// Forgets everything (a new run).
    pub fn reset(&mut self) {
        self.history.clear();
        self.streaming.clear();
    }

    /// Notes the latest signature of a call still being streamed. Counts nothing; only the
    /// signature present at [`commit`](Self::commit) counts.
    pub fn update(&mut self, call_id: &str, signature: impl Into<String>) {
        let signature = signature.into();
        match self.streaming.iter_mut().find(|(id, _)| id == call_id) {
            Some(slot) => slot.1 = signature,
            None => self.streaming.push((call_id.to_string(), signature)),
        }
    }

    /// Counts a streamed call's final signature once, then checks. An id that was never updated
    /// changes nothing.
    pub fn commit(&mut self, call_id: &str) -> LoopCheck {
        if let Some(pos) = self.streaming.iter().position(|(id, _)| id == call_id) {
            let (_, signature) = self.streaming.remove(pos);
            self.push(signature);
        }
        self.check()
    }

    /// Forgets a streamed call that will not be counted (the stream broke off).
    pub fn discard(&mut self, call_id: &str) {
        self.streaming.retain(|(id, _)| id != call_id);
    }

    /// Counts a final call signature once (`update` + `commit`), then checks both rules.
    pub fn record(&mut self, call_id: &str, signature: impl Into<String>) -> LoopCheck {
        self.discard(call_id);
        self.push(signature.into());
        self.check()
    }

    /// Counts a final call, then checks both rules.
    pub fn record_call(&mut self, call: &ToolCall) -> LoopCheck {
        self.record(&call.id, call_signature(call))
    }

    /// Counts the calls of one model answer, in call order: the identical-in-a-row rule is
    /// checked after each call (the first finding is kept; the rest of the batch is still
    /// counted), cycles once the whole batch is in. What a runtime uses: a cycle is judged on
    /// whole answers, never on a prefix of one.
    pub fn record_batch<I, S>(&mut self, signatures: I) -> LoopCheck
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut found = None;
        for signature in signatures {
            self.push(signature.into());
            if found.is_none() {
                found = self.repeat();
            }
        }
        match found.or_else(|| self.cycle()) {
            Some(finding) => LoopCheck::Loop(finding),
            None => LoopCheck::NoLoop,
        }
    }

    /// Checks the window as it is (both rules).
    pub fn check(&self) -> LoopCheck {
        match self.repeat().or_else(|| self.cycle()) {
            Some(finding) => LoopCheck::Loop(finding),
            None => LoopCheck::NoLoop,
        }
    }

    /// The last `window` signatures all identical.
    fn repeat(&self) -> Option<LoopFinding> {
        let len = self.history.len();
        if len < self.window {
            return None;
        }
        let last = &self.history[len - 1];
        self.history
            .iter()
            .skip(len - self.window)
            .all(|e| e == last)
            .then(|| LoopFinding { kind: LoopKind::Repeat { signature: last.clone(), times: self.window } })
    }

    /// The last `max(window, CYCLE_TURNS * p)` signatures periodic with a period `p` of 2 up to
    /// the maximum, not all identical; the smallest such period.
    fn cycle(&self) -> Option<LoopFinding> {
        let len = self.history.len();
        for period in 2..=self.max_period {
            let span = self.window.max(CYCLE_TURNS * period);
            if len < span {
                continue;
            }
            let start = len - span;
            let periodic = (start + period..len).all(|i| self.history[i] == self.history[i - period]);
            // A turn of identical signatures is a repeat (shorter than the window), not a cycle.
            let varied = (start + 1..start + period).any(|i| self.history[i] != self.history[start]);
            if periodic && varied {
                let signatures = (start..start + period).map(|i| self.history[i].clone()).collect();
                return Some(LoopFinding { kind: LoopKind::Cycle { period, signatures } });
            }
        }
        None
    }

    fn push(&mut self, signature: String) {
        self.history.push_back(signature);
        while self.history.len() > self.capacity() {
            self.history.pop_front();
        }
    }

    /// What the checks look at: the window, or the turns of the longest cycle.
    fn capacity(&self) -> usize {
        self.window.max(CYCLE_TURNS * self.max_period)
    }
}

fn shorten(signature: &str) -> String {
    const MAX: usize = 120;
    if signature.len() <= MAX {
        return signature.to_string();
    }
    let end = crate::text::floor_char_boundary(signature, MAX);
    format!("{}...", &signature[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detector(window: usize) -> LoopDetector {
        LoopDetector::new(&LoopDetectorConfig { window }).unwrap()
    }

    #[test]
    fn a_smaller_period_is_reported_first() {
        let mut d = detector(4);
        let mut last = LoopCheck::NoLoop;
        for (i, s) in ["a", "b", "a", "b", "a", "b"].iter().enumerate() {
            last = d.record(&i.to_string(), *s);
        }
        assert_eq!(
            last,
            LoopCheck::Loop(LoopFinding {
                kind: LoopKind::Cycle { period: 2, signatures: vec!["a".into(), "b".into()] }
            })
        );
    }

    #[test]
    fn history_is_bounded() {
        let mut d = detector(5);
        for i in 0..100 {
            d.record(&i.to_string(), format!("s{i}"));
        }
        assert_eq!(d.window().len(), 9, "three turns of a cycle of 3");
        let off = d.clone().with_max_cycle_period(1).unwrap();
        assert_eq!(off.window().len(), 5, "cycles off: the window alone");
        assert_eq!(d.window().last().map(String::as_str), Some("s99"));
    }

    #[test]
    fn a_batch_is_judged_for_cycles_once_it_is_whole() {
        // `a,b | a,b | a,b`: three turns, whether counted per call or per batch.
        let mut d = detector(5);
        assert_eq!(d.record_batch(["a", "b"]), LoopCheck::NoLoop);
        assert_eq!(d.record_batch(["a", "b"]), LoopCheck::NoLoop);
        assert!(d.record_batch(["a", "b"]).is_loop());
        // `a,b,a,b,a,b` then `c` in one answer: per call, the prefix was a cycle; per batch, not.
        let mut per_call = detector(5);
        let mut per_batch = detector(5);
        let calls = ["a", "b", "a", "b", "a", "b", "c"];
        assert!(calls.iter().enumerate().any(|(i, s)| per_call.record(&i.to_string(), *s).is_loop()));
        assert_eq!(per_batch.record_batch(calls), LoopCheck::NoLoop);
        // Five identical calls in a row inside one answer stay a loop, even if it goes on.
        let mut d = detector(5);
        let LoopCheck::Loop(f) = d.record_batch(["x", "x", "x", "x", "x", "y"]) else { panic!() };
        assert_eq!(f.kind, LoopKind::Repeat { signature: "x".into(), times: 5 });
        assert_eq!(d.window().last().map(String::as_str), Some("y"), "the whole batch is counted");
    }

    #[test]
    fn long_signatures_are_shortened_in_messages_on_char_boundaries() {
        let finding = LoopFinding { kind: LoopKind::Repeat { signature: "é".repeat(200), times: 5 } };
        assert!(finding.message().ends_with("..."));
        assert_eq!(finding.to_error().code, codes::LOOP_DETECTED);
    }
}
