//! Which call a streamed fragment belongs to, where providers make it hard to tell: a repeated id
//! made unique still matches its call's later fragments (which repeat the provider's id); a
//! fragment with another id and no name continues the call at its index (Poolside); a fragment
//! that names a tool again after the call's arguments form a whole JSON value starts a new call
//! (Gemini's compatible endpoint, every parallel call at index 0 without an id), and so does one
//! naming another tool without arguments; a fragment with the call's own id is that call; a call
//! sent again whole (with its id, or without one; at its index or a new one; whichever earlier call;
//! its arguments the same JSON value written otherwise) is dropped, while the same call with an id
//! of its own is another call. The events say the same as the answer: each call announced once,
//! its arguments after its start.

#[path = "support/derived.rs"]
mod derived;

use arkagent::provider::{ModelEvent, ModelResponse};
use arkagent::ToolCall;

fn frag(index: Option<u32>, id: Option<&str>, name: Option<&str>, args: &str) -> String {
    let mut call = serde_json::json!({ "type": "function", "function": { "arguments": args } });
    if let Some(index) = index {
        call["index"] = index.into();
    }
    if let Some(id) = id {
        call["id"] = id.into();
    }
    if let Some(name) = name {
        call["function"]["name"] = name.into();
    }
    serde_json::json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [call] } }] }).to_string()
}

const FINISH: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;

/// The answer of a stream (the same through the derived parse), and per announced call: its
/// index, id, name and the arguments its deltas add up to, each delta after its start.
fn answer(payloads: &[String]) -> (ModelResponse, Vec<(usize, String, String, String)>) {
    let mut payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
    payloads.push(FINISH);
    let events = derived::events_both_ways(&payloads);
    let mut calls: Vec<(usize, String, String, String)> = Vec::new();
    for e in &events {
        match e {
            ModelEvent::ToolCallStarted { index, id, name } => {
                assert!(calls.iter().all(|c| c.0 != *index), "started twice: {events:?}");
                calls.push((*index, id.clone(), name.clone(), String::new()));
            }
            ModelEvent::ToolCallArgumentsDelta { index, delta } => {
                let call = calls.iter_mut().find(|c| c.0 == *index);
                call.unwrap_or_else(|| panic!("a delta before its start: {events:?}")).3.push_str(delta);
            }
            _ => {}
        }
    }
    match events.last() {
        Some(ModelEvent::Finished(r)) => (r.clone(), calls),
        other => panic!("{payloads:?}: last event {other:?}"),
    }
}

fn announced(calls: &[(usize, &str, &str, &str)]) -> Vec<(usize, String, String, String)> {
    calls.iter().map(|(i, id, n, a)| (*i, id.to_string(), n.to_string(), a.to_string())).collect()
}

#[test]
fn a_repeated_id_made_unique_still_matches_its_calls_later_fragments() {
    let a = Some("A");
    let (order, stock) = (Some("query_order"), Some("query_stock"));
    let cases = [
        // Arguments in pieces, the two calls interleaved.
        vec![
            frag(Some(0), a, order, r#"{"q":"#),
            frag(Some(1), a, stock, r#"{"q":"#),
            frag(Some(0), a, None, r#""order-1"}"#),
            frag(Some(1), a, None, r#""stock-2"}"#),
        ],
        // The second call's name first with empty arguments, its arguments later.
        vec![
            frag(Some(0), a, order, r#"{"q":"order-1"}"#),
            frag(Some(1), a, stock, ""),
            frag(Some(1), a, None, r#"{"q":"stock-2"}"#),
        ],
        // Both headers first, then the arguments.
        vec![
            frag(Some(0), a, order, ""),
            frag(Some(1), a, stock, ""),
            frag(Some(0), a, None, r#"{"q":"order-1"}"#),
            frag(Some(1), a, None, r#"{"q":"stock-2"}"#),
        ],
    ];
    for payloads in cases {
        let (r, calls) = answer(&payloads);
        assert_eq!(
            r.tool_calls,
            [
                ToolCall::new("A", "query_order", r#"{"q":"order-1"}"#),
                ToolCall::new("A_1", "query_stock", r#"{"q":"stock-2"}"#)
            ],
            "{payloads:?}"
        );
        assert_eq!(
            calls,
            announced(&[
                (0, "A", "query_order", r#"{"q":"order-1"}"#),
                (1, "A_1", "query_stock", r#"{"q":"stock-2"}"#)
            ])
        );
    }
    // Without an index, a fragment with the id goes to the first call of that id, as before.
    let (r, _) = answer(&[frag(None, a, order, r#"{"q":"#), frag(None, a, None, "1}")]);
    assert_eq!(r.tool_calls, [ToolCall::new("A", "query_order", r#"{"q":1}"#)]);
}

#[test]
fn another_id_without_a_name_continues_the_call_at_its_index() {
    // Poolside: one id beside the name, another on the call's later fragments.
    let (r, calls) = answer(&[
        frag(Some(0), Some("call_first"), Some("query_order"), ""),
        frag(Some(0), Some("call_second"), None, r#"{"q":"#),
        frag(Some(0), Some("call_second"), None, r#""20261010"}"#),
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("call_first", "query_order", r#"{"q":"20261010"}"#)]);
    assert_eq!(calls, announced(&[(0, "call_first", "query_order", r#"{"q":"20261010"}"#)]));

    // Another id with a name is another call (gateways that send every call as index 0), and an
    // id sent alone, its name to follow, too; a fragment with a known id goes to that call.
    let (r, _) = answer(&[
        frag(Some(0), Some("a"), Some("x"), r#"{"k":"#),
        frag(Some(0), Some("b"), Some("y"), r#"{"k":"#),
        frag(Some(0), Some("a"), None, "1}"),
        frag(Some(0), Some("b"), None, "2}"),
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c"}]}}]}"#.to_string(),
        frag(Some(0), None, Some("z"), "{}"),
    ]);
    assert_eq!(
        r.tool_calls,
        [
            ToolCall::new("a", "x", r#"{"k":1}"#),
            ToolCall::new("b", "y", r#"{"k":2}"#),
            ToolCall::new("c", "z", "{}")
        ]
    );
}

#[test]
fn a_name_again_after_whole_arguments_starts_another_call() {
    // Gemini's compatible endpoint: each parallel call at index 0, no id, whole name and arguments.
    let order = Some("query_order");
    let (r, calls) = answer(&[
        frag(Some(0), None, order, r#"{"q":"order-1"}"#),
        frag(Some(0), None, order, r#"{"q":"order-2"}"#),
        frag(Some(0), None, Some("query_stock"), r#" {"q":"stock-3"}"#),
    ]);
    assert_eq!(
        r.tool_calls,
        [
            ToolCall::new("call_0", "query_order", r#"{"q":"order-1"}"#),
            ToolCall::new("call_1", "query_order", r#"{"q":"order-2"}"#),
            ToolCall::new("call_2", "query_stock", r#" {"q":"stock-3"}"#),
        ]
    );
    assert_eq!(calls.len(), 3);
    // The same without an index.
    let (r, _) = answer(&[frag(None, None, order, r#"{"q":1}"#), frag(None, None, order, r#"{"q":2}"#)]);
    assert_eq!(
        r.tool_calls.iter().map(|c| c.arguments.as_str()).collect::<Vec<_>>(),
        [r#"{"q":1}"#, r#"{"q":2}"#]
    );
    // The id the call was opened with says the fragment is that call, whatever it brings: joined
    // arguments that are not JSON (the registry refuses them, nothing runs) rather than a second
    // call run from what may be the first one sent again (gateways re-send a streamed call whole).
    let (r, _) = answer(&[
        frag(Some(0), Some("g"), order, r#"{"q":1}"#),
        frag(Some(0), Some("g"), order, r#"{"q":2}"#),
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("g", "query_order", r#"{"q":1}{"q":2}"#)]);

    // A name repeated beside each piece of the arguments joins its call: while the arguments are
    // not whole, when the piece does not start a value, and when it brings no arguments.
    let (r, _) = answer(&[
        frag(Some(0), Some("c"), order, r#"{"a":{"b":1}"#),
        frag(Some(0), None, order, r#","c":[{"d":2}"#),
        frag(Some(0), None, order, r#"]}"#),
        frag(Some(0), None, order, ""),
        frag(Some(0), None, order, " "),
    ]);
    assert_eq!(r.tool_calls, [ToolCall::new("c", "query_order", r#"{"a":{"b":1},"c":[{"d":2}]} "#)]);
}

#[test]
fn a_call_sent_again_whole_is_dropped_and_runs_once() {
    // Gateways stream a call's arguments, then send the whole call again in one chunk (same
    // index, id, name and arguments: elizaOS#16973, opencode#17339, async-openai#329 with
    // Mistral); or send it whole twice; or send it again at the next index with its id. The
    // repeat is dropped, not a second call, not joined.
    let (a, order) = (Some("call_A"), Some("query_order"));
    let whole = r#"{"q":"pay bob 100"}"#;
    let cases = [
        vec![
            frag(Some(0), a, order, ""),
            frag(Some(0), None, None, r#"{"q":"#),
            frag(Some(0), None, None, r#""pay bob 100"}"#),
            frag(Some(0), a, order, whole),
        ],
        vec![frag(Some(0), a, order, whole), frag(Some(0), a, order, whole)],
        // Without the id, at the next index with the id, without an index: the same call whole
        // again. (With an id of its own it is another call: see the test below.)
        vec![frag(Some(0), a, order, whole), frag(Some(0), None, order, &format!(" {whole}\n"))],
        vec![
            frag(Some(0), a, order, ""),
            frag(Some(0), None, None, r#"{"q":"#),
            frag(Some(0), None, None, r#""pay bob 100"}"#),
            frag(Some(1), a, order, whole),
        ],
        vec![frag(Some(0), a, order, whole), frag(Some(1), a, order, whole)],
        vec![frag(None, a, order, whole), frag(None, a, order, whole)],
        vec![frag(None, a, order, whole), frag(None, None, order, whole)],
    ];
    for payloads in cases {
        let (r, calls) = answer(&payloads);
        assert_eq!(r.tool_calls, [ToolCall::new("call_A", "query_order", whole)], "{payloads:?}");
        assert_eq!(calls, announced(&[(0, "call_A", "query_order", whole)]), "{payloads:?}");
    }
    // Gemini without ids: a call sent twice whole is one call too (identical parallel calls
    // cannot be told from a repeat; running one is the safe side).
    let (r, _) = answer(&[frag(Some(0), None, order, whole), frag(Some(0), None, order, whole)]);
    assert_eq!(r.tool_calls, [ToolCall::new("call_0", "query_order", whole)]);
}

#[test]
fn a_whole_repeat_at_a_new_index_is_dropped_whichever_earlier_call_it_repeats() {
    // The provider's id twice (`A`, then `A` announced as `A_1` with other arguments), then the
    // second sent again whole with that id: it runs once, as the first does.
    let (a, order) = (Some("A"), Some("query_order"));
    let (x, y) = (r#"{"q":"x"}"#, r#"{"q":"y"}"#);
    let both = [ToolCall::new("A", "query_order", x), ToolCall::new("A_1", "query_order", y)];
    for third in [y, x] {
        let payloads =
            [frag(Some(0), a, order, x), frag(Some(1), a, order, y), frag(Some(2), a, order, third)];
        let (r, calls) = answer(&payloads);
        assert_eq!(r.tool_calls, both, "{payloads:?}");
        assert_eq!(
            calls,
            announced(&[(0, "A", "query_order", x), (1, "A_1", "query_order", y)]),
            "{payloads:?}"
        );
    }
    // Without an id (or with `""`), after a call with one or without one: dropped too.
    for (first, again) in [(a, None), (None, None), (a, Some(""))] {
        let payloads = [frag(Some(0), first, order, x), frag(Some(1), again, order, x)];
        let (r, calls) = answer(&payloads);
        let id = if first.is_some() { "A" } else { "call_0" };
        assert_eq!(r.tool_calls, [ToolCall::new(id, "query_order", x)], "{payloads:?}");
        assert_eq!(calls, announced(&[(0, id, "query_order", x)]), "{payloads:?}");
    }
    // After two calls, a repeat of the second without an id.
    let payloads =
        [frag(Some(0), a, order, x), frag(Some(1), Some("B"), order, y), frag(Some(2), None, order, y)];
    let (r, _) = answer(&payloads);
    assert_eq!(
        r.tool_calls,
        [ToolCall::new("A", "query_order", x), ToolCall::new("B", "query_order", y)],
        "{payloads:?}"
    );
}

#[test]
fn a_whole_repeat_written_otherwise_is_the_same_value_and_is_dropped() {
    // Whitespace or the order of the object's keys differ: the same arguments, one run. Another
    // value (a number written otherwise is one) is another call.
    let (a, order) = (Some("A"), Some("query_order"));
    for (first, again) in [
        (r#"{"q":"x"}"#, r#"{"q": "x"}"#),
        (r#"{"q":"x","r":1}"#, r#"{"r":1,"q":"x"}"#),
        (r#"{"q":"x","r":[1,{"s":2,"t":3}]}"#, "{ \"r\" : [1, {\"t\":3, \"s\":2}],\n \"q\":\"x\" }"),
    ] {
        for index in [Some(1), Some(0), None] {
            let payloads = [frag(Some(0), a, order, first), frag(index, a, order, again)];
            let (r, calls) = answer(&payloads);
            assert_eq!(r.tool_calls, [ToolCall::new("A", "query_order", first)], "{payloads:?}");
            assert_eq!(calls, announced(&[(0, "A", "query_order", first)]), "{payloads:?}");
        }
    }
    let payloads = [frag(Some(0), a, order, r#"{"n":1}"#), frag(Some(1), a, order, r#"{"n":1.0}"#)];
    let (r, _) = answer(&payloads);
    assert_eq!(r.tool_calls.len(), 2, "{payloads:?}");
}

#[test]
fn the_same_call_with_an_id_of_its_own_is_another_call_and_runs() {
    // Gateways that send every call at index 0: the model asked twice for the same thing, each
    // call with its own id. Both run, as in a whole answer (the second was dropped as a repeat).
    let (order, whole) = (Some("query_order"), r#"{"q":"pay bob 100"}"#);
    let both = [ToolCall::new("call_A", "query_order", whole), ToolCall::new("call_B", "query_order", whole)];
    for payloads in [
        vec![frag(Some(0), Some("call_A"), order, whole), frag(Some(0), Some("call_B"), order, whole)],
        vec![
            frag(Some(0), Some("call_A"), order, ""),
            frag(Some(0), None, None, whole),
            frag(Some(0), Some("call_B"), order, ""),
            frag(Some(0), None, None, whole),
        ],
        vec![frag(None, Some("call_A"), order, whole), frag(None, Some("call_B"), order, whole)],
    ] {
        let (r, calls) = answer(&payloads);
        assert_eq!(r.tool_calls, both, "{payloads:?}");
        assert_eq!(
            calls,
            announced(&[(0, "call_A", "query_order", whole), (1, "call_B", "query_order", whole)]),
            "{payloads:?}"
        );
    }
    // At a new index with the id of an earlier call but other arguments: a new call, as before.
    let (r, _) = answer(&[
        frag(Some(0), Some("call_A"), order, whole),
        frag(Some(1), Some("call_A"), order, r#"{"q":"other"}"#),
    ]);
    assert_eq!(
        r.tool_calls,
        [
            ToolCall::new("call_A", "query_order", whole),
            ToolCall::new("call_A_1", "query_order", r#"{"q":"other"}"#)
        ]
    );
}

#[test]
fn another_name_without_arguments_after_whole_arguments_starts_another_call() {
    // Gemini's parallel calls at index 0 without ids, the second one taking no arguments (or its
    // arguments in a later fragment): not one call named `query_orderother`.
    let (r, calls) = answer(&[
        frag(Some(0), None, Some("query_order"), r#"{"q":"1"}"#),
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"other"}}]}}]}"#
            .to_string(),
    ]);
    assert_eq!(
        r.tool_calls,
        [ToolCall::new("call_0", "query_order", r#"{"q":"1"}"#), ToolCall::new("call_1", "other", "{}")]
    );
    assert_eq!(calls.len(), 2);
    let (r, _) = answer(&[
        frag(None, None, Some("query_order"), r#"{"q":"1"}"#),
        frag(None, None, Some("other"), ""),
        frag(None, None, None, r#"{"k":2}"#),
    ]);
    assert_eq!(
        r.tool_calls,
        [
            ToolCall::new("call_0", "query_order", r#"{"q":"1"}"#),
            ToolCall::new("call_1", "other", r#"{"k":2}"#)
        ]
    );
}
