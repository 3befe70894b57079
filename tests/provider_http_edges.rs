//! The client against what real providers, proxies and gateways send besides a clean answer: an
//! error body echoing the request's headers, a streamed request answered with something that is
//! not an event stream and a non-streamed request answered with one, a stream that stalls or
//! breaks off after its finish chunk, a `Retry-After` longer than a `Duration` holds, token counts
//! that are not whole numbers, a redirect. Each case ends in the answer or in a structured
//! provider error that says what came, and the API key appears in none of them.

#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{
    ChatModel, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy, Timeouts,
};
use arkagent::{codes, AgentError, ErrorLayer};
use mock_server::{End, MockServer, Reply};
use request::request;
use std::time::Duration;

/// A key of the length of the providers' own (48 bytes, like Moonshot's and Zhipu's).
const KEY: &str = "sk-SENTINEL-0123456789abcdefghijklmnopqrstuvwxyz";

fn client(server: &MockServer, idle: Duration) -> OpenAiCompatibleClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(2),
        idle,
        total: Duration::from_secs(10),
        ..Timeouts::default()
    };
    OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", KEY)
            .with_retry(RetryPolicy::none())
            .with_timeouts(timeouts),
    )
    .expect("client")
}

/// The events of a streamed answer before its first error, and the error.
async fn drain(client: &OpenAiCompatibleClient) -> (Vec<ModelEvent>, Option<AgentError>) {
    drain::drain(client, &request()).await
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

/// The most bytes of `key` in a row that `text` shows.
fn longest_piece_of(key: &str, text: &str) -> usize {
    (1..=key.len())
        .rev()
        .find(|&n| key.as_bytes().windows(n).any(|w| text.as_bytes().windows(n).any(|t| t == w)))
        .unwrap_or(0)
}

#[tokio::test]
async fn an_echoed_key_that_is_not_one_word_never_leaks_where_the_excerpt_cuts_it() {
    // The excerpt ends before a word it would cut, but a key is not always one word: iFlytek
    // Spark's `APIKey:APISecret` is two, and a key glued to a run of word characters longer than
    // a key could be is cut where the excerpt ends.
    let spark = "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6:ZmFrZVNlY3JldFBhcnRPZlRoZUtleTEyMzQ1Ng";
    let glued = "sk-test-SECRET1234567890abcdef";
    let spark_body = format!("{:>2008}{spark}{}", "Authorization: Bearer ", " trailing".repeat(400));
    let glued_body = format!(" {}{glued}{}", "x".repeat(2048 - 1 - 20), " trailing".repeat(400));
    for (key, body, shown) in
        [(spark, spark_body, "Bearer <redacted>... ("), (glued, glued_body, "x<redacted>... (")]
    {
        let server = MockServer::start([
            Reply::raw(400, body.clone()),
            Reply::sse(format!("data: {body}\n\n").as_bytes()),
        ])
        .await;
        let c = OpenAiCompatibleClient::new(
            ClientConfig::custom(server.base_url(), "m", key).with_retry(RetryPolicy::none()),
        )
        .unwrap();
        let e = c.complete(&request()).await.unwrap_err();
        assert_provider(&e, codes::PROVIDER_HTTP_STATUS);
        assert!(e.message.contains(shown), "{e}");
        let (_, streamed) = drain::drain(&c, &request()).await;
        let streamed = streamed.expect("a decode error");
        assert_provider(&streamed, codes::PROVIDER_DECODE);
        for e in [e, streamed] {
            let text = format!("{e} {e:?}");
            // At most three bytes in a row (`KEY_START_REDACTED`): here only bytes that happen to
            // be in the text around it.
            assert!(longest_piece_of(key, &text) < 4, "{} of {key} in {text}", longest_piece_of(key, &text));
        }
    }
}

#[tokio::test]
async fn an_error_body_that_breaks_off_inside_the_echoed_key_never_leaks_its_start() {
    // The same echo in a short error body whose connection closes in the middle of the key: the
    // bytes that came are all there is to show, so their end is a cut too, and it must not fall
    // inside the key either (the whole key is not there for the redaction to find).
    let head = "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: 4000\r\n\r\n";
    let body = format!("invalid credentials; Authorization: Bearer {}", &KEY[..30]);
    let server = MockServer::start([Reply::Verbatim(format!("{head}{body}").into_bytes())]).await;
    let c = client(&server, Duration::from_secs(2));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_AUTH);
    assert_no_key(&e);
    assert!(e.message.ends_with("raw body: invalid credentials; Authorization: Bearer ..."), "{e}");
}

#[tokio::test]
async fn a_character_cut_into_escaped_halves_across_chunks_never_fails_the_answer() {
    // A JS gateway slicing by UTF-16 index writes each half of an emoji as an escape of its own
    // ("\ud83d" in one chunk, "\ude00" in the next), which JSON.parse accepts. In the text the
    // halves are joined; in a call's arguments each reads as U+FFFD.
    let chunk = |delta: &str| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
    let body = [
        chunk(r#"{"content":"Here you go \ud83d"}"#),
        chunk(r#"{"content":"\ude00 done"}"#),
        chunk(r#"{"tool_calls":[{"index":0,"id":"c1","function":{"name":"t","arguments":"{\"q\":\"\ud83d"}}]}"#),
        chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"\ude00\"}"}}]}"#),
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".into(),
    ]
    .concat();
    let whole = r#"{"choices":[{"message":{"content":"cut \ud83d","tool_calls":[{"id":"c1","function":{"name":"t","arguments":"{\"q\":\"\ude00\"}"}}]},"finish_reason":"tool_calls"}]}"#;
    let server = MockServer::start([Reply::sse(body.as_bytes()), Reply::raw(200, whole)]).await;
    let c = client(&server, Duration::from_secs(2));
    let (events, e) = drain(&c).await;
    assert!(e.is_none(), "{e:?}");
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Here you go 😀 done");
    let Some(ModelEvent::Finished(answer)) = events.last() else { panic!("{events:?}") };
    assert_eq!(answer.content.as_deref(), Some("Here you go 😀 done"));
    assert_eq!(answer.tool_calls[0].arguments, "{\"q\":\"\u{FFFD}\u{FFFD}\"}");
    let answer = c.complete(&request()).await.unwrap();
    assert_eq!(answer.content.as_deref(), Some("cut \u{FFFD}"));
    assert_eq!(answer.tool_calls[0].arguments, "{\"q\":\"\u{FFFD}\"}");
}

/// A 200 with this content type and body, to a streamed request.
fn labelled(content_type: Option<&str>, body: &[u8]) -> Reply {
    Reply::StreamAs {
        content_type: content_type.map(str::to_string),
        parts: body.chunks(7).map(<[u8]>::to_vec).collect(),
        delay: Duration::ZERO,
        end: End::Complete,
    }
}

#[tokio::test]
async fn a_streamed_request_answered_with_a_body_that_is_no_event_stream_says_what_came() {
    // Gateways answer a streamed request with a 200 that is not an event stream under every
    // content type: their error JSON as text/plain or even text/event-stream, a captive portal's
    // HTML, a whole completion with no content type. What they said must reach the app, not "the
    // stream ended before the answer finished".
    let error = br#"{"error":{"message":"quota exhausted","type":"insufficient_quota","code":"1113"}}"#;
    let whole = br#"{"choices":[{"message":{"content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}"#;
    let server = MockServer::start([
        labelled(Some("text/plain"), error),
        labelled(Some("text/event-stream"), &[&b"\xEF\xBB\xBF\n"[..], error].concat()),
        labelled(
            Some("text/html; charset=utf-8"),
            b"<html>\n<body>Please log in to the Wi-Fi</body>\n</html>\n",
        ),
        labelled(None, whole),
        // An event stream keeps its own rules: one cut off after a comment is interrupted, and so
        // is an empty body.
        labelled(
            Some("text/event-stream"),
            b": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
        ),
        labelled(Some("text/event-stream"), b"\n\n"),
    ])
    .await;
    let c = client(&server, Duration::from_secs(2));
    for _ in 0..2 {
        let (events, e) = drain(&c).await;
        let e = e.expect("the error in the body");
        assert!(events.is_empty());
        // The provider's error, of the kind its code names.
        assert_provider(&e, codes::PROVIDER_QUOTA_EXHAUSTED);
        assert!(e.message.contains("[1113, insufficient_quota] quota exhausted"), "{e}");
    }
    let (_, e) = drain(&c).await;
    let e = e.expect("not an event stream");
    assert_provider(&e, codes::PROVIDER_DECODE);
    assert!(
        e.message.contains("not an event stream") && e.message.contains("Please log in to the Wi-Fi"),
        "{e}"
    );
    let (events, e) = drain(&c).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(events.first(), Some(&ModelEvent::TextDelta("whole".into())));
    match events.last() {
        Some(ModelEvent::Finished(r)) => {
            assert_eq!((r.content.as_deref(), r.usage.map(|u| u.total_tokens)), (Some("whole"), Some(3)))
        }
        other => panic!("{other:?}"),
    }
    for _ in 0..2 {
        let (_, e) = drain(&c).await;
        assert_provider(&e.expect("interrupted"), codes::PROVIDER_STREAM_INTERRUPTED);
    }
}

#[tokio::test]
async fn a_non_streamed_request_answered_with_an_event_stream_gets_its_answer() {
    // A gateway that streams whatever `stream` says: the answer is the stream's, its error the
    // stream's error, a cut stream an interrupted one.
    let calls = concat!(
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    );
    let server = MockServer::start([
        Reply::sse(calls.as_bytes()),
        Reply::sse(b"data: {\"error\":{\"message\":\"overloaded\",\"code\":\"503\"}}\n\n"),
        Reply::sse(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}}]}\n\n"),
    ])
    .await;
    let c = client(&server, Duration::from_secs(2));
    let r = c.complete(&request()).await.expect("the streamed answer");
    assert_eq!(r.reasoning_content.as_deref(), Some("think"));
    assert_eq!(r.tool_calls, vec![arkagent::ToolCall::new("c1", "f", r#"{"a":1}"#)]);
    assert_eq!((r.finish_reason.as_deref(), r.usage.map(|u| u.total_tokens)), (Some("tool_calls"), Some(6)));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_HTTP_STATUS);
    assert!(e.message.contains("overloaded"), "{e}");
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_STREAM_INTERRUPTED);
    assert!(server.requests().iter().all(|r| r.json()["stream"] != true));
}

#[tokio::test]
async fn a_stream_that_stalls_or_breaks_off_after_its_finish_reason_keeps_its_answer() {
    // The finish chunk came, then no usage chunk, no `[DONE]` and no end of the body: the server
    // stalls, resets the connection, or closes it in the middle of the next chunk. The answer is
    // complete and is not lost. The same faults before the finish reason still fail.
    let finished = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let open = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal\"}}]}\n\n";
    let reply = |body: &str, end: End| {
        let mut parts = vec![body.as_bytes().to_vec()];
        let mut delay = Duration::ZERO;
        match end {
            End::Truncate => parts.push(b"data: {\"choices\":[],\"usa".to_vec()),
            // A reset discards what the client has not read yet: the server waits before it (an
            // empty part writes nothing), so that what came before it is what is tested.
            End::Reset => {
                parts.push(Vec::new());
                delay = Duration::from_millis(100);
            }
            _ => {}
        }
        Reply::Stream { parts, delay, end }
    };
    let ends = [End::Stall, End::Reset, End::Truncate];
    let server = MockServer::start(
        ends.iter().map(|end| reply(finished, *end)).chain(ends.iter().map(|end| reply(open, *end))),
    )
    .await;
    let c = client(&server, Duration::from_millis(300));
    for end in ends {
        let (events, e) = drain(&c).await;
        assert!(e.is_none(), "{end:?}: {e:?}");
        match events.last() {
            Some(ModelEvent::Finished(r)) => {
                assert_eq!(r.tool_calls, vec![arkagent::ToolCall::new("c1", "f", "{}")], "{end:?}");
                assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
            }
            other => panic!("{end:?}: {other:?}"),
        }
    }
    for (end, code) in [
        (End::Stall, codes::PROVIDER_TIMEOUT),
        (End::Reset, codes::PROVIDER_STREAM_INTERRUPTED),
        (End::Truncate, codes::PROVIDER_STREAM_INTERRUPTED),
    ] {
        let (events, e) = drain(&c).await;
        assert_provider(&e.expect("an error"), code);
        assert_eq!(events, vec![ModelEvent::TextDelta("hal".into())], "{end:?}");
    }
    // The stalled connections are closed by the client.
    assert!(server.wait_aborted(2, Duration::from_secs(3)).await);
}

#[tokio::test]
async fn a_retry_after_too_long_for_a_duration_is_refused_not_a_panic() {
    // Delay seconds past what a Duration holds (as an integer past u64, as a float) and an HTTP
    // date with a year of eleven digits: the first two are longer than any limit (the error comes
    // back at once), the date is no date (the usual backoff, then the answer).
    let ok = Reply::json(
        200,
        &serde_json::json!({"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}),
    );
    let server = MockServer::start([
        Reply::error(429, "rate_limit_exceeded", "slow down")
            .with_header("Retry-After", "20000000000000000000"),
        Reply::error(503, "overloaded", "later").with_header("Retry-After", "1e300"),
        Reply::error(429, "rate_limit_exceeded", "slow down")
            .with_header("Retry-After", "Sun, 06 Nov 99999999999 08:49:37 GMT"),
        ok,
    ])
    .await;
    let retry = RetryPolicy {
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        jitter: 0.0,
        max_retry_after: Duration::from_secs(5),
    };
    let c = OpenAiCompatibleClient::new(ClientConfig::custom(server.base_url(), "m", KEY).with_retry(retry))
        .unwrap();
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_RATE_LIMITED);
    assert!(e.message.contains("exceeds the limit; not retried"), "{e}");
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_HTTP_STATUS);
    assert!(e.message.contains("exceeds the limit; not retried"), "{e}");
    assert_eq!(c.complete(&request()).await.unwrap().content.as_deref(), Some("ok"));
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn odd_token_counts_never_cost_the_answer() {
    // OpenAI's o3 reported `"completion_tokens": -35`; gateways send floats, strings, numbers
    // past u64. The answer comes through, streamed or not, and the counts read as they can.
    let usage = serde_json::json!({"prompt_tokens": 1151, "completion_tokens": -35, "total_tokens": 1116});
    let whole =
        serde_json::json!({"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}], "usage": usage});
    let stream = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12.7,\"completion_tokens\":\" 3 \",\"total_tokens\":{\"n\":1}}}\n\n",
        "data: [DONE]\n\n",
    );
    let huge = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}],",
        "\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":5}}\n\n",
    );
    let server = MockServer::start([
        Reply::json(200, &whole),
        Reply::sse(stream.as_bytes()),
        Reply::sse(huge.as_bytes()),
    ])
    .await;
    let c = client(&server, Duration::from_secs(2));
    let r = c.complete(&request()).await.expect("the answer");
    let u = r.usage.expect("usage");
    assert_eq!(
        (r.content.as_deref(), u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (Some("ok"), 1151, 0, 1116)
    );
    for (prompt, completion, total) in [(12, 3, 15), (u64::MAX, 5, u64::MAX)] {
        let (events, e) = drain(&c).await;
        assert!(e.is_none(), "{e:?}");
        match events.last() {
            Some(ModelEvent::Finished(r)) => {
                let u = r.usage.expect("usage");
                assert_eq!(
                    (u.prompt_tokens, u.completion_tokens, u.total_tokens),
                    (prompt, completion, total)
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_redirect_says_where_it_went_and_is_not_followed() {
    // A base URL on plain http behind an https redirect, a missing or extra trailing path: the
    // error says where the server sent the request; the client does not go there (it would send
    // the key elsewhere) and does not retry.
    let server = MockServer::start([
        Reply::raw(301, "").with_header("Location", "https://api.example.com/v1/chat/completions"),
        Reply::raw(307, "Temporary Redirect").with_header("Location", "/v1/chat/completions/"),
        Reply::raw(302, ""),
    ])
    .await;
    let c = client(&server, Duration::from_secs(2));
    let e = c.complete(&request()).await.unwrap_err();
    assert_provider(&e, codes::PROVIDER_HTTP_STATUS);
    assert!(
        e.message.starts_with(
            "HTTP 301: (empty body) (redirected to https://api.example.com/v1/chat/completions;"
        ),
        "{e}"
    );
    let (_, e) = drain(&c).await;
    let e = e.expect("an error");
    assert!(e.message.contains("raw body: Temporary Redirect (redirected to /v1/chat/completions/;"), "{e}");
    let e = c.complete(&request()).await.unwrap_err();
    assert_eq!(e.message, "HTTP 302: (empty body)");
    assert_eq!(server.requests().len(), 3);
}
