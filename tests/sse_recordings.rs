//! Every recording in tests/fixtures/sse (OpenAI, DeepSeek, Qwen, GLM, Mistral, Groq, xAI, Ollama,
//! OpenRouter, Claude-compatible) must assemble into the merged calls its MANIFEST.json lists under
//! `derived`, whatever way the bytes are split, and whatever line endings are used. The
//! non-streaming responses go through the non-streaming parser.

#[path = "support/recordings.rs"]
mod recordings;

use arkagent::provider::convert::parse_response;
use arkagent::provider::{decode_sse_body, ModelEvent, ModelResponse, StreamDecoder};
use arkagent::ToolCall;
use recordings::{fixture_dir, manifest, sse_body, streaming_entries};
use serde_json::Value;
use std::collections::BTreeMap;

fn decode_in_pieces(body: &[u8], cuts: &[usize]) -> Vec<ModelEvent> {
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        decoder.feed(&body[start..cut], &mut out).expect("feed");
        start = cut;
    }
    decoder.finish(&mut out).expect("finish");
    out
}

fn response_of(events: &[ModelEvent]) -> &ModelResponse {
    let finished: Vec<_> = events.iter().filter(|e| matches!(e, ModelEvent::Finished(_))).collect();
    assert_eq!(finished.len(), 1, "exactly one Finished");
    match events.last() {
        Some(ModelEvent::Finished(r)) => r,
        other => panic!("the last event is not Finished: {other:?}"),
    }
}

/// Checks the event sequence against the final response: text and reasoning deltas add up,
/// every call starts once before its argument deltas, the deltas add up to its raw arguments.
fn check_event_consistency(file: &str, events: &[ModelEvent]) {
    let response = response_of(events);
    let text: String = events
        .iter()
        .filter_map(|e| if let ModelEvent::TextDelta(t) = e { Some(t.as_str()) } else { None })
        .collect();
    assert_eq!(response.content.clone().unwrap_or_default(), text, "{file}: text deltas");
    let reasoning: String = events
        .iter()
        .filter_map(|e| if let ModelEvent::ReasoningDelta(t) = e { Some(t.as_str()) } else { None })
        .collect();
    assert_eq!(response.reasoning_content.clone().unwrap_or_default(), reasoning, "{file}: reasoning deltas");
    let mut started: BTreeMap<usize, (String, String)> = BTreeMap::new();
    let mut args: BTreeMap<usize, String> = BTreeMap::new();
    let mut finished: BTreeMap<usize, ToolCall> = BTreeMap::new();
    for e in events {
        match e {
            ModelEvent::ToolCallStarted { index, id, name } => {
                assert!(
                    started.insert(*index, (id.clone(), name.clone())).is_none(),
                    "{file}: started twice"
                );
            }
            ModelEvent::ToolCallArgumentsDelta { index, delta } => {
                assert!(started.contains_key(index), "{file}: delta before start");
                assert!(!finished.contains_key(index), "{file}: delta after finish");
                args.entry(*index).or_default().push_str(delta);
            }
            ModelEvent::ToolCallFinished { index, call } => {
                assert_eq!(started[index], (call.id.clone(), call.name.clone()), "{file}: id/name");
                let raw = args.get(index).cloned().unwrap_or_default();
                let want = if raw.trim().is_empty() { "{}".to_string() } else { raw };
                assert_eq!(call.arguments, want, "{file}: deltas add up to the arguments");
                finished.insert(*index, call.clone());
            }
            _ => {}
        }
    }
    assert_eq!(finished.values().cloned().collect::<Vec<_>>(), response.tool_calls, "{file}: finished calls");
    assert_eq!(
        finished.keys().copied().collect::<Vec<_>>(),
        (0..response.tool_calls.len()).collect::<Vec<_>>()
    );
}

#[test]
fn every_recording_assembles_into_its_manifest_calls() {
    let entries = streaming_entries();
    assert_eq!(entries.len(), 21, "the manifest lists 21 streaming recordings");
    for entry in &entries {
        let file = entry["file"].as_str().unwrap();
        let derived = &entry["derived"];
        let events = decode_sse_body(&sse_body(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let response = response_of(&events);
        let want: Vec<ToolCall> = derived["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                ToolCall::new(
                    c["id"].as_str().unwrap(),
                    c["name"].as_str().unwrap(),
                    c["arguments"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(response.tool_calls, want, "{file}: merged calls");
        for (call, c) in response.tool_calls.iter().zip(derived["tool_calls"].as_array().unwrap()) {
            let parsed: Value =
                serde_json::from_str(&call.arguments).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(parsed, c["arguments_parsed"], "{file}: parsed arguments");
        }
        assert_eq!(
            response.finish_reason.as_deref(),
            derived["finish_reason"].as_str(),
            "{file}: finish_reason"
        );
        let content_len = response.content.as_deref().map(|c| c.chars().count()).unwrap_or(0);
        assert_eq!(content_len as u64, derived["content_len"].as_u64().unwrap(), "{file}: content length");
        check_event_consistency(file, &events);
    }
}

#[test]
fn specific_quirks_hold() {
    let by_file = |f: &str| decode_sse_body(&sse_body(f)).unwrap();
    // DeepSeek / Grok reasoning streams: reasoning deltas are collected apart from the text.
    for f in ["deepseek-reasoner-fine-deltas.jsonl", "xai-grok3mini-reasoning-whole-args.jsonl"] {
        let ev = by_file(f);
        let r = response_of(&ev);
        assert!(r.reasoning_content.as_deref().is_some_and(|s| !s.is_empty()), "{f}");
        assert!(ev.iter().any(|e| matches!(e, ModelEvent::ReasoningDelta(_))), "{f}");
    }
    // Claude through a compatible endpoint numbers calls from 1; events are renumbered from 0.
    let ev = by_file("claude-via-openai-compat-index-starts-at-1.sse");
    assert!(ev.contains(&ModelEvent::ToolCallStarted {
        index: 0,
        id: "toolu_sanitized".into(),
        name: "read_file".into()
    }));
    // Usage-only final chunk (choices: []) is reported once.
    let ev = by_file("openai-gpt4o-parallel-plus-minus.sse");
    assert_eq!(ev.iter().filter(|e| matches!(e, ModelEvent::Usage(_))).count(), 1);
    assert!(response_of(&ev).usage.is_some_and(|u| u.total_tokens > 0));
    // tool_calls: [] on every delta: no call, text and reasoning kept.
    let ev = by_file("synthetic-empty-tool-calls-array.jsonl");
    let r = response_of(&ev);
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.content.as_deref(), Some("Hello"));
    assert_eq!(r.reasoning_content.as_deref(), Some("Think more..."));
    // Ollama: finish_reason "stop" despite a call; the call is still there.
    let r = by_file("ollama-llama3.1-no-index-bool.sse");
    assert_eq!(response_of(&r).finish_reason.as_deref(), Some("stop"));
    assert_eq!(response_of(&r).tool_calls.len(), 1);
}

#[test]
fn any_chunking_gives_identical_events() {
    for entry in streaming_entries() {
        let file = entry["file"].as_str().unwrap();
        let body = sse_body(file);
        let whole = decode_in_pieces(&body, &[]);
        let bytewise: Vec<usize> = (1..body.len()).collect();
        assert_eq!(decode_in_pieces(&body, &bytewise), whole, "{file}: one byte at a time");
        let mut rng = fastrand::Rng::with_seed(0x5EED ^ body.len() as u64);
        for round in 0..40 {
            let n = rng.usize(1..12);
            let mut cuts: Vec<usize> = (0..n).map(|_| rng.usize(0..=body.len())).collect();
            cuts.sort_unstable();
            assert_eq!(decode_in_pieces(&body, &cuts), whole, "{file}: random split #{round} {cuts:?}");
        }
    }
}

#[test]
fn line_endings_do_not_matter() {
    for entry in streaming_entries() {
        let file = entry["file"].as_str().unwrap();
        let body = String::from_utf8(sse_body(file)).unwrap();
        let whole = decode_sse_body(body.as_bytes()).unwrap();
        let crlf = body.replace('\n', "\r\n");
        let cr = body.replace('\n', "\r");
        assert_eq!(decode_sse_body(crlf.as_bytes()).unwrap(), whole, "{file}: CRLF");
        assert_eq!(decode_sse_body(cr.as_bytes()).unwrap(), whole, "{file}: CR");
        // CRLF split between the CR and the LF, everywhere.
        let bytes = crlf.as_bytes();
        let cuts: Vec<usize> =
            bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i).collect();
        assert_eq!(decode_in_pieces(bytes, &cuts), whole, "{file}: CR|LF split");
    }
}

#[test]
fn missing_done_and_extra_comments_and_event_names() {
    let body = String::from_utf8(sse_body("openai-gpt4o-parallel-two-tools.sse")).unwrap();
    let whole = decode_sse_body(body.as_bytes()).unwrap();
    let without_done = body.replace("data: [DONE]", "");
    assert_eq!(decode_sse_body(without_done.as_bytes()).unwrap(), whole);
    let noisy = body.replace("data: {", ": keep-alive\n\nevent: message\nid: 7\ndata: {");
    assert_eq!(decode_sse_body(noisy.as_bytes()).unwrap(), whole);
    let multiline = body.replace(",\"choices\"", "\ndata: ,\"choices\"").replace("data: ,", "data:,");
    // A payload split over two data lines is joined with "\n", which JSON accepts as whitespace.
    assert_eq!(decode_sse_body(multiline.as_bytes()).unwrap(), whole);
}

#[test]
fn non_streaming_responses_parse() {
    let m = manifest();
    let entries = m["nonstreaming"].as_array().unwrap();
    assert_eq!(entries.len(), 9);
    for entry in entries {
        let file = entry["file"].as_str().unwrap();
        let bytes = std::fs::read(fixture_dir().join(file)).unwrap();
        let response = parse_response(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        // The expectation is read generically (serde_json::Value) from the same file.
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let msg = &v["choices"][0]["message"];
        let want: Vec<ToolCall> = msg["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                ToolCall::new(
                    c["id"].as_str().unwrap(),
                    c["function"]["name"].as_str().unwrap(),
                    c["function"]["arguments"].as_str().unwrap(),
                )
            })
            .collect();
        assert!(!want.is_empty(), "{file}");
        assert_eq!(response.tool_calls, want, "{file}");
        assert_eq!(response.finish_reason.as_deref(), v["choices"][0]["finish_reason"].as_str(), "{file}");
        assert_eq!(response.content.as_deref(), msg["content"].as_str().filter(|s| !s.is_empty()), "{file}");
        assert_eq!(
            response.reasoning_content.as_deref(),
            msg["reasoning_content"].as_str().filter(|s| !s.is_empty()),
            "{file}"
        );
        assert_eq!(response.usage.map(|u| u.total_tokens), v["usage"]["total_tokens"].as_u64(), "{file}");
    }
}
