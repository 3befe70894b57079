//! `AgentHook::on_error` hears every error that ends a run (before `on_run_end`): a provider's, a
//! hook's abort, a failed after-hook, a loop; and a before-hook's refusal of one call, which the
//! run goes on after.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, NoEvents};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, BeforeToolCall, HookContext};
use arkagent::message::ToolCall;
use arkagent::provider::ModelResponse;
use arkagent::state::RunStatus;
use arkagent::tool::FnExecutor;
use arkagent::{codes, AgentError, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex};
use support::{answer, calls, MemStore, Script};

/// What a test hook does with every call.
#[derive(Clone, Copy)]
enum Act {
    Nothing,
    AbortBefore,
    FailBefore,
    AbortAfter,
    FailAfter,
}

/// Records `on_error` codes and `on_run_end` statuses in the order heard.
struct Recorder(Act, Arc<Mutex<Vec<String>>>);

#[async_trait]
impl AgentHook for Recorder {
    async fn before_tool_call(
        &self,
        _: &HookContext<'_>,
        _: &ToolCall,
        _: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        match self.0 {
            Act::AbortBefore => BeforeToolCall::Abort("no".into()),
            Act::FailBefore => BeforeToolCall::Failed("it threw".into()),
            _ => BeforeToolCall::Proceed(None),
        }
    }

    async fn after_tool_call(&self, _: &HookContext<'_>, _: &ToolCall, _: &ToolResult) -> AfterToolCall {
        let action = match self.0 {
            Act::AbortAfter => AfterToolCallAction::Abort("no".into()),
            Act::FailAfter => AfterToolCallAction::Failed("it threw".into()),
            _ => AfterToolCallAction::Proceed(None),
        };
        AfterToolCall { action, inject: Vec::new() }
    }

    async fn on_error(&self, _: &HookContext<'_>, error: &AgentError) {
        self.1.lock().unwrap().push(format!("error:{}", error.code));
    }

    async fn on_run_end(&self, _: &HookContext<'_>, status: RunStatus, _: Option<&str>) {
        self.1.lock().unwrap().push(format!("end:{status:?}"));
    }
}

/// Runs a session whose model answers `script` with `act`; returns what the hook heard.
async fn hear(script: Vec<ModelResponse>, act: Act) -> (RunStatus, Vec<String>) {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("echo", "echo", json!({"type": "object"})),
            Arc::new(FnExecutor(|_a, _c| async { Ok(ToolResult::text("ok")) })),
        )
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let agent = AgentBuilder::new(Arc::new(Script::new(script)), Arc::new(MemStore::new()))
        .tools(tools)
        .hook(Arc::new(Recorder(act, Arc::clone(&log))))
        .build();
    let out = agent.run("s", "go", &NoEvents, &CancellationSignal::new()).await.unwrap();
    let heard = log.lock().unwrap().clone();
    (out.status(), heard)
}

#[tokio::test]
async fn a_before_hook_abort_is_told_to_on_error_before_the_run_ends() {
    let (status, heard) = hear(vec![calls(&[("c1", "echo", "{}")])], Act::AbortBefore).await;
    assert_eq!(status, RunStatus::Aborted);
    assert_eq!(heard, [format!("error:{}", codes::HOOK_ABORTED), "end:Aborted".to_string()]);
}

#[tokio::test]
async fn an_after_hook_abort_and_failure_are_told_to_on_error() {
    let (status, heard) = hear(vec![calls(&[("c1", "echo", "{}")])], Act::AbortAfter).await;
    assert_eq!(status, RunStatus::Aborted);
    assert_eq!(heard, [format!("error:{}", codes::HOOK_ABORTED), "end:Aborted".to_string()]);
    let (status, heard) = hear(vec![calls(&[("c1", "echo", "{}")])], Act::FailAfter).await;
    assert_eq!(status, RunStatus::Aborted);
    assert_eq!(heard, [format!("error:{}", codes::HOOK_FAILED), "end:Aborted".to_string()]);
}

#[tokio::test]
async fn a_detected_loop_is_told_to_on_error() {
    let same = || calls(&[("c", "echo", r#"{"n":1}"#)]);
    let script = vec![same(), same(), same(), same(), same(), answer("never")];
    let (status, heard) = hear(script, Act::Nothing).await;
    assert_eq!(status, RunStatus::LoopDetected);
    assert_eq!(heard, [format!("error:{}", codes::LOOP_DETECTED), "end:LoopDetected".to_string()]);
}

#[tokio::test]
async fn a_provider_error_is_told_once() {
    // The scripted model has no answer left: the provider's error ends the run, told once.
    let (status, heard) = hear(Vec::new(), Act::Nothing).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert!(heard[0].starts_with("error:") && heard[1] == "end:Failed", "{heard:?}");
}

#[tokio::test]
async fn a_failed_before_hook_is_told_to_on_error_and_the_run_goes_on() {
    // An adapter's hook that threw: its call is answered `hook_failed`, the model answers after.
    let script = vec![calls(&[("c1", "echo", "{}")]), answer("ok")];
    let (status, heard) = hear(script, Act::FailBefore).await;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(heard, [format!("error:{}", codes::HOOK_FAILED), "end:Completed".to_string()]);
}
