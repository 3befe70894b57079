//! arkagent: the tool-calling core of an LLM agent for HarmonyOS apps.
//!
//! An app registers tools (a [`ToolDefinition`] the model sees and a [`ToolExecutor`] that runs in
//! the app); the runtime asks an OpenAI-compatible model with them, assembles the calls it returns,
//! runs them through hooks, the approval policy, the registry's checks and the schema, executes
//! them, feeds the results back, detects loops, persists state crash-safely and stops at a round
//! limit.
//!
//! # Layout
//! - [`error`]: [`AgentError`] (layer + stable code + message) and the one table of codes.
//! - [`message`]: conversation messages, tool calls, usage.
//! - [`json`]: limits for untrusted JSON and the RFC 8785 canonical form.
//! - [`schema`]: the whitelisted JSON-Schema validator (compiled once per tool).
//! - [`tool`]: the tool contract and the [`ToolRegistry`].
//! - [`approval`]: the approval policy and the frozen batch.
//! - [`hook`]: lifecycle hooks and their pipeline.
//! - [`logging`]: the process logger behind the `log` facade (hilog on OHOS, stderr elsewhere)
//!   and the redaction of secrets from every line.
//! - [`loop_detect`]: the loop detector.
//! - [`state`]: the versioned state, its journal events and the [`StateStore`](state::StateStore)
//!   (load, commit, delete, lease, list).
//! - [`provider`]: the [`ChatModel`](provider::ChatModel) trait, the OpenAI-compatible client, SSE
//!   assembly and the scripted model.
//! - [`agent`]: the run state machine and its driver, and the listing of stored sessions
//!   ([`Agent::list_sessions`](agent::Agent::list_sessions)).
//! - `napi` (feature `napi`): the binding to ArkTS; adapters only.

pub mod agent;
pub mod approval;
pub mod error;
pub mod hook;
pub mod json;
pub mod logging;
pub mod loop_detect;
pub mod message;
pub mod provider;
pub mod schema;
pub mod state;
mod text;
pub mod tool;

#[cfg(feature = "napi")]
mod napi;
// The binding's pure decoding of the bytes a JS engine writes for a string, whose unit tests
// must run in plain `cargo test` (a test build with the `napi` feature cannot link).
#[cfg(all(test, not(feature = "napi")))]
#[path = "napi/engine_utf8.rs"]
mod napi_engine_utf8;

pub use error::{codes, AgentError, ErrorLayer};
pub use message::{ChatMessage, ToolCall, Usage};
pub use tool::{
    CancellationSignal, ContentPart, RiskLevel, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry,
    ToolResult,
};

/// The code blocks of README.md as doctests (`cargo test --doc`): its Rust example must compile as
/// written.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
