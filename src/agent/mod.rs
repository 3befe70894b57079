//! The agent runtime: the run as a serializable state machine ([`machine`]) and the tokio driver
//! ([`Agent`]) that performs its I/O: model rounds, tool batches (hooks, approval freeze, registry
//! gates, execution), state commits and events, the app's session metadata (`metadata`) and the
//! listing of the sessions a store holds (`sessions`).

mod config;
mod delegate;
mod driver;
mod events;
pub mod machine;
mod metadata;
mod sessions;

pub use config::{AgentConfig, DEFAULT_MAX_RESULT_BYTES, MAX_ROUNDS_FALLBACK};
pub use delegate::{delegate_task_definition, WorkerFactory, DELEGATE_TASK};
#[cfg(feature = "napi")]
pub(crate) use driver::reserved_tool_name;
pub use driver::{Agent, AgentBuilder, RunOutcome, TurnReservation};
pub use events::{AgentEvent, EventLog, EventSink, NoEvents};
pub use metadata::MetadataTurn;
pub use sessions::{SessionSummary, SESSION_TITLE_CHARS};
