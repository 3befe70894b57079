//! Collecting a streamed answer, for the provider tests.

use arkagent::provider::{ChatModel, ChatRequest, ModelEvent, OpenAiCompatibleClient};
use arkagent::AgentError;
use futures_util::StreamExt;

/// Streams `request` and returns the events before the first error, and the error; nothing may
/// follow an error.
pub async fn drain(
    client: &OpenAiCompatibleClient,
    request: &ChatRequest,
) -> (Vec<ModelEvent>, Option<AgentError>) {
    let mut stream = match client.stream(request).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => events.push(ev),
            Err(e) => {
                assert!(stream.next().await.is_none(), "nothing after an error");
                return (events, Some(e));
            }
        }
    }
    (events, None)
}
