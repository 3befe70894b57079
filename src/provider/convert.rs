//! Conversions between the domain types and the wire types: a [`ChatRequest`] becomes a
//! [`ChatCompletionRequest`] under a provider's quirks; a non-streaming response body becomes a
//! [`ModelResponse`].

use super::config::{MaxTokensField, ProviderQuirks, ThinkingSwitch, ToolChoiceSupport};
use super::wire::{
    is_choice_zero, ChatCompletionRequest, ChatCompletionResponse, ProviderErrorDetail, StreamOptions,
    ThinkingOff, WireContent, WireFunction, WireFunctionCall, WireMessage, WireTool, WireToolCall,
    WireToolChoice, WireToolChoiceFunction,
};
use super::{ChatRequest, ModelEvent, ModelResponse, ToolChoice};
use crate::error::{codes, AgentError};
use crate::json::JsonLimits;
use crate::message::{make_call_ids_unique, ChatMessage, ToolCall};
use crate::tool::ToolDefinition;
use std::borrow::Cow;

/// Most bytes of a raw body kept in an error message.
pub const RAW_BODY_EXCERPT: usize = 2048;

/// Builds the wire request for `request` (borrowing from it).
///
/// Temperature: the request's own, else the quirk's default when tools are present (0.2), else
/// none. `tool_choice` is only sent with tools. Assistant `reasoning_content` is only sent when the
/// quirks require it, for tool-call messages and the current turn (see
/// [`ProviderQuirks::send_reasoning_content`]).
///
/// What strict providers refuse is never sent, whatever the history holds: an assistant message
/// with neither text nor tool calls (Moonshot and Mistral answer 400; the runtime no longer records
/// one, but sessions saved by earlier versions may hold one) is left out, which keeps the pairing
/// intact since it has no calls; a tool call's arguments that are not a JSON object text (cut off
/// at the token limit, malformed), or are over the request's argument limits (the registry's,
/// which refused them `json_too_large` or `json_too_deep`), are sent as `"{}"` (vLLM and strict gateways reject the
/// first; the second would make every later request as large; the call's error result tells the
/// model what was wrong: see [`wire_arguments`]); a call's name that model APIs refuse goes by a
/// stand-in (see `wire_call_name`); a tool-call message's missing text is sent as
/// `"content": null`.
pub fn to_wire_request<'a>(
    request: &'a ChatRequest,
    model: &'a str,
    quirks: &ProviderQuirks,
    stream: bool,
) -> ChatCompletionRequest<'a> {
    let mut wire = wire_envelope(request, model, quirks, stream);
    let turn_start = turn_start(&request.messages);
    wire.messages = request
        .messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            wire_message(
                m,
                sends_reasoning(quirks, m, i, turn_start),
                quirks,
                &request.argument_limits,
                &request.tools,
            )
        })
        .collect();
    wire
}

/// The wire request of [`to_wire_request`] with no messages (what the body cache fills in).
pub(crate) fn wire_envelope<'a>(
    request: &'a ChatRequest,
    model: &'a str,
    quirks: &ProviderQuirks,
    stream: bool,
) -> ChatCompletionRequest<'a> {
    let has_tools = !request.tools.is_empty();
    let tools: Vec<WireTool<'a>> = if offers_tools(request, quirks) {
        request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunction {
                    name: wire_tool_name(&t.name, quirks),
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect()
    } else {
        Vec::new()
    };
    let tool_choice = if !tools.is_empty() {
        request.tool_choice.as_ref().and_then(|c| wire_tool_choice(c, quirks))
    } else {
        None
    };
    let temperature = request.temperature.or(if has_tools { quirks.default_tool_temperature } else { None });
    let (max_tokens, max_completion_tokens) = match quirks.max_tokens_field {
        MaxTokensField::MaxTokens => (request.max_tokens, None),
        MaxTokensField::MaxCompletionTokens => (None, request.max_tokens),
    };
    let parallel_tool_calls = if tools.is_empty() { None } else { request.parallel_tool_calls };
    let thinking_off = (!stream && quirks.thinking_off_unstreamed)
        || (forces_a_call(tool_choice.as_ref()) && quirks.thinking_off_for_forced_tool_choice);
    ChatCompletionRequest {
        model,
        messages: Vec::new(),
        parallel_tool_calls,
        tools,
        temperature,
        max_tokens,
        max_completion_tokens,
        stream,
        stream_options: (stream && quirks.stream_usage).then_some(StreamOptions { include_usage: true }),
        enable_thinking: (thinking_off && quirks.thinking_switch == ThinkingSwitch::EnableThinking)
            .then_some(false),
        thinking: (thinking_off && quirks.thinking_switch == ThinkingSwitch::ThinkingType)
            .then_some(ThinkingOff { kind: "disabled" }),
        tool_choice,
    }
}

/// Whether the request's tools go on the wire. They do but for `tool_choice` "none" to a provider
/// that takes only "auto" ([`ToolChoiceSupport::AutoOnly`]: Zhipu): "none" would be left out and the
/// model could still call a tool, which the runtime would then run. Without the tools it cannot
/// call one, which is what "none" means ("the model will not call any tool": OpenAI's reference,
/// and its default when no tools are present); AgentScope's GLM adapter does the same
/// (java.agentscope.io/v2/en/integration/model/glm: "ToolChoice.None removes tools from the
/// request"). The history keeps its tool calls and results. The temperature stays the one of a
/// request with tools.
fn offers_tools(request: &ChatRequest, quirks: &ProviderQuirks) -> bool {
    !(quirks.tool_choice == ToolChoiceSupport::AutoOnly && request.tool_choice == Some(ToolChoice::None))
}

/// True for a `tool_choice` that makes the model call a tool (`"required"`, a named function).
fn forces_a_call(choice: Option<&WireToolChoice<'_>>) -> bool {
    matches!(choice, Some(WireToolChoice::Mode("required") | WireToolChoice::Function { .. }))
}

/// Where the current turn starts: the position of the last user message (0 without one).
pub(crate) fn turn_start(messages: &[ChatMessage]) -> usize {
    messages.iter().rposition(|m| matches!(m, ChatMessage::User { .. })).unwrap_or(0)
}

/// Whether the assistant message `message` at `index` is sent with its reasoning: with
/// `send_reasoning_content`, when it called tools (any turn) or belongs to the current turn (after
/// the last user message), or always with `reasoning_of_every_turn`. See
/// [`ProviderQuirks::send_reasoning_content`] for why.
pub(crate) fn sends_reasoning(
    quirks: &ProviderQuirks,
    message: &ChatMessage,
    index: usize,
    turn_start: usize,
) -> bool {
    quirks.send_reasoning_content
        && (quirks.reasoning_of_every_turn
            || index > turn_start
            || matches!(message, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
}

/// The wire form of one message (`send_reasoning`: see [`sends_reasoning`]; `limits`: the
/// request's argument limits, see [`wire_arguments`]; `tools`: the tools the request offers, see
/// [`wire_call_name`]); `None` for an assistant message that is not sent (neither text nor calls:
/// see [`to_wire_request`]).
pub(crate) fn wire_message<'a>(
    m: &'a ChatMessage,
    send_reasoning: bool,
    quirks: &ProviderQuirks,
    limits: &JsonLimits,
    tools: &[ToolDefinition],
) -> Option<WireMessage<'a>> {
    if m.is_empty_answer() {
        return None;
    }
    Some(match m {
        ChatMessage::System { content } => WireMessage::System { content },
        ChatMessage::User { content } => WireMessage::User { content },
        ChatMessage::Assistant { content, reasoning_content, tool_calls } => WireMessage::Assistant {
            content: content.as_deref(),
            // A message that called tools carries the field even without reasoning (empty): the
            // providers that want it back refuse such a message without it
            // ([`ProviderQuirks::send_reasoning_content`]).
            reasoning_content: if send_reasoning {
                reasoning_content.as_deref().or((!tool_calls.is_empty()).then_some(""))
            } else {
                None
            },
            tool_calls: tool_calls
                .iter()
                .map(|c| WireToolCall {
                    id: &c.id,
                    kind: "function",
                    function: WireFunctionCall {
                        name: wire_call_name(&c.name, quirks, tools),
                        arguments: wire_arguments(&c.arguments, limits),
                    },
                })
                .collect(),
        },
        ChatMessage::Tool { tool_call_id, name, content, .. } => WireMessage::Tool {
            tool_call_id,
            content,
            name: quirks.tool_message_name.then(|| wire_call_name(name, quirks, tools)),
        },
    })
}

/// The name a tool goes by on the wire ([`ProviderQuirks::renamed_tools`]): its own, but for a
/// tool the provider refuses under it.
pub(crate) fn wire_tool_name<'a>(name: &'a str, quirks: &ProviderQuirks) -> &'a str {
    quirks.renamed_tools.iter().find(|(app, _)| *app == name).map_or(name, |(_, wire)| wire)
}

/// The name a recorded call of `name` (and its result, with [`ProviderQuirks::tool_message_name`])
/// goes by on the wire: [`wire_tool_name`], or a stand-in for a name model APIs refuse
/// (`functions.query_order`, `" query_order "`, a look-alike letter, `""`, more than 64
/// characters: [`crate::tool::wire_safe_tool_name`]). The model may call a tool by any name; such a
/// call is answered `tool_not_found` and recorded as written, but OpenAI refuses every request
/// whose history holds that name (`messages[i].tool_calls[j].function.name`), so the session
/// could never go on.
///
/// The stand-in differs from the name of every tool the request offers (`tools`, by its own name
/// and the one it goes by on the wire), so a call of `query order` does not show in the history
/// as a call of the real `query_order` answered `tool_not_found`.
pub(crate) fn wire_call_name<'a>(
    name: &'a str,
    quirks: &ProviderQuirks,
    tools: &[ToolDefinition],
) -> Cow<'a, str> {
    let offered = |stand_in: &str| {
        tools.iter().any(|t| t.name == stand_in || wire_tool_name(&t.name, quirks) == stand_in)
    };
    crate::tool::wire_safe_tool_name(wire_tool_name(name, quirks), offered)
}

/// The renames ([`ProviderQuirks::renamed_tools`]) of the tools `request` offers: the answer's
/// calls by a wire name among them get the app's name back ([`event_with_app_names`]).
///
/// # Errors
/// `config_invalid` when another tool of the request has such a wire name (two tools would go by
/// one name).
pub(crate) fn renames_of(
    request: &ChatRequest,
    quirks: &ProviderQuirks,
) -> Result<Vec<(&'static str, &'static str)>, AgentError> {
    let offers = |name: &str| request.tools.iter().any(|t| t.name == name);
    let renames: Vec<_> = quirks.renamed_tools.iter().copied().filter(|(app, _)| offers(app)).collect();
    if let Some((app, wire)) = renames.iter().find(|(_, wire)| offers(wire)) {
        return Err(AgentError::of(
            codes::CONFIG_INVALID,
            format!(
                "this provider refuses a tool named {app:?}, which is sent as {wire:?}, but a tool of that name is \
                 registered too: rename one of them"
            ),
        ));
    }
    Ok(renames)
}

/// `event` with the app's name on a call it names by a wire name among `renames` (from
/// [`renames_of`]).
pub(crate) fn event_with_app_names(mut event: ModelEvent, renames: &[(&str, &str)]) -> ModelEvent {
    match &mut event {
        ModelEvent::ToolCallStarted { name, .. } => app_name(name, renames),
        ModelEvent::ToolCallFinished { call, .. } => app_name(&mut call.name, renames),
        ModelEvent::Finished(response) => response_with_app_names(response, renames),
        _ => {}
    }
    event
}

/// `response`'s calls by a wire name among `renames` given the app's name.
pub(crate) fn response_with_app_names(response: &mut ModelResponse, renames: &[(&str, &str)]) {
    for call in &mut response.tool_calls {
        app_name(&mut call.name, renames);
    }
}

fn app_name(name: &mut String, renames: &[(&str, &str)]) {
    if let Some((app, _)) = renames.iter().find(|(_, wire)| *wire == name.as_str()) {
        *name = (*app).to_string();
    }
}

/// A call's arguments as sent back: the text itself when it is a JSON object within `limits` (the
/// request's [`argument_limits`](ChatRequest::argument_limits): those of the registry that checked
/// the calls, by default [`JsonLimits::default`]: 1 MiB, 64 levels), else `"{}"`.
///
/// Arguments cut off at the token limit or malformed are kept raw in the state (the model is told
/// what was wrong by the call's error result), but vLLM and strict gateways refuse every later
/// request that carries them ("arguments must be a valid JSON object string"). Arguments over the
/// limits were refused by the registry (`json_too_large`, `json_too_deep`) and never ran; sent
/// back, they would make every later request of the session as large (a server with a body limit
/// answers each with 413; more than 1 MiB of text is also past most models' context window). The
/// runtime records those as `"{}"` already when the answer comes in, with the same limits (its
/// registry's), so this matters for sessions saved by earlier versions or run on by an agent
/// with lower limits, and for other histories. The limits are the registry's, whatever they are:
/// a registry with higher ones runs, records and sends back the arguments it takes, so the state,
/// the hooks' view of each request and the request agree (an app that raises them accepts larger
/// requests).
pub fn wire_arguments<'a>(arguments: &'a str, limits: &JsonLimits) -> &'a str {
    if arguments.len() > limits.max_bytes {
        return "{}";
    }
    // As the registry's parsers count: never more than `DEPTH_CAP` levels, and up to it (serde_json's
    // own guard, off here as there, would refuse the 128th).
    if crate::json::nests_deeper_than(arguments, limits.max_depth.min(crate::json::DEPTH_CAP)) {
        return "{}";
    }
    // Valid JSON text whose first character (after whitespace) is `{` is an object. The check
    // builds nothing (`IgnoredAny`); a body serialises each message once (the body cache).
    let is_object = arguments.trim_start().starts_with('{') && {
        let mut de = serde_json::Deserializer::from_str(arguments);
        de.disable_recursion_limit();
        <serde::de::IgnoredAny as serde::Deserialize>::deserialize(&mut de).and_then(|_| de.end()).is_ok()
    };
    if is_object {
        arguments
    } else {
        "{}"
    }
}

fn wire_tool_choice<'a>(c: &'a ToolChoice, quirks: &ProviderQuirks) -> Option<WireToolChoice<'a>> {
    let support = quirks.tool_choice;
    let refused = match c {
        ToolChoice::Auto => false,
        // "none" never gets here with `AutoOnly`: the tools are left out instead (`offers_tools`).
        ToolChoice::None => support == ToolChoiceSupport::AutoOnly,
        ToolChoice::Required => {
            matches!(
                support,
                ToolChoiceSupport::AutoOnly | ToolChoiceSupport::NoRequired | ToolChoiceSupport::AutoOrNone
            )
        }
        ToolChoice::Function(_) => {
            matches!(support, ToolChoiceSupport::AutoOnly | ToolChoiceSupport::AutoOrNone)
        }
    };
    if refused {
        log::warn!(
            "the provider does not take tool_choice {c:?} for this model; left out, the model chooses"
        );
        return None;
    }
    if support == ToolChoiceSupport::NoNamed && matches!(c, ToolChoice::Function(_)) {
        log::warn!(
            "the provider does not take a named tool_choice for this model; sent as \"required\" ({c:?})"
        );
        return Some(WireToolChoice::Mode("required"));
    }
    Some(match c {
        ToolChoice::Auto => WireToolChoice::Mode("auto"),
        ToolChoice::None => WireToolChoice::Mode("none"),
        ToolChoice::Required => WireToolChoice::Mode("required"),
        ToolChoice::Function(name) => WireToolChoice::Function {
            kind: "function",
            function: WireToolChoiceFunction { name: wire_tool_name(name, quirks) },
        },
    })
}

/// An excerpt of a raw body for an error message: at most [`RAW_BODY_EXCERPT`] bytes, cut on a
/// character boundary, with the total size.
///
/// A cut never falls inside a word (ASCII letters, digits and `-_.~+/=`, the characters of API
/// keys and tokens) of up to 512 bytes: the excerpt then ends before it. A server that echoes the
/// request's `Authorization` header in its error body (gateways, debugging proxies) would
/// otherwise leave the first part of the key in the message, where the client's redaction of the
/// whole key cannot see it. A key that is not one word (`APIKey:APISecret`, a key glued to a
/// longer run of word characters) can still be cut: the client takes out any start of its key
/// that ends right before the `...` of a cut (`client::redact_message`).
pub fn raw_excerpt(body: &[u8]) -> String {
    excerpt(body, false)
}

/// [`raw_excerpt`] of the first bytes of a body that went on (it broke off, stalled or was too
/// long): its end is a cut as well, and never falls inside a word either (`...` marks it).
pub fn raw_excerpt_of_prefix(prefix: &[u8]) -> String {
    excerpt(prefix, true)
}

fn excerpt(body: &[u8], prefix: bool) -> String {
    let shown = body.len().min(RAW_BODY_EXCERPT);
    let text = String::from_utf8_lossy(&body[..shown]);
    let mut cut = crate::text::floor_char_boundary(&text, RAW_BODY_EXCERPT);
    // The byte after the cut: in the text, or the first byte not decoded. After a prefix's last
    // byte comes one that did not arrive, which may go on the word that byte ends.
    let in_word = match text.as_bytes().get(cut).or(body.get(shown)) {
        Some(b) => is_word_byte(*b),
        None => prefix && text.as_bytes().last().is_some_and(|b| is_word_byte(*b)),
    };
    if in_word {
        let start = text.as_bytes()[..cut].iter().rposition(|b| !is_word_byte(*b)).map_or(0, |i| i + 1);
        // A longer word (a blob, not a key) is cut where it is.
        if cut - start <= MAX_WORD_KEPT_WHOLE {
            cut = start;
        }
    }
    if body.len() > RAW_BODY_EXCERPT {
        format!("{}... ({} bytes in all)", &text[..cut], body.len())
    } else if prefix && cut < text.len() {
        format!("{}...", &text[..cut])
    } else {
        text[..cut].to_string()
    }
}

/// The longest word [`raw_excerpt`] never cuts (API keys are 32 to 164 bytes; JWT-style tokens a
/// few hundred); a longer one is a blob, cut where the excerpt ends.
const MAX_WORD_KEPT_WHOLE: usize = 512;

/// A byte of a word [`raw_excerpt`] never cuts.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+' | b'/' | b'=')
}

/// Normalises raw arguments: empty or blank text (a parameterless call) becomes `{}`; anything
/// else is kept exactly, even when it is not valid JSON (the registry reports that to the model).
pub fn normalise_arguments(raw: String) -> String {
    if raw.trim().is_empty() {
        "{}".to_string()
    } else {
        raw
    }
}

/// The error of a 2xx body that is an error: the stable code the provider's own code names
/// ([`ProviderErrorDetail::stable_code`]), else `provider_http_status`; the message keeps the
/// provider's code and message.
fn body_error(err: &ProviderErrorDetail) -> AgentError {
    AgentError::of(err.stable_code().unwrap_or(codes::PROVIDER_HTTP_STATUS), err.describe())
}

/// The error of an answer whose call is a legacy `function_call` (the deprecated functions API)
/// and which has no `tool_calls`: the agent asks with `tools` and reads only `tool_calls`, so the
/// call would be dropped without a word and the run end as if the model had answered nothing.
pub(crate) fn legacy_function_call_error() -> AgentError {
    AgentError::of(
        codes::PROVIDER_DECODE,
        "the answer calls a function with the legacy `function_call` (the deprecated functions API), \
         not `tool_calls`: the agent sends `tools` and reads only `tool_calls`; use a model or \
         gateway that answers with `tool_calls`",
    )
}

/// The provider's error a body [`parse_response`] refused holds, when it holds one (the error
/// [`parse_response`] returned is made of it): the client reads its code and form to decide on a
/// retry.
pub(crate) fn error_of_body(body: &[u8]) -> Option<ProviderErrorDetail> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    std::str::from_utf8(body).ok().and_then(ProviderErrorDetail::of_body)
}

/// Parses a non-streaming response body.
///
/// # Errors
/// `provider_decode` (with an excerpt of the raw body) when the body is not a chat completion;
/// when it is an error body (`{"error": ...}`, a top-level `{"code", "message"}`, MiniMax's
/// `base_resp`, Baidu's `error_code`: [`ProviderErrorDetail::of_body`]), the code its own code
/// names (`provider_auth`, `provider_rate_limited`, `provider_quota_exhausted`), else
/// `provider_http_status`.
pub fn parse_response(body: &[u8]) -> Result<ModelResponse, AgentError> {
    // A UTF-8 byte order mark some gateways put first is no JSON.
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let text = std::str::from_utf8(body).map_err(|e| {
        AgentError::of(
            codes::PROVIDER_DECODE,
            format!("response is not UTF-8 ({e}); raw body: {}", raw_excerpt(body)),
        )
    })?;
    let wire: ChatCompletionResponse<'_> = match serde_json::from_str(text) {
        Ok(w) => w,
        Err(e) => {
            // The escape of a lone UTF-16 surrogate (text a JS gateway cut by UTF-16 index), which
            // `JSON.parse` accepts: read as U+FFFD.
            if let Cow::Owned(fixed) = crate::json::lone_surrogate_escapes_replaced(text) {
                return parse_response(fixed.as_bytes());
            }
            if let Some(err) = ProviderErrorDetail::of_body(text) {
                return Err(body_error(&err));
            }
            return Err(AgentError::of(
                codes::PROVIDER_DECODE,
                format!("invalid response JSON ({e}); raw body: {}", raw_excerpt(body)),
            ));
        }
    };
    if wire.base_resp.as_ref().is_some_and(|b| b.failed()) {
        // MiniMax's failed status beside choices (1027: the answer withheld by moderation): the
        // body is that error, not an answer (see `wire::error`).
        if let Some(err) = ProviderErrorDetail::of_body(text) {
            return Err(body_error(&err));
        }
    }
    // Choice 0, as a stream's is: a gateway may list the choices of `n` > 1 in any order.
    let mut choices = wire.choices;
    let has_zero = choices.iter().any(|c| c.index == Some(0));
    let zero = choices.iter().position(|c| is_choice_zero(c.index, has_zero)).unwrap_or(0);
    let Some(choice) = (zero < choices.len()).then(|| choices.swap_remove(zero)) else {
        if let Some(err) = ProviderErrorDetail::of_body(text) {
            return Err(body_error(&err));
        }
        return Err(AgentError::of(
            codes::PROVIDER_DECODE,
            format!("response has no choices; raw body: {}", raw_excerpt(body)),
        ));
    };
    let mut response = ModelResponse {
        finish_reason: choice.finish_reason.map(|s| s.into_owned()),
        usage: wire.usage.map(Into::into),
        ..ModelResponse::default()
    };
    if let Some(message) = choice.message {
        if message.legacy_function_call && message.tool_calls.is_empty() {
            return Err(legacy_function_call_error());
        }
        // `content` may be an array of parts whose thinking parts are reasoning (Mistral).
        let (content, reasoning) =
            WireContent::text_and_reasoning(message.content, message.reasoning_content);
        response.content = content.filter(|s| !s.is_empty()).map(|s| s.into_owned());
        response.reasoning_content = reasoning.filter(|s| !s.is_empty()).map(|s| s.into_owned());
        for call in message.tool_calls {
            // An entry without a `function` names nothing to run: left out, as the seed's
            // ResponseParser does (a function without a name is still a call: tool_not_found).
            let Some(f) = call.function else {
                log::debug!("ignoring a tool_calls entry without a function (id {:?})", call.id);
                continue;
            };
            let name = f.name.map(|s| s.into_owned()).unwrap_or_default();
            let arguments = f.arguments.map(|a| a.0.into_owned()).unwrap_or_default();
            let id = call.id.map(|id| id.into_owned()).unwrap_or_default();
            response.tool_calls.push(ToolCall::new(id, name, normalise_arguments(arguments)));
        }
        // A missing id becomes `call_<n>`, a repeated one `<id>_<n>`: each result needs its own id.
        make_call_ids_unique(&mut response.tool_calls, |_| false);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::config::ProviderPreset;
    use crate::tool::ToolDefinition;
    use serde_json::json;
    use std::sync::Arc;

    fn history() -> Vec<ChatMessage> {
        vec![
            ChatMessage::system("sys"),
            ChatMessage::user("where is order 1?"),
            ChatMessage::Assistant {
                content: None,
                reasoning_content: Some("think".into()),
                tool_calls: vec![ToolCall::new("c1", "query_order", r#"{"id":"1"}"#)],
            },
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                name: "query_order".into(),
                content: "shipped".into(),
                is_error: false,
            },
        ]
    }

    fn tools() -> Vec<ToolDefinition> {
        vec![ToolDefinition::new(
            "query_order",
            "查询订单",
            json!({"type":"object","properties":{"id":{"type":"string"}}}),
        )]
    }

    #[test]
    fn request_with_tools_has_default_temperature_and_no_nulls() {
        let req = ChatRequest::new(Arc::from(history()), Arc::from(tools()));
        let q = ProviderPreset::Qwen.quirks();
        let v = serde_json::to_value(to_wire_request(&req, "qwen3-max", &q, false)).unwrap();
        assert_eq!(v["temperature"].as_f64().unwrap() as f32, 0.2f32);
        assert_eq!(v["tools"][0], tools()[0].to_openai_tool());
        assert!(v.get("tool_choice").is_none() && v.get("max_tokens").is_none() && v.get("stream").is_none());
        assert!(v.get("stream_options").is_none());
        let msgs = v["messages"].as_array().unwrap();
        assert_eq!(
            msgs[2],
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"query_order","arguments":"{\"id\":\"1\"}"}}]})
        );
        assert_eq!(msgs[3], json!({"role":"tool","tool_call_id":"c1","content":"shipped"}));
        // The tool-call message's `content` is the one `null` sent.
        assert_eq!(v.to_string().matches("null").count(), 1, "{v}");
    }

    #[test]
    fn empty_answers_are_left_out_and_bad_arguments_go_as_an_empty_object() {
        let empty = |content: Option<&str>| ChatMessage::Assistant {
            content: content.map(str::to_string),
            reasoning_content: Some("cut off".into()),
            tool_calls: vec![],
        };
        let call = |args: &str| ToolCall::new("c", "t", args);
        let messages = vec![
            ChatMessage::user("q1"),
            empty(None),
            ChatMessage::user("q2"),
            empty(Some("")),
            ChatMessage::Assistant {
                content: Some("text and calls".into()),
                reasoning_content: None,
                tool_calls: vec![
                    call(r#"{"x": "hel"#),
                    call(" {\"a\":[1,2]} "),
                    call("[1]"),
                    call("\"s\""),
                    call("{} x"),
                    call(""),
                ],
            },
            empty(Some(" ")),
        ];
        let req = ChatRequest::new(Arc::from(messages), Arc::from(Vec::new()));
        for preset in ProviderPreset::ALL {
            let v = serde_json::to_value(to_wire_request(&req, "m", &preset.quirks(), false)).unwrap();
            let msgs = v["messages"].as_array().unwrap();
            assert_eq!(msgs.len(), 4, "{v}");
            assert_eq!(msgs[0], json!({"role":"user","content":"q1"}));
            assert_eq!(msgs[1], json!({"role":"user","content":"q2"}));
            assert_eq!(msgs[2]["content"], "text and calls");
            let args: Vec<&str> = msgs[2]["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["function"]["arguments"].as_str().unwrap())
                .collect();
            assert_eq!(args, ["{}", " {\"a\":[1,2]} ", "{}", "{}", "{}", "{}"]);
            // Whitespace is text: sent as it is.
            assert_eq!((&msgs[3]["role"], &msgs[3]["content"]), (&json!("assistant"), &json!(" ")));
        }
    }

    #[test]
    fn arguments_over_the_request_limits_go_as_an_empty_object() {
        let limits = JsonLimits::default();
        let sized = |len: usize| {
            let text = format!("{{\"a\":\"{}\"}}", "x".repeat(len - 8));
            assert_eq!(text.len(), len);
            text
        };
        let at_limit = sized(limits.max_bytes);
        assert_eq!(wire_arguments(&at_limit, &limits), at_limit);
        assert_eq!(wire_arguments(&sized(limits.max_bytes + 1), &limits), "{}");
        let nested = |depth: usize| format!("{}{}", "{\"a\":".repeat(depth - 1) + "{", "}".repeat(depth));
        assert_eq!(wire_arguments(&nested(limits.max_depth), &limits), nested(limits.max_depth));
        assert_eq!(wire_arguments(&nested(limits.max_depth + 1), &limits), "{}");
        let arrays = format!("{{\"a\":{}{}}}", "[".repeat(limits.max_depth), "]".repeat(limits.max_depth));
        assert_eq!(wire_arguments(&arrays, &limits), "{}");
        // Brackets in strings (escaped quotes and backslashes too) are text, not depth.
        let in_strings =
            format!(r#"{{"a":"{0}\"{0}","b\\":"{0}\\","c":[{{}}]}}"#, "[{".repeat(limits.max_depth));
        assert_eq!(wire_arguments(&in_strings, &limits), in_strings);

        // The limits are the registry's, whatever they are: higher ones send what they take (as
        // the registry runs it and the agent records it), up to the parsers' 128 levels.
        let roomy = JsonLimits { max_depth: 1000, max_bytes: 4 * limits.max_bytes };
        let large = sized(2 * limits.max_bytes);
        assert_eq!(wire_arguments(&large, &roomy), large);
        assert_eq!(wire_arguments(&sized(roomy.max_bytes + 1), &roomy), "{}");
        let cap = crate::json::DEPTH_CAP;
        assert_eq!(wire_arguments(&nested(cap), &roomy), nested(cap));
        assert_eq!(wire_arguments(&nested(cap + 1), &roomy), "{}");
        assert_eq!(wire_arguments(&nested(cap), &limits), "{}");
    }

    /// The streamed wire body of `req` for `model` under `preset`'s quirks, as JSON.
    fn wire_json(req: &ChatRequest, model: &str, preset: ProviderPreset) -> serde_json::Value {
        serde_json::to_value(to_wire_request(req, model, &preset.quirks(), true)).unwrap()
    }

    #[test]
    fn deepseek_sends_reasoning_back_and_others_do_not() {
        let req = ChatRequest::new(Arc::from(history()), Arc::from(tools()));
        let v = wire_json(&req, "deepseek-reasoner", ProviderPreset::DeepSeek);
        assert_eq!(v["messages"][2]["reasoning_content"], "think");
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"], json!({"include_usage": true}));
        let v = wire_json(&req, "gpt-4o", ProviderPreset::OpenAi);
        assert!(v["messages"][2].get("reasoning_content").is_none());
        // A later user message starts a new turn: the reasoning of the earlier turn's tool-call
        // message still goes back (DeepSeek and Kimi answer 400 without it), the reasoning of its
        // final answer does not.
        let mut next = history();
        next.push(ChatMessage::Assistant {
            content: Some("done".into()),
            reasoning_content: Some("r2".into()),
            tool_calls: vec![],
        });
        next.push(ChatMessage::user("and order 2?"));
        let req = ChatRequest::new(Arc::from(next), Arc::from(tools()));
        let v = wire_json(&req, "deepseek-reasoner", ProviderPreset::DeepSeek);
        assert_eq!(v["messages"][2]["reasoning_content"], "think");
        assert!(v["messages"][4].get("reasoning_content").is_none(), "{v}");
        assert_eq!(v.to_string().matches("reasoning_content").count(), 1, "{v}");
        // Kimi keeps every turn's reasoning.
        let v = wire_json(&req, "kimi-k2.6", ProviderPreset::Moonshot);
        assert_eq!(v["messages"][2]["reasoning_content"], "think");
        assert_eq!(v["messages"][4]["reasoning_content"], "r2", "{v}");
        // Without the quirk nothing goes back.
        let v = wire_json(&req, "qwen3-max", ProviderPreset::Qwen);
        assert!(!v.to_string().contains("reasoning_content"), "{v}");
    }

    #[test]
    fn no_tools_means_no_temperature_and_no_tool_choice() {
        let mut req = ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()));
        req.tool_choice = Some(ToolChoice::Required);
        let v = serde_json::to_value(to_wire_request(&req, "m", &ProviderQuirks::default(), false)).unwrap();
        assert_eq!(v, json!({"model":"m","messages":[{"role":"user","content":"hi"}]}));
        req.temperature = Some(0.7);
        req.max_tokens = Some(100);
        let v = serde_json::to_value(to_wire_request(&req, "m", &ProviderPreset::OpenAi.quirks(), false))
            .unwrap();
        assert_eq!(v["max_completion_tokens"], 100);
        assert!(v.get("max_tokens").is_none());
        assert!((v["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
    }

    #[test]
    fn tool_choice_forms_and_auto_only_quirk() {
        let mut req = ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(tools()));
        let q = ProviderQuirks::default();
        for (c, want) in [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::None, json!("none")),
            (ToolChoice::Required, json!("required")),
            (
                ToolChoice::Function("query_order".into()),
                json!({"type":"function","function":{"name":"query_order"}}),
            ),
        ] {
            req.tool_choice = Some(c);
            let v = serde_json::to_value(to_wire_request(&req, "m", &q, false)).unwrap();
            assert_eq!(v["tool_choice"], want);
        }
        // Zhipu takes only "auto": a forced choice is left out (the tools stay offered)...
        let zhipu = ProviderPreset::Zhipu.quirks();
        let v = serde_json::to_value(to_wire_request(&req, "glm-4.6", &zhipu, false)).unwrap();
        assert!(v.get("tool_choice").is_none());
        assert_eq!(v["tools"][0]["function"]["name"], "query_order");
        // ...and "none" leaves the tools out, so that no call can come back.
        req.tool_choice = Some(ToolChoice::None);
        let v = serde_json::to_value(to_wire_request(&req, "glm-4.6", &zhipu, true)).unwrap();
        assert!(v.get("tool_choice").is_none() && v.get("tools").is_none(), "{v}");
        assert_eq!(v["temperature"], serde_json::to_value(zhipu.default_tool_temperature).unwrap());
        assert_eq!(v["messages"][0]["content"], "hi");
        // A provider that takes "none" gets it, with the tools.
        let v = serde_json::to_value(to_wire_request(&req, "m", &q, true)).unwrap();
        assert_eq!(
            (&v["tool_choice"], &v["tools"][0]["function"]["name"]),
            (&json!("none"), &json!("query_order"))
        );
    }

    #[test]
    fn tool_message_name_quirk() {
        let req = ChatRequest::new(Arc::from(history()), Arc::from(tools()));
        let q = ProviderQuirks { tool_message_name: true, ..ProviderQuirks::default() };
        let v = serde_json::to_value(to_wire_request(&req, "pangu", &q, false)).unwrap();
        assert_eq!(v["messages"][3]["name"], "query_order");
        // A name model APIs refuse goes by its stand-in, in the call and its result alike.
        let mut messages = history();
        for m in &mut messages {
            match m {
                ChatMessage::Assistant { tool_calls, .. } => {
                    tool_calls[0].name = "functions.query order".into()
                }
                ChatMessage::Tool { name, .. } => *name = "functions.query order".into(),
                _ => {}
            }
        }
        let req = ChatRequest::new(Arc::from(messages), Arc::from(tools()));
        let v = serde_json::to_value(to_wire_request(&req, "pangu", &q, false)).unwrap();
        assert_eq!(v["messages"][2]["tool_calls"][0]["function"]["name"], "functions_query_order");
        assert_eq!(v["messages"][3]["name"], "functions_query_order");
    }

    #[test]
    fn parse_response_keeps_raw_invalid_arguments_and_fills_empty() {
        let body = br#"{"choices":[{"message":{"content":"","tool_calls":[
            {"id":"a","function":{"name":"x","arguments":"{bad"}},
            {"function":{"name":"y","arguments":""}},
            {"id":"c","function":{"name":"z","arguments":{"k":1}}}]},"finish_reason":"tool_calls"}]}"#;
        let r = parse_response(body).unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls[0].arguments, "{bad");
        assert_eq!(r.tool_calls[1], ToolCall::new("call_1", "y", "{}"));
        assert_eq!(r.tool_calls[2].arguments, r#"{"k":1}"#);
    }

    #[test]
    fn parse_response_makes_repeated_ids_unique() {
        let body = br#"{"choices":[{"message":{"tool_calls":[
            {"id":"x","function":{"name":"t","arguments":"{\"a\":1}"}},
            {"id":"x","function":{"name":"t","arguments":"{\"a\":2}"}},
            {"id":"","function":{"name":"t","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        let r = parse_response(body).unwrap();
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["x", "x_1", "call_2"]);
        assert_eq!(r.tool_calls[1].arguments, r#"{"a":2}"#);
    }

    /// MiniMax's failed `base_resp` beside choices is the error, not the (cut) answer; a `base_resp`
    /// of 0, or one that is not an object, is an answer's.
    #[test]
    fn parse_response_reads_a_failed_base_resp_beside_choices_as_the_error() {
        let cut = br#"{"choices":[{"finish_reason":"stop","message":{"content":"Here is how to"}}],"base_resp":{"status_code":1027,"status_msg":"output new_sensitive"}}"#;
        let e = parse_response(cut).unwrap_err();
        assert_eq!(
            (e.code.as_ref(), e.message.as_str()),
            (codes::PROVIDER_CONTENT_FILTERED, "[1027] output new_sensitive")
        );
        assert_eq!(error_of_body(cut).and_then(|d| d.equivalent_status()), Some(400));
        for ok in [
            r#"{"choices":[{"message":{"content":"fine"}}],"base_resp":{"status_code":0,"status_msg":"success"}}"#,
            r#"{"choices":[{"message":{"content":"fine"}}],"base_resp":"odd"}"#,
            r#"{"choices":[{"message":{"content":"fine"}}],"base_resp":{"status_msg":"no code"}}"#,
        ] {
            assert_eq!(parse_response(ok.as_bytes()).unwrap().content.as_deref(), Some("fine"), "{ok}");
        }
    }

    #[test]
    fn parse_response_reads_lone_surrogate_escapes_as_the_replacement_character() {
        let body = br#"{"choices":[{"message":{"content":"cut \ud83d","tool_calls":[{"id":"a","function":{"name":"t","arguments":"{\"q\":\"\ude00\"}"}}]},"finish_reason":"stop"}]}"#;
        let r = parse_response(body).unwrap();
        assert_eq!(r.content.as_deref(), Some("cut \u{FFFD}"));
        assert_eq!(r.tool_calls[0].arguments, "{\"q\":\"\u{FFFD}\"}");
    }

    #[test]
    fn parse_response_errors_keep_the_raw_body() {
        let e = parse_response(b"{\"choices\": [ {\"mess").unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_DECODE);
        assert!(e.message.contains("{\"choices\": [ {\"mess"), "{}", e.message);
        let e =
            parse_response(br#"{"error":{"message":"model overloaded","code":"overloaded"}}"#).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_HTTP_STATUS);
        assert!(e.message.contains("overloaded"));
        let big = vec![b'x'; 10_000];
        let e = parse_response(&big).unwrap_err();
        assert!(e.message.len() < 2300 && e.message.contains("10000 bytes"), "{}", e.message.len());
    }

    #[test]
    fn an_excerpt_never_ends_inside_a_word() {
        const KEY: &str = "sk-proj-Ab_9.x~y+z/w=";
        // A key the cut would split: after ASCII (the cut in the bytes), and after bytes that are
        // not UTF-8 (each becomes a 3-byte U+FFFD: the cut in the decoded text).
        for bad in [0, 100] {
            // The key starts 12 bytes before the cut in the decoded text.
            let ascii = RAW_BODY_EXCERPT - 12 - " Bearer ".len() - 3 * bad;
            let mut body = vec![0xFF; bad];
            body.extend(std::iter::repeat_n(b'x', ascii));
            body.extend_from_slice(format!(" Bearer {KEY}\" and more").as_bytes());
            body.resize(RAW_BODY_EXCERPT + 100, b' ');
            let text = raw_excerpt(&body);
            let shown = text.split("...").next().unwrap();
            assert!(shown.ends_with(" Bearer "), "{bad}: {}", &shown[shown.len() - 30..]);
            assert!(text.ends_with(&format!("... ({} bytes in all)", RAW_BODY_EXCERPT + 100)));
        }
        // A cut between two words, or in a word longer than a key, stays where it was.
        let shown = |body: &[u8]| raw_excerpt(body).split("...").next().unwrap().to_string();
        let mut body = vec![b'a'; RAW_BODY_EXCERPT - 1];
        body.extend_from_slice(b" next");
        assert_eq!(shown(&body), format!("{} ", "a".repeat(RAW_BODY_EXCERPT - 1)));
        assert_eq!(shown(&[b'z'; RAW_BODY_EXCERPT + 5]), "z".repeat(RAW_BODY_EXCERPT));
        let mut body = br#"{"content":""#.to_vec();
        body.resize(RAW_BODY_EXCERPT + 5, b'z');
        assert!(shown(&body).ends_with(&"z".repeat(RAW_BODY_EXCERPT - 12)));
        assert_eq!(raw_excerpt(b"short sk-key"), "short sk-key");
    }

    #[test]
    fn a_prefix_never_ends_inside_a_word() {
        // The bytes that came of a body that went on: the word they end in may go on.
        assert_eq!(raw_excerpt_of_prefix(b"Bearer sk-abc"), "Bearer ...");
        assert_eq!(raw_excerpt_of_prefix(b"Bearer sk-abc\""), "Bearer sk-abc\"");
        assert_eq!(raw_excerpt(b"Bearer sk-abc"), "Bearer sk-abc");
        let mut long = vec![b' '; RAW_BODY_EXCERPT - 4];
        long.extend_from_slice(b"sk-abc");
        assert_eq!(raw_excerpt_of_prefix(&long), raw_excerpt(&long));
    }
}
