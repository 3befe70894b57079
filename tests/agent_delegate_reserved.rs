//! `delegate_task` is the delegation's tool: an app cannot register a tool of its own under that
//! name (`tool_name_reserved`), with delegation enabled or not, through `Agent::register_tool` or
//! the registry it builds the agent with. A model that calls `delegate_task` while delegation is
//! off gets `tool_not_found`, as for any unknown tool, and no worker session is recorded for it.
//! With delegation on, the delegation's `delegate_task` cannot be unregistered (nothing could
//! register it again).

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog, DELEGATE_TASK};
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::{FnExecutor, ToolExecutor};
use arkagent::{codes, CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::Arc;
use support::{answer, calls, tool_messages, MemStore, Script};

/// The app's own `delegate_task`, a plain tool.
fn own_delegate_task() -> ToolDefinition {
    ToolDefinition::new(DELEGATE_TASK, "the app's own", json!({"type": "object"}))
}

fn answers_at_once() -> Arc<dyn ToolExecutor> {
    Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("the app's tool ran")) }))
}

/// A call of `delegate_task`, then an answer.
fn delegating_model() -> Arc<Script> {
    Arc::new(Script::new(vec![calls(&[("d1", DELEGATE_TASK, r#"{"task":"A"}"#)]), answer("done")]))
}

#[tokio::test]
async fn an_app_tool_named_delegate_task_is_refused_with_or_without_delegation() {
    let agent = Arc::new(AgentBuilder::new(delegating_model(), Arc::new(MemStore::new())).build());
    let e = agent.register_tool(own_delegate_task(), answers_at_once()).unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_RESERVED);
    assert!(e.message.contains("enable_delegation"), "{e}");
    assert!(agent.tools().definition(DELEGATE_TASK).is_none());
    assert!(e.message.contains("enable it with enable_delegation"), "{e}");
    // Delegation still registers it, and the app's tool is refused the same way then, without
    // asking to enable what is on.
    agent.enable_delegation(None).unwrap();
    let e = agent.register_tool(own_delegate_task(), answers_at_once()).unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_RESERVED);
    assert!(e.message.contains("this agent delegates") && !e.message.contains("enable it"), "{e}");
    assert_eq!(
        agent.tools().definition(DELEGATE_TASK).unwrap().description,
        arkagent::agent::delegate_task_definition().description
    );
}

#[tokio::test]
async fn the_delegations_delegate_task_cannot_be_unregistered() {
    let agent = Arc::new(AgentBuilder::new(delegating_model(), Arc::new(MemStore::new())).build());
    // Without delegation there is none to remove.
    assert_eq!(agent.unregister_tool(DELEGATE_TASK), Ok(false));
    agent.enable_delegation(None).unwrap();
    // Removed, it was gone for good: enable_delegation refuses a second time, the app may not
    // register it, and every delegation the model asked for became tool_not_found.
    let e = agent.unregister_tool(DELEGATE_TASK).unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_RESERVED);
    assert!(e.message.contains("cannot be unregistered"), "{e}");
    assert_eq!(
        agent.tools().definition(DELEGATE_TASK).unwrap().description,
        arkagent::agent::delegate_task_definition().description
    );
}

/// A registry holding the app's own `delegate_task`.
fn own_registry() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.register(own_delegate_task(), answers_at_once()).unwrap();
    tools
}

#[tokio::test]
async fn a_registry_with_its_own_delegate_task_builds_no_agent_that_runs() {
    let store = Arc::new(MemStore::new());
    let builder = || AgentBuilder::new(delegating_model(), store.clone()).tools(own_registry());
    let Err(e) = builder().try_build() else { panic!("try_build takes the registry") };
    assert_eq!(e.code, codes::TOOL_NAME_RESERVED);
    // Built without checking: every run is refused before anything is written.
    let agent = builder().build();
    let e = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(e.code, codes::TOOL_NAME_RESERVED);
    assert!(store.load("s").await.unwrap().is_none());
}

#[tokio::test]
async fn a_delegate_task_call_without_delegation_is_an_unknown_tool_with_no_worker() {
    let store = Arc::new(MemStore::new());
    let agent = AgentBuilder::new(delegating_model(), store.clone()).build();
    let out = agent.run("p", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let state = store.load("p").await.unwrap().unwrap();
    let results = tool_messages(&state.messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains(codes::TOOL_NOT_FOUND) && results[0].2, "{results:?}");
    assert!(state.workers.is_empty(), "no worker session ran: {:?}", state.workers);
}
