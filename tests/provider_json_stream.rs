//! A streamed request answered with a whole JSON body (HTTP 200, `Content-Type: application/json`):
//! a gateway that ignores `stream: true` sends a full `chat.completion`, and some providers send
//! an `{"error": ...}` body with a 200. The client reads such a body like a non-streamed answer
//! (within the same size limit) and turns it into the model events a stream gives, or into the
//! structured error `complete` gives for the same body.

#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{
    ChatModel, ClientConfig, ModelEvent, ModelResponse, OpenAiCompatibleClient, RetryPolicy,
};
use arkagent::{codes, AgentError, ErrorLayer, ToolCall, Usage};
use futures_util::StreamExt;
use mock_server::{MockServer, Reply};
use request::request;
use serde_json::{json, Value};

fn client(server: &MockServer, max_response_bytes: usize) -> OpenAiCompatibleClient {
    OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", "sk-json-stream-key")
            .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() })
            .with_max_response_bytes(max_response_bytes),
    )
    .unwrap()
}

/// Every event of a stream, or the error (at the start or as an item).
async fn events(c: &OpenAiCompatibleClient) -> Result<Vec<ModelEvent>, AgentError> {
    let mut stream = c.stream(&request()).await?;
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item?);
    }
    Ok(out)
}

fn completion() -> Value {
    json!({"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",
        "content":"full json answer","reasoning_content":"thought",
        "tool_calls":[{"id":"c1","type":"function","function":{"name":"t","arguments":"{\"a\":1}"}},
                      {"id":"c2","type":"function","function":{"name":"u","arguments":{"b":2}}}]},
        "finish_reason":"tool_calls"}],
        "usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}})
}

#[tokio::test]
async fn a_whole_completion_becomes_the_events_of_a_stream() {
    let server = MockServer::start([
        Reply::json(200, &completion()),
        Reply::json(200, &completion()).with_header("X-Ignored", "1"),
    ])
    .await;
    let c = client(&server, 1 << 20);
    let want = c.complete(&request()).await.unwrap();
    let usage = Usage { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 };
    let calls = [ToolCall::new("c1", "t", r#"{"a":1}"#), ToolCall::new("c2", "u", r#"{"b":2}"#)];
    assert_eq!(
        want,
        ModelResponse {
            content: Some("full json answer".into()),
            reasoning_content: Some("thought".into()),
            tool_calls: calls.to_vec(),
            finish_reason: Some("tool_calls".into()),
            usage: Some(usage),
        }
    );
    let got = events(&c).await.unwrap();
    assert_eq!(
        got,
        vec![
            ModelEvent::ReasoningDelta("thought".into()),
            ModelEvent::TextDelta("full json answer".into()),
            ModelEvent::ToolCallStarted { index: 0, id: "c1".into(), name: "t".into() },
            ModelEvent::ToolCallArgumentsDelta { index: 0, delta: r#"{"a":1}"#.into() },
            ModelEvent::ToolCallFinished { index: 0, call: calls[0].clone() },
            ModelEvent::ToolCallStarted { index: 1, id: "c2".into(), name: "u".into() },
            ModelEvent::ToolCallArgumentsDelta { index: 1, delta: r#"{"b":2}"#.into() },
            ModelEvent::ToolCallFinished { index: 1, call: calls[1].clone() },
            ModelEvent::Usage(usage),
            ModelEvent::Finished(want),
        ]
    );
}

#[tokio::test]
async fn a_text_answer_with_a_charset_parameter_is_read_as_json() {
    let body = json!({"choices":[{"message":{"content":"plain"},"finish_reason":"stop"}]});
    let server = MockServer::start([Reply::Full {
        status: 200,
        headers: vec![("Content-Type".into(), "Application/JSON; charset=utf-8".into())],
        body: body.to_string().into_bytes(),
    }])
    .await;
    let got = events(&client(&server, 1 << 20)).await.unwrap();
    assert_eq!(
        got,
        vec![ModelEvent::TextDelta("plain".into()), ModelEvent::Finished(ModelResponse::text("plain"))]
    );
}

#[tokio::test]
async fn an_error_body_with_status_200_is_the_same_structured_error_as_without_streaming() {
    let error = json!({"error":{"message":"Invalid model name xyz","type":"invalid_request_error","code":"model_not_found"}});
    let server = MockServer::start([Reply::json(200, &error), Reply::json(200, &error)]).await;
    let c = client(&server, 1 << 20);
    let plain = c.complete(&request()).await.unwrap_err();
    let streamed = events(&c).await.unwrap_err();
    assert_eq!(streamed, plain);
    assert_eq!((streamed.layer, streamed.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_HTTP_STATUS));
    assert!(streamed.message.contains("Invalid model name xyz"), "{streamed}");
    assert!(streamed.message.contains("model_not_found"), "{streamed}");
}

#[tokio::test]
async fn a_json_body_over_the_limit_is_refused_and_a_broken_one_keeps_its_raw_text() {
    let mut big = completion();
    big["choices"][0]["message"]["content"] = Value::String("x".repeat(4096));
    let server = MockServer::start([
        Reply::json(200, &big),
        Reply::Full {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: b"{\"choices\": [ {\"mess".to_vec(),
        },
    ])
    .await;
    let c = client(&server, 1024);
    let e = events(&c).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_RESPONSE_TOO_LARGE, "{e}");
    let e = events(&c).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_DECODE, "{e}");
    assert!(e.message.contains("{\"choices\": [ {\"mess"), "{e}");
}

#[tokio::test]
async fn an_event_stream_is_still_read_as_one() {
    // `data:` lines, whatever else the body looks like: only a JSON content type switches.
    let server = MockServer::start([Reply::sse(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"s\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    )])
    .await;
    let got = events(&client(&server, 1 << 20)).await.unwrap();
    assert_eq!(got.first(), Some(&ModelEvent::TextDelta("s".into())));
    assert!(matches!(got.last(), Some(ModelEvent::Finished(r)) if r.content.as_deref() == Some("s")));
}

#[tokio::test]
async fn an_event_stream_labelled_as_json_is_still_read_as_one() {
    // Some proxies label an event stream `application/json`: its `data:` lines decide.
    let sse = concat!(
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hello\"}}]}\n\n",
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let server =
        MockServer::start([Reply::raw(200, sse).with_header("Content-Type", "application/json")]).await;
    let events = events(&client(&server, 1 << 20)).await.unwrap();
    assert!(events.iter().any(|e| matches!(e, ModelEvent::TextDelta(t) if t == "hello")), "{events:?}");
    let Some(ModelEvent::Finished(response)) = events.last() else { panic!("{events:?}") };
    assert_eq!(response.content.as_deref(), Some("hello"));
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn a_labelled_event_stream_starting_with_a_bom_or_a_comment_is_read_as_one() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    for prefix in ["\u{feff}", ": keep-alive\n\n", "event: message\n", "id: 1\n"] {
        let server = MockServer::start([
            Reply::raw(200, format!("{prefix}{body}")).with_header("Content-Type", "application/json")
        ])
        .await;
        let events = events(&client(&server, 1 << 20)).await.unwrap_or_else(|e| panic!("{prefix:?}: {e}"));
        let Some(ModelEvent::Finished(response)) = events.last() else { panic!("{prefix:?}: {events:?}") };
        assert_eq!(response.content.as_deref(), Some("hi"), "{prefix:?}");
    }
}

#[tokio::test]
async fn a_json_body_starting_with_a_bom_is_read_streamed_or_not() {
    let body = "\u{feff}{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}";
    let reply = || Reply::raw(200, body.to_string()).with_header("Content-Type", "application/json");
    let server = MockServer::start([reply(), reply()]).await;
    let c = client(&server, 1 << 20);
    let events = events(&c).await.unwrap();
    let Some(ModelEvent::Finished(response)) = events.last() else { panic!("{events:?}") };
    assert_eq!(response.content.as_deref(), Some("hi"));
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("hi"));
}
