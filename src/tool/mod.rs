//! The tool contract (definition + executor, context, result) and the registry that checks and
//! dispatches calls.

mod context;
mod definition;
mod registry;
mod result;

pub use context::{
    CallStart, CancellationSignal, ReadonlyAgentState, ToolContext, ToolService, ToolServiceRegistry,
    TIMEOUT_REASON,
};
pub use definition::{ParametersSchema, RiskLevel, ToolDefinition};
pub(crate) use registry::{cancelled_error, timed_out_error, tool_not_found, wire_safe_tool_name};
pub use registry::{PreparedCall, RegisteredTool, ToolRegistry, ToolSnapshot};
pub use result::{ContentPart, ToolResult, MAX_CUT_ERROR_BYTES, MAX_RESULT_DEPTH};

use crate::error::AgentError;
use async_trait::async_trait;
use serde_json::{Map, Value};

/// The app's half of a tool: runs a call whose arguments already passed the registry's gates.
///
/// Return `Ok` with a result (set `is_error` for a failure the model should see), or `Err` with a
/// domain [`AgentError`]: its code passes through unchanged. A panic becomes
/// `tool_execution_failed`.
///
/// Cancellation (the seed's rule: a cancelled call is not written back, the run ends) is the
/// run's: once the run's signal (which `context.signal` follows) is cancelled, whatever the
/// executor returns is dropped and the run ends `cancelled`. An error of the `cancelled` layer that
/// an executor returns while the run goes on (say, the user closed the tool's own dialog) is a
/// domain error like any other: the model reads it and the run goes on.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs one call.
    ///
    /// # Errors
    /// A domain error of the tool, which reaches the model as an `is_error` result with its code.
    async fn execute(
        &self,
        arguments: Map<String, Value>,
        context: ToolContext,
    ) -> Result<ToolResult, AgentError>;

    /// Whether the executor marks its call started itself ([`ToolContext::started`]), at the
    /// moment the app's code is reached: a binding's, which queues the call for another thread
    /// (a cancel that comes first makes it never run). By default the registry marks it as it
    /// calls [`execute`](Self::execute). An executor that says so must mark the call started
    /// before any of the app's code runs, and not run it when [`CallStart::start`] refuses.
    fn marks_own_start(&self) -> bool {
        false
    }
}

/// An executor made from an async closure, for Rust tools and tests.
pub struct FnExecutor<F>(pub F);

#[async_trait]
impl<F, Fut> ToolExecutor for FnExecutor<F>
where
    F: Fn(Map<String, Value>, ToolContext) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<ToolResult, AgentError>> + Send,
{
    async fn execute(
        &self,
        arguments: Map<String, Value>,
        context: ToolContext,
    ) -> Result<ToolResult, AgentError> {
        (self.0)(arguments, context).await
    }
}
