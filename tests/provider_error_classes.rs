//! What kind of failure a provider's error names, against the local mock server: a refused key
//! (`provider_auth`), a passing rate limit (`provider_rate_limited`, retried) or a used-up quota
//! or balance (`provider_quota_exhausted`, never retried: an app tells "slow down" from "top up
//! the account"), read from the provider's own code whatever the HTTP status, in every body form:
//! OpenAI's `{"error": {...}}`, a top-level `{"code", "msg"}`, `{"error": true, ...}`, MiniMax's
//! `base_resp` and Baidu's `error_code` (both also sent with an HTTP 200, which is a provider
//! error, not an undecodable or empty answer). The provider's code and message stay in the
//! error's message; the key never does.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/retry_client.rs"]
mod retry_client;

use arkagent::provider::{ChatModel, OpenAiCompatibleClient};
use arkagent::{codes, AgentError, ErrorLayer};
use mock_server::{End, MockServer, Reply};
use retry_client::{ok, request};
use serde_json::json;
use std::time::Duration;

const KEY: &str = "sk-error-classes-key-0123456789";

fn client(server: &MockServer, max_retries: u32) -> OpenAiCompatibleClient {
    retry_client::client(server, max_retries, KEY)
}

fn assert_error(e: &AgentError, code: &str, words: &[&str], context: &str) {
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, code), "{context}: {e}");
    for w in words {
        assert!(e.message.contains(w), "{context}: {e} lacks {w:?}");
    }
    assert!(!e.message.contains(KEY), "{context}: {e}");
}

/// Error bodies sent with an HTTP 200, the code each must give and what its message must keep.
fn bodies_with_200() -> Vec<(serde_json::Value, &'static str, Vec<&'static str>)> {
    vec![
        // MiniMax: a bad key, with `choices: null` as its error answers have.
        (
            json!({"id": "0", "choices": null, "base_resp": {"status_code": 1004, "status_msg": "login fail: Please carry the API secret key in the 'Authorization' field"}}),
            codes::PROVIDER_AUTH,
            vec!["[1004]", "login fail"],
        ),
        // MiniMax: no balance left.
        (
            json!({"base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}}),
            codes::PROVIDER_QUOTA_EXHAUSTED,
            vec!["[1008] insufficient balance"],
        ),
        // MiniMax: a rate limit.
        (
            json!({"base_resp": {"status_code": 1002, "status_msg": "rate limit"}}),
            codes::PROVIDER_RATE_LIMITED,
            vec!["[1002] rate limit"],
        ),
        // MiniMax: sensitive input, refused by moderation.
        (
            json!({"base_resp": {"status_code": 1026, "status_msg": "input new_sensitive"}}),
            codes::PROVIDER_CONTENT_FILTERED,
            vec!["[1026] input new_sensitive"],
        ),
        // MiniMax: a code no table here knows (invalid params): still MiniMax's error.
        (
            json!({"base_resp": {"status_code": 2013, "status_msg": "invalid params"}}),
            codes::PROVIDER_HTTP_STATUS,
            vec!["[2013] invalid params"],
        ),
        // Baidu ERNIE: an invalid access token, the day's limit, the QPS limit.
        (
            json!({"error_code": 110, "error_msg": "Access token invalid or no longer valid"}),
            codes::PROVIDER_AUTH,
            vec!["[110] Access token invalid"],
        ),
        (
            json!({"error_code": 17, "error_msg": "Open api daily request limit reached"}),
            codes::PROVIDER_QUOTA_EXHAUSTED,
            vec!["[17] Open api daily request limit reached"],
        ),
        (
            json!({"error_code": 18, "error_msg": "Open api qps request limit reached"}),
            codes::PROVIDER_RATE_LIMITED,
            vec!["[18] Open api qps"],
        ),
        // Qianfan's rate limit at the top level, with a 200.
        (
            json!({"code": 336501, "msg": "Rate limit reached for RPM"}),
            codes::PROVIDER_RATE_LIMITED,
            vec!["[336501] Rate limit reached for RPM"],
        ),
        // A boolean flag with the message beside it.
        (
            json!({"error": true, "message": "upstream refused the request", "code": "E_UPSTREAM"}),
            codes::PROVIDER_HTTP_STATUS,
            vec!["[E_UPSTREAM] upstream refused the request"],
        ),
        (
            json!({"error": true, "msg": "余额不足", "code": "insufficient_quota"}),
            codes::PROVIDER_QUOTA_EXHAUSTED,
            vec!["[insufficient_quota] 余额不足"],
        ),
    ]
}

#[tokio::test]
async fn error_bodies_with_a_200_are_provider_errors_of_their_kind() {
    for (body, code, words) in bodies_with_200() {
        let server = MockServer::start([
            Reply::json(200, &body),
            Reply::json(200, &body),
            Reply::StreamAs {
                content_type: Some("text/event-stream".into()),
                parts: vec![format!("data: {body}\n\n").into_bytes()],
                delay: Duration::ZERO,
                end: End::Complete,
            },
        ])
        .await;
        // No retries: a rate limit sent with a 200 is retried as a 429 is
        // (tests/provider_retry_bodies.rs); here each body is read once.
        let c = client(&server, 0);
        let e = c.complete(&request()).await.unwrap_err();
        assert_error(&e, code, &words, &format!("complete {body}"));
        // Streamed: the body labelled JSON, and the body as an event of a stream.
        for how in ["json", "event"] {
            let (events, e) = drain::drain(&c, &request()).await;
            assert!(events.is_empty(), "{how} {body}: {events:?}");
            assert_error(&e.expect("an error"), code, &words, &format!("stream ({how}) {body}"));
        }
        assert_eq!(server.requests().len(), 3, "{body}");
    }
}

#[tokio::test]
async fn an_exhausted_quota_is_its_own_code_and_never_retried() {
    let bodies = [
        // OpenAI's 429.
        (
            429,
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
        ),
        // DeepSeek's 402: neither its code nor its type says it, the status does.
        (
            402,
            json!({"error": {"message": "Insufficient Balance", "type": "unknown_error", "param": null, "code": "invalid_request_error"}}),
        ),
        // Moonshot's 429.
        (
            429,
            json!({"error": {"message": "Your account is suspended due to insufficient balance", "type": "exceeded_current_quota_error"}}),
        ),
        // Zhipu's arrears and its usage limit until the reset, with a 429.
        (429, json!({"error": {"code": "1113", "message": "您的账户已欠费，请充值后重试"}})),
        (429, json!({"error": {"code": "1308", "message": "已达到 5 小时的使用上限"}})),
        // MiniMax through a gateway, and with its own body.
        (
            429,
            json!({"error": {"http_code": "429", "message": "insufficient balance (1008)", "type": "insufficient_balance_error"}}),
        ),
        (500, json!({"base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}})),
    ];
    for (status, body) in bodies {
        // A retry would find an answer: the quota error must not be retried into it.
        let server = MockServer::start([Reply::json(status, &body), ok("never")]).await;
        let c = client(&server, 3);
        let e = c.complete(&request()).await.unwrap_err();
        assert_error(&e, codes::PROVIDER_QUOTA_EXHAUSTED, &[&format!("HTTP {status}")], &body.to_string());
        assert_eq!(server.requests().len(), 1, "{body}");
        // Streamed, and with `x-should-retry: true` (a gateway that adds it to every 429): the same.
        let server = MockServer::start([
            Reply::json(status, &body).with_header("x-should-retry", "true"),
            ok("never"),
        ])
        .await;
        let (_, e) = drain::drain(&client(&server, 3), &request()).await;
        assert_error(&e.expect("an error"), codes::PROVIDER_QUOTA_EXHAUSTED, &[], &body.to_string());
        assert_eq!(server.requests().len(), 1, "{body}");
    }
}

#[tokio::test]
async fn a_passing_rate_limit_is_retried_and_reported_as_one_when_retries_run_out() {
    let bodies = [
        json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
        json!({"error": {"code": "1302", "message": "您当前使用该API的并发数过高"}}),
        json!({"base_resp": {"status_code": 1002, "status_msg": "rate limit"}}),
    ];
    for body in bodies {
        let server = MockServer::start([Reply::json(429, &body), ok("second try")]).await;
        let r = client(&server, 2).complete(&request()).await.unwrap();
        assert_eq!(r.content.as_deref(), Some("second try"), "{body}");
        assert_eq!(server.requests().len(), 2, "{body}");
        let server =
            MockServer::start([Reply::json(429, &body), Reply::json(429, &body), Reply::json(429, &body)])
                .await;
        let e = client(&server, 2).complete(&request()).await.unwrap_err();
        assert_error(&e, codes::PROVIDER_RATE_LIMITED, &["HTTP 429"], &body.to_string());
        assert_eq!(server.requests().len(), 3, "{body}");
    }
}

#[tokio::test]
async fn a_refused_key_or_locked_account_is_provider_auth_whatever_the_status() {
    // Zhipu sends a locked account with a 429; MiniMax's bad key may come with a 500.
    let cases = [
        (429, json!({"error": {"code": "1112", "message": "您的账户已被锁定，请联系客服解锁"}})),
        (500, json!({"base_resp": {"status_code": 2049, "status_msg": "invalid api key"}})),
        (401, json!({"error_code": 111, "error_msg": "Access token expired"})),
    ];
    for (status, body) in cases {
        let server = MockServer::start([Reply::json(status, &body), ok("never")]).await;
        let e = client(&server, 3).complete(&request()).await.unwrap_err();
        assert_error(&e, codes::PROVIDER_AUTH, &[&format!("HTTP {status}")], &body.to_string());
        assert_eq!(server.requests().len(), 1, "{body}");
    }
}

#[tokio::test]
async fn the_key_echoed_in_a_minimax_or_baidu_body_is_redacted() {
    for body in [
        json!({"base_resp": {"status_code": 2049, "status_msg": format!("invalid api key {KEY}")}}),
        json!({"error_code": 110, "error_msg": format!("token {KEY} invalid")}),
        json!({"error": true, "message": format!("bad key {KEY}")}),
    ] {
        let server = MockServer::start([
            Reply::json(200, &body),
            Reply::json(401, &body),
            Reply::sse(format!("data: {body}\n\n").as_bytes()),
        ])
        .await;
        let c = client(&server, 0);
        for _ in 0..2 {
            let e = c.complete(&request()).await.unwrap_err();
            let text = format!("{e} {e:?}");
            assert!(!text.contains(KEY) && text.contains("<redacted>"), "{text}");
        }
        // In a stream.
        let e = drain::drain(&c, &request()).await.1.expect("an error");
        let text = format!("{e} {e:?}");
        assert!(!text.contains(KEY) && text.contains("<redacted>"), "{text}");
    }
}

#[tokio::test]
async fn error_false_beside_an_answer_is_no_error() {
    // `"error": false` is a success flag some gateways add; it was read as an error "false".
    let chunk = "data: {\"error\":false,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = MockServer::start([
        Reply::sse(chunk.as_bytes()),
        Reply::json(
            200,
            &json!({"error": false, "choices": [{"message": {"content": "whole"}, "finish_reason": "stop"}]}),
        ),
    ])
    .await;
    let c = client(&server, 0);
    let (events, e) = drain::drain(&c, &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert!(
        matches!(events.last(), Some(arkagent::provider::ModelEvent::Finished(r)) if r.content.as_deref() == Some("hi"))
    );
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("whole"));
}
