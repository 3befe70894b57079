//! What the client sends: the endpoint, headers and the JSON body (messages with tool calls and
//! tool results, tools from the request, tool_choice, temperature, token limit, stream options),
//! preset quirks (DeepSeek reasoning_content), and never a `null` (but for a tool-call message
//! without text: `"content": null`, see `tests/answer_replay.rs`). Also the URL policy, and a tool
//! schema registered as text going out in the key order it was written.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::provider::{
    ChatModel, ChatRequest, ClientConfig, OpenAiCompatibleClient, ProviderPreset, RetryPolicy, ToolChoice,
};
use arkagent::tool::{FnExecutor, ToolContext, ToolRegistry, ToolResult};
use arkagent::{codes, ChatMessage, ToolCall, ToolDefinition};
use mock_server::{MockServer, Reply};
use serde_json::{json, Map, Value};
use std::sync::Arc;

fn conversation() -> ChatRequest {
    let messages = vec![
        ChatMessage::system("你是订单助手"),
        ChatMessage::user("我的订单 20261010 到哪了？"),
        ChatMessage::Assistant {
            content: Some("查一下".into()),
            reasoning_content: Some("need the order tool".into()),
            tool_calls: vec![ToolCall::new("call_1", "query_order", r#"{"orderId":"20261010"}"#)],
        },
        ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            name: "query_order".into(),
            content: r#"{"status":"shipped"}"#.into(),
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
    Reply::json(200, &json!({"choices":[{"message":{"content":"已发货"},"finish_reason":"stop"}]}))
}

fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.iter().any(has_null),
        Value::Object(m) => m.values().any(has_null),
        _ => false,
    }
}

#[tokio::test]
async fn the_request_carries_history_tools_and_defaults() {
    let server = MockServer::start([ok(), Reply::sse(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")]).await;
    let config = ClientConfig::new(ProviderPreset::Qwen, "qwen3-max", "sk-req-test-1")
        .with_base_url(server.base_url());
    let c = OpenAiCompatibleClient::new(config).unwrap();
    let req = conversation();
    c.complete(&req).await.unwrap();
    let mut s = c.stream(&req).await.unwrap();
    while futures_util::StreamExt::next(&mut s).await.is_some() {}

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-req-test-1"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("application/json"));
    let body = r.json();
    assert!(!has_null(&body), "{body}");
    assert_eq!(body["model"], "qwen3-max");
    assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6, "0.2 by default with tools");
    assert_eq!(body["tools"], json!([req.tools[0].to_openai_tool()]));
    assert!(
        body.get("stream").is_none() && body.get("tool_choice").is_none() && body.get("max_tokens").is_none()
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role":"system","content":"你是订单助手"},
            {"role":"user","content":"我的订单 20261010 到哪了？"},
            {"role":"assistant","content":"查一下","tool_calls":[{"id":"call_1","type":"function","function":{"name":"query_order","arguments":"{\"orderId\":\"20261010\"}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"{\"status\":\"shipped\"}"}
        ])
    );
    let s = &reqs[1];
    assert_eq!(s.header("accept"), Some("text/event-stream"));
    let body = s.json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert!(!has_null(&body));
}

#[tokio::test]
async fn options_and_the_deepseek_quirk() {
    let server = MockServer::start([ok(), ok()]).await;
    let mut req = conversation();
    req.tool_choice = Some(ToolChoice::Function("query_order".into()));
    req.temperature = Some(0.0);
    req.max_tokens = Some(256);
    let deepseek = OpenAiCompatibleClient::new(
        ClientConfig::new(ProviderPreset::DeepSeek, "deepseek-reasoner", "k")
            .with_base_url(server.base_url()),
    )
    .unwrap();
    deepseek.complete(&req).await.unwrap();
    let openai = OpenAiCompatibleClient::new(
        ClientConfig::new(ProviderPreset::OpenAi, "gpt-4o", "k").with_base_url(server.base_url()),
    )
    .unwrap();
    openai.complete(&req).await.unwrap();
    let reqs = server.requests();
    let ds = reqs[0].json();
    assert_eq!(ds["messages"][2]["reasoning_content"], "need the order tool");
    assert_eq!(ds["tool_choice"], json!({"type":"function","function":{"name":"query_order"}}));
    assert_eq!(ds["temperature"], 0.0);
    assert_eq!(ds["max_tokens"], 256);
    let oa = reqs[1].json();
    assert!(oa["messages"][2].get("reasoning_content").is_none());
    assert_eq!(oa["max_completion_tokens"], 256);
    assert!(oa.get("max_tokens").is_none());
}

#[tokio::test]
async fn parallel_tool_calls_goes_only_with_tools() {
    let server = MockServer::start([ok(), ok(), ok()]).await;
    let client = OpenAiCompatibleClient::new(ClientConfig::custom(server.base_url(), "m", "k")).unwrap();
    let mut req = conversation();
    req.parallel_tool_calls = Some(true);
    client.complete(&req).await.unwrap();
    // OpenAI refuses it without tools ("only allowed when 'tools' are specified").
    req.tools = Arc::from(Vec::new());
    client.complete(&req).await.unwrap();
    client.complete(&conversation()).await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].json()["parallel_tool_calls"], true);
    assert!(reqs[1].json().get("parallel_tool_calls").is_none(), "{}", reqs[1].json());
    assert!(reqs[2].json().get("parallel_tool_calls").is_none(), "not set: {}", reqs[2].json());
}

#[test]
fn plain_http_only_to_loopback_unless_allowed() {
    for ok in
        ["http://127.0.0.1:8080/v1", "http://localhost/v1", "http://[::1]:1/v1", "https://example.com/v1"]
    {
        assert!(OpenAiCompatibleClient::new(ClientConfig::custom(ok, "m", "k")).is_ok(), "{ok}");
    }
    for bad in ["http://example.com/v1", "http://192.168.1.10/v1", "http://10.0.0.1:80"] {
        let e = OpenAiCompatibleClient::new(ClientConfig::custom(bad, "m", "k")).unwrap_err();
        assert_eq!(e.code, codes::INSECURE_URL, "{bad}");
    }
    let mut allowed = ClientConfig::custom("http://192.168.1.10/v1", "m", "k");
    allowed.allow_insecure_http = true;
    assert!(OpenAiCompatibleClient::new(allowed).is_ok());
    let e = OpenAiCompatibleClient::new(
        ClientConfig::custom("https://x/v1", "m", "k").with_extra_root_pem("junk"),
    )
    .unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_TLS);
    let e = OpenAiCompatibleClient::new(ClientConfig::custom("https://x/v1", " ", "k")).unwrap_err();
    assert_eq!(e.code, codes::CONFIG_INVALID);
}

/// A base URL with a query (Azure-style `?api-version=`) sends `/chat/completions` after its path
/// and keeps the query; a `#fragment` (never sent: the path would be lost with it) and a base URL
/// that already ends in `/chat/completions` (doubled, a bare 404) are refused when the client is
/// built, naming the base URL.
#[tokio::test]
async fn a_base_url_keeps_its_query_and_refuses_a_fragment_or_the_endpoint_path() {
    let server = MockServer::start([ok(), ok()]).await;
    for base in [
        format!("{}?api-version=2024-10-21", server.base_url()),
        format!("{}/?api-version=2024-10-21", server.base_url()),
    ] {
        let c = OpenAiCompatibleClient::new(ClientConfig::custom(base, "m", "k")).unwrap();
        c.complete(&conversation()).await.unwrap();
    }
    for r in server.requests() {
        assert_eq!(r.path, "/v1/chat/completions?api-version=2024-10-21");
    }
    for bad in [
        format!("{}#section", server.base_url()),
        format!("{}?api-version=1#section", server.base_url()),
        format!("{}/chat/completions", server.base_url()),
        format!("{}/Chat/Completions/?api-version=1", server.base_url()),
    ] {
        let e = OpenAiCompatibleClient::new(ClientConfig::custom(&bad, "m", "k")).unwrap_err();
        assert_eq!(e.code, codes::CONFIG_INVALID, "{bad}: {e}");
        assert!(e.message.starts_with("base_url: "), "{bad}: {e}");
        let said = if bad.contains('#') { "#fragment" } else { "without it" };
        assert!(e.message.contains(said), "{bad}: {e}");
    }
}

#[test]
fn presets_have_base_urls() {
    for (p, host) in [
        (ProviderPreset::OpenAi, "api.openai.com"),
        (ProviderPreset::DeepSeek, "api.deepseek.com"),
        (ProviderPreset::Zhipu, "open.bigmodel.cn"),
        (ProviderPreset::Qwen, "dashscope.aliyuncs.com"),
        (ProviderPreset::Moonshot, "api.moonshot.cn"),
    ] {
        let c = OpenAiCompatibleClient::new(ClientConfig::new(p, "m", "k")).unwrap();
        assert!(c.endpoint().starts_with(&format!("https://{host}/")), "{}", c.endpoint());
        assert!(c.endpoint().ends_with("/chat/completions"));
    }
    assert!(ProviderPreset::Custom.default_base_url().is_none());
}

#[tokio::test]
async fn a_nan_temperature_is_refused_before_sending() {
    let server = MockServer::start([ok()]).await;
    let c = OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", "k").with_retry(RetryPolicy::none()),
    )
    .unwrap();
    let mut req = conversation();
    req.temperature = Some(f32::NAN);
    let e = c.complete(&req).await.unwrap_err();
    assert_eq!(e.code, codes::CONFIG_INVALID);
    assert!(server.requests().is_empty());
}

/// What goes on the wire round after round from one client (its body cache): one body with a
/// `Content-Length` (never chunked), byte for byte the plain serialisation of the whole request, as
/// the history grows, is rewritten in the middle and shrinks; a retried attempt resends the same
/// bytes.
#[tokio::test]
async fn bodies_on_the_wire_are_the_plain_serialisation_with_a_content_length() {
    let server = MockServer::start([]).await;
    let retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: std::time::Duration::from_millis(1),
        max_backoff: std::time::Duration::from_millis(1),
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let config = ClientConfig::new(ProviderPreset::DeepSeek, "deepseek-chat", "sk-wire-test-1")
        .with_base_url(server.base_url())
        .with_retry(retry);
    let c = OpenAiCompatibleClient::new(config.clone()).unwrap();
    let base = conversation();
    let mut history: Vec<ChatMessage> = base.messages.as_ref().clone();
    let mut expected = Vec::new();
    for round in 0..8 {
        match round {
            3 => {
                // A rewrite in the middle (a hook, a repair): same length, other text.
                if let ChatMessage::Tool { content, .. } = &mut history[3] {
                    content.replace_range(1..2, "\"");
                }
            }
            5 => history.truncate(4),
            _ => {
                let id = format!("call_r{round}");
                history.push(ChatMessage::Assistant {
                    content: None,
                    reasoning_content: Some(format!("round {round}")),
                    tool_calls: vec![ToolCall::new(
                        &id,
                        "query_order",
                        format!(r#"{{"orderId":"{round}\"x"}}"#),
                    )],
                });
                history.push(ChatMessage::Tool {
                    tool_call_id: id,
                    name: "query_order".into(),
                    content: "第 \u{2028} 轮".repeat(round + 1),
                    is_error: false,
                });
            }
        }
        let req = ChatRequest::new(Arc::new(history.clone()), Arc::clone(&base.tools));
        let wire = arkagent::provider::convert::to_wire_request(&req, "deepseek-chat", &config.quirks, false);
        expected.push(serde_json::to_vec(&wire).unwrap());
        if round == 6 {
            // Answered 503 once, then 200: the retry carries the same body.
            server.push(Reply::json(503, &json!({"error":{"message":"busy"}})));
            expected.push(expected.last().unwrap().clone());
        }
        server.push(ok());
        c.complete(&req).await.unwrap();
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), expected.len());
    for (r, body) in reqs.iter().zip(&expected) {
        assert_eq!(r.header("content-length"), Some(body.len().to_string().as_str()));
        assert_eq!(r.header("transfer-encoding"), None);
        assert_eq!(&r.body, body, "{}", String::from_utf8_lossy(&r.body));
    }
}

/// A schema registered as text reaches the model with its keys in the order written, at every
/// level (`reasoning` before `answer`, on purpose; a nested object's keys too), compacted; the
/// registry still validates calls against it; a definition built from a `Value` beside it is sent
/// as that value serialises (keys sorted). Both the unstreamed and the streamed body.
#[tokio::test]
async fn a_schema_registered_as_text_is_sent_in_its_key_order() {
    let written = r#"{
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "description": "why, before the answer"},
            "answer": {"type": "object", "properties": {"zone": {"type": "string"}, "amount": {"type": "integer"}}, "required": ["zone"]}
        },
        "required": ["reasoning", "answer"],
        "additionalProperties": false
    }"#;
    let compact = r#"{"type":"object","properties":{"reasoning":{"type":"string","description":"why, before the answer"},"answer":{"type":"object","properties":{"zone":{"type":"string"},"amount":{"type":"integer"}},"required":["zone"]}},"required":["reasoning","answer"],"additionalProperties":false}"#;
    let noop =
        || Arc::new(FnExecutor(|_: Map<String, Value>, _: ToolContext| async { Ok(ToolResult::text("ok")) }));
    let mut registry = ToolRegistry::new();
    registry
        .register(ToolDefinition::from_schema_text("decide", "decides", written).unwrap(), noop())
        .unwrap();
    let by_value =
        json!({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}});
    registry.register(ToolDefinition::new("by_value", "a value schema", by_value.clone()), noop()).unwrap();
    // Validation reads the parsed schema, whatever the order of its text.
    let refused = registry
        .execute(
            &ToolCall::new("c1", "decide", r#"{"reasoning":"r","answer":{"amount":1}}"#),
            ToolContext::detached("s", "c1"),
        )
        .await;
    assert_eq!(refused.unwrap_err().code, codes::TOOL_ARGUMENT_REQUIRED);

    let server = MockServer::start([ok(), Reply::sse(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")]).await;
    let config = ClientConfig::new(ProviderPreset::OpenAi, "gpt-4o", "sk-order-test-1")
        .with_base_url(server.base_url());
    let c = OpenAiCompatibleClient::new(config).unwrap();
    let req = ChatRequest::new(
        Arc::from(vec![ChatMessage::user("decide")]),
        Arc::clone(registry.snapshot().definitions()),
    );
    c.complete(&req).await.unwrap();
    let mut s = c.stream(&req).await.unwrap();
    while futures_util::StreamExt::next(&mut s).await.is_some() {}

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        let raw = std::str::from_utf8(&r.body).unwrap();
        assert!(
            raw.contains(&format!(r#""name":"decide","description":"decides","parameters":{compact}}}"#)),
            "{raw}"
        );
        let sorted =
            r#""parameters":{"properties":{"a":{"type":"string"},"b":{"type":"string"}},"type":"object"}"#;
        assert!(raw.contains(sorted), "{raw}");
        let body = r.json();
        assert_eq!(
            body["tools"][0]["function"]["parameters"],
            serde_json::from_str::<Value>(written).unwrap()
        );
        assert_eq!(body["tools"][1]["function"]["parameters"], by_value);
    }
}
