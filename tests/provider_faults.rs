//! The client against a local fault-injecting server on 127.0.0.1:0: 500s, 429 with Retry-After,
//! connect errors, a reset mid-stream, truncated streams, one byte at a time, a drip slower than
//! the idle timeout, a server that never answers, a 50 MB body, invalid JSON, cancellation. Every
//! case must end in success after a retry or in a structured provider error within its timeout.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/recordings.rs"]
mod recordings;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{
    decode_sse_body, ChatModel, ClientConfig, ModelEvent, ModelResponse, OpenAiCompatibleClient, RetryPolicy,
    Timeouts,
};
use arkagent::{codes, AgentError, ErrorLayer};
use futures_util::StreamExt;
use mock_server::{End, MockServer, Reply};
use request::request;
use serde_json::json;
use std::time::{Duration, Instant};

fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        jitter: 0.5,
        max_retry_after: Duration::from_secs(5),
    }
}

fn timeouts(idle_ms: u64, total_ms: u64) -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle: Duration::from_millis(idle_ms),
        total: Duration::from_millis(total_ms),
        ..Timeouts::default()
    }
}

fn client(base_url: &str, retry: RetryPolicy, t: Timeouts) -> OpenAiCompatibleClient {
    OpenAiCompatibleClient::new(
        ClientConfig::custom(base_url, "test-model", "sk-test-key-000").with_retry(retry).with_timeouts(t),
    )
    .expect("client")
}

fn ok_body(text: &str) -> serde_json::Value {
    json!({"choices":[{"index":0,"message":{"role":"assistant","content":text},"finish_reason":"stop"}],
           "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}})
}

fn assert_provider(e: &AgentError, code: &str) {
    assert_eq!(e.layer, ErrorLayer::Provider, "{e}");
    assert_eq!(e.code, code, "{e}");
}

/// The events of a streamed answer before its first error, and the error.
async fn drain(client: &OpenAiCompatibleClient) -> (Vec<ModelEvent>, Option<AgentError>) {
    drain::drain(client, &request()).await
}

#[tokio::test]
async fn server_errors_then_success_are_retried() {
    let server = MockServer::start([
        Reply::error(500, "internal", "boom"),
        Reply::raw(503, "unavailable"),
        Reply::json(200, &ok_body("hello")),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
    let r = c.complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("hello"));
    assert_eq!(r.usage.unwrap().total_tokens, 4);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.body == reqs[0].body), "every attempt sends the same body");
}

#[tokio::test]
async fn retries_run_out_with_a_structured_error() {
    let server = MockServer::start((0..3).map(|_| Reply::error(502, "bad_gateway", "upstream down"))).await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_HTTP_STATUS);
    assert!(
        e.message.contains("502")
            && e.message.contains("upstream down")
            && e.message.contains("after 2 retries"),
        "{e}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let server = MockServer::start([
        Reply::error(429, "rate_limit_exceeded", "slow down").with_header("Retry-After", "1"),
        Reply::json(200, &ok_body("after wait")),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
    let t0 = Instant::now();
    let r = c.complete(&request()).await.unwrap();
    let waited = t0.elapsed();
    assert_eq!(r.content.as_deref(), Some("after wait"));
    assert!(waited >= Duration::from_millis(950), "Retry-After: 1 was not honoured: {waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

#[tokio::test]
async fn rate_limit_with_too_long_retry_after_is_returned_at_once() {
    let server = MockServer::start([
        Reply::error(429, "rate_limit_exceeded", "quota").with_header("Retry-After", "120")
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
    let t0 = Instant::now();
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_RATE_LIMITED);
    assert!(e.message.contains("rate_limit_exceeded") && e.message.contains("quota"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_429_that_lasts_until_the_account_is_seen_to_is_not_retried() {
    // OpenAI's exhausted quota, and Zhipu's account in arrears (code 1113, a number), both 429.
    let zhipu = serde_json::json!({"error": {"code": 1113, "message": "余额不足或无可用资源包,请充值。"}});
    for (reply, what) in [
        (Reply::error(429, "insufficient_quota", "You exceeded your current quota"), "insufficient_quota"),
        (Reply::json(429, &zhipu), "1113"),
    ] {
        let server = MockServer::start([reply, Reply::json(200, &ok_body("never asked"))]).await;
        let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
        let e = c.complete(&request()).await.unwrap_err();
        // Not "slow down" but "top up the account": its own code.
        assert_provider(&e, codes::PROVIDER_QUOTA_EXHAUSTED);
        assert!(e.message.contains(what) && e.message.contains("not retried"), "{e}");
        assert_eq!(server.requests().len(), 1, "{what}");
    }
    // A passing rate limit is still retried.
    let server = MockServer::start([
        Reply::error(429, "rate_limit_exceeded", "slow down"),
        Reply::json(200, &ok_body("after a retry")),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("after a retry"));
}

#[tokio::test]
async fn client_errors_are_not_retried_and_keep_code_and_message() {
    let server = MockServer::start([
        Reply::error(400, "context_length_exceeded", "too many tokens"),
        Reply::error(401, "invalid_api_key", "bad key"),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_HTTP_STATUS);
    assert!(
        e.message.contains("HTTP 400")
            && e.message.contains("context_length_exceeded")
            && e.message.contains("too many tokens"),
        "{e}"
    );
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_AUTH);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn connect_errors_are_retried_until_the_server_appears() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let base = format!("http://{addr}/v1");
    // Nobody listens: connect errors, retried, then a structured error.
    let c = client(&base, fast_retry(2), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_CONNECT);
    assert!(e.message.contains("after 2 retries"), "{e}");
    // The server comes up while the client backs off.
    let retry = RetryPolicy { initial_backoff: Duration::from_millis(150), jitter: 0.0, ..fast_retry(6) };
    let c = client(&base, retry, timeouts(2000, 10_000));
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        MockServer::start_on(listener, [Reply::json(200, &ok_body("up"))])
    });
    let r = c.complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("up"));
    let server = late.await.unwrap();
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_reset_midway_is_interrupted_and_not_retried() {
    let body = recordings::sse_body("openai-gpt4o-text-then-tool.sse");
    let half = body.len() / 2;
    let server = MockServer::start([
        Reply::Stream { parts: vec![body[..half].to_vec()], delay: Duration::ZERO, end: End::Reset },
        Reply::sse(&body),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
    let (events, err) = drain(&c).await;
    let e = err.expect("an error");
    assert_provider(&e, codes::PROVIDER_STREAM_INTERRUPTED);
    assert!(
        events.iter().any(|e| matches!(e, ModelEvent::TextDelta(_))),
        "events before the reset were delivered"
    );
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::Finished(_))));
    assert_eq!(server.requests().len(), 1, "a started stream is never retried");
}

#[tokio::test]
async fn truncated_streams_are_interrupted() {
    let body = recordings::sse_body("openai-gpt4o-parallel-two-tools.sse");
    let cut = body.len() * 2 / 3;
    let server = MockServer::start([
        // The chunked body stops without its terminating chunk.
        Reply::Stream { parts: vec![body[..cut].to_vec()], delay: Duration::ZERO, end: End::Truncate },
        // The body ends properly, but the answer inside it stopped before finishing.
        Reply::Stream { parts: vec![body[..cut].to_vec()], delay: Duration::ZERO, end: End::Complete },
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 10_000));
    let (_, e) = drain(&c).await;
    assert_provider(&e.unwrap(), codes::PROVIDER_STREAM_INTERRUPTED);
    let (_, e) = drain(&c).await;
    assert_provider(&e.unwrap(), codes::PROVIDER_STREAM_INTERRUPTED);
}

#[tokio::test]
async fn a_stream_one_byte_at_a_time_assembles_the_same() {
    let body = recordings::sse_body("openai-gpt4o-parallel-plus-minus.sse");
    let want = decode_sse_body(&body).unwrap();
    let server = MockServer::start([Reply::sse_in_pieces(&body, 1, Duration::ZERO, End::Complete)]).await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 20_000));
    let (events, err) = drain(&c).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(events, want);
}

#[tokio::test]
async fn every_recording_streams_through_the_client() {
    let entries = recordings::streaming_entries();
    let bodies: Vec<Vec<u8>> =
        entries.iter().map(|e| recordings::sse_body(e["file"].as_str().unwrap())).collect();
    let server =
        MockServer::start(bodies.iter().map(|b| Reply::sse_in_pieces(b, 7, Duration::ZERO, End::Complete)))
            .await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 10_000));
    for (entry, body) in entries.iter().zip(&bodies) {
        let (events, err) = drain(&c).await;
        assert!(err.is_none(), "{}: {err:?}", entry["file"]);
        assert_eq!(events, decode_sse_body(body).unwrap(), "{}", entry["file"]);
    }
}

#[tokio::test]
async fn a_drip_slower_than_the_idle_timeout_times_out() {
    let body = recordings::sse_body("openai-gpt4o-strict-tool.sse");
    let server =
        MockServer::start([Reply::sse_in_pieces(&body, 200, Duration::from_millis(600), End::Complete)])
            .await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(150, 10_000));
    let t0 = Instant::now();
    let (_, e) = drain(&c).await;
    let e = e.expect("timeout");
    assert_provider(&e, codes::PROVIDER_TIMEOUT);
    assert!(e.message.contains("idle"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(1500), "{:?}", t0.elapsed());
    assert_eq!(server.requests().len(), 1);
}

/// Pieces 60 ms apart for about 700 ms under a 200 ms idle timeout: the stream's one timer fires
/// several times before any idle limit and is moved forward each time; the answer completes.
#[tokio::test]
async fn a_drip_faster_than_the_idle_timeout_completes_past_several_idle_periods() {
    let body = recordings::sse_body("openai-gpt4o-strict-tool.sse");
    let server =
        MockServer::start([Reply::sse_in_pieces(&body, 350, Duration::from_millis(60), End::Complete)]).await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(200, 10_000));
    let t0 = Instant::now();
    let (events, e) = drain(&c).await;
    assert!(e.is_none(), "{e:?}");
    assert!(t0.elapsed() > Duration::from_millis(600), "{:?}", t0.elapsed());
    assert_eq!(events, decode_sse_body(&body).unwrap());
}

#[tokio::test]
async fn a_silent_server_hits_the_first_byte_timeout_and_the_total_timeout() {
    let server = MockServer::start([
        Reply::Hang,
        Reply::Endless { part: b": ping\n\n".to_vec(), every: Duration::from_millis(30) },
    ])
    .await;
    let t = Timeouts { first_byte: Duration::from_millis(200), ..timeouts(1000, 10_000) };
    let c = client(&server.base_url(), fast_retry(2), t);
    let t0 = Instant::now();
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_TIMEOUT);
    assert!(e.message.contains("first byte"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(1000), "{:?}", t0.elapsed());
    // Keep-alive comments keep the idle timer quiet; the total timeout still ends the call.
    let c = client(&server.base_url(), fast_retry(0), timeouts(1000, 500));
    let t0 = Instant::now();
    let (_, e) = drain(&c).await;
    let e = e.expect("total timeout");
    assert_provider(&e, codes::PROVIDER_TIMEOUT);
    assert!(e.message.contains("total"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(1500), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn a_streamed_request_without_a_head_in_time_is_sent_again_a_whole_one_is_not() {
    // A streaming server sends its head as it starts: none in time is a request stuck on the way.
    let good = b"data: {\"choices\":[{\"delta\":{\"content\":\"at last\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = MockServer::start([Reply::Hang, Reply::sse(good)]).await;
    let t = Timeouts { first_byte: Duration::from_millis(200), ..timeouts(1000, 10_000) };
    let c = client(&server.base_url(), fast_retry(2), t);
    let (events, e) = drain(&c).await;
    assert!(e.is_none(), "{e:?}");
    assert!(events.iter().any(|ev| matches!(ev, ModelEvent::TextDelta(t) if t == "at last")), "{events:?}");
    assert_eq!(server.requests().len(), 2);
    // Every attempt silent: the first-byte error once the retries are spent.
    let server = MockServer::start([Reply::Hang, Reply::Hang, Reply::sse(good)]).await;
    let c = client(&server.base_url(), fast_retry(1), t);
    let (_, e) = drain(&c).await;
    let e = e.expect("first byte timeout");
    assert_provider(&e, codes::PROVIDER_TIMEOUT);
    assert!(e.message.contains("first byte") && e.message.contains("after 1 retries"), "{e}");
    assert_eq!(server.requests().len(), 2);
    // The total timeout reached while waiting for the head: no retry.
    let server = MockServer::start([Reply::Hang, Reply::sse(good)]).await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(1000, 300));
    let (_, e) = drain(&c).await;
    let e = e.expect("total timeout");
    assert!(e.message.contains("total") && !e.message.contains("retr"), "{e}");
    assert_eq!(server.requests().len(), 1);
    // A non-streamed request's head waits for the whole answer: not sent again.
    let server = MockServer::start([Reply::Hang, Reply::json(200, &ok_body("paid twice"))]).await;
    let c = client(&server.base_url(), fast_retry(2), t);
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_TIMEOUT);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_50_mb_body_is_refused_at_the_size_limit() {
    let server =
        MockServer::start([Reply::Large { len: 50 * 1024 * 1024 }, Reply::Large { len: 50 * 1024 * 1024 }])
            .await;
    let config = ClientConfig::custom(server.base_url(), "m", "k")
        .with_retry(fast_retry(0))
        .with_timeouts(timeouts(5000, 20_000))
        .with_max_response_bytes(1024 * 1024);
    let c = OpenAiCompatibleClient::new(config).unwrap();
    let t0 = Instant::now();
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_RESPONSE_TOO_LARGE);
    assert!(
        e.message.contains(r#"{"choices":[{"message":{"content":"xxx"#),
        "raw body kept: {}",
        &e.message[..200.min(e.message.len())]
    );
    assert!(e.message.len() < 4096);
    let (_, e) = drain(&c).await;
    assert_provider(&e.unwrap(), codes::PROVIDER_RESPONSE_TOO_LARGE);
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn invalid_json_bodies_are_decode_errors_with_the_raw_body() {
    let server = MockServer::start([
        Reply::raw(200, "<html>gateway says hi</html>"),
        Reply::sse(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {not json}\n\n"),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_DECODE);
    assert!(e.message.contains("<html>gateway says hi</html>"), "{e}");
    let (events, e) = drain(&c).await;
    let e = e.unwrap();
    assert_provider(&e, codes::PROVIDER_DECODE);
    assert!(e.message.contains("{not json}"), "{e}");
    assert!(events.is_empty(), "events of a failed read are dropped with it: {events:?}");
}

#[tokio::test]
async fn dropping_a_stream_closes_the_connection_at_once() {
    let part = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n".to_vec();
    let server =
        MockServer::start([Reply::Endless { part, every: Duration::from_millis(10) }, Reply::Hang]).await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 30_000));
    let mut stream = c.stream(&request()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, ModelEvent::TextDelta("x".into()));
    drop(stream);
    assert!(
        server.wait_aborted(1, Duration::from_secs(3)).await,
        "the server still writes to a dropped stream"
    );
    // Dropping a pending `complete` future closes its connection as well.
    let req = request();
    let fut = c.complete(&req);
    assert!(tokio::time::timeout(Duration::from_millis(200), fut).await.is_err());
    assert!(server.wait_aborted(2, Duration::from_secs(3)).await, "the dropped request is still open");
}

#[tokio::test]
async fn the_api_key_never_leaks() {
    const KEY: &str = "sk-SENTINEL-7f3a9c1e5b";
    let echo = format!("invalid key {KEY} supplied");
    let server = MockServer::start([
        Reply::error(401, "invalid_api_key", &echo),
        Reply::raw(200, format!("not json {KEY}")),
        Reply::sse(format!("data: {{\"error\":{{\"message\":\"{KEY}\"}}}}\n\n").as_bytes()),
        Reply::sse(&recordings::sse_body("openai-gpt4o-strict-tool.sse")),
    ])
    .await;
    let config = ClientConfig::custom(server.base_url(), "m", KEY)
        .with_retry(fast_retry(0))
        .with_timeouts(timeouts(2000, 10_000));
    assert!(!format!("{config:?}").contains("SENTINEL"));
    let c = OpenAiCompatibleClient::new(config).unwrap();
    assert!(!format!("{c:?}").contains("SENTINEL"));
    let e1 = c.complete(&request()).await.unwrap_err();
    let e2 = c.complete(&request()).await.unwrap_err();
    let (_, e3) = drain(&c).await;
    let (events, e4) = drain(&c).await;
    assert!(e4.is_none());
    for e in [e1, e2, e3.unwrap()] {
        let text = format!("{e} {e:?} {}", serde_json::to_string(&e).unwrap());
        assert!(!text.contains("SENTINEL"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
    assert!(!format!("{events:?}").contains("SENTINEL"));
    // It was sent, in the Authorization header only.
    for r in server.requests() {
        assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
        assert!(!String::from_utf8_lossy(&r.body).contains("SENTINEL"));
    }
    // A connect error does not carry it either.
    let dead = ClientConfig::custom("http://127.0.0.1:9/v1", "m", KEY).with_retry(fast_retry(0));
    let e = OpenAiCompatibleClient::new(dead).unwrap().complete(&request()).await.unwrap_err();
    assert!(!format!("{e:?}").contains("SENTINEL"));
}

#[cfg(not(feature = "gzip"))]
#[tokio::test]
async fn bodies_are_asked_for_uncompressed() {
    let server = MockServer::start([Reply::json(200, &ok_body("plain"))]).await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 10_000));
    let r: ModelResponse = c.complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("plain"));
    // Without a decoder the client asks for the identity coding (with no Accept-Encoding at all a
    // server may pick any: RFC 9110, 12.5.3).
    assert_eq!(server.requests()[0].header("accept-encoding"), Some("identity"));
}

/// `text` gzip-encoded.
fn gzipped(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text.as_bytes()).unwrap();
    enc.finish().unwrap()
}

/// A server (a proxy, a CDN) that encodes its body although the client asked for none: the error
/// says so and what to do, instead of "not UTF-8" and the compressed bytes. Not retried.
#[cfg(not(feature = "gzip"))]
#[tokio::test]
async fn a_body_encoded_although_the_client_asked_for_none_says_so() {
    let stream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let encoded = |status: u16, content_type: &str, body: &str, coding: &str| {
        Reply::raw(status, gzipped(body))
            .with_header("Content-Type", content_type)
            .with_header("Content-Encoding", coding)
    };
    let server = MockServer::start([
        encoded(200, "application/json", &ok_body("compressed").to_string(), "gzip"),
        encoded(200, "text/event-stream", stream, "GZIP"),
        encoded(200, "application/json", &ok_body("compressed").to_string(), "br"),
        encoded(500, "application/json", r#"{"error":{"message":"down"}}"#, "gzip"),
        // An encoding that is identity after all is no encoding.
        Reply::json(200, &ok_body("plain")).with_header("Content-Encoding", "identity"),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_DECODE), "{e}");
    assert_eq!(
        e.message,
        "the response body came encoded with Content-Encoding: gzip, which the client did not ask for \
         (Accept-Encoding: identity) and cannot decode; build with the cargo feature `gzip` to read gzip \
         bodies, or have the server or proxy send them unencoded"
    );
    let (events, e) = drain(&c).await;
    let e = e.expect("an error");
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(e.code, codes::PROVIDER_DECODE);
    assert!(e.message.contains("Content-Encoding: GZIP") && e.message.contains("feature `gzip`"), "{e}");
    let e = c.complete(&request()).await.unwrap_err();
    assert!(e.message.contains("Content-Encoding: br,") && !e.message.contains("feature"), "{e}");
    assert_eq!(server.requests().len(), 3, "none retried");
    // An error status keeps its code; the body is not shown, what it came as is.
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_HTTP_STATUS);
    assert!(
        e.message.starts_with("HTTP 500: a body of ") && e.message.contains("Content-Encoding: gzip"),
        "{e}"
    );
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("plain"));
}

/// Needs the cargo feature `gzip` (`cargo test --features gzip --test provider_faults`).
#[cfg(feature = "gzip")]
#[tokio::test]
async fn gzip_bodies_are_decoded() {
    let gz = gzipped(&ok_body("compressed").to_string());
    let server = MockServer::start([
        Reply::raw(200, gz.clone())
            .with_header("Content-Type", "application/json")
            .with_header("Content-Encoding", "gzip"),
        Reply::raw(200, gz)
            .with_header("Content-Type", "application/json")
            .with_header("Content-Encoding", "br"),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(0), timeouts(2000, 10_000));
    let r: ModelResponse = c.complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("compressed"));
    assert!(server.requests()[0].header("accept-encoding").is_some_and(|v| v.contains("gzip")));
    // A coding it does not decode says so.
    let e = c.complete(&request()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_DECODE);
    assert!(
        e.message.contains("Content-Encoding: br,") && e.message.contains("(Accept-Encoding: gzip)"),
        "{e}"
    );
}

#[tokio::test]
async fn a_connection_that_breaks_before_the_answer_is_retried() {
    // Closed or reset after the request was read, before any response head: nothing of an answer
    // came, so the request is sent again (a server's keep-alive timeout racing it, a gateway
    // restarting), whole and streamed.
    for broken in [Reply::Close, Reply::ResetAtOnce] {
        let what = format!("{broken:?}");
        let server = MockServer::start([broken, Reply::json(200, &ok_body("after a retry"))]).await;
        let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
        assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("after a retry"), "{what}");
        assert_eq!(server.requests().len(), 2, "{what}");
    }
    let server = MockServer::start([Reply::ResetAtOnce, Reply::Close, Reply::sse(b"data: {\"choices\":[{\"delta\":{\"content\":\"streamed\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")]).await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
    let (events, e) = drain(&c).await;
    assert!(e.is_none(), "{e:?}");
    assert!(events.iter().any(|ev| matches!(ev, ModelEvent::TextDelta(t) if t == "streamed")), "{events:?}");
    assert_eq!(server.requests().len(), 3);
    // Every attempt broken: a structured error once the retries are spent, saying how many were made.
    let server = MockServer::start([
        Reply::Close,
        Reply::ResetAtOnce,
        Reply::Close,
        Reply::json(200, &ok_body("late")),
    ])
    .await;
    let c = client(&server.base_url(), fast_retry(2), timeouts(2000, 10_000));
    let t0 = Instant::now();
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_CONNECT);
    assert!(e.message.contains("broke before the response") && e.message.contains("after 2 retries"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_connection_that_breaks_inside_the_answer_is_not_retried() {
    // A response head came: the answer had begun, so the request is not sent again.
    let head_only =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"choices\""
            .to_vec();
    let server =
        MockServer::start([Reply::Verbatim(head_only), Reply::json(200, &ok_body("never asked"))]).await;
    let c = client(&server.base_url(), fast_retry(3), timeouts(2000, 10_000));
    let e = c.complete(&request()).await.unwrap_err();
    assert!(e.code.starts_with("provider_"), "{e}");
    assert_eq!(server.requests().len(), 1);
}
