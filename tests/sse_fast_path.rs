//! The fast path of `StreamAssembler::push_payload` (payloads read in place, src/provider/chunk_read.rs)
//! against the derived parse it stands in for: for every recording and for generated payloads
//! (any key order, nulls, unknown fields, escapes, repeated keys, structs written as arrays, errors
//! in the stream, bad types, bad JSON, several choices and fragments, content as parts), the same
//! events, the same errors (code and message), the same response, and nothing added by a payload
//! that fails.
//!
//! The reference is `push_payload_derived`: the same assembler with every payload parsed into
//! `ChatCompletionChunk` (the parse `push_payload` used before the fast path, and still uses for
//! whatever the fast path does not read).

#[path = "support/recordings.rs"]
mod recordings;

use arkagent::provider::{SseParser, StreamAssembler};
use proptest::prelude::*;

/// Feeds the payloads to both, one by one (going on after errors), and compares everything.
fn assert_same(payloads: &[(Option<String>, String)]) {
    let (mut fast, mut slow) = (StreamAssembler::new(), StreamAssembler::new());
    for (event, data) in payloads {
        let (mut out_fast, mut out_slow) = (Vec::new(), Vec::new());
        let got = fast.push_payload(event.as_deref(), data, &mut out_fast);
        let want = slow.push_payload_derived(event.as_deref(), data, &mut out_slow);
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{data}"),
            (Err(g), Err(w)) => {
                assert_eq!((&g.code, &g.message), (&w.code, &w.message), "{data}");
                assert!(out_fast.is_empty(), "a failing payload added events: {data}");
            }
            _ => panic!("{event:?} {data}: fast path {got:?}, derived parse {want:?}"),
        }
        assert_eq!(out_fast, out_slow, "{data}");
        assert_eq!(fast.saw_finish_reason(), slow.saw_finish_reason(), "{data}");
        assert_eq!(fast.answer_looks_complete(), slow.answer_looks_complete(), "{data}");
    }
    let (mut end_fast, mut end_slow) = (Vec::new(), Vec::new());
    assert_eq!(fast.finish(&mut end_fast), slow.finish(&mut end_slow));
    assert_eq!(end_fast, end_slow);
}

#[test]
fn every_recording_assembles_the_same() {
    let dir = recordings::fixture_dir();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !(name.ends_with(".sse") || name.ends_with(".jsonl")) {
            continue;
        }
        let mut payloads = Vec::new();
        let mut parser = SseParser::new();
        let mut collect = |ev: arkagent::provider::SseEvent<'_>| {
            payloads.push((ev.event.map(str::to_string), ev.data.to_string()));
            Ok(())
        };
        parser.feed(&recordings::sse_body(&name), &mut collect).unwrap();
        parser.finish(&mut collect).unwrap();
        assert!(payloads.len() > 1, "{name}");
        assert_same(&payloads);
        files += 1;
    }
    assert!(files >= 20, "{files} recordings");
}

#[test]
fn hand_picked_payloads_assemble_the_same() {
    let payloads = [
        // `index` after `function`, the id on a later fragment, unknown fields, nulls.
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"get","arguments":"{\"a\""},"type":"function","index":0}]},"logprobs":null}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"},"id":"call_9","index":0}]},"index":0}],"usage":null,"error":null}"#,
        r#"{"choices":[{"delta":{"tool_calls":null,"content":null,"reasoning_content":"think"},"finish_reason":null}]}"#,
        // Content as parts (Mistral's reasoning models), beside `reasoning_content`; a bad part.
        r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":" more"}]},{"type":"text","text":"A"},{"type":"text","text":"B"}],"reasoning_content":"think"}}]}"#,
        r#"{"choices":[{"delta":{"content":[{"type":"text","text":"lost"},7]}}]}"#,
        r#"{"choices":null,"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        // An error mid-stream, before and after the choices: nothing of it is added.
        r#"{"choices":[{"delta":{"content":"lost"}}],"error":{"message":"overloaded","code":529}}"#,
        r#"{"error":"boom","choices":[{"delta":{"content":"lost"}}]}"#,
        // A repeated field, a struct as an array (read by position), a bad type, bad JSON.
        r#"{"choices":[{"delta":{"content":"a"},"delta":{"content":"b"}}]}"#,
        r#"{"choices":[[0,{"content":"positional"},null]]}"#,
        r#"{"choices":[{"index":"0"}]}"#,
        r#"{"choices":[{"delta":{"content":"cut"#,
        // Several calls in one delta, two choices 0, other choices.
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"m1","function":{"name":"a","arguments":"{}"}},{"id":"m2","function":{"name":"b","arguments":{"x":1}}},{"id":"m3","function":{"name":"c"}}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}},{"index":0,"delta":{"content":"y"}},{"index":1,"delta":{"content":"z"}}]}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"other"},"finish_reason":"length"},{"index":0,"finish_reason":"tool_calls"}]}"#,
        "  [DONE]  ",
    ];
    assert_same(&payloads.iter().map(|p| (None, p.to_string())).collect::<Vec<_>>());
    let named = [(Some("error"), r#"{"choices":[]}"#), (Some("ping"), "{oops"), (Some("message"), "{oops")];
    assert_same(&named.iter().map(|(e, p)| (e.map(str::to_string), p.to_string())).collect::<Vec<_>>());
}

/// A JSON object from its members (key and value text), in the order given.
fn object(members: Vec<(String, String)>) -> String {
    let inner: Vec<String> = members.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// A value for a member: mostly one of `good`, sometimes `null`, sometimes something odd.
fn value(good: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![
        16 => good,
        2 => Just("null".to_string()),
        1 => prop::sample::select(vec!["1", "-1", "\"s\"", "[]", "{}", "true", "1e999"]).prop_map(str::to_string),
    ]
    .boxed()
}

/// Members: each present with its probability, in any order, sometimes one repeated, sometimes
/// an unknown one.
fn members(fields: Vec<(&'static str, f64, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
    let parts: Vec<BoxedStrategy<Option<(String, String)>>> = fields
        .into_iter()
        .map(|(k, p, v)| prop::option::weighted(p, value(v).prop_map(move |v| (k.to_string(), v))).boxed())
        .collect();
    (parts, prop::bool::weighted(0.15), any::<bool>())
        .prop_flat_map(|(parts, repeat, unknown)| {
            let mut m: Vec<(String, String)> = parts.into_iter().flatten().collect();
            if repeat && !m.is_empty() {
                m.push(m[0].clone());
            }
            if unknown {
                m.push(("x_extra".to_string(), r#"{"a":[1,"\"",null]}"#.to_string()));
            }
            Just(m).prop_shuffle()
        })
        .prop_map(object)
        .boxed()
}

fn text() -> BoxedStrategy<String> {
    prop::sample::select(vec![r#""""#, r#""a""#, r#""{\"k\":""#, r#""1}""#, r#""\u00e9\n""#, r#""x\\y""#])
        .prop_map(str::to_string)
        .boxed()
}

/// A delta's `content`: mostly a string, sometimes an array of parts (Mistral's thinking and text
/// parts, parts of other types, odd ones).
fn content() -> BoxedStrategy<String> {
    let part = prop_oneof![
        3 => text().prop_map(|t| format!(r#"{{"type":"text","text":{t}}}"#)),
        2 => text().prop_map(|t| format!(r#"{{"type":"thinking","thinking":[{{"type":"text","text":{t}}}],"closed":true}}"#)),
        1 => text().prop_map(|t| format!(r#"{{"thinking":{t},"type":"thinking"}}"#)),
        1 => Just(r#"{"type":"reference","reference_ids":[1]}"#.to_string()),
        1 => prop::sample::select(vec![r#""x""#, "null", r#"{"type":"text","text":1}"#, r#"{"type":"thinking","thinking":{}}"#])
            .prop_map(str::to_string),
    ];
    prop_oneof![4 => text(), 1 => array(part.boxed(), 3)].boxed()
}

fn array(item: BoxedStrategy<String>, max: usize) -> BoxedStrategy<String> {
    prop::collection::vec(item, 0..=max).prop_map(|v| format!("[{}]", v.join(","))).boxed()
}

fn payload() -> BoxedStrategy<String> {
    let index = || prop::sample::select(vec!["0", "1", "2"]).prop_map(str::to_string).boxed();
    let function = members(vec![
        (
            "name",
            0.7,
            prop::sample::select(vec![r#""""#, r#""get""#, r#""put""#]).prop_map(str::to_string).boxed(),
        ),
        ("arguments", 0.8, prop_oneof![text(), Just(r#"{"k":[1,"v"]}"#.to_string())].boxed()),
    ]);
    let fragment = members(vec![
        ("index", 0.8, index()),
        (
            "id",
            0.5,
            prop::sample::select(vec![r#""""#, r#""c1""#, r#""c2""#, r#""c\u0031""#])
                .prop_map(str::to_string)
                .boxed(),
        ),
        // Mostly an object; sometimes a shape read leniently as no function (the fast path gives up).
        (
            "function",
            0.9,
            prop_oneof![
                8 => function,
                1 => prop::sample::select(vec!["null", r#""f""#, "[]", "0"]).prop_map(str::to_string),
            ]
            .boxed(),
        ),
    ]);
    let usage = members(vec![("prompt_tokens", 0.8, index()), ("completion_tokens", 0.8, index())]);
    let delta = members(vec![
        ("content", 0.4, content()),
        ("reasoning_content", 0.3, text()),
        // Mostly an array of fragments; sometimes other entries or another shape, read leniently.
        (
            "tool_calls",
            0.7,
            prop_oneof![
                8 => array(
                    prop_oneof![
                        8 => fragment,
                        1 => prop::sample::select(vec!["null", r#""x""#, "[]"]).prop_map(str::to_string),
                    ]
                    .boxed(),
                    3
                ),
                1 => prop::sample::select(vec!["null", "{}", r#""calls""#]).prop_map(str::to_string),
            ]
            .boxed(),
        ),
    ]);
    let choice = members(vec![
        ("index", 0.6, index()),
        ("delta", 0.9, delta),
        (
            "finish_reason",
            0.3,
            prop::sample::select(vec![r#""""#, r#""stop""#]).prop_map(str::to_string).boxed(),
        ),
        ("usage", 0.1, usage.clone()),
    ]);
    let chunk = members(vec![
        ("choices", 0.9, array(choice, 3)),
        ("usage", 0.2, usage),
        (
            "error",
            0.1,
            prop::sample::select(vec![r#""boom""#, r#"{"message":"m","code":1}"#])
                .prop_map(str::to_string)
                .boxed(),
        ),
    ]);
    prop_oneof![
        12 => chunk,
        1 => Just("[DONE]".to_string()),
        1 => Just("[[],null,null]".to_string()),
        1 => Just("{\"choices\":[]} trailing".to_string()),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_payloads_assemble_the_same(
        payloads in prop::collection::vec(
            (prop::sample::select(vec![None, Some("message"), Some("error"), Some("ping")]), payload()),
            1..8,
        ),
    ) {
        let payloads: Vec<(Option<String>, String)> = payloads
            .into_iter()
            // Mostly unnamed events, as providers send them.
            .enumerate()
            .map(|(i, (e, p))| (if i % 3 == 2 { e.map(str::to_string) } else { None }, p))
            .collect();
        assert_same(&payloads);
    }
}
