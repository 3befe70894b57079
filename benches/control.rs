//! Control-safety cost per tool call, compared in the same run with parsing that call's arguments
//! with serde_json (which every call pays anyway at the registry's second gate).
//!
//! - `parse_args_serde_json`: `serde_json::from_str::<Value>` of the arguments (the yardstick).
//! - `loop_record_check`: `LoopDetector::record` (count one final signature + check the window).
//! - `loop_stream_update_commit`: the streaming path, `update` then `commit` of one call id.
//! - `hooks_5_noop_before_after`: a `HookPipeline` of 5 no-op hooks, `before_tool_call` then
//!   `after_tool_call` (owned call and result are made outside the timed part, as the runtime owns
//!   them already).
//! - `detector_and_hooks`: both of the above for one call: the figure the target is about.
//! - `signature_from_value` / `signature_from_text`: building the signature itself (canonical
//!   form of already-parsed arguments / parse + canonical form), reported apart.
//!
//! Run: `cargo bench --bench control`

use arkagent::hook::{AgentHook, BeforeToolCallOutcome, HookContext, HookPipeline};
use arkagent::loop_detect::{signature, signature_of_value, LoopDetector, LoopDetectorConfig};
use arkagent::{CancellationSignal, ToolCall, ToolDefinition, ToolResult};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use futures_util::FutureExt;
use serde_json::{json, Value};
use std::hint::black_box;
use std::sync::{Arc, LazyLock};

/// A realistic call of the order demo: nested items, a note with non-ASCII text (~190 bytes).
const ARGS: &str = r#"{"order_id":"ORD-20260712-0042","customer":{"name":"李雷","phone":"138****0000"},"items":[{"sku":"FLOUR-1KG","qty":2},{"sku":"SUGAR-500G","qty":1}],"note":"放在门口, leave at the door"}"#;

struct Noop;
impl AgentHook for Noop {}

static CTX: LazyLock<HookContext<'static>> = LazyLock::new(|| {
    static SIGNAL: LazyLock<CancellationSignal> = LazyLock::new(CancellationSignal::new);
    HookContext { session_id: "s1", run_id: "run-1", round: 3, signal: &SIGNAL }
});

fn signatures() -> Vec<String> {
    // Seven different calls in rotation: a busy run that never loops (the usual case).
    (0..7).map(|i| signature("create_order", &ARGS.replace("0042", &format!("004{i}")))).collect()
}

fn bench_control(c: &mut Criterion) {
    let call = ToolCall::new("call_abc123", "create_order", ARGS);
    let definition = ToolDefinition::new("create_order", "Creates an order", json!({"type":"object"}));
    let result = ToolResult::json(json!({"ok": true, "order_id": "ORD-20260712-0042", "eta_minutes": 35}));
    let sigs = signatures();
    let ids: Vec<String> = (0..64).map(|i| format!("call_{i}")).collect();
    let pipeline = HookPipeline::with_hooks((0..5).map(|_| Arc::new(Noop) as Arc<dyn AgentHook>).collect());
    let parsed: Value = serde_json::from_str(ARGS).unwrap();

    let mut group = c.benchmark_group("control_per_call");

    group.bench_function("parse_args_serde_json", |b| {
        b.iter(|| serde_json::from_str::<Value>(black_box(ARGS)).unwrap())
    });

    let mut detector = LoopDetector::new(&LoopDetectorConfig::default()).unwrap();
    let mut n = 0usize;
    group.bench_function("loop_record_check", |b| {
        b.iter(|| {
            n += 1;
            let check = detector.record(&ids[n % ids.len()], sigs[n % sigs.len()].clone());
            assert!(!check.is_loop());
            check
        })
    });

    let mut detector = LoopDetector::new(&LoopDetectorConfig::default()).unwrap();
    group.bench_function("loop_stream_update_commit", |b| {
        b.iter(|| {
            n += 1;
            let id = &ids[n % ids.len()];
            detector.update(id, sigs[n % sigs.len()].clone());
            detector.commit(id)
        })
    });

    group.bench_function("hooks_5_noop_before_after", |b| {
        b.iter_batched(
            || (call.clone(), result.clone()),
            |(call, result)| {
                let call = hooks_before(&pipeline, call, &definition);
                let after = pipeline.after_tool_call(&CTX, &call, result).now_or_never().unwrap();
                (call, after)
            },
            BatchSize::SmallInput,
        )
    });

    let mut detector = LoopDetector::new(&LoopDetectorConfig::default()).unwrap();
    group.bench_function("detector_and_hooks", |b| {
        b.iter_batched(
            || (call.clone(), result.clone()),
            |(call, result)| {
                n += 1;
                let call = hooks_before(&pipeline, call, &definition);
                let after = pipeline.after_tool_call(&CTX, &call, result).now_or_never().unwrap();
                let check = detector.record(&ids[n % ids.len()], sigs[n % sigs.len()].clone());
                (call, after, check)
            },
            BatchSize::SmallInput,
        )
    });

    group.bench_function("signature_from_value", |b| {
        b.iter(|| signature_of_value("create_order", black_box(&parsed)))
    });
    group.bench_function("signature_from_text", |b| b.iter(|| signature("create_order", black_box(ARGS))));

    group.finish();
}

/// The before-hooks of one call; the no-op hooks always proceed.
fn hooks_before(pipeline: &HookPipeline, call: ToolCall, definition: &ToolDefinition) -> ToolCall {
    match pipeline.before_tool_call(&CTX, call, Some(definition)).now_or_never() {
        Some(BeforeToolCallOutcome::Proceed(call)) => call,
        other => panic!("no-op hooks must proceed, got {other:?}"),
    }
}

criterion_group!(benches, bench_control);
criterion_main!(benches);
