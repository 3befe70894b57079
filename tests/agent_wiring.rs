//! What the runtime hands to tools and hooks, checked through a whole agent run: an after-hook's
//! abort ends the run at once, the tool list is read again every round, the app's services reach
//! the executor, the calls of one batch share a batch id that the next batch does not, and the
//! config's request options reach every request.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext};
use arkagent::message::ToolCall;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::{FnExecutor, ToolExecutor, ToolService, ToolServiceRegistry};
use arkagent::{CancellationSignal, ToolContext, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::{json, Map, Value};
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use support::{answer, calls, MemStore, Script};

fn object() -> Value {
    json!({"type": "object"})
}

/// A tool that counts its runs and answers with its arguments.
fn counting(name: &str, runs: &Arc<AtomicUsize>) -> (ToolDefinition, Arc<dyn ToolExecutor>) {
    let runs = runs.clone();
    (
        ToolDefinition::new(name, "counts its runs", object()),
        Arc::new(FnExecutor(move |args: Map<String, Value>, _ctx: ToolContext| {
            runs.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(ToolResult::text(Value::Object(args).to_string())))
        })),
    )
}

/// A registry with one [`counting`] tool, and its run counter.
fn counting_registry(name: &str) -> (ToolRegistry, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let (definition, executor) = counting(name, &runs);
    let mut tools = ToolRegistry::new();
    tools.register(definition, executor).unwrap();
    (tools, runs)
}

fn tool_names(request: &arkagent::provider::ChatRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

/// Aborts the run after the first result it sees.
struct AbortAfterFirst;

#[async_trait::async_trait]
impl AgentHook for AbortAfterFirst {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        AfterToolCall {
            action: AfterToolCallAction::Abort(format!("{} says stop", call.id)),
            inject: Vec::new(),
        }
    }
}

#[tokio::test]
async fn an_after_hook_abort_ends_the_run_before_the_next_call() {
    let (tools, runs) = counting_registry("step");
    let model = Arc::new(Script::new(vec![
        calls(&[("a", "step", r#"{"n":1}"#), ("b", "step", r#"{"n":2}"#)]),
        answer("never asked"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(model.clone(), store.clone())
        .tools(tools)
        .hook(Arc::new(AbortAfterFirst))
        .config(AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() })
        .build();
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, error, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Aborted);
    let error = error.expect("the abort's error");
    assert_eq!(error.code, "hook_aborted");
    assert!(error.message.contains("a says stop"), "{}", error.message);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the second call never ran");
    assert_eq!(model.remaining(), 1, "the model was not asked again");
    assert_eq!(store.load("s").await.unwrap().unwrap().status, RunStatus::Aborted);
}

#[tokio::test]
async fn the_tool_list_is_read_again_every_round() {
    // `unlock` registers `extra` on its own agent while the run goes on.
    let agent_slot: Arc<OnceLock<Weak<Agent>>> = Arc::default();
    let slot = agent_slot.clone();
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("unlock", "adds a tool", object()),
            Arc::new(FnExecutor(move |_args, _ctx| {
                let slot = slot.clone();
                async move {
                    let agent = slot.get().and_then(Weak::upgrade).expect("the agent");
                    let runs = Arc::new(AtomicUsize::new(0));
                    let (definition, executor) = counting("extra", &runs);
                    agent.register_tool(definition, executor)?;
                    Ok(ToolResult::text("unlocked"))
                }
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("u", "unlock", "{}")]),
        calls(&[("e", "extra", "{}")]),
        answer("done"),
        answer("without extra"),
    ]));
    let agent = Arc::new(AgentBuilder::new(model.clone(), Arc::new(MemStore::new())).tools(tools).build());
    agent_slot.set(Arc::downgrade(&agent)).unwrap();
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let requests = model.requests();
    assert_eq!(tool_names(&requests[0]), ["unlock"]);
    assert_eq!(tool_names(&requests[1]), ["unlock", "extra"], "the round after the registration has it");
    // The call to the new tool ran (its result is not an unknown-tool error).
    let answered = requests[2].messages.iter().rev().find_map(|m| match m {
        arkagent::ChatMessage::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
        _ => None,
    });
    assert_eq!(answered, Some(("{}".to_string(), false)));
    assert_eq!(agent.unregister_tool("extra"), Ok(true));
    agent.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(tool_names(&model.requests()[3]), ["unlock"], "an unregistered tool is gone the next round");
}

#[tokio::test]
async fn the_configs_request_options_reach_every_request() {
    let (tools, runs) = counting_registry("count");
    let model = Arc::new(Script::new(vec![calls(&[("c", "count", "{}")]), answer("done")]));
    let config =
        AgentConfig { parallel_tool_calls: Some(false), max_tokens: Some(99), ..AgentConfig::default() };
    let agent =
        AgentBuilder::new(model.clone(), Arc::new(MemStore::new())).tools(tools).config(config).build();
    agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!((r.parallel_tool_calls, r.max_tokens), (Some(false), Some(99)));
    }
}

struct Bakery {
    oven: &'static str,
}

impl ToolService for Bakery {
    fn service_id(&self) -> &str {
        "bakery"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[tokio::test]
async fn the_apps_services_and_the_batch_id_reach_the_executor() {
    let seen: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let log = seen.clone();
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("bake", "uses the bakery service", object()),
            Arc::new(FnExecutor(move |_args, ctx: ToolContext| {
                let log = log.clone();
                async move {
                    let service = ctx.services.get("bakery").expect("the app's service");
                    let bakery = service.as_any().downcast_ref::<Bakery>().expect("the app's type");
                    log.lock().unwrap().push((
                        ctx.batch_call_id.clone(),
                        ctx.call_id.clone(),
                        bakery.oven.into(),
                    ));
                    Ok(ToolResult::text(bakery.oven))
                }
            })),
        )
        .unwrap();
    let mut services = ToolServiceRegistry::new();
    assert!(services.register(Arc::new(Bakery { oven: "oven-7" })));
    let model = Arc::new(Script::new(vec![
        calls(&[("a", "bake", "{}"), ("b", "bake", "{}")]),
        calls(&[("c", "bake", "{}")]),
        answer("baked"),
    ]));
    let agent = AgentBuilder::new(model, Arc::new(MemStore::new())).tools(tools).services(services).build();
    let out = agent.run("s", "bake", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(seen.iter().map(|s| s.2.as_str()).collect::<Vec<_>>(), ["oven-7"; 3]);
    assert!(!seen[0].0.is_empty());
    assert_eq!(seen[0].0, seen[1].0, "one batch, one batch id");
    assert_ne!(seen[1].0, seen[2].0, "the next batch has its own");
}

/// An after-hook that breaks: panics, or answers `Failed` as an adapter does for a hook that threw.
struct BrokenFilter {
    panics: bool,
}

#[async_trait::async_trait]
impl AgentHook for BrokenFilter {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        if self.panics {
            panic!("the filter broke");
        }
        AfterToolCall { action: AfterToolCallAction::Failed("the filter threw".into()), inject: Vec::new() }
    }
}

#[tokio::test]
async fn a_failing_after_hook_ends_the_run_and_the_unfiltered_result_never_reaches_the_model() {
    for panics in [true, false] {
        let mut tools = ToolRegistry::new();
        tools
            .register(
                ToolDefinition::new("read_secret", "returns what a filter hook should redact", object()),
                Arc::new(FnExecutor(|_args, _ctx| async move { Ok(ToolResult::text("raw-secret-42")) })),
            )
            .unwrap();
        let model = Arc::new(Script::new(vec![calls(&[("r", "read_secret", "{}")]), answer("好的")]));
        let agent = AgentBuilder::new(model.clone(), Arc::new(MemStore::new()))
            .tools(tools)
            .hook(Arc::new(BrokenFilter { panics }))
            .build();
        let out = agent.run("s", "读", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Finished { status, error, .. } = out else { panic!("{out:?}") };
        assert_eq!((status, error.unwrap().code.as_ref()), (RunStatus::Aborted, "hook_failed"));
        // The next turn sends the call's recorded result: the failure, never the raw text.
        agent.run("s", "继续", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let sent = serde_json::to_string(model.requests()[1].messages.as_slice()).unwrap();
        assert!(!sent.contains("raw-secret-42"), "{sent}");
        assert!(sent.contains("hook_failed"), "{sent}");
    }
}

/// Aborts before the call with id `b` runs; proceeds with every other call.
struct AbortBeforeB;

#[async_trait::async_trait]
impl AgentHook for AbortBeforeB {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _d: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        if call.id == "b" {
            return BeforeToolCall::Abort("b is forbidden".into());
        }
        BeforeToolCall::Proceed(None)
    }
}

#[tokio::test]
async fn a_before_hook_abort_on_a_later_call_runs_nothing_of_the_batch() {
    // Seed 8.1/8.3: abort ends the whole run at once; hooks run before anything of the batch
    // runs, so the call the hook let through first does not run either.
    let (tools, runs) = counting_registry("step");
    let model = Arc::new(Script::new(vec![
        calls(&[("a", "step", r#"{"n":1}"#), ("b", "step", r#"{"n":2}"#)]),
        answer("never asked"),
        answer("next question"),
    ]));
    let store = Arc::new(MemStore::new());
    let agent =
        AgentBuilder::new(model.clone(), store.clone()).tools(tools).hook(Arc::new(AbortBeforeB)).build();
    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, error, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Aborted);
    let error = error.expect("the abort's error");
    assert_eq!((error.layer, error.code.as_ref()), (arkagent::ErrorLayer::Runtime, "hook_aborted"));
    assert!(error.message.contains("b is forbidden"), "{}", error.message);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no call of the aborted batch ran");
    assert_eq!(model.remaining(), 2, "the model was not asked again");
    assert_eq!(store.load("s").await.unwrap().unwrap().status, RunStatus::Aborted);
    // The session goes on: the next request answers both calls of the aborted batch, once each.
    let out = agent.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let request = model.requests().pop().unwrap();
    let answered: Vec<String> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            arkagent::ChatMessage::Tool { tool_call_id, is_error, .. } => {
                assert!(is_error, "an unrun call is answered with an error");
                Some(tool_call_id.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["a", "b"]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_executor_sees_its_session_call_and_a_read_only_state() {
    // Seed 3.1: ToolContext carries the session id, the read-only state (schema version, session
    // id, metadata) and the call's own id.
    // (session id, state's session id, call id, state's schema version) per run of the tool.
    type Seen = Vec<(String, String, String, u32)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = seen.clone();
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("look", "reports its context", object()),
            Arc::new(FnExecutor(move |_args, ctx: ToolContext| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push((
                        ctx.session_id.clone(),
                        ctx.state.session_id.clone(),
                        ctx.call_id.clone(),
                        ctx.state.schema_version,
                    ));
                    Ok(ToolResult::text("seen"))
                }
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("call-7", "look", "{}")]), answer("done")]));
    let agent = AgentBuilder::new(model, Arc::new(MemStore::new())).tools(tools).build();
    agent.run("session-3", "look", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(
        seen.lock().unwrap().clone(),
        [(
            "session-3".to_string(),
            "session-3".to_string(),
            "call-7".to_string(),
            arkagent::state::SCHEMA_VERSION
        )]
    );
}
