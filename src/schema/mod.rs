//! The whitelisted JSON-Schema validator. A schema is compiled once (at registration) into a tree
//! of nodes; validating never reads the schema document again.
//!
//! Owns: [`CompiledSchema`], [`SchemaOptions`], [`ValidationMode`], [`Violation`] and the
//! whitelist [`SUPPORTED_KEYWORDS`].
//!
//! # Keywords
//! The seed's five (`type`, `properties`, `required`, `items`, `description`) plus `type` as an
//! array, `enum`, `const`, `additionalProperties` (boolean or schema), `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `minLength`/`maxLength` (code points),
//! `pattern` (ECMA-262, unicode mode, via `regress`; not anchored), `minItems`, `maxItems`,
//! `uniqueItems`, `anyOf`, and the annotations `title` and `default`. A root `$schema` is
//! accepted and ignored. Any other keyword at any depth is `schema_unsupported_keyword`, naming
//! the keyword and where it is; so is `items` in its draft-7 array (tuple) form. Semantics are
//! JSON Schema 2020-12: `1.0` is an integer, numbers compare by value (`1 == 1.0` for `enum`,
//! `const`, `uniqueItems`), integers beyond 2^64 (parsed as doubles) still count as integers,
//! and `multipleOf` is decided exactly on decimals, not by a float division: a number that is not
//! an integer up to 2^64 is first rounded to the nearest double, then taken as the shortest
//! decimal that reads back as that double (`0.3` is a multiple of `0.1`, and so is
//! `0.30000000000000001`, whose digits past a double's precision are lost).
//!
//! # Messages
//! Every message names the `$`-path of the value, as the seed's `$.items[0].name must be string`.
//! A missing required property is `Missing required argument: $.address.city`: the seed names the
//! property alone (`Missing required argument: city`); the path also says which object lacks it
//! when objects nest.
//!
//! # Boolean subschemas
//! `true` and `false` are accepted wherever a subschema goes (`properties`, `items`,
//! `additionalProperties`, `anyOf`), as 2020-12 allows, and fully enforced: `false` refuses any
//! value there (`tool_argument_not_allowed`). A tool's root must still be an object schema.
//!
//! # Two ways to validate
//! [`CompiledSchema::parse_and_validate`] checks while it parses (one pass with its own parser,
//! see `onepass`);
//! [`CompiledSchema::validate`] walks a finished value. Both report the same violations; in
//! first-error mode the first is the first met in document order (object members' own checks,
//! then `required`, then `enum`/`const`/`anyOf` of the object).

mod check;
mod compile;
mod num;
mod onepass;
mod path;
pub(crate) use path::KEY_SHOWN_CHARS;
mod simple_pattern;

pub use check::Violation;
pub use compile::SUPPORTED_KEYWORDS;

use crate::error::{codes, AgentError};
use crate::json::{check_size, JsonLimits};
use compile::{Compiler, Schema};
use path::Path;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Whether validation stops at the first violation or collects all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ValidationMode {
    /// Stop at the first violation (default).
    #[default]
    FirstError,
    /// Collect every violation (`tool_arguments_invalid` lists them).
    AllErrors,
}

/// How a schema is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaOptions {
    /// First violation only, or all of them.
    pub mode: ValidationMode,
    /// Require a tool's root: a JSON object with `"type": "object"` (default true). Off, any
    /// schema (booleans included) compiles, as the JSON-Schema-Test-Suite needs.
    pub tool_root: bool,
    /// Maximum nesting of subschemas (and of `enum`/`const` values), default 64.
    pub max_depth: usize,
}

impl Default for SchemaOptions {
    fn default() -> Self {
        SchemaOptions { mode: ValidationMode::FirstError, tool_root: true, max_depth: 64 }
    }
}

/// A compiled schema. Cloning shares the compiled tree.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    root: Arc<Schema>,
    mode: ValidationMode,
    /// Some `pattern` is matched by backtracking ([`backtracks`](Self::backtracks)).
    backtracks: bool,
}

impl CompiledSchema {
    /// Compiles a tool's parameters schema (root must be `"type": "object"`), first-error mode.
    ///
    /// # Errors
    /// A `schema_*` config error: `schema_unsupported_keyword` (naming the keyword and its path),
    /// `schema_invalid_type`, `schema_invalid_root`, `schema_invalid_pattern`, ...
    pub fn compile(schema: &Value) -> Result<Self, AgentError> {
        Self::compile_with(schema, &SchemaOptions::default())
    }

    /// Compiles a schema with options (mode, whether the root must be a tool's object schema).
    ///
    /// # Errors
    /// A `schema_*` config error, as [`compile`](Self::compile).
    pub fn compile_with(schema: &Value, options: &SchemaOptions) -> Result<Self, AgentError> {
        let compiler = Compiler { max_depth: options.max_depth };
        let root = compiler.compile(schema, "$", 0, codes::SCHEMA_INVALID_ROOT)?;
        if options.tool_root {
            check_tool_root(schema)?;
        }
        let backtracks = compile::has_backtracking_pattern(&root);
        Ok(CompiledSchema { root: Arc::new(root), mode: options.mode, backtracks })
    }

    /// The validation mode.
    pub fn mode(&self) -> ValidationMode {
        self.mode
    }

    /// The same compiled schema in another mode (shares the tree).
    pub fn with_mode(&self, mode: ValidationMode) -> Self {
        CompiledSchema { root: Arc::clone(&self.root), mode, backtracks: self.backtracks }
    }

    /// True when some `pattern` of the schema is matched by a backtracking engine (regress): one
    /// with groups, alternatives, assertions, `\s`, or a repeat followed by what it may also take
    /// (`^[a-z]*a$`). Its time on a string is not bounded by the string's length (`^(a+)+$` takes
    /// minutes on 30 characters). The other patterns are matched in time linear in the string.
    pub fn backtracks(&self) -> bool {
        self.backtracks
    }

    /// Validates a value.
    ///
    /// # Errors
    /// The first violation's `tool_argument_*` error; in [`ValidationMode::AllErrors`], with more
    /// than one violation, `tool_arguments_invalid` listing them all.
    pub fn validate(&self, value: &Value) -> Result<(), AgentError> {
        let mut sink = check::Sink::new(self.mode == ValidationMode::AllErrors);
        check::check(&self.root, value, &Path::ROOT, &mut sink);
        into_result(sink.found)
    }

    /// Every violation of a value, in order (empty when it is valid), whatever the mode.
    pub fn validate_all(&self, value: &Value) -> Vec<Violation> {
        let mut sink = check::Sink::new(true);
        check::check(&self.root, value, &Path::ROOT, &mut sink);
        sink.found
    }

    /// Parses tool-call arguments (a JSON object within the limits) and validates them, in one
    /// pass. Gates in order: size, JSON syntax and depth, object, schema.
    ///
    /// # Errors
    /// `json_too_large`, `json_invalid`, `json_too_deep`, `json_not_object` (decode layer), then
    /// the schema's `tool_argument_*` error(s) as in [`validate`](Self::validate).
    pub fn parse_and_validate(
        &self,
        text: &str,
        limits: &JsonLimits,
    ) -> Result<Map<String, Value>, AgentError> {
        let mut value = Value::Null;
        let found = self.parse_checked(text, limits, &mut value)?;
        match value {
            Value::Object(map) => into_result(found).map(|()| map),
            other => Err(AgentError::of(
                codes::JSON_NOT_OBJECT,
                format!("arguments must be a JSON object, not {}", crate::json::kind_name(&other)),
            )),
        }
    }

    /// Like [`parse_and_validate`](Self::parse_and_validate) for any JSON value (no object
    /// requirement), for schemas compiled without a tool root.
    ///
    /// # Errors
    /// `json_too_large`, `json_invalid`, `json_too_deep`, then the schema's error(s).
    pub fn parse_value_and_validate(&self, text: &str, limits: &JsonLimits) -> Result<Value, AgentError> {
        let mut value = Value::Null;
        let found = self.parse_checked(text, limits, &mut value)?;
        into_result(found).map(|()| value)
    }

    /// Parses `text` into `out` (which holds `Null`) and returns the violations found.
    fn parse_checked(
        &self,
        text: &str,
        limits: &JsonLimits,
        out: &mut Value,
    ) -> Result<Vec<Violation>, AgentError> {
        check_size(text, limits)?;
        // The `\u` escape of a lone surrogate (a string cut inside an emoji) reads as U+FFFD, as
        // in the model's text and in the app's JSON, rather than failing the call.
        let text = crate::json::lone_surrogate_escapes_replaced(text);
        let sink = check::Sink::new(self.mode == ValidationMode::AllErrors);
        let mut parser = onepass::Parser::new(&text, limits.max_depth, sink);
        match parser.parse_document(&self.root, out) {
            // A repeated key: JSON.parse and serde_json keep the last value, but what shows the
            // call to the user (an approval item's argumentsJson) may be read by the first one, so
            // `{"scope": "tmp", "scope": "all"}` would be approved as one thing and run as another.
            Ok(()) if parser.duplicate_key.is_some() => {
                let key = parser.duplicate_key.take().unwrap_or_default();
                // Shown by its start, as a path shows a long key (the error goes back to the model).
                let shown: String = key.chars().take(KEY_SHOWN_CHARS).collect();
                let more = if shown.len() < key.len() { "..." } else { "" };
                Err(AgentError::of(
                    codes::JSON_INVALID,
                    format!("invalid JSON: the key \"{shown}{more}\" appears twice in one object (which value is meant is ambiguous)"),
                ))
            }
            Ok(()) => Ok(std::mem::take(&mut parser.sink.found)),
            Err(onepass::Stop::TooDeep) => Err(AgentError::of(
                codes::JSON_TOO_DEEP,
                format!(
                    "JSON nests deeper than the limit of {} levels",
                    limits.max_depth.min(onepass::HARD_DEPTH)
                ),
            )),
            Err(onepass::Stop::Invalid(what, at)) => Err(AgentError::of(
                codes::JSON_INVALID,
                format!("invalid JSON: {what} at {}", parser.location(at)),
            )),
        }
    }
}

fn into_result(mut found: Vec<Violation>) -> Result<(), AgentError> {
    match found.len() {
        0 => Ok(()),
        1 => Err(found.remove(0).to_error()),
        n => {
            let listed: Vec<&str> = found.iter().map(|v| v.message.as_str()).collect();
            Err(AgentError::of(
                codes::TOOL_ARGUMENTS_INVALID,
                format!("{n} violations: {}", listed.join("; ")),
            ))
        }
    }
}

fn check_tool_root(schema: &Value) -> Result<(), AgentError> {
    let Value::Object(map) = schema else {
        return Err(AgentError::of(
            codes::SCHEMA_INVALID_ROOT,
            format!("a tool's parameters schema must be an object schema, not {schema} (at $)"),
        ));
    };
    match map.get("type") {
        None => Err(AgentError::of(
            codes::SCHEMA_INVALID_TYPE,
            "a tool's parameters schema needs \"type\": \"object\" (at $)",
        )),
        Some(Value::String(t)) if t == "object" => Ok(()),
        Some(Value::Array(a)) if a.len() == 1 && a[0] == "object" => Ok(()),
        Some(other) => Err(AgentError::of(
            codes::SCHEMA_INVALID_ROOT,
            format!("a tool's parameters schema must have \"type\": \"object\", not {other} (at $)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(schema: Value) -> CompiledSchema {
        CompiledSchema::compile(&schema).unwrap()
    }

    #[test]
    fn both_paths_report_the_same_first_violation() {
        let s = tool(json!({
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}},
        }));
        let text = r#"{"items": [{"name": 5}]}"#;
        let e = s.parse_and_validate(text, &JsonLimits::default()).unwrap_err();
        assert_eq!(e.code, codes::TOOL_ARGUMENT_TYPE_MISMATCH);
        assert_eq!(e.message, "$.items[0].name must be string");
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(s.validate(&v).unwrap_err(), e);
    }

    #[test]
    fn a_repeated_key_is_json_invalid_naming_it() {
        // An approval shows the raw text, whose first value a reader may take; the last would run.
        let s = tool(json!({"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}}));
        let limits = JsonLimits::default();
        for text in [r#"{"qty": 0, "qty": 5}"#, r#"{"qty": 5, "qty": 0}"#, r#"{"a": {"qty": 0, "qty": 2}}"#] {
            let e = s.parse_and_validate(text, &limits).unwrap_err();
            assert_eq!(e.code, codes::JSON_INVALID, "{text}");
            assert!(e.message.contains("\"qty\" appears twice"), "{}", e.message);
            let all = s.with_mode(ValidationMode::AllErrors);
            assert_eq!(all.parse_and_validate(text, &limits).unwrap_err().code, codes::JSON_INVALID);
        }
        assert!(s.parse_and_validate(r#"{"qty": 5, "a": {"qty": 0}}"#, &limits).is_ok());
    }

    #[test]
    fn a_lone_surrogate_escape_reads_as_the_replacement_character() {
        let s = tool(json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}));
        let limits = JsonLimits::default();
        let v = s.parse_and_validate(r#"{"s": "ok\ud83d"}"#, &limits).unwrap();
        assert_eq!(v["s"], "ok\u{FFFD}");
        let v = s.parse_and_validate(r#"{"s": "\ud83d\ude02"}"#, &limits).unwrap();
        assert_eq!(v["s"], "\u{1F602}");
    }

    #[test]
    fn invalid_json_wins_over_an_earlier_violation() {
        let s = tool(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        let e = s.parse_and_validate(r#"{"a": 1, "b": "#, &JsonLimits::default()).unwrap_err();
        assert_eq!(e.code, codes::JSON_INVALID);
        let e = s.parse_and_validate(r#"[1]"#, &JsonLimits::default()).unwrap_err();
        assert_eq!(e.code, codes::JSON_NOT_OBJECT);
    }

    #[test]
    fn all_errors_mode_lists_every_violation() {
        let s = tool(json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer", "minimum": 3}},
            "required": ["a", "b", "c"],
            "additionalProperties": false
        }))
        .with_mode(ValidationMode::AllErrors);
        let text = r#"{"a": 1, "b": 2, "x": null}"#;
        let e = s.parse_and_validate(text, &JsonLimits::default()).unwrap_err();
        assert_eq!(e.code, codes::TOOL_ARGUMENTS_INVALID);
        assert!(e.message.starts_with("4 violations: "), "{}", e.message);
        for part in [
            "$.a must be string",
            "$.b must be >= 3",
            "$.x is not an allowed property",
            "Missing required argument: $.c",
        ] {
            assert!(e.message.contains(part), "{part} in {}", e.message);
        }
        let v: Value = serde_json::from_str(text).unwrap();
        let all = s.validate_all(&v);
        assert_eq!(all.len(), 4);
        assert_eq!(s.validate(&v).unwrap_err().code, codes::TOOL_ARGUMENTS_INVALID);
    }

    #[test]
    fn tool_roots_must_be_object_schemas() {
        let code = |v: Value| CompiledSchema::compile(&v).unwrap_err().code;
        assert_eq!(code(json!({"properties": {}})), codes::SCHEMA_INVALID_TYPE);
        assert_eq!(code(json!({"type": "string"})), codes::SCHEMA_INVALID_ROOT);
        assert_eq!(code(json!(true)), codes::SCHEMA_INVALID_ROOT);
        assert_eq!(code(json!([])), codes::SCHEMA_INVALID_ROOT);
        let any = SchemaOptions { tool_root: false, ..SchemaOptions::default() };
        assert!(CompiledSchema::compile_with(&json!(true), &any).is_ok());
        assert!(CompiledSchema::compile_with(&json!({"type": "string"}), &any).is_ok());
    }
}
