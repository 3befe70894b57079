//! ScriptedModel: deterministic replay (whole and streamed in small deltas), request recording,
//! scripted failures and `provider_script_exhausted`.

use arkagent::provider::{ChatModel, ChatRequest, ModelEvent, ModelResponse, ScriptStep, ScriptedModel};
use arkagent::{codes, AgentError, ChatMessage, ToolCall, Usage};
use futures_util::StreamExt;
use std::sync::Arc;

fn req(text: &str) -> ChatRequest {
    ChatRequest::new(Arc::from(vec![ChatMessage::user(text)]), Arc::from(Vec::new()))
}

fn tool_answer() -> ModelResponse {
    ModelResponse {
        content: Some("我查一下订单".into()),
        reasoning_content: Some("need tool".into()),
        tool_calls: vec![
            ToolCall::new("c1", "query_order", r#"{"orderId":"20261010"}"#),
            ToolCall::new("c2", "check_stock", r#"{"sku":"SKU001"}"#),
        ],
        finish_reason: Some("tool_calls".into()),
        usage: Some(Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }),
    }
}

async fn collect(model: &ScriptedModel, r: &ChatRequest) -> Vec<Result<ModelEvent, AgentError>> {
    model.stream(r).await.unwrap().collect().await
}

#[tokio::test]
async fn replays_in_order_and_records_requests() {
    let model = ScriptedModel::new([tool_answer(), ModelResponse::text("已发货")]);
    assert_eq!(model.remaining(), 2);
    assert_eq!(model.complete(&req("first")).await.unwrap(), tool_answer());
    assert_eq!(model.complete(&req("second")).await.unwrap().content.as_deref(), Some("已发货"));
    let e = model.complete(&req("third")).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_SCRIPT_EXHAUSTED);
    let e = model.stream(&req("fourth")).await.err().unwrap();
    assert_eq!(e.code, codes::PROVIDER_SCRIPT_EXHAUSTED);
    let seen: Vec<String> = model
        .requests()
        .iter()
        .map(|r| match &r.messages[0] {
            ChatMessage::User { content } => content.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(seen, ["first", "second", "third", "fourth"]);
}

#[tokio::test]
async fn streams_in_small_deltas_that_add_up() {
    let model = ScriptedModel::new([tool_answer(), tool_answer()]).with_chunk_chars(3);
    let events: Vec<ModelEvent> = collect(&model, &req("x")).await.into_iter().map(Result::unwrap).collect();
    let text: String = events
        .iter()
        .filter_map(|e| if let ModelEvent::TextDelta(t) = e { Some(t.clone()) } else { None })
        .collect();
    assert_eq!(text, "我查一下订单");
    assert!(events.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).all(|e| match e {
        ModelEvent::TextDelta(t) => t.chars().count() <= 3,
        _ => true,
    }));
    let args: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCallArgumentsDelta { index: 1, delta } => Some(delta.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(args, r#"{"sku":"SKU001"}"#);
    assert!(events.contains(&ModelEvent::ToolCallStarted {
        index: 0,
        id: "c1".into(),
        name: "query_order".into()
    }));
    assert!(events.contains(&ModelEvent::Usage(tool_answer().usage.unwrap())));
    assert_eq!(events.last(), Some(&ModelEvent::Finished(tool_answer())));
    // Deterministic: the same script streams the same events.
    let again: Vec<ModelEvent> = collect(&model, &req("x")).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(events, again);
}

#[tokio::test]
async fn scripted_failures() {
    let rate = AgentError::of(codes::PROVIDER_RATE_LIMITED, "scripted 429");
    let cut = AgentError::of(codes::PROVIDER_STREAM_INTERRUPTED, "scripted cut");
    let model = ScriptedModel::from_steps([
        ScriptStep::Fail(rate.clone()),
        ScriptStep::BreakOff(vec![ModelEvent::TextDelta("par".into())], cut.clone()),
    ]);
    assert_eq!(model.stream(&req("a")).await.err().unwrap(), rate);
    let items = collect(&model, &req("b")).await;
    assert_eq!(items, vec![Ok(ModelEvent::TextDelta("par".into())), Err(cut)]);
    model.push(ModelResponse::text("late"));
    assert_eq!(model.complete(&req("c")).await.unwrap().content.as_deref(), Some("late"));
}

#[test]
fn a_script_written_as_json_may_leave_fields_out() {
    let script = r#"[
        {"tool_calls": [{"id": "c1", "name": "query_order", "arguments": "{\"orderId\":\"1\"}"}]},
        {"content": "done"},
        {}
    ]"#;
    let answers: Vec<ModelResponse> = serde_json::from_str(script).unwrap();
    assert_eq!(answers[0].tool_calls, vec![ToolCall::new("c1", "query_order", r#"{"orderId":"1"}"#)]);
    assert_eq!(answers[0].content, None);
    assert_eq!(answers[1].content.as_deref(), Some("done"));
    assert!(answers[1].tool_calls.is_empty());
    assert_eq!(answers[2], ModelResponse::default());
    // A field of the wrong type is still an error.
    assert!(serde_json::from_str::<Vec<ModelResponse>>(r#"[{"tool_calls": "x"}]"#).is_err());
}
