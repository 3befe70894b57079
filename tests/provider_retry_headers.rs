//! The retry headers the official OpenAI SDKs obey, against the local mock server (counting the
//! requests it saw): `x-should-retry: false` forbids a retry the status would get, `x-should-retry:
//! true` forces one the status would not, a body that says the error lasts is never retried
//! whatever the header says, and `retry-after-ms` is waited for before `Retry-After`, under the
//! same `max_retry_after` cap.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/retry_client.rs"]
mod retry_client;

use arkagent::provider::{
    ChatModel, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy, Timeouts,
};
use arkagent::{codes, ErrorLayer};
use mock_server::{MockServer, Reply};
use retry_client::{ok, request};
use std::time::{Duration, Instant};

const KEY: &str = "sk-retry-headers-key";

fn client(server: &MockServer, max_retries: u32) -> OpenAiCompatibleClient {
    retry_client::client(server, max_retries, KEY)
}

#[tokio::test]
async fn x_should_retry_false_on_a_500_is_returned_after_one_request() {
    for value in ["false", "FALSE", " False "] {
        let server = MockServer::start([
            Reply::error(500, "server_error", "broken for good").with_header("x-should-retry", value),
            ok("must not be reached"),
        ])
        .await;
        let e = client(&server, 3).complete(&request()).await.unwrap_err();
        assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_HTTP_STATUS), "{e}");
        assert!(
            e.message.contains("HTTP 500")
                && e.message.contains("broken for good")
                && e.message.contains("x-should-retry: false")
                && !e.message.contains("retries"),
            "{value:?}: {e}"
        );
        assert_eq!(server.requests().len(), 1, "{value:?}");
    }
}

#[tokio::test]
async fn x_should_retry_false_on_a_status_never_retried_adds_nothing() {
    let server = MockServer::start([
        Reply::error(400, "bad", "the request's own fault").with_header("x-should-retry", "false")
    ])
    .await;
    let e = client(&server, 3).complete(&request()).await.unwrap_err();
    assert!(e.message.contains("HTTP 400") && !e.message.contains("x-should-retry"), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn x_should_retry_true_on_a_400_is_retried_until_it_succeeds() {
    let server = MockServer::start([
        Reply::error(400, "try_again", "a gateway's passing fault").with_header("x-should-retry", "true"),
        Reply::error(403, "try_again", "still passing").with_header("x-should-retry", "True"),
        ok("third time"),
    ])
    .await;
    let r = client(&server, 2).complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("third time"));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.body == reqs[0].body), "every attempt sends the same body");
}

#[tokio::test]
async fn x_should_retry_true_still_stops_when_the_retries_run_out() {
    let server = MockServer::start(
        (0..4).map(|_| Reply::error(400, "try_again", "again").with_header("x-should-retry", "true")),
    )
    .await;
    let e = client(&server, 2).complete(&request()).await.unwrap_err();
    assert!(e.message.contains("HTTP 400") && e.message.contains("after 2 retries"), "{e}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn x_should_retry_true_on_a_streamed_request() {
    let sse = b"data: {\"choices\":[{\"delta\":{\"content\":\"streamed\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = MockServer::start([
        Reply::error(422, "busy", "upstream busy").with_header("x-should-retry", "true"),
        Reply::sse(sse),
    ])
    .await;
    let (events, e) = drain::drain(&client(&server, 2), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert!(
        matches!(events.last(), Some(ModelEvent::Finished(r)) if r.content.as_deref() == Some("streamed")),
        "{events:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_exhausted_quota_is_never_retried_even_when_a_gateway_says_true() {
    for (status, code) in [(429u16, "insufficient_quota"), (429, "1113"), (500, "1112")] {
        let server = MockServer::start([
            Reply::error(status, code, "no balance left").with_header("x-should-retry", "true"),
            ok("must not be reached"),
        ])
        .await;
        let e = client(&server, 3).complete(&request()).await.unwrap_err();
        assert!(
            e.message.contains("no balance left") && e.message.contains("lasts until the account"),
            "{status} {code}: {e}"
        );
        assert_eq!(server.requests().len(), 1, "{status} {code}");
    }
}

#[tokio::test]
async fn any_other_x_should_retry_value_leaves_the_status_rule() {
    let server = MockServer::start([
        Reply::error(503, "busy", "overloaded").with_header("x-should-retry", "maybe"),
        ok("retried by status"),
        Reply::error(400, "bad", "own fault").with_header("x-should-retry", "1"),
    ])
    .await;
    let c = client(&server, 2);
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("retried by status"));
    let e = c.complete(&request()).await.unwrap_err();
    assert!(e.message.contains("HTTP 400"), "{e}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retry_after_ms_is_waited_for_and_preferred_to_retry_after() {
    // `Retry-After: 4` alone would wait 4 s; `retry-after-ms: 300` wins. The backoff (at most
    // 100 ms) is not what was waited.
    let server = MockServer::start([
        Reply::error(429, "rate_limit_exceeded", "slow down")
            .with_header("Retry-After", "4")
            .with_header("retry-after-ms", "300"),
        ok("after 300 ms"),
    ])
    .await;
    let t0 = Instant::now();
    let r = client(&server, 2).complete(&request()).await.unwrap();
    let waited = t0.elapsed();
    assert_eq!(r.content.as_deref(), Some("after 300 ms"));
    assert!(waited >= Duration::from_millis(290) && waited < Duration::from_millis(2500), "{waited:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn retry_after_ms_above_the_cap_returns_the_error_at_once() {
    let server = MockServer::start([
        Reply::error(429, "rate_limit_exceeded", "come back later").with_header("retry-after-ms", "60000"),
        ok("must not be reached"),
    ])
    .await;
    let t0 = Instant::now();
    let e = client(&server, 3).complete(&request()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_RATE_LIMITED, "{e}");
    assert!(e.message.contains("retry-after-ms") && e.message.contains("exceeds the limit"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_retry_after_ms_that_is_not_a_delay_falls_back_to_retry_after() {
    for bad in ["soon", "-5", "NaN", "inf"] {
        let server = MockServer::start([
            Reply::error(503, "busy", "overloaded")
                .with_header("retry-after-ms", bad)
                .with_header("Retry-After", "1"),
            ok("after a second"),
        ])
        .await;
        let t0 = Instant::now();
        let r = client(&server, 2).complete(&request()).await.unwrap();
        assert_eq!(r.content.as_deref(), Some("after a second"), "{bad}");
        assert!(t0.elapsed() >= Duration::from_millis(950), "{bad}: {:?}", t0.elapsed());
        assert_eq!(server.requests().len(), 2, "{bad}");
    }
}

#[tokio::test]
async fn a_wait_asked_for_past_the_total_timeout_returns_the_error_at_once() {
    // 3 s asked for (under the cap), 1 s of the total left: no attempt could be made in time.
    let server = MockServer::start([
        Reply::error(503, "busy", "overloaded").with_header("retry-after-ms", "3000"),
        ok("must not be reached"),
    ])
    .await;
    let timeouts = Timeouts {
        connect: Duration::from_millis(500),
        first_byte: Duration::from_millis(900),
        idle: Duration::from_millis(900),
        total: Duration::from_secs(1),
        ..Timeouts::default()
    };
    let config = ClientConfig::custom(server.base_url(), "m", KEY)
        .with_retry(RetryPolicy {
            max_retries: 3,
            max_retry_after: Duration::from_secs(5),
            ..RetryPolicy::default()
        })
        .with_timeouts(timeouts);
    let t0 = Instant::now();
    let e = OpenAiCompatibleClient::new(config).unwrap().complete(&request()).await.unwrap_err();
    assert!(e.message.contains("no time left"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(900), "{:?}", t0.elapsed());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn dropping_the_call_during_a_retry_wait_sends_no_further_attempt() {
    let server = MockServer::start([
        Reply::error(503, "busy", "overloaded").with_header("retry-after-ms", "400"),
        ok("must not be reached"),
    ])
    .await;
    let c = client(&server, 3);
    let r = request();
    let call = c.complete(&r);
    assert!(tokio::time::timeout(Duration::from_millis(150), call).await.is_err(), "the call ended early");
    // Well past the wait the server asked for: the dropped call sent nothing more.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(server.requests().len(), 1);
}
