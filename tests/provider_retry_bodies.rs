//! An error body sent with an HTTP 200 is retried as the status it stands for would be, against
//! the local mock server (counting the requests it saw): a rate limit (Qianfan/Baidu 336501, 18,
//! 4; MiniMax 1002) as a 429, a failure on the provider's side (MiniMax 1000/1001/1013, Baidu 2,
//! OpenAI's `server_error` in a stream) as a 5xx, OpenRouter's `error.code` as the status it is, with the same limit, backoff, `Retry-After`,
//! `x-should-retry` and cancellation. Streamed, only while nothing of the answer was handed out:
//! once a piece of it was, an error ends the stream and is never retried (a retry would repeat
//! it). An exhausted quota, a refused key and content refused by moderation are never retried.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/retry_client.rs"]
mod retry_client;

use arkagent::provider::{ChatModel, ModelEvent, OpenAiCompatibleClient};
use arkagent::{codes, AgentError, ErrorLayer};
use mock_server::{End, MockServer, Reply};
use retry_client::{ok, request};
use serde_json::{json, Value};
use std::time::Duration;

const KEY: &str = "sk-retry-bodies-key-0123456789";

fn client(server: &MockServer, max_retries: u32) -> OpenAiCompatibleClient {
    retry_client::client(server, max_retries, KEY)
}

/// `body` as the one event of an event stream sent with a 200.
fn as_event(body: &Value) -> Reply {
    Reply::sse(format!("data: {body}\n\n").as_bytes())
}

/// An event stream answering `text`.
fn streamed(text: &str) -> Reply {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]});
    Reply::sse(format!("data: {chunk}\n\ndata: [DONE]\n\n").as_bytes())
}

fn assert_error(e: &AgentError, code: &str, words: &[&str], context: &str) {
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, code), "{context}: {e}");
    for w in words {
        assert!(e.message.contains(w), "{context}: {e} lacks {w:?}");
    }
    assert!(!e.message.contains(KEY), "{context}: {e}");
}

/// The text of the answer a stream's events end with, and the number of text deltas.
fn answer_text(events: &[ModelEvent]) -> (Option<String>, usize) {
    let deltas = events.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).count();
    match events.last() {
        Some(ModelEvent::Finished(r)) => (r.content.clone(), deltas),
        other => panic!("last event {other:?}"),
    }
}

/// 200 error bodies that a retry may get past: rate limits and failures on the provider's side.
fn passing_bodies() -> Vec<Value> {
    vec![
        json!({"error_code": 336501, "error_msg": "Rate limit reached for RPM"}),
        json!({"error_code": 18, "error_msg": "Open api qps request limit reached"}),
        json!({"error_code": 4, "error_msg": "Open api request limit reached"}),
        json!({"code": 336501, "msg": "Rate limit reached for RPM"}),
        json!({"id": "0", "choices": null, "base_resp": {"status_code": 1002, "status_msg": "rate limit"}}),
        json!({"base_resp": {"status_code": 1000, "status_msg": "unknown error"}}),
        json!({"base_resp": {"status_code": 1001, "status_msg": "request timeout"}}),
        json!({"base_resp": {"status_code": 1013, "status_msg": "internal service error"}}),
        json!({"error_code": 2, "error_msg": "Service temporarily unavailable"}),
        json!({"error": {"message": "The server had an error while processing your request", "type": "server_error"}}),
        // OpenRouter: the code is the HTTP status the error stands for, also inside a stream
        // that began with a 200.
        json!({"error": {"code": 502, "message": "Provider returned error", "metadata": {"provider_name": "x"}}}),
        json!({"error": {"code": 429, "message": "Rate limit exceeded"}}),
        json!({"error": {"code": "503", "message": "No instances available"}}),
        // A gateway's (one-api's) numeric code at the top level.
        json!({"code": 500, "message": "upstream error: no available channel", "data": null}),
    ]
}

#[tokio::test]
async fn a_200_rate_limit_or_server_error_is_retried_then_the_answer_kept() {
    for body in passing_bodies() {
        // Whole, then as the event of a stream (a gateway that always streams).
        let server = MockServer::start([Reply::json(200, &body), as_event(&body), ok("third")]).await;
        let r = client(&server, 2).complete(&request()).await.unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(r.content.as_deref(), Some("third"), "{body}");
        let reqs = server.requests();
        assert_eq!(reqs.len(), 3, "{body}");
        assert!(reqs.iter().all(|r| r.body == reqs[0].body), "{body}: every attempt sends the same body");
    }
}

#[tokio::test]
async fn a_streamed_request_is_retried_on_an_error_before_the_answer_began() {
    for body in passing_bodies() {
        // The body labelled JSON, then as the first event of a stream (after a usage report,
        // which is no piece of the answer), then the answer.
        let usage_then_error = format!(
            "data: {}\n\ndata: {body}\n\n",
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}})
        );
        // And an event stream labelled JSON (some proxies).
        let mislabelled = Reply::StreamAs {
            content_type: Some("application/json".into()),
            parts: vec![format!("data: {body}\n\n").into_bytes()],
            delay: Duration::ZERO,
            end: End::Complete,
        };
        let server = MockServer::start([
            Reply::json(200, &body),
            Reply::sse(usage_then_error.as_bytes()),
            as_event(&body),
            mislabelled,
            streamed("after four retries"),
        ])
        .await;
        let (events, e) = drain::drain(&client(&server, 4), &request()).await;
        assert!(e.is_none(), "{body}: {e:?}");
        // Nothing of the failed attempts (their usage report included) is handed out.
        assert_eq!(answer_text(&events), (Some("after four retries".into()), 1), "{body}: {events:?}");
        assert!(!events.iter().any(|e| matches!(e, ModelEvent::Usage(_))), "{body}: {events:?}");
        assert_eq!(server.requests().len(), 5, "{body}");
    }
}

#[tokio::test]
async fn retries_of_a_200_error_run_out_with_its_stable_code() {
    let body = json!({"error_code": 18, "error_msg": "Open api qps request limit reached"});
    let server = MockServer::start((0..3).map(|_| Reply::json(200, &body))).await;
    let e = client(&server, 2).complete(&request()).await.unwrap_err();
    assert_error(&e, codes::PROVIDER_RATE_LIMITED, &["[18] Open api qps", "after 2 retries"], "complete");
    assert_eq!(server.requests().len(), 3);
    // Streamed: the error comes as it does without retries (a stream's item), after them.
    let server = MockServer::start((0..3).map(|_| as_event(&body))).await;
    let (events, e) = drain::drain(&client(&server, 2), &request()).await;
    assert!(events.is_empty(), "{events:?}");
    assert_error(&e.expect("an error"), codes::PROVIDER_RATE_LIMITED, &["[18]", "after 2 retries"], "stream");
    assert_eq!(server.requests().len(), 3);
    // A failure on the provider's side keeps its general code.
    let body = json!({"base_resp": {"status_code": 1013, "status_msg": "internal service error"}});
    let server = MockServer::start((0..2).map(|_| Reply::json(200, &body))).await;
    let e = client(&server, 1).complete(&request()).await.unwrap_err();
    assert_error(
        &e,
        codes::PROVIDER_HTTP_STATUS,
        &["[1013] internal service error", "after 1 retries"],
        "1013",
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_error_after_a_piece_of_the_answer_is_not_retried() {
    let delta = json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]});
    // A call is handed out once announced: when its arguments start (its name may come in pieces).
    let calls = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{"}}]}}]});
    let reasoning = json!({"choices": [{"index": 0, "delta": {"reasoning_content": "thinking"}}]});
    let errors = [
        json!({"error": {"message": "The server had an error", "type": "server_error"}}),
        json!({"base_resp": {"status_code": 1002, "status_msg": "rate limit"}}),
    ];
    for first in [delta, calls, reasoning] {
        for error in &errors {
            // The piece first, the error in a later read: the piece was handed out by then.
            let parts =
                vec![format!("data: {first}\n\n").into_bytes(), format!("data: {error}\n\n").into_bytes()];
            let reply = Reply::Stream { parts, delay: Duration::from_millis(30), end: End::Complete };
            let server = MockServer::start([reply, streamed("must not be reached")]).await;
            let (events, e) = drain::drain(&client(&server, 3), &request()).await;
            assert!(!events.is_empty(), "{first} {error}: the piece was handed out");
            assert!(!events.iter().any(|e| matches!(e, ModelEvent::Finished(_))), "{events:?}");
            let e = e.expect("the error ends the stream");
            assert!(e.message.contains("error in stream"), "{first} {error}: {e}");
            assert_eq!(server.requests().len(), 1, "{first} {error}");
        }
    }
    // A piece that came in the same read as the error is dropped with it, never handed out (as
    // without retries): nothing of the attempt reached the caller, so it is retried.
    let body = format!(
        "data: {}\n\ndata: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "lost"}}]}),
        errors[1]
    );
    let server = MockServer::start([Reply::sse(body.as_bytes()), streamed("whole")]).await;
    let (events, e) = drain::drain(&client(&server, 3), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer_text(&events), (Some("whole".into()), 1), "{events:?}");
    assert_eq!(server.requests().len(), 2);
    // A call not announced yet (a name, no arguments: more of the name may come) was not handed
    // out either, in an earlier read too.
    let name_only = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "get_", "arguments": ""}}]}}]});
    let parts =
        vec![format!("data: {name_only}\n\n").into_bytes(), format!("data: {}\n\n", errors[0]).into_bytes()];
    let reply = Reply::Stream { parts, delay: Duration::from_millis(30), end: End::Complete };
    let server = MockServer::start([reply, streamed("whole")]).await;
    let (events, e) = drain::drain(&client(&server, 3), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer_text(&events), (Some("whole".into()), 1), "{events:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_lasting_or_refused_200_error_is_never_retried() {
    let bodies = [
        (
            json!({"base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}}),
            codes::PROVIDER_QUOTA_EXHAUSTED,
        ),
        (
            json!({"base_resp": {"status_code": 2056, "status_msg": "usage limit exceeded"}}),
            codes::PROVIDER_QUOTA_EXHAUSTED,
        ),
        (
            json!({"error_code": 17, "error_msg": "Open api daily request limit reached"}),
            codes::PROVIDER_QUOTA_EXHAUSTED,
        ),
        (json!({"base_resp": {"status_code": 2049, "status_msg": "invalid api key"}}), codes::PROVIDER_AUTH),
        (json!({"error_code": 110, "error_msg": "Access token invalid"}), codes::PROVIDER_AUTH),
        (
            json!({"base_resp": {"status_code": 1026, "status_msg": "input new_sensitive"}}),
            codes::PROVIDER_CONTENT_FILTERED,
        ),
        (
            json!({"base_resp": {"status_code": 2013, "status_msg": "invalid params"}}),
            codes::PROVIDER_HTTP_STATUS,
        ),
        // OpenRouter's codes that are statuses no retry gets past.
        (json!({"error": {"code": 401, "message": "No auth credentials found"}}), codes::PROVIDER_AUTH),
        (json!({"error": {"code": 402, "message": "Insufficient credits"}}), codes::PROVIDER_QUOTA_EXHAUSTED),
        (json!({"error": {"code": 400, "message": "Invalid model"}}), codes::PROVIDER_HTTP_STATUS),
    ];
    for (body, code) in bodies {
        // A retry would find an answer: the error must not be retried into it.
        let server = MockServer::start([Reply::json(200, &body), ok("never")]).await;
        let e = client(&server, 3).complete(&request()).await.unwrap_err();
        assert_error(&e, code, &[], &format!("complete {body}"));
        assert_eq!(server.requests().len(), 1, "{body}");
        let server = MockServer::start([as_event(&body), streamed("never")]).await;
        let (_, e) = drain::drain(&client(&server, 3), &request()).await;
        assert_error(&e.expect("an error"), code, &[], &format!("stream {body}"));
        assert_eq!(server.requests().len(), 1, "{body}");
    }
    // Not even when a gateway says `x-should-retry: true`.
    let body = json!({"base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}});
    let server =
        MockServer::start([Reply::json(200, &body).with_header("x-should-retry", "true"), ok("never")]).await;
    let e = client(&server, 3).complete(&request()).await.unwrap_err();
    assert_error(&e, codes::PROVIDER_QUOTA_EXHAUSTED, &["lasts until the account"], "x-should-retry");
    assert_eq!(server.requests().len(), 1);
}

/// Content refused by moderation is never retried, as `provider_content_filtered` says: the same
/// request meets the same filter, whatever the status it came with or `x-should-retry` says.
#[tokio::test]
async fn content_refused_by_moderation_is_never_retried_whatever_the_headers_or_status() {
    let minimax = json!({"base_resp": {"status_code": 1026, "status_msg": "input new_sensitive"}});
    let azure = json!({"error": {"code": "content_filter", "message": "filtered by the content policy"}});
    let cases = [
        (Reply::json(200, &minimax).with_header("x-should-retry", "true"), "a 200, x-should-retry: true"),
        (Reply::json(400, &azure).with_header("x-should-retry", "true"), "a 400, x-should-retry: true"),
        (Reply::json(500, &azure), "a 500"),
        (Reply::json(503, &minimax), "a 503"),
    ];
    for (reply, what) in cases {
        let server = MockServer::start([reply, ok("never")]).await;
        let e = client(&server, 3).complete(&request()).await.unwrap_err();
        assert_error(&e, codes::PROVIDER_CONTENT_FILTERED, &["not retried"], what);
        assert_eq!(server.requests().len(), 1, "{what}");
    }
    // In a stream, before its first piece.
    let event = json!({"choices": [{"index": 0, "delta": {"content": "cut"}}], "base_resp": {"status_code": 1027, "status_msg": "output new_sensitive"}});
    let server = MockServer::start([
        Reply::Full {
            status: 200,
            headers: vec![
                ("Content-Type".into(), "text/event-stream".into()),
                ("x-should-retry".into(), "true".into()),
            ],
            body: format!("data: {event}\n\n").into_bytes(),
        },
        streamed("never"),
    ])
    .await;
    let (events, e) = drain::drain(&client(&server, 3), &request()).await;
    assert_error(&e.expect("an error"), codes::PROVIDER_CONTENT_FILTERED, &["not retried"], "stream");
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_200_error_obeys_the_retry_headers() {
    let body = json!({"base_resp": {"status_code": 1002, "status_msg": "rate limit"}});
    let server = MockServer::start([
        Reply::json(200, &body).with_header("Retry-After", "1"),
        ok("after the wait"),
        Reply::json(200, &body).with_header("x-should-retry", "false"),
        Reply::json(200, &body).with_header("retry-after-ms", "60000"),
    ])
    .await;
    let c = client(&server, 2);
    retry_client::completes_after_retry_after_1(&c, "after the wait").await;
    let e = c.complete(&request()).await.unwrap_err();
    assert_error(&e, codes::PROVIDER_RATE_LIMITED, &["x-should-retry: false"], "x-should-retry");
    assert_eq!(server.requests().len(), 3);
    let e = c.complete(&request()).await.unwrap_err();
    assert_error(&e, codes::PROVIDER_RATE_LIMITED, &["exceeds the limit"], "retry-after-ms");
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn dropping_the_call_while_it_waits_to_retry_a_200_error_sends_no_further_attempt() {
    let body = json!({"error_code": 336501, "error_msg": "Rate limit reached for RPM"});
    let replies =
        || [Reply::json(200, &body).with_header("retry-after-ms", "400"), ok("must not be reached")];
    let server = MockServer::start(replies()).await;
    let r = request();
    let c = client(&server, 3);
    assert!(tokio::time::timeout(Duration::from_millis(150), c.complete(&r)).await.is_err(), "ended early");
    // Well past the wait the server asked for: the dropped call sent nothing more.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(server.requests().len(), 1);
    // Streamed: the call to `stream` waits, and dropping it cancels the retry too.
    let server = MockServer::start(replies()).await;
    let c = client(&server, 3);
    assert!(tokio::time::timeout(Duration::from_millis(150), c.stream(&r)).await.is_err(), "ended early");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_first_piece_sent_a_few_bytes_at_a_time_comes_once() {
    // Read ahead until the answer begins: a first piece in many reads comes whole, once.
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": "slow"}, "finish_reason": "stop"}]});
    let body = format!("data: {chunk}\n\ndata: [DONE]\n\n");
    let server = MockServer::start([Reply::sse_in_pieces(
        body.as_bytes(),
        16,
        Duration::from_millis(5),
        End::Complete,
    )])
    .await;
    let (events, e) = drain::drain(&client(&server, 2), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer_text(&events), (Some("slow".into()), 1));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_failed_base_resp_beside_choices_is_the_error_not_the_answer() {
    // MiniMax's 1027 (output withheld by moderation) on the chunk that would end the answer: the
    // stream ends with it after the piece handed out, and it is not retried.
    let first = json!({"choices": [{"index": 0, "delta": {"content": "Here is how"}}]});
    let last = json!({"choices": [{"index": 0, "delta": {"content": " to"}, "finish_reason": "stop"}],
                      "base_resp": {"status_code": 1027, "status_msg": "output new_sensitive"}});
    let parts = vec![
        format!("data: {first}\n\n").into_bytes(),
        format!("data: {last}\n\ndata: [DONE]\n\n").into_bytes(),
    ];
    let reply = Reply::Stream { parts, delay: Duration::from_millis(30), end: End::Complete };
    let server = MockServer::start([reply, streamed("never")]).await;
    let (events, e) = drain::drain(&client(&server, 3), &request()).await;
    assert_eq!(events, [ModelEvent::TextDelta("Here is how".into())]);
    assert_error(
        &e.expect("an error"),
        codes::PROVIDER_CONTENT_FILTERED,
        &["[1027] output new_sensitive"],
        "stream",
    );
    assert_eq!(server.requests().len(), 1);
    // Whole: the cut answer is not handed out either.
    let whole = json!({"choices": [{"index": 0, "message": {"content": "Here is how"}, "finish_reason": "stop"}],
                       "base_resp": {"status_code": 1027, "status_msg": "output new_sensitive"}});
    let server = MockServer::start([Reply::json(200, &whole), ok("never")]).await;
    let e = client(&server, 3).complete(&request()).await.unwrap_err();
    assert_error(&e, codes::PROVIDER_CONTENT_FILTERED, &["[1027] output new_sensitive"], "complete");
    assert_eq!(server.requests().len(), 1);
    // A rate limit beside choices, before any piece: retried.
    let limited = json!({"choices": [{"index": 0, "delta": {"content": "x"}}],
                         "base_resp": {"status_code": 1002, "status_msg": "rate limit"}});
    let server = MockServer::start([as_event(&limited), streamed("after one retry")]).await;
    let (events, e) = drain::drain(&client(&server, 3), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer_text(&events), (Some("after one retry".into()), 1));
    assert_eq!(server.requests().len(), 2);
}
