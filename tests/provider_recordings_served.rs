//! Every recording of tests/fixtures/sse served by the local mock server and read by the client,
//! streamed and not: the client gives the events (and the answer) the decoder gives for the whole
//! body, whatever pieces the body comes in, and the usage each recording reports (the last report,
//! at the top level or inside the choice, read generically from the payloads here). Recordings
//! without `[DONE]` (the `.jsonl` ones) are served on a connection that then stays open: the
//! answer is complete at its finish reason, and handed out at the limit after it.

#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/recordings.rs"]
mod recordings;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{
    decode_sse_body, ChatModel, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy, Timeouts,
};
use arkagent::Usage;
use futures_util::StreamExt;
use mock_server::{End, MockServer, Reply};
use recordings::{sse_body, streaming_entries};
use request::request;
use serde_json::Value;
use std::time::Duration;

/// The usage a recording reports: its last `usage` object, at the top level or in choice 0, read
/// as `serde_json::Value` (the total as given, else the sum).
fn recorded_usage(body: &[u8]) -> Option<Usage> {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut last = None;
    for line in text.lines() {
        let Some(payload) = line.strip_prefix("data:").map(str::trim) else { continue };
        if payload == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(payload).unwrap();
        for u in [&v["usage"], &v["choices"][0]["usage"]] {
            if u.is_object() {
                let n = |k: &str| u[k].as_u64();
                let (p, c) = (n("prompt_tokens").unwrap_or(0), n("completion_tokens").unwrap_or(0));
                last = Some(Usage {
                    prompt_tokens: p,
                    completion_tokens: c,
                    total_tokens: n("total_tokens").unwrap_or(p + c),
                });
            }
        }
    }
    last
}

fn client(server: &MockServer) -> OpenAiCompatibleClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle: Duration::from_secs(10),
        total: Duration::from_secs(20),
        after_finish: Duration::from_millis(150),
    };
    let config = ClientConfig::custom(server.base_url(), "m", "sk-recordings-served-key")
        .with_retry(RetryPolicy::none())
        .with_timeouts(timeouts);
    OpenAiCompatibleClient::new(config).unwrap()
}

/// One recording through the client: streamed in pieces of 1, 7 and 61 bytes (a character or a
/// line split anywhere), then whole for `complete`.
async fn serve_and_read(file: String) {
    let file = file.as_str();
    let body = sse_body(file);
    let want = decode_sse_body(&body).unwrap();
    let usage = recorded_usage(&body);
    let Some(ModelEvent::Finished(answer)) = want.last() else { panic!("{file}") };
    assert_eq!(answer.usage, usage, "{file}: usage");
    let usage_events = want.iter().filter(|e| matches!(e, ModelEvent::Usage(_))).count();
    assert_eq!(usage_events, usize::from(usage.is_some()), "{file}: one Usage event");
    let end = if body.windows(6).any(|w| w == b"[DONE]") { End::Complete } else { End::Stall };
    let server = MockServer::start(
        [1usize, 7, 61]
            .into_iter()
            .map(|size| Reply::sse_in_pieces(&body, size, Duration::ZERO, end))
            .chain([Reply::sse_in_pieces(&body, body.len(), Duration::ZERO, end)]),
    )
    .await;
    let c = client(&server);
    for size in [1, 7, 61] {
        let mut stream = c.stream(&request()).await.unwrap();
        let mut got = Vec::new();
        while let Some(event) = stream.next().await {
            got.push(event.unwrap_or_else(|e| panic!("{file} ({size}): {e}")));
        }
        assert_eq!(got, want, "{file}: pieces of {size}");
    }
    let whole = c.complete(&request()).await.unwrap();
    assert_eq!(&whole, answer, "{file}: complete");
}

#[tokio::test]
async fn every_recording_served_gives_the_decoders_events_and_its_usage() {
    let entries = streaming_entries();
    assert_eq!(entries.len(), 21);
    let files = entries.iter().map(|e| e["file"].as_str().unwrap().to_string());
    futures_util::future::join_all(files.map(|f| tokio::spawn(serve_and_read(f))))
        .await
        .into_iter()
        .for_each(|r| r.expect("a recording failed"));
}
