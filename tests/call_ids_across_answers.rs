//! A call id the model used in an earlier answer of the session is taken: some servers number the
//! calls per answer (`call_0` every round, as vLLM-style servers do), and a history holding two
//! calls with one id is refused by gateways in front of backends that need unique tool-use ids,
//! while the app would get two `tool_result` events for one `call_id`. The runtime renames such
//! an id before anything records the answer (`<id>_<n>`, then a counter), so the renamed id is
//! what the state saves, the model is sent back, the events name, a frozen batch decides by and a
//! `started` record names.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, RunOutcome};
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::state::{FileStore, RunStatus, StateStore, ToolRunRecord};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolResult};
use mock_server::{chunk, MockServer, Reply};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the tools ran with (`x`, in the order they ran; calls of one batch run concurrently), and
/// the calls the store held as `started` when each ran.
#[derive(Default)]
struct Seen {
    ran: Mutex<Vec<(String, Vec<String>)>>,
}

impl Seen {
    fn ran(&self) -> Vec<String> {
        let mut ran: Vec<String> = self.ran.lock().unwrap().iter().map(|r| r.0.clone()).collect();
        ran.sort();
        ran
    }

    fn started_when(&self, x: &str) -> Vec<String> {
        self.ran.lock().unwrap().iter().find(|r| r.0 == x).map(|r| r.1.clone()).unwrap()
    }
}

fn agent(server: &MockServer, dir: &Path, seen: &Arc<Seen>, streaming: bool) -> Agent {
    let config = ClientConfig::custom(server.base_url(), "m", "sk-ids")
        .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() });
    let client = Arc::new(OpenAiCompatibleClient::new(config).unwrap());
    let agent = AgentBuilder::new(client, Arc::new(FileStore::new(dir)))
        .config(AgentConfig { streaming, ..AgentConfig::default() })
        .build();
    let schema = json!({"type":"object","properties":{"x":{"type":"string"}}});
    for (name, risk) in [("echo", RiskLevel::Safe), ("wipe", RiskLevel::Dangerous)] {
        let seen = seen.clone();
        let dir: PathBuf = dir.to_path_buf();
        agent
            .register_tool(
                ToolDefinition::new(name, name, schema.clone()).with_risk(risk),
                Arc::new(FnExecutor(move |args: serde_json::Map<String, Value>, _c| {
                    let (seen, dir) = (seen.clone(), dir.clone());
                    async move {
                        // The call is journaled `started` before it runs: what a crash now leaves.
                        let state = FileStore::new(&dir).load("s").await.unwrap().unwrap();
                        let started = state
                            .tool_runs
                            .iter()
                            .filter(|(_, r)| matches!(r, ToolRunRecord::Started { .. }))
                            .map(|(id, _)| id.clone())
                            .collect();
                        let x = args["x"].as_str().unwrap().to_string();
                        seen.ran.lock().unwrap().push((x.clone(), started));
                        Ok(ToolResult::text(format!("ran {x}")))
                    }
                })),
            )
            .unwrap();
    }
    agent
}

/// An answer calling `calls` (id, tool, `x`), streamed or whole.
fn calls_reply(streaming: bool, calls: &[(&str, &str, &str)]) -> Reply {
    let wire: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (id, name, x))| {
            json!({"index": i, "id": id, "type": "function",
                   "function": {"name": name, "arguments": json!({"x": x}).to_string()}})
        })
        .collect();
    if streaming {
        Reply::sse_chunks(&[
            chunk(json!({"role": "assistant", "tool_calls": wire}), None),
            chunk(json!({}), Some("tool_calls")),
        ])
    } else {
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "tool_calls",
                                 "message": {"role": "assistant", "content": null, "tool_calls": wire}}]}),
        )
    }
}

fn text_reply(streaming: bool, text: &str) -> Reply {
    if streaming {
        Reply::sse_text(text)
    } else {
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}]}),
        )
    }
}

/// The call ids of a request's assistant messages, in order, after checking the request the way
/// a backend needing unique tool-use ids does: no id twice, and every tool message answers a call
/// of the assistant message before it.
fn checked_call_ids(request: &Value) -> Vec<String> {
    let mut ids = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for m in request["messages"].as_array().unwrap() {
        match m["role"].as_str().unwrap() {
            "assistant" => {
                assert!(open.is_empty(), "calls left unanswered before {m}");
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = c["id"].as_str().unwrap().to_string();
                    assert!(!ids.contains(&id), "call id {id} twice in one request: {request}");
                    ids.push(id.clone());
                    open.push(id);
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap();
                let at = open.iter().position(|o| o == id).unwrap_or_else(|| panic!("{id} answers no call"));
                open.remove(at);
            }
            _ => {}
        }
    }
    ids
}

fn named(log: &EventLog) -> Vec<String> {
    log.events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallStarted { id, .. } => Some(format!("started {id}")),
            AgentEvent::ToolCallFinished { call, .. } => Some(format!("finished {}", call.id)),
            AgentEvent::ToolResult { call_id, result, .. } => {
                Some(format!("result {call_id} {}", result.to_model_text()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_call_id_of_an_earlier_answer_is_renamed_in_the_history_the_requests_and_the_events() {
    for streaming in [true, false] {
        let server = MockServer::start([
            calls_reply(streaming, &[("call_0", "echo", "first")]),
            calls_reply(streaming, &[("call_0", "echo", "second"), ("call_1", "echo", "beside")]),
            text_reply(streaming, "done"),
            calls_reply(streaming, &[("call_0", "echo", "third")]),
            text_reply(streaming, "done2"),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Seen::default());
        let a = agent(&server, dir.path(), &seen, streaming);
        let first = EventLog::new();
        let out = a.run("s", "q1", &first, &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        let second = EventLog::new();
        let out = a.run("s", "q2", &second, &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);

        assert_eq!(seen.ran(), ["beside", "first", "second", "third"], "streaming {streaming}");
        let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
        assert_eq!(requests.len(), 5);
        let ids: Vec<Vec<String>> = requests.iter().map(checked_call_ids).collect();
        let expected = ["call_0", "call_0_0", "call_1", "call_0_0_2"];
        assert_eq!(ids[1], expected[..1]);
        assert_eq!(ids[2], expected[..3]);
        assert_eq!(ids[3], expected[..3]);
        assert_eq!(ids[4], expected, "streaming {streaming}");

        // The events name each call as the history does: one result per call id in the session.
        let mut events = named(&first);
        events.extend(named(&second));
        let mut results: Vec<&String> = events.iter().filter(|e| e.starts_with("result ")).collect();
        results.sort();
        assert_eq!(
            results,
            [
                "result call_0 ran first",
                "result call_0_0 ran second",
                "result call_0_0_2 ran third",
                "result call_1 ran beside"
            ],
            "streaming {streaming}"
        );
        if streaming {
            for id in expected {
                assert!(events.contains(&format!("started {id}")), "{events:?}");
                assert!(events.contains(&format!("finished {id}")), "{events:?}");
            }
        }
        // The state saves the renamed ids, and each call was journaled `started` under its own.
        let state = a.state("s").await.unwrap().unwrap();
        let saved: Vec<&str> =
            state.messages.iter().flat_map(|m| m.tool_calls()).map(|c| c.id.as_str()).collect();
        assert_eq!(saved, expected);
        let started = seen.started_when("second");
        assert!(
            started.contains(&"call_0_0".to_string()) && !started.contains(&"call_0".to_string()),
            "{started:?}"
        );
        assert_eq!(seen.started_when("third"), ["call_0_0_2"]);
    }
}

#[tokio::test]
async fn a_frozen_batch_decides_and_resumes_by_the_renamed_id_in_another_agent() {
    let server = MockServer::start([
        calls_reply(true, &[("call_0", "echo", "first")]),
        calls_reply(true, &[("call_0", "wipe", "all"), ("call_1", "echo", "beside")]),
        text_reply(true, "wiped"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let a = agent(&server, dir.path(), &seen, true);
    let frozen = EventLog::new();
    let out = a.run("s", "wipe it", &frozen, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].tool_call.id, "call_0_0");
    let asked: Vec<&str> = batch.assistant_message.tool_calls().iter().map(|c| c.id.as_str()).collect();
    assert_eq!(asked, ["call_0_0", "call_1"]);
    assert!(named(&frozen).contains(&"started call_0_0".to_string()), "{:?}", named(&frozen));
    let approval_id = batch.items[0].approval_id.clone();
    drop(a);

    // Another agent over the same state (the app restarted) decides and resumes.
    let b = agent(&server, dir.path(), &seen, true);
    b.approve("s", &approval_id).await.unwrap();
    let resumed = EventLog::new();
    let out = b.resume("s", &resumed, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(seen.ran(), ["all", "beside", "first"]);
    let mut results = named(&resumed);
    results.sort();
    assert_eq!(results, ["result call_0_0 ran all", "result call_1 ran beside"]);
    let started = seen.started_when("all");
    assert!(
        started.contains(&"call_0_0".to_string()) && !started.contains(&"call_0".to_string()),
        "{started:?}"
    );
    let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(requests.len(), 3);
    assert_eq!(checked_call_ids(&requests[2]), ["call_0", "call_0_0", "call_1"]);
    let state = b.state("s").await.unwrap().unwrap();
    assert!(state.pending_approval.is_none());
    let keys: HashSet<&str> = state.messages.iter().filter_map(|m| m.tool_call_id()).collect();
    assert_eq!(keys.len(), 3);
}
