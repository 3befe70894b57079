//! A run cancelled while a chunk of parallel calls runs: a call whose executor was entered is
//! answered `tool_interrupted` as one that may have taken effect, and a call of the same chunk
//! whose executor the cancel came before (recorded started with its chunk) as one that did not
//! run, as the calls of later chunks are.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog};
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::{Arc, Mutex};
use support::{answer, calls, tool_messages, MemStore, Script};

#[tokio::test]
async fn a_cancel_in_a_parallel_chunk_answers_the_calls_it_came_before_as_not_run() {
    for width in [4, 1] {
        let cancel = CancellationSignal::new();
        let entered: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut tools = ToolRegistry::new();
        let (signal, log) = (cancel.clone(), Arc::clone(&entered));
        tools
            .register(
                ToolDefinition::new("t", "d", json!({"type": "object"})),
                Arc::new(FnExecutor(move |_args, ctx: arkagent::tool::ToolContext| {
                    log.lock().unwrap().push(ctx.call_id.clone());
                    if ctx.call_id == "c1" {
                        signal.cancel("cancelled by c1");
                    }
                    // c1 is still running when the run ends; the others would answer at once.
                    let c1 = ctx.call_id == "c1";
                    async move {
                        if c1 {
                            std::future::pending::<()>().await;
                        }
                        Ok(ToolResult::text("ran"))
                    }
                })),
            )
            .unwrap();
        let store = Arc::new(MemStore::new());
        let script = vec![calls(&[("c1", "t", "{}"), ("c2", "t", "{}"), ("c3", "t", "{}")]), answer("done")];
        let agent = AgentBuilder::new(Arc::new(Script::new(script)), store.clone())
            .tools(tools)
            .config(AgentConfig { max_parallel_tools: width, ..AgentConfig::default() })
            .build();
        let out = agent.run("s", "go", &EventLog::new(), &cancel).await.unwrap();
        assert_eq!(out.status(), RunStatus::Cancelled);
        assert_eq!(*entered.lock().unwrap(), ["c1"], "width {width}");
        let results = tool_messages(&store.load("s").await.unwrap().unwrap().messages);
        assert_eq!(results.len(), 3, "width {width}: {results:?}");
        assert!(results[0].1.contains("may or may not have taken effect"), "width {width}: {:?}", results[0]);
        for (id, text, is_error) in &results[1..] {
            assert!(*is_error && text.contains("it did not run"), "width {width}: {id}: {text}");
        }
    }
}
