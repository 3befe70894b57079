//! `Agent::add_hook`: a hook added after the agent was built takes part in later runs, after the
//! hooks given to the builder; a run keeps the hooks it started with.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, NoEvents, RunOutcome};
use arkagent::hook::{AgentHook, BeforeToolCall, HookContext};
use arkagent::message::{ChatMessage, ToolCall};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex};
use support::{answer, calls, MemStore, Script};

/// Appends a suffix to the call's arguments marker and records that it ran.
struct Tag(&'static str, Arc<Mutex<Vec<String>>>);

#[async_trait]
impl AgentHook for Tag {
    async fn before_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        call: &ToolCall,
        _definition: Option<&ToolDefinition>,
    ) -> BeforeToolCall {
        self.1.lock().unwrap().push(self.0.to_string());
        let mut args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        let seen = args["tags"].as_str().unwrap_or_default().to_string();
        args["tags"] = json!(format!("{seen}{}", self.0));
        BeforeToolCall::Proceed(Some(call.with_arguments(args.to_string())))
    }
}

#[tokio::test]
async fn a_hook_added_later_runs_after_the_builder_hooks_in_later_runs() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tools = ToolRegistry::new();
    let received = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&received);
    tools
        .register(
            ToolDefinition::new("echo", "echo", json!({"type": "object"})),
            Arc::new(FnExecutor(move |args: serde_json::Map<String, serde_json::Value>, _ctx| {
                let r = Arc::clone(&r);
                async move {
                    r.lock().unwrap().push(args["tags"].as_str().unwrap_or_default().to_string());
                    Ok(ToolResult::text("ok"))
                }
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "echo", r#"{"tags":""}"#)]),
        answer("one"),
        calls(&[("c2", "echo", r#"{"tags":""}"#)]),
        answer("two"),
    ]));
    let agent = AgentBuilder::new(model, Arc::new(MemStore::new()))
        .tools(tools)
        .hook(Arc::new(Tag("a", Arc::clone(&seen))))
        .build();
    assert_eq!(agent.hooks().len(), 1);
    let cancel = CancellationSignal::new();
    let out = agent.run("s", "first", &NoEvents, &cancel).await.unwrap();
    assert!(matches!(out, RunOutcome::Finished { .. }), "{out:?}");

    agent.add_hook(Arc::new(Tag("b", Arc::clone(&seen))));
    assert_eq!(agent.hooks().len(), 2);
    agent.run("s", "second", &NoEvents, &cancel).await.unwrap();

    assert_eq!(*seen.lock().unwrap(), ["a", "a", "b"]);
    // The rewrites chain in order: the later hook sees the builder hook's rewrite.
    assert_eq!(*received.lock().unwrap(), ["a", "ab"]);
    let state = agent.state("s").await.unwrap().unwrap();
    let last = state.messages.iter().rev().find_map(|m| match m {
        ChatMessage::Assistant { content, .. } => content.clone(),
        _ => None,
    });
    assert_eq!(last.as_deref(), Some("two"));
}

#[tokio::test]
async fn a_hook_added_during_a_run_is_not_used_by_that_run() {
    use std::sync::{OnceLock, Weak};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let slot: Arc<OnceLock<Weak<arkagent::agent::Agent>>> = Arc::new(OnceLock::new());
    let mut tools = ToolRegistry::new();
    let (s, seen_by_tool) = (Arc::clone(&slot), Arc::clone(&seen));
    tools
        .register(
            ToolDefinition::new("add_late_hook", "adds a hook", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_args, _ctx| {
                let (s, seen) = (Arc::clone(&s), Arc::clone(&seen_by_tool));
                async move {
                    if let Some(agent) = s.get().and_then(Weak::upgrade) {
                        agent.add_hook(Arc::new(Tag("late", seen)));
                    }
                    Ok(ToolResult::text("added"))
                }
            })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "add_late_hook", r#"{"tags":""}"#)]),
        calls(&[("c2", "missing_tool", r#"{"tags":""}"#)]),
        answer("first run done"),
        calls(&[("c3", "missing_tool", r#"{"tags":""}"#)]),
        answer("second run done"),
    ]));
    let agent = Arc::new(AgentBuilder::new(model, Arc::new(MemStore::new())).tools(tools).build());
    slot.set(Arc::downgrade(&agent)).unwrap();
    let cancel = CancellationSignal::new();
    agent.run("s", "first", &NoEvents, &cancel).await.unwrap();
    // Added during the first run (by c1): not called for c2 in that run.
    assert!(seen.lock().unwrap().is_empty(), "{:?}", seen.lock().unwrap());
    assert_eq!(agent.hooks().len(), 1);
    agent.run("s", "second", &NoEvents, &cancel).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["late"]);
}
