//! The request body of `POST /chat/completions`. Borrowed from the domain request, so building it
//! copies nothing large; `None` and empty fields are never serialised, but for one: an assistant
//! message's `content`, written as `null` beside tool calls (see [`WireMessage::Assistant`]).

use crate::tool::ParametersSchema;
use serde::Serialize;
use std::borrow::Cow;

/// The whole request body.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatCompletionRequest<'a> {
    /// The model name.
    pub model: &'a str,
    /// The conversation.
    pub messages: Vec<WireMessage<'a>>,
    /// The tools (left out when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool<'a>>,
    /// Tool choice (only sent with tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<WireToolChoice<'a>>,
    /// Whether the model may call several tools in one answer (only sent with tools: OpenAI
    /// refuses it without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Completion token limit under its classic name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Completion token limit under OpenAI's newer name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// True for a streamed (SSE) answer; left out when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Streaming options (usage in a final chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// DashScope's thinking switch (not an OpenAI field): only sent as `false`, on the requests of
    /// the models that need it to be off (see [`ProviderQuirks::thinking_off_unstreamed`] and
    /// [`ProviderQuirks::thinking_off_for_forced_tool_choice`]).
    ///
    /// [`ProviderQuirks::thinking_off_unstreamed`]: crate::provider::ProviderQuirks::thinking_off_unstreamed
    /// [`ProviderQuirks::thinking_off_for_forced_tool_choice`]:
    ///     crate::provider::ProviderQuirks::thinking_off_for_forced_tool_choice
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_thinking: Option<bool>,
    /// Moonshot's thinking switch (not an OpenAI field): only sent as `{"type": "disabled"}`, where
    /// [`ProviderQuirks::thinking_switch`](crate::provider::ProviderQuirks::thinking_switch) says
    /// so, for the same reasons as `enable_thinking`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingOff>,
}

/// `"thinking": {"type": "disabled"}`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ThinkingOff {
    /// Always `"disabled"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// `stream_options`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct StreamOptions {
    /// Ask for a final usage-only chunk.
    pub include_usage: bool,
}

/// One message on the wire, tagged by `role`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum WireMessage<'a> {
    /// `role=system`.
    System {
        /// The text.
        content: &'a str,
    },
    /// `role=user`.
    User {
        /// The text.
        content: &'a str,
    },
    /// `role=assistant`, with text, tool calls or both (an answer with neither is never sent: see
    /// [`crate::provider::convert::to_wire_request`]).
    Assistant {
        /// The text; always written, as `null` when there is none (a message with only tool calls):
        /// OpenAI's own SDKs send it so, and gateways (one-api, langchain4j) reject a tool-call
        /// message without a `content` key.
        content: Option<&'a str>,
        /// Reasoning text: only sent where the provider requires it (DeepSeek thinking mode).
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<&'a str>,
        /// The calls, in order.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    /// `role=tool`: a result paired with its call id.
    Tool {
        /// The call this answers.
        tool_call_id: &'a str,
        /// The result text.
        content: &'a str,
        /// The tool name, for gateways that want it (a preset quirk); a stand-in for a name
        /// model APIs refuse (see `provider::convert::wire_call_name`).
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<Cow<'a, str>>,
    },
}

/// A call inside an assistant message.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WireToolCall<'a> {
    /// The call id.
    pub id: &'a str,
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Name and raw arguments.
    pub function: WireFunctionCall<'a>,
}

/// `function` of a call.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WireFunctionCall<'a> {
    /// Tool name: the call's, or a stand-in for one model APIs refuse (see
    /// `provider::convert::wire_call_name`).
    pub name: Cow<'a, str>,
    /// The arguments text as the model produced it when it is a JSON object within the request's
    /// argument limits (the registry's), else `"{}"` (see
    /// [`crate::provider::convert::wire_arguments`]).
    pub arguments: &'a str,
}

/// One `tools` entry.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WireTool<'a> {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function.
    pub function: WireFunction<'a>,
}

/// `function` of a tool.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WireFunction<'a> {
    /// Name.
    pub name: &'a str,
    /// Description.
    pub description: &'a str,
    /// JSON Schema of the arguments: the text the app registered, in its key order, when it gave
    /// text (see [`ParametersSchema`]).
    pub parameters: &'a ParametersSchema,
}

/// `tool_choice`: a mode string or a named function.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum WireToolChoice<'a> {
    /// `"auto"`, `"none"` or `"required"`.
    Mode(&'static str),
    /// `{"type":"function","function":{"name":...}}`.
    Function {
        /// Always `"function"`.
        #[serde(rename = "type")]
        kind: &'static str,
        /// The function.
        function: WireToolChoiceFunction<'a>,
    },
}

/// The function named by `tool_choice`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WireToolChoiceFunction<'a> {
    /// Tool name.
    pub name: &'a str,
}
