//! A `tool_choice` naming a tool is checked against the tools of every request, not only when the
//! run starts: a tool unregistered mid-run ends the run with `config_invalid` before a request
//! names a tool it does not list (a provider refuses that), and the history stays.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::provider::ToolChoice;
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, ToolDefinition, ToolResult};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use support::{answer, calls, tool_messages, MemStore, Script};

/// Registers `a`, which unregisters itself from `agent` when it runs (counted in `ran`).
fn register_a(agent: &Arc<Agent>, ran: &Arc<AtomicUsize>) {
    let me: Arc<OnceLock<std::sync::Weak<Agent>>> = Arc::default();
    let _ = me.set(Arc::downgrade(agent));
    let ran = Arc::clone(ran);
    agent
        .register_tool(
            ToolDefinition::new("a", "d", json!({"type":"object"})),
            Arc::new(FnExecutor(move |_args, _ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                if let Some(agent) = me.get().and_then(|w| w.upgrade()) {
                    let _ = agent.unregister_tool("a");
                }
                async move { Ok(ToolResult::text("A")) }
            })),
        )
        .unwrap();
}

#[tokio::test]
async fn a_tool_choice_whose_tool_is_unregistered_mid_run_ends_it_before_the_next_request() {
    let store = Arc::new(MemStore::new());
    let model = Arc::new(Script::new(vec![calls(&[("c1", "a", "{}")]), answer("done"), answer("again")]));
    let config =
        AgentConfig { tool_choice: Some(ToolChoice::Function("a".into())), ..AgentConfig::default() };
    let agent = Arc::new(AgentBuilder::new(model.clone(), store.clone()).config(config).build());
    let ran = Arc::new(AtomicUsize::new(0));
    register_a(&agent, &ran);
    agent
        .register_tool(
            ToolDefinition::new("b", "d", json!({"type":"object"})),
            Arc::new(FnExecutor(|_args, _ctx| async move { Ok(ToolResult::text("B")) })),
        )
        .unwrap();

    let out = agent.run("s", "go", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Finished { status, error, .. } = &out else { panic!("{out:?}") };
    assert_eq!(*status, RunStatus::Failed);
    let error = error.as_ref().expect("the run says why it failed");
    assert_eq!(error.code, codes::CONFIG_INVALID);
    assert!(error.message.contains("\"a\""), "{}", error.message);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // The second request was never sent: it would have named `a` without listing it.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].tool_choice, Some(ToolChoice::Function("a".into())));

    // What the run did is saved: the question, the call and its result.
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.messages.len(), 3, "{:?}", state.messages);
    assert_eq!(tool_messages(&state.messages), [("c1".into(), "A".into(), false)]);

    // A new message is refused as any run start would refuse it, and loses nothing; once the
    // app registers `a` again, the next run goes on from that history.
    let err = agent.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, codes::CONFIG_INVALID);
    assert_eq!(store.load("s").await.unwrap().unwrap().messages.len(), 3);
    register_a(&agent, &ran);
    let out = agent.run("s", "again", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages.len(), 4, "the earlier turn is sent with the new question");
}
