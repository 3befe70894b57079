//! The plain objects that cross the boundary (`#[napi(object)]`), and their conversions to and
//! from the core types. Dynamic JSON (schemas, JSON content, metadata) crosses as JSON text, which
//! strict ArkTS can build without untyped object literals.

use crate::error::{codes, AgentError};
use crate::json::JsonLimits;
use crate::message::ToolCall;
use crate::tool::{ContentPart, RiskLevel, ToolDefinition, ToolResult};
use napi_derive_ohos::napi;
use serde_json::{Map, Value};
use std::time::Duration;

/// A tool definition as ArkTS gives it.
#[napi(object)]
pub struct ToolDefinitionObject {
    /// The name the model calls.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// The JSON Schema of the arguments, as JSON text.
    pub parameters_json: String,
    /// `safe` (default), `sensitive` or `dangerous`.
    pub risk_level: Option<String>,
    /// Whether running the call twice has the effect of once.
    pub idempotent: Option<bool>,
    /// The executor's timeout in milliseconds (the registry's default when absent).
    pub timeout_ms: Option<f64>,
}

impl ToolDefinitionObject {
    /// The core definition.
    ///
    /// # Errors
    /// `schema_invalid_root` when `parametersJson` is not JSON, `config_invalid` for an unknown risk
    /// level or a zero timeout.
    pub fn into_core(self) -> Result<ToolDefinition, AgentError> {
        let parameters: Value = serde_json::from_str(&self.parameters_json).map_err(|e| {
            AgentError::of(
                codes::SCHEMA_INVALID_ROOT,
                format!("parametersJson of {} is not JSON: {e}", self.name),
            )
        })?;
        let risk_level = match self.risk_level.as_deref() {
            None | Some("safe") => RiskLevel::Safe,
            Some("sensitive") => RiskLevel::Sensitive,
            Some("dangerous") => RiskLevel::Dangerous,
            Some(other) => {
                return Err(AgentError::of(
                    codes::CONFIG_INVALID,
                    format!("riskLevel must be safe, sensitive or dangerous, not {other:?}"),
                ))
            }
        };
        let timeout = self.timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        Ok(ToolDefinition {
            name: self.name,
            description: self.description,
            parameters,
            risk_level,
            idempotent: self.idempotent.unwrap_or(false),
            timeout,
        })
    }
}

/// The longest timeout accepted (one day), so that a typo cannot mean "never".
const MAX_TIMEOUT_MS: f64 = 86_400_000.0;

/// A timeout given in milliseconds: a whole number from 1 to one day.
///
/// # Errors
/// `config_invalid` naming the field.
pub fn millis(field: &str, ms: f64) -> Result<Duration, AgentError> {
    if ms.fract() != 0.0 || !(1.0..=MAX_TIMEOUT_MS).contains(&ms) {
        return Err(AgentError::of(
            codes::CONFIG_INVALID,
            format!("{field} must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS}, not {ms}"),
        ));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// A positive whole number (a limit).
///
/// # Errors
/// `config_invalid` naming the field.
fn positive(field: &str, value: f64) -> Result<usize, AgentError> {
    if value.fract() != 0.0 || !(1.0..=f64::from(u32::MAX)).contains(&value) {
        return Err(AgentError::of(
            codes::CONFIG_INVALID,
            format!("{field} must be a positive whole number, not {value}"),
        ));
    }
    Ok(value as usize)
}

/// One part of a tool's output: `{type: "text", text}` or `{type: "json", json: "<JSON text>"}`.
#[napi(object)]
pub struct ContentPartObject {
    /// `text` or `json`.
    #[napi(js_name = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
    /// The JSON text of a `json` part.
    pub json: Option<String>,
}

/// A tool result: content parts, and the error and stop flags.
#[napi(object)]
pub struct ToolResultObject {
    /// The output parts.
    pub contents: Vec<ContentPartObject>,
    /// True when the call failed.
    pub is_error: Option<bool>,
    /// True when the run should end after this batch.
    pub stop: Option<bool>,
    /// Free-form data for the app (a JSON object as text); not shown to the model.
    pub metadata_json: Option<String>,
}

impl From<ToolResult> for ToolResultObject {
    fn from(result: ToolResult) -> Self {
        let contents = result
            .contents
            .into_iter()
            .map(|part| match part {
                ContentPart::Text { text } => {
                    ContentPartObject { kind: "text".into(), text: Some(text), json: None }
                }
                ContentPart::Json { value } => {
                    ContentPartObject { kind: "json".into(), text: None, json: Some(value.to_string()) }
                }
            })
            .collect();
        ToolResultObject {
            contents,
            is_error: Some(result.is_error),
            stop: Some(result.stop),
            metadata_json: result.metadata.map(|m| Value::Object(m).to_string()),
        }
    }
}

impl ToolResultObject {
    /// The core result; the error text says what is wrong with the shape.
    ///
    /// # Errors
    /// A description of the first problem (an unknown part type, a missing field, bad JSON).
    pub fn into_core(self) -> Result<ToolResult, String> {
        let mut contents = Vec::with_capacity(self.contents.len());
        for (i, part) in self.contents.into_iter().enumerate() {
            contents.push(match (part.kind.as_str(), part.text, part.json) {
                ("text", Some(text), _) => ContentPart::Text { text },
                ("json", _, Some(json)) => ContentPart::Json {
                    value: serde_json::from_str(&json)
                        .map_err(|e| format!("contents[{i}].json is not JSON: {e}"))?,
                },
                ("text", None, _) => return Err(format!("contents[{i}] of type text has no string `text`")),
                ("json", _, None) => return Err(format!("contents[{i}] of type json has no string `json`")),
                (other, _, _) => {
                    return Err(format!("contents[{i}].type must be text or json, not {other:?}"))
                }
            });
        }
        let metadata = match self.metadata_json {
            None => None,
            Some(text) => match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => return Err("metadataJson must be a JSON object".to_string()),
                Err(e) => return Err(format!("metadataJson is not JSON: {e}")),
            },
        };
        Ok(ToolResult {
            contents,
            is_error: self.is_error.unwrap_or(false),
            stop: self.stop.unwrap_or(false),
            metadata,
        })
    }
}

/// A tool call as the model produced it.
#[napi(object)]
pub struct ToolCallObject {
    /// The provider's call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The raw arguments text.
    pub arguments: String,
}

impl From<ToolCallObject> for ToolCall {
    fn from(call: ToolCallObject) -> Self {
        ToolCall::new(call.id, call.name, call.arguments)
    }
}

impl From<&ToolCall> for ToolCallObject {
    fn from(call: &ToolCall) -> Self {
        ToolCallObject { id: call.id.clone(), name: call.name.clone(), arguments: call.arguments.clone() }
    }
}

/// Options of `new ToolRegistry(options)`.
#[napi(object)]
pub struct ToolRegistryOptions {
    /// The timeout of executors whose definition has none (default 60000 ms).
    pub default_timeout_ms: Option<f64>,
    /// The size limit of a call's arguments text in bytes (default 1 MiB).
    pub max_argument_bytes: Option<f64>,
    /// The nesting limit of a call's arguments (default 64).
    pub max_argument_depth: Option<f64>,
}

impl ToolRegistryOptions {
    /// The argument limits.
    ///
    /// # Errors
    /// `config_invalid` for a limit that is not a positive whole number.
    pub fn limits(&self) -> Result<JsonLimits, AgentError> {
        let default = JsonLimits::default();
        Ok(JsonLimits {
            max_bytes: self
                .max_argument_bytes
                .map(|b| positive("maxArgumentBytes", b))
                .transpose()?
                .unwrap_or(default.max_bytes),
            max_depth: self
                .max_argument_depth
                .map(|d| positive("maxArgumentDepth", d))
                .transpose()?
                .unwrap_or(default.max_depth),
        })
    }

    /// The default executor timeout, when given.
    ///
    /// # Errors
    /// `config_invalid` for a timeout that is not a whole number from 1 ms to one day.
    pub fn default_timeout(&self) -> Result<Option<Duration>, AgentError> {
        self.default_timeout_ms.map(|ms| millis("defaultTimeoutMs", ms)).transpose()
    }
}

/// Options of `ToolRegistry.execute`: the context the executor sees.
#[napi(object)]
pub struct ExecuteOptions {
    /// The session id (default empty).
    pub session_id: Option<String>,
    /// The batch id shared by the calls of one model turn (default empty).
    pub batch_call_id: Option<String>,
    /// The session metadata the executor may read (a JSON object as text).
    pub metadata_json: Option<String>,
}

impl ExecuteOptions {
    /// The metadata map.
    ///
    /// # Errors
    /// `config_invalid` when `metadataJson` is not a JSON object.
    pub fn metadata(&self) -> Result<Map<String, Value>, AgentError> {
        match self.metadata_json.as_deref().map(serde_json::from_str::<Value>) {
            None => Ok(Map::new()),
            Some(Ok(Value::Object(map))) => Ok(map),
            Some(_) => Err(AgentError::of(codes::CONFIG_INVALID, "metadataJson must be a JSON object")),
        }
    }
}

/// Where a hook is called from, as ArkTS sees it.
#[napi(object)]
pub struct HookContextObject {
    /// The session.
    pub session_id: String,
    /// The run.
    pub run_id: String,
    /// The model round (1-based; 0 before the first).
    pub round: u32,
}

/// What an ArkTS `beforeToolCall` returns (or `undefined` for "proceed unchanged").
#[napi(object)]
pub struct BeforeToolCallDecisionObject {
    /// `proceed`, `deny`, `defer` or `abort`.
    pub action: String,
    /// For `proceed`: the rewritten call (same id).
    pub call: Option<ToolCallObject>,
    /// For `deny`: the result the model gets instead.
    pub result: Option<ToolResultObject>,
    /// For `defer` and `abort`: why.
    pub reason: Option<String>,
}

/// What an ArkTS `afterToolCall` returns (or `undefined` for "keep the result").
#[napi(object)]
pub struct AfterToolCallDecisionObject {
    /// `proceed`, `stop` or `abort`.
    pub action: String,
    /// For `proceed`: the rewritten result.
    pub result: Option<ToolResultObject>,
    /// For `abort`: why.
    pub reason: Option<String>,
    /// Messages to inject after the batch: a JSON array of chat messages.
    pub inject_json: Option<String>,
}
