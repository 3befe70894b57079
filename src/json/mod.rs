//! Untrusted JSON: input limits (depth, size) and the RFC 8785 canonical form (JCS).
//!
//! PLACEHOLDER (foundation commit): limits are checked naively and `canonicalize` is not yet JCS.
//! The core issue replaces both.

use crate::error::{codes, AgentError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Limits for untrusted JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonLimits {
    /// Maximum nesting depth (default 64).
    pub max_depth: usize,
    /// Maximum size in bytes (default 1 MiB).
    pub max_bytes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits { max_depth: 64, max_bytes: 1024 * 1024 }
    }
}

/// Parses text that must be a JSON object, within the limits.
///
/// # Errors
/// `json_too_large`, `json_too_deep`, `json_invalid`, `json_not_object`.
pub fn parse_object(text: &str, limits: &JsonLimits) -> Result<Map<String, Value>, AgentError> {
    if text.len() > limits.max_bytes {
        return Err(AgentError::of(codes::JSON_TOO_LARGE, "arguments too large"));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(AgentError::of(codes::JSON_NOT_OBJECT, "arguments must be a JSON object")),
        Err(e) => Err(AgentError::of(codes::JSON_INVALID, e.to_string())),
    }
}

/// The canonical JSON text of a value (RFC 8785).
pub fn canonicalize(value: &Value) -> String {
    value.to_string()
}
