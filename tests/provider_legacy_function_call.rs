//! An answer that calls a function with the legacy `function_call` (the deprecated functions API)
//! instead of `tool_calls`: the agent asks with `tools` and reads only `tool_calls`, so such an
//! answer is a `provider_decode` error naming `function_call`, whole or streamed, never a silent
//! empty answer (a run that completes with nothing). An answer that has `tool_calls` too is read by
//! them; a `"function_call": null` (gateways that write every field) is nothing.

#[path = "support/derived.rs"]
mod derived;
#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{decode_sse_body, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy};
use arkagent::provider::{ChatModel, ModelResponse};
use arkagent::{codes, ErrorLayer, ToolCall};
use derived::sse;
use mock_server::{MockServer, Reply};
use request::request;
use serde_json::json;

fn client(server: &MockServer) -> OpenAiCompatibleClient {
    let config = ClientConfig::custom(server.base_url(), "m", "sk-legacy-function-key")
        .with_retry(RetryPolicy::none());
    OpenAiCompatibleClient::new(config).expect("client")
}

const CALL: &str = r#"{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}"#;

/// The streamed form: the legacy call in two fragments, then its finish reason.
fn streamed_legacy() -> Vec<u8> {
    sse(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":""}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"function_call":{"arguments":"{\"city\":\"Paris\"}"}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"function_call"}]}"#,
        "[DONE]",
    ])
}

#[tokio::test]
async fn a_legacy_function_call_is_a_decode_error_naming_it_whole_and_streamed() {
    let whole = json!({"choices":[{"index":0,"message":{"role":"assistant","content":null,
        "function_call":serde_json::from_str::<serde_json::Value>(CALL).unwrap()},"finish_reason":"function_call"}]});
    let server = MockServer::start([
        Reply::json(200, &whole),
        Reply::sse(&streamed_legacy()),
        // A streamed request answered whole, a non-streamed one with a stream.
        Reply::json(200, &whole),
        Reply::sse(&streamed_legacy()),
    ])
    .await;
    let c = client(&server);
    let mut errors = vec![c.complete(&request()).await.unwrap_err()];
    let (events, e) = drain::drain(&c, &request()).await;
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::Finished(_))), "{events:?}");
    errors.push(e.expect("an error"));
    errors.push(drain::drain(&c, &request()).await.1.expect("an error"));
    errors.push(c.complete(&request()).await.unwrap_err());
    for e in errors {
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_DECODE), "{e}");
        assert!(e.message.contains("`function_call`") && e.message.contains("`tool_calls`"), "{e}");
    }
}

#[tokio::test]
async fn an_answer_with_tool_calls_too_or_a_null_function_call_is_read_as_usual() {
    let call = json!({"id":"c1","type":"function","function":serde_json::from_str::<serde_json::Value>(CALL).unwrap()});
    let both = json!({"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[call],
        "function_call":serde_json::from_str::<serde_json::Value>(CALL).unwrap()},"finish_reason":"tool_calls"}]});
    let null = json!({"choices":[{"index":0,"message":{"role":"assistant","content":"sunny",
        "function_call":null,"tool_calls":null},"finish_reason":"stop"}]});
    let server = MockServer::start([Reply::json(200, &both), Reply::json(200, &null)]).await;
    let c = client(&server);
    let r = c.complete(&request()).await.unwrap();
    assert_eq!(r.tool_calls, [ToolCall::new("c1", "get_weather", r#"{"city":"Paris"}"#)]);
    let r = c.complete(&request()).await.unwrap();
    assert_eq!((r.content.as_deref(), r.tool_calls.len()), (Some("sunny"), 0));

    // Streamed: a call in `tool_calls` mirrored into `function_call`; a `null` in every delta.
    let both = [
        r#"{"choices":[{"index":0,"delta":{"function_call":{"name":"get_weather"},"tool_calls":[{"index":0,"id":"c1","function":{"name":"get_weather","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
    ];
    let answer = |events: Vec<ModelEvent>| match events.last() {
        Some(ModelEvent::Finished(r)) => r.clone(),
        other => panic!("{other:?}"),
    };
    let r: ModelResponse = answer(derived::events_both_ways(&both));
    assert_eq!(r.tool_calls, [ToolCall::new("c1", "get_weather", "{}")]);
    let null = [
        r#"{"choices":[{"index":0,"delta":{"content":"sun","function_call":null,"tool_calls":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"ny","function_call":null},"finish_reason":"stop"}]}"#,
    ];
    let r = answer(derived::events_both_ways(&null));
    assert_eq!((r.content.as_deref(), r.tool_calls.len()), (Some("sunny"), 0));
    // And the legacy stream is refused by the decoder itself (the fast path gives way to the
    // derived parse, which sees the call).
    let e = decode_sse_body(&streamed_legacy()).unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_DECODE, "{e}");
}
