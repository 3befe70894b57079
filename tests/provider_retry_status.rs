//! Which error statuses the client retries: 408 (Request Timeout) and 409 (Conflict) as well as 429
//! and 5xx, as the official OpenAI SDKs do (`_should_retry` of openai-python and openai-node),
//! with the same backoff, limits, `Retry-After` and lasting-error rule; every other 4xx is
//! returned at once. Against the local mock server, streamed and not.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/retry_client.rs"]
mod retry_client;

use arkagent::provider::client::is_retried_status;
use arkagent::provider::{ChatModel, ModelEvent, OpenAiCompatibleClient};
use arkagent::{codes, ErrorLayer};
use mock_server::{MockServer, Reply};
use retry_client::{ok, request};

fn client(server: &MockServer, max_retries: u32) -> OpenAiCompatibleClient {
    retry_client::client(server, max_retries, "sk-retry-status-key")
}

#[tokio::test]
async fn a_408_or_409_then_success_is_retried_and_the_answer_kept() {
    for status in [408u16, 409] {
        let server = MockServer::start([
            Reply::error(status, "busy", "try again"),
            Reply::error(status, "busy", "try again"),
            ok("second retry"),
        ])
        .await;
        let c = client(&server, 2);
        let r = c.complete(&request()).await.unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!(r.content.as_deref(), Some("second retry"), "{status}");
        let reqs = server.requests();
        assert_eq!(reqs.len(), 3, "{status}");
        assert!(reqs.iter().all(|r| r.body == reqs[0].body), "{status}: every attempt sends the same body");
    }
}

#[tokio::test]
async fn a_streamed_request_is_retried_on_408_and_409_too() {
    let sse = b"data: {\"choices\":[{\"delta\":{\"content\":\"streamed\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = MockServer::start([
        Reply::error(408, "request_timeout", "the request took too long to arrive"),
        Reply::error(409, "conflict", "lock timeout"),
        Reply::sse(sse),
    ])
    .await;
    let (events, e) = drain::drain(&client(&server, 2), &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert!(
        matches!(events.last(), Some(ModelEvent::Finished(r)) if r.content.as_deref() == Some("streamed"))
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retries_of_a_408_run_out_with_the_last_error() {
    let server =
        MockServer::start((0..3).map(|_| Reply::error(408, "request_timeout", "gave up waiting"))).await;
    let e = client(&server, 2).complete(&request()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_HTTP_STATUS), "{e}");
    assert!(
        e.message.contains("HTTP 408")
            && e.message.contains("gave up waiting")
            && e.message.contains("after 2 retries"),
        "{e}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_409_honours_retry_after_and_one_that_lasts_is_returned_at_once() {
    let server = MockServer::start([
        Reply::error(409, "conflict", "busy").with_header("Retry-After", "1"),
        ok("after the wait"),
        Reply::error(409, "insufficient_quota", "no credit left"),
    ])
    .await;
    let c = client(&server, 2);
    retry_client::completes_after_retry_after_1(&c, "after the wait").await;
    let e = c.complete(&request()).await.unwrap_err();
    assert!(e.message.contains("no credit left") && e.message.contains("not retried"), "{e}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn other_client_errors_are_still_returned_at_once() {
    let statuses = [400u16, 404, 410, 413, 422];
    let server = MockServer::start(statuses.map(|s| Reply::error(s, "bad", "the request's own fault"))).await;
    let c = client(&server, 3);
    for status in statuses {
        let e = c.complete(&request()).await.unwrap_err();
        assert!(e.message.contains(&format!("HTTP {status}")) && !e.message.contains("retries"), "{e}");
    }
    assert_eq!(server.requests().len(), statuses.len());
}

#[test]
fn the_retried_statuses_are_those_of_the_openai_sdks() {
    let retried: Vec<u16> =
        (100..600).filter(|s| is_retried_status(reqwest::StatusCode::from_u16(*s).unwrap())).collect();
    let want: Vec<u16> = [408, 409, 429].into_iter().chain(500..600).collect();
    assert_eq!(retried, want);
}
