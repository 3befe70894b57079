//! Run limits and model options of an agent, and their checks ([`AgentConfig::validate`]): a
//! value that would make a run fail later (a loop window of 1, a temperature the provider
//! refuses) is refused before the run starts, naming the field.

use crate::error::{codes, AgentError};
use crate::loop_detect::{DEFAULT_MAX_CYCLE_PERIOD, MAX_WINDOW, MIN_WINDOW};
use crate::provider::ToolChoice;
use std::time::Duration;

/// The answer recorded when a run reaches its round limit (the seed's fixed fallback).
pub const MAX_ROUNDS_FALLBACK: &str = "已多次调用工具仍未得到结论，请稍后重试或联系人工客服。";

/// The default of [`AgentConfig::max_result_bytes`]: 1 MiB, the arguments' default size limit.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Model rounds per run before the fallback answer (default 10; at least 1).
    pub max_rounds: u32,
    /// The answer recorded at the round limit.
    pub max_rounds_fallback: String,
    /// A system message put first in a new session. Empty or only whitespace and invisible
    /// characters (Unicode's `Default_Ignorable_Code_Point`: U+200B..U+200F, U+2060..U+206F,
    /// U+FEFF, U+00AD, U+3164, variation selectors, tags...), it is none (not sent: strict
    /// providers refuse a message without text).
    pub system_prompt: Option<String>,
    /// Stream the model's answer (events per delta) instead of one request/response.
    pub streaming: bool,
    /// Calls of an all-safe batch that run at once (default 4; 0 counts as 1).
    pub max_parallel_tools: usize,
    /// Per-call timeout unless the definition sets its own (default 60 s). `delegate_task` is not
    /// timed: its worker may take several model rounds, and each of them, and each of its tool
    /// calls, has its own limit (the worker's rounds are capped by `max_rounds`); cancelling the
    /// run stops it. Must not be zero.
    pub tool_timeout: Duration,
    /// Sampling temperature, from 0 to 2. `None` leaves it to the client: 0.2 with tools, or none for presets
    /// and models that refuse one (Moonshot, OpenAI's reasoning models) or when the client's
    /// `quirks.default_tool_temperature` is `None`.
    pub temperature: Option<f32>,
    /// Completion token limit (at least 1).
    pub max_tokens: Option<u32>,
    /// Tool choice sent with every request (when tools are registered). A named function must be
    /// a registered tool when a run starts, and at every request: one unregistered mid-run ends
    /// the run `failed` with `config_invalid` before a request names it (the history is kept). A worker of `delegate_task` asks without a named
    /// function it does not have (`delegate_task` itself, or a tool its factory took away).
    pub tool_choice: Option<ToolChoice>,
    /// `parallel_tool_calls` sent with every request that has tools: `Some(true)` lets the model
    /// call several tools in one answer where the provider's default is one,
    /// `Some(false)` asks for one at a time; `None` (default) leaves it out, the provider's
    /// default.
    pub parallel_tool_calls: Option<bool>,
    /// Loop detector window (default 5; from `MIN_WINDOW` 2 to `MAX_WINDOW` 1000): this many
    /// identical calls of the model in a row are a loop.
    pub loop_window: usize,
    /// The longest short cycle looked for (default 3: cycles `A,B` and `A,B,C`, each a loop after
    /// three whole turns that also fill the window; 1 turns cycle detection off; at most 3).
    pub loop_max_cycle_period: usize,
    /// How deep sub-agents may nest (default 1: a worker cannot delegate).
    pub max_delegation_depth: u32,
    /// When set, each request carries only the newest history that fits this many (approximate)
    /// tokens; system messages and the last user message (the question of the current turn) stay,
    /// and an assistant message never loses its tool results. The state keeps the whole history.
    pub context_budget_tokens: Option<usize>,
    /// The largest tool result recorded (default [`DEFAULT_MAX_RESULT_BYTES`]; at least 1), in
    /// bytes of [`ToolResult::size_bytes`](crate::tool::ToolResult::size_bytes), counted after
    /// the after-hooks (one may shrink a result). A larger one is recorded as the error
    /// `tool_result_too_large` instead: it would be saved in the state and sent with every later
    /// request of the session. A larger error result keeps its code and metadata, its text cut to
    /// fit after its `error [code]: ` (a limit under
    /// [`MAX_CUT_ERROR_BYTES`](crate::tool::MAX_CUT_ERROR_BYTES) may be passed, up to that size,
    /// by that code, its metadata's code, layer, approval id and the note saying what was cut;
    /// `tool_result_too_large` itself is cut so under a limit shorter than its message). What a
    /// before-hook's `Deny` or the policy's `Deny` answers a call with is held to it the same way.
    pub max_result_bytes: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_rounds: 10,
            max_rounds_fallback: MAX_ROUNDS_FALLBACK.to_string(),
            system_prompt: None,
            streaming: true,
            max_parallel_tools: 4,
            tool_timeout: Duration::from_secs(60),
            temperature: None,
            max_tokens: None,
            tool_choice: None,
            parallel_tool_calls: None,
            loop_window: 5,
            loop_max_cycle_period: DEFAULT_MAX_CYCLE_PERIOD,
            max_delegation_depth: 1,
            context_budget_tokens: None,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
    }
}

impl AgentConfig {
    /// Checks every value that the agent would otherwise accept and then fail on during a run
    /// (after the model was asked or tools ran). [`AgentBuilder::try_build`](super::AgentBuilder::try_build)
    /// calls it, and so does every run and resume before anything else. A `tool_choice` naming
    /// a tool is checked against the registered tools when a run starts (tools may be registered
    /// after the build).
    ///
    /// # Errors
    /// `config_invalid` naming the first bad field: `max_rounds` 0, a zero `tool_timeout`, a
    /// `temperature` that is not a number from 0 to 2, `max_tokens` 0, a `loop_window` outside
    /// 2..=1000, a `loop_max_cycle_period` outside 1..=3, `max_result_bytes` 0, an empty tool
    /// name in `tool_choice`.
    pub fn validate(&self) -> Result<(), AgentError> {
        let invalid = |message: String| Err(AgentError::of(codes::CONFIG_INVALID, message));
        if self.max_rounds == 0 {
            return invalid("max_rounds must be at least 1, got 0".into());
        }
        if self.tool_timeout.is_zero() {
            return invalid("tool_timeout must not be zero".into());
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return invalid(format!("temperature must be a number from 0 to 2, got {t}"));
            }
        }
        if self.max_tokens == Some(0) {
            return invalid("max_tokens must be at least 1, got 0".into());
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.loop_window) {
            return invalid(format!(
                "loop_window must be from {MIN_WINDOW} to {MAX_WINDOW}, got {}",
                self.loop_window
            ));
        }
        if !(1..=DEFAULT_MAX_CYCLE_PERIOD).contains(&self.loop_max_cycle_period) {
            return invalid(format!(
                "loop_max_cycle_period must be from 1 (cycles off) to {DEFAULT_MAX_CYCLE_PERIOD}, got {}",
                self.loop_max_cycle_period
            ));
        }
        if self.max_result_bytes == 0 {
            return invalid("max_result_bytes must be at least 1, got 0".into());
        }
        if let Some(ToolChoice::Function(name)) = &self.tool_choice {
            if name.trim().is_empty() {
                return invalid("tool_choice names a tool with an empty name".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_valid_and_each_bad_value_names_its_field() {
        assert_eq!(AgentConfig::default().validate(), Ok(()));
        let d = AgentConfig::default;
        for (config, field) in [
            (AgentConfig { loop_window: 1, ..d() }, "loop_window"),
            (AgentConfig { loop_max_cycle_period: 0, ..d() }, "loop_max_cycle_period"),
            (AgentConfig { temperature: Some(f32::INFINITY), ..d() }, "temperature"),
            (AgentConfig { max_result_bytes: 0, ..d() }, "max_result_bytes"),
            (AgentConfig { tool_choice: Some(ToolChoice::Function(" ".into())), ..d() }, "tool_choice"),
        ] {
            let err = config.validate().unwrap_err();
            assert_eq!(err.code, codes::CONFIG_INVALID);
            assert!(err.message.starts_with(field), "{}", err.message);
        }
    }
}
