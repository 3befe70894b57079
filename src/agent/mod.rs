//! The agent runtime: a serializable run state machine and the tokio driver that does its I/O.
//!
//! Comes with the runtime issue.
