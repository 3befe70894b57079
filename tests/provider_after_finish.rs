//! The limit after the finish reason (`Timeouts::after_finish`): once a stream's finish reason
//! came, the answer is complete and only the usage chunk and `[DONE]` may follow, so a stall is
//! waited for a few seconds, not for the idle limit (which is the 600 s total for OpenAI's
//! reasoning models), and the answer is kept. What comes within it is still read. An event stream
//! mislabelled as JSON is streamed and treated the same.

#[path = "support/after_finish.rs"]
mod after_finish;
#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;

use after_finish::{answer, request, CALL, DONE, FINISH, USAGE};
use arkagent::provider::{
    ChatModel, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy, Timeouts,
};
use arkagent::{codes, AgentError, ErrorLayer, ToolCall};
use mock_server::{End, MockServer, Reply};
use std::time::{Duration, Instant};

fn client(server: &MockServer, model: &str, timeouts: Option<Timeouts>) -> OpenAiCompatibleClient {
    let mut config =
        ClientConfig::custom(server.base_url(), model, "sk-after-finish-key").with_retry(RetryPolicy::none());
    if let Some(t) = timeouts {
        config = config.with_timeouts(t);
    }
    OpenAiCompatibleClient::new(config).expect("client")
}

/// A reasoning model's limits (idle = total), scaled down, with this limit after the finish reason.
fn reasoning_like(idle: Duration, after_finish: Duration) -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle,
        total: idle,
        after_finish,
    }
}

/// The events and error of a streamed answer, and how long it took; fails if it takes `limit`.
async fn timed(
    client: &OpenAiCompatibleClient,
    limit: Duration,
) -> (Vec<ModelEvent>, Option<AgentError>, Duration) {
    let t0 = Instant::now();
    let (events, e) = tokio::time::timeout(limit, drain::drain(client, &request()))
        .await
        .unwrap_or_else(|_| panic!("still waiting after {limit:?}"));
    (events, e, t0.elapsed())
}

#[tokio::test]
async fn a_reasoning_models_stalled_stream_keeps_its_answer_after_a_few_seconds_not_ten_minutes() {
    // The defaults of `o3`: idle 600 s, 5 s after the finish reason.
    let server = MockServer::start([Reply::Stream {
        parts: vec![format!("{CALL}{FINISH}").into_bytes()],
        delay: Duration::ZERO,
        end: End::Stall,
    }])
    .await;
    let c = client(&server, "o3", None);
    assert_eq!(
        (c.config().timeouts.idle, c.config().timeouts.after_finish),
        (Duration::from_secs(600), Duration::from_secs(5))
    );
    let (events, e, took) = timed(&c, Duration::from_secs(20)).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer(&events).tool_calls, [ToolCall::new("c1", "f", "{}")]);
    assert!(took >= Duration::from_millis(4900) && took < Duration::from_secs(15), "{took:?}");
    // The stalled connection is closed by the client.
    assert!(server.wait_aborted(1, Duration::from_secs(3)).await);
}

#[tokio::test]
async fn a_stall_after_the_finish_reason_ends_at_the_limit_set() {
    let server = MockServer::start([Reply::Stream {
        parts: vec![CALL.as_bytes().to_vec(), FINISH.as_bytes().to_vec()],
        delay: Duration::from_millis(50),
        end: End::Stall,
    }])
    .await;
    let c = client(&server, "m", Some(reasoning_like(Duration::from_secs(30), Duration::from_millis(300))));
    let (events, e, took) = timed(&c, Duration::from_secs(5)).await;
    assert!(e.is_none(), "{e:?}");
    let r = answer(&events);
    assert_eq!((r.content.as_deref(), r.finish_reason.as_deref()), (Some("ok"), Some("tool_calls")));
    assert!(took >= Duration::from_millis(350) && took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn what_comes_after_the_finish_reason_within_the_limit_is_still_read() {
    // Keep-alive comments after the finish chunk, then the usage chunk and `[DONE]`, all within
    // the limit counted from the finish chunk: the usage is kept. (Keep-alives do not extend the
    // limit: tests/provider_after_finish_pings.rs.)
    let mut parts = vec![format!("{CALL}{FINISH}").into_bytes()];
    parts.extend((0..3).map(|_| b": keep-alive\n\n".to_vec()));
    parts.push(format!("{USAGE}{DONE}").into_bytes());
    let server =
        MockServer::start([Reply::Stream { parts, delay: Duration::from_millis(80), end: End::Stall }]).await;
    let c = client(&server, "m", Some(reasoning_like(Duration::from_secs(30), Duration::from_millis(700))));
    let (events, e, took) = timed(&c, Duration::from_secs(5)).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer(&events).usage.map(|u| u.total_tokens), Some(7), "{events:?}");
    // Read past the keep-alives to `[DONE]` (320 ms after the finish chunk).
    assert!(took >= Duration::from_millis(380), "{took:?}");
}

#[tokio::test]
async fn before_the_finish_reason_the_idle_limit_still_applies() {
    let server = MockServer::start([Reply::Stream {
        parts: vec![b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal\"}}]}\n\n".to_vec()],
        delay: Duration::ZERO,
        end: End::Stall,
    }])
    .await;
    let c =
        client(&server, "m", Some(reasoning_like(Duration::from_millis(800), Duration::from_millis(100))));
    let (events, e, took) = timed(&c, Duration::from_secs(5)).await;
    let e = e.expect("an error");
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_TIMEOUT), "{e}");
    assert_eq!(events, [ModelEvent::TextDelta("hal".into())]);
    assert!(took >= Duration::from_millis(750), "{took:?}");
}

fn labelled_json(parts: &[&str]) -> Reply {
    Reply::StreamAs {
        content_type: Some("application/json".into()),
        parts: parts.iter().map(|p| p.as_bytes().to_vec()).collect(),
        delay: Duration::from_millis(50),
        end: End::Stall,
    }
}

#[tokio::test]
async fn an_event_stream_labelled_json_that_stalls_after_its_finish_reason_keeps_its_answer() {
    let server = MockServer::start([labelled_json(&[CALL, FINISH])]).await;
    let c = client(&server, "m", Some(reasoning_like(Duration::from_secs(30), Duration::from_millis(300))));
    let (events, e, took) = timed(&c, Duration::from_secs(5)).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(answer(&events).tool_calls, [ToolCall::new("c1", "f", "{}")]);
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn an_event_stream_labelled_json_is_streamed_and_times_out_like_one() {
    // Before its finish reason: its events come as they arrive, then the idle limit ends it.
    let open = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal\"}}]}\n\n";
    let server = MockServer::start([labelled_json(&[open])]).await;
    let c =
        client(&server, "m", Some(reasoning_like(Duration::from_millis(500), Duration::from_millis(100))));
    let (events, e, _) = timed(&c, Duration::from_secs(5)).await;
    let e = e.expect("an error");
    assert_eq!(e.code, codes::PROVIDER_TIMEOUT, "{e}");
    assert_eq!(events, [ModelEvent::TextDelta("hal".into())]);
}

#[tokio::test]
async fn a_non_streamed_request_answered_with_a_stalling_event_stream_gets_its_answer() {
    // A gateway that always streams: the answer is read as a stream is, so a stall after the
    // finish reason keeps it (it was a timeout, the answer lost); one before it is still a timeout.
    let open = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal\"}}]}\n\n";
    let stall = |parts: &[&str]| Reply::Stream {
        parts: parts.iter().map(|p| p.as_bytes().to_vec()).collect(),
        delay: Duration::from_millis(50),
        end: End::Stall,
    };
    let server = MockServer::start([stall(&[CALL, FINISH]), stall(&[open])]).await;
    let c = client(&server, "m", Some(reasoning_like(Duration::from_secs(3), Duration::from_millis(200))));
    let t0 = Instant::now();
    let r = c.complete(&request()).await.unwrap();
    assert_eq!((r.content.as_deref(), r.tool_calls.len()), (Some("ok"), 1));
    assert!(t0.elapsed() < Duration::from_millis(2500), "{:?}", t0.elapsed());
    let e = c.complete(&request()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_TIMEOUT, "{e}");
}
