//! Security checks across modules:
//! - a sentinel API key never appears in any byte written to the state directory, in any event
//!   (JSON and Debug), any log line (a raw capturing logger, no redaction), any error message or
//!   Debug output, or anything a tool sees, over full runs with faults against the mock server,
//!   including a server that echoes the key back in its error bodies, and in its answers (also
//!   spelt with JSON escapes in a call's arguments);
//! - session ids with `../`, `/`, NUL or 300 characters are refused by every `StateStore` method
//!   and by every `Agent` entry point, and nothing is created outside the store's root;
//! - JSON 10,000 levels deep and 100 MB inputs are refused without a crash, as tool arguments
//!   through the registry and as state files;
//! - plain http:// to a host other than loopback is refused unless allowed, including URLs that
//!   the HTTP client's parser reads differently from a naive split (backslash, userinfo).
//!
//! Covered elsewhere, not repeated here: a worker agent cannot call `delegate_task` even when a
//! factory or a hook tries to give it (tests/agent_delegate.rs); TLS with a local self-signed CA is
//! accepted only when the CA is passed as an extra root (tests/provider_tls.rs); the basic
//! loopback rule and `allow_insecure_http` (tests/provider_requests.rs).

#[path = "support/log_capture.rs"]
mod log_capture;
#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, RunOutcome};
use arkagent::json::JsonLimits;
use arkagent::provider::{ClientConfig, OpenAiCompatibleClient, RetryPolicy, Timeouts};
use arkagent::state::{AgentState, FileStore, MemoryStore, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{
    codes, CancellationSignal, ChatMessage, RiskLevel, ToolCall, ToolContext, ToolDefinition, ToolRegistry,
    ToolResult,
};
use log_capture::capture;
use mock_server::{End, MockServer, Reply};
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEY: &str = "sk-SENTINEL-9f8e7d6c5b4a";

// ---------------------------------------------------------------------------------------------
// The key never leaks

fn sse(chunks: &[serde_json::Value]) -> Vec<u8> {
    let mut out: Vec<u8> = chunks.iter().flat_map(|c| format!("data: {c}\n\n").into_bytes()).collect();
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn calls_body(calls: &[(&str, &str, &str)]) -> Vec<u8> {
    let mut chunks =
        vec![json!({"choices":[{"index":0,"delta":{"role":"assistant","content":"let me check"}}]})];
    for (i, (id, name, args)) in calls.iter().enumerate() {
        chunks
            .push(json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":id,"type":"function",
            "function":{"name":name,"arguments":args}}]}}]}));
    }
    chunks.push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],
        "usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}));
    sse(&chunks)
}

fn text_body(text: &str) -> Vec<u8> {
    sse(&[
        json!({"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"thinking","content":text}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ])
}

/// What an echoing provider says about a bad key.
fn echo_error(status: u16) -> Reply {
    // `invalid_api_key` only with the 401: with a 500 or 429 the code would name a refused key,
    // which is not retried, where these are the passing faults a retry gets past.
    let code = if status == 401 { "invalid_api_key" } else { "upstream_error" };
    Reply::error(status, code, &format!("Incorrect API key provided: {KEY}. Bearer {KEY}"))
}

type Seen = Arc<Mutex<Vec<String>>>;

fn agent_for(root: &Path, base_url: &str, seen: &Seen) -> Agent {
    agent_with(root, base_url, seen, true)
}

fn agent_with(root: &Path, base_url: &str, seen: &Seen, streaming: bool) -> Agent {
    let config = ClientConfig::custom(base_url, "sec-model", KEY)
        .with_retry(RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            jitter: 0.0,
            max_retry_after: Duration::from_millis(20),
        })
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(2),
            idle: Duration::from_millis(500),
            total: Duration::from_secs(10),
            ..Timeouts::default()
        });
    let client = OpenAiCompatibleClient::new(config).unwrap();
    seen.lock().unwrap().push(format!("{client:?}"));
    let mut tools = ToolRegistry::new();
    for (name, risk) in [("lookup", RiskLevel::Safe), ("wipe", RiskLevel::Dangerous)] {
        let seen = Arc::clone(seen);
        tools
            .register(
                ToolDefinition::new(name, "security test tool", json!({"type":"object"})).with_risk(risk),
                Arc::new(FnExecutor(
                    move |args: serde_json::Map<String, serde_json::Value>, ctx: ToolContext| {
                        let seen = Arc::clone(&seen);
                        async move {
                            // Everything a tool is given, as it could print it.
                            seen.lock().unwrap().push(format!("{ctx:?} {:?} {args:?}", ctx.state));
                            Ok(ToolResult::text("ok"))
                        }
                    },
                )),
            )
            .unwrap();
    }
    let agent = AgentBuilder::new(Arc::new(client), Arc::new(FileStore::new(root)))
        .tools(tools)
        .config(AgentConfig { streaming, ..AgentConfig::default() })
        .build();
    seen.lock().unwrap().push(format!("{agent:?}"));
    agent
}

fn all_bytes_under(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_bytes_under(&path, out);
        } else {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_reaches_state_events_logs_or_errors() {
    let logs = capture();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let events: Arc<Mutex<Vec<AgentEvent>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = Arc::clone(&events);
        move |e: AgentEvent| events.lock().unwrap().push(e)
    };
    let calls = calls_body(&[("c1", "lookup", r#"{"q":"a"}"#), ("c2", "wipe", "{}")]);
    let mut outcomes: Vec<String> = Vec::new();

    // 1. A demo run with faults: an echoing 500 and 429, a reset mid-stream, a slow drip; then a
    //    dangerous call is approved and the run completes.
    let server = MockServer::start([
        echo_error(500),
        echo_error(429).with_header("Retry-After", "0"),
        Reply::sse_in_pieces(&calls, 7, Duration::from_millis(1), End::Complete),
        Reply::error(503, "overloaded", "busy"),
        Reply::sse_in_pieces(&text_body("all done"), 3, Duration::ZERO, End::Complete),
    ])
    .await;
    let agent = agent_for(dir.path(), &server.base_url(), &seen);
    let cancel = CancellationSignal::new();
    let out = agent.run("demo", "clean up", &sink, &cancel).await.unwrap();
    outcomes.push(format!("{out:?}"));
    let RunOutcome::Suspended { batch } = out else { panic!("expected approval: {out:?}") };
    for item in &batch.items {
        let decided = agent.approve("demo", &item.approval_id).await.unwrap();
        outcomes.push(format!("{decided:?}"));
    }
    let out = agent.resume("demo", &sink, &cancel).await.unwrap();
    outcomes.push(format!("{out:?}"));
    assert_eq!(out.status(), arkagent::state::RunStatus::Completed, "{out:?}");
    // The key did go out, in the Authorization header: the checks below could have found it.
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.header("authorization") == Some(&format!("Bearer {KEY}"))));

    // 2. Fatal errors whose bodies echo the key: 401 (not retried), then retries used up on 500s.
    let server = MockServer::start([echo_error(401)]).await;
    let agent = agent_for(dir.path(), &server.base_url(), &seen);
    let out = agent.run("denied", "hi", &sink, &cancel).await.unwrap();
    assert!(matches!(&out, RunOutcome::Finished { error: Some(_), .. }), "{out:?}");
    outcomes.push(format!("{out:?}"));
    if let RunOutcome::Finished { error: Some(e), .. } = &out {
        outcomes.push(e.to_string());
        outcomes.push(e.message.clone());
    }
    let server = MockServer::start((0..5).map(|_| echo_error(500))).await;
    let agent = agent_for(dir.path(), &server.base_url(), &seen);
    let out = agent.run("exhausted", "hi", &sink, &cancel).await.unwrap();
    outcomes.push(format!("{out:?}"));
    // 3. A stream cut by a reset after a call began (a failed run), and a cancelled run.
    let server =
        MockServer::start([Reply::sse_in_pieces(&calls[..calls.len() / 2], 9, Duration::ZERO, End::Reset)])
            .await;
    let agent = agent_for(dir.path(), &server.base_url(), &seen);
    outcomes.push(format!("{:?}", agent.run("reset", "hi", &sink, &cancel).await));
    let server = MockServer::start([Reply::Hang]).await;
    let agent = agent_for(dir.path(), &server.base_url(), &seen);
    let cancelled = CancellationSignal::new();
    let c2 = cancelled.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel("user left");
    });
    outcomes.push(format!("{:?}", agent.run("cancelled", "hi", &sink, &cancelled).await));
    // Errors of the API surface too.
    outcomes.push(format!("{:?}", agent.resume("nope", &sink, &cancel).await));
    outcomes.push(format!("{:?}", agent.approve("demo", "no-such-approval").await));
    for s in ["demo", "denied", "exhausted", "reset", "cancelled"] {
        outcomes.push(format!("{:?}", agent.state(s).await.unwrap()));
    }
    // The failed run's state saved the error that ended it (`run_error`), the server's echo of the
    // key redacted: so the state files checked below hold a message that had the key in it.
    let saved =
        agent.state("denied").await.unwrap().unwrap().run_error.expect("the failed run saved its error");
    assert!(
        saved.message.contains("Incorrect API key provided") && saved.message.contains("<redacted>"),
        "{saved:?}"
    );

    // Every byte of the state directory.
    let mut files = Vec::new();
    all_bytes_under(dir.path(), &mut files);
    assert!(
        files.len() >= 5,
        "the sessions were persisted: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (path, bytes) in &files {
        assert!(!contains(bytes, KEY.as_bytes()), "the key is in {path}");
        assert!(!path.contains(KEY));
    }
    // Every event, as JSON (what crosses to ArkTS) and as Debug.
    let events = events.lock().unwrap().clone();
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ApprovalRequired { .. })));
    for e in &events {
        let text = serde_json::to_string(e).unwrap();
        assert!(!text.contains(KEY), "event {text}");
        assert!(!format!("{e:?}").contains(KEY), "event {e:?}");
    }
    // The failed runs' `run_finished` carry their error, with the server's echo (so the check
    // above saw a message that had the key in it, redacted).
    assert!(
        events.iter().any(|e| matches!(e, AgentEvent::RunFinished { error: Some(err), .. }
            if err.message.contains("Incorrect API key provided") && err.message.contains("<redacted>"))),
        "{events:#?}"
    );
    // Every outcome, error message and Debug output; what the tools saw.
    for text in outcomes.iter().chain(seen.lock().unwrap().iter()) {
        assert!(!text.contains(KEY), "leaked: {text}");
    }
    // Every log line, unredacted (so the code must never format the key, not merely rely on the
    // redactor).
    let lines = logs.lines();
    // The retries of the echoing 500/429 were logged with the server's message (so this check
    // sees real lines, not an empty log).
    assert!(
        lines.iter().any(|l| l.contains("retry") && l.contains("Incorrect API key provided")),
        "{lines:#?}"
    );
    for line in &lines {
        assert!(!line.contains(KEY), "log line: {line}");
    }
    // The provider's own echo did arrive in an error: the run says what went wrong, key removed.
    let joined = outcomes.join("\n");
    assert!(joined.contains("Incorrect API key provided"), "the server's message is kept: {joined}");
}

/// `KEY` as an encoder that escapes every character writes it in a JSON string.
fn escaped_key() -> String {
    KEY.chars().map(|c| format!("\\u{:04x}", u32::from(c))).collect()
}

/// Every string (names included) of a JSON text, decoded.
fn strings_of(json: &str) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| {
                out.push(k.clone());
                walk(v, out);
            }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}")), &mut out);
    out
}

/// A key echoed in a call's arguments with JSON escapes (`\u0073k-...`, an encoder that escapes
/// characters; partly escaped; escaped with `\/` too) is taken out of the arguments the client
/// hands out, whole and streamed, calls and pieces: decoded, they carry no copy of it. The rest
/// of the arguments is kept byte for byte.
#[tokio::test]
async fn a_key_echoed_with_json_escapes_in_arguments_is_taken_out() {
    use arkagent::provider::{ChatModel, ModelEvent};
    let key = "sk-SENTINEL/9f8e7d6c";
    let all: String = key.chars().map(|c| format!("\\u{:04X}", u32::from(c))).collect();
    let part = key.replacen('S', "\\u0053", 1).replacen('/', "\\/", 1);
    let args = format!(
        r#"{{"a":"Bearer {all}","b":"{part}!","{all}":1,"keep":"caf\u00e9 \ud83d\ude00 \"q\" \\u0073k \/"}}"#
    );
    let want = r#"{"a":"Bearer <redacted>","b":"<redacted>!","<redacted>":1,"keep":"caf\u00e9 \ud83d\ude00 \"q\" \\u0073k \/"}"#;
    let call = json!({"index":0,"id":"c1","type":"function","function":{"name":"lookup","arguments":args}});
    let server = MockServer::start([
        Reply::json(
            200,
            &json!({"choices":[{"index":0,"message":{"tool_calls":[call]},"finish_reason":"tool_calls"}]}),
        ),
        Reply::sse(&sse(&[
            json!({"choices":[{"index":0,"delta":{"tool_calls":[call]}}]}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        ])),
    ])
    .await;
    let client = OpenAiCompatibleClient::new(ClientConfig::custom(server.base_url(), "m", key)).unwrap();
    let request =
        arkagent::provider::ChatRequest::new(Arc::new(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()));
    let answer = client.complete(&request).await.unwrap();
    let mut handed_out = vec![answer.tool_calls[0].arguments.clone()];
    let mut pieces = String::new();
    let mut stream = client.stream(&request).await.unwrap();
    while let Some(event) = futures_util::StreamExt::next(&mut stream).await {
        match event.unwrap() {
            ModelEvent::ToolCallArgumentsDelta { delta, .. } => pieces.push_str(&delta),
            ModelEvent::ToolCallFinished { call, .. } => handed_out.push(call.arguments),
            ModelEvent::Finished(response) => handed_out.push(response.tool_calls[0].arguments.clone()),
            _ => {}
        }
    }
    handed_out.push(pieces);
    assert_eq!(handed_out.len(), 4);
    for args in handed_out {
        assert_eq!(args, want);
        let strings = strings_of(&args);
        assert!(strings.iter().all(|s| !s.contains(key)), "{strings:?}");
        assert!(strings.contains(&"caf\u{e9} \u{1F600} \"q\" \\u0073k /".to_string()), "{strings:?}");
    }
}

/// A gateway that echoes the request's `Authorization` header into a successful answer: in the
/// text, the reasoning, a call's id, its arguments and the finish reason. Whole and streamed, the key reaches neither
/// the state, the events, the tool nor the outcome.
#[tokio::test]
async fn a_key_echoed_in_a_successful_answer_is_taken_out() {
    let echoed_calls = |chunks: bool| {
        let call = json!({"index":0,"id":format!("c-{KEY}"),"type":"function",
            "function":{"name":"lookup","arguments":format!(r#"{{"q":"Bearer {KEY}"}}"#)}});
        // The same echo by an encoder that escapes characters: the tool and the loop signature
        // in the state would get it decoded.
        let escaped = json!({"index":1,"id":"c-escaped","type":"function",
            "function":{"name":"lookup","arguments":format!(r#"{{"q":"Bearer {}"}}"#, escaped_key())}});
        if chunks {
            Reply::sse(&sse(&[
                json!({"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":format!("saw {KEY}")}}]}),
                json!({"choices":[{"index":0,"delta":{"tool_calls":[call]}}]}),
                json!({"choices":[{"index":0,"delta":{"tool_calls":[escaped]}}]}),
                json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
            ]))
        } else {
            Reply::json(
                200,
                &json!({"choices":[{"index":0,"message":{"role":"assistant",
                "reasoning_content":format!("saw {KEY}"),"tool_calls":[call, escaped]},"finish_reason":"tool_calls"}]}),
            )
        }
    };
    // The finish reason too (the outcome, `run_finished` and the state carry it).
    let echoed_text = |chunks: bool| {
        let text = format!("your key is {KEY}");
        let finish = format!("stop (auth: Bearer {KEY})");
        if chunks {
            Reply::sse(&sse(&[
                json!({"choices":[{"index":0,"delta":{"role":"assistant","content":text}}]}),
                json!({"choices":[{"index":0,"delta":{},"finish_reason":finish}]}),
            ]))
        } else {
            Reply::json(
                200,
                &json!({"choices":[{"index":0,"message":{"role":"assistant","content":text},
                "finish_reason":finish}]}),
            )
        }
    };
    for streaming in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let seen: Seen = Arc::new(Mutex::new(Vec::new()));
        let sink = arkagent::agent::EventLog::new();
        let server = MockServer::start([echoed_calls(streaming), echoed_text(streaming)]).await;
        let agent = agent_with(dir.path(), &server.base_url(), &seen, streaming);
        let out = agent.run("echo", "hi", &sink, &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Finished { final_text: Some(text), finish_reason, .. } = &out else {
            panic!("{out:?}")
        };
        // The answer came, with the key taken out.
        assert_eq!(text, "your key is <redacted>", "streaming={streaming}");
        assert_eq!(finish_reason.as_deref(), Some("stop (auth: Bearer <redacted>)"), "streaming={streaming}");
        let state = agent.state("echo").await.unwrap().unwrap();
        let mut files = Vec::new();
        all_bytes_under(dir.path(), &mut files);
        for (path, bytes) in &files {
            assert!(!contains(bytes, KEY.as_bytes()), "streaming={streaming}: the key is in {path}");
        }
        for e in sink.events().iter() {
            assert!(!serde_json::to_string(e).unwrap().contains(KEY), "streaming={streaming}: {e:?}");
        }
        let tool_saw = seen.lock().unwrap().join("\n");
        assert_eq!(
            tool_saw.matches("Bearer <redacted>").count(),
            2,
            "the tools ran with the arguments: {tool_saw}"
        );
        for text in [format!("{out:?}"), format!("{state:?}"), tool_saw] {
            assert!(!text.contains(KEY), "streaming={streaming}: {text}");
        }
    }
}

/// A gateway that echoes the key percent-encoded (as in a URL or a form field: Qianfan's
/// `bce-v3/ALTAK-.../...` as `bce-v3%2FALTAK-...`, hex in either case) in a refusal's plain-text
/// body: the run's error, its `run_finished` event and every byte of the state directory (the
/// failed run saves its error) are without it.
#[tokio::test]
async fn a_key_echoed_percent_encoded_is_taken_out_of_the_error_and_the_state() {
    const SLASHED: &str = "bce-v3/ALTAK-abc/SECRET9";
    for encoded in ["bce-v3%2FALTAK-abc%2FSECRET9", "bce-v3%2fALTAK-abc%2fSECRET9"] {
        let dir = tempfile::tempdir().unwrap();
        let server = MockServer::start([Reply::raw(403, format!("denied for {encoded}"))]).await;
        let config = ClientConfig::custom(server.base_url(), "m", SLASHED).with_retry(RetryPolicy::none());
        let client = OpenAiCompatibleClient::new(config).unwrap();
        let agent = AgentBuilder::new(Arc::new(client), Arc::new(FileStore::new(dir.path()))).build();
        let sink = arkagent::agent::EventLog::new();
        let out = agent.run("leak", "hi", &sink, &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Finished { error: Some(e), .. } = &out else { panic!("{out:?}") };
        // The server's words are kept, the key is not.
        assert!(e.message.contains("denied for <redacted>"), "{e}");
        let saved =
            agent.state("leak").await.unwrap().unwrap().run_error.expect("the failed run saved its error");
        assert!(saved.message.contains("denied for <redacted>"), "{saved:?}");
        let mut texts = vec![format!("{out:?} {e}"), format!("{saved:?}")];
        texts.extend(sink.events().iter().map(|e| serde_json::to_string(e).unwrap()));
        let mut files = Vec::new();
        all_bytes_under(dir.path(), &mut files);
        assert!(!files.is_empty());
        texts.extend(files.iter().map(|(path, bytes)| format!("{path}: {}", String::from_utf8_lossy(bytes))));
        for text in texts {
            assert!(!text.contains("SECRET9"), "{encoded}: {text}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Session ids

fn bad_ids() -> Vec<String> {
    vec![
        "../escape".into(),
        "..".into(),
        "a/b".into(),
        "/".into(),
        "/etc".into(),
        "a\0b".into(),
        "x".repeat(300),
        "..\\win".into(),
    ]
}

async fn refuses_every_method(store: &dyn StateStore, what: &str) {
    for id in bad_ids() {
        let state = AgentState::new(id.clone());
        let events = [StateEvent::MessageAppended { message: ChatMessage::user("x") }];
        let results = [
            ("load", store.load(&id).await.map(|_| ())),
            ("load_unrepaired", store.load_unrepaired(&id).await.map(|_| ())),
            ("exists", store.exists(&id).await.map(|_| ())),
            ("commit", store.commit(&state, &events).await),
            ("save_snapshot", store.save_snapshot(&state).await),
            ("delete", store.delete(&id).await.map(|_| ())),
        ];
        for (method, r) in results {
            let e = r.expect_err(&format!("{what}.{method}({id:?}) must fail"));
            assert_eq!(e.code, codes::SESSION_ID_INVALID, "{what}.{method}({id:?}): {e}");
            // The refusal shows the id cut short and escaped.
            assert!(e.message.len() < 200, "{e}");
            assert!(!e.message.contains('\0'));
        }
    }
}

#[tokio::test]
async fn hostile_session_ids_are_refused_everywhere() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    std::fs::create_dir(&root).unwrap();
    refuses_every_method(&FileStore::new(&root), "FileStore").await;
    refuses_every_method(&MemoryStore::new(), "MemoryStore").await;

    // The agent: run, resume, approve, deny, state, with a model that must never be asked.
    let server = MockServer::start([]).await;
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let agent = agent_for(&root, &server.base_url(), &seen);
    let sink = |_e: AgentEvent| {};
    let cancel = CancellationSignal::new();
    for id in bad_ids() {
        let errors = [
            ("run", agent.run(&id, "hi", &sink, &cancel).await.map(|_| ())),
            ("resume", agent.resume(&id, &sink, &cancel).await.map(|_| ())),
            ("approve", agent.approve(&id, "a1").await.map(|_| ())),
            ("deny", agent.deny(&id, "a1", "no").await.map(|_| ())),
            ("state", agent.state(&id).await.map(|_| ())),
        ];
        for (method, r) in errors {
            let e = r.expect_err(&format!("Agent::{method}({id:?}) must fail"));
            assert_eq!(e.code, codes::SESSION_ID_INVALID, "Agent::{method}({id:?}): {e}");
        }
    }
    assert!(server.requests().is_empty(), "no model call for a refused session");
    // Nothing was written anywhere: not outside the root, not inside it.
    let outside: Vec<_> = std::fs::read_dir(outer.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("root")]);
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Deep and huge JSON

fn deep(levels: usize) -> String {
    let mut s = String::with_capacity(levels * 6 + 2);
    for _ in 0..levels {
        s.push_str("{\"a\":");
    }
    s.push('1');
    for _ in 0..levels {
        s.push('}');
    }
    s
}

fn huge_object(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    s.push_str("{\"pad\":\"");
    s.extend(std::iter::repeat_n('x', bytes));
    s.push_str("\"}");
    s
}

#[tokio::test]
async fn deep_and_huge_tool_arguments_are_refused_before_the_tool() {
    let ran = Arc::new(Mutex::new(0usize));
    let mut registry = ToolRegistry::new();
    let r = Arc::clone(&ran);
    registry
        .register(
            ToolDefinition::new("t", "any object", json!({"type":"object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                let r = Arc::clone(&r);
                async move {
                    *r.lock().unwrap() += 1;
                    Ok(ToolResult::text("ran"))
                }
            })),
        )
        .unwrap();
    let cases = [
        (deep(10_000), codes::JSON_TOO_DEEP),
        (format!("[{}]", "[".repeat(10_000)), codes::JSON_TOO_DEEP),
        (huge_object(100 * 1024 * 1024), codes::JSON_TOO_LARGE),
    ];
    for (args, code) in cases {
        let call = ToolCall { id: "c1".into(), name: "t".into(), arguments: args };
        let e = registry.execute(&call, ToolContext::detached("s", "c1")).await.unwrap_err();
        assert_eq!(e.code, code);
        // The same through the one-pass schema path and the plain parser.
        let limits = JsonLimits::default();
        assert_eq!(arkagent::json::parse_value(&call.arguments, &limits).unwrap_err().code, code);
    }
    assert_eq!(*ran.lock().unwrap(), 0, "the tool never ran");
}

#[tokio::test]
async fn deep_and_huge_state_files_are_refused_without_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let write = |session: &str, name: &str, bytes: &[u8]| {
        let d = dir.path().join(session);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    };
    let framed = |payload: &[u8]| {
        let len = payload.len() as u32;
        let mut h = crc32fast::Hasher::new();
        h.update(&len.to_le_bytes());
        h.update(payload);
        let mut out = b"ARKS".to_vec();
        out.extend(len.to_le_bytes());
        out.extend(h.finalize().to_le_bytes());
        out.extend(payload);
        out
    };
    let deep_state =
        format!(r#"{{"schema_version":2,"session_id":"d","metadata":{{"x":{}}}}}"#, deep(10_000));
    let big_state =
        format!(r#"{{"schema_version":2,"session_id":"b","metadata":{{"x":{}}}}}"#, "[".repeat(100 << 20));
    // A legacy state.json and a valid-checksum snapshot, each 10,000 deep and 100 MB.
    write("deep-legacy", "state.json", deep_state.as_bytes());
    write("deep-snap", "snapshot-00000000000000000001.ark", &framed(deep_state.as_bytes()));
    write("big-legacy", "state.json", big_state.as_bytes());
    write("big-snap", "snapshot-00000000000000000001.ark", &framed(big_state.as_bytes()));
    // A journal whose record holds a 10,000-deep event (valid checksum).
    let mut journal = arkagent::state::codec::journal_header(1).to_vec();
    let payload = format!(r#"{{"event":"metadata_set","key":"k","value":{}}}"#, deep(10_000));
    journal.extend(&framed(payload.as_bytes())[4..]);
    write("deep-journal", "journal-00000000000000000001.ark", &journal);
    write(
        "deep-journal",
        "snapshot-00000000000000000001.ark",
        &framed(br#"{"schema_version":2,"session_id":"deep-journal"}"#),
    );

    for session in ["deep-legacy", "deep-snap", "big-legacy", "big-snap"] {
        let e = store.load(session).await.expect_err(session);
        assert!(e.code == codes::STATE_CORRUPT, "{session}: {e}");
        assert!(e.message.len() < 1000, "{session}: the error does not carry the input");
    }
    // The deep journal record is dropped as corrupt: the snapshot before it still loads.
    let s = store.load("deep-journal").await.unwrap().expect("the snapshot loads");
    assert!(s.metadata.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Plain http

#[test]
fn plain_http_to_a_non_loopback_host_is_refused_even_when_disguised() {
    // The HTTP client's URL parser (WHATWG) reads `\` as `/`, so these go to evil.example, not to
    // 127.0.0.1: the API key would travel in clear text.
    for url in [
        "http://evil.example\\@127.0.0.1/v1",
        "http://evil.example\\@localhost:8080/v1",
        "http://127.0.0.1@evil.example/v1",
        "http://localhost:80@evil.example/v1",
        "http://127.0.0.1.evil.example/v1",
        "http://localhost.evil.example/v1",
        "http://evil.example#@127.0.0.1/v1",
        "http://evil.example?@127.0.0.1/v1",
    ] {
        let target = reqwest::Url::parse(url).unwrap();
        assert!(target.host_str().unwrap().contains("evil.example"), "{url} goes to {target}");
        let e = OpenAiCompatibleClient::new(ClientConfig::custom(url, "m", KEY)).unwrap_err();
        assert_eq!(e.code, codes::INSECURE_URL, "{url}");
        assert!(!e.message.contains(KEY));
    }
    // Loopback in any spelling the client connects to loopback with is fine: the IPv4 shorthand
    // and number forms its parser reads as 127.0.0.1 too.
    for url in [
        "http://127.0.0.1:9/v1",
        "http://[::1]:9/v1",
        "http://localhost:9/v1",
        "http://127.1.2.3/v1",
        "http://127.1:9/v1",
        "http://2130706433:9/v1",
        "http://0x7f.1:9/v1",
    ] {
        if !url.contains("[::1]") && !url.contains("localhost") {
            assert!(reqwest::Url::parse(url).unwrap().host_str().unwrap().starts_with("127."), "{url}");
        }
        assert!(OpenAiCompatibleClient::new(ClientConfig::custom(url, "m", KEY)).is_ok(), "{url}");
    }
    // What a refusal names is the host the client would connect to, never a loopback one.
    for url in ["http://10.1:9/v1", "http://167772161:9/v1"] {
        let e = OpenAiCompatibleClient::new(ClientConfig::custom(url, "m", KEY)).unwrap_err();
        assert_eq!(e.code, codes::INSECURE_URL, "{url}");
        assert!(e.message.contains("to 10.0.0.1 "), "{url}: {e}");
    }
    // Allowed explicitly: accepted.
    let mut allowed = ClientConfig::custom("http://evil.example\\@127.0.0.1/v1", "m", KEY);
    allowed.allow_insecure_http = true;
    assert!(OpenAiCompatibleClient::new(allowed).is_ok());
}
