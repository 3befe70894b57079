//! The error bodies of compatible providers, with a 200 and with an error status, against the
//! local mock server: `{"error": {...}}` (OpenAI, GLM, Qwen's compatible mode, Moonshot) and a
//! top-level `{"code", "message"}` or `{"code", "msg"}` (DashScope's native errors, Zhipu's older
//! API, gateways such as one-api). Either is a provider error naming the provider's code and
//! message (`provider_http_status`, or `provider_content_filtered` when its code says moderation
//! refused it), not an undecodable answer; an error that lasts (an exhausted quota, Moonshot's
//! `exceeded_current_quota_error`) is not retried, whichever form it takes.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{ChatModel, ClientConfig, OpenAiCompatibleClient, RetryPolicy, Timeouts};
use arkagent::{codes, AgentError, ErrorLayer};
use mock_server::{End, MockServer, Reply};
use request::request;
use serde_json::json;
use std::time::Duration;

const KEY: &str = "sk-error-bodies-key-0123456789";

fn client(server: &MockServer, max_retries: u32) -> OpenAiCompatibleClient {
    let retry = RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(50),
        ..RetryPolicy::default()
    };
    let timeouts = Timeouts { total: Duration::from_secs(10), ..Timeouts::default() };
    OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", KEY).with_retry(retry).with_timeouts(timeouts),
    )
    .expect("client")
}

/// The bodies of a 200 that is an error, the code of the error and what it must say.
fn error_bodies_with_200() -> Vec<(serde_json::Value, &'static str, &'static str)> {
    vec![
        // GLM: a numeric code inside `error` (1301: moderation refused the input or output).
        (
            json!({"error": {"code": "1301", "message": "系统检测到输入或生成内容可能包含不安全或敏感内容"}}),
            codes::PROVIDER_CONTENT_FILTERED,
            "[1301] 系统检测到",
        ),
        // Moonshot: a type and no code.
        (
            json!({"error": {"message": "Invalid request: tool_call_id is not found", "type": "invalid_request_error"}}),
            codes::PROVIDER_HTTP_STATUS,
            "[invalid_request_error] Invalid request: tool_call_id",
        ),
        // DashScope's native error, at the top level, with its request id.
        (
            json!({"code": "DataInspectionFailed", "message": "Input data may contain inappropriate content.", "request_id": "5c3f-1"}),
            codes::PROVIDER_CONTENT_FILTERED,
            "[DataInspectionFailed] Input data may contain inappropriate content.",
        ),
        // A gateway's numeric code at the top level (a status no retry gets past; a 5xx one is
        // retried: tests/provider_retry_bodies.rs).
        (
            json!({"code": 400, "message": "invalid request: model not found", "data": null}),
            codes::PROVIDER_HTTP_STATUS,
            "[400] invalid request",
        ),
        // Zhipu's older API: `msg`, not `message`.
        (
            json!({"code": 1261, "msg": "Prompt 超长", "success": false}),
            codes::PROVIDER_HTTP_STATUS,
            "[1261] Prompt 超长",
        ),
    ]
}

fn assert_provider_error(e: &AgentError, code: &str, want: &str, context: &str) {
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, code), "{context}: {e}");
    assert!(e.message.contains(want), "{context}: {e}");
}

#[tokio::test]
async fn a_200_with_an_error_body_is_a_provider_error_naming_its_code() {
    for (body, code, want) in error_bodies_with_200() {
        let server = MockServer::start([
            Reply::json(200, &body),
            Reply::json(200, &body),
            Reply::StreamAs {
                content_type: Some("text/event-stream".into()),
                parts: vec![body.to_string().into_bytes()],
                delay: Duration::ZERO,
                end: End::Complete,
            },
        ])
        .await;
        let c = client(&server, 2);
        let e = c.complete(&request()).await.unwrap_err();
        assert_provider_error(&e, code, want, &format!("complete {body}"));
        // Streamed: labelled JSON, and the same body sent as an event stream.
        for how in ["json", "event-stream"] {
            let (events, e) = drain::drain(&c, &request()).await;
            assert!(events.is_empty(), "{how} {body}: {events:?}");
            assert_provider_error(&e.expect("an error"), code, want, &format!("stream ({how}) {body}"));
        }
        // None of these is a rate limit or a failure on the provider's side: not retried (see
        // tests/provider_retry_bodies.rs for those).
        assert_eq!(server.requests().len(), 3, "{body}");
    }
}

#[tokio::test]
async fn an_error_status_with_a_top_level_code_and_message_is_described() {
    let server = MockServer::start([Reply::json(
        400,
        &json!({"code": "InvalidParameter", "message": "Range of input length should be [1, 30720]", "request_id": "r-2"}),
    )])
    .await;
    let e = client(&server, 2).complete(&request()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_HTTP_STATUS, "{e}");
    assert_eq!(e.message, "HTTP 400: [InvalidParameter] Range of input length should be [1, 30720]");
}

#[tokio::test]
async fn a_lasting_error_is_not_retried_in_either_form() {
    let bodies = [
        // Moonshot's exhausted quota or balance, sent with a 429.
        json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details", "type": "exceeded_current_quota_error"}}),
        // OpenAI's, at the top level (a gateway that unwraps it).
        json!({"code": "insufficient_quota", "message": "You exceeded your current quota"}),
        // Zhipu's arrears code at the top level.
        json!({"code": 1113, "msg": "您的账户已欠费"}),
    ];
    for body in bodies {
        let server = MockServer::start([Reply::json(429, &body), Reply::json(200, &json!({}))]).await;
        let e = client(&server, 3).complete(&request()).await.unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_QUOTA_EXHAUSTED, "{body}: {e}");
        assert!(e.message.contains("lasts until the account"), "{body}: {e}");
        assert_eq!(server.requests().len(), 1, "{body}");
    }
}

#[tokio::test]
async fn a_passing_rate_limit_of_moonshot_is_still_retried() {
    let server = MockServer::start([
        Reply::json(429, &json!({"error": {"message": "The engine is currently overloaded, please try again later", "type": "engine_overloaded_error"}})),
        Reply::json(200, &json!({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})),
    ])
    .await;
    let r = client(&server, 2).complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("ok"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn the_key_echoed_in_a_200_error_body_is_redacted() {
    let body = json!({"code": "InvalidApiKey", "message": format!("Invalid API-key provided: {KEY}")});
    let server = MockServer::start([Reply::json(200, &body), Reply::json(200, &body)]).await;
    let c = client(&server, 0);
    let e = c.complete(&request()).await.unwrap_err();
    assert!(!e.message.contains(KEY) && e.message.contains("<redacted>"), "{e}");
    let (_, e) = drain::drain(&c, &request()).await;
    let e = e.expect("an error");
    assert!(!e.message.contains(KEY) && e.message.contains("<redacted>"), "{e}");
}

#[tokio::test]
async fn a_key_with_slashes_echoed_json_escaped_is_redacted() {
    // Qianfan's keys hold slashes (`bce-v3/ALTAK-.../...`); a gateway whose JSON encoder escapes
    // `/` (PHP's does by default) echoes it as `bce-v3\/ALTAK-...`, which a raw excerpt shows as is.
    const SLASHED: &str = "bce-v3/ALTAK-Sentinel42/abcdef0123";
    let escaped = SLASHED.replace('/', "\\/");
    let server = MockServer::start([
        Reply::raw(200, format!(r#"{{"detail":"no such key: {escaped}"}}"#)),
        Reply::raw(502, format!(r#"{{"detail":"upstream refused {escaped}"}}"#)),
    ])
    .await;
    let config = ClientConfig::custom(server.base_url(), "m", SLASHED).with_retry(RetryPolicy::none());
    let c = OpenAiCompatibleClient::new(config).unwrap();
    for _ in 0..2 {
        let e = c.complete(&request()).await.unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!text.contains("Sentinel42") && text.contains("<redacted>"), "{text}");
    }
}

/// A gateway whose JSON encoder escapes characters echoes the key as `\u0073k-...` in a body the
/// error shows raw: an error status, a 200 that is not JSON or not an answer, a stream chunk that
/// is not JSON, an error event; and spelt all in escapes across the end of an excerpt that was cut.
/// None of these errors shows the key or a start of it.
#[tokio::test]
async fn the_key_echoed_with_json_escapes_is_redacted_from_every_raw_excerpt() {
    let escaped = format!("\\u0073{}", &KEY[1..]);
    let all: String = KEY.chars().map(|c| format!("\\u{:04x}", u32::from(c))).collect();
    // The escapes of the key from 2,000 bytes on: the excerpt of 2,048 bytes ends inside them.
    let long = format!(r#"{{"detail":"{}Bearer {all} and more"}}"#, "x ".repeat(993));
    let sse = |payload: &str| format!("{payload}\n\ndata: [DONE]\n\n").into_bytes();
    let cases = [
        (
            "an error status",
            Reply::raw(401, format!(r#"{{"detail":"invalid header: Bearer {escaped}"}}"#)),
            false,
        ),
        ("a 200 not JSON", Reply::raw(200, format!("<html>Bearer {escaped}</html>")), false),
        ("a 200 not an answer", Reply::raw(200, format!(r#"{{"detail":"Bearer {escaped}"}}"#)), false),
        ("an error status cut", Reply::raw(502, long.clone()), false),
        ("a 200 cut", Reply::raw(200, long), false),
        ("a stream chunk not JSON", Reply::sse(&sse(&format!("data: {{Bearer {escaped}"))), true),
        ("an error event", Reply::sse(&sse(&format!("event: error\ndata: Bearer {escaped}"))), true),
    ];
    for (what, reply, stream) in cases {
        let server = MockServer::start([reply]).await;
        let c = client(&server, 0);
        let e = if stream {
            drain::drain(&c, &request()).await.1.expect("an error")
        } else {
            c.complete(&request()).await.unwrap_err()
        };
        let text = format!("{e} {e:?}");
        assert!(text.contains("<redacted>"), "{what}: the echo is shown: {text}");
        for shown in [&KEY[1..], &escaped[..10], &all[..24]] {
            assert!(!text.contains(shown), "{what}: {shown} is shown: {text}");
        }
    }
}

#[tokio::test]
async fn an_error_payload_at_the_top_level_inside_a_stream_is_the_streams_error() {
    // iFlytek Spark's compatible API and some relays report a failure inside the stream as a
    // top-level `{"code", "message"}` payload; it was read as a chunk with no choices and
    // dropped, leaving a cut answer (or an empty one before `[DONE]`) that hid the reason.
    let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal\"}}]}\n\n";
    for (error, want) in [
        (r#"{"code":10013,"message":"content blocked","sid":"cht0001"}"#, "[10013] content blocked"),
        (r#"{"code":"rate_limited","msg":"slow down","choices":[]}"#, "[rate_limited] slow down"),
    ] {
        let body = format!("{text}data: {error}\n\ndata: [DONE]\n\n");
        let server = MockServer::start([Reply::sse(body.as_bytes())]).await;
        let (events, e) = drain::drain(&client(&server, 0), &request()).await;
        let e = e.unwrap_or_else(|| panic!("{error}: no error, events {events:?}"));
        assert_provider_error(&e, codes::PROVIDER_HTTP_STATUS, want, error);
        assert!(e.message.contains("error in stream"), "{e}");
    }
    // Keep-alive payloads with no message stay keep-alives.
    let body = format!(
        "{text}data: {{}}\n\ndata: {{\"choices\":[],\"code\":0}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    );
    let server = MockServer::start([Reply::sse(body.as_bytes())]).await;
    let (events, e) = drain::drain(&client(&server, 0), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert!(
        matches!(events.last(), Some(arkagent::provider::ModelEvent::Finished(r)) if r.content.as_deref() == Some("hal"))
    );
}

#[tokio::test]
async fn a_top_level_code_or_message_that_says_success_is_no_error() {
    // iFlytek Spark's compatible API puts `"code":0,"message":"Success"` on every chunk, and
    // wrappers (`{"code":0,"msg":"ok","data":...}`, `"code":"200"`, `"success":true`) say success
    // at the top level too: a payload of theirs with no choices (a keep-alive, a filter note) is
    // no error, or a complete answer would be lost to an "error" that reads "[0] Success".
    let text = "data: {\"code\":0,\"message\":\"Success\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal\"}}]}\n\n";
    for keep_alive in [
        r#"{"code":0,"message":"Success","sid":"cht0001","choices":[]}"#,
        r#"{"code":"0","msg":"ok"}"#,
        r#"{"code":200,"message":"OK","choices":null}"#,
        r#"{"code":"200","msg":"success","data":null}"#,
        r#"{"code":"SUCCESS","message":"request succeeded"}"#,
        r#"{"success":true,"message":"ok","choices":[]}"#,
        r#"{"message":"success","choices":[]}"#,
    ] {
        let body = format!(
            "{text}data: {keep_alive}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
        );
        let server = MockServer::start([Reply::sse(body.as_bytes())]).await;
        let (events, e) = drain::drain(&client(&server, 0), &request()).await;
        assert!(e.is_none(), "{keep_alive}: {e:?}");
        assert!(
            matches!(events.last(), Some(arkagent::provider::ModelEvent::Finished(r)) if r.content.as_deref() == Some("hal")),
            "{keep_alive}: {events:?}"
        );
    }
    // A wrapper that says success around something that is not a chat completion is an answer
    // this client cannot read (`provider_decode`), not the provider's error "[0] ok".
    let server =
        MockServer::start([Reply::json(200, &json!({"code": 0, "msg": "ok", "data": {"result": "hal"}}))])
            .await;
    let e = client(&server, 0).complete(&request()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_DECODE, "{e}");
    // A failure code next to them is still an error.
    let server =
        MockServer::start([Reply::json(200, &json!({"code": 1, "msg": "Success? no", "success": false}))])
            .await;
    let e = client(&server, 0).complete(&request()).await.unwrap_err();
    assert_provider_error(&e, codes::PROVIDER_HTTP_STATUS, "[1] Success? no", "code 1");
}
