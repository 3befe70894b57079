//! What each preset's quirks put on the wire, seen by a local mock server: Moonshot, DeepSeek and
//! Zhipu send `reasoning_content` back for tool calls (also in later turns; Moonshot for every
//! assistant message), Moonshot and OpenAI's
//! reasoning models get no default temperature, `stream_usage: false` leaves `stream_options` out
//! of streamed requests, and Qwen's open-source Qwen3 models turn thinking off when not streamed
//! (Qwen's thinking models also for a forced tool call) and its thinking-only models are asked with
//! a stream even for a whole answer; Zhipu, which takes only `tool_choice` "auto", is sent no tools
//! for "none".

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::provider::{
    ChatModel, ChatRequest, ClientConfig, ModelEvent, OpenAiCompatibleClient, ProviderPreset, ToolChoice,
};
use arkagent::{ChatMessage, ToolCall, ToolDefinition};
use futures_util::StreamExt;
use mock_server::{MockServer, Reply};
use serde_json::{json, Value};
use std::sync::Arc;

/// Two turns: a question answered through a tool call (with reasoning), then a new question.
fn two_turns() -> ChatRequest {
    let messages = vec![
        ChatMessage::user("订单 1 到哪了？"),
        ChatMessage::Assistant {
            content: None,
            reasoning_content: Some("need the order tool".into()),
            tool_calls: vec![ToolCall::new("call_1", "query_order", r#"{"orderId":"1"}"#)],
        },
        ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            name: "query_order".into(),
            content: r#"{"status":"shipped"}"#.into(),
            is_error: false,
        },
        ChatMessage::Assistant {
            content: Some("已发货".into()),
            reasoning_content: Some("answer it".into()),
            tool_calls: vec![],
        },
        ChatMessage::user("订单 2 呢？"),
        ChatMessage::Assistant {
            content: None,
            reasoning_content: Some("again the tool".into()),
            tool_calls: vec![ToolCall::new("call_2", "query_order", r#"{"orderId":"2"}"#)],
        },
        ChatMessage::Tool {
            tool_call_id: "call_2".into(),
            name: "query_order".into(),
            content: r#"{"status":"packed"}"#.into(),
            is_error: false,
        },
    ];
    let tools = vec![ToolDefinition::new(
        "query_order",
        "按订单号查询物流状态",
        json!({"type":"object","properties":{"orderId":{"type":"string"}},"required":["orderId"]}),
    )];
    ChatRequest::new(Arc::from(messages), Arc::from(tools))
}

fn ok() -> Reply {
    Reply::json(200, &json!({"choices":[{"message":{"content":"好的"},"finish_reason":"stop"}]}))
}

/// The body the server got for one `complete` of `request` through `config`.
async fn sent(config: ClientConfig, request: &ChatRequest) -> Value {
    let server = MockServer::start([ok()]).await;
    let client = OpenAiCompatibleClient::new(config.with_base_url(server.base_url())).unwrap();
    client.complete(request).await.unwrap();
    server.requests()[0].json()
}

/// The body the server got for one `stream` of `request` through `config`, read to its end.
async fn sent_streamed(config: ClientConfig, request: &ChatRequest) -> Value {
    let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = MockServer::start([Reply::sse(stream)]).await;
    let client = OpenAiCompatibleClient::new(config.with_base_url(server.base_url())).unwrap();
    let mut s = client.stream(request).await.unwrap();
    while let Some(item) = s.next().await {
        item.unwrap();
    }
    server.requests()[0].json()
}

fn reasoning_of(body: &Value) -> Vec<Option<&str>> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.get("reasoning_content").and_then(Value::as_str))
        .collect()
}

#[tokio::test]
async fn moonshot_deepseek_and_zhipu_send_the_reasoning_of_tool_calls_back_in_every_turn() {
    let request = two_turns();
    // GLM thinks between tool calls and its guide says that reasoning must go back with the tool
    // results: https://docs.bigmodel.cn/cn/guide/capabilities/thinking-mode
    for (preset, model) in [(ProviderPreset::DeepSeek, "deepseek-chat"), (ProviderPreset::Zhipu, "glm-4.7")] {
        let body = sent(ClientConfig::new(preset, model, "k"), &request).await;
        assert_eq!(
            reasoning_of(&body),
            [None, Some("need the order tool"), None, None, None, Some("again the tool"), None],
            "{preset:?}: the earlier turn's tool call keeps its reasoning, its final answer does not"
        );
    }
    // Kimi keeps the reasoning of every assistant message, earlier final answers too: "you must
    // keep the reasoning_content of every historical assistant message in messages as-is"
    // (https://platform.kimi.ai/docs/guide/use-kimi-k2-thinking-model, kimi-k2.7-code).
    let body = sent(ClientConfig::new(ProviderPreset::Moonshot, "kimi-k2.7-code", "k"), &request).await;
    assert_eq!(
        reasoning_of(&body),
        [None, Some("need the order tool"), None, Some("answer it"), None, Some("again the tool"), None],
    );
    let body = sent(ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "k"), &request).await;
    assert!(reasoning_of(&body).iter().all(Option::is_none), "{body}");
}

#[tokio::test]
async fn a_tool_call_without_reasoning_goes_back_with_an_empty_one_where_reasoning_goes_back() {
    // DeepSeek answers 400 "Missing `reasoning_content` field in the assistant message" for a
    // tool-calling message without the field, also when the model gave none (an empty
    // `reasoning_content` from deepseek-v4-flash, a turn made in non-thinking mode): HKUDS/nanobot#946
    // (the same report for Kimi K2.5), agentjido/req_llm#660, continuedev/continue#11290.
    let mut request = two_turns();
    let mut messages = request.messages.to_vec();
    for m in &mut messages {
        if let ChatMessage::Assistant { reasoning_content, .. } = m {
            *reasoning_content = None;
        }
    }
    request.messages = Arc::from(messages);
    for (preset, model) in [
        (ProviderPreset::DeepSeek, "deepseek-v4-flash"),
        (ProviderPreset::Zhipu, "glm-4.7"),
        (ProviderPreset::Moonshot, "kimi-k2.5"),
    ] {
        let body = sent(ClientConfig::new(preset, model, "k"), &request).await;
        assert_eq!(
            reasoning_of(&body),
            [None, Some(""), None, None, None, Some(""), None],
            "{preset:?}: the tool calls carry an empty reasoning, the final answer none"
        );
    }
    for preset in [ProviderPreset::OpenAi, ProviderPreset::Qwen] {
        let body = sent(ClientConfig::new(preset, "m", "k"), &request).await;
        assert!(
            body["messages"].as_array().unwrap().iter().all(|m| m.get("reasoning_content").is_none()),
            "{body}"
        );
    }
}

#[tokio::test]
async fn temperature_defaults_per_preset_and_model() {
    let request = two_turns();
    let body = sent(ClientConfig::new(ProviderPreset::Moonshot, "kimi-k2.5", "k"), &request).await;
    assert!(body.get("temperature").is_none(), "Kimi K2.5 only takes its fixed temperature: {body}");
    for model in ["gpt-5", "o3-mini"] {
        let body = sent(ClientConfig::new(ProviderPreset::OpenAi, model, "k"), &request).await;
        assert!(body.get("temperature").is_none(), "{model}: {body}");
    }
    let body = sent(ClientConfig::new(ProviderPreset::OpenAi, "gpt-4o", "k"), &request).await;
    assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6, "{body}");
    // A request's own temperature is always sent.
    let mut own = two_turns();
    own.temperature = Some(1.0);
    let body = sent(ClientConfig::new(ProviderPreset::Moonshot, "kimi-k2.5", "k"), &own).await;
    assert_eq!(body["temperature"], 1.0);
    // Any preset can leave it out through its quirks.
    let mut config = ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "k");
    config.quirks.default_tool_temperature = None;
    assert!(sent(config, &request).await.get("temperature").is_none());
}

#[tokio::test]
async fn stream_usage_off_leaves_stream_options_out() {
    let mut bodies = Vec::new();
    for usage in [true, false] {
        let mut config = ClientConfig::new(ProviderPreset::OpenAi, "gpt-4o", "k");
        config.quirks.stream_usage = usage;
        bodies.push(sent_streamed(config, &two_turns()).await);
    }
    assert_eq!(bodies[0]["stream_options"], json!({"include_usage": true}));
    let body = &bodies[1];
    assert_eq!(body["stream"], true);
    assert!(body.get("stream_options").is_none(), "{body}");
}

/// DashScope refuses a non-streamed request to an open-source Qwen3 model unless it turns thinking
/// off: 400 "parameter.enable_thinking must be set to false for non-streaming calls"
/// (docs.qwencloud.com/api-reference/preparation/error-messages). Streamed requests leave it alone.
#[tokio::test]
async fn qwen3_open_source_models_turn_thinking_off_when_not_streamed() {
    let request = two_turns();
    let body = sent(ClientConfig::new(ProviderPreset::Qwen, "qwen3-235b-a22b", "k"), &request).await;
    assert_eq!(body["enable_thinking"], false, "{body}");
    // A model whose non-streamed thinking works, or is off by default, is sent no switch.
    for model in ["qwen3-max", "qwen3.5-plus", "qwen-plus"] {
        let body = sent(ClientConfig::new(ProviderPreset::Qwen, model, "k"), &request).await;
        assert!(body.get("enable_thinking").is_none(), "{model}: {body}");
    }
    // Streamed: thinking stays on (its reasoning is streamed).
    let body = sent_streamed(ClientConfig::new(ProviderPreset::Qwen, "qwen3-32b", "k"), &request).await;
    assert_eq!(body["stream"], true);
    assert!(body.get("enable_thinking").is_none(), "{body}");
}

/// DashScope's thinking mode takes only `tool_choice` "auto" or "none": a forced tool call to a model
/// that thinks by default turns thinking off, or the request is refused with 400 "tool_choice is one
/// of the strings that should be [\"none\", \"auto\"]"
/// (docs.qwencloud.com/developer-guides/text-generation/function-calling).
#[tokio::test]
async fn qwen_thinking_models_turn_thinking_off_for_a_forced_tool_call() {
    for choice in [ToolChoice::Required, ToolChoice::Function("query_order".into())] {
        let mut request = two_turns();
        request.tool_choice = Some(choice.clone());
        let body = sent(ClientConfig::new(ProviderPreset::Qwen, "qwen3.5-plus", "k"), &request).await;
        assert_eq!(body["enable_thinking"], false, "{choice:?}: {body}");
        assert!(body.get("tool_choice").is_some(), "{body}");
        // Other presets, and Qwen models whose thinking is off by default, are sent no switch.
        for config in [
            ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "k"),
            ClientConfig::new(ProviderPreset::OpenAi, "gpt-4o", "k"),
        ] {
            let body = sent(config, &request).await;
            assert!(body.get("enable_thinking").is_none(), "{choice:?}: {body}");
        }
    }
    // "auto" and "none" work in thinking mode: thinking stays as it is.
    for choice in [ToolChoice::Auto, ToolChoice::None] {
        let mut request = two_turns();
        request.tool_choice = Some(choice.clone());
        let body = sent(ClientConfig::new(ProviderPreset::Qwen, "qwen3.5-plus", "k"), &request).await;
        assert!(body.get("enable_thinking").is_none(), "{choice:?}: {body}");
    }
}

/// Kimi: K2.x takes no "required"; K2.5 and K2.6 take a named function with thinking off (400
/// "tool_choice 'specified' is incompatible with thinking enabled" otherwise); K3 takes "required"
/// but no named function; kimi-k2.7-code and kimi-k2-thinking, which always think, take neither.
/// What is not taken is left out (the model chooses), a named function on K3 goes as "required".
#[tokio::test]
async fn kimi_models_are_sent_the_tool_choices_they_take() {
    let named = || ToolChoice::Function("query_order".into());
    let named_wire = json!({"type": "function", "function": {"name": "query_order"}});
    // (model, choice, the tool_choice sent, thinking turned off)
    let cases = [
        ("kimi-k2.6", ToolChoice::Required, None, false),
        ("kimi-k2.6", named(), Some(named_wire.clone()), true),
        ("kimi-k2.5-preview", named(), Some(named_wire.clone()), true),
        ("kimi-k2-0905-preview", named(), Some(named_wire.clone()), false),
        ("kimi-k2-0905-preview", ToolChoice::Required, None, false),
        ("moonshot-v1-8k", ToolChoice::Required, None, false),
        ("kimi-k3", ToolChoice::Required, Some(json!("required")), false),
        ("kimi-k3", named(), Some(json!("required")), false),
        ("kimi-k2.7-code", ToolChoice::Required, None, false),
        ("kimi-k2.7-code-highspeed", named(), None, false),
        ("kimi-k2-thinking-turbo", named(), None, false),
    ];
    for (model, choice, want, thinking_off) in cases {
        let mut request = two_turns();
        request.tool_choice = Some(choice.clone());
        for body in [
            sent(ClientConfig::new(ProviderPreset::Moonshot, model, "k"), &request).await,
            sent_streamed(ClientConfig::new(ProviderPreset::Moonshot, model, "k"), &request).await,
        ] {
            assert_eq!(body.get("tool_choice"), want.as_ref(), "{model} {choice:?}: {body}");
            assert_eq!(body["tools"][0]["function"]["name"], "query_order", "{model} {choice:?}: {body}");
            let off = json!({"type": "disabled"});
            assert_eq!(body.get("thinking") == Some(&off), thinking_off, "{model} {choice:?}: {body}");
            assert!(body.get("enable_thinking").is_none(), "{model} {choice:?}: {body}");
        }
    }
    // "auto" and "none" are taken by every Kimi model, thinking left as it is.
    for model in ["kimi-k2.6", "kimi-k3", "kimi-k2.7-code"] {
        for (choice, wire) in [(ToolChoice::Auto, "auto"), (ToolChoice::None, "none")] {
            let mut request = two_turns();
            request.tool_choice = Some(choice);
            let body = sent(ClientConfig::new(ProviderPreset::Moonshot, model, "k"), &request).await;
            assert_eq!((&body["tool_choice"], body.get("thinking")), (&json!(wire), None), "{model}: {body}");
        }
    }
    // Another preset is sent Kimi's names as they are: OpenAI's reference takes every choice.
    let mut request = two_turns();
    request.tool_choice = Some(ToolChoice::Required);
    let body = sent(ClientConfig::new(ProviderPreset::Custom, "kimi-k2.6", "k"), &request).await;
    assert_eq!((&body["tool_choice"], body.get("thinking")), (&json!("required"), None), "{body}");
}

/// Zhipu takes only `tool_choice` "auto" (docs.bigmodel.cn, chat completions): "none" cannot be
/// sent, so the tools are left out instead and the model has nothing to call; the history keeps its
/// tool calls and results. Other choices are left out with the tools still offered.
#[tokio::test]
async fn zhipu_tool_choice_none_leaves_the_tools_out() {
    let zhipu = || ClientConfig::new(ProviderPreset::Zhipu, "glm-4.6", "k");
    let mut request = two_turns();
    request.tool_choice = Some(ToolChoice::None);
    for body in [sent(zhipu(), &request).await, sent_streamed(zhipu(), &request).await] {
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none(), "{body}");
        assert_eq!(body["messages"][1]["tool_calls"][0]["id"], "call_1", "{body}");
        assert_eq!(body["messages"][2]["tool_call_id"], "call_1", "{body}");
    }
    for choice in [ToolChoice::Auto, ToolChoice::Required, ToolChoice::Function("query_order".into())] {
        request.tool_choice = Some(choice.clone());
        let body = sent(zhipu(), &request).await;
        assert_eq!(body["tools"][0]["function"]["name"], "query_order", "{choice:?}: {body}");
        assert_eq!(body.get("tool_choice").is_some(), choice == ToolChoice::Auto, "{choice:?}: {body}");
    }
    // A provider that takes "none" is sent it with the tools.
    request.tool_choice = Some(ToolChoice::None);
    let body = sent(ClientConfig::new(ProviderPreset::DeepSeek, "deepseek-chat", "k"), &request).await;
    assert_eq!(
        (&body["tool_choice"], &body["tools"][0]["function"]["name"]),
        (&json!("none"), &json!("query_order"))
    );
}

#[tokio::test]
async fn a_dashscope_thinking_only_model_is_asked_with_a_stream_even_for_a_whole_answer() {
    // DashScope refuses a non-streamed request to its thinking-only models ("This model only
    // support stream mode"): the call goes out streamed and the answer is read whole.
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"先查订单\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",",
        "\"function\":{\"name\":\"query_order\",\"arguments\":\"{\\\"orderId\\\":\\\"3\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n",
        "data: [DONE]\n\n",
    );
    let server = MockServer::start([Reply::sse(stream.as_bytes())]).await;
    let config = ClientConfig::new(ProviderPreset::Qwen, "qwq-plus", "k").with_base_url(server.base_url());
    let client = OpenAiCompatibleClient::new(config).unwrap();
    let answer = client.complete(&two_turns()).await.unwrap();
    assert_eq!(answer.reasoning_content.as_deref(), Some("先查订单"));
    assert_eq!(answer.tool_calls, [ToolCall::new("c1", "query_order", r#"{"orderId":"3"}"#)]);
    assert_eq!(answer.usage.map(|u| u.total_tokens), Some(13));
    let sent = server.requests()[0].json();
    assert_eq!((&sent["stream"], &sent["stream_options"]), (&json!(true), &json!({"include_usage": true})));
    assert!(sent.get("enable_thinking").is_none(), "its thinking cannot be turned off: {sent}");
    // A hybrid model is still asked without a stream, its thinking off.
    let body = sent_whole_to(ProviderPreset::Qwen, "qwen3-32b").await;
    assert!(body["stream"] != json!(true) && body["enable_thinking"] == json!(false), "{body}");
}

async fn sent_whole_to(preset: ProviderPreset, model: &str) -> Value {
    sent(ClientConfig::new(preset, model, "k"), &two_turns()).await
}

/// A request offering `tools` (each taking anything), with one earlier call of `search` and its
/// result in the history.
fn offering(tools: &[&str]) -> ChatRequest {
    let messages = vec![
        ChatMessage::user("找一下配方"),
        ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: vec![ToolCall::new("call_1", "search", r#"{"q":"配方"}"#)],
        },
        ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            name: "search".into(),
            content: "[]".into(),
            is_error: false,
        },
    ];
    let tools: Vec<_> =
        tools.iter().map(|n| ToolDefinition::new(*n, "d", json!({"type":"object"}))).collect();
    ChatRequest::new(Arc::from(messages), Arc::from(tools))
}

#[tokio::test]
async fn qwen_sends_a_tool_named_search_under_another_name_and_hands_its_calls_back_under_its_own() {
    // DashScope: 400 "Tool names are not allowed to be [search]" (agno-agi/agno#4846,
    // QwenLM/qwen-code#384).
    let whole = json!({"choices":[{"message":{"tool_calls":[{"id":"c2","type":"function",
        "function":{"name":"search_tool","arguments":"{\"q\":\"面包\"}"}}]},"finish_reason":"tool_calls"}]});
    let streamed = concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c3\",\"type\":\"function\",",
        "\"function\":{\"name\":\"search_tool\",\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    );
    let server = MockServer::start([Reply::json(200, &whole), Reply::sse(streamed.as_bytes())]).await;
    let config = ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "k").with_base_url(server.base_url());
    let client = OpenAiCompatibleClient::new(config).unwrap();
    let mut request = offering(&["query_order", "search"]);
    request.tool_choice = Some(ToolChoice::Function("search".into()));
    let answer = client.complete(&request).await.unwrap();
    assert_eq!(answer.tool_calls, [ToolCall::new("c2", "search", r#"{"q":"面包"}"#)]);
    let mut events = Vec::new();
    let mut s = client.stream(&request).await.unwrap();
    while let Some(e) = s.next().await {
        events.push(e.unwrap());
    }
    let names: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCallStarted { name, .. } => Some(name.as_str()),
            ModelEvent::ToolCallFinished { call, .. } => Some(call.name.as_str()),
            ModelEvent::Finished(r) => Some(r.tool_calls[0].name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["search", "search", "search"]);
    for sent in server.requests() {
        let body = sent.json();
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["query_order", "search_tool"]);
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["name"], "search_tool",
            "the history too"
        );
        assert_eq!(body["tool_choice"]["function"]["name"], "search_tool");
        assert!(!body.to_string().contains("\"search\""), "{body}");
    }
}

#[tokio::test]
async fn a_renamed_tool_is_left_alone_where_it_is_not_offered_or_not_refused() {
    // Only a `search_tool` offered: its calls keep their name.
    let whole = json!({"choices":[{"message":{"tool_calls":[{"id":"c2","type":"function",
        "function":{"name":"search_tool","arguments":"{}"}}]},"finish_reason":"tool_calls"}]});
    let server = MockServer::start([Reply::json(200, &whole), ok()]).await;
    let config = ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "k").with_base_url(server.base_url());
    let client = OpenAiCompatibleClient::new(config).unwrap();
    let answer = client.complete(&offering(&["search_tool"])).await.unwrap();
    assert_eq!(answer.tool_calls[0].name, "search_tool");
    // Both names offered: two tools would go by one name; refused before anything is sent.
    let e = client.complete(&offering(&["search", "search_tool"])).await.unwrap_err();
    assert_eq!(e.code, "config_invalid", "{e}");
    assert!(e.message.contains("search_tool"), "{e}");
    assert_eq!(server.requests().len(), 1);
    // Other presets send `search` as it is.
    let body = sent_whole_to_with(ProviderPreset::OpenAi, &offering(&["search"])).await;
    assert_eq!(body["tools"][0]["function"]["name"], "search");
}

async fn sent_whole_to_with(preset: ProviderPreset, request: &ChatRequest) -> Value {
    sent(ClientConfig::new(preset, "m", "k"), request).await
}
