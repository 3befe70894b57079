//! A tool result larger than `AgentConfig::max_result_bytes` (default 1 MiB) is recorded as the
//! error `tool_result_too_large`: saved as it was, it would be in the state and sent with every
//! later request of the session. The size is counted after the after-hooks, so a hook that shrinks
//! a large result (a summary, a page) lets it through. Before, any size was kept.
//!
//! An error result over the limit keeps its code and metadata, its text cut to fit: replaced by
//! `tool_result_too_large` ("ask the tool for less"), as it was before, a bad JSON argument or a
//! thrown executor told the model the wrong failure and the wrong fix.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, AgentEvent, EventLog, DEFAULT_MAX_RESULT_BYTES};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, HookContext};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::{FnExecutor, ToolContext, ToolDefinition, ToolRegistry, ToolResult};
use arkagent::{AgentError, CancellationSignal, ChatMessage, ToolCall};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use support::{answer, calls, tool_messages, Script};

/// A registry whose `report` tool returns `size` bytes of text, with the stop flag `stop`.
fn registry(size: usize, stop: bool) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(
        ToolDefinition::new("report", "d", json!({"type": "object"})),
        Arc::new(FnExecutor(move |_a: Map<String, Value>, _c: ToolContext| async move {
            Ok(ToolResult::text("x".repeat(size)).with_stop(stop))
        })),
    )
    .unwrap();
    r
}

/// Runs one call of `report` in a saved session; the tool message read back, the tool_result
/// event's result and the run's status.
async fn run(
    size: usize,
    stop: bool,
    config: AgentConfig,
    hook: Option<Arc<dyn AgentHook>>,
) -> (String, bool, ToolResult, RunStatus) {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("c1", "report", "{}")]), answer("done")]));
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let mut builder = AgentBuilder::new(model, store).tools(registry(size, stop)).config(config);
    if let Some(hook) = hook {
        builder = builder.hook(hook);
    }
    let events = EventLog::new();
    builder.build().run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    let (content, is_error) = state
        .messages
        .iter()
        .find_map(|m| match m {
            ChatMessage::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap();
    let event = events
        .events()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(result),
            _ => None,
        })
        .unwrap();
    (content, is_error, event, state.status)
}

#[tokio::test]
async fn a_result_over_the_limit_is_recorded_as_tool_result_too_large() {
    let limit = 1000;
    let config = || AgentConfig { max_result_bytes: limit, ..AgentConfig::default() };
    let (content, is_error, event, status) = run(limit, false, config(), None).await;
    assert_eq!((content.len(), is_error, status), (limit, false, RunStatus::Completed));
    assert_eq!(event, ToolResult::text("x".repeat(limit)));

    let (content, is_error, event, status) = run(limit + 1, false, config(), None).await;
    assert!(is_error, "{content}");
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(
        content,
        "error [tool_result_too_large]: the result of report takes 1001 bytes, more than the limit of \
         1000: ask the tool for less (a page, a filter, a summary)"
    );
    assert!(event.is_error && event.to_model_text() == content, "{event:?}");
    assert_eq!(event.metadata.as_ref().unwrap()["code"], "tool_result_too_large");
}

#[tokio::test]
async fn the_default_limit_is_one_mebibyte_and_the_stop_flag_is_kept() {
    assert_eq!(AgentConfig::default().max_result_bytes, 1 << 20);
    let (_, is_error, _, _) = run(DEFAULT_MAX_RESULT_BYTES, false, AgentConfig::default(), None).await;
    assert!(!is_error);
    let (content, is_error, event, status) =
        run(DEFAULT_MAX_RESULT_BYTES + 1, true, AgentConfig::default(), None).await;
    assert!(is_error && content.contains("tool_result_too_large"), "{content}");
    // The tool asked to stop: the run still ends after the batch, without asking the model again.
    assert!(event.stop);
    assert_eq!(status, RunStatus::Completed);
}

/// An after-hook that cuts every text result to its first ten bytes.
struct Shortens;

#[async_trait::async_trait]
impl AgentHook for Shortens {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        result: &ToolResult,
    ) -> AfterToolCall {
        let short = result.to_model_text().chars().take(10).collect::<String>();
        AfterToolCall {
            action: AfterToolCallAction::Proceed(Some(ToolResult::text(short))),
            inject: Vec::new(),
        }
    }
}

#[tokio::test]
async fn the_size_is_counted_after_the_after_hooks() {
    let config = AgentConfig { max_result_bytes: 100, ..AgentConfig::default() };
    let (content, is_error, _, _) = run(5000, false, config, Some(Arc::new(Shortens))).await;
    assert_eq!((content.as_str(), is_error), ("xxxxxxxxxx", false));
}

#[test]
fn a_zero_limit_is_config_invalid() {
    let e = AgentConfig { max_result_bytes: 0, ..AgentConfig::default() }.validate().unwrap_err();
    assert_eq!(e.code, "config_invalid");
    assert_eq!(e.message, "max_result_bytes must be at least 1, got 0");
}

#[tokio::test]
async fn an_error_result_over_the_limit_keeps_its_code_and_is_cut_to_fit() {
    let limit = 120;
    let mut tools = ToolRegistry::new();
    // A long property name: the type mismatch's message names its path.
    let schema = json!({"type": "object", "properties": {"count_of_items_in_one_page": {"type": "integer"}}});
    tools
        .register(
            ToolDefinition::new("t", "d", schema),
            Arc::new(FnExecutor(|_a: Map<String, Value>, _c: ToolContext| async move {
                Ok(ToolResult::text("ok"))
            })),
        )
        .unwrap();
    tools
        .register(
            ToolDefinition::new("boom", "d", json!({"type": "object"})),
            Arc::new(FnExecutor(|_a: Map<String, Value>, _c: ToolContext| async move {
                Err(AgentError::execution_failed(format!("kaboom: {}", "ü".repeat(200))))
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[
            ("bad_json", "t", &format!("{{\"n\": {}", "1".repeat(300))),
            ("bad_type", "t", r#"{"count_of_items_in_one_page": "x"}"#),
            ("throws", "boom", "{}"),
        ]),
        answer("done"),
    ]));
    let store: Arc<dyn StateStore> = Arc::new(support::MemStore::new());
    let config = AgentConfig { max_result_bytes: limit, ..AgentConfig::default() };
    let agent = AgentBuilder::new(model, store.clone()).tools(tools).config(config).build();
    let events = EventLog::new();
    agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();

    let results: Vec<(String, ToolResult)> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { call_id, result, .. } => Some((call_id, result)),
            _ => None,
        })
        .collect();
    let codes: Vec<(&str, &str)> = results
        .iter()
        .map(|(id, r)| (id.as_str(), r.metadata.as_ref().unwrap()["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        codes,
        [
            ("bad_json", "json_invalid"),
            ("bad_type", "tool_argument_type_mismatch"),
            ("throws", "tool_execution_failed"),
        ]
    );
    let state = store.load("s").await.unwrap().unwrap();
    let saved = tool_messages(&state.messages);
    for ((id, result), (saved_id, content, is_error)) in results.iter().zip(&saved) {
        assert!(result.is_error && *is_error && id == saved_id);
        assert_eq!(&result.to_model_text(), content);
        assert!(result.size_bytes() <= limit, "{id}: {result:?}");
        let code = result.metadata.as_ref().unwrap()["code"].as_str().unwrap();
        assert!(content.starts_with(&format!("error [{code}]: ")), "{content}");
        assert!(content.ends_with("more bytes cut]"), "{content}");
    }
    let throws = &saved[2].1;
    assert!(throws.starts_with("error [tool_execution_failed]: kaboom: üü"), "{throws}");
    assert_eq!(state.status, RunStatus::Completed);
}

#[tokio::test]
async fn a_denial_reason_longer_than_the_limit_is_refused_before_anything_is_written() {
    // The reason goes to the model as the call's result and with every later request: it may take
    // at most max_result_bytes, like a tool's result; before, any size was saved and sent.
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("c1", "report", "{}")]), answer("done")]));
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("report", "d", json!({"type": "object"}))
                .with_risk(arkagent::RiskLevel::Dangerous),
            Arc::new(FnExecutor(|_a: Map<String, Value>, _c: ToolContext| async {
                Ok(ToolResult::text("ran"))
            })),
        )
        .unwrap();
    let config = AgentConfig { max_result_bytes: 200, ..AgentConfig::default() };
    let agent = AgentBuilder::new(model, store).tools(tools).config(config).build();
    let events = EventLog::new();
    let outcome = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    let arkagent::agent::RunOutcome::Suspended { batch } = outcome else { panic!("suspended: {outcome:?}") };
    let id = batch.items[0].approval_id.clone();
    let before = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();

    let long = "x".repeat(201);
    let e = agent.deny("s", &id, &long).await.unwrap_err();
    assert_eq!(e.code, arkagent::codes::ARGUMENT_INVALID);
    assert!(e.message.contains("201 bytes") && e.message.contains("(200)"), "{}", e.message);
    let e = agent.dismiss("s", &long, &events, &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(e.code, arkagent::codes::ARGUMENT_INVALID);
    assert_eq!(FileStore::new(dir.path()).load("s").await.unwrap().unwrap(), before, "nothing written");

    // A reason of the limit is taken; with its `denied by user: ` prefix and metadata, the
    // recorded denial is cut to the limit, its code kept (before, it was recorded over it).
    agent.deny("s", &id, &"y".repeat(200)).await.unwrap();
    let outcome = agent.resume("s", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    let (_, content, is_error) = tool_messages(&state.messages).into_iter().next().unwrap();
    assert!(is_error && content.starts_with("error: denied by user: yyy"), "{content}");
    assert!(content.ends_with("more bytes cut]"), "{content}");
    let (_, result) = results_of(&events).into_iter().next().unwrap();
    assert!(result.size_bytes() <= 200, "{} bytes: {result:?}", result.size_bytes());
}

/// An agent over `store` with [`denied_tools`], the default policy, results held to `limit`.
fn limited_agent(
    store: &Arc<dyn StateStore>,
    script: Vec<arkagent::provider::ModelResponse>,
    limit: usize,
) -> arkagent::agent::Agent {
    AgentBuilder::new(Arc::new(Script::new(script)), store.clone())
        .tools(denied_tools())
        .config(AgentConfig { max_result_bytes: limit, ..AgentConfig::default() })
        .build()
}

/// Every result the `tool_result` events carried and the session recorded takes at most `limit`
/// bytes; the recorded texts, in call order.
async fn recorded_within(store: &Arc<dyn StateStore>, events: &EventLog, limit: usize) -> Vec<String> {
    let results = results_of(events);
    let saved = tool_messages(&store.load("s").await.unwrap().unwrap().messages);
    assert_eq!(results.len(), saved.len());
    for ((id, result), (saved_id, content, is_error)) in results.iter().zip(&saved) {
        assert!(id == saved_id && result.is_error && *is_error, "{id}: {result:?}");
        assert!(result.size_bytes() <= limit, "{id}: {} bytes: {result:?}", result.size_bytes());
        assert!(content.len() <= limit + "error: ".len(), "{id}: {content}");
    }
    saved.into_iter().map(|(_, content, _)| content).collect()
}

#[tokio::test]
async fn a_user_denial_is_cut_to_the_limit_of_the_agent_that_settles_it() {
    // Version 1 (the default limit) took a 5000-byte reason; version 2 of the app holds results
    // to 200 bytes. Before, the 5101-byte denial was recorded and sent with every request.
    let store: Arc<dyn StateStore> = Arc::new(support::MemStore::new());
    let v1 =
        limited_agent(&store, vec![calls(&[("cd", "d", "{}"), ("cc", "c", "{}")])], DEFAULT_MAX_RESULT_BYTES);
    let outcome = v1.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let arkagent::agent::RunOutcome::Suspended { batch } = outcome else { panic!("suspended: {outcome:?}") };
    v1.deny("s", &batch.items[0].approval_id, &"x".repeat(5000)).await.unwrap();

    let v2 = limited_agent(&store, vec![answer("done")], 200);
    let events = EventLog::new();
    let outcome = v2.resume("s", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);
    let saved = recorded_within(&store, &events, 200).await;
    assert!(saved[0].starts_with("error: denied by user: xxx"), "{}", saved[0]);
    assert!(saved[0].ends_with("more bytes cut]"), "{}", saved[0]);
    assert!(saved[1].starts_with("error: not run: another call"), "{}", saved[1]);
}

#[tokio::test]
async fn a_dismissal_reason_of_the_limit_is_recorded_within_it() {
    // The reason is checked alone (at most the limit); each answer it makes (the denial, a call
    // not run) adds its own words and metadata, and is cut to the limit.
    let store: Arc<dyn StateStore> = Arc::new(support::MemStore::new());
    let agent = limited_agent(&store, vec![calls(&[("cd", "d", "{}"), ("cc", "c", "{}")])], 200);
    let events = EventLog::new();
    let outcome = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    assert!(matches!(outcome, arkagent::agent::RunOutcome::Suspended { .. }), "{outcome:?}");
    let events = EventLog::new();
    let outcome = agent.dismiss("s", &"z".repeat(200), &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);
    let saved = recorded_within(&store, &events, 200).await;
    assert!(saved[0].starts_with("error: denied by user: zzz"), "{}", saved[0]);
    assert!(saved[0].ends_with("more bytes cut]"), "{}", saved[0]);
    assert!(saved[1].starts_with("error: not run: another call"), "{}", saved[1]);
}

#[tokio::test]
async fn the_too_large_error_is_cut_to_a_limit_shorter_than_its_message() {
    // Its message and metadata take about 165 bytes: under a limit of 120 it was recorded whole,
    // itself over the limit. It is cut as any error result is, its code kept.
    let config = AgentConfig { max_result_bytes: 120, ..AgentConfig::default() };
    let (content, is_error, event, status) = run(121, true, config, None).await;
    assert!(is_error && event.is_error && event.stop, "{event:?}");
    assert!(event.size_bytes() <= 120, "{} bytes: {event:?}", event.size_bytes());
    assert!(content.starts_with("error [tool_result_too_large]: the"), "{content}");
    assert!(content.ends_with("more bytes cut]") && event.to_model_text() == content, "{content}");
    assert_eq!(event.metadata.as_ref().unwrap()["code"], "tool_result_too_large");
    assert_eq!(status, RunStatus::Completed);

    // A limit under its code, metadata and note (about 102 bytes) keeps them, as for any error
    // result (MAX_CUT_ERROR_BYTES bounds it), and cuts the whole message.
    for limit in [1, 100] {
        let config = AgentConfig { max_result_bytes: limit, ..AgentConfig::default() };
        let (content, _, event, _) = run(limit + 1, false, config, None).await;
        assert!(content.starts_with("error [tool_result_too_large]: … ["), "{content}");
        assert!(event.size_bytes() <= arkagent::tool::MAX_CUT_ERROR_BYTES, "{event:?}");
    }
}

/// Denies `a` with a long error result and `b` with a long successful one (a hook's `Deny`).
struct DeniesLong;

#[async_trait::async_trait]
impl AgentHook for DeniesLong {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> arkagent::hook::BeforeToolCall {
        use arkagent::hook::BeforeToolCall;
        match call.name.as_str() {
            "a" => BeforeToolCall::Deny(ToolResult::from_error(&AgentError::of(
                arkagent::codes::TOOL_DENIED,
                format!("denied by a hook: {}", "h".repeat(5000)),
            ))),
            "b" => BeforeToolCall::Deny(ToolResult::text("s".repeat(5000))),
            _ => BeforeToolCall::Proceed(None),
        }
    }
}

/// Denies `c` with a long reason once `on` is set; asks about dangerous tools; allows the rest.
#[derive(Default)]
struct PolicyDeniesLong {
    on: std::sync::atomic::AtomicBool,
}

impl arkagent::approval::ApprovalPolicy for PolicyDeniesLong {
    fn decide(
        &self,
        call: &ToolCall,
        definition: Option<&ToolDefinition>,
    ) -> arkagent::approval::PolicyDecision {
        use arkagent::approval::PolicyDecision;
        if call.name == "c" && self.on.load(std::sync::atomic::Ordering::SeqCst) {
            return PolicyDecision::Deny("p".repeat(5000));
        }
        match definition.map(|d| d.risk_level) {
            Some(arkagent::RiskLevel::Dangerous) => PolicyDecision::RequireConfirmation("sure?".into()),
            _ => PolicyDecision::Allow,
        }
    }
}

/// Tools `a`, `b`, `c` (safe) and `d` (dangerous), each answering `ran`.
fn denied_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    for name in ["a", "b", "c", "d"] {
        let risk = if name == "d" { arkagent::RiskLevel::Dangerous } else { arkagent::RiskLevel::Safe };
        tools
            .register(
                ToolDefinition::new(name, "d", json!({"type": "object"})).with_risk(risk),
                Arc::new(FnExecutor(|_a: Map<String, Value>, _c: ToolContext| async {
                    Ok(ToolResult::text("ran"))
                })),
            )
            .unwrap();
    }
    tools
}

/// The results the `tool_result` events carried, by call id.
fn results_of(events: &EventLog) -> Vec<(String, ToolResult)> {
    events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { call_id, result, .. } => Some((call_id, result)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_hook_or_policy_denial_over_the_limit_is_cut_to_fit() {
    // A hook's or the policy's answer goes to the model as the call's result and is saved with
    // the session, as a tool's result is; before, any size was (a user's reason is refused
    // instead, but the app's code has nobody to refuse it to: it is cut).
    let limit = 200;
    let model = Arc::new(Script::new(vec![
        calls(&[("ca", "a", "{}"), ("cb", "b", "{}"), ("cc", "c", "{}")]),
        answer("done"),
    ]));
    let store: Arc<dyn StateStore> = Arc::new(support::MemStore::new());
    let policy = Arc::new(PolicyDeniesLong::default());
    policy.on.store(true, std::sync::atomic::Ordering::SeqCst);
    let agent = AgentBuilder::new(model, store.clone())
        .tools(denied_tools())
        .config(AgentConfig { max_result_bytes: limit, ..AgentConfig::default() })
        .hook(Arc::new(DeniesLong))
        .policy(policy)
        .build();
    let events = EventLog::new();
    let outcome = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);

    let results = results_of(&events);
    let state = store.load("s").await.unwrap().unwrap();
    let saved = tool_messages(&state.messages);
    assert_eq!(saved.len(), 3);
    for ((id, result), (saved_id, content, is_error)) in results.iter().zip(&saved) {
        assert!(id == saved_id && result.is_error && *is_error, "{id}: {result:?}");
        assert!(result.size_bytes() <= limit, "{id}: {} bytes: {result:?}", result.size_bytes());
        // What the model reads is what was recorded.
        assert_eq!(&result.to_model_text(), content);
    }
    let code = |r: &ToolResult| r.metadata.as_ref().unwrap()["code"].as_str().unwrap().to_string();
    // An error result the hook answered with is cut, saying so.
    assert!(saved[0].1.starts_with("error [tool_denied]: denied by a hook: hhh"), "{}", saved[0].1);
    assert!(saved[0].1.ends_with("more bytes cut]"), "{}", saved[0].1);
    assert_eq!(code(&results[0].1), "tool_denied");
    // A successful result the hook answered with is too large, as a tool's would be.
    assert!(saved[1].1.starts_with("error [tool_result_too_large]: "), "{}", saved[1].1);
    assert_eq!(code(&results[1].1), "tool_result_too_large");
    // The policy's reason is cut, after the `error: ` mark the model reads.
    assert!(saved[2].1.starts_with("error: denied by policy: ppp"), "{}", saved[2].1);
    assert!(saved[2].1.ends_with("more bytes cut]"), "{}", saved[2].1);
    assert_eq!(code(&results[2].1), "tool_denied");
}

#[tokio::test]
async fn a_policy_denial_on_resume_over_the_limit_is_cut_to_fit() {
    // A call planned to run when its batch froze is asked about again on resume: a denial the
    // policy gives then is held to the limit too.
    let limit = 200;
    let model = Arc::new(Script::new(vec![calls(&[("cd", "d", "{}"), ("cc", "c", "{}")]), answer("done")]));
    let store: Arc<dyn StateStore> = Arc::new(support::MemStore::new());
    let policy = Arc::new(PolicyDeniesLong::default());
    let agent = AgentBuilder::new(model, store.clone())
        .tools(denied_tools())
        .config(AgentConfig { max_result_bytes: limit, ..AgentConfig::default() })
        .policy(policy.clone())
        .build();
    let events = EventLog::new();
    let outcome = agent.run("s", "q", &events, &CancellationSignal::new()).await.unwrap();
    let arkagent::agent::RunOutcome::Suspended { batch } = outcome else { panic!("suspended: {outcome:?}") };
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    policy.on.store(true, std::sync::atomic::Ordering::SeqCst);
    let outcome = agent.resume("s", &events, &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);

    let state = store.load("s").await.unwrap().unwrap();
    let saved = tool_messages(&state.messages);
    assert_eq!(saved[0].1, "ran");
    let (_, content, is_error) = &saved[1];
    assert!(*is_error && content.starts_with("error: denied by policy: ppp"), "{content}");
    assert!(content.ends_with("more bytes cut]"), "{content}");
    let (_, result) = results_of(&events).into_iter().find(|(id, _)| id == "cc").unwrap();
    assert!(result.size_bytes() <= limit, "{} bytes: {result:?}", result.size_bytes());
}

#[tokio::test]
async fn a_hooks_answer_too_large_does_not_tell_the_model_to_ask_the_tool_for_less() {
    // `b` never ran: its oversized answer is the hook's, so the replacement says it was left
    // out, not "ask the tool for less" (which sends the model to call it again differently).
    let model = Arc::new(Script::new(vec![calls(&[("cb", "b", "{}")]), answer("done")]));
    let store: Arc<dyn StateStore> = Arc::new(support::MemStore::new());
    let agent = AgentBuilder::new(model, store.clone())
        .tools(denied_tools())
        .config(AgentConfig { max_result_bytes: 1000, ..AgentConfig::default() })
        .hook(Arc::new(DeniesLong))
        .build();
    agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let state = store.load("s").await.unwrap().unwrap();
    let saved = tool_messages(&state.messages);
    assert!(
        saved[0].1.starts_with("error [tool_result_too_large]: the result of b takes 5000 bytes"),
        "{}",
        saved[0].1
    );
    assert!(saved[0].1.contains("given instead of running it"), "{}", saved[0].1);
    assert!(!saved[0].1.contains("ask the tool"), "{}", saved[0].1);
}
