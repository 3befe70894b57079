//! A client for the retry tests, against the local mock server: short backoffs (20 to 100 ms), a
//! 5 s cap on the waits a server asks for, 2 s connect / first byte / idle limits and a 10 s
//! total; plus the one request and the plain answer those tests use.

use super::mock_server::{MockServer, Reply};
use arkagent::provider::{ChatModel, ClientConfig, OpenAiCompatibleClient, RetryPolicy, Timeouts};
use std::time::{Duration, Instant};

/// The client, retrying at most `max_retries` times, with `key` as its API key.
pub fn client(server: &MockServer, max_retries: u32, key: &str) -> OpenAiCompatibleClient {
    let retry = RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        jitter: 0.5,
        max_retry_after: Duration::from_secs(5),
    };
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle: Duration::from_secs(2),
        total: Duration::from_secs(10),
        ..Timeouts::default()
    };
    OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", key).with_retry(retry).with_timeouts(timeouts),
    )
    .expect("client")
}

#[path = "request.rs"]
mod request;
/// One user message, no tools.
pub use request::request;

/// A whole answer of `text`.
pub fn ok(text: &str) -> Reply {
    Reply::json(200, &serde_json::json!({"choices":[{"message":{"content":text},"finish_reason":"stop"}]}))
}

/// Completes [`request`] on `c`, which must answer `text` once the server's `Retry-After: 1` was
/// waited for (at least 950 ms).
#[allow(dead_code)] // not every test binary that includes this file uses it
pub async fn completes_after_retry_after_1(c: &OpenAiCompatibleClient, text: &str) {
    let t0 = Instant::now();
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some(text));
    assert!(
        t0.elapsed() >= Duration::from_millis(950),
        "Retry-After: 1 was not honoured: {:?}",
        t0.elapsed()
    );
}
