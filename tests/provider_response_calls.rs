//! The `tool_calls` of a whole (non-streamed) answer, read as the seed's `ResponseParser` reads
//! them (tool-calling-loop.md, 4): `tool_calls` that is not an array means no calls, and an entry
//! without a `function` is skipped; a `function` without a name or arguments is still a call (the
//! registry answers it), and the rest of the answer is kept.

use arkagent::provider::convert::parse_response;
use arkagent::ToolCall;

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
