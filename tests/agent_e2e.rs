//! The runtime end to end over HTTP: the OpenAI-compatible client against the local mock server,
//! a file store on disk, streamed tool calls, the approval freeze, a provider fault, and
//! cancellation of a stream in flight.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome};
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::state::{FileStore, RunStatus};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolResult};
use mock_server::{End, MockServer, Reply};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "sk-SENTINEL-e2e-0123456789";

/// An SSE body of chat.completion.chunk payloads, ending with [DONE].
fn sse(chunks: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for c in chunks {
        out.push_str(&format!("data: {c}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id":"c","object":"chat.completion.chunk","created":1,"model":"m",
           "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
}

/// A streamed answer with one tool call whose arguments arrive in 8-character pieces.
fn tool_call_stream(id: &str, name: &str, arguments: &str) -> Vec<u8> {
    let mut chunks = vec![chunk(
        json!({"role":"assistant","tool_calls":[{"index":0,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}),
        None,
    )];
    let chars: Vec<char> = arguments.chars().collect();
    for piece in chars.chunks(8) {
        let piece: String = piece.iter().collect();
        chunks.push(chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":piece}}]}), None));
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    sse(&chunks)
}

fn text_stream(text: &str) -> Vec<u8> {
    let mut chunks = vec![chunk(json!({"role":"assistant","content":""}), None)];
    for piece in text.chars().collect::<Vec<_>>().chunks(3) {
        chunks.push(chunk(json!({"content": piece.iter().collect::<String>()}), None));
    }
    chunks.push(chunk(json!({}), Some("stop")));
    sse(&chunks)
}

fn client(server: &MockServer) -> Arc<OpenAiCompatibleClient> {
    let config = ClientConfig::custom(server.base_url(), "mock-model", KEY).with_retry(RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        ..RetryPolicy::default()
    });
    Arc::new(OpenAiCompatibleClient::new(config).expect("client"))
}

fn agent(server: &MockServer, dir: &std::path::Path, runs: &Arc<AtomicUsize>) -> arkagent::agent::Agent {
    let agent = AgentBuilder::new(client(server), Arc::new(FileStore::new(dir)))
        .config(AgentConfig::default())
        .build();
    let r = runs.clone();
    agent
        .register_tool(
            ToolDefinition::new(
                "query_order",
                "查询订单",
                json!({"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}),
            ),
            Arc::new(FnExecutor(move |args: serde_json::Map<String, Value>, _ctx| {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolResult::json(json!({"order_id": args["order_id"], "status": "已发货"})))
                }
            })),
        )
        .unwrap();
    let r = runs.clone();
    agent
        .register_tool(
            ToolDefinition::new("clear_baking_cache", "清空缓存", json!({"type":"object"}))
                .with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(move |_a, _c| {
                let r = r.clone();
                async move {
                    r.fetch_add(100, Ordering::SeqCst);
                    Ok(ToolResult::text("cleared"))
                }
            })),
        )
        .unwrap();
    agent
}

fn all_bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes_under(&path));
        } else {
            out.extend(std::fs::read(&path).unwrap());
        }
    }
    out
}

#[tokio::test]
async fn a_streamed_tool_call_over_http_runs_and_the_answer_comes_back() {
    let server = MockServer::start([
        Reply::error(503, "overloaded", "try again"),
        Reply::sse_in_pieces(
            &tool_call_stream("call_1", "query_order", r#"{"order_id": "20261010"}"#),
            7,
            Duration::ZERO,
            End::Complete,
        ),
        Reply::sse(&text_stream("订单 20261010 已发货")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(&server, dir.path(), &runs);
    let log = EventLog::new();
    let out = agent.run("e2e", "我的订单到哪了", &log, &CancellationSignal::new()).await.unwrap();
    match &out {
        RunOutcome::Finished { status, final_text, .. } => {
            assert_eq!(*status, RunStatus::Completed);
            assert_eq!(final_text.as_deref(), Some("订单 20261010 已发货"));
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "the 503 was retried");
    // Round two sent the call and its result paired by id, and the tools again.
    let body = requests[2].json();
    let messages = body["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], "call_1");
    assert_eq!(body["tools"][0]["function"]["name"], "query_order");
    assert_eq!(requests[2].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    // The streamed text arrived as deltas.
    let text: String = log
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta { delta } => Some(delta.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "订单 20261010 已发货");
    // The key is nowhere on disk and in no event.
    let bytes = all_bytes_under(dir.path());
    assert!(!bytes.is_empty());
    assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "key written to the state dir");
    let events = serde_json::to_string(&log.events()).unwrap();
    assert!(!events.contains(KEY));
}

#[tokio::test]
async fn the_approval_scene_on_disk_confirm_reload_approve() {
    let server = MockServer::start([
        Reply::sse(&tool_call_stream("call_9", "clear_baking_cache", "{}")),
        Reply::sse(&text_stream("已清空")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let first = agent(&server, dir.path(), &runs);
    let out = first.run("scene", "清空烘焙缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    drop(first);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // A new agent over the same directory: what the app sees after being killed.
    let second = agent(&server, dir.path(), &runs);
    let pending = second.state("scene").await.unwrap().unwrap().pending_approval.unwrap();
    assert_eq!(pending, batch);
    second.approve("scene", &batch.items[0].approval_id).await.unwrap();
    let out = second.resume("scene", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 100, "the dangerous tool ran once");
}

#[tokio::test]
async fn cancelling_mid_stream_drops_the_http_stream_at_once() {
    let server = MockServer::start([Reply::Endless {
        part: b": keep-alive\n\n".to_vec(),
        every: Duration::from_millis(20),
    }])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Arc::new(agent(&server, dir.path(), &runs));
    let cancel = CancellationSignal::new();
    let (a, c) = (agent.clone(), cancel.clone());
    let task = tokio::spawn(async move { a.run("cancel", "hi", &EventLog::new(), &c).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel("user");
    let out = tokio::time::timeout(Duration::from_secs(3), task).await.unwrap().unwrap().unwrap();
    assert_eq!(out.status(), RunStatus::Cancelled);
    assert!(server.wait_aborted(1, Duration::from_secs(3)).await, "the server saw the stream dropped");
    let state = agent.store().load("cancel").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
}

#[tokio::test]
async fn a_provider_error_ends_the_run_failed_with_the_error_and_persists_it() {
    let server = MockServer::start([Reply::error(400, "context_length_exceeded", "too long")]).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(&server, dir.path(), &runs);
    let out = agent.run("fail", "hi", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    match out {
        RunOutcome::Finished { status, error: Some(e), .. } => {
            assert_eq!(status, RunStatus::Failed);
            assert_eq!(e.code, "provider_http_status");
            assert!(e.message.contains("context_length_exceeded"), "{}", e.message);
            assert!(!e.message.contains(KEY));
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(agent.state("fail").await.unwrap().unwrap().status, RunStatus::Failed);
}
