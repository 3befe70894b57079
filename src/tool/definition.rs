//! What the model sees of a tool: name, description, JSON-Schema parameters and a risk level.

use crate::error::{codes, AgentError};
use crate::json::JsonLimits;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
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
    /// The JSON Schema of the arguments (an object schema, whitelisted keywords only). Built from
    /// text ([`ToolDefinition::from_schema_text`]), the model is sent it in the key order written.
    pub parameters: ParametersSchema,
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
    ///
    /// A [`Value`]'s objects keep their keys sorted (serde_json without `preserve_order`), so the
    /// model is sent `parameters` with its keys in alphabetical order at every level. To send them
    /// in the order written (models tend to fill the arguments in the order of `properties`), use
    /// [`ToolDefinition::from_schema_text`].
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: impl Into<ParametersSchema>,
    ) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: parameters.into(),
            risk_level: RiskLevel::Safe,
            idempotent: false,
            timeout: None,
        }
    }

    /// A safe, non-idempotent tool with the default timeout, whose parameters schema is JSON text:
    /// the model is sent that schema with its keys in the order of the text, at every level
    /// (compacted: whitespace outside strings is dropped). Validation compiles the parsed value,
    /// as for [`ToolDefinition::new`].
    ///
    /// # Errors
    /// `schema_invalid_root` when the text is not JSON or names a key twice in one object (the
    /// model would be sent both, the validator would keep the last), `schema_too_deep` when it
    /// nests deeper than 128 JSON levels. The schema itself is checked when the tool is registered.
    pub fn from_schema_text(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters_json: &str,
    ) -> Result<Self, AgentError> {
        let name = name.into();
        let parameters = ParametersSchema::parse(parameters_json, &format!("parameters of {name}"))?;
        Ok(ToolDefinition::new(name, description, parameters))
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
    /// As a [`Value`], its objects' keys are sorted; the request body keeps the order of
    /// [`ParametersSchema::text`] (the client writes the wire types, not this value).
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

/// A tool's parameters schema: the parsed [`Value`], which the registry compiles and validation
/// reads, and, when it was given as text, that text compacted with its keys in the order written,
/// which is what the model is sent (in the request's `tools`, and wherever the definition is
/// serialised: hooks, policies, the binding's `definitionsJson`). Without text it is sent as the
/// value serialises, keys sorted. The two cannot drift apart: the fields are private and there is
/// no mutable access.
#[derive(Debug, Clone)]
pub struct ParametersSchema {
    value: Value,
    text: Option<Arc<RawValue>>,
}

impl ParametersSchema {
    /// A schema from JSON text, kept in the order written (see [`ToolDefinition::from_schema_text`]).
    ///
    /// # Errors
    /// As [`ToolDefinition::from_schema_text`].
    pub fn from_text(text: &str) -> Result<Self, AgentError> {
        Self::parse(text, "the parameters schema")
    }

    /// [`ParametersSchema::from_text`], with `what` naming the text in error messages. A lone
    /// surrogate's `\u` escape reads as U+FFFD (see
    /// [`lone_surrogate_escapes_replaced`](crate::json::lone_surrogate_escapes_replaced)), in the
    /// value and the text alike.
    pub(crate) fn parse(text: &str, what: &str) -> Result<Self, AgentError> {
        let cap = crate::json::DEPTH_CAP;
        let limits = JsonLimits { max_depth: cap, max_bytes: usize::MAX };
        let text = crate::json::lone_surrogate_escapes_replaced(text);
        let value = crate::json::parse_value_unique(&text, &limits).map_err(|e| {
            if e.code == codes::JSON_TOO_DEEP {
                AgentError::of(
                    codes::SCHEMA_TOO_DEEP,
                    format!(
                        "{what} nests deeper than {cap} JSON levels (a subschema under properties or \
                         anyOf is two levels below its parent)"
                    ),
                )
            } else {
                let why = e.message.strip_prefix("invalid JSON: ").unwrap_or(&e.message);
                AgentError::of(codes::SCHEMA_INVALID_ROOT, format!("{what} is not JSON: {why}"))
            }
        })?;
        let raw = crate::json::raw_compact(&text)
            .map_err(|e| AgentError::of(codes::SCHEMA_INVALID_ROOT, format!("{what} is not JSON: {e}")))?;
        Ok(ParametersSchema { value, text: Some(Arc::from(raw)) })
    }

    /// The parsed schema (what the registry compiles).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The JSON text the model is sent: the text given, compacted, in its key order; else the
    /// value's (keys sorted).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.text {
            Some(raw) => Cow::Borrowed(raw.get()),
            None => Cow::Owned(self.value.to_string()),
        }
    }
}

impl From<Value> for ParametersSchema {
    /// A schema built as a value: sent with its keys sorted (see [`ToolDefinition::new`]).
    fn from(value: Value) -> Self {
        ParametersSchema { value, text: None }
    }
}

impl PartialEq for ParametersSchema {
    /// Equal when the values are and the model is sent the same text.
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
            && match (&self.text, &other.text) {
                (None, None) => true,
                _ => self.text() == other.text(),
            }
    }
}

impl Serialize for ParametersSchema {
    /// The text the model is sent ([`ParametersSchema::text`]), as JSON (not as a string).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.text {
            Some(raw) => raw.serialize(s),
            None => self.value.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ParametersSchema {
    /// Read from JSON text (serde_json's deserializers), the schema keeps the order of that text.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        ParametersSchema::from_text(raw.get()).map_err(serde::de::Error::custom)
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

    /// A schema whose keys are out of alphabetical order at every level, with whitespace between
    /// tokens and inside strings.
    const ORDERED: &str = r#"{
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "description": "think \"first\", then answer"},
            "answer": {"type": "object", "properties": {"z_last_name": {"type": "string"}, "a_value": {"type": "number", "minimum": 1e2}}}
        },
        "required": ["reasoning", "answer"]
    }"#;
    const ORDERED_COMPACT: &str = r#"{"type":"object","properties":{"reasoning":{"type":"string","description":"think \"first\", then answer"},"answer":{"type":"object","properties":{"z_last_name":{"type":"string"},"a_value":{"type":"number","minimum":1e2}}}},"required":["reasoning","answer"]}"#;

    #[test]
    fn a_text_schema_keeps_its_key_order_compacted() {
        let d = ToolDefinition::from_schema_text("answer", "d", ORDERED).unwrap();
        assert_eq!(d.parameters.text(), ORDERED_COMPACT);
        // The value validation compiles is the same schema.
        assert_eq!(d.parameters.value(), &serde_json::from_str::<Value>(ORDERED).unwrap());
        // Serialised (hooks, policies, definitionsJson) in the same order.
        let json = serde_json::to_string(&d).unwrap();
        assert!(json.contains(&format!(r#""parameters":{ORDERED_COMPACT}"#)), "{json}");
        // Read back from that text, the order stays.
        let back: ToolDefinition = serde_json::from_str(&json).unwrap();
        assert_eq!(back.parameters.text(), ORDERED_COMPACT);
        assert_eq!(back, d);
    }

    #[test]
    fn a_value_schema_is_sent_as_it_serialises() {
        let d = ToolDefinition::new("a", "b", json!({"type": "object", "properties": {"b": {}, "a": {}}}));
        assert_eq!(d.parameters.text(), r#"{"properties":{"a":{},"b":{}},"type":"object"}"#);
        assert_eq!(d.parameters.value()["type"], "object");
        // The same schema from text in that order is the same definition; in another order it is not.
        let sorted = d.parameters.text().into_owned();
        assert_eq!(ToolDefinition::from_schema_text("a", "b", &sorted).unwrap(), d);
        let other = r#"{"type":"object","properties":{"b":{},"a":{}}}"#;
        assert_ne!(ToolDefinition::from_schema_text("a", "b", other).unwrap(), d);
    }

    #[test]
    fn schema_text_that_is_not_json_or_names_a_key_twice_is_refused() {
        for (text, says) in [
            ("{not json", "parameters of t is not JSON: key must be a string at line 1 column 2"),
            (
                r#"{"type":"object"} x"#,
                "parameters of t is not JSON: trailing characters at line 1 column 19",
            ),
            (
                r#"{"type":"object","properties":{"a":{},"a":{"type":"string"}}}"#,
                r#"parameters of t is not JSON: the name "a" appears twice in an object at line 1 column 60"#,
            ),
        ] {
            let e = ToolDefinition::from_schema_text("t", "d", text).unwrap_err();
            assert_eq!(e.code, codes::SCHEMA_INVALID_ROOT, "{text}");
            assert_eq!(e.message, says);
        }
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        let e = ParametersSchema::from_text(&deep).unwrap_err();
        assert_eq!(e.code, codes::SCHEMA_TOO_DEEP);
        assert!(
            e.message.starts_with("the parameters schema nests deeper than 128 JSON levels"),
            "{}",
            e.message
        );
        // 128 levels are read (the registry's compiler then has its own limit).
        let at_cap = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert_eq!(ParametersSchema::from_text(&at_cap).unwrap().text(), at_cap);
    }

    #[test]
    fn a_lone_surrogate_escape_reads_as_the_replacement_character_in_both_forms() {
        let s = ParametersSchema::from_text(r#"{"description":"cut \ud83c here"}"#).unwrap();
        assert_eq!(s.value()["description"], "cut \u{fffd} here");
        assert_eq!(s.text(), r#"{"description":"cut \uFFFD here"}"#);
    }
}
