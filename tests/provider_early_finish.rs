//! A provider that sends finish reasons before the end of its answer (Gemini's intermediate
//! tool-call chunks through some gateways, a proxy that sends `finish_reason: "tool_calls"` after
//! every call): once answer data has followed a finish reason, a finish reason no longer says the
//! answer is complete, so a pause longer than `Timeouts::after_finish` before the next call is
//! waited for under the idle limit, not taken as the end of a complete answer (which silently
//! dropped the calls still to come).
//!
//! The server is a few lines here: the pauses between the parts differ.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy, Timeouts};
use request::request;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn call(index: u32, id: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"id\":\"{id}\",\
         \"function\":{{\"name\":\"f\",\"arguments\":\"{{}}\"}}}}]}},\"finish_reason\":\"tool_calls\"}}]}}\n\n"
    )
}

/// Serves one event stream: each part after its pause, then closes the connection.
async fn serve(parts: Vec<(Duration, String)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        // The request: headers and a JSON body that ends with `}` (enough for this test).
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        while !(req.windows(4).any(|w| w == b"\r\n\r\n") && req.ends_with(b"}")) {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            req.extend_from_slice(&buf[..n]);
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        s.write_all(head.as_bytes()).await.unwrap();
        for (pause, part) in parts {
            tokio::time::sleep(pause).await;
            if s.write_all(part.as_bytes()).await.is_err() {
                return;
            }
            s.flush().await.unwrap();
        }
    });
    format!("http://{addr}/v1")
}

fn client(base: &str, idle: Duration, after_finish: Duration) -> OpenAiCompatibleClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle,
        total: Duration::from_secs(20),
        after_finish,
    };
    let config = ClientConfig::custom(base, "m", "sk-early-finish-key")
        .with_retry(RetryPolicy::none())
        .with_timeouts(timeouts);
    OpenAiCompatibleClient::new(config).unwrap()
}

fn call_ids(events: &[ModelEvent]) -> Vec<String> {
    match events.last() {
        Some(ModelEvent::Finished(r)) => r.tool_calls.iter().map(|c| c.id.clone()).collect(),
        other => panic!("last event {other:?}"),
    }
}

#[tokio::test]
async fn a_call_after_a_long_pause_that_follows_early_finish_reasons_is_kept() {
    let after_finish = Duration::from_millis(300);
    let parts = vec![
        (Duration::ZERO, call(0, "a")),
        // Data after a finish reason: this provider's finish reasons come early.
        (Duration::from_millis(50), call(1, "b")),
        // Longer than the limit after the finish reason, well within the idle limit.
        (Duration::from_millis(900), call(2, "c")),
        (Duration::from_millis(20), "data: [DONE]\n\n".to_string()),
    ];
    let base = serve(parts).await;
    let c = client(&base, Duration::from_secs(10), after_finish);
    let (events, e) = drain::drain(&c, &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(call_ids(&events), ["a", "b", "c"], "{events:?}");
}

#[tokio::test]
async fn a_finish_reason_no_data_followed_still_ends_a_stall_at_the_short_limit() {
    // The same first call, then silence: the answer is kept after the short limit.
    let base = serve(vec![(Duration::ZERO, call(0, "a")), (Duration::from_secs(8), call(1, "late"))]).await;
    let c = client(&base, Duration::from_secs(10), Duration::from_millis(300));
    let t0 = Instant::now();
    let (events, e) = drain::drain(&c, &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(call_ids(&events), ["a"], "{events:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// Call `b` announced (id and name, no arguments yet, no finish reason after it).
fn announced(index: u32, id: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"id\":\"{id}\",\
         \"function\":{{\"name\":\"f\",\"arguments\":\"\"}}}}]}},\"finish_reason\":null}}]}}\n\n"
    )
}

#[tokio::test]
async fn a_stream_cut_after_data_that_followed_an_early_finish_reason_is_interrupted() {
    // Call `a` with its (early) finish reason, then call `b` begins and the stream ends: by the
    // body's end (no `[DONE]`), or by a stall past the idle limit. Neither says the answer is
    // complete: `b` was cut off after its name, and must not be handed out to run with `{}`.
    let idle = Duration::from_millis(400);
    for stall in [false, true] {
        let mut parts = vec![(Duration::ZERO, call(0, "a")), (Duration::from_millis(20), announced(1, "b"))];
        if stall {
            parts.push((Duration::from_secs(8), call(2, "late")));
        }
        let base = serve(parts).await;
        let c = client(&base, idle, Duration::from_millis(100));
        let (events, e) = drain::drain(&c, &request()).await;
        let e = e.unwrap_or_else(|| panic!("stall {stall}: no error: {events:?}"));
        let want = if stall {
            arkagent::codes::PROVIDER_TIMEOUT
        } else {
            arkagent::codes::PROVIDER_STREAM_INTERRUPTED
        };
        assert_eq!(e.code, want, "stall {stall}: {e}");
        assert!(!events.iter().any(|ev| matches!(ev, ModelEvent::Finished(_))), "stall {stall}: {events:?}");
    }
    // Every call followed by its finish reason, then the body ends without `[DONE]`: complete.
    let base = serve(vec![(Duration::ZERO, call(0, "a")), (Duration::from_millis(20), call(1, "b"))]).await;
    let c = client(&base, idle, Duration::from_millis(100));
    let (events, e) = drain::drain(&c, &request()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(call_ids(&events), ["a", "b"], "{events:?}");
}
