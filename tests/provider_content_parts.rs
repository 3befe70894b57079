//! An assistant message's `content` sent as an array of parts, not a string: Mistral's reasoning
//! models (Magistral) answer `[{"type":"thinking","thinking":[{"type":"text",...}]},
//! {"type":"text","text":...}]` in a whole answer's `message.content` and, one part at a time, in
//! each streamed `delta.content`; some gateways send `[{"type":"text","text":...}]`. The text parts
//! are the answer, the thinking parts its reasoning (where `reasoning_content` goes), parts of
//! other types are left out; a part that is not an object or a `content` of another JSON type is
//! `provider_decode`, streamed or not. A character a gateway cut across two chunks is joined in
//! parts as in a string. The conversation then goes on with plain string content.
//!
//! The bodies have the shape Mistral sends (magistral-medium-2507: the recorded fixtures of the
//! Vercel AI SDK's Mistral provider, `packages/mistral/src/__fixtures__/mistral-reasoning.*`, and
//! Spring AI's magistral-medium-2509 test): ids, fields and their order as recorded, texts our own.

#[path = "support/derived.rs"]
mod derived;
#[path = "support/drain.rs"]
mod drain;
#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::agent::{AgentBuilder, AgentConfig, EventLog, RunOutcome};
use arkagent::provider::convert::parse_response;
use arkagent::provider::{
    ChatModel, ChatRequest, ClientConfig, ModelEvent, ModelResponse, OpenAiCompatibleClient, RetryPolicy,
    StreamAssembler,
};
use arkagent::state::FileStore;
use arkagent::tool::FnExecutor;
use arkagent::{codes, CancellationSignal, ChatMessage, ToolCall, ToolDefinition, ToolResult};
use derived::sse;
use mock_server::{MockServer, Reply};
use serde_json::{json, Value};
use std::sync::Arc;

/// A whole answer of magistral-medium, as Mistral formats it.
const MAGISTRAL_WHOLE: &str = r#"{
  "id": "5d0c7e2a91b84f3a9c6e1f0b2a7d4c85",
  "created": 1769090104,
  "model": "magistral-medium-2507",
  "usage": {
    "prompt_tokens": 18,
    "total_tokens": 83,
    "completion_tokens": 65
  },
  "object": "chat.completion",
  "choices": [
    {
      "index": 0,
      "finish_reason": "stop",
      "message": {
        "role": "assistant",
        "tool_calls": null,
        "content": [
          {
            "type": "thinking",
            "thinking": [
              {
                "type": "text",
                "text": "The user asks where order 20261010 is. It shipped yesterday, so I say so."
              }
            ],
            "closed": true
          },
          {
            "type": "text",
            "text": "订单 20261010 已发货。"
          }
        ]
      },
      "logprobs": null
    }
  ]
}"#;

const REASONING: &str = "The user asks where order 20261010 is. It shipped yesterday, so I say so.";
const ANSWER: &str = "订单 20261010 已发货。";

/// The same answer streamed: the thinking in two deltas, then the text in two, then the finish
/// reason with an empty string content and the usage.
const MAGISTRAL_STREAM: [&str; 6] = [
    r#"{"id":"5d0c7e2a91b84f3a9c6e1f0b2a7d4c85","object":"chat.completion.chunk","created":1769090104,"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"The user asks where order 20261010 is."}]}]},"finish_reason":null}]}"#,
    r#"{"id":"5d0c7e2a91b84f3a9c6e1f0b2a7d4c85","object":"chat.completion.chunk","created":1769090104,"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":" It shipped yesterday, so I say so."}]}]},"finish_reason":null}]}"#,
    r#"{"id":"5d0c7e2a91b84f3a9c6e1f0b2a7d4c85","object":"chat.completion.chunk","created":1769090104,"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"订单 20261010"}]},"finish_reason":null}]}"#,
    r#"{"id":"5d0c7e2a91b84f3a9c6e1f0b2a7d4c85","object":"chat.completion.chunk","created":1769090104,"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"content":[{"type":"text","text":" 已发货。"}]},"finish_reason":null}]}"#,
    r#"{"id":"5d0c7e2a91b84f3a9c6e1f0b2a7d4c85","object":"chat.completion.chunk","created":1769090104,"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":18,"total_tokens":83,"completion_tokens":65}}"#,
    "[DONE]",
];

/// The events of a stream (see `derived::events_both_ways`).
fn stream_events(payloads: &[&str]) -> Vec<ModelEvent> {
    derived::events_both_ways(payloads)
}

fn finished(events: &[ModelEvent]) -> &ModelResponse {
    match events.last() {
        Some(ModelEvent::Finished(r)) => r,
        other => panic!("last event {other:?}"),
    }
}

fn client(server: &MockServer) -> OpenAiCompatibleClient {
    OpenAiCompatibleClient::new(
        ClientConfig::custom(server.base_url(), "magistral-medium-2507", "sk-content-parts")
            .with_retry(RetryPolicy::none()),
    )
    .unwrap()
}

fn question() -> ChatRequest {
    ChatRequest::new(Arc::from(vec![ChatMessage::user("我的订单 20261010 到哪了？")]), Arc::from(Vec::new()))
}

#[tokio::test]
async fn a_whole_magistral_answer_is_its_text_with_its_thinking_as_reasoning() {
    let r = parse_response(MAGISTRAL_WHOLE.as_bytes()).unwrap();
    assert_eq!(r.content.as_deref(), Some(ANSWER));
    assert_eq!(r.reasoning_content.as_deref(), Some(REASONING));
    assert!(r.tool_calls.is_empty());
    assert_eq!((r.finish_reason.as_deref(), r.usage.map(|u| u.total_tokens)), (Some("stop"), Some(83)));

    let server = MockServer::start([Reply::raw(200, MAGISTRAL_WHOLE)]).await;
    assert_eq!(client(&server).complete(&question()).await.unwrap(), r);
}

#[tokio::test]
async fn a_streamed_magistral_answer_is_its_text_with_its_thinking_as_reasoning() {
    let events = stream_events(&MAGISTRAL_STREAM);
    let pieces: Vec<&ModelEvent> = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::TextDelta(_) | ModelEvent::ReasoningDelta(_)))
        .collect();
    assert_eq!(
        pieces,
        [
            &ModelEvent::ReasoningDelta("The user asks where order 20261010 is.".into()),
            &ModelEvent::ReasoningDelta(" It shipped yesterday, so I say so.".into()),
            &ModelEvent::TextDelta("订单 20261010".into()),
            &ModelEvent::TextDelta(" 已发货。".into()),
        ]
    );
    let r = finished(&events);
    // The same answer as the whole one.
    assert_eq!(r, &parse_response(MAGISTRAL_WHOLE.as_bytes()).unwrap());

    let server = MockServer::start([Reply::sse(&sse(&MAGISTRAL_STREAM))]).await;
    let (through_client, e) = drain::drain(&client(&server), &question()).await;
    assert!(e.is_none(), "{e:?}");
    assert_eq!(finished(&through_client), r);
}

#[test]
fn a_gateways_text_parts_are_the_answer_beside_its_calls() {
    let whole = r#"{"id":"gw-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",
        "content":[{"type":"text","text":"我来查一下"},{"type":"text","text":"订单。"}],
        "tool_calls":[{"id":"call_1","type":"function","function":{"name":"query_order","arguments":"{\"order_id\":\"20261010\"}"}}]},
        "finish_reason":"tool_calls"}]}"#;
    let r = parse_response(whole.as_bytes()).unwrap();
    assert_eq!((r.content.as_deref(), r.reasoning_content.as_deref()), (Some("我来查一下订单。"), None));
    assert_eq!(r.tool_calls, [ToolCall::new("call_1", "query_order", r#"{"order_id":"20261010"}"#)]);

    let streamed = stream_events(&[
        r#"{"id":"gw-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":[{"type":"text","text":"我来查一下"}]},"finish_reason":null}]}"#,
        r#"{"id":"gw-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"订单。"}]},"finish_reason":null}]}"#,
        r#"{"id":"gw-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"query_order","arguments":"{\"order_id\":\"20261010\"}"}}]},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    let s = finished(&streamed);
    assert_eq!((s.content.as_deref(), &s.tool_calls), (r.content.as_deref(), &r.tool_calls));
}

#[test]
fn a_character_a_gateway_cut_across_two_parts_is_joined() {
    // A JS gateway that slices text by UTF-16 index sends the halves of an emoji in two chunks.
    let events = stream_events(&[
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm \ud83e"}]}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"\udd14"}]},{"type":"text","text":"ok \ud83d"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"\ude00"}]},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]);
    let r = finished(&events);
    assert_eq!((r.content.as_deref(), r.reasoning_content.as_deref()), (Some("ok 😀"), Some("hm 🤔")));
}

#[test]
fn parts_of_other_types_are_left_out() {
    // Mistral's `reference` parts (citations of a tool's results) and an image name no text.
    let whole = r#"{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":[
        {"type":"text","text":"It ships today"},{"type":"reference","reference_ids":[0,1]},
        {"type":"image_url","image_url":{"url":"https://example.com/a.png"}},{"type":"text","text":"."}]}}]}"#;
    let r = parse_response(whole.as_bytes()).unwrap();
    assert_eq!((r.content.as_deref(), r.reasoning_content.as_deref()), (Some("It ships today."), None));
    let streamed = stream_events(&[
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"It ships today"},{"type":"reference","reference_ids":[0,1]}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"reference","reference_ids":[2]}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"."}]},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]);
    assert_eq!(finished(&streamed).content.as_deref(), Some("It ships today."));
}

/// Content shapes that are no answer: the whole body and the streamed payload are refused with
/// `provider_decode`, whose message keeps the raw text.
const BAD_CONTENT: [&str; 5] = [
    "42",
    r#"{"type":"text","text":"x"}"#,
    "true",
    r#"["订单已发货"]"#,
    r#"[{"type":"text","text":"ok"},{"type":"text","text":7}]"#,
];

#[tokio::test]
async fn another_shape_of_content_is_provider_decode() {
    for content in BAD_CONTENT {
        let whole = format!(
            r#"{{"choices":[{{"index":0,"message":{{"role":"assistant","content":{content}}},"finish_reason":"stop"}}]}}"#
        );
        let e = parse_response(whole.as_bytes()).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_DECODE, "{content}: {e}");
        assert!(e.message.contains(content), "{content}: {}", e.message);

        let payload = format!(r#"{{"choices":[{{"index":0,"delta":{{"content":{content}}}}}]}}"#);
        for derived in [false, true] {
            let mut assembler = StreamAssembler::new();
            let mut out = Vec::new();
            let e = if derived {
                assembler.push_payload_derived(None, &payload, &mut out)
            } else {
                assembler.push_payload(None, &payload, &mut out)
            }
            .unwrap_err();
            assert_eq!(e.code, codes::PROVIDER_DECODE, "{content}: {e}");
            assert!(e.message.contains(&payload), "{content}: {}", e.message);
            assert!(out.is_empty(), "{content}: {out:?}");
        }
    }
    let payload = format!(r#"{{"choices":[{{"index":0,"delta":{{"content":{}}}}}]}}"#, BAD_CONTENT[4]);
    let server = MockServer::start([
        Reply::raw(200, format!(r#"{{"choices":[{{"message":{{"content":{}}}}}]}}"#, BAD_CONTENT[0])),
        Reply::sse(&sse(&[MAGISTRAL_STREAM[0], &payload, "[DONE]"])),
    ])
    .await;
    let client = client(&server);
    let e = client.complete(&question()).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_DECODE, "{e}");
    let (_, e) = drain::drain(&client, &question()).await;
    assert_eq!(e.map(|e| e.code), Some(codes::PROVIDER_DECODE.into()));
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id":"5d0c7e2a91b84f3a9c6e1f0b2a7d4c85","object":"chat.completion.chunk","created":1769090104,
           "model":"magistral-medium-2507","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    .to_string()
}

fn thinking(text: &str) -> Value {
    json!([{"type":"thinking","thinking":[{"type":"text","text":text}]}])
}

/// Every assistant message a request sends back has string (or, beside calls, `null`) content
/// and no parts.
fn assert_plain_history(request: &Value) {
    for m in request["messages"].as_array().unwrap() {
        assert!(m["content"].is_string() || (m["content"].is_null() && m["tool_calls"].is_array()), "{m}");
    }
}

#[tokio::test]
async fn the_conversation_goes_on_with_plain_string_content() {
    for streaming in [true, false] {
        // Magistral thinks, calls the tool, reads its result, answers; then the next question.
        let call = json!([{"id":"D681PevKs","function":{"name":"query_order","arguments":"{\"order_id\": \"20261010\"}"},"index":0}]);
        let replies = if streaming {
            [
                Reply::sse(&sse(&[
                    &chunk(
                        json!({"role":"assistant","content":thinking("I should look the order up.")}),
                        None,
                    ),
                    &chunk(json!({"content":"","tool_calls":call}), Some("tool_calls")),
                    "[DONE]",
                ])),
                Reply::sse(&sse(&MAGISTRAL_STREAM)),
                Reply::sse(&sse(&[
                    &chunk(json!({"role":"assistant","content":thinking("Thanks.")}), None),
                    &chunk(json!({"content":[{"type":"text","text":"不客气。"}]}), Some("stop")),
                    "[DONE]",
                ])),
            ]
        } else {
            let whole = |content: Value, calls: Value, finish: &str| {
                Reply::json(
                    200,
                    &json!({"id":"x","object":"chat.completion","model":"magistral-medium-2507","choices":[{"index":0,
                        "finish_reason":finish,"message":{"role":"assistant","tool_calls":calls,"content":content}}]}),
                )
            };
            [
                whole(thinking("I should look the order up."), call.clone(), "tool_calls"),
                Reply::raw(200, MAGISTRAL_WHOLE),
                whole(
                    json!([thinking("Thanks.")[0], {"type":"text","text":"不客气。"}]),
                    Value::Null,
                    "stop",
                ),
            ]
        };
        let server = MockServer::start(replies).await;
        let dir = tempfile::tempdir().unwrap();
        let agent = AgentBuilder::new(Arc::new(client(&server)), Arc::new(FileStore::new(dir.path())))
            .config(AgentConfig { streaming, ..AgentConfig::default() })
            .build();
        agent
            .register_tool(
                ToolDefinition::new(
                    "query_order",
                    "查询订单状态",
                    json!({"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}),
                ),
                Arc::new(FnExecutor(|_args: serde_json::Map<String, Value>, _ctx| async move {
                    Ok(ToolResult::text("shipped"))
                })),
            )
            .unwrap();
        let final_text = |out: RunOutcome| match out {
            RunOutcome::Finished { final_text, .. } => final_text,
            RunOutcome::Suspended { .. } => panic!("suspended"),
        };
        let cancel = CancellationSignal::new();
        let out = agent.run("s", "我的订单 20261010 到哪了？", &EventLog::new(), &cancel).await.unwrap();
        assert_eq!(final_text(out).as_deref(), Some(ANSWER), "streaming {streaming}");
        let out = agent.run("s", "谢谢", &EventLog::new(), &cancel).await.unwrap();
        assert_eq!(final_text(out).as_deref(), Some("不客气。"), "streaming {streaming}");

        let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
        assert_eq!(requests.len(), 3, "streaming {streaming}");
        for request in &requests {
            assert_plain_history(request);
        }
        let last = &requests[2]["messages"];
        assert_eq!(last[1]["content"], Value::Null);
        assert_eq!(last[1]["tool_calls"][0]["function"]["name"], "query_order");
        assert_eq!(last[3], json!({"role":"assistant","content":ANSWER}), "streaming {streaming}");
        assert_eq!(last[4], json!({"role":"user","content":"谢谢"}));
        // The reasoning is kept in the state, as `reasoning_content` is.
        let state = agent.state("s").await.unwrap().unwrap();
        let reasoning: Vec<Option<&str>> = state
            .messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::Assistant { reasoning_content, .. } => Some(reasoning_content.as_deref()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, [Some("I should look the order up."), Some(REASONING), Some("Thanks.")]);
    }
}
