//! A tool call whose arguments the registry refuses for their size or depth (`json_too_large`,
//! `json_too_deep`) never runs, and the provider is sent `"{}"` for them: they are recorded as
//! `"{}"` too, so the saved state, the `tool_call_finished` event, `after_model_response`, the
//! `before_model_call` of every later request and the request itself agree (kept, 2 MiB of
//! arguments were saved with the session and shown to the hooks with every later request). The
//! call's error result still tells the model what it sent was too large or too deep.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::json::JsonLimits;
use arkagent::message::ToolCall;
use arkagent::provider::{ChatRequest, ClientConfig, ModelResponse, OpenAiCompatibleClient, RetryPolicy};
use arkagent::state::FileStore;
use arkagent::tool::{FnExecutor, ToolRegistry};
use arkagent::{codes, CancellationSignal, ToolDefinition, ToolResult};
use mock_server::{chunk, MockServer, Reply};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// An answer calling `calls` (id, name, arguments), each call's arguments streamed in 64 KiB pieces.
fn calls_reply(calls: &[(&str, &str, &str)]) -> Reply {
    let mut chunks = vec![chunk(json!({"role":"assistant"}), None)];
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls":[{"index":index,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}),
            None,
        ));
        for piece in arguments.as_bytes().chunks(64 << 10) {
            let piece = std::str::from_utf8(piece).unwrap();
            chunks.push(chunk(json!({"tool_calls":[{"index":index,"function":{"arguments":piece}}]}), None));
        }
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    Reply::sse_chunks(&chunks)
}

/// What the hooks were shown: the arguments of every call in each request's history, those of
/// each answer, and the calls that reached `before_tool_call`.
#[derive(Default)]
struct Shown {
    requests: Mutex<Vec<Vec<String>>>,
    answers: Mutex<Vec<Vec<String>>>,
    before_tool: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl AgentHook for Shown {
    async fn before_model_call(&self, _: &HookContext<'_>, request: &ChatRequest) {
        let args =
            request.messages.iter().flat_map(|m| m.tool_calls()).map(|c| c.arguments.clone()).collect();
        self.requests.lock().unwrap().push(args);
    }
    async fn after_model_response(&self, _: &HookContext<'_>, response: &ModelResponse) {
        self.answers.lock().unwrap().push(response.tool_calls.iter().map(|c| c.arguments.clone()).collect());
    }
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        call: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        self.before_tool.lock().unwrap().push(call.id.clone());
        BeforeToolCall::Proceed(None)
    }
}

type Ran = Arc<Mutex<Vec<String>>>;

fn agent(
    server: &MockServer,
    dir: &std::path::Path,
    tools: ToolRegistry,
    shown: &Arc<Shown>,
    ran: &Ran,
) -> Agent {
    let config = ClientConfig::custom(server.base_url(), "m", "sk-args")
        .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() });
    let client = Arc::new(OpenAiCompatibleClient::new(config).unwrap());
    let agent = AgentBuilder::new(client, Arc::new(FileStore::new(dir)))
        .config(AgentConfig { streaming: true, ..AgentConfig::default() })
        .tools(tools)
        .hook(Arc::clone(shown) as Arc<dyn AgentHook>)
        .build();
    let log = Arc::clone(ran);
    agent
        .register_tool(
            ToolDefinition::new(
                "echo",
                "echo",
                json!({"type":"object","properties":{"x":{"type":"string"}}}),
            ),
            Arc::new(FnExecutor(move |args: serde_json::Map<String, Value>, _c| {
                let log = Arc::clone(&log);
                async move {
                    log.lock().unwrap().push(Value::Object(args).to_string());
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    agent
}

fn final_text(out: &RunOutcome) -> Option<String> {
    match out {
        RunOutcome::Finished { final_text, .. } => final_text.clone(),
        RunOutcome::Suspended { .. } => panic!("suspended"),
    }
}

/// The arguments of every call in each request body the server received.
fn sent_arguments(server: &MockServer) -> Vec<Vec<String>> {
    server
        .requests()
        .iter()
        .map(|r| {
            let body = r.json();
            body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
                .map(|c| c["function"]["arguments"].as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// The bytes the session takes on disk (snapshot and journal).
fn bytes_on_disk(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

fn result_of<'a>(log: &'a [AgentEvent], id: &str) -> &'a ToolResult {
    log.iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { call_id, result, .. } if call_id == id => Some(result),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

fn code(result: &ToolResult) -> Option<&str> {
    result.metadata.as_ref().and_then(|m| m.get("code")).and_then(Value::as_str)
}

#[tokio::test]
async fn arguments_over_the_limits_are_recorded_and_shown_as_the_provider_is_sent_them() {
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(2 << 20));
    let deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(64), "]".repeat(64));
    let ok = r#"{"x":"ok"}"#;
    let server = MockServer::start([
        calls_reply(&[("c0", "echo", &big), ("c1", "echo", &deep), ("c2", "echo", ok), ("c3", "nope", &big)]),
        Reply::sse_text("done"),
        Reply::sse_text("again"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (shown, ran) = (Arc::new(Shown::default()), Ran::default());
    let a = agent(&server, dir.path(), ToolRegistry::new(), &shown, &ran);
    let log = EventLog::new();
    let out = a.run("s", "q1", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(final_text(&out).as_deref(), Some("done"));
    let out = a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(final_text(&out).as_deref(), Some("again"));

    // Saved, the session is small: the 4 MiB of refused arguments are nowhere.
    let on_disk = bytes_on_disk(dir.path());
    assert!(on_disk < 64 << 10, "the session takes {on_disk} bytes");
    // Only the call within the limits ran, and only it went through the before-hooks.
    assert_eq!(*ran.lock().unwrap(), [ok]);
    assert_eq!(*shown.before_tool.lock().unwrap(), ["c2"]);
    // The refusals tell the model what was wrong (the registry's: an unknown tool is that first).
    let events = log.events();
    let too_large = result_of(&events, "c0");
    assert_eq!(code(too_large), Some(codes::JSON_TOO_LARGE));
    assert!(
        too_large.to_model_text().contains(&format!("{} bytes", big.len())),
        "{}",
        too_large.to_model_text()
    );
    assert!(too_large.to_model_text().contains("1048576"), "{}", too_large.to_model_text());
    assert_eq!(code(result_of(&events, "c1")), Some(codes::JSON_TOO_DEEP));
    assert_eq!(code(result_of(&events, "c2")), None);
    assert_eq!(code(result_of(&events, "c3")), Some(codes::TOOL_NOT_FOUND));

    let recorded = ["{}", "{}", ok, "{}"];
    // The deltas stream the text as the model sends it; the finished call carries what is recorded.
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallArgumentsDelta { index: 0, delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, big);
    let finished: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallFinished { call, .. } => Some(call.arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(finished, recorded);
    assert_eq!(shown.answers.lock().unwrap()[0], recorded);
    // The state, the hooks' view of each later request and each request sent agree.
    let state = a.state("s").await.unwrap().unwrap();
    let kept: Vec<&str> = state.messages[1].tool_calls().iter().map(|c| c.arguments.as_str()).collect();
    assert_eq!(kept, recorded);
    let sent = sent_arguments(&server);
    assert_eq!(sent[1..], [recorded.to_vec(), recorded.to_vec()]);
    assert_eq!(*shown.requests.lock().unwrap(), sent);
}

/// The limits are the registry's: arguments a registry with lower limits refuses are recorded
/// (and sent) as `"{}"`, though a default registry would have run them.
#[tokio::test]
async fn a_registry_with_lower_limits_records_what_it_refuses_as_an_empty_object() {
    let args = format!(r#"{{"x":"{}"}}"#, "y".repeat(2048));
    let server = MockServer::start([calls_reply(&[("c0", "echo", &args)]), Reply::sse_text("done")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (shown, ran) = (Arc::new(Shown::default()), Ran::default());
    let tools = ToolRegistry::with_limits(JsonLimits { max_bytes: 1024, ..JsonLimits::default() });
    let a = agent(&server, dir.path(), tools, &shown, &ran);
    let log = EventLog::new();
    let out = a.run("s", "q", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(final_text(&out).as_deref(), Some("done"));
    assert!(ran.lock().unwrap().is_empty());
    let events = log.events();
    let result = result_of(&events, "c0");
    assert_eq!(code(result), Some(codes::JSON_TOO_LARGE));
    assert!(result.to_model_text().contains("limit of 1024 bytes"), "{}", result.to_model_text());
    let state = a.state("s").await.unwrap().unwrap();
    assert_eq!(state.messages[1].tool_calls()[0].arguments, "{}");
    assert_eq!(sent_arguments(&server)[1], ["{}"]);
}

/// The limits are the registry's whatever they are: arguments over the default limits that a
/// registry with higher limits takes run, and are recorded, shown to the hooks and sent back as
/// they came; before, they were recorded whole but sent as `"{}"` (the request checked the
/// default limits), so the state and the hooks' view of each request held what was never sent.
#[tokio::test]
async fn a_registry_with_higher_limits_records_and_sends_the_arguments_it_takes() {
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(2 << 20));
    let server = MockServer::start([calls_reply(&[("c0", "echo", &big)]), Reply::sse_text("done")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (shown, ran) = (Arc::new(Shown::default()), Ran::default());
    let roomy = ToolRegistry::with_limits(JsonLimits { max_bytes: 4 << 20, ..JsonLimits::default() });
    let a = agent(&server, dir.path(), roomy, &shown, &ran);
    let log = EventLog::new();
    let out = a.run("s", "q", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(final_text(&out).as_deref(), Some("done"));
    assert_eq!(*ran.lock().unwrap(), [big.as_str()]);
    assert_eq!(code(result_of(&log.events(), "c0")), None);
    let state = a.state("s").await.unwrap().unwrap();
    assert_eq!(state.messages[1].tool_calls()[0].arguments, big);
    assert_eq!(sent_arguments(&server)[1], std::slice::from_ref(&big));
    assert_eq!(shown.requests.lock().unwrap()[1], [big]);
}

/// A session whose calls a registry with higher limits ran (or saved by an earlier version with
/// refused arguments) holds arguments over the default limits: loaded by an agent with the
/// default limits, the session goes on and the provider is sent `"{}"` for them.
#[tokio::test]
async fn a_saved_session_holding_arguments_over_the_limits_is_loaded_and_sends_an_empty_object() {
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(2 << 20));
    let server = MockServer::start([
        calls_reply(&[("c0", "echo", &big)]),
        Reply::sse_text("done"),
        Reply::sse_text("again"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (shown, ran) = (Arc::new(Shown::default()), Ran::default());
    let roomy = ToolRegistry::with_limits(JsonLimits { max_bytes: 4 << 20, ..JsonLimits::default() });
    let a = agent(&server, dir.path(), roomy, &shown, &ran);
    let out = a.run("s", "q1", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(final_text(&out).as_deref(), Some("done"));
    assert_eq!(ran.lock().unwrap().len(), 1);
    drop(a);

    let b = agent(&server, dir.path(), ToolRegistry::new(), &Arc::new(Shown::default()), &Ran::default());
    assert_eq!(b.state("s").await.unwrap().unwrap().messages[1].tool_calls()[0].arguments, big);
    let out = b.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(final_text(&out).as_deref(), Some("again"));
    let requests = server.requests();
    // The registry that ran the call sent its arguments back; the default one sends `"{}"`.
    assert_eq!(sent_arguments(&server)[1..], [vec![big], vec!["{}".to_string()]]);
    assert!(requests[2].body.len() < 4096, "a body of {} bytes", requests[2].body.len());
}
