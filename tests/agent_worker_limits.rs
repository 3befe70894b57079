//! A worker is bounded by its own limits, not by the parent's per-call timeout: a delegation whose
//! worker takes several slow model rounds is not cut off at `tool_timeout`, while the worker's own
//! tool calls still are.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog, DELEGATE_TASK};
use arkagent::error::AgentError;
use arkagent::provider::{ChatModel, ChatRequest, ModelEventStream, ModelResponse};
use arkagent::state::{RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, ToolDefinition, ToolRegistry, ToolResult};
use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{answer, calls, tool_messages, MemStore, Script};

/// The script's answers, each `delay` late (tokio's paused clock makes that instant).
struct Slow {
    script: Script,
    delay: Duration,
}

#[async_trait]
impl ChatModel for Slow {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        tokio::time::sleep(self.delay).await;
        self.script.complete(request).await
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        tokio::time::sleep(self.delay).await;
        self.script.stream(request).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_worker_is_not_cut_off_at_the_tool_timeout_but_its_own_calls_are() {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("query_stock", "查询库存", json!({"type":"object"})),
            Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("12 件")) })),
        )
        .unwrap();
    tools
        .register(
            ToolDefinition::new("hang", "never answers", json!({"type":"object"})),
            Arc::new(FnExecutor(|_a, _c| async move {
                std::future::pending::<()>().await;
                Ok(ToolResult::text("unreachable"))
            })),
        )
        .unwrap();
    // Every model answer takes 20 s; the per-call timeout is 30 s. The worker's three rounds
    // take 60 s in all.
    let model = Arc::new(Slow {
        script: Script::new(vec![
            calls(&[("p1", DELEGATE_TASK, r#"{"task":"查库存"}"#)]), // parent
            calls(&[("w1", "query_stock", "{}")]),                   // worker round 1
            calls(&[("w2", "hang", "{}")]),                          // worker round 2: times out
            answer("库存 12 件（另一个查询超时）"),                  // worker round 3
            answer("有货"),                                          // parent
        ]),
        delay: Duration::from_secs(20),
    });
    let store: Arc<dyn StateStore> = Arc::new(MemStore::new());
    let config = AgentConfig { tool_timeout: Duration::from_secs(30), ..AgentConfig::default() };
    let agent = Arc::new(AgentBuilder::new(model, store.clone()).tools(tools).config(config).build());
    agent.enable_delegation(None).unwrap();

    let out = agent.run("parent", "有货吗", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed, "{out:?}");
    let parent = store.load("parent").await.unwrap().unwrap();
    assert_eq!(
        tool_messages(&parent.messages),
        [("p1".to_string(), "库存 12 件（另一个查询超时）".to_string(), false)],
        "the worker's answer, not tool_timeout"
    );
    let worker = store.load(&parent.workers[0]).await.unwrap().unwrap();
    let worker_results = tool_messages(&worker.messages);
    assert_eq!(worker_results.len(), 2);
    assert!(worker_results[1].2 && worker_results[1].1.contains("tool_timeout"), "{worker_results:?}");
}
