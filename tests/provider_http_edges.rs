//! The client against what real providers, proxies and gateways send besides a clean answer: an
//! error body echoing the request's headers, a streamed request answered with something that is
//! not an event stream, a non-streamed request answered with one, a stream that stalls after its
//! last chunk. Each case ends in the answer or in a structured provider error that says what came,
//! and the API key appears in none of them.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::provider::{
    ChatModel, ChatRequest, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy, Timeouts,
};
use arkagent::{codes, AgentError, ChatMessage, ErrorLayer};
use futures_util::StreamExt;
use mock_server::{MockServer, Reply};
use std::sync::Arc;
use std::time::Duration;

/// A key of the length of the providers' own (48 bytes, like Moonshot's and Zhipu's).
const KEY: &str = "sk-SENTINEL-0123456789abcdefghijklmnopqrstuvwxyz";

fn client(server: &MockServer, idle: Duration) -> OpenAiCompatibleClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle,
        total: Duration::from_secs(10),
    };
    OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", KEY)
            .with_retry(RetryPolicy::none())
            .with_timeouts(timeouts),
    )
    .expect("client")
}

fn request() -> ChatRequest {
    ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()))
}

/// The events of a streamed answer before its first error, and the error.
async fn drain(c: &OpenAiCompatibleClient) -> (Vec<ModelEvent>, Option<AgentError>) {
    let mut stream = match c.stream(&request()).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => events.push(ev),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

fn assert_provider(e: &AgentError, code: &str) {
    assert_eq!(e.layer, ErrorLayer::Provider, "{e}");
    assert_eq!(e.code, code, "{e}");
}

/// No part of the key: its first 12 bytes (`sk-SENTINEL-`) are in any piece of it long enough
/// to be of use.
fn assert_no_key(e: &AgentError) {
    let text = format!("{e} {e:?}");
    assert!(!text.contains("SENTINEL"), "{text}");
}

#[tokio::test]
async fn an_echoed_key_the_excerpt_would_cut_never_leaks() {
    // A gateway echoing the request's headers in a body longer than the excerpt, the key across
    // the excerpt's end: as an error status, as a 200 that is not JSON, as a stream chunk.
    let mut body = "x".repeat(2048 - 40);
    body.push_str(&format!(" Authorization: Bearer {KEY} and more"));
    let server = MockServer::start([
        Reply::raw(401, body.clone()),
        Reply::raw(200, body.clone()),
        Reply::sse(format!("data: {body}\n\n").as_bytes()),
    ])
    .await;
    let c = client(&server, Duration::from_secs(2));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_AUTH);
    assert_no_key(&e);
    assert!(e.message.contains("Authorization: Bearer ... (2088 bytes in all)"), "{e}");
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_DECODE);
    assert_no_key(&e);
    let (_, e) = drain(&c).await;
    let e = e.expect("a decode error");
    assert_provider(&e, codes::PROVIDER_DECODE);
    assert_no_key(&e);
}
