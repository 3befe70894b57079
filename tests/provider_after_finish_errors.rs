//! What follows a stream's finish reason and is no more of the answer: an error event, a payload
//! that is not JSON (`data: DONE`, a `null`), in the body's last read or in one of its own. The
//! answer was complete (the app may have shown it), so it is kept, as when the stream breaks off
//! there, streamed or read whole, in parts or in one piece. Not when answer data followed the
//! finish reason (its finish reasons come early: tests/provider_early_finish.rs), nor before it.

#[path = "support/after_finish.rs"]
mod after_finish;
#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;

use after_finish::{answer, request, CALL, FINISH, USAGE};
use arkagent::provider::{ChatModel, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy};
use arkagent::{codes, ToolCall};
use mock_server::{End, MockServer, Reply};
use std::time::Duration;

/// What a gateway sent after the answer, in place of the usage report or `[DONE]`.
const TRAILERS: [&str; 5] = [
    "data: {\"error\":{\"message\":\"internal\",\"type\":\"server_error\"}}\n\n",
    "event: error\ndata: upstream closed\n\n",
    "data: DONE\n\n",
    "data: null\n\n",
    // The body's last event, without its blank line (read when the body ends).
    "data: null\n",
];

fn client(server: &MockServer) -> OpenAiCompatibleClient {
    let config = ClientConfig::custom(server.base_url(), "m", "sk-after-finish-errors-key")
        .with_retry(RetryPolicy::none());
    OpenAiCompatibleClient::new(config).expect("client")
}

/// `parts` sent apart (the trailer in a read of its own) and in one piece.
fn replies(parts: &[&str]) -> [Reply; 2] {
    let apart = parts.iter().map(|p| p.as_bytes().to_vec()).collect();
    [
        Reply::Stream { parts: apart, delay: Duration::from_millis(20), end: End::Complete },
        Reply::sse(parts.concat().as_bytes()),
    ]
}

#[tokio::test]
async fn a_payload_that_is_no_answer_after_the_finish_reason_keeps_the_answer() {
    let mut lost = Vec::new();
    for trailer in TRAILERS {
        for reply in
            replies(&[CALL, FINISH, trailer]).into_iter().chain(replies(&[CALL, FINISH, USAGE, trailer]))
        {
            // Streamed, and asked whole (a gateway that always streams).
            let server = MockServer::start([reply.clone(), reply]).await;
            let c = client(&server);
            let (events, e) = drain::drain(&c, &request()).await;
            if let Some(e) = e {
                lost.push(format!("{trailer:?}: {e}"));
                continue;
            }
            let streamed = answer(&events);
            assert_eq!(streamed.tool_calls, [ToolCall::new("c1", "f", "{}")], "{trailer:?}");
            assert_eq!(streamed.content.as_deref(), Some("ok"));
            match c.complete(&request()).await {
                Ok(whole) => assert_eq!(&whole, streamed, "{trailer:?}"),
                Err(e) => lost.push(format!("{trailer:?} asked whole: {e}")),
            }
        }
    }
    assert!(lost.is_empty(), "answers lost:\n{}", lost.join("\n"));
}

#[tokio::test]
async fn before_the_finish_reason_or_after_data_that_followed_it_the_error_stands() {
    let more = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" more\"}}]}\n\n";
    for trailer in TRAILERS {
        for parts in [vec![CALL, trailer], vec![CALL, FINISH, more, trailer]] {
            for reply in replies(&parts) {
                let server = MockServer::start([reply]).await;
                let (events, e) = drain::drain(&client(&server), &request()).await;
                let e = e.unwrap_or_else(|| panic!("{parts:?}: no error"));
                assert!(
                    [codes::PROVIDER_HTTP_STATUS, codes::PROVIDER_DECODE].contains(&e.code.as_ref()),
                    "{parts:?}: {e}"
                );
                assert!(!events.iter().any(|e| matches!(e, ModelEvent::Finished(_))), "{events:?}");
            }
        }
    }
}
