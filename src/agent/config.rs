//! Run limits and model options of an agent.

use crate::provider::ToolChoice;
use std::time::Duration;

/// The answer recorded when a run reaches its round limit (the seed's fixed fallback).
pub const MAX_ROUNDS_FALLBACK: &str = "已多次调用工具仍未得到结论，请稍后重试或联系人工客服。";

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Model rounds per run before the fallback answer (default 10).
    pub max_rounds: u32,
    /// The answer recorded at the round limit.
    pub max_rounds_fallback: String,
    /// A system message put first in a new session.
    pub system_prompt: Option<String>,
    /// Stream the model's answer (events per delta) instead of one request/response.
    pub streaming: bool,
    /// Calls of an all-safe batch that run at once (default 4).
    pub max_parallel_tools: usize,
    /// Per-call timeout unless the definition sets its own (default 60 s). `delegate_task` is not
    /// timed: its worker may take several model rounds, and each of them, and each of its tool
    /// calls, has its own limit (the worker's rounds are capped by `max_rounds`); cancelling the
    /// run stops it.
    pub tool_timeout: Duration,
    /// Sampling temperature. `None` leaves it to the client: 0.2 with tools, or none for presets
    /// and models that refuse one (Moonshot, OpenAI's reasoning models) or when the client's
    /// `quirks.default_tool_temperature` is `None`.
    pub temperature: Option<f32>,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// Tool choice sent with every request.
    pub tool_choice: Option<ToolChoice>,
    /// Loop detector window (default 5).
    pub loop_window: usize,
    /// How deep sub-agents may nest (default 1: a worker cannot delegate).
    pub max_delegation_depth: u32,
    /// When set, each request carries only the newest history that fits this many (approximate)
    /// tokens; system messages and the last user message (the question of the current turn) stay,
    /// and an assistant message never loses its tool results. The state keeps the whole history.
    pub context_budget_tokens: Option<usize>,
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
            loop_window: 5,
            max_delegation_depth: 1,
            context_budget_tokens: None,
        }
    }
}
