//! What the model sees of a tool: name, description, JSON-Schema parameters and a risk level.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// How risky running a tool is; the default approval policy asks the user for anything but `Safe`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    /// Read-only, no side effect: runs without asking.
    #[default]
    Safe,
    /// A reversible side effect: asks for confirmation.
    Sensitive,
    /// Irreversible or high-risk: asks for confirmation.
    Dangerous,
}

/// A tool's definition: the "menu entry" sent to the model, plus how the runtime treats it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls.
    pub name: String,
    /// What the tool does; the model decides from this.
    pub description: String,
    /// The JSON Schema of the arguments (an object schema, whitelisted keywords only).
    pub parameters: Value,
    /// Risk level (default safe).
    #[serde(default)]
    pub risk_level: RiskLevel,
    /// True when running the call twice has the same effect as once: after a crash, a started but
    /// unfinished call of an idempotent tool is run again instead of being reported as interrupted.
    #[serde(default)]
    pub idempotent: bool,
    /// Overrides the runtime's per-tool timeout.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_millis")]
    pub timeout: Option<Duration>,
}

impl ToolDefinition {
    /// A safe, non-idempotent tool with the default timeout.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
            risk_level: RiskLevel::Safe,
            idempotent: false,
            timeout: None,
        }
    }

    /// The same definition with another risk level.
    pub fn with_risk(mut self, risk_level: RiskLevel) -> Self {
        self.risk_level = risk_level;
        self
    }

    /// The same definition marked idempotent.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// The same definition with its own timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The OpenAI `tools` entry: `{"type":"function","function":{name, description, parameters}}`.
    pub fn to_openai_tool(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

mod opt_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_tool_shape() {
        let d = ToolDefinition::new("query_order", "查询订单", json!({"type":"object"}));
        let t = d.to_openai_tool();
        assert_eq!(t["type"], "function");
        assert_eq!(t["function"]["name"], "query_order");
        assert_eq!(t["function"]["parameters"]["type"], "object");
        assert_eq!(d.risk_level, RiskLevel::Safe);
    }

    #[test]
    fn definition_round_trips_with_timeout() {
        let d = ToolDefinition::new("a", "b", json!({"type":"object"}))
            .with_risk(RiskLevel::Dangerous)
            .with_timeout(Duration::from_millis(1500));
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["risk_level"], "dangerous");
        assert_eq!(v["timeout"], 1500);
        assert_eq!(serde_json::from_value::<ToolDefinition>(v).unwrap(), d);
    }
}
