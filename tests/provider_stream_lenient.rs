//! Streamed `tool_calls` of odd shapes are read as leniently as a whole answer's (the seed's
//! `ResponseParser`, tool-calling-loop.md 4): `tool_calls` that is `null` or not an array is no
//! call fragment in that delta, an entry that is not an object is left out, a `function` that is
//! not an object is none, and a call none of whose fragments had a `function` is left out at the
//! end. The rest of the answer (text, the other calls, the finish reason, usage) is kept, on the
//! fast path and the derived parse alike, and through the client. A call's name streamed in
//! pieces is joined; a name repeated whole in each fragment is not doubled. The call's
//! `ToolCallStarted` names it whole too (it showed only the first piece), and comes before its
//! arguments.

#[path = "support/derived.rs"]
mod derived;
#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::provider::convert::parse_response;
use arkagent::provider::{
    ChatRequest, ClientConfig, ModelEvent, ModelResponse, OpenAiCompatibleClient, RetryPolicy,
};
use arkagent::{ChatMessage, ToolCall};
use derived::sse;
use mock_server::{MockServer, Reply};
use std::sync::Arc;

/// The answer of a stream, the same through the derived parse alone (see
/// `derived::events_both_ways`).
fn answer(payloads: &[&str]) -> ModelResponse {
    match derived::events_both_ways(payloads).last() {
        Some(ModelEvent::Finished(r)) => r.clone(),
        other => panic!("{payloads:?}: last event {other:?}"),
    }
}

fn delta(tool_calls: &str) -> String {
    format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"text","tool_calls":{tool_calls}}}}}]}}"#)
}

const FINISH: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;

#[test]
fn tool_calls_that_are_not_an_array_are_no_fragment() {
    for calls in
        ["null", "{}", r#"{"index":0,"id":"a","function":{"name":"t"}}"#, r#""none""#, "0", "true", "[]"]
    {
        let r = answer(&[&delta(calls), FINISH]);
        assert_eq!(r.content.as_deref(), Some("text"), "{calls}");
        assert!(r.tool_calls.is_empty(), "{calls}: {:?}", r.tool_calls);
        assert_eq!((r.finish_reason.as_deref(), r.usage.map(|u| u.total_tokens)), (Some("stop"), Some(5)));
    }
}

#[test]
fn entries_that_are_not_objects_are_left_out_and_the_others_merged() {
    // Beside and between the fragments of a call streamed by index, and of calls that have none
    // (merged by id, then onto the call before, as for providers that omit the index).
    let r = answer(&[
        &delta(r#"[null,{"index":0,"id":"a","function":{"name":"get","arguments":"{\"k\":"}},"x",7]"#),
        &delta(r#"[[0,"b",{"name":"put"}],{"index":0,"function":{"arguments":"1}"}},false]"#),
        FINISH,
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("a", "get", r#"{"k":1}"#)]);
    let r = answer(&[
        &delta(
            r#"["x",{"id":"m1","function":{"name":"a","arguments":"{}"}},null,{"id":"m2","function":{"name":"b"}}]"#,
        ),
        &delta(r#"[{"function":{"arguments":"{\"z\":2}"}},[]]"#),
        FINISH,
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("m1", "a", "{}"), ToolCall::new("m2", "b", r#"{"z":2}"#)]);
}

#[test]
fn a_function_that_is_not_an_object_adds_nothing_to_its_call() {
    for function in ["null", r#""get""#, "1", "true", r#"["get","{}"]"#] {
        let r = answer(&[
            &delta(r#"[{"index":0,"id":"a","function":{"name":"get","arguments":"{\"k\""}}]"#),
            &delta(&format!(r#"[{{"index":0,"function":{function}}}]"#)),
            &delta(r#"[{"index":0,"function":{"arguments":":1}"}}]"#),
            FINISH,
        ]);
        assert_eq!(r.tool_calls, [ToolCall::new("a", "get", r#"{"k":1}"#)], "{function}");
    }
}

#[test]
fn a_call_that_never_had_a_function_is_left_out() {
    // Only an id (and a function that is not an object): nothing to run, as in a whole answer.
    let r = answer(&[&delta(r#"[{"index":0,"id":"x","type":"function"}]"#), FINISH]);
    assert!(r.tool_calls.is_empty(), "{:?}", r.tool_calls);
    let r = answer(&[
        &delta(r#"[{"index":0,"id":"x","function":"oops"}]"#),
        &delta(r#"[{"index":1,"id":"y","function":{"name":"t","arguments":"{}"}}]"#),
        FINISH,
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("y", "t", "{}")]);
    // Its id was no other call's to take: the kept call with the same id keeps it.
    let r = answer(&[
        &delta(r#"[{"index":0,"id":"dup"}]"#),
        &delta(r#"[{"index":1,"id":"dup","function":{"name":"t","arguments":"{}"}}]"#),
        FINISH,
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("dup", "t", "{}")]);
    // The id on a first fragment without a function, the function on later ones: one call.
    let r = answer(&[
        &delta(r#"[{"index":0,"id":"late","type":"function"}]"#),
        &delta(r#"[{"index":0,"function":{"name":"t"}}]"#),
        &delta(r#"[{"index":0,"function":{"arguments":"{\"a\":1}"}}]"#),
        FINISH,
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("late", "t", r#"{"a":1}"#)]);
    // A `function` object without a name is still a call (the registry answers tool_not_found).
    let r = answer(&[&delta(r#"[{"index":0,"id":"n","function":{}}]"#), FINISH]);
    assert_eq!(r.tool_calls, [ToolCall::new("n", "", "{}")]);
}

#[test]
fn a_stream_and_a_whole_answer_with_the_same_entries_give_the_same_calls() {
    let entries = [
        r#"[{"id":"a","function":{"name":"t","arguments":"{\"q\":1}"}},{"id":"b"},"x",{"id":"c","function":"s"},{"id":"d","function":{"name":"u"}},{"id":"e","function":null},[1]]"#,
        r#"[{"id":"only","type":"function"}]"#,
        r#"[{"id":"f","function":{}},{"id":"g","function":{"arguments":{"k":[1,2]}}}]"#,
        r#"{"id":"a","function":{"name":"t"}}"#,
        r#""[]""#,
    ];
    for calls in entries {
        let whole = format!(
            r#"{{"choices":[{{"message":{{"content":"text","tool_calls":{calls}}},"finish_reason":"stop"}}]}}"#
        );
        let whole = parse_response(whole.as_bytes()).unwrap_or_else(|e| panic!("{calls}: {e}"));
        let streamed = answer(&[&delta(calls), FINISH]);
        assert_eq!(streamed.tool_calls, whole.tool_calls, "{calls}");
        assert_eq!(streamed.content, whole.content, "{calls}");
    }
}

#[test]
fn a_name_streamed_in_pieces_is_joined_and_one_repeated_whole_is_not_doubled() {
    let piece = |name: &str, args: &str| {
        delta(&format!(r#"[{{"index":0,"function":{{"name":"{name}","arguments":"{args}"}}}}]"#))
    };
    let first =
        delta(r#"[{"index":0,"id":"c1","type":"function","function":{"name":"get_","arguments":""}}]"#);
    let cases = [
        // In pieces: joined.
        (vec![first.clone(), piece("weather", "{}"), FINISH.to_string()], "get_weather"),
        (vec![first.clone(), piece("wea", ""), piece("ther", "{}"), FINISH.to_string()], "get_weather"),
        // Repeated whole in each fragment (the name so far): kept once.
        (vec![first.clone(), piece("get_", "{}"), FINISH.to_string()], "get_"),
        (vec![first, piece("weather", ""), piece("get_weather", "{}"), FINISH.to_string()], "get_weather"),
    ];
    for (payloads, want) in cases {
        let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
        assert_eq!(answer(&payloads).tool_calls, [ToolCall::new("c1", want, "{}")], "{payloads:?}");
    }
}

/// Per call (by index): the name its `ToolCallStarted` gave, and the arguments its deltas add up
/// to, each delta checked to come after the start.
fn announced(events: &[ModelEvent]) -> Vec<(usize, String, String)> {
    let mut calls: Vec<(usize, String, String)> = Vec::new();
    for e in events {
        match e {
            ModelEvent::ToolCallStarted { index, name, .. } => {
                assert!(calls.iter().all(|c| c.0 != *index), "started twice: {events:?}");
                calls.push((*index, name.clone(), String::new()));
            }
            ModelEvent::ToolCallArgumentsDelta { index, delta } => {
                let call = calls.iter_mut().find(|c| c.0 == *index);
                call.unwrap_or_else(|| panic!("a delta before its start: {events:?}")).2.push_str(delta);
            }
            _ => {}
        }
    }
    calls
}

#[test]
fn a_call_whose_name_is_streamed_in_pieces_is_announced_with_its_whole_name() {
    // As a gateway streams it: the first fragment has the id, a first piece of the name and empty
    // arguments; the rest of the name comes with the arguments, or alone before them, or the call
    // has no arguments and the next call (or the end) follows.
    let first = |i: u32, id: &str, name: &str| {
        delta(&format!(
            r#"[{{"index":{i},"id":"{id}","type":"function","function":{{"name":"{name}","arguments":""}}}}]"#
        ))
    };
    let piece = |i: u32, name: &str, args: &str| {
        delta(&format!(r#"[{{"index":{i},"function":{{"name":"{name}","arguments":"{args}"}}}}]"#))
    };
    let city = r#"{\"city\":\"Paris\"}"#;
    let cases = [
        vec![first(0, "c1", "get_"), piece(0, "weather", city), FINISH.to_string()],
        vec![first(0, "c1", "get_"), piece(0, "wea", ""), piece(0, "ther", city), FINISH.to_string()],
        vec![first(0, "c1", "get_"), piece(0, "weather", ""), FINISH.to_string()],
        vec![
            first(0, "c1", "get_"),
            piece(0, "weather", ""),
            first(1, "c2", "query"),
            piece(1, "_order", ""),
            piece(1, "", r#"{\"order_id\":"#),
            piece(1, "", r#"\"1\"}"#),
            FINISH.to_string(),
        ],
    ];
    for payloads in cases {
        let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let events = derived::events_both_ways(&payloads);
        let calls = match events.last() {
            Some(ModelEvent::Finished(r)) => r.tool_calls.clone(),
            other => panic!("{payloads:?}: last event {other:?}"),
        };
        assert_eq!(calls[0].name, "get_weather", "{payloads:?}");
        let raw =
            |i: usize| if calls[i].arguments == "{}" { String::new() } else { calls[i].arguments.clone() };
        let want: Vec<(usize, String, String)> =
            calls.iter().enumerate().map(|(i, c)| (i, c.name.clone(), raw(i))).collect();
        assert_eq!(announced(&events), want, "{payloads:?}");
    }
}

#[tokio::test]
async fn through_the_client_an_odd_delta_costs_nothing_of_the_answer() {
    let body = sse(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"checking","tool_calls":{}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[null,{"index":0,"id":"c1","function":{"name":"query_order","arguments":"{\"order_id\":\"1\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":"x"}]},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    let server = MockServer::start([Reply::sse(&body)]).await;
    let client = OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", "sk-lenient-key").with_retry(RetryPolicy::none()),
    )
    .unwrap();
    let request = ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()));
    let (events, e) = drain::drain(&client, &request).await;
    assert!(e.is_none(), "{e:?}");
    let Some(ModelEvent::Finished(r)) = events.last() else { panic!("{events:?}") };
    assert_eq!(r.content.as_deref(), Some("checking"));
    assert_eq!(r.tool_calls, [ToolCall::new("c1", "query_order", r#"{"order_id":"1"}"#)]);
}

#[test]
fn a_choice_index_that_is_not_an_unsigned_integer_is_none_not_a_decode_failure() {
    // As in a whole answer: a gateway's odd choice `index` reads as a missing one (choice 0),
    // a whole number as that integer; the stream is read, not failed with `provider_decode`.
    for index in [r#""0""#, "-1", "1.5", "null", "0.0", "{}"] {
        let text = format!(r#"{{"choices":[{{"index":{index},"delta":{{"content":"text"}}}}]}}"#);
        let r = answer(&[&text, FINISH]);
        assert_eq!(r.content.as_deref(), Some("text"), "{index}");
    }
    // Beside an explicit choice 0, a choice whose index reads as none, or as another integer
    // (`1.0`, `"1"`), is another choice.
    for index in ["-1", "1.5", "1.0", r#""1""#] {
        let text = format!(
            r#"{{"choices":[{{"index":{index},"delta":{{"content":"odd"}}}},{{"index":0,"delta":{{"content":"zero"}}}}]}}"#
        );
        let r = answer(&[&text, FINISH]);
        assert_eq!(r.content.as_deref(), Some("zero"), "{index}");
    }
    // n > 1 with each choice in chunks of its own, the second's index written as text: its text
    // and its call are not choice 0's (before, `"1"` read as none, and none is choice 0 in a
    // chunk without an explicit 0, so the other choice's call ran).
    let zero = r#"{"choices":[{"index":0,"delta":{"content":"zero","tool_calls":[{"index":0,"id":"Z","function":{"name":"t","arguments":"{}"}}]}}]}"#;
    let other = r#"{"choices":[{"index":"1","delta":{"content":"one","tool_calls":[{"index":0,"id":"O","function":{"name":"t","arguments":"{}"}}]}}]}"#;
    for chunks in [[zero, other], [other, zero]] {
        let r = answer(&[chunks[0], chunks[1], FINISH]);
        assert_eq!(r.content.as_deref(), Some("zero"));
        assert_eq!(r.tool_calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["Z"]);
    }
}
