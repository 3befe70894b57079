//! Helpers for runtime tests: scripted answers and a model that never answers in time.
#![allow(dead_code, unused_imports)]

use arkagent::error::AgentError;
use arkagent::message::{ChatMessage, ToolCall, Usage};
use arkagent::provider::{ChatModel, ChatRequest, ModelEventStream, ModelResponse};
use async_trait::async_trait;

pub use arkagent::provider::ScriptedModel as Script;
pub use arkagent::state::MemoryStore as MemStore;

/// An answer with these tool calls (id, name, raw arguments).
pub fn calls(calls: &[(&str, &str, &str)]) -> ModelResponse {
    ModelResponse {
        content: None,
        reasoning_content: None,
        tool_calls: calls.iter().map(|(id, n, a)| ToolCall::new(*id, *n, *a)).collect(),
        finish_reason: Some("tool_calls".into()),
        usage: Some(Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }),
    }
}

/// A final text answer.
pub fn answer(text: &str) -> ModelResponse {
    ModelResponse {
        content: Some(text.into()),
        reasoning_content: None,
        tool_calls: vec![],
        finish_reason: Some("stop".into()),
        usage: None,
    }
}

/// A model that takes ten seconds to answer (to cancel it mid-request).
pub struct SlowModel;

#[async_trait]
impl ChatModel for SlowModel {
    async fn complete(&self, _request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        Ok(answer("too late"))
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let response = self.complete(request).await?;
        Ok(Box::pin(futures_util::stream::iter(vec![Ok(arkagent::provider::ModelEvent::Finished(response))])))
    }
}

/// The tool results of a history: (call id, content, is_error), in order.
pub fn tool_messages(messages: &[ChatMessage]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, content, is_error, .. } => {
                Some((tool_call_id.clone(), content.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}

/// An after-hook that aborts the run on the result of `fast`.
pub struct AbortOnFast;

#[async_trait]
impl arkagent::hook::AgentHook for AbortOnFast {
    async fn after_tool_call(
        &self,
        _ctx: &arkagent::hook::HookContext<'_>,
        call: &ToolCall,
        _result: &arkagent::tool::ToolResult,
    ) -> arkagent::hook::AfterToolCall {
        if call.name == "fast" {
            let action = arkagent::hook::AfterToolCallAction::Abort("policy says stop".into());
            arkagent::hook::AfterToolCall { action, inject: vec![] }
        } else {
            arkagent::hook::AfterToolCall::default()
        }
    }
}
