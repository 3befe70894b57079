//! A stop asked for by a batch (a result's `stop`, an after-hook's stop) survives the process
//! dying before the run's end was saved: the resumed run completes without asking the model again.
//! An after-hook's stop and the messages it injected survive too when the process dies later in
//! the same batch (saved with the call's finished record).
//! The death is a store that refuses every commit from a chosen one on (what was committed before
//! stays on disk); a fresh agent over the same directory then resumes.

#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::state::{AgentState, FileStore, RunStatus, StateEvent, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, Script};
use wrapped::{StoreHooks, Wrapped};

/// A file store that dies (refuses every later commit) at the first commit whose events match.
struct DiesAt {
    when: fn(&StateEvent) -> bool,
    dead: AtomicBool,
}

#[async_trait::async_trait]
impl StoreHooks for DiesAt {
    async fn commit(
        &self,
        inner: &dyn StateStore,
        state: &AgentState,
        events: &[StateEvent],
    ) -> Result<(), AgentError> {
        if self.dead.load(Ordering::SeqCst) || events.iter().any(self.when) {
            self.dead.store(true, Ordering::SeqCst);
            return Err(AgentError::of(codes::STATE_IO, "the process died"));
        }
        inner.commit(state, events).await
    }

    async fn save_snapshot(&self, inner: &dyn StateStore, state: &AgentState) -> Result<(), AgentError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(AgentError::of(codes::STATE_IO, "the process died"));
        }
        inner.save_snapshot(state).await
    }
}

fn finished(event: &StateEvent) -> bool {
    matches!(event, StateEvent::StatusChanged { status: RunStatus::Completed, .. })
}

fn batch_completed(event: &StateEvent) -> bool {
    matches!(event, StateEvent::BatchCompleted { .. })
}

/// `finish_task` answers with `stop`; `note`, `fetch` (idempotent: run again on resume) and
/// `download` (slow: it answers 300 ms after its start) do not. All count their executions.
fn tools(executions: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    for (name, stop) in [("finish_task", true), ("note", false), ("fetch", false), ("download", false)] {
        let executions = Arc::clone(executions);
        r.register(
            ToolDefinition::new(name, "test tool", json!({"type":"object"})).idempotent(name == "fetch"),
            Arc::new(FnExecutor(move |_a, _c| {
                executions.fetch_add(1, Ordering::SeqCst);
                async move {
                    if name == "download" {
                        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                    }
                    Ok(ToolResult::text("done").with_stop(stop))
                }
            })),
        )
        .unwrap();
    }
    r
}

struct StopAfterNote;

#[async_trait::async_trait]
impl AgentHook for StopAfterNote {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        let action =
            if call.name == "note" { AfterToolCallAction::Stop } else { AfterToolCallAction::Proceed(None) };
        AfterToolCall { action, inject: Vec::new() }
    }
}

/// After call `c1`: stop, and inject a reminder (as the ArkTS hook of the report did).
struct StopAndRemindAfterFirst;

#[async_trait::async_trait]
impl AgentHook for StopAndRemindAfterFirst {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _r: &ToolResult,
    ) -> AfterToolCall {
        if call.id != "c1" {
            return AfterToolCall { action: AfterToolCallAction::Proceed(None), inject: Vec::new() };
        }
        AfterToolCall {
            action: AfterToolCallAction::Stop,
            inject: vec![ChatMessage::user("REMINDER from hook")],
        }
    }
}

/// One call at a time: a call's finished record becomes durable with the next call's start.
fn one_at_a_time() -> AgentConfig {
    AgentConfig { max_parallel_tools: 1, ..AgentConfig::default() }
}

/// Runs `first` (the model's tool calls) on a store that dies at `dies_at`, then resumes in a
/// fresh agent over the same directory, one call at a time. Returns the resumed run's status, the
/// number of model requests after the restart, the tool executions of both processes and the saved
/// state.
async fn die_then_resume(
    dir: &Path,
    first: &[(&str, &str, &str)],
    dies_at: fn(&StateEvent) -> bool,
    hook: Option<Arc<dyn AgentHook>>,
) -> (RunStatus, usize, usize, AgentState) {
    die_then_resume_with(dir, first, dies_at, hook, one_at_a_time()).await
}

/// [`die_then_resume`] with the first process's config (the resumed one runs one at a time).
async fn die_then_resume_with(
    dir: &Path,
    first: &[(&str, &str, &str)],
    dies_at: fn(&StateEvent) -> bool,
    hook: Option<Arc<dyn AgentHook>>,
    config: AgentConfig,
) -> (RunStatus, usize, usize, AgentState) {
    let executions = Arc::new(AtomicUsize::new(0));
    die(dir, first, dies_at, hook.clone(), config, &executions).await;
    let model = Arc::new(Script::new(vec![answer("asked again")]));
    let store = Arc::new(FileStore::new(dir));
    let agent = restarted(model.clone(), store.clone(), hook, &executions);
    let out = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let state = store.load("s").await.unwrap().unwrap();
    (out.status(), model.requests().len(), executions.load(Ordering::SeqCst), state)
}

/// The first process: runs `first` (the model's tool calls) on a store that dies at `dies_at`.
async fn die(
    dir: &Path,
    first: &[(&str, &str, &str)],
    dies_at: fn(&StateEvent) -> bool,
    hook: Option<Arc<dyn AgentHook>>,
    config: AgentConfig,
    executions: &Arc<AtomicUsize>,
) {
    let dies = DiesAt { when: dies_at, dead: AtomicBool::new(false) };
    let store = Arc::new(Wrapped::new(Arc::new(FileStore::new(dir)), dies));
    let model = Arc::new(Script::new(vec![calls(first), answer("asked again")]));
    let mut builder = AgentBuilder::new(model, store).config(config).tools(tools(executions));
    if let Some(hook) = hook {
        builder = builder.hook(hook);
    }
    let died = builder.build().run("s", "q", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(died.unwrap_err().code, codes::STATE_IO, "the first process dies while saving");
    assert_eq!(executions.load(Ordering::SeqCst), first.len(), "every call ran before the death");
}

/// The agent of the process after the death, one call at a time.
fn restarted(
    model: Arc<Script>,
    store: Arc<FileStore>,
    hook: Option<Arc<dyn AgentHook>>,
    executions: &Arc<AtomicUsize>,
) -> arkagent::agent::Agent {
    let mut builder = AgentBuilder::new(model, store).config(one_at_a_time()).tools(tools(executions));
    if let Some(hook) = hook {
        builder = builder.hook(hook);
    }
    builder.build()
}

#[tokio::test]
async fn a_result_stop_saved_with_its_batch_ends_the_resumed_run() {
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, state) =
        die_then_resume(dir.path(), &[("c1", "finish_task", "{}")], finished, None).await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0, "the model is not asked again after a stop");
    assert_eq!(executions, 1, "nothing ran twice");
    assert_eq!(state.status, RunStatus::Completed);
    assert!(!state.stop_requested, "the stop is spent once the run ended");
    assert!(matches!(state.messages.last(), Some(ChatMessage::Tool { .. })), "{:?}", state.messages.last());
}

#[tokio::test]
async fn a_result_stop_whose_batch_was_not_saved_ends_the_resumed_run() {
    // The first call's finished record is durable (saved with the second call's start), the
    // batch's completion is not: repair answers the first call from its record and the second as
    // interrupted, and the record's stop still holds.
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, state) = die_then_resume(
        dir.path(),
        &[("c1", "finish_task", "{}"), ("c2", "note", "{}")],
        batch_completed,
        None,
    )
    .await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0);
    assert_eq!(executions, 2);
    assert!(state.tool_runs.is_empty(), "the batch was completed on resume");
    let answered: Vec<&str> = state
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["c1", "c2"]);
}

#[tokio::test]
async fn an_after_hook_stop_saved_with_its_batch_ends_the_resumed_run() {
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, _) =
        die_then_resume(dir.path(), &[("c1", "note", "{}")], finished, Some(Arc::new(StopAfterNote))).await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0);
    assert_eq!(executions, 1);
}

#[tokio::test]
async fn without_a_stop_the_resumed_run_asks_the_model() {
    // The control: the same death without any stop continues the conversation.
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, state) =
        die_then_resume(dir.path(), &[("c1", "note", "{}")], batch_completed, None).await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 1);
    assert_eq!(executions, 1);
    assert_eq!(state.messages.last(), Some(&ChatMessage::assistant_text("asked again")));
}

#[tokio::test]
async fn a_new_run_does_not_inherit_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, _, state) = die_then_resume(dir.path(), &[("c1", "finish_task", "{}")], finished, None).await;
    assert_eq!(state.status, RunStatus::Completed);
    let model = Arc::new(Script::new(vec![answer("hello again")]));
    let agent = AgentBuilder::new(model.clone(), Arc::new(FileStore::new(dir.path()))).build();
    let out = agent.run("s", "next", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(model.requests().len(), 1);
}

/// The history's messages after the first answer's tool calls, as (role, call id or text).
fn tail(state: &AgentState) -> Vec<(String, String)> {
    let first = state.messages.iter().position(|m| !m.tool_calls().is_empty()).expect("a batch");
    state.messages[first + 1..]
        .iter()
        .map(|m| match m {
            ChatMessage::Tool { tool_call_id, .. } => ("tool".into(), tool_call_id.clone()),
            ChatMessage::User { content } => ("user".into(), content.clone()),
            other => ("other".into(), format!("{other:?}")),
        })
        .collect()
}

/// [`tail`] of a batch of `c1` and `c2` whose `c1` hook injected the reminder: both results, then
/// the reminder, as the batch would have appended them.
fn both_results_then_the_reminder() -> Vec<(String, String)> {
    vec![
        ("tool".into(), "c1".into()),
        ("tool".into(), "c2".into()),
        ("user".into(), "REMINDER from hook".into()),
    ]
}

#[tokio::test]
async fn an_after_hook_stop_and_its_messages_survive_a_death_later_in_the_batch() {
    // `c1`'s hook stops and injects a reminder; its finished record is durable (saved with
    // `c2`'s start), the batch's completion is not. The resumed run answers `c2` interrupted,
    // appends the reminder after both results, as the batch would have, and does not ask the model.
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, state) = die_then_resume(
        dir.path(),
        &[("c1", "note", "{}"), ("c2", "note", "{}")],
        batch_completed,
        Some(Arc::new(StopAndRemindAfterFirst)),
    )
    .await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0, "the hook's stop holds after the death");
    assert_eq!(executions, 2, "nothing ran twice");
    assert_eq!(tail(&state), both_results_then_the_reminder());
    assert!(state.tool_runs.is_empty() && !state.stop_requested);
}

#[tokio::test]
async fn an_after_hook_stop_survives_when_the_batch_runs_on_after_the_death() {
    // `c2` is idempotent: the resumed run runs it again within the batch (not a completion by
    // repair), and the stop and the reminder of `c1`, finished in the dead process, still hold.
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, state) = die_then_resume(
        dir.path(),
        &[("c1", "note", "{}"), ("c2", "fetch", "{}")],
        batch_completed,
        Some(Arc::new(StopAndRemindAfterFirst)),
    )
    .await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0);
    assert_eq!(executions, 3, "c2 ran again, c1 did not");
    assert_eq!(tail(&state), both_results_then_the_reminder());
}

#[tokio::test]
async fn an_after_hook_stop_in_a_parallel_chunk_survives_a_death_before_the_chunk_ends() {
    // `c1` and `c2` run side by side (the default for safe tools). `c1` ends at once, and its
    // hook stops and injects a reminder; `c2` is still downloading when the process dies. What
    // `c1` asked is durable although the chunk never ended: the resumed run answers `c2`
    // interrupted, appends the reminder and does not ask the model.
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, state) = die_then_resume_with(
        dir.path(),
        &[("c1", "note", "{}"), ("c2", "download", "{}")],
        batch_completed,
        Some(Arc::new(StopAndRemindAfterFirst)),
        AgentConfig::default(),
    )
    .await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0, "the hook's stop holds after the death");
    assert_eq!(executions, 2, "nothing ran twice");
    assert_eq!(tail(&state), both_results_then_the_reminder());
    let c1 = state.messages.iter().find_map(|m| match m {
        ChatMessage::Tool { tool_call_id, content, .. } if tool_call_id == "c1" => Some(content.clone()),
        _ => None,
    });
    assert_eq!(c1.as_deref(), Some("done"), "c1 keeps the result it reported, not an interruption");
}

#[tokio::test]
async fn a_result_stop_in_a_parallel_chunk_survives_a_death_before_the_chunk_ends() {
    // The same with the result's own stop (`finish_task`) beside a slow download.
    let dir = tempfile::tempdir().unwrap();
    let (status, requests, executions, _) = die_then_resume_with(
        dir.path(),
        &[("c1", "finish_task", "{}"), ("c2", "download", "{}")],
        batch_completed,
        None,
        AgentConfig::default(),
    )
    .await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(requests, 0, "the result's stop holds after the death");
    assert_eq!(executions, 2, "nothing ran twice");
}

/// The `user` messages of a history, in order.
fn questions(messages: &[ChatMessage]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_new_message_after_a_death_later_in_the_batch_keeps_the_hooks_messages() {
    // As `an_after_hook_stop_and_its_messages_survive_a_death_later_in_the_batch`, but the app
    // sends a new message instead of resuming. The reminder `c1`'s hook injected goes after both
    // results and before the new message, as had the death come after the batch's completion;
    // the stop is moot (the new message asks the model). Before, the reminder was dropped.
    let dir = tempfile::tempdir().unwrap();
    let executions = Arc::new(AtomicUsize::new(0));
    let hook: Arc<dyn AgentHook> = Arc::new(StopAndRemindAfterFirst);
    let first = [("c1", "note", "{}"), ("c2", "note", "{}")];
    die(dir.path(), &first, batch_completed, Some(hook.clone()), one_at_a_time(), &executions).await;

    let model = Arc::new(Script::new(vec![answer("hello again"), answer("and again")]));
    let store = Arc::new(FileStore::new(dir.path()));
    let agent = restarted(model.clone(), store.clone(), Some(hook), &executions);
    let out = agent.run("s", "next", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    assert_eq!(executions.load(Ordering::SeqCst), 2, "nothing ran again");
    let state = store.load("s").await.unwrap().unwrap();
    let mut expected = both_results_then_the_reminder();
    expected.push(("user".into(), "next".into()));
    expected.push(("other".into(), format!("{:?}", ChatMessage::assistant_text("hello again"))));
    assert_eq!(tail(&state), expected);
    let asked = &model.requests()[0].messages;
    assert_eq!(questions(asked), ["q", "REMINDER from hook\n\nnext"], "the model read the reminder");

    // Injected once: neither a second message nor a resume adds it again.
    let out = agent.run("s", "more", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let resumed = agent.resume("s", &EventLog::new(), &CancellationSignal::new()).await;
    assert_eq!(resumed.unwrap_err().code, codes::INVALID_STATE);
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(questions(&state.messages), ["q", "REMINDER from hook", "next", "more"]);
    assert!(state.tool_runs.is_empty());
}
