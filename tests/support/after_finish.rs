//! What the tests of the limit after the finish reason share (tests/provider_after_finish.rs,
//! tests/provider_after_finish_pings.rs): the chunks of a streamed tool call, its finish reason and
//! usage report, the request, and the answer a stream ended with.
#![allow(dead_code)]

use arkagent::provider::{ModelEvent, ModelResponse};

/// A chunk with text and one whole tool call (`c1`, `f`, `{}`).
pub const CALL: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\",\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n";
/// The finish reason of the call.
pub const FINISH: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n";
/// The usage report after it (7 tokens).
pub const USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n";
/// The end of the stream.
pub const DONE: &str = "data: [DONE]\n\n";

#[path = "request.rs"]
mod request;
/// One user message, no tools.
pub use request::request;

/// The answer a stream's events end with (fails when they end otherwise).
pub fn answer(events: &[ModelEvent]) -> &ModelResponse {
    match events.last() {
        Some(ModelEvent::Finished(r)) => r,
        other => panic!("last event {other:?}"),
    }
}
