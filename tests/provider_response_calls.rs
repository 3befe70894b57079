//! The `tool_calls` of a whole (non-streamed) answer, read as the seed's `ResponseParser` reads
//! them (tool-calling-loop.md, 4): `tool_calls` that is not an array means no calls, and an entry
//! without a `function` is skipped; a `function` without a name or arguments is still a call (the
//! registry answers it), and the rest of the answer is kept. A `function` that is not an object is
//! no function. Arguments sent as an object are the text the provider wrote; of several choices,
//! choice 0 is the answer wherever it is listed (an odd `index` reads as none, which an explicit
//! index 0 wins over).

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::json::JsonLimits;
use arkagent::provider::convert::parse_response;
use arkagent::provider::{
    decode_sse_body, ChatModel, ChatRequest, ClientConfig, ModelEvent, OpenAiCompatibleClient, RetryPolicy,
};
use arkagent::schema::CompiledSchema;
use arkagent::{codes, ChatMessage, ToolCall};
use mock_server::{MockServer, Reply};
use serde_json::json;
use std::sync::Arc;

#[test]
fn an_entry_without_a_function_is_skipped_and_the_others_are_kept() {
    let body = br#"{"choices":[{"message":{"content":"checking","tool_calls":[
        {"id":"x","type":"function"},
        {"id":"a","type":"function","function":{"name":"query_order","arguments":"{\"order_id\":\"1\"}"}},
        "not a call",
        {"id":"n","function":null},
        {"id":"b","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let r = parse_response(body).unwrap();
    assert_eq!(r.content.as_deref(), Some("checking"));
    assert_eq!(
        r.tool_calls,
        [ToolCall::new("a", "query_order", r#"{"order_id":"1"}"#), ToolCall::new("b", "", "{}")]
    );
}

#[test]
fn tool_calls_that_are_not_an_array_are_no_calls() {
    for calls in [r#"{}"#, r#""none""#, "0", "true"] {
        let body = format!(
            r#"{{"choices":[{{"message":{{"content":"订单已发货","tool_calls":{calls}}},"finish_reason":"stop"}}]}}"#
        );
        let r = parse_response(body.as_bytes()).unwrap_or_else(|e| panic!("{calls}: {e}"));
        assert_eq!(r.content.as_deref(), Some("订单已发货"), "{calls}");
        assert!(r.tool_calls.is_empty(), "{calls}");
    }
}

#[test]
fn a_missing_id_is_made_up_after_the_skipped_entries_are_gone() {
    let body = br#"{"choices":[{"message":{"tool_calls":[
        {"id":"x"},
        {"function":{"name":"t","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let r = parse_response(body).unwrap();
    assert_eq!(r.tool_calls, [ToolCall::new("call_0", "t", "{}")]);
}

#[tokio::test]
async fn through_the_client_a_gateways_odd_tool_calls_do_not_break_the_answer() {
    let odd =
        json!({"choices":[{"message":{"content":"订单已发货","tool_calls":{}},"finish_reason":"stop"}]});
    let ghost = json!({"choices":[{"message":{"content":null,"tool_calls":[{"id":"g","type":"function"},
        {"id":"q","type":"function","function":{"name":"query_order","arguments":"{}"}}]},
        "finish_reason":"tool_calls"}]});
    let server = MockServer::start([Reply::json(200, &odd), Reply::json(200, &ghost)]).await;
    let client = OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "m", "sk-response-calls")
            .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() }),
    )
    .unwrap();
    let request = ChatRequest::new(Arc::from(vec![ChatMessage::user("q")]), Arc::from(Vec::new()));
    let first = client.complete(&request).await.unwrap();
    assert_eq!((first.content.as_deref(), first.tool_calls.len()), (Some("订单已发货"), 0));
    let second = client.complete(&request).await.unwrap();
    assert_eq!(second.tool_calls, [ToolCall::new("q", "query_order", "{}")]);
}

#[test]
fn an_entry_whose_function_is_not_an_object_is_skipped() {
    // The seed reads `function` as a record: a string, a number, a boolean or an array names no
    // tool, like a missing one; the answer's other calls and text are kept.
    for function in [r#""query_order""#, "1", "true", r#"["query_order","{}"]"#] {
        let body = format!(
            r#"{{"choices":[{{"message":{{"content":"checking","tool_calls":[
                {{"id":"x","type":"function","function":{function}}},
                {{"id":"a","type":"function","function":{{"name":"query_order","arguments":"{{}}"}}}}]}},"finish_reason":"tool_calls"}}]}}"#
        );
        let r = parse_response(body.as_bytes()).unwrap_or_else(|e| panic!("{function}: {e}"));
        assert_eq!(r.content.as_deref(), Some("checking"), "{function}");
        assert_eq!(r.tool_calls, [ToolCall::new("a", "query_order", "{}")], "{function}");
    }
}

#[test]
fn the_answer_is_choice_0_wherever_it_is_listed() {
    // A gateway that lists the choices of `n` > 1 out of order: choice 0 is the answer, as in a
    // stream, not choice 1's call.
    let body = br#"{"choices":[
        {"index":1,"message":{"content":null,"tool_calls":[{"id":"b","type":"function","function":{"name":"query_order","arguments":"{}"}}]},"finish_reason":"tool_calls"},
        {"index":0,"message":{"content":"answer of choice 0"},"finish_reason":"stop"}]}"#;
    let r = parse_response(body).unwrap();
    assert_eq!(
        (r.content.as_deref(), r.finish_reason.as_deref()),
        (Some("answer of choice 0"), Some("stop"))
    );
    assert!(r.tool_calls.is_empty());
    // A choice without an index counts as choice 0; without any choice 0, the first is taken.
    for (choices, want) in [
        (r#"{"index":2,"message":{"content":"2"}},{"message":{"content":"none"}}"#, "none"),
        (r#"{"index":2,"message":{"content":"2"}},{"index":1,"message":{"content":"1"}}"#, "2"),
    ] {
        let body = format!(r#"{{"choices":[{choices}]}}"#);
        assert_eq!(parse_response(body.as_bytes()).unwrap().content.as_deref(), Some(want), "{choices}");
    }
}

#[test]
fn an_index_that_is_not_an_unsigned_integer_is_none_not_a_decode_failure() {
    // A gateway's odd index: one that is not an unsigned integer reads as a missing one, a whole
    // number or its text as that integer; the answer is read either way. An explicit index 0 is
    // choice 0 wherever it is listed (the first listed of two); a choice whose index reads as
    // none is only without one.
    for (index, want) in [
        (r#""0""#, "odd"),
        (r#""1""#, "zero"),
        ("-1", "zero"),
        ("1.5", "zero"),
        ("null", "zero"),
        ("0.0", "odd"),
        ("1.0", "zero"),
    ] {
        let body = format!(
            r#"{{"choices":[{{"index":{index},"message":{{"content":"odd"}},"finish_reason":"stop"}},{{"index":0,"message":{{"content":"zero"}}}}]}}"#
        );
        let r = parse_response(body.as_bytes()).unwrap_or_else(|e| panic!("{index}: {e}"));
        assert_eq!(r.content.as_deref(), Some(want), "{index}");
        // Without an index 0 (choice 2 listed first), the odd one is choice 0.
        let body = format!(
            r#"{{"choices":[{{"index":2,"message":{{"content":"two"}}}},{{"index":{index},"message":{{"content":"odd"}}}}]}}"#
        );
        let want = if index == "1.0" || index == r#""1""# { "two" } else { "odd" };
        assert_eq!(parse_response(body.as_bytes()).unwrap().content.as_deref(), Some(want), "{index}");
    }
}

#[test]
fn arguments_sent_as_an_object_are_the_text_the_model_wrote() {
    // Not rebuilt through a JSON value: a repeated key stays for the registry to refuse, a big
    // number keeps its digits, the keys their order; only the whitespace outside strings goes.
    let object = r#"{"q":"20261010", "z":1,"big":123456789012345678901234567890,"q":"DROP"}"#;
    let written = r#"{"q":"20261010","z":1,"big":123456789012345678901234567890,"q":"DROP"}"#;
    let whole = format!(
        r#"{{"choices":[{{"index":0,"message":{{"tool_calls":[{{"id":"a","type":"function","function":{{"name":"query_order","arguments":{object}}}}}]}},"finish_reason":"tool_calls"}}]}}"#
    );
    let streamed = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"a\",\"function\":{{\"name\":\"query_order\",\"arguments\":{object}}}}}]}}}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\ndata: [DONE]\n\n"
    );
    let from_stream = match decode_sse_body(streamed.as_bytes()).unwrap().pop() {
        Some(ModelEvent::Finished(r)) => r.tool_calls,
        other => panic!("last event {other:?}"),
    };
    let schema = CompiledSchema::compile(&json!({"type": "object"})).unwrap();
    for calls in [parse_response(whole.as_bytes()).unwrap().tool_calls, from_stream] {
        assert_eq!(calls, [ToolCall::new("a", "query_order", written)]);
        // What the registry parses them with.
        let e = schema.parse_value_and_validate(&calls[0].arguments, &JsonLimits::default()).unwrap_err();
        assert_eq!(e.code, codes::JSON_INVALID, "{e}");
        assert!(e.message.contains(r#"the key "q" appears twice"#), "{e}");
    }
}
