//! A message without text is never sent: strict providers refuse one (DashScope: "Content length
//! must be greater than 0"), and the history sends it with every later request. A system prompt
//! that is empty or only whitespace (invisible characters included) is none; a run's input (or a
//! `delegate_task` task) that is so is refused with `argument_invalid` before anything is sent or
//! written.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, DELEGATE_TASK};
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::{codes, CancellationSignal};
use mock_server::{chunk, MockServer, Reply};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

fn agent(server: &MockServer, dir: &Path, system_prompt: Option<&str>) -> Agent {
    let config = ClientConfig::custom(server.base_url(), "m", "sk-blank")
        .with_retry(RetryPolicy { max_retries: 0, ..RetryPolicy::default() });
    let client = Arc::new(OpenAiCompatibleClient::new(config).unwrap());
    AgentBuilder::new(client, Arc::new(FileStore::new(dir)))
        .config(AgentConfig { system_prompt: system_prompt.map(String::from), ..AgentConfig::default() })
        .build()
}

fn messages(server: &MockServer, k: usize) -> Vec<Value> {
    server.requests()[k].json()["messages"].as_array().unwrap().clone()
}

/// Empty, only whitespace, or only whitespace and invisible characters (Unicode's
/// `Default_Ignorable_Code_Point`: zero-width space, non-joiner and joiner, word joiner, byte
/// order mark, direction marks, soft hyphen, Mongolian vowel separator, invisible operators,
/// Hangul filler, combining grapheme joiner, bidi embeddings and isolates, tag characters,
/// variation selectors), which show nothing either.
const BLANKS: [&str; 16] = [
    "",
    " ",
    "\n\t ",
    "\u{3000}",
    "\u{200B}",
    " \u{200C}\u{200D}\n",
    "\u{2060}\u{FEFF}",
    "\u{200E}\u{200F}",
    "\u{00AD} ",
    "\u{180E}",
    "\u{2061}\u{2062}\u{2063}\u{2064}",
    "\u{3164}\u{FFA0}",
    "\u{034F}",
    "\u{202A}\u{202C}\u{202E}\u{2066}\u{2069}",
    "\u{E0020}\u{E0001}\u{E007F}",
    "\u{FE0F}\u{E0100}\u{180B}",
];

#[tokio::test]
async fn an_empty_or_blank_system_prompt_is_not_sent() {
    for (k, prompt) in BLANKS.iter().enumerate() {
        let server = MockServer::start([Reply::sse_text("a")]).await;
        let dir = tempfile::tempdir().unwrap();
        let a = agent(&server, dir.path(), Some(prompt));
        let out = a.run("s", "你好", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed, "prompt {k}");
        assert_eq!(messages(&server, 0), [json!({"role": "user", "content": "你好"})], "prompt {k}");
        let state = a.state("s").await.unwrap().unwrap();
        assert_eq!(state.messages.len(), 2, "the question and the answer only: {:?}", state.messages);
    }
    // A prompt with text is sent as it is, whitespace around it included.
    let server = MockServer::start([Reply::sse_text("a")]).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&server, dir.path(), Some(" 你是助手 \n"));
    a.run("s", "你好", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(messages(&server, 0)[0], json!({"role": "system", "content": " 你是助手 \n"}));
}

#[tokio::test]
async fn an_empty_or_blank_input_is_refused_before_anything_is_sent_or_written() {
    let server = MockServer::start([Reply::sse_text("a")]).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&server, dir.path(), Some("你是助手"));
    let store = FileStore::new(dir.path());
    for (k, input) in BLANKS.iter().enumerate() {
        let log = EventLog::new();
        let e = a.run("new", input, &log, &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(e.code, codes::ARGUMENT_INVALID, "input {k}: {e:?}");
        assert!(e.message.starts_with("the input is "), "{}", e.message);
        assert!(log.events().is_empty(), "input {k}: {:?}", log.events());
        assert!(store.load("new").await.unwrap().is_none(), "input {k}: no session written");
    }
    assert!(server.requests().is_empty());

    // On a session with a history: nothing is added to it, and the next message goes as before.
    a.run("s", "q1", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let before = store.load("s").await.unwrap().unwrap();
    for input in BLANKS {
        let e = a.run("s", input, &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
        assert_eq!(e.code, codes::ARGUMENT_INVALID);
    }
    let after = store.load("s").await.unwrap().unwrap();
    assert_eq!(after.messages, before.messages);
    assert_eq!(after.run_id, before.run_id);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_blank_task_of_delegate_task_is_answered_argument_invalid_without_a_worker() {
    let call = |task: &str| {
        Reply::sse_chunks(&[
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "d1", "type": "function",
                       "function": {"name": DELEGATE_TASK, "arguments": json!({"task": task}).to_string()}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ])
    };
    let server = MockServer::start([call(" \n"), call("\u{200B}\u{FEFF}"), Reply::sse_text("好的")]).await;
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(agent(&server, dir.path(), None));
    a.enable_delegation(None).unwrap();
    let out = a.run("parent", "分派", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    // The parent's model is asked three times, no worker once.
    assert_eq!(server.requests().len(), 3);
    let last = messages(&server, 2);
    let results: Vec<&str> =
        last.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(results.len(), 2);
    assert!(
        results[0].starts_with("error [argument_invalid]: the task of delegate_task is only whitespace"),
        "{}",
        results[0]
    );
    assert!(
        results[1].starts_with(
            "error [argument_invalid]: the task of delegate_task is only whitespace and invisible characters"
        ),
        "{}",
        results[1]
    );
    // No worker session was written.
    let store = FileStore::new(dir.path());
    assert_eq!(store.list().await.unwrap(), ["parent"]);
}
