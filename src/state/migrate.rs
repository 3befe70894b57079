//! Schema migrations: ordered step functions over `serde_json::Value`, each taking a state of
//! version `n` to version `n + 1`, until [`SCHEMA_VERSION`].
//!
//! # Version 1
//! The version-1 store (the first ArkTS implementation) kept one plain `state.json` per session
//! directory: no journal, no checksum, and no approval, tool-run or loop-detector fields. Its JSON
//! used camelCase names and OpenAI-shaped tool calls:
//! ```json
//! {
//!   "schemaVersion": 1,
//!   "sessionId": "s1",
//!   "metadata": {"app": "demo"},
//!   "messages": [
//!     {"role": "user", "content": "where is order 42?"},
//!     {"role": "assistant", "content": null, "reasoningContent": "...",
//!      "toolCalls": [{"id": "c1", "type": "function",
//!                     "function": {"name": "query_order", "arguments": {"orderId": 42}}}]},
//!     {"role": "tool", "toolCallId": "c1", "name": "query_order", "content": "...", "isError": false}
//!   ],
//!   "runStatus": "error",
//!   "runId": "r1",
//!   "round": 2,
//!   "usage": {"promptTokens": 10, "completionTokens": 5, "totalTokens": 15}
//! }
//! ```
//! Tool-call `arguments` were either JSON text or an already parsed object; `runStatus` had no
//! `awaiting_approval` (there was no approval) and said `error` where version 2 says `failed`.
//!
//! # Version 2
//! The current [`AgentState`] (snake_case, `schema_version`), written as a
//! checksummed snapshot plus a journal. Version 2 adds the pending approval batch, the tool-run
//! records and the loop detector's window; migrating from 1 leaves them empty.
//!
//! Fields added to version 2 later are optional and need no step: a state or a journal record
//! saved before one existed reads it as absent, and a reader that predates it ignores it (states
//! and events are read without refusing unknown fields). So far: the run's `finish_reason`, its
//! `run_error` (and `StatusChanged`'s `finish_reason` and `error`), `delegation`, `workers`,
//! `stop_requested`, `turn_question`, `approval_announced` (with `ApprovalRequested`'s
//! `announced`), and `ToolFinished`'s `stop_requested` and `injected` (with a finished tool-run
//! record's): what a call's after-hooks asked, saved with the call. A reader that predates those
//! two ignores them, so a process of that version resuming a batch cut short loses the stop and
//! the messages of the calls finished before the cut, as it always did.

use super::{AgentState, SCHEMA_VERSION};
use crate::error::{codes, AgentError};
use serde_json::{Map, Value};

/// One migration step: a state of version `n` to version `n + 1` (index `n - 1` in [`STEPS`]).
pub type MigrationStep = fn(Value) -> Result<Value, AgentError>;

/// The steps, in order: `STEPS[0]` takes version 1 to 2, and so on.
pub const STEPS: &[MigrationStep] = &[v1_to_v2];

fn failed(message: impl Into<String>) -> AgentError {
    AgentError::of(codes::STATE_MIGRATION_FAILED, message)
}

/// The schema version a state's JSON says it has (`schema_version`, or version 1's
/// `schemaVersion`).
///
/// # Errors
/// `state_corrupt` when the value is not an object or has no integer version.
pub fn schema_version_of(value: &Value) -> Result<u32, AgentError> {
    let obj = value
        .as_object()
        .ok_or_else(|| AgentError::of(codes::STATE_CORRUPT, "the state is not a JSON object"))?;
    let v = obj.get("schema_version").or_else(|| obj.get("schemaVersion"));
    v.and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| AgentError::of(codes::STATE_CORRUPT, "the state has no schema version"))
}

/// Migrates a state's JSON of any known version to the current one, as JSON.
///
/// # Errors
/// `state_corrupt` (no version), `state_version_unsupported` (newer than [`SCHEMA_VERSION`]),
/// `state_migration_failed` (version 0 or a step refused the input).
pub fn migrate_json(mut value: Value) -> Result<Value, AgentError> {
    let mut version = schema_version_of(&value)?;
    if version > SCHEMA_VERSION {
        return Err(AgentError::of(
            codes::STATE_VERSION_UNSUPPORTED,
            format!(
                "the state was written by schema version {version}; this code knows up to {SCHEMA_VERSION}"
            ),
        ));
    }
    if version == 0 {
        return Err(failed("schema version 0 does not exist"));
    }
    while version < SCHEMA_VERSION {
        let step = STEPS[(version - 1) as usize];
        value = step(value)
            .map_err(|e| failed(format!("from version {version} to {}: {}", version + 1, e.message)))?;
        version += 1;
        let written = schema_version_of(&value)?;
        if written != version {
            return Err(failed(format!("the step to version {version} wrote version {written}")));
        }
    }
    Ok(value)
}

/// Migrates a state's JSON of any known version and decodes it.
///
/// # Errors
/// As [`migrate_json`], plus `state_corrupt` when the migrated JSON is not a valid state.
pub fn migrate_value(value: Value) -> Result<AgentState, AgentError> {
    let value = migrate_json(value)?;
    serde_json::from_value(value)
        .map_err(|e| AgentError::of(codes::STATE_CORRUPT, format!("the state does not decode: {e}")))
}

fn take_obj(value: Value, what: &str) -> Result<Map<String, Value>, AgentError> {
    match value {
        Value::Object(m) => Ok(m),
        other => Err(failed(format!("{what} is not an object but {}", type_name(&other)))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string_field(m: &mut Map<String, Value>, key: &str, what: &str) -> Result<String, AgentError> {
    match m.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(failed(format!("{what}.{key} is {} , not a string", type_name(&other)))),
        None => Err(failed(format!("{what}.{key} is missing"))),
    }
}

fn opt_string_field(m: &mut Map<String, Value>, key: &str, what: &str) -> Result<Option<String>, AgentError> {
    match m.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(failed(format!("{what}.{key} is {}, not a string", type_name(&other)))),
    }
}

/// Version 1 -> 2: camelCase to snake_case, OpenAI-shaped tool calls to flat ones with JSON-text
/// arguments, `runStatus` `error` to `failed`; the fields new in version 2 start empty.
fn v1_to_v2(value: Value) -> Result<Value, AgentError> {
    let mut old = take_obj(value, "$")?;
    let mut new = Map::new();
    new.insert("schema_version".into(), Value::from(2));
    new.insert("session_id".into(), Value::String(string_field(&mut old, "sessionId", "$")?));
    match old.remove("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            new.insert("metadata".into(), Value::Object(m));
        }
        Some(other) => return Err(failed(format!("$.metadata is {}, not an object", type_name(&other)))),
    }
    let messages = match old.remove("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a,
        Some(other) => return Err(failed(format!("$.messages is {}, not an array", type_name(&other)))),
    };
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.into_iter().enumerate() {
        out.push(v1_message(m, &format!("$.messages[{i}]"))?);
    }
    new.insert("messages".into(), Value::Array(out));
    let status = match opt_string_field(&mut old, "runStatus", "$")?.as_deref() {
        None | Some("idle") => "idle",
        Some("running") => "running",
        Some("completed") => "completed",
        Some("cancelled") => "cancelled",
        Some("error") => "failed",
        Some("loop_detected") => "loop_detected",
        Some("aborted") => "aborted",
        Some("max_rounds") => "max_rounds",
        Some(other) => return Err(failed(format!("$.runStatus {other:?} is not a version-1 status"))),
    };
    new.insert("status".into(), Value::from(status));
    if let Some(run_id) = opt_string_field(&mut old, "runId", "$")? {
        new.insert("run_id".into(), Value::String(run_id));
    }
    match old.remove("round") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|r| r <= u32::MAX as u64) => {
            new.insert("round".into(), Value::Number(n));
        }
        Some(other) => return Err(failed(format!("$.round is {other}, not a round number"))),
    }
    if let Some(u) = old.remove("usage") {
        let mut u = take_obj(u, "$.usage")?;
        let mut usage = Map::new();
        for (from, to) in [
            ("promptTokens", "prompt_tokens"),
            ("completionTokens", "completion_tokens"),
            ("totalTokens", "total_tokens"),
        ] {
            let n = match u.remove(from) {
                None | Some(Value::Null) => 0,
                Some(v) => v.as_u64().ok_or_else(|| failed(format!("$.usage.{from} is {v}, not a count")))?,
            };
            usage.insert(to.into(), Value::from(n));
        }
        new.insert("usage".into(), Value::Object(usage));
    }
    Ok(Value::Object(new))
}

fn v1_message(m: Value, path: &str) -> Result<Value, AgentError> {
    let mut m = take_obj(m, path)?;
    let role = string_field(&mut m, "role", path)?;
    let mut new = Map::new();
    new.insert("role".into(), Value::String(role.clone()));
    match role.as_str() {
        "system" | "user" => {
            let content = opt_string_field(&mut m, "content", path)?.unwrap_or_default();
            new.insert("content".into(), Value::String(content));
        }
        "assistant" => {
            if let Some(c) = opt_string_field(&mut m, "content", path)? {
                new.insert("content".into(), Value::String(c));
            }
            if let Some(r) = opt_string_field(&mut m, "reasoningContent", path)? {
                new.insert("reasoning_content".into(), Value::String(r));
            }
            let calls = match m.remove("toolCalls") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a,
                Some(other) => {
                    return Err(failed(format!("{path}.toolCalls is {}, not an array", type_name(&other))))
                }
            };
            let mut out = Vec::with_capacity(calls.len());
            for (i, c) in calls.into_iter().enumerate() {
                let cpath = format!("{path}.toolCalls[{i}]");
                let mut c = take_obj(c, &cpath)?;
                let id = string_field(&mut c, "id", &cpath)?;
                let mut f = take_obj(
                    c.remove("function").ok_or_else(|| failed(format!("{cpath}.function is missing")))?,
                    &format!("{cpath}.function"),
                )?;
                let name = string_field(&mut f, "name", &format!("{cpath}.function"))?;
                let arguments = match f.remove("arguments") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(Value::String(s)) if s.is_empty() => "{}".to_string(),
                    Some(Value::String(s)) => s,
                    Some(v @ Value::Object(_)) => v.to_string(),
                    Some(other) => {
                        return Err(failed(format!(
                            "{cpath}.function.arguments is {}, not JSON text or an object",
                            type_name(&other)
                        )))
                    }
                };
                let mut call = Map::new();
                call.insert("id".into(), Value::String(id));
                call.insert("name".into(), Value::String(name));
                call.insert("arguments".into(), Value::String(arguments));
                out.push(Value::Object(call));
            }
            if !out.is_empty() {
                new.insert("tool_calls".into(), Value::Array(out));
            }
        }
        "tool" => {
            new.insert("tool_call_id".into(), Value::String(string_field(&mut m, "toolCallId", path)?));
            new.insert(
                "name".into(),
                Value::String(opt_string_field(&mut m, "name", path)?.unwrap_or_default()),
            );
            new.insert(
                "content".into(),
                Value::String(opt_string_field(&mut m, "content", path)?.unwrap_or_default()),
            );
            match m.remove("isError") {
                None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                Some(Value::Bool(true)) => {
                    new.insert("is_error".into(), Value::Bool(true));
                }
                Some(other) => {
                    return Err(failed(format!("{path}.isError is {}, not a boolean", type_name(&other))))
                }
            }
        }
        other => return Err(failed(format!("{path}.role {other:?} is not a known role"))),
    }
    Ok(Value::Object(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_cover_every_old_version() {
        assert_eq!(STEPS.len() as u32, SCHEMA_VERSION - 1);
    }

    #[test]
    fn current_states_pass_through() {
        let s = AgentState::new("s1");
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(migrate_value(v).unwrap(), s);
    }

    #[test]
    fn newer_and_missing_versions_are_refused() {
        let e = migrate_value(json!({"schema_version": SCHEMA_VERSION + 1, "session_id": "s"})).unwrap_err();
        assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED);
        let e = migrate_value(json!({"session_id": "s"})).unwrap_err();
        assert_eq!(e.code, codes::STATE_CORRUPT);
        let e =
            migrate_value(json!({"schemaVersion": 1, "sessionId": "s", "runStatus": "paused"})).unwrap_err();
        assert_eq!(e.code, codes::STATE_MIGRATION_FAILED);
        assert!(e.message.contains("paused"), "{}", e.message);
    }
}
