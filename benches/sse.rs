//! Stream assembly throughput: a ~1 MB SSE stream of tool-call deltas in the recorded OpenAI style
//! (argument fragments with escaped quotes, `id`/`object`/`model`/`logprobs` on every chunk), fed
//! in 16 KiB network reads through `StreamDecoder` (SSE framing + typed borrowed parsing + merging
//! + events), against serde_json merely parsing each chunk payload into a `Value`.
//!
//! `cargo bench --bench sse` runs criterion for each variant, then an interleaved A/B of the two
//! that matter and prints their ratio measured in the same run (target: assembly >= 1.5x).

use arkagent::provider::wire::ChatCompletionChunk;
use arkagent::provider::{ModelEvent, StreamDecoder};
use criterion::{criterion_group, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};

const READ_SIZE: usize = 16 * 1024;

/// A JSON string literal's inside for `s` (escapes quotes, backslashes, control characters).
fn escape(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap();
    quoted[1..quoted.len() - 1].to_string()
}

/// Builds the stream: calls whose arguments arrive in fragments of 2..9 characters.
fn build_stream(target_bytes: usize) -> (Vec<u8>, Vec<String>, usize) {
    let mut rng = fastrand::Rng::with_seed(42);
    let mut out = String::with_capacity(target_bytes + 4096);
    let mut payloads = Vec::new();
    let head = r#"{"id":"chatcmpl-ABfvyvfNWKcl7Ohqos4UFrmMs1v4C","object":"chat.completion.chunk","created":1727346166,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":"#;
    let mut push = |payload: String, out: &mut String| {
        out.push_str("data: ");
        out.push_str(&payload);
        out.push_str("\n\n");
        payloads.push(payload);
    };
    let mut call = 0usize;
    while out.len() < target_bytes {
        let args = format!(
            r#"{{"city": "Edinburgh", "country": "GB", "units": "c", "note": "order {call} says \"ship today\" and path C:\\tmp", "items": [{}]}}"#,
            (0..8)
                .map(|i| format!(r#"{{"sku": "SKU{i:03}", "qty": {}}}"#, i + call % 5))
                .collect::<Vec<_>>()
                .join(", ")
        );
        push(
            format!(
                r#"{head}{{"tool_calls":[{{"index":{call},"id":"call_{call:024}","type":"function","function":{{"name":"get_weather","arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}]}}"#
            ),
            &mut out,
        );
        let chars: Vec<char> = args.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let n = rng.usize(2..10).min(chars.len() - i);
            let piece: String = chars[i..i + n].iter().collect();
            i += n;
            push(
                format!(
                    r#"{head}{{"tool_calls":[{{"index":{call},"function":{{"arguments":"{}"}}}}]}},"logprobs":null,"finish_reason":null}}]}}"#,
                    escape(&piece)
                ),
                &mut out,
            );
        }
        call += 1;
    }
    push(format!(r#"{head}{{}},"logprobs":null,"finish_reason":"tool_calls"}}]}}"#), &mut out);
    out.push_str("data: [DONE]\n\n");
    (out.into_bytes(), payloads, call)
}

fn assemble(body: &[u8]) -> usize {
    let mut decoder = StreamDecoder::new();
    let mut events: Vec<ModelEvent> = Vec::with_capacity(256);
    let mut calls = 0;
    for read in body.chunks(READ_SIZE) {
        decoder.feed(read, &mut events).unwrap();
        // A consumer takes the events of each read.
        calls += events.iter().filter(|e| matches!(e, ModelEvent::ToolCallFinished { .. })).count();
        events.clear();
    }
    decoder.finish(&mut events).unwrap();
    calls
}

fn value_per_payload(payloads: &[String]) -> usize {
    let mut n = 0;
    for p in payloads {
        let v: serde_json::Value = serde_json::from_str(p).unwrap();
        n += v.as_object().map_or(0, |o| o.len());
    }
    n
}

fn typed_per_payload(payloads: &[String]) -> usize {
    let mut n = 0;
    for p in payloads {
        let c: ChatCompletionChunk<'_> = serde_json::from_str(p).unwrap();
        n += c.choices.len();
    }
    n
}

fn line_split(body: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', body).count()
}

fn benches(c: &mut Criterion) {
    let (body, payloads, calls) = build_stream(1024 * 1024);
    assert_eq!(assemble(&body), calls, "every call of the stream is assembled");
    let mut g = c.benchmark_group("sse_1mb");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("assemble_full", |b| b.iter(|| assemble(black_box(&body))));
    g.bench_function("value_per_payload", |b| b.iter(|| value_per_payload(black_box(&payloads))));
    g.bench_function("typed_borrowed_per_payload", |b| b.iter(|| typed_per_payload(black_box(&payloads))));
    g.bench_function("line_split", |b| b.iter(|| line_split(black_box(&body))));
    g.finish();
}

/// Interleaved A/B in one run: alternating rounds, median of each, so machine noise hits both.
fn ratio_report() {
    let (body, payloads, _) = build_stream(1024 * 1024);
    let mb = body.len() as f64 / 1e6;
    let time = |f: &dyn Fn() -> usize| {
        let t = Instant::now();
        black_box(f());
        t.elapsed()
    };
    let mut a = Vec::new();
    let mut v = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline || a.len() < 15 {
        a.push(time(&|| assemble(black_box(&body))));
        v.push(time(&|| value_per_payload(black_box(&payloads))));
    }
    a.sort();
    v.sort();
    let (ma, mv) = (a[a.len() / 2].as_secs_f64(), v[v.len() / 2].as_secs_f64());
    println!(
        "\nsse ratio ({} rounds, {:.2} MB, {} payloads): assemble_full {:.0} MB/s, value_per_payload {:.0} MB/s, ratio {:.2}x (target >= 1.5x)",
        a.len(),
        mb,
        payloads.len(),
        mb / ma,
        mb / mv,
        mv / ma
    );
}

criterion_group!(sse, benches);

fn main() {
    sse();
    Criterion::default().configure_from_args().final_summary();
    ratio_report();
}
