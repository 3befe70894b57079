//! Client configuration: provider presets (base URL + quirk settings), the API key (kept private,
//! redacted from every Debug output), timeouts, retries, size limit and TLS roots.

use crate::error::{codes, AgentError};
use std::fmt;
use std::time::Duration;

/// The API key. It lives only here: `Debug` prints `ApiKey(<redacted>)`, there is no `Display`,
/// and nothing outside the provider can read it back.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key (an empty key sends no `Authorization` header, for local gateways).
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// True when no key was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("ApiKey(<none>)")
        } else {
            f.write_str("ApiKey(<redacted>)")
        }
    }
}

impl From<&str> for ApiKey {
    fn from(s: &str) -> Self {
        ApiKey::new(s)
    }
}

impl From<String> for ApiKey {
    fn from(s: String) -> Self {
        ApiKey::new(s)
    }
}

/// A known provider: its base URL and its quirks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderPreset {
    /// api.openai.com.
    OpenAi,
    /// DeepSeek (reasoning_content of tool-calling turns must go back in thinking mode).
    DeepSeek,
    /// Zhipu GLM (open.bigmodel.cn, `tool_choice` only supports "auto").
    Zhipu,
    /// Qwen through DashScope's OpenAI-compatible mode (a tool named `search`, which DashScope
    /// refuses, goes as `search_tool`: [`ProviderQuirks::renamed_tools`]).
    Qwen,
    /// Moonshot (Kimi: reasoning_content goes back, every turn's; K2.5+ fix their temperature).
    Moonshot,
    /// Any other OpenAI-compatible gateway (Pangu...): the base URL must be given.
    Custom,
}

impl ProviderPreset {
    /// Every preset.
    pub const ALL: [ProviderPreset; 6] = [
        ProviderPreset::OpenAi,
        ProviderPreset::DeepSeek,
        ProviderPreset::Zhipu,
        ProviderPreset::Qwen,
        ProviderPreset::Moonshot,
        ProviderPreset::Custom,
    ];

    /// The stable lowercase name (`openai`, `deepseek`, `zhipu`, `qwen`, `moonshot`, `custom`).
    pub fn name(self) -> &'static str {
        match self {
            ProviderPreset::OpenAi => "openai",
            ProviderPreset::DeepSeek => "deepseek",
            ProviderPreset::Zhipu => "zhipu",
            ProviderPreset::Qwen => "qwen",
            ProviderPreset::Moonshot => "moonshot",
            ProviderPreset::Custom => "custom",
        }
    }

    /// A preset from its name or a common alias (`glm`, `dashscope`, `kimi`, `pangu`), any case.
    ///
    /// # Errors
    /// `config_invalid` for an unknown name.
    pub fn from_name(name: &str) -> Result<Self, AgentError> {
        let n = name.trim().to_ascii_lowercase();
        Ok(match n.as_str() {
            "openai" => ProviderPreset::OpenAi,
            "deepseek" => ProviderPreset::DeepSeek,
            "zhipu" | "glm" | "bigmodel" => ProviderPreset::Zhipu,
            "qwen" | "dashscope" => ProviderPreset::Qwen,
            "moonshot" | "kimi" => ProviderPreset::Moonshot,
            "custom" | "pangu" => ProviderPreset::Custom,
            _ => {
                return Err(AgentError::of(codes::CONFIG_INVALID, format!("unknown provider preset: {name}")))
            }
        })
    }

    /// The preset's base URL (`/chat/completions` is appended); `None` for `Custom`.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderPreset::OpenAi => Some("https://api.openai.com/v1"),
            ProviderPreset::DeepSeek => Some("https://api.deepseek.com"),
            ProviderPreset::Zhipu => Some("https://open.bigmodel.cn/api/paas/v4"),
            ProviderPreset::Qwen => Some("https://dashscope.aliyuncs.com/compatible-mode/v1"),
            ProviderPreset::Moonshot => Some("https://api.moonshot.cn/v1"),
            ProviderPreset::Custom => None,
        }
    }

    /// The preset's quirk settings.
    ///
    /// - DeepSeek, Moonshot and Zhipu send `reasoning_content` back (see
    ///   [`ProviderQuirks::send_reasoning_content`] for the rule and its sources); Moonshot every
    ///   turn's ([`ProviderQuirks::reasoning_of_every_turn`]).
    /// - Moonshot sends no default temperature: Kimi K2.5 and later accept only their fixed value
    ///   (1.0 thinking, 0.6 otherwise) and answer 400 "invalid temperature: only 1 is allowed for
    ///   this model" to 0.2; older moonshot-v1 models then use their own default.
    /// - OpenAI puts the token limit in `max_completion_tokens`; Zhipu takes only `tool_choice:
    ///   "auto"`; Moonshot takes no `"required"` (Kimi's tool choice guide: only K3 takes it; see
    ///   [`quirks_for_model`](Self::quirks_for_model) for K3 and the models that always think).
    pub fn quirks(self) -> ProviderQuirks {
        let base = ProviderQuirks::default();
        match self {
            ProviderPreset::OpenAi => {
                ProviderQuirks { max_tokens_field: MaxTokensField::MaxCompletionTokens, ..base }
            }
            ProviderPreset::DeepSeek => ProviderQuirks { send_reasoning_content: true, ..base },
            ProviderPreset::Zhipu => ProviderQuirks {
                tool_choice: ToolChoiceSupport::AutoOnly,
                send_reasoning_content: true,
                ..base
            },
            ProviderPreset::Moonshot => ProviderQuirks {
                send_reasoning_content: true,
                reasoning_of_every_turn: true,
                default_tool_temperature: None,
                tool_choice: ToolChoiceSupport::NoRequired,
                thinking_switch: ThinkingSwitch::ThinkingType,
                ..base
            },
            ProviderPreset::Qwen => ProviderQuirks { renamed_tools: &[("search", "search_tool")], ..base },
            ProviderPreset::Custom => base,
        }
    }

    /// The preset's quirks for one model: [`quirks`](Self::quirks), except that
    /// - OpenAI's reasoning models (`o1`, `o3`, `o4-mini`..., `gpt-5*` but not `gpt-5-chat*`) get
    ///   no default temperature, since they refuse any value but their default ("Unsupported
    ///   value: 'temperature' does not support 0.2 with this model. Only the default (1) value is
    ///   supported"; o3-mini refuses the parameter itself);
    /// - Qwen's open-source Qwen3 hybrid models on DashScope (`qwen3-32b`, `qwen3-235b-a22b`...)
    ///   get [`thinking_off_unstreamed`](ProviderQuirks::thinking_off_unstreamed);
    /// - those and the Qwen3.5 and later models (`qwen3.5-plus`, `qwen3.7-max`..., thinking on by
    ///   default) get
    ///   [`thinking_off_for_forced_tool_choice`](ProviderQuirks::thinking_off_for_forced_tool_choice);
    /// - DashScope's thinking-only models (`qwq-*`, `qvq-*`, `*-thinking*`) get
    ///   [`stream_only`](ProviderQuirks::stream_only);
    /// - Moonshot's Kimi K2.5 and K2.6 (`kimi-k2.5*`, `kimi-k2.6*`, thinking on by default) get
    ///   [`thinking_off_for_forced_tool_choice`](ProviderQuirks::thinking_off_for_forced_tool_choice)
    ///   (for a named function; they take no `"required"`); Kimi K3 (`kimi-k3*`) takes
    ///   `"required"` but no named function ([`ToolChoiceSupport::NoNamed`]); the models that
    ///   always think and cannot turn it off (`kimi-k2.7-code*`, `kimi-k2-thinking*`) take
    ///   neither ([`ToolChoiceSupport::AutoOrNone`]). Sources: Kimi's tool choice guide as quoted
    ///   by agentscope-ai/agentscope-java#2320 ("`kimi-k3` supports `auto` / `none` /
    ///   `required`"), UKGovernmentBEIS/inspect_ai#5152 (a probe of each model: "tool_choice
    ///   'required' is incompatible with thinking enabled" on kimi-k2.6 and kimi-k2.7-code),
    ///   AstrBotDevs/AstrBot#7805.
    pub fn quirks_for_model(self, model: &str) -> ProviderQuirks {
        let mut quirks = self.quirks();
        if self == ProviderPreset::OpenAi && is_openai_reasoning_model(model) {
            quirks.default_tool_temperature = None;
        }
        if self == ProviderPreset::Qwen && is_qwen3_open_source_hybrid(model) {
            quirks.thinking_off_unstreamed = true;
            quirks.thinking_off_for_forced_tool_choice = true;
        }
        if self == ProviderPreset::Qwen && is_qwen3_point_release(model) {
            quirks.thinking_off_for_forced_tool_choice = true;
        }
        if self == ProviderPreset::Qwen && is_dashscope_thinking_only(model) {
            quirks.stream_only = true;
        }
        if self == ProviderPreset::Moonshot {
            let m = model.trim().to_ascii_lowercase();
            if m.starts_with("kimi-k3") {
                quirks.tool_choice = ToolChoiceSupport::NoNamed;
            } else if m.starts_with("kimi-k2.7-code") || m.starts_with("kimi-k2-thinking") {
                quirks.tool_choice = ToolChoiceSupport::AutoOrNone;
            } else if m.starts_with("kimi-k2.5") || m.starts_with("kimi-k2.6") {
                quirks.thinking_off_for_forced_tool_choice = true;
            }
        }
        quirks
    }
}

/// True for DashScope's names of its thinking-only models: QwQ and QVQ (`qwq-plus`, `qwq-32b`,
/// `qvq-max`...) and the `-thinking` variants (`qwen3-235b-a22b-thinking-2507`,
/// `qwen3-next-80b-a3b-thinking`, `qwen3-vl-plus-thinking`...), whose thinking cannot be turned off
/// (help.aliyun.com/zh/model-studio/deep-thinking: "仅思考模式").
fn is_dashscope_thinking_only(model: &str) -> bool {
    let m = model.trim().to_ascii_lowercase();
    m.starts_with("qwq-") || m.starts_with("qvq-") || m.contains("-thinking")
}

/// True for DashScope's names of the open-source Qwen3 hybrid-thinking models: `qwen3-<n>b`, or
/// `qwen3-<n>b-a<m>b` for the MoE ones (`qwen3-32b`, `qwen3-1.7b`, `qwen3-235b-a22b`), nothing
/// after. Not the 2507 `-instruct-` (no thinking) and `-thinking-` (thinking only: "The value of
/// the enable_thinking parameter is restricted to True") models, nor `qwen3-max`, `qwen3.5-*`...
fn is_qwen3_open_source_hybrid(model: &str) -> bool {
    // `<digits>[.<digits>]b`: a parameter count.
    fn size(s: &str) -> bool {
        let Some(n) = s.strip_suffix('b') else { return false };
        let mut parts = n.split('.');
        let digits =
            |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        digits(parts.next()) && parts.next().is_none_or(|p| digits(Some(p))) && parts.next().is_none()
    }
    let m = model.trim().to_ascii_lowercase();
    let Some(rest) = m.strip_prefix("qwen3-") else { return false };
    match rest.split_once("-a") {
        Some((total, active)) => size(total) && size(active),
        None => size(rest),
    }
}

/// True for DashScope's names of the Qwen3.x models (`qwen3.5-plus`, `qwen3.6-plus-2026-04-02`,
/// `qwen3.7-max`, `qwen3.5-397b-a17b`...), hybrid-thinking models with thinking on by default
/// ("Qwen3.7, Qwen3.6, Qwen3.5 (enabled by default)":
/// <https://docs.qwencloud.com/developer-guides/text-generation/thinking>); not a `-thinking`
/// (thinking-only) variant, which refuses to turn thinking off.
fn is_qwen3_point_release(model: &str) -> bool {
    let m = model.trim().to_ascii_lowercase();
    m.strip_prefix("qwen3.").is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        && !m.contains("thinking")
}

/// True for OpenAI model names of its reasoning families: `o<digit>` alone or followed by `-`,
/// and `gpt-5*` except the `gpt-5-chat*` models (which take a temperature).
fn is_openai_reasoning_model(model: &str) -> bool {
    let m = model.trim().to_ascii_lowercase();
    let o_series = m.strip_prefix('o').is_some_and(|rest| {
        let mut chars = rest.chars();
        chars.next().is_some_and(|c| c.is_ascii_digit()) && matches!(chars.next(), None | Some('-'))
    });
    let gpt5 = m.starts_with("gpt-5") && !m.contains("-chat");
    o_series || gpt5
}

/// Which name the completion token limit goes under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens` (most compatible providers).
    #[default]
    MaxTokens,
    /// `max_completion_tokens` (OpenAI; required by its reasoning models).
    MaxCompletionTokens,
}

/// What `tool_choice` values a provider accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolChoiceSupport {
    /// auto, none, required and a named function.
    #[default]
    Full,
    /// Only `"auto"`: `"none"` sends no tools at all (so no call can come back), `"required"` and a
    /// named function are left out (with a warning in the log) and the model chooses.
    AutoOnly,
    /// auto, none and a named function: `"required"` is left out (with a warning in the log) and
    /// the model chooses (Kimi K2.x).
    NoRequired,
    /// auto, none and required: a named function goes as `"required"` (with a warning in the
    /// log): a call is still forced, but the model picks the tool (Kimi K3).
    NoNamed,
    /// auto and none: `"required"` and a named function are left out (with a warning in the log)
    /// and the model chooses (Kimi's models that always think and take neither).
    AutoOrNone,
}

/// How a provider's thinking is turned off, where a quirk asks for it
/// ([`ProviderQuirks::thinking_off_unstreamed`],
/// [`ProviderQuirks::thinking_off_for_forced_tool_choice`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ThinkingSwitch {
    /// DashScope's `"enable_thinking": false`.
    #[default]
    EnableThinking,
    /// `"thinking": {"type": "disabled"}` (Moonshot's Kimi K2.5 and K2.6).
    ThinkingType,
}

/// How a provider departs from OpenAI's request format. Responses need no settings: stream
/// assembly normalises every known difference by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProviderQuirks {
    /// Send assistant `reasoning_content` back: for every assistant message that called tools (in
    /// every turn) and for every assistant message of the current turn (after the last user
    /// message); the reasoning of earlier turns' final answers stays out. A message that called
    /// tools without reasoning (a model or mode that gave none, an empty `reasoning_content`
    /// from DeepSeek V4) is sent with an empty one; other messages without reasoning are sent
    /// without the field.
    ///
    /// Why this rule: DeepSeek's thinking mode requires the reasoning of a turn that called tools
    /// "in all subsequent requests" and ignores that of turns without tool calls
    /// (api-docs.deepseek.com/guides/thinking_mode, "Tool Calls"); without it the API answers 400
    /// "Missing `reasoning_content` field in the assistant message". Moonshot's thinking models
    /// (kimi-k2-thinking, kimi-k2.5+) answer 400 "thinking is enabled but reasoning_content is
    /// missing in assistant tool call message at index N" (continuedev/continue#11600) and their
    /// guide says to keep `reasoning_content` in the context. Zhipu's GLM-4.5+ think between tool
    /// calls ("interleaved thinking", on by default), and their guide says the reasoning content
    /// must be kept and returned with the tool results
    /// (<https://docs.bigmodel.cn/cn/guide/capabilities/thinking-mode>,
    /// <https://docs.z.ai/guides/capabilities/thinking-mode>); the reasoning of earlier turns is
    /// cleared by the standard endpoint anyway ("preserved thinking" is off there). The legacy
    /// deepseek-reasoner (R1) refused reasoning_content in input but had no tool calls, so the rule
    /// never sent it any. The empty field: DeepSeek answers that same 400 for a tool-calling
    /// message without the field even when the model gave no reasoning (HKUDS/nanobot#946, whose
    /// fix keeps an empty `reasoning_content`, with the same report for Kimi K2.5;
    /// agentjido/req_llm#660: "requires the reasoning_content field ... even if the value is
    /// empty"; continuedev/continue#11290 sends an empty string). Other providers may reject the
    /// field: off by default.
    pub send_reasoning_content: bool,
    /// With [`send_reasoning_content`](Self::send_reasoning_content): send the reasoning of every
    /// assistant message, earlier turns' final answers too (default false). For Moonshot: Kimi's
    /// guide says that with kimi-k2.7-code (whose "Preserved Thinking" is always on) "you must keep
    /// the reasoning_content of every historical assistant message in messages as-is"
    /// (<https://platform.kimi.ai/docs/guide/use-kimi-k2-thinking-model>); kimi-k2.6 keeps it when
    /// asked (`thinking.keep`) and otherwise leaves it out itself.
    pub reasoning_of_every_turn: bool,
    /// Send `stream_options: {"include_usage": true}` on streamed requests (default true). Turn it
    /// off for gateways that reject the parameter (new-api "Unknown parameter:
    /// 'stream_options'", Mistral 422); the run then has no token usage unless the provider
    /// reports it anyway.
    pub stream_usage: bool,
    /// Send `name` on `role=tool` messages (some gateways want it).
    pub tool_message_name: bool,
    /// Where the token limit goes.
    pub max_tokens_field: MaxTokensField,
    /// Which tool choices are accepted.
    pub tool_choice: ToolChoiceSupport,
    /// Temperature sent when tools are present and the request sets none (the seed advises <= 0.2).
    /// `None` sends no temperature unless the request sets one: for models that only accept their
    /// own default (OpenAI o-series and gpt-5, Kimi K2.5+).
    pub default_tool_temperature: Option<f32>,
    /// Turn thinking off on non-streamed requests (default false; set by
    /// [`ProviderPreset::quirks_for_model`] for DashScope's open-source Qwen3 models). Their
    /// thinking needs a stream ("Qwen3 open-source models require streaming":
    /// <https://docs.qwencloud.com/developer-guides/text-generation/thinking>), and a non-streamed
    /// request that does not turn it off is refused with 400 "parameter.enable_thinking must be
    /// set to false for non-streaming calls"
    /// (<https://docs.qwencloud.com/api-reference/preparation/error-messages>). Such a model answers
    /// non-streamed requests (`AgentConfig::streaming` off, the loop diagnosis) without
    /// reasoning; streamed requests leave the switch to its default.
    pub thinking_off_unstreamed: bool,
    /// Turn thinking off when the request forces a tool call (`tool_choice` `"required"` or a
    /// named function, as sent; default false; set by [`ProviderPreset::quirks_for_model`] for
    /// DashScope's Qwen3 hybrid-thinking models and Moonshot's Kimi K2.5 and K2.6). DashScope's
    /// thinking mode "only supports `tool_choice` set to "auto" or "none". To force a specific
    /// tool, disable thinking mode first by setting `enable_thinking` to `false`"
    /// (<https://docs.qwencloud.com/developer-guides/text-generation/function-calling>); otherwise
    /// the request is refused with 400 "tool_choice is one of the strings that should be
    /// ["none", "auto"]" (<https://docs.qwencloud.com/api-reference/preparation/error-messages>).
    /// Kimi refuses a named function with thinking on: 400 "tool_choice 'specified' is
    /// incompatible with thinking enabled" (UKGovernmentBEIS/inspect_ai#5152,
    /// can1357/oh-my-pi#1077).
    pub thinking_off_for_forced_tool_choice: bool,
    /// How thinking is turned off (default [`ThinkingSwitch::EnableThinking`]).
    pub thinking_switch: ThinkingSwitch,
    /// Send a non-streamed call ([`ChatModel::complete`](super::ChatModel::complete)) as a streamed
    /// request and read the answer whole from the stream (default false; set by
    /// [`ProviderPreset::quirks_for_model`] for DashScope's thinking-only models). DashScope says
    /// most deep-thinking models answer only streamed requests ("多数模型仅支持流式输出":
    /// help.aliyun.com/zh/model-studio/deep-thinking), and refuses a non-streamed one with 400
    /// "This model only support stream mode, please enable the stream parameter to access the
    /// model" (qwq-32b: browser-use/web-ui#390); the hybrid ones are answered non-streamed with
    /// their thinking off instead ([`thinking_off_unstreamed`](Self::thinking_off_unstreamed)),
    /// which the thinking-only ones refuse.
    pub stream_only: bool,
    /// Tools sent under another name: `(the app's name, the name on the wire)` pairs (default
    /// none). The request carries the wire name (the tool, its calls in the history, a
    /// `tool_choice` naming it) and the answer's calls get the app's name back, so nothing above
    /// the client sees it. The Qwen preset sends `search` as `search_tool`: DashScope refuses a
    /// tool named `search` with 400 "Tool names are not allowed to be \[search\]"
    /// (agno-agi/agno#4846, QwenLM/qwen-code#384, tailcallhq/forgecode#1580). A request that
    /// also has a tool under a wire name is refused (`config_invalid`) before it is sent.
    pub renamed_tools: &'static [(&'static str, &'static str)],
}

impl Default for ProviderQuirks {
    fn default() -> Self {
        ProviderQuirks {
            send_reasoning_content: false,
            reasoning_of_every_turn: false,
            stream_usage: true,
            tool_message_name: false,
            max_tokens_field: MaxTokensField::MaxTokens,
            tool_choice: ToolChoiceSupport::Full,
            default_tool_temperature: Some(0.2),
            thinking_off_unstreamed: false,
            thinking_off_for_forced_tool_choice: false,
            thinking_switch: ThinkingSwitch::EnableThinking,
            stream_only: false,
            renamed_tools: &[],
        }
    }
}

/// Timeouts of one model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP + TLS connection set-up.
    pub connect: Duration,
    /// From sending a request to the response head (includes connecting). Reached by a streamed
    /// request, the attempt is retried; by a non-streamed one (whose head waits for the whole
    /// answer), not.
    pub first_byte: Duration,
    /// Longest silence between two body chunks (SSE keep-alive comments count as data).
    pub idle: Duration,
    /// The whole call: every attempt, backoff and the whole body or stream.
    pub total: Duration,
    /// How long a stream may go on once its finish reason came, when the answer is complete and
    /// at most the usage chunk and `[DONE]` are still to come: counted from the answer's
    /// completion, and again from each usage report or piece of an event still coming (a usage
    /// chunk read a few bytes at a time); past it the answer is kept and the
    /// connection closed (as when the stream breaks off there). Keep-alives (SSE comments, blank
    /// lines, empty payloads or deltas, a repeated finish reason) do not extend it: a gateway that
    /// pings every few seconds and never sends `[DONE]` would otherwise hold the answer until
    /// the idle or total limit. The smaller of this and `idle` applies. Default 5 s, for every
    /// model: a reasoning model's `idle` (the total, 600 s) would otherwise hold a complete answer
    /// for up to 10 minutes behind a stalled gateway. Not once answer data (text, reasoning, a
    /// call fragment) has followed a finish reason: that provider sends them early (more calls may
    /// still come after a pause), and `idle` applies (keep-alives included, as before a finish
    /// reason).
    pub after_finish: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(600),
            after_finish: Duration::from_secs(5),
        }
    }
}

impl Timeouts {
    /// The default timeouts for `model`: [`Timeouts::default`], except for OpenAI's reasoning
    /// families (`o1`, `o3`, `o4-mini`..., `gpt-5*` but not `gpt-5-chat*`; through any preset, a
    /// gateway serves them the same way), whose first byte and idle limits are the total. Their
    /// reasoning is not streamed: a stream is silent from its head to the first output token, and
    /// a non-streamed answer's head comes when the whole answer is done; either takes minutes at
    /// a high reasoning effort (`gpt-5.2` tool-calling turns at medium effort "easily exceed" 30 s
    /// of silence: mezmo/aura issue #62). With 60 s limits such a turn failed with
    /// `provider_timeout`, after it was paid for. An app changes these limits with
    /// [`with_overrides`](Self::with_overrides) (the native module's `*TimeoutMs` options).
    pub fn for_model(model: &str) -> Self {
        let mut timeouts = Timeouts::default();
        if is_openai_reasoning_model(model) {
            timeouts.first_byte = timeouts.total;
            timeouts.idle = timeouts.total;
        }
        timeouts
    }
}

/// One of the four limits of [`Timeouts`] (names the limits of a [`TimeoutConflict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutLimit {
    /// [`Timeouts::connect`].
    Connect,
    /// [`Timeouts::first_byte`].
    FirstByte,
    /// [`Timeouts::idle`].
    Idle,
    /// [`Timeouts::total`].
    Total,
}

impl TimeoutLimit {
    /// The field's name in [`Timeouts`]: `connect`, `first_byte`, `idle`, `total`.
    pub fn name(self) -> &'static str {
        match self {
            TimeoutLimit::Connect => "connect",
            TimeoutLimit::FirstByte => "first_byte",
            TimeoutLimit::Idle => "idle",
            TimeoutLimit::Total => "total",
        }
    }
}

/// Limits an app sets on top of a model's default timeouts ([`Timeouts::for_model`]); `None`
/// keeps the default. Applied by [`Timeouts::with_overrides`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeoutOverrides {
    /// [`Timeouts::connect`].
    pub connect: Option<Duration>,
    /// [`Timeouts::first_byte`].
    pub first_byte: Option<Duration>,
    /// [`Timeouts::idle`].
    pub idle: Option<Duration>,
    /// [`Timeouts::total`].
    pub total: Option<Duration>,
    /// [`Timeouts::after_finish`] (checked against no other limit: the smaller of it and the idle
    /// limit applies).
    pub after_finish: Option<Duration>,
}

/// A limit set above the limit that bounds it (first byte and idle: the total; connect: the first
/// byte limit, which includes connecting): it could never be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {} timeout ({:?}) is above the {} timeout ({:?}{}), so it could never be reached",
    .limit.name(), .value, .bound.name(), .bound_value, if *.bound_set { "" } else { ", the default" }
)]
pub struct TimeoutConflict {
    /// The limit that was set.
    pub limit: TimeoutLimit,
    /// Its value.
    pub value: Duration,
    /// The limit that bounds it.
    pub bound: TimeoutLimit,
    /// The bound in effect.
    pub bound_value: Duration,
    /// True when the bound was set too; false when it is the model's default (possibly lowered to
    /// the total, as [`Timeouts::with_overrides`] says).
    pub bound_set: bool,
}

impl Timeouts {
    /// `self` (a model's defaults, [`Timeouts::for_model`]) with the limits `overrides` sets:
    /// - a limit set replaces the default;
    /// - a first byte or idle limit not set that equals the default total (OpenAI's reasoning
    ///   models, silent while they reason) follows the total, when that is set;
    /// - any other limit not set that is above the limit bounding it (first byte and idle: the
    ///   total; connect: the first byte limit, which includes connecting) is lowered to it. The
    ///   client does the same thing either way (the bound ends the call first); this keeps
    ///   `connect <= first_byte <= total` and `idle <= total` true of every result.
    ///
    /// # Errors
    /// [`TimeoutConflict`] when a limit that is set is above its bound (set or not): such a limit
    /// could never be reached, so it cannot be what the caller meant. Limits equal to their bound
    /// are accepted.
    pub fn with_overrides(self, overrides: TimeoutOverrides) -> Result<Timeouts, TimeoutConflict> {
        let total = overrides.total.unwrap_or(self.total);
        // The default of a limit bounded by the total: it follows a new total when it was the total.
        let under_total = |default: Duration| {
            if default >= self.total && overrides.total.is_some() {
                total
            } else {
                default.min(total)
            }
        };
        let first_byte = overrides.first_byte.unwrap_or_else(|| under_total(self.first_byte));
        let idle = overrides.idle.unwrap_or_else(|| under_total(self.idle));
        let connect = overrides.connect.unwrap_or(self.connect.min(first_byte));
        let checks = [
            (TimeoutLimit::FirstByte, overrides.first_byte, TimeoutLimit::Total, total, overrides.total),
            (TimeoutLimit::Idle, overrides.idle, TimeoutLimit::Total, total, overrides.total),
            (
                TimeoutLimit::Connect,
                overrides.connect,
                TimeoutLimit::FirstByte,
                first_byte,
                overrides.first_byte,
            ),
        ];
        for (limit, set, bound, bound_value, bound_set) in checks {
            if let Some(value) = set.filter(|v| *v > bound_value) {
                return Err(TimeoutConflict {
                    limit,
                    value,
                    bound,
                    bound_value,
                    bound_set: bound_set.is_some(),
                });
            }
        }
        let after_finish = overrides.after_finish.unwrap_or(self.after_finish);
        Ok(Timeouts { connect, first_byte, idle, total, after_finish })
    }
}

/// Retries on connect errors, a connection that broke before the response head, a streamed
/// request's first-byte timeout, 408, 409, 429 and 5xx (see
/// [`is_retried_status`](super::client::is_retried_status)), an error body sent with a 2xx that
/// stands for one of them, or as a response's `x-should-retry` header says, before anything of
/// the answer was handed out (the order of the rules: the [`client`](super::client) module doc).
/// One limit for all of them: `max_retries` counts every retry of a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = no retry).
    pub max_retries: u32,
    /// Backoff before the first retry.
    pub initial_backoff: Duration,
    /// Backoff cap.
    pub max_backoff: Duration,
    /// Random jitter: each backoff is scaled by a factor in `[1 - jitter, 1]`.
    pub jitter: f64,
    /// A wait asked for by `Retry-After` or `retry-after-ms` longer than this is not waited for
    /// (the error is returned instead).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            jitter: 0.5,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        RetryPolicy { max_retries: 0, ..RetryPolicy::default() }
    }

    /// The backoff before retry number `retry` (0-based): exponential, capped, with jitter.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2f64.powi(retry.min(30) as i32);
        let base = (self.initial_backoff.as_secs_f64() * factor).min(self.max_backoff.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let scale = 1.0 - jitter * fastrand::f64();
        Duration::from_secs_f64((base * scale).max(0.0))
    }
}

/// Everything the OpenAI-compatible client needs.
#[derive(Clone)]
pub struct ClientConfig {
    /// The provider preset (its quirks for the model are copied into `quirks`).
    pub preset: ProviderPreset,
    /// Base URL; `/chat/completions` is appended to its path (before a query, which is kept; a
    /// `#fragment` or a path already ending in `/chat/completions` is refused).
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The API key (redacted from Debug).
    pub api_key: ApiKey,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Retries.
    pub retry: RetryPolicy,
    /// Largest response body (or whole stream) accepted, in bytes.
    pub max_response_bytes: usize,
    /// Allow plain `http://` to hosts other than loopback.
    pub allow_insecure_http: bool,
    /// Extra trusted root certificates, PEM text (added to the bundled webpki roots).
    pub extra_root_pems: Vec<String>,
    /// Request quirks (from the preset, adjustable).
    pub quirks: ProviderQuirks,
}

impl ClientConfig {
    /// A config for a preset with its base URL (empty for `Custom`: set one with
    /// [`with_base_url`](Self::with_base_url)) and default timeouts (the model's:
    /// [`Timeouts::for_model`]), retries and limits.
    pub fn new(preset: ProviderPreset, model: impl Into<String>, api_key: impl Into<ApiKey>) -> Self {
        let model = model.into();
        ClientConfig {
            preset,
            base_url: preset.default_base_url().unwrap_or_default().to_string(),
            api_key: api_key.into(),
            timeouts: Timeouts::for_model(&model),
            retry: RetryPolicy::default(),
            max_response_bytes: 16 * 1024 * 1024,
            allow_insecure_http: false,
            extra_root_pems: Vec::new(),
            quirks: preset.quirks_for_model(&model),
            model,
        }
    }

    /// A `Custom` preset config for any OpenAI-compatible gateway (Pangu...).
    pub fn custom(base_url: impl Into<String>, model: impl Into<String>, api_key: impl Into<ApiKey>) -> Self {
        ClientConfig::new(ProviderPreset::Custom, model, api_key).with_base_url(base_url)
    }

    /// The same config with another base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// The same config with other timeouts.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The same config with another retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The same config with another response size limit.
    pub fn with_max_response_bytes(mut self, max: usize) -> Self {
        self.max_response_bytes = max;
        self
    }

    /// The same config with an extra trusted root (PEM).
    pub fn with_extra_root_pem(mut self, pem: impl Into<String>) -> Self {
        self.extra_root_pems.push(pem.into());
        self
    }

    /// Whether requests go to the preset's own cloud endpoint (its default base URL, give or
    /// take a trailing `/`), which refuses every request without a key. A custom base URL (a
    /// local server, a gateway) may need none.
    pub fn uses_preset_endpoint(&self) -> bool {
        let norm = |u: &str| u.trim().trim_end_matches('/').to_ascii_lowercase();
        self.preset.default_base_url().is_some_and(|d| norm(d) == norm(&self.base_url))
    }

    /// Checks the API key: a preset's own cloud endpoint needs one (see
    /// [`uses_preset_endpoint`](Self::uses_preset_endpoint)), so a config without one is refused
    /// when the client is built rather than at its first request (with `provider_auth`). A key
    /// given (not empty) must be the key as issued, which is visible ASCII only (`!` to `~`): no
    /// control character (a line break, tab, NUL, DEL: a line break or NUL could not even go into
    /// the `Authorization` header), no whitespace around it or inside it (Unicode's, the
    /// ideographic space of a Chinese input method included), not blank, and nothing else outside
    /// ASCII (a zero-width space or a byte order mark picked up with a copy, a look-alike letter),
    /// which would be sent raw in the header. Such a key is refused here, for a custom base URL
    /// too, rather than sent as is and answered 401 by the provider, far from the cause. No key at
    /// all (empty) is fine for a custom base URL (a local server, a gateway).
    ///
    /// # Errors
    /// `config_invalid` naming `api_key`: missing (empty or blank) for a preset's endpoint, blank,
    /// with whitespace around it, or the kind of character it holds and where (never the key).
    pub fn check_api_key(&self) -> Result<(), AgentError> {
        let key = self.api_key.expose();
        let refused = |why: String| Err(AgentError::of(codes::CONFIG_INVALID, format!("api_key: {why}")));
        if key.trim().is_empty() && self.uses_preset_endpoint() {
            return refused(format!(
                "required for the {} preset's endpoint ({}); only a custom base URL (a local \
                 server, a gateway) may go without one",
                self.preset.name(),
                self.base_url.trim()
            ));
        }
        if key.is_empty() {
            return Ok(());
        }
        if let Some(c) = key.chars().find(|c| c.is_control()) {
            let kind = match c {
                '\n' | '\r' => "a line break",
                '\0' => "a NUL byte",
                '\t' => "a tab",
                _ => "a control character",
            };
            return refused(format!("contains {kind}, which an API key never holds (a copy-paste slip?)"));
        }
        if key.trim().is_empty() {
            return refused("blank (only whitespace); leave it empty to send no key".into());
        }
        if key.trim() != key {
            return refused(
                "starts or ends with whitespace, which an API key never holds (a copy-paste slip?)".into(),
            );
        }
        if let Some((at, c)) = key.chars().enumerate().find(|(_, c)| !matches!(c, '!'..='~')) {
            let code = c as u32;
            let kind = match c {
                ' ' => "a space".to_string(),
                '\u{feff}' => "a byte order mark (U+FEFF)".to_string(),
                '\u{200b}'..='\u{200d}' | '\u{2060}' => format!("a zero-width character (U+{code:04X})"),
                c if c.is_whitespace() => format!("a non-ASCII space (U+{code:04X})"),
                _ => format!("a non-ASCII character (U+{code:04X})"),
            };
            let place = if at == 0 { "at its start".to_string() } else { format!("at character {}", at + 1) };
            return refused(format!(
                "contains {kind} {place}; an API key is visible ASCII only (a copy-paste slip?)"
            ));
        }
        Ok(())
    }

    /// The chat-completions endpoint URL, checked: `https://`, or `http://` to loopback
    /// (127.0.0.0/8, ::1, localhost) unless `allow_insecure_http`. `/chat/completions` goes after
    /// the base URL's path, before its query (`?api-version=...` of Azure-style gateways), which
    /// is kept.
    ///
    /// # Errors
    /// `config_invalid` for an empty, unparsable or non-HTTP URL, one with a `#fragment` (never
    /// sent: the path after it would be lost) or one whose path already ends in
    /// `/chat/completions` (it would be doubled), or an empty model; `insecure_url` for plain http
    /// to another host.
    pub fn endpoint(&self) -> Result<String, AgentError> {
        if self.model.trim().is_empty() {
            return Err(AgentError::of(codes::CONFIG_INVALID, "model: empty"));
        }
        let whole = self.base_url.trim();
        // The query and fragment start at the first `?` or `#`: neither can be in the authority,
        // which ends at either.
        let (base, query) = whole.split_at(whole.find(['?', '#']).unwrap_or(whole.len()));
        let base = base.trim_end_matches('/');
        if base.is_empty() {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                "base_url: empty (required for a custom provider)",
            ));
        }
        let (scheme, rest) = base.split_once("://").ok_or_else(|| {
            AgentError::of(codes::CONFIG_INVALID, format!("base_url: not a URL: {}", shown(base)))
        })?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host_port = authority.rsplit_once('@').map(|(_, h)| h).unwrap_or(authority);
        let host = if let Some(stripped) = host_port.strip_prefix('[') {
            stripped.split(']').next().unwrap_or("")
        } else {
            host_port.split(':').next().unwrap_or("")
        };
        if host.is_empty() {
            return Err(AgentError::of(codes::CONFIG_INVALID, format!("base_url: no host: {}", shown(base))));
        }
        match scheme.to_ascii_lowercase().as_str() {
            "https" => {}
            "http" => {
                // The host the HTTP client will connect to counts, as its (WHATWG) URL parser reads
                // it: `http://evil.example\@127.0.0.1/` goes to evil.example, whatever the split
                // above says, and `http://127.1/` or `http://2130706433/` to 127.0.0.1.
                let client_host = client_url_host(base);
                let loopback = client_host.as_deref().is_some_and(is_loopback_host);
                if !self.allow_insecure_http && !loopback {
                    let shown = client_host.as_deref().unwrap_or(host);
                    return Err(AgentError::of(
                        codes::INSECURE_URL,
                        format!(
                            "plain http:// to {shown} is only allowed for loopback hosts, unless allowed: \
                             allowInsecureHttp in the native config, allow_insecure_http in Rust's \
                             ClientConfig"
                        ),
                    ));
                }
            }
            other => {
                return Err(AgentError::of(
                    codes::CONFIG_INVALID,
                    format!("base_url: unsupported scheme {other}"),
                ))
            }
        }
        // Credentials in the URL would be sent to the server in clear form and shown wherever the
        // URL is (errors, logs, the app's config text); the key has its own place.
        if reqwest::Url::parse(base).is_ok_and(|u| !u.username().is_empty() || u.password().is_some()) {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                "base_url: user:password@ in the URL is not supported (the API key is given as the key)",
            ));
        }
        if query.contains('#') {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!(
                    "base_url: a #fragment is never sent to the server; give the base URL without it: {}",
                    shown(whole)
                ),
            ));
        }
        if base.to_ascii_lowercase().ends_with("/chat/completions") {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!(
                    "base_url: ends in /chat/completions, which the client adds; give the base URL \
                     without it (e.g. https://api.example.com/v1): {}",
                    shown(whole)
                ),
            ));
        }
        let endpoint = format!("{base}/chat/completions{query}");
        // What the HTTP client will parse. Its URL parser has no Unicode host names (idna_adapter
        // 1.0, see Cargo.toml), so such a name is a configuration error here, not a failed request.
        if let Err(e) = reqwest::Url::parse(&endpoint) {
            let hint = if host.is_ascii() {
                ""
            } else {
                " (give an internationalized host name in its punycode xn-- form)"
            };
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!("base_url: the HTTP client cannot parse it ({e}): {}{hint}", shown(base)),
            ));
        }
        Ok(endpoint)
    }
}

/// The host of a URL as the HTTP client parses it (IPv6 without brackets); `None` when it does not
/// parse or has no host.
fn client_url_host(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    Some(host.trim_start_matches('[').trim_end_matches(']').to_string())
}

/// True for `localhost`, 127.0.0.0/8 and ::1.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    if h == "localhost" || h.ends_with(".localhost") {
        return true;
    }
    match h.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

// By hand: the key is redacted by its type, credentials in a base URL by `shown`.
impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("preset", &self.preset)
            .field("base_url", &shown(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key)
            .field("timeouts", &self.timeouts)
            .field("retry", &self.retry)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("extra_root_pems", &self.extra_root_pems.len())
            .field("quirks", &self.quirks)
            .finish()
    }
}

/// A base URL as error messages and Debug output show it: anything before an `@` of its
/// authority (credentials) replaced by `***`.
pub(crate) fn shown(base: &str) -> String {
    let (scheme, rest) = base.split_once("://").unwrap_or(("", base));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) if scheme.is_empty() => format!("***{}", &rest[at..]),
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => base.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_names_round_trip() {
        for p in ProviderPreset::ALL {
            assert_eq!(ProviderPreset::from_name(p.name()).unwrap(), p);
            assert_eq!(serde_json::to_value(p).unwrap(), p.name());
        }
        assert_eq!(ProviderPreset::from_name(" GLM ").unwrap(), ProviderPreset::Zhipu);
        assert_eq!(ProviderPreset::from_name("pangu").unwrap(), ProviderPreset::Custom);
        assert_eq!(ProviderPreset::from_name("nope").unwrap_err().code, codes::CONFIG_INVALID);
    }

    #[test]
    fn preset_quirks() {
        let moonshot = ProviderPreset::Moonshot.quirks();
        assert!(moonshot.send_reasoning_content, "Kimi thinking models want reasoning_content back");
        assert!(moonshot.reasoning_of_every_turn, "kimi-k2.7-code keeps every turn's reasoning");
        for p in ProviderPreset::ALL.into_iter().filter(|p| *p != ProviderPreset::Moonshot) {
            assert!(!p.quirks().reasoning_of_every_turn, "{p:?}");
        }
        assert_eq!(moonshot.default_tool_temperature, None, "Kimi K2.5+ only accept their fixed temperature");
        let deepseek = ProviderPreset::DeepSeek.quirks();
        assert!(deepseek.send_reasoning_content);
        assert_eq!(deepseek.default_tool_temperature, Some(0.2));
        assert!(ProviderPreset::Zhipu.quirks().send_reasoning_content, "GLM's interleaved thinking");
        for p in [ProviderPreset::OpenAi, ProviderPreset::Qwen, ProviderPreset::Custom] {
            assert!(!p.quirks().send_reasoning_content, "{p:?}");
        }
        for p in [ProviderPreset::OpenAi, ProviderPreset::Zhipu, ProviderPreset::Qwen, ProviderPreset::Custom]
        {
            assert_eq!(p.quirks().default_tool_temperature, Some(0.2), "{p:?}");
            assert!(p.quirks().stream_usage, "{p:?}");
        }
    }

    #[test]
    fn openai_reasoning_models_wait_for_their_silent_reasoning() {
        let total = Timeouts::default().total;
        for (preset, model) in [
            (ProviderPreset::OpenAi, "gpt-5.2"),
            (ProviderPreset::OpenAi, "o3"),
            (ProviderPreset::OpenAi, "o4-mini-2025-04-16"),
            (ProviderPreset::Custom, "GPT-5-mini"),
        ] {
            let t = ClientConfig::new(preset, model, "k").timeouts;
            assert_eq!((t.first_byte, t.idle, t.total), (total, total, total), "{model}");
            assert_eq!(t.connect, Timeouts::default().connect, "{model}");
        }
        for (preset, model) in [
            (ProviderPreset::OpenAi, "gpt-4o"),
            (ProviderPreset::OpenAi, "gpt-5-chat-latest"),
            (ProviderPreset::DeepSeek, "deepseek-reasoner"),
            (ProviderPreset::Qwen, "qwen3-max"),
        ] {
            assert_eq!(ClientConfig::new(preset, model, "k").timeouts, Timeouts::default(), "{model}");
        }
    }

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn overrides_replace_the_limits_they_set_and_keep_the_others() {
        let d = Timeouts::default();
        assert_eq!(d.with_overrides(TimeoutOverrides::default()), Ok(d));
        let t = d.with_overrides(TimeoutOverrides { first_byte: ms(120_000), ..Default::default() }).unwrap();
        assert_eq!(t, Timeouts { first_byte: Duration::from_secs(120), ..d });
        let set = TimeoutOverrides {
            connect: ms(1),
            first_byte: ms(2),
            idle: ms(3),
            total: ms(3),
            after_finish: ms(4),
        };
        let t = d.with_overrides(set).unwrap();
        assert_eq!(
            (t.connect, t.first_byte, t.idle, t.total, t.after_finish),
            (ms(1).unwrap(), ms(2).unwrap(), ms(3).unwrap(), ms(3).unwrap(), ms(4).unwrap())
        );
    }

    #[test]
    fn the_limit_after_the_finish_reason_is_a_few_seconds_for_every_model() {
        for model in ["gpt-4o", "o3", "gpt-5.2", "deepseek-reasoner", ""] {
            let t = Timeouts::for_model(model);
            assert_eq!(t.after_finish, Duration::from_secs(5), "{model}");
            // Whatever the other limits are set to, it stays unless set.
            let o = TimeoutOverrides { total: ms(1_200_000), idle: ms(100), ..Default::default() };
            assert_eq!(t.with_overrides(o).unwrap().after_finish, Duration::from_secs(5), "{model}");
        }
        // The idle limit of a reasoning model is the total: the limit after the finish reason is
        // what keeps a stalled, complete answer from waiting for it.
        let o3 = Timeouts::for_model("o3");
        assert!(o3.after_finish < o3.idle / 100, "{o3:?}");
    }

    #[test]
    fn defaults_above_a_lower_total_are_lowered_to_it() {
        let t = Timeouts::default()
            .with_overrides(TimeoutOverrides { total: ms(300), ..Default::default() })
            .unwrap();
        assert_eq!(
            t,
            Timeouts {
                connect: ms(300).unwrap(),
                first_byte: ms(300).unwrap(),
                idle: ms(300).unwrap(),
                total: ms(300).unwrap(),
                after_finish: Duration::from_secs(5),
            }
        );
        // A default connect limit above a first byte limit that is set: lowered to it.
        let t = Timeouts::default()
            .with_overrides(TimeoutOverrides { first_byte: ms(500), ..Default::default() })
            .unwrap();
        assert_eq!((t.connect, t.first_byte), (ms(500).unwrap(), ms(500).unwrap()));
        // A raised total leaves the 60 s limits of an ordinary model alone.
        let t = Timeouts::for_model("gpt-4o")
            .with_overrides(TimeoutOverrides { total: ms(1_200_000), ..Default::default() })
            .unwrap();
        assert_eq!(
            (t.first_byte, t.idle, t.total),
            (Duration::from_secs(60), Duration::from_secs(60), Duration::from_secs(1200))
        );
    }

    #[test]
    fn reasoning_models_silent_limits_follow_the_total() {
        for total in [1_200_000, 90_000] {
            let t = Timeouts::for_model("o3")
                .with_overrides(TimeoutOverrides { total: ms(total), ..Default::default() })
                .unwrap();
            assert_eq!(
                (t.first_byte, t.idle, t.total),
                (ms(total).unwrap(), ms(total).unwrap(), ms(total).unwrap()),
                "{total}"
            );
            assert_eq!(t.connect, Duration::from_secs(10));
        }
        // A limit set still wins.
        let o = TimeoutOverrides { total: ms(1_200_000), idle: ms(300_000), ..Default::default() };
        let t = Timeouts::for_model("gpt-5.2").with_overrides(o).unwrap();
        assert_eq!((t.first_byte, t.idle), (Duration::from_secs(1200), Duration::from_secs(300)));
    }

    #[test]
    fn a_limit_set_above_its_bound_is_a_conflict() {
        let d = Timeouts::default();
        let e = d
            .with_overrides(TimeoutOverrides { first_byte: ms(2000), total: ms(1000), ..Default::default() })
            .unwrap_err();
        assert_eq!(
            (e.limit, e.bound, e.bound_value, e.bound_set),
            (TimeoutLimit::FirstByte, TimeoutLimit::Total, ms(1000).unwrap(), true)
        );
        assert_eq!(
            e.to_string(),
            "the first_byte timeout (2s) is above the total timeout (1s), so it could never be reached"
        );
        // Against the default total.
        let e = d.with_overrides(TimeoutOverrides { idle: ms(900_000), ..Default::default() }).unwrap_err();
        assert_eq!(
            (e.limit, e.bound, e.bound_value, e.bound_set),
            (TimeoutLimit::Idle, TimeoutLimit::Total, d.total, false)
        );
        assert!(e.to_string().ends_with("(600s, the default), so it could never be reached"), "{e}");
        // Connect against the first byte limit in effect (the default, lowered to the total set).
        let e = d
            .with_overrides(TimeoutOverrides { connect: ms(30_000), total: ms(20_000), ..Default::default() })
            .unwrap_err();
        assert_eq!(
            (e.limit, e.bound, e.bound_value, e.bound_set),
            (TimeoutLimit::Connect, TimeoutLimit::FirstByte, ms(20_000).unwrap(), false)
        );
        // Equal to the bound is fine.
        let o = TimeoutOverrides {
            connect: ms(500),
            first_byte: ms(500),
            idle: ms(500),
            total: ms(500),
            ..Default::default()
        };
        assert!(d.with_overrides(o).is_ok());
    }

    #[test]
    fn openai_reasoning_models_get_no_default_temperature() {
        for model in ["o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5-mini", "GPT-5.1", "o3"] {
            let c = ClientConfig::new(ProviderPreset::OpenAi, model, "k");
            assert_eq!(c.quirks.default_tool_temperature, None, "{model}");
            assert_eq!(c.quirks.max_tokens_field, MaxTokensField::MaxCompletionTokens, "{model}");
        }
        for model in ["gpt-4o", "gpt-4.1-mini", "gpt-5-chat-latest", "omni-moderation"] {
            let c = ClientConfig::new(ProviderPreset::OpenAi, model, "k");
            assert_eq!(c.quirks.default_tool_temperature, Some(0.2), "{model}");
        }
        // Only the OpenAI preset reads the model name.
        let c = ClientConfig::new(ProviderPreset::Custom, "o3-mini", "k");
        assert_eq!(c.quirks.default_tool_temperature, Some(0.2));
    }

    #[test]
    fn only_qwen3_open_source_hybrid_models_turn_thinking_off_when_not_streamed() {
        for model in ["qwen3-32b", "qwen3-235b-a22b", "Qwen3-30B-A3B", "qwen3-1.7b", "qwen3-0.6b", "qwen3-8b"]
        {
            assert!(ProviderPreset::Qwen.quirks_for_model(model).thinking_off_unstreamed, "{model}");
        }
        for model in [
            "qwen3-max",
            "qwen3-235b-a22b-thinking-2507",
            "qwen3-235b-a22b-instruct-2507",
            "qwen3-coder-plus",
            "qwen3-vl-32b",
            "qwen3.5-397b-a17b",
            "qwen3.5-plus",
            "qwen-plus",
            "qwq-plus",
            "qwen3-b",
            "qwen3-1..7b",
            "qwen3-32b-a",
        ] {
            assert!(!ProviderPreset::Qwen.quirks_for_model(model).thinking_off_unstreamed, "{model}");
        }
        // Only the Qwen preset reads the model name for it.
        assert!(!ProviderPreset::Custom.quirks_for_model("qwen3-32b").thinking_off_unstreamed);
        assert!(!ProviderPreset::Qwen.quirks().thinking_off_unstreamed);
    }

    #[test]
    fn qwen_hybrid_thinking_models_turn_thinking_off_for_a_forced_tool_choice() {
        for model in
            ["qwen3.5-plus", "qwen3.6-plus-2026-04-02", "Qwen3.7-Max", "qwen3.5-397b-a17b", "qwen3-32b"]
        {
            assert!(
                ProviderPreset::Qwen.quirks_for_model(model).thinking_off_for_forced_tool_choice,
                "{model}"
            );
        }
        for model in
            ["qwen3-max", "qwen-plus", "qwen3.5-thinking", "qwen3-235b-a22b-thinking-2507", "qwen3.x"]
        {
            assert!(
                !ProviderPreset::Qwen.quirks_for_model(model).thinking_off_for_forced_tool_choice,
                "{model}"
            );
        }
        assert!(!ProviderPreset::Custom.quirks_for_model("qwen3.5-plus").thinking_off_for_forced_tool_choice);
        // Only the open-source Qwen3 models need a stream for their thinking.
        assert!(!ProviderPreset::Qwen.quirks_for_model("qwen3.5-plus").thinking_off_unstreamed);
    }

    #[test]
    fn dashscope_thinking_only_models_are_asked_with_a_stream() {
        for model in
            ["qwq-plus", "QwQ-32B", "qvq-max", "qwen3-235b-a22b-thinking-2507", "qwen3-vl-plus-thinking"]
        {
            assert!(ProviderPreset::Qwen.quirks_for_model(model).stream_only, "{model}");
        }
        for model in ["qwen3-max", "qwen3-32b", "qwen3.5-plus", "qwen-plus", "qwen3-235b-a22b-instruct-2507"]
        {
            assert!(!ProviderPreset::Qwen.quirks_for_model(model).stream_only, "{model}");
        }
        assert!(!ProviderPreset::Custom.quirks_for_model("qwq-plus").stream_only);
        assert!(!ProviderPreset::Qwen.quirks().stream_only);
    }

    #[test]
    fn loopback_hosts() {
        for h in ["localhost", "127.0.0.1", "127.8.9.10", "::1", "LOCALHOST", "api.localhost"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.0.1", "example.com", "localhost.example.com", "128.0.0.1", "::2"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn endpoint_judges_the_host_the_client_connects_to() {
        // A backslash ends the authority for the HTTP client: this URL goes to evil.example.
        let e = ClientConfig::custom("http://evil.example\\@127.0.0.1/v1", "m", "k").endpoint().unwrap_err();
        assert_eq!(e.code, codes::INSECURE_URL);
        assert!(e.message.contains("evil.example"), "{e}");
    }

    #[test]
    fn endpoint_checks_scheme_and_host() {
        let c = ClientConfig::custom("http://127.0.0.1:8080/v1/", "m", "k");
        assert_eq!(c.endpoint().unwrap(), "http://127.0.0.1:8080/v1/chat/completions");
        assert!(ClientConfig::custom("http://[::1]:9/v1", "m", "k").endpoint().is_ok());
        let e = ClientConfig::custom("http://example.com/v1", "m", "k").endpoint().unwrap_err();
        assert_eq!(e.code, codes::INSECURE_URL);
        // The message names the override, as the native config and Rust spell it.
        assert!(e.message.contains("allowInsecureHttp") && e.message.contains("allow_insecure_http"), "{e}");
        let e = ClientConfig::custom("http://user@10.1.1.1:80", "m", "k").endpoint().unwrap_err();
        assert_eq!(e.code, codes::INSECURE_URL);
        let mut c = ClientConfig::custom("http://example.com/v1", "m", "k");
        c.allow_insecure_http = true;
        assert!(c.endpoint().is_ok());
        assert_eq!(
            ClientConfig::custom("ftp://x", "m", "k").endpoint().unwrap_err().code,
            codes::CONFIG_INVALID
        );
        assert_eq!(
            ClientConfig::new(ProviderPreset::Custom, "m", "k").endpoint().unwrap_err().code,
            codes::CONFIG_INVALID
        );
        assert_eq!(
            ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "k").endpoint().unwrap(),
            "https://dashscope.aliyuncs.com/compatible-mode/v1/chat/completions"
        );
    }

    #[test]
    fn credentials_in_the_base_url_are_refused_without_showing_them() {
        for base in [
            "https://user:s3cret-pw@api.example.com/v1",
            "https://s3cret-pw@api.example.com/v1",
            "http://u:s3cret-pw@127.0.0.1:8080/v1",
        ] {
            let e = ClientConfig::custom(base, "m", "k").endpoint().unwrap_err();
            assert_eq!(e.code, codes::CONFIG_INVALID, "{base}");
            assert!(!e.message.contains("s3cret"), "{e}");
        }
        // An @ in the path is no credential.
        assert!(ClientConfig::custom("https://api.example.com/v1/@team", "m", "k").endpoint().is_ok());
        // Nor shown when the URL is refused for another reason.
        let e = ClientConfig::custom("https://u:s3cret-pw@/v1", "m", "k").endpoint().unwrap_err();
        assert!(!e.message.contains("s3cret"), "{e}");
        assert_eq!(shown("https://u:pw@host/v1@x"), "https://***@host/v1@x");
        let debug =
            format!("{:?}", ClientConfig::custom("https://u:s3cret-pw@api.example.com/v1", "m", "sk-abcdef"));
        assert!(!debug.contains("s3cret") && !debug.contains("sk-abcdef"), "{debug}");
    }

    #[test]
    fn endpoint_takes_ascii_hosts_and_rejects_unicode_ones() {
        // The punycode form of an internationalized name works as it is.
        assert_eq!(
            ClientConfig::custom("https://xn--fsqu00a.xn--0zwm56d/v1", "m", "k").endpoint().unwrap(),
            "https://xn--fsqu00a.xn--0zwm56d/v1/chat/completions"
        );
        // The Unicode form is a config error naming the way out, not a request that fails later.
        for url in ["https://例子.测试/v1", "https://bücher.example/v1"] {
            let e = ClientConfig::custom(url, "m", "k").endpoint().unwrap_err();
            assert_eq!(e.code, codes::CONFIG_INVALID, "{url}");
            assert!(e.message.contains("punycode"), "{url}: {}", e.message);
        }
        // So is any other URL the client cannot parse.
        let e = ClientConfig::custom("https://exa mple.com/v1", "m", "k").endpoint().unwrap_err();
        assert_eq!(e.code, codes::CONFIG_INVALID);
        assert!(!e.message.contains("punycode"), "{}", e.message);
    }

    #[test]
    fn api_key_is_redacted_in_debug() {
        let c = ClientConfig::new(ProviderPreset::OpenAi, "gpt-4o", "sk-SENTINEL-123");
        let dbg = format!("{c:?} {:?}", c.api_key);
        assert!(!dbg.contains("SENTINEL"), "{dbg}");
        assert!(dbg.contains("ApiKey(<redacted>)"));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        assert_eq!(p.backoff(0), Duration::from_millis(100));
        assert_eq!(p.backoff(1), Duration::from_millis(200));
        assert_eq!(p.backoff(2), Duration::from_millis(350));
        let j = RetryPolicy { jitter: 0.5, ..p };
        for _ in 0..100 {
            let b = j.backoff(1);
            assert!(b >= Duration::from_millis(100) && b <= Duration::from_millis(200), "{b:?}");
        }
    }
}
