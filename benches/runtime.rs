//! The runtime's own cost per model round (everything but the model's and the tools' time):
//! 10 registered tools with no-op executors, 1,000 messages of history, a model that answers at
//! once with one tool call per round (streamed as events), the in-memory store. Compared in the
//! same run with serializing that round's request body (what any client must do every round).
//! Also the `tools` part alone: the ten schemas built as values (serialised each round) against
//! the same schemas registered as text (sent in their key order, copied as kept).
//!
//! `cargo bench --bench runtime`

use arkagent::agent::{AgentBuilder, AgentConfig, NoEvents};
use arkagent::provider::{
    convert::to_wire_request, ChatModel, ChatRequest, ModelEventStream, ModelResponse, ProviderPreset,
    ScriptedModel,
};
use arkagent::state::{AgentState, MemoryStore, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{AgentError, CancellationSignal, ChatMessage, ToolCall, ToolDefinition, ToolResult};
use async_trait::async_trait;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::json;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const HISTORY: usize = 1_000;
const ROUNDS: usize = 10;

/// Answers `ROUNDS - 1` times with one call of `tool_0`, then with a text, counting per run.
struct Rounds {
    call: ModelResponse,
    done: ModelResponse,
    seen: AtomicUsize,
    events: ScriptedModel,
}

impl Rounds {
    fn next(&self) -> ModelResponse {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        if n % ROUNDS == ROUNDS - 1 {
            self.done.clone()
        } else {
            let mut r = self.call.clone();
            r.tool_calls[0].id = format!("call_{n}");
            r
        }
    }
}

#[async_trait]
impl ChatModel for Rounds {
    async fn complete(&self, _request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        Ok(self.next())
    }

    async fn stream(&self, _request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let events = self.events.events_for(&self.next());
        Ok(Box::pin(futures_util::stream::iter(events.into_iter().map(Ok))))
    }
}

fn schema(i: usize) -> serde_json::Value {
    json!({"type":"object","properties":{
        "city":{"type":"string","description":format!("city {i}")},
        "days":{"type":"integer","minimum":1,"maximum":14},
        "units":{"type":"string","enum":["c","f"]}
    },"required":["city"]})
}

fn history() -> Vec<ChatMessage> {
    let mut m = vec![ChatMessage::system("你是烘焙店的助手。")];
    let mut i = 0;
    while m.len() < HISTORY {
        m.push(ChatMessage::user(format!("第 {i} 个问题：订单 2026{i:04} 到哪了？")));
        m.push(ChatMessage::Assistant {
            content: None,
            reasoning_content: None,
            tool_calls: vec![ToolCall::new(format!("h{i}"), "tool_0", r#"{"city":"北京","days":3}"#)],
        });
        m.push(ChatMessage::Tool {
            tool_call_id: format!("h{i}"),
            name: "tool_0".into(),
            content: r#"{"status":"已发货","logistics":"顺丰 SF123456","eta":"2026-10-12"}"#.into(),
            is_error: false,
        });
        m.push(ChatMessage::assistant_text("您的订单已发货，预计 2026-10-12 送达。"));
        i += 1;
    }
    m
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let model = Arc::new(Rounds {
        call: ModelResponse::with_tool_calls(vec![ToolCall::new(
            "x",
            "tool_0",
            r#"{"city":"上海","days":2}"#,
        )]),
        done: ModelResponse::text("好的，查到了。"),
        seen: AtomicUsize::new(0),
        events: ScriptedModel::new([]).with_chunk_chars(8),
    });
    let store = Arc::new(MemoryStore::new());
    let agent = AgentBuilder::new(model, store.clone())
        .config(AgentConfig { max_rounds: ROUNDS as u32 + 1, loop_window: 1000, ..AgentConfig::default() })
        .build();
    for i in 0..10 {
        agent
            .register_tool(
                ToolDefinition::new(format!("tool_{i}"), "a no-op tool", schema(i)),
                Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("ok")) })),
            )
            .unwrap();
    }
    let mut base = AgentState::new("bench");
    base.messages = history();
    let tools = agent.tools();
    let request = ChatRequest::new(base.messages.clone().into(), Arc::clone(tools.definitions()));
    let quirks = ProviderPreset::OpenAi.quirks();

    let mut group = c.benchmark_group("runtime_round");
    group.bench_function("serialize_request_body", |b| {
        b.iter(|| black_box(serde_json::to_vec(&to_wire_request(&request, "gpt-4o", &quirks, true)).unwrap()))
    });
    group.bench_function(format!("run_of_{ROUNDS}_rounds"), |b| {
        b.iter_batched(
            || rt.block_on(store.save_snapshot(&base)).unwrap(),
            |()| {
                rt.block_on(agent.run("bench", "再查一次", &NoEvents, &CancellationSignal::new())).unwrap();
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    // The ratio, measured interleaved in this same run (criterion's figures above are separate).
    let mut ratios = Vec::new();
    for _ in 0..31 {
        let t = std::time::Instant::now();
        for _ in 0..ROUNDS {
            black_box(serde_json::to_vec(&to_wire_request(&request, "gpt-4o", &quirks, true)).unwrap());
        }
        let serialize = t.elapsed();
        rt.block_on(store.save_snapshot(&base)).unwrap();
        let t = std::time::Instant::now();
        rt.block_on(agent.run("bench", "再查一次", &NoEvents, &CancellationSignal::new())).unwrap();
        let run = t.elapsed();
        ratios.push(run.as_secs_f64() / serialize.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "runtime cost per round / serializing that round's request body ({HISTORY} messages, 10 tools): \
         median {:.2} (min {:.2}, max {:.2}; target <= 2)",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );

    // The tools of a request (one short message beside them), schemas as values or as text.
    let question: Arc<Vec<ChatMessage>> = Arc::new(vec![ChatMessage::user("再查一次")]);
    let as_text: Arc<[ToolDefinition]> = tools
        .definitions()
        .iter()
        .map(|d| {
            ToolDefinition::from_schema_text(d.name.clone(), d.description.clone(), &d.parameters.text())
                .unwrap()
        })
        .collect();
    let mut group = c.benchmark_group("request_tools");
    for (name, definitions) in [("value_schemas", Arc::clone(tools.definitions())), ("text_schemas", as_text)]
    {
        let request = ChatRequest::new(Arc::clone(&question), definitions);
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(serde_json::to_vec(&to_wire_request(&request, "gpt-4o", &quirks, true)).unwrap())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
