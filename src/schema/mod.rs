//! The whitelisted JSON-Schema validator: a schema is compiled once, then validates values.
//!
//! PLACEHOLDER (foundation commit): accepts every schema and every value. The core issue replaces it.

use crate::error::AgentError;
use crate::json::JsonLimits;
use serde_json::{Map, Value};

/// Whether validation stops at the first violation or collects all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ValidationMode {
    /// Stop at the first violation (default).
    #[default]
    FirstError,
    /// Collect every violation (`tool_arguments_invalid` lists them).
    AllErrors,
}

/// A compiled schema.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    _source: Value,
}

impl CompiledSchema {
    /// Compiles a tool's parameters schema.
    ///
    /// # Errors
    /// A `schema_*` config error.
    pub fn compile(schema: &Value) -> Result<Self, AgentError> {
        Ok(CompiledSchema { _source: schema.clone() })
    }

    /// Validates a value.
    ///
    /// # Errors
    /// A `tool_argument_*` error.
    pub fn validate(&self, _value: &Value) -> Result<(), AgentError> {
        Ok(())
    }

    /// Parses tool-call arguments (a JSON object within the limits) and validates them.
    ///
    /// # Errors
    /// A `json_*` decode error or a `tool_argument_*` error.
    pub fn parse_and_validate(&self, text: &str, limits: &JsonLimits) -> Result<Map<String, Value>, AgentError> {
        crate::json::parse_object(text, limits)
    }
}
