//! Keep-alives after the finish reason: once a stream's answer is complete, the limit after the
//! finish reason (`Timeouts::after_finish`) counts from the answer's completion and again from a
//! usage report, and keep-alives (SSE comments, blank lines, empty payloads and deltas, a repeated
//! finish reason) do not extend it. A gateway that pings every few seconds and never sends
//! `[DONE]` held a complete answer until the idle or total limit (600 s for reasoning models);
//! now it is handed out at the limit. Providers that send finish reasons early keep the idle limit
//! (tests/provider_early_finish.rs), pings included. Short configured limits, no long sleeps.

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
use arkagent::{AgentError, ToolCall};
use mock_server::{End, MockServer, Reply};
use std::time::{Duration, Instant};

/// The keep-alives gateways send: comments, blank lines, an empty payload, a named ping event, an
/// empty delta, the finish reason again.
const PINGS: [&str; 7] = [
    ": keep-alive\n\n",
    ": OPENROUTER PROCESSING\r\n\r\n",
    "\n\n",
    "data: \n\n",
    "event: ping\ndata: {}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}}]}\n\n",
    FINISH,
];

/// A reasoning model's limits (idle = total = 30 s), with this limit after the finish reason.
fn client(server: &MockServer, after_finish: Duration) -> OpenAiCompatibleClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle: Duration::from_secs(30),
        total: Duration::from_secs(30),
        after_finish,
    };
    let config = ClientConfig::custom(server.base_url(), "m", "sk-after-finish-pings-key")
        .with_retry(RetryPolicy::none())
        .with_timeouts(timeouts);
    OpenAiCompatibleClient::new(config).expect("client")
}

async fn timed(client: &OpenAiCompatibleClient) -> (Vec<ModelEvent>, Option<AgentError>, Duration) {
    let t0 = Instant::now();
    let (events, e) = tokio::time::timeout(Duration::from_secs(10), drain::drain(client, &request()))
        .await
        .expect("the stream never ended");
    (events, e, t0.elapsed())
}

fn pinging(parts: &[&str], delay: Duration, ping: &str, every: Duration) -> Reply {
    Reply::Pinging {
        parts: parts.iter().map(|p| p.as_bytes().to_vec()).collect(),
        delay,
        ping: ping.as_bytes().to_vec(),
        every,
    }
}

#[tokio::test]
async fn pings_forever_after_the_finish_reason_end_at_the_limit_with_the_complete_answer() {
    for ping in PINGS {
        // A ping every 100 ms, well within the 300 ms limit, forever.
        let server = MockServer::start([pinging(
            &[&format!("{CALL}{FINISH}")],
            Duration::ZERO,
            ping,
            Duration::from_millis(100),
        )])
        .await;
        let (events, e, took) = timed(&client(&server, Duration::from_millis(300))).await;
        assert!(e.is_none(), "{ping:?}: {e:?}");
        let r = answer(&events);
        assert_eq!(r.tool_calls, [ToolCall::new("c1", "f", "{}")], "{ping:?}");
        assert_eq!((r.content.as_deref(), r.finish_reason.as_deref()), (Some("ok"), Some("tool_calls")));
        assert!(took >= Duration::from_millis(290) && took < Duration::from_secs(3), "{ping:?}: {took:?}");
        // The client closed the connection the server was still pinging on.
        assert!(server.wait_aborted(1, Duration::from_secs(3)).await, "{ping:?}");
    }
}

#[tokio::test]
async fn pings_then_a_usage_chunk_within_the_limit_keep_the_usage() {
    // Finish at 100 ms, pings at 200 and 300 ms, the usage chunk at 400 ms (300 ms after the
    // finish, within the 500 ms limit), then pings forever and no `[DONE]`.
    let server = MockServer::start([pinging(
        &[&format!("{CALL}{FINISH}"), ": ping\n\n", ": ping\n\n", USAGE],
        Duration::from_millis(100),
        ": ping\n\n",
        Duration::from_millis(100),
    )])
    .await;
    let (events, e, took) = timed(&client(&server, Duration::from_millis(500))).await;
    assert!(e.is_none(), "{e:?}");
    let r = answer(&events);
    assert_eq!(r.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((4, 3)), "{events:?}");
    assert_eq!(r.tool_calls.len(), 1);
    // The limit counted again from the usage report (400 ms + 500 ms), not from the last ping.
    assert!(took >= Duration::from_millis(850) && took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test]
async fn keep_alives_that_outlast_the_limit_do_not_hold_the_answer_for_a_late_usage_chunk() {
    // Four pings 150 ms apart (each within the 400 ms limit, 600 ms together), then usage and
    // `[DONE]`: the answer is handed out at the limit, without the usage that came too late.
    let mut parts = vec![format!("{CALL}{FINISH}").into_bytes()];
    parts.extend((0..4).map(|_| b": keep-alive\n\n".to_vec()));
    parts.push(format!("{USAGE}{DONE}").into_bytes());
    let server =
        MockServer::start([Reply::Stream { parts, delay: Duration::from_millis(150), end: End::Stall }])
            .await;
    let (events, e, took) = timed(&client(&server, Duration::from_millis(400))).await;
    assert!(e.is_none(), "{e:?}");
    let r = answer(&events);
    assert_eq!((r.tool_calls.len(), r.usage), (1, None), "{events:?}");
    // At the limit (from the finish chunk at 150 ms), not at the usage chunk (900 ms): the usage
    // missing says so; the time only bounds it loosely (a loaded machine).
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn early_finish_reasons_with_pings_between_the_calls_keep_every_call() {
    // Data after a finish reason: this provider's finish reasons come early, so the pings and the
    // pause (900 ms, three times the limit after the finish reason) are waited through under the
    // idle limit, and the third call is kept.
    let call = |index: u32, id: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"id\":\"{id}\",\
             \"function\":{{\"name\":\"f\",\"arguments\":\"{{}}\"}}}}]}},\"finish_reason\":\"tool_calls\"}}]}}\n\n"
        )
    };
    let mut parts = vec![call(0, "a"), call(1, "b")];
    parts.extend((0..9).map(|_| ": keep-alive\n\n".to_string()));
    parts.push(call(2, "c"));
    parts.push(DONE.to_string());
    let server = MockServer::start([Reply::Stream {
        parts: parts.into_iter().map(String::into_bytes).collect(),
        delay: Duration::from_millis(100),
        end: End::Stall,
    }])
    .await;
    let (events, e, _) = timed(&client(&server, Duration::from_millis(300))).await;
    assert!(e.is_none(), "{e:?}");
    let ids: Vec<&str> = answer(&events).tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "{events:?}");
}

#[tokio::test]
async fn a_non_streamed_request_answered_with_a_pinging_stream_gets_its_answer_at_the_limit() {
    let server = MockServer::start([pinging(
        &[&format!("{CALL}{FINISH}")],
        Duration::ZERO,
        ": keep-alive\n\n",
        Duration::from_millis(100),
    )])
    .await;
    let t0 = Instant::now();
    let r = client(&server, Duration::from_millis(300)).complete(&request()).await.unwrap();
    assert_eq!((r.content.as_deref(), r.tool_calls.len()), (Some("ok"), 1));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn a_usage_chunk_that_trickles_in_after_the_finish_reason_is_kept() {
    // The finish reason, then the usage chunk (xAI's, 400 bytes with its details) in pieces of
    // 20 bytes 60 ms apart: each piece comes well within the 300 ms limit, the whole chunk takes
    // about 1.2 s. Its bytes are the usage report coming, not keep-alives: the limit counts from
    // the last of them (this is how tests/provider_recordings_served.rs lost xAI's usage when
    // it served the recording a byte at a time on a loaded machine).
    let usage = "data: {\"id\":\"de9d896d-e946-b3a7-bb14-75ab33326930\",\"object\":\"chat.completion.chunk\",\
        \"choices\":[],\"usage\":{\"prompt_tokens\":291,\"completion_tokens\":26,\"total_tokens\":513,\
        \"prompt_tokens_details\":{\"text_tokens\":291,\"audio_tokens\":0,\"image_tokens\":0,\"cached_tokens\":290},\
        \"completion_tokens_details\":{\"reasoning_tokens\":196,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\
        \"rejected_prediction_tokens\":0},\"num_sources_used\":0},\"system_fingerprint\":\"fp_2a885414fb\"}\n\n";
    let mut parts = vec![format!("{CALL}{FINISH}").into_bytes()];
    parts.extend(usage.as_bytes().chunks(20).map(<[u8]>::to_vec));
    parts.push(DONE.as_bytes().to_vec());
    let server =
        MockServer::start([Reply::Stream { parts, delay: Duration::from_millis(60), end: End::Complete }])
            .await;
    let (events, e, _) = timed(&client(&server, Duration::from_millis(300))).await;
    assert!(e.is_none(), "{e:?}");
    let r = answer(&events);
    assert_eq!(r.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((291, 26)), "{events:?}");
    assert_eq!(r.tool_calls.len(), 1);
}

#[tokio::test]
async fn keep_alives_split_across_reads_do_not_extend_the_limit() {
    // Each keep-alive comes in two reads 100 ms apart, for 3 s. Its first piece is bytes of an
    // event still coming, which held the limit open: each split keep-alive restarted the 300 ms
    // limit, so a gateway pinging this way held the answer until the pings stopped (or the idle
    // and total limits). Now the limit from before a split keep-alive is put back once it turns
    // out to be one.
    for (first, second) in [
        ("data: ", "\n\n"),
        ("event: ping\nda", "ta: {}\n\n"),
        ("data: {\"choices\":[{\"index\":0,\"de", "lta\":{\"content\":\"\"}}]}\n\n"),
        (": keep", "-alive\n\n"),
    ] {
        let mut parts = vec![format!("{CALL}{FINISH}").into_bytes()];
        for _ in 0..15 {
            parts.push(first.as_bytes().to_vec());
            parts.push(second.as_bytes().to_vec());
        }
        let server =
            MockServer::start([Reply::Stream { parts, delay: Duration::from_millis(100), end: End::Stall }])
                .await;
        let (events, e, took) = timed(&client(&server, Duration::from_millis(300))).await;
        assert!(e.is_none(), "{first:?}: {e:?}");
        let r = answer(&events);
        assert_eq!((r.content.as_deref(), r.tool_calls.len()), (Some("ok"), 1), "{first:?}");
        // At the limit counted from the finish chunk (100 ms + 300 ms), well before the pings
        // end (3.1 s); the bound is loose for a loaded machine.
        assert!(
            took >= Duration::from_millis(390) && took < Duration::from_millis(1800),
            "{first:?}: {took:?}"
        );
    }
}

#[tokio::test]
async fn a_usage_event_whose_name_line_comes_alone_is_waited_for() {
    // The finish reason, then `event: message` alone, then the usage data 350 ms later: the named
    // event is being read from its first line, so the limit counts from that line, not from the
    // finish reason (whose 600 ms ran out before the data came, losing the usage).
    let parts = vec![
        format!("{CALL}{FINISH}").into_bytes(),
        b"event: message\n".to_vec(),
        USAGE.as_bytes().to_vec(),
        b"data: [DONE]\n\n".to_vec(),
    ];
    let server =
        MockServer::start([Reply::Stream { parts, delay: Duration::from_millis(350), end: End::Complete }])
            .await;
    let (events, e, _) = timed(&client(&server, Duration::from_millis(600))).await;
    assert!(e.is_none(), "{e:?}");
    let r = answer(&events);
    assert_eq!(r.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((4, 3)), "{events:?}");
}
