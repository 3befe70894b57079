//! The one request the provider tests send: one user message ("hi"), no tools, every option left
//! to the client. Share it with `#[path = "support/request.rs"] mod request;` (the other support
//! files that need it include it themselves).

use arkagent::provider::ChatRequest;
use arkagent::ChatMessage;
use std::sync::Arc;

/// One user message, no tools.
pub fn request() -> ChatRequest {
    ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()))
}
