//! What the runtime records of a model's answer, and how the history is sent back: an answer with
//! neither text nor calls (reasoning cut at the token limit, a `content_filter` stop, an empty
//! `stop`) is not recorded and never sent back as an empty assistant message (Moonshot and Mistral
//! answer 400 to one); a tool call's arguments cut off at the token limit get the result code
//! `tool_arguments_truncated` and go back on the wire as `"{}"` (vLLM and strict gateways reject
//! arguments that are not a JSON object), and so do arguments the registry refused for their size
//! or depth (they would go with every later request); a call's name model APIs refuse goes back by
//! a stand-in they accept; a tool-call message carries `"content": null`; the last
//! answer's finish reason is on the outcome and on the `run_finished` event.
//!
//! Each request the agent sends is checked the way strict providers check it ([`strict_check`]).

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::state::{AgentState, FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, ToolDefinition, ToolResult};
use mock_server::{chunk, MockServer, Reply};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

type Ran = Arc<Mutex<Vec<String>>>;

fn agent(server: &MockServer, dir: &std::path::Path, ran: &Ran, streaming: bool) -> arkagent::agent::Agent {
    agent_with(server, dir, ran, AgentConfig { streaming, ..AgentConfig::default() }, None)
}

fn agent_with(
    server: &MockServer,
    dir: &std::path::Path,
    ran: &Ran,
    config: AgentConfig,
    hook: Option<Arc<dyn AgentHook>>,
) -> arkagent::agent::Agent {
    let client_config = ClientConfig::custom(server.base_url(), "m", "sk-answers")
        .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() });
    let client = Arc::new(OpenAiCompatibleClient::new(client_config).unwrap());
    let mut builder = AgentBuilder::new(client, Arc::new(FileStore::new(dir))).config(config);
    if let Some(hook) = hook {
        builder = builder.hook(hook);
    }
    let agent = builder.build();
    let log = ran.clone();
    agent
        .register_tool(
            ToolDefinition::new(
                "echo",
                "echo",
                json!({"type":"object","properties":{"x":{"type":"string"}}}),
            ),
            Arc::new(FnExecutor(move |args: serde_json::Map<String, Value>, _c| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(Value::Object(args).to_string());
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    agent
}

/// What Moonshot, Mistral and vLLM refuse in a request's messages: an assistant message with
/// neither non-empty `content` nor `tool_calls`, a tool-call message without a `content` key
/// (one-api, langchain4j), arguments that are not a JSON object text; and what DeepSeek's reasoner
/// and Qwen refuse: a system message anywhere but first, a first message after the system message
/// that is no user message.
fn strict_check(request: &Value) -> Result<(), String> {
    let messages = request["messages"].as_array().unwrap();
    if let Some(m) = messages.iter().skip(1).find(|m| m["role"] == "system") {
        return Err(format!("a system message after the first: {m}"));
    }
    if let Some(m) = messages.iter().find(|m| m["role"] != "system").filter(|m| m["role"] != "user") {
        return Err(format!("the first message after the system message is no user message: {m}"));
    }
    // DeepSeek's reasoner: "does not support successive user or assistant messages" (400).
    for pair in request["messages"].as_array().unwrap().windows(2) {
        if pair[0]["role"] == pair[1]["role"]
            && matches!(pair[0]["role"].as_str(), Some("user" | "assistant"))
        {
            return Err(format!("successive {} messages: {} {}", pair[0]["role"], pair[0], pair[1]));
        }
    }
    for m in request["messages"].as_array().unwrap() {
        if m["role"] != "assistant" {
            continue;
        }
        let text = m.get("content").and_then(Value::as_str).is_some_and(|t| !t.is_empty());
        let calls = m.get("tool_calls").and_then(Value::as_array);
        match calls {
            None if !text => return Err(format!("empty assistant message: {m}")),
            None => {}
            Some(calls) => {
                if calls.is_empty() {
                    return Err(format!("empty tool_calls: {m}"));
                }
                if m.get("content").is_none() {
                    return Err(format!("tool-call message without a content key: {m}"));
                }
                for c in calls {
                    // OpenAI: `messages[i].tool_calls[j].function.name` must match
                    // `^[a-zA-Z0-9_-]{1,64}$` (400 otherwise).
                    let name = c["function"]["name"].as_str().unwrap();
                    if !is_api_name(name) {
                        return Err(format!("a call name model APIs refuse: {name:?}"));
                    }
                    let args = c["function"]["arguments"].as_str().unwrap();
                    if !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()) {
                        return Err(format!("arguments are not a JSON object: {args}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether model APIs accept `name` as a tool or call name (`^[a-zA-Z0-9_-]{1,64}$`).
fn is_api_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn finished(out: &RunOutcome) -> (RunStatus, Option<String>, Option<String>) {
    match out {
        RunOutcome::Finished { status, final_text, finish_reason, .. } => {
            (*status, final_text.clone(), finish_reason.clone())
        }
        RunOutcome::Suspended { .. } => panic!("suspended"),
    }
}

fn run_finished_reason(log: &EventLog) -> Option<String> {
    match log.events().last() {
        Some(AgentEvent::RunFinished { finish_reason, .. }) => finish_reason.clone(),
        other => panic!("last event: {other:?}"),
    }
}

#[tokio::test]
async fn a_reasoning_only_answer_cut_at_the_limit_is_not_recorded_and_the_next_turn_works() {
    let server = MockServer::start([
        Reply::sse_chunks(&[
            chunk(json!({"role":"assistant","reasoning_content":"thinking..."}), None),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"length"}],
                   "usage":{"prompt_tokens":7,"completion_tokens":100,"total_tokens":107}}),
        ]),
        Reply::sse_text("hello"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let log = EventLog::new();
    let out = a.run("s", "q1", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out), (RunStatus::Completed, None, Some("length".into())));
    assert_eq!(run_finished_reason(&log), Some("length".into()));
    let state = a.state("s").await.unwrap().unwrap();
    assert!(
        state.messages.iter().all(|m| !matches!(m, ChatMessage::Assistant { .. })),
        "{:?}",
        state.messages
    );
    // Its usage still counts.
    assert_eq!(state.usage.completion_tokens, 100);

    let log = EventLog::new();
    let out = a.run("s", "q2", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out), (RunStatus::Completed, Some("hello".into()), Some("stop".into())));
    assert_eq!(run_finished_reason(&log), Some("stop".into()));
    let second = server.requests()[1].json();
    strict_check(&second).unwrap();
    // The question left without an answer and the next one go as one user message.
    assert_eq!(second["messages"], json!([{"role":"user","content":"q1\n\nq2"}]));
    // The history keeps both as they were.
    let state = a.state("s").await.unwrap().unwrap();
    assert_eq!(state.messages[..2], [ChatMessage::user("q1"), ChatMessage::user("q2")]);
}

/// A model that calls a tool by a name model APIs refuse (OpenAI validates every call name of the
/// history) is answered `tool_not_found`, quoting the name as written; the history keeps that
/// name, and each later request sends a stand-in (refused characters as `_`, cut to 64,
/// `unknown_tool` for none), so the session goes on (kept, every later request was refused).
#[tokio::test]
async fn a_call_name_model_apis_refuse_goes_back_by_a_stand_in() {
    let long = "e".repeat(200);
    // name as written (None: `"name": null`), the name sent back.
    let cases: [(Option<&str>, &str); 7] = [
        (Some("functions.echo"), "functions_echo"),
        (Some(" echo "), "_echo_"),
        (Some("echo<|channel|>commentary"), "echo__channel__commentary"),
        (Some("\u{435}cho"), "_cho"),
        (Some(""), "unknown_tool"),
        (None, "unknown_tool"),
        (Some(&long), &long[..64]),
    ];
    let mut chunks = vec![chunk(json!({"role":"assistant"}), None)];
    for (index, (name, _)) in cases.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls":[{"index":index,"id":format!("c{index}"),"type":"function",
                "function":{"name":name,"arguments":r#"{"x":"1"}"#}}]}),
            None,
        ));
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    let server =
        MockServer::start([Reply::sse_chunks(&chunks), Reply::sse_text("done"), Reply::sse_text("again")])
            .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let log = EventLog::new();
    let out = a.run("s", "q1", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("done"));
    let out = a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("again"));
    assert!(ran.lock().unwrap().is_empty());

    // Every request is one a strict provider takes, with the stand-ins in place of the names.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        let body = request.json();
        strict_check(&body).unwrap();
        let sent: Vec<Value> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
            .map(|c| c["function"]["name"].clone())
            .collect();
        let stand_ins: Vec<Value> = cases.iter().map(|(_, wire)| json!(wire)).collect();
        assert_eq!(sent, stand_ins);
    }
    // The history keeps what the model wrote; each result names it, as written, and its stand-in.
    let state = a.state("s").await.unwrap().unwrap();
    let recorded: Vec<String> =
        state.messages.iter().flat_map(|m| m.tool_calls()).map(|c| c.name.clone()).collect();
    let written: Vec<String> = cases.iter().map(|(name, _)| name.unwrap_or("").to_string()).collect();
    assert_eq!(recorded, written);
    for (index, (name, wire)) in cases.iter().enumerate() {
        let result = log
            .events()
            .iter()
            .find_map(|e| match e {
                AgentEvent::ToolResult { call_id, result, .. } if *call_id == format!("c{index}") => {
                    Some(result.to_model_text())
                }
                _ => None,
            })
            .unwrap();
        let quoted: String = name.unwrap_or("").chars().take(80).collect();
        assert!(result.starts_with("error [tool_not_found]: Tool not found: "), "{result}");
        assert!(result.contains(&format!("{quoted:?}")), "{result}");
        assert!(result.contains(&format!("as {wire:?}")), "{result}");
    }
}

/// A stand-in never goes by the name of a tool the request offers: else the history would show a
/// call of the real tool (`query_order`) answered `tool_not_found`. A taken stand-in gets the
/// first free suffix (`_1`, `_2`...), cut to fit in 64 characters.
#[tokio::test]
async fn a_stand_in_never_goes_by_the_name_of_an_offered_tool() {
    let (a64, a65) = ("a".repeat(64), "a".repeat(65));
    let cut = format!("{}_1", "a".repeat(62));
    // name as written, the name sent back.
    let cases = [("query order", "query_order_2"), ("", "unknown_tool_1"), (a65.as_str(), cut.as_str())];
    let mut chunks = vec![chunk(json!({"role":"assistant"}), None)];
    for (index, (name, _)) in cases.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls":[{"index":index,"id":format!("c{index}"),"type":"function",
                "function":{"name":name,"arguments":r#"{"x":"1"}"#}}]}),
            None,
        ));
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    let server = MockServer::start([Reply::sse_chunks(&chunks), Reply::sse_text("done")]).await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let tools = ["query_order", "query_order_1", "unknown_tool", a64.as_str()];
    for name in tools {
        let ran = ran.clone();
        let executor = FnExecutor(move |_args: serde_json::Map<String, Value>, _c| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push("ran".to_string());
                Ok(ToolResult::text("ok"))
            }
        });
        a.register_tool(ToolDefinition::new(name, "d", json!({"type":"object"})), Arc::new(executor))
            .unwrap();
    }
    let log = EventLog::new();
    let out = a.run("s", "q", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("done"));
    assert!(ran.lock().unwrap().is_empty());

    let body = server.requests()[1].json();
    strict_check(&body).unwrap();
    let offered: Vec<Value> =
        body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].clone()).collect();
    let sent: Vec<Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["function"]["name"].clone())
        .collect();
    assert_eq!(sent, cases.iter().map(|(_, wire)| json!(wire)).collect::<Vec<_>>());
    assert!(sent.iter().all(|name| !offered.contains(name)), "{sent:?} among {offered:?}");
    // Each result names the stand-in its call goes back by.
    for (index, (_, wire)) in cases.iter().enumerate() {
        let result = log
            .events()
            .iter()
            .find_map(|e| match e {
                AgentEvent::ToolResult { call_id, result, .. } if *call_id == format!("c{index}") => {
                    Some(result.to_model_text())
                }
                _ => None,
            })
            .unwrap();
        assert!(result.contains(&format!("as {wire:?}")), "{result}");
    }
}

#[tokio::test]
async fn a_question_whose_model_call_failed_goes_with_the_next_one() {
    // The provider fails (no retry), the user asks again: the first question has no answer.
    let server = MockServer::start([
        Reply::json(500, &json!({"error":{"message":"overloaded"}})),
        Reply::sse_text("hello"),
        Reply::sse_text("again"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let out = a.run("s", "q1", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).0, RunStatus::Failed);
    let out = a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("hello"));
    let out = a.run("s", "q3", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("again"));
    for request in &server.requests()[1..] {
        strict_check(&request.json()).unwrap();
    }
    assert_eq!(
        server.requests()[2].json()["messages"],
        json!([{"role":"user","content":"q1\n\nq2"},{"role":"assistant","content":"hello"},{"role":"user","content":"q3"}])
    );
}

#[tokio::test]
async fn an_answer_whose_question_was_trimmed_away_is_not_sent() {
    // The first question alone is over the budget: trimming drops it, and its answer with it, so
    // the request opens with the second question (DeepSeek's reasoner refuses an answer first).
    let server = MockServer::start([Reply::sse_text("Answer one."), Reply::sse_text("Answer two.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = AgentConfig {
        system_prompt: Some("sys".into()),
        context_budget_tokens: Some(40),
        ..AgentConfig::default()
    };
    let a = agent_with(&server, dir.path(), &Ran::default(), config, None);
    let first = format!("first question {}", "x".repeat(200));
    a.run("s", &first, &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let out = a.run("s", "second question", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("Answer two."));
    let request = server.requests()[1].json();
    strict_check(&request).unwrap();
    assert_eq!(
        request["messages"],
        json!([{"role":"system","content":"sys"},{"role":"user","content":"second question"}])
    );
    // The state keeps everything.
    assert_eq!(a.state("s").await.unwrap().unwrap().messages.len(), 5);
}

/// An after-hook that injects a system reminder after every call.
struct SystemReminder;

#[async_trait::async_trait]
impl AgentHook for SystemReminder {
    async fn after_tool_call(
        &self,
        _c: &HookContext<'_>,
        _call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        AfterToolCall {
            action: AfterToolCallAction::Proceed(None),
            inject: vec![ChatMessage::system("remember: be brief")],
        }
    }
}

#[tokio::test]
async fn a_system_reminder_a_hook_injects_goes_as_a_user_message_in_its_place() {
    let server = MockServer::start([
        Reply::sse_chunks(&[
            chunk(
                json!({"role":"assistant","tool_calls":[
                {"index":0,"id":"c1","type":"function","function":{"name":"echo","arguments":"{}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ]),
        Reply::sse_text("done"),
        Reply::sse_text("again"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = AgentConfig {
        system_prompt: Some("sys".into()),
        context_budget_tokens: Some(125),
        ..AgentConfig::default()
    };
    let a = agent_with(&server, dir.path(), &Ran::default(), config, Some(Arc::new(SystemReminder)));
    let out = a.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("done"));
    let request = server.requests()[1].json();
    strict_check(&request).unwrap();
    let roles: Vec<&str> =
        request["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(request["messages"][4]["content"], "remember: be brief");
    // The state keeps what the hook injected.
    let state = a.state("s").await.unwrap().unwrap();
    assert!(state.messages.contains(&ChatMessage::system("remember: be brief")));
    // A long next question trims the first turn away, the reminder with it (a system message
    // after the opening ones is trimmed as any other): the request opens with the question.
    let second = "y".repeat(400);
    a.run("s", &second, &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let request = server.requests()[2].json();
    strict_check(&request).unwrap();
    assert_eq!(
        request["messages"],
        json!([{"role":"system","content":"sys"},{"role":"user","content":second}])
    );
}

#[tokio::test]
async fn an_empty_content_filter_answer_is_not_recorded_without_streaming() {
    let server = MockServer::start([
        Reply::json(
            200,
            &json!({"id":"x","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]}),
        ),
        Reply::json(
            200,
            &json!({"id":"x","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, false);
    let out = a.run("s", "q1", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out), (RunStatus::Completed, None, Some("content_filter".into())));
    let out = a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("hi"));
    strict_check(&server.requests()[1].json()).unwrap();
}

#[tokio::test]
async fn a_session_saved_with_an_empty_assistant_message_keeps_working() {
    // A session an earlier version saved: its empty answer was recorded.
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let mut state = AgentState::new("s");
    state.messages = vec![
        ChatMessage::user("q1"),
        ChatMessage::Assistant { content: None, reasoning_content: Some("r".into()), tool_calls: vec![] },
    ];
    state.status = RunStatus::Completed;
    store.commit(&state, &[]).await.unwrap();

    let server = MockServer::start([Reply::sse_text("fine")]).await;
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let out = a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("fine"));
    let request = server.requests()[0].json();
    strict_check(&request).unwrap();
    assert_eq!(request["messages"], json!([{"role":"user","content":"q1\n\nq2"}]));
}

#[tokio::test]
async fn arguments_cut_at_the_token_limit_are_a_truncated_result_and_go_back_as_an_empty_object() {
    let server = MockServer::start([
        Reply::sse_chunks(&[
            chunk(json!({"role":"assistant","tool_calls":[
                {"index":0,"id":"c0","type":"function","function":{"name":"echo","arguments":"{\"x\":\"ok\"}"}},
                {"index":1,"id":"c1","type":"function","function":{"name":"echo","arguments":"{\"x\": \"hel"}}]}), None),
            chunk(json!({}), Some("length")),
        ]),
        Reply::sse_text("done"),
        Reply::sse_text("again"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let log = EventLog::new();
    let out = a.run("s", "q1", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out), (RunStatus::Completed, Some("done".into()), Some("stop".into())));
    // The complete call ran, the cut one did not.
    assert_eq!(*ran.lock().unwrap(), [r#"{"x":"ok"}"#]);
    let results: Vec<(String, Option<String>, bool)> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { call_id, result, .. } => Some((
                call_id,
                result
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                result.is_error,
            )),
            _ => None,
        })
        .collect();
    assert!(results.contains(&("c0".into(), None, false)), "{results:?}");
    assert!(
        results.contains(&("c1".into(), Some(codes::TOOL_ARGUMENTS_TRUNCATED.into()), true)),
        "{results:?}"
    );
    let second = server.requests()[1].json();
    strict_check(&second).unwrap();
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], Value::Null);
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["arguments"], r#"{"x":"ok"}"#);
    assert_eq!(msgs[1]["tool_calls"][1]["function"]["arguments"], "{}");
    // Results in call order; the model is told its output was cut off.
    assert_eq!(
        (msgs[2]["tool_call_id"].as_str(), msgs[3]["tool_call_id"].as_str()),
        (Some("c0"), Some("c1"))
    );
    let told = msgs[3]["content"].as_str().unwrap();
    assert!(told.contains("token limit") && told.contains("max"), "{told}");
    // The state keeps the raw text the model produced.
    let state = a.state("s").await.unwrap().unwrap();
    assert_eq!(state.messages[1].tool_calls()[1].arguments, "{\"x\": \"hel");
    // And the next turn still sends an acceptable history.
    a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    strict_check(&server.requests()[2].json()).unwrap();
}

#[tokio::test]
async fn malformed_arguments_of_a_finished_answer_stay_json_invalid_and_go_back_as_an_empty_object() {
    let server = MockServer::start([
        Reply::json(
            200,
            &json!({"choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"echo","arguments":"{bad"}}]},
            "finish_reason":"tool_calls"}]}),
        ),
        Reply::json(
            200,
            &json!({"choices":[{"index":0,"message":{"content":"sorry"},"finish_reason":"stop"}]}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, false);
    let log = EventLog::new();
    a.run("s", "q1", &log, &CancellationSignal::new()).await.unwrap();
    assert!(ran.lock().unwrap().is_empty());
    let code = log.events().into_iter().find_map(|e| match e {
        AgentEvent::ToolResult { result, .. } => {
            result.metadata.as_ref().and_then(|m| m.get("code")).and_then(Value::as_str).map(str::to_string)
        }
        _ => None,
    });
    assert_eq!(code.as_deref(), Some(codes::JSON_INVALID));
    let second = server.requests()[1].json();
    strict_check(&second).unwrap();
    assert_eq!(second["messages"][1]["tool_calls"][0]["function"]["arguments"], "{}");
}

/// Arguments the registry refused for their size or depth (`json_too_large`, `json_too_deep`)
/// never ran and go back as `"{}"` (and are recorded so): sent as they were, 2 MiB would go with
/// every later request of the session (a server with a body limit answers each with 413).
#[tokio::test]
async fn arguments_over_the_limits_are_refused_and_go_back_as_an_empty_object() {
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(2 << 20));
    let deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(64), "]".repeat(64));
    let mut chunks = vec![chunk(
        json!({"role":"assistant","tool_calls":[{"index":0,"id":"c0","type":"function",
               "function":{"name":"echo","arguments":""}}]}),
        None,
    )];
    for piece in big.as_bytes().chunks(64 << 10) {
        let piece = std::str::from_utf8(piece).unwrap();
        chunks.push(chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":piece}}]}), None));
    }
    chunks.push(chunk(
        json!({"tool_calls":[
            {"index":1,"id":"c1","type":"function","function":{"name":"echo","arguments":deep}},
            {"index":2,"id":"c2","type":"function","function":{"name":"echo","arguments":r#"{"x":"ok"}"#}}]}),
        Some("tool_calls"),
    ));
    let server =
        MockServer::start([Reply::sse_chunks(&chunks), Reply::sse_text("done"), Reply::sse_text("again")])
            .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let a = agent(&server, dir.path(), &ran, true);
    let log = EventLog::new();
    let out = a.run("s", "q1", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("done"));
    assert_eq!(*ran.lock().unwrap(), [r#"{"x":"ok"}"#]);
    let codes_of: Vec<Option<String>> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(
                result
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(codes_of, [Some(codes::JSON_TOO_LARGE.into()), Some(codes::JSON_TOO_DEEP.into()), None]);
    let out = a.run("s", "q2", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("again"));
    // Both later bodies, as the client sent them, are small and carry "{}" for the refused calls.
    for request in &server.requests()[1..] {
        assert!(request.body.len() < 4096, "a body of {} bytes", request.body.len());
        let body = request.json();
        strict_check(&body).unwrap();
        let args: Vec<&str> = body["messages"][1]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(args, ["{}", "{}", r#"{"x":"ok"}"#]);
    }
    // The state records them as they are sent (`tests/arguments_over_limits.rs`).
    let state = a.state("s").await.unwrap().unwrap();
    let kept: Vec<&str> = state.messages[1].tool_calls().iter().map(|c| c.arguments.as_str()).collect();
    assert_eq!(kept, ["{}", "{}", r#"{"x":"ok"}"#]);
}

#[tokio::test]
async fn a_truncated_call_beside_one_awaiting_approval_is_answered_once_after_a_restart() {
    let server = MockServer::start([
        Reply::sse_chunks(&[
            chunk(json!({"role":"assistant","tool_calls":[
                {"index":0,"id":"c0","type":"function","function":{"name":"pay","arguments":"{\"x\":\"1\"}"}},
                {"index":1,"id":"c1","type":"function","function":{"name":"echo","arguments":"{\"x\": \"hel"}}]}), None),
            chunk(json!({}), Some("length")),
        ]),
        Reply::sse_text("paid"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let build = || {
        let a = agent(&server, dir.path(), &ran, true);
        let log = ran.clone();
        a.register_tool(
            ToolDefinition::new("pay", "pay", json!({"type":"object"}))
                .with_risk(arkagent::RiskLevel::Sensitive),
            Arc::new(FnExecutor(move |_args: serde_json::Map<String, Value>, _c| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push("pay".into());
                    Ok(ToolResult::text("paid"))
                }
            })),
        )
        .unwrap();
        a
    };
    let a = build();
    let out = a.run("s", "pay", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    // Only the call that can run asks for approval.
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].tool_call.id, "c0");
    drop(a);
    // Another process decides and resumes.
    let a = build();
    a.approve("s", &batch.items[0].approval_id).await.unwrap();
    let log = EventLog::new();
    let out = a.resume("s", &log, &CancellationSignal::new()).await.unwrap();
    assert_eq!(finished(&out).1.as_deref(), Some("paid"));
    assert_eq!(*ran.lock().unwrap(), ["pay"]);
    let second = server.requests()[1].json();
    strict_check(&second).unwrap();
    let results: Vec<(&str, &str)> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    // Both answered once, in call order.
    assert_eq!(results.iter().map(|r| r.0).collect::<Vec<_>>(), ["c0", "c1"], "{results:?}");
    assert_eq!(results[0].1, "paid");
    assert!(results[1].1.contains(codes::TOOL_ARGUMENTS_TRUNCATED), "{results:?}");
}
