//! Compiling a schema document into a tree of nodes, once. Every keyword of the whitelist is
//! checked for its form here; any other keyword, at any depth, is `schema_unsupported_keyword`.

use super::num::{FxBuild, Num};
use crate::error::{codes, AgentError};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Type bits of the `type` keyword.
pub(crate) mod ty {
    pub const NULL: u8 = 1;
    pub const BOOLEAN: u8 = 2;
    pub const OBJECT: u8 = 4;
    pub const ARRAY: u8 = 8;
    pub const NUMBER: u8 = 16;
    pub const STRING: u8 = 32;
    pub const INTEGER: u8 = 64;
}

const TYPE_NAMES: [(&str, u8); 7] = [
    ("null", ty::NULL),
    ("boolean", ty::BOOLEAN),
    ("object", ty::OBJECT),
    ("array", ty::ARRAY),
    ("number", ty::NUMBER),
    ("string", ty::STRING),
    ("integer", ty::INTEGER),
];

/// The whitelist: the seed's five keywords plus the ones DESIGN.md adds, all fully enforced.
pub const SUPPORTED_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "description",
    "enum",
    "const",
    "additionalProperties",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "anyOf",
    "title",
    "default",
];

/// A compiled (sub)schema.
#[derive(Debug)]
pub(crate) enum Schema {
    /// `true` (or `{}`): anything.
    Any,
    /// `false`: nothing.
    Never,
    Node(Box<Node>),
}

#[derive(Debug)]
pub(crate) enum Additional {
    Any,
    Deny,
    Schema(Schema),
}

#[derive(Debug)]
pub(crate) struct Properties {
    pub(crate) entries: Vec<(Box<str>, Schema)>,
    index: Option<HashMap<Box<str>, usize, FxBuild>>,
}

impl Properties {
    fn new(entries: Vec<(Box<str>, Schema)>) -> Self {
        let index = (entries.len() > 16)
            .then(|| entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
        Properties { entries, index }
    }

    /// The index of a property, if the schema names it. Lengths are compared first: most names
    /// of one schema differ in length, so usually a single memcmp decides.
    #[inline]
    pub(crate) fn find(&self, key: &str) -> Option<usize> {
        if let Some(map) = &self.index {
            return map.get(key).copied();
        }
        let bytes = key.as_bytes();
        let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
            return self.entries.iter().position(|(k, _)| k.is_empty());
        };
        self.entries.iter().position(|(k, _)| {
            let k = k.as_bytes();
            // Length, first and last byte rule out almost every other name without a memcmp call;
            // short names are then compared inline.
            k.len() == bytes.len()
                && k[0] == first
                && k[k.len() - 1] == last
                && if k.len() <= 16 { k.iter().zip(bytes).all(|(a, b)| a == b) } else { k == bytes }
        })
    }
}

#[derive(Debug)]
pub(crate) struct Pattern {
    pub(crate) source: Box<str>,
    pub(crate) regex: regress::Regex,
}

#[derive(Debug)]
pub(crate) struct Node {
    /// Type bits; 0 when `type` is absent.
    pub(crate) types: u8,
    /// "string", "string or null"...
    pub(crate) type_text: Box<str>,
    pub(crate) properties: Properties,
    pub(crate) required: Box<[Box<str>]>,
    /// Bits of `properties` indexes that `required` names, when every required name is one of the
    /// first 64 properties (fast check while parsing); otherwise None.
    pub(crate) required_mask: Option<u64>,
    pub(crate) additional: Additional,
    pub(crate) items: Option<Schema>,
    pub(crate) min_items: Option<u64>,
    pub(crate) max_items: Option<u64>,
    pub(crate) unique_items: bool,
    pub(crate) min_length: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) pattern: Option<Pattern>,
    pub(crate) minimum: Option<Num>,
    pub(crate) maximum: Option<Num>,
    pub(crate) exclusive_minimum: Option<Num>,
    pub(crate) exclusive_maximum: Option<Num>,
    pub(crate) multiple_of: Option<Num>,
    pub(crate) enumeration: Option<Box<[Value]>>,
    pub(crate) constant: Option<Value>,
    pub(crate) any_of: Box<[Schema]>,
    /// Any keyword that looks at objects / arrays / strings / numbers is present.
    pub(crate) object_checks: bool,
    pub(crate) array_checks: bool,
    pub(crate) string_checks: bool,
    pub(crate) number_checks: bool,
    /// enum, const or anyOf: checked on the finished value.
    pub(crate) value_checks: bool,
}

/// Compilation settings.
pub(crate) struct Compiler {
    pub(crate) max_depth: usize,
}

fn err(code: &'static str, path: &str, what: impl std::fmt::Display) -> AgentError {
    AgentError::of(code, format!("{what} (at {path})"))
}

/// Depth of a JSON value in containers, without recursion; stops counting past `limit`.
fn value_depth_exceeds(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(m) => Box::new(m.values()),
            _ => continue,
        };
        if d > limit {
            return true;
        }
        stack.extend(children.map(|c| (c, d + 1)));
    }
    false
}

impl Compiler {
    /// Compiles the schema at `path` (a JSONPath-like location in the schema document).
    pub(crate) fn compile(
        &self,
        value: &Value,
        path: &str,
        depth: usize,
        bad_shape: &'static str,
    ) -> Result<Schema, AgentError> {
        if depth > self.max_depth {
            return Err(err(
                codes::SCHEMA_TOO_DEEP,
                path,
                format!("schema nests deeper than {} levels", self.max_depth),
            ));
        }
        match value {
            Value::Bool(true) => Ok(Schema::Any),
            Value::Bool(false) => Ok(Schema::Never),
            Value::Object(map) => self.compile_object(map, path, depth),
            other => {
                Err(err(bad_shape, path, format!("a schema must be an object or a boolean, not {other}")))
            }
        }
    }

    fn compile_object(
        &self,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<Schema, AgentError> {
        // Unsupported keywords first: the honest answer to a schema we cannot enforce.
        for key in map.keys() {
            let root_schema_uri = depth == 0 && key == "$schema";
            if !root_schema_uri && !SUPPORTED_KEYWORDS.contains(&key.as_str()) {
                return Err(AgentError::of(
                    codes::SCHEMA_UNSUPPORTED_KEYWORD,
                    format!("Unsupported JSON Schema keyword: {key} (at {path})"),
                ));
            }
        }
        if let Some(Value::Array(_)) = map.get("items") {
            return Err(AgentError::of(
                codes::SCHEMA_UNSUPPORTED_KEYWORD,
                format!("Unsupported JSON Schema keyword: items in array (tuple) form (at {path}); use one schema for every item"),
            ));
        }
        if map.is_empty()
            || map.keys().all(|k| matches!(k.as_str(), "$schema" | "description" | "title" | "default"))
        {
            check_annotations(map, path)?;
            return Ok(Schema::Any);
        }
        check_annotations(map, path)?;

        let (types, type_text) = match map.get("type") {
            None => (0, "any".into()),
            Some(t) => parse_type(t, path)?,
        };

        let mut entries = Vec::new();
        if let Some(p) = map.get("properties") {
            let Value::Object(p) = p else {
                return Err(err(
                    codes::SCHEMA_INVALID_PROPERTIES,
                    path,
                    "\"properties\" must be an object of schemas",
                ));
            };
            for (name, sub) in p {
                let sub_path = format!("{path}.properties{}", super::path::key_segment(name));
                entries.push((
                    name.as_str().into(),
                    self.compile(sub, &sub_path, depth + 1, codes::SCHEMA_INVALID_PROPERTIES)?,
                ));
            }
        }
        let properties = Properties::new(entries);

        let mut required: Vec<Box<str>> = Vec::new();
        if let Some(r) = map.get("required") {
            let Value::Array(r) = r else {
                return Err(err(
                    codes::SCHEMA_INVALID_REQUIRED,
                    path,
                    "\"required\" must be an array of strings",
                ));
            };
            for name in r {
                let Value::String(name) = name else {
                    return Err(err(
                        codes::SCHEMA_INVALID_REQUIRED,
                        path,
                        format!("\"required\" holds {name}, not a string"),
                    ));
                };
                if required.iter().any(|n| **n == **name) {
                    return Err(err(
                        codes::SCHEMA_INVALID_REQUIRED,
                        path,
                        format!("\"required\" names {name:?} twice"),
                    ));
                }
                required.push(name.as_str().into());
            }
        }
        let required_mask = required.iter().try_fold(0u64, |mask, name| match properties.find(name) {
            Some(i) if i < 64 => Some(mask | (1 << i)),
            _ => None,
        });

        let additional = match map.get("additionalProperties") {
            None | Some(Value::Bool(true)) => Additional::Any,
            Some(Value::Bool(false)) => Additional::Deny,
            Some(v @ Value::Object(_)) => match self.compile(
                v,
                &format!("{path}.additionalProperties"),
                depth + 1,
                codes::SCHEMA_INVALID_ADDITIONAL_PROPERTIES,
            )? {
                Schema::Any => Additional::Any,
                Schema::Never => Additional::Deny,
                s => Additional::Schema(s),
            },
            Some(other) => {
                return Err(err(
                    codes::SCHEMA_INVALID_ADDITIONAL_PROPERTIES,
                    path,
                    format!("\"additionalProperties\" must be a boolean or a schema, not {other}"),
                ))
            }
        };

        let items = match map.get("items") {
            None => None,
            Some(v) => {
                Some(self.compile(v, &format!("{path}.items"), depth + 1, codes::SCHEMA_INVALID_ITEMS)?)
            }
        };

        let mut any_of = Vec::new();
        if let Some(a) = map.get("anyOf") {
            match a {
                Value::Array(alts) if !alts.is_empty() => {
                    for (i, alt) in alts.iter().enumerate() {
                        any_of.push(self.compile(
                            alt,
                            &format!("{path}.anyOf[{i}]"),
                            depth + 1,
                            codes::SCHEMA_INVALID_ANY_OF,
                        )?);
                    }
                }
                _ => {
                    return Err(err(
                        codes::SCHEMA_INVALID_ANY_OF,
                        path,
                        "\"anyOf\" must be a non-empty array of schemas",
                    ))
                }
            }
        }

        let enumeration = match map.get("enum") {
            None => None,
            Some(Value::Array(values)) => {
                if values.iter().any(|v| value_depth_exceeds(v, self.max_depth)) {
                    return Err(err(codes::SCHEMA_TOO_DEEP, path, "an \"enum\" value nests too deep"));
                }
                Some(values.clone().into_boxed_slice())
            }
            Some(_) => return Err(err(codes::SCHEMA_INVALID_ENUM, path, "\"enum\" must be an array")),
        };
        let constant = match map.get("const") {
            None => None,
            Some(v) => {
                if value_depth_exceeds(v, self.max_depth) {
                    return Err(err(codes::SCHEMA_TOO_DEEP, path, "the \"const\" value nests too deep"));
                }
                Some(v.clone())
            }
        };

        let unique_items = match map.get("uniqueItems") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(err(
                    codes::SCHEMA_INVALID_UNIQUE_ITEMS,
                    path,
                    "\"uniqueItems\" must be a boolean",
                ))
            }
        };

        let pattern = match map.get("pattern") {
            None => None,
            Some(Value::String(source)) => match regress::Regex::with_flags(source, "u") {
                Ok(regex) => Some(Pattern { source: source.as_str().into(), regex }),
                Err(e) => {
                    return Err(err(
                        codes::SCHEMA_INVALID_PATTERN,
                        path,
                        format!("\"pattern\" {source:?} is not a valid ECMA-262 regular expression: {e}"),
                    ))
                }
            },
            Some(_) => return Err(err(codes::SCHEMA_INVALID_PATTERN, path, "\"pattern\" must be a string")),
        };

        let bound = |key: &str| -> Result<Option<Num>, AgentError> {
            match map.get(key) {
                None => Ok(None),
                Some(Value::Number(n)) => Ok(Some(Num::of(n))),
                Some(other) => Err(err(
                    codes::SCHEMA_INVALID_BOUND,
                    path,
                    format!("\"{key}\" must be a number, not {other}"),
                )),
            }
        };
        let multiple_of = bound("multipleOf")?;
        if let Some(m) = multiple_of {
            if m.cmp(Num::U(0)) != std::cmp::Ordering::Greater {
                return Err(err(codes::SCHEMA_INVALID_BOUND, path, "\"multipleOf\" must be greater than 0"));
            }
        }
        let count = |key: &str| -> Result<Option<u64>, AgentError> {
            match map.get(key) {
                None => Ok(None),
                Some(Value::Number(n)) => match Num::of(n) {
                    Num::U(u) => Ok(Some(u)),
                    Num::F(f) if f >= 0.0 && f.fract() == 0.0 => Ok(Some(f.min(u64::MAX as f64) as u64)),
                    _ => Err(err(
                        codes::SCHEMA_INVALID_LENGTH,
                        path,
                        format!("\"{key}\" must be a non-negative integer"),
                    )),
                },
                Some(_) => Err(err(
                    codes::SCHEMA_INVALID_LENGTH,
                    path,
                    format!("\"{key}\" must be a non-negative integer"),
                )),
            }
        };

        let mut node = Node {
            types,
            type_text,
            required: required.into_boxed_slice(),
            required_mask,
            additional,
            items,
            min_items: count("minItems")?,
            max_items: count("maxItems")?,
            unique_items,
            min_length: count("minLength")?,
            max_length: count("maxLength")?,
            pattern,
            minimum: bound("minimum")?,
            maximum: bound("maximum")?,
            exclusive_minimum: bound("exclusiveMinimum")?,
            exclusive_maximum: bound("exclusiveMaximum")?,
            multiple_of,
            enumeration,
            constant,
            any_of: any_of.into_boxed_slice(),
            properties,
            object_checks: false,
            array_checks: false,
            string_checks: false,
            number_checks: false,
            value_checks: false,
        };
        node.object_checks = !node.properties.entries.is_empty()
            || !node.required.is_empty()
            || !matches!(node.additional, Additional::Any);
        node.array_checks =
            node.items.is_some() || node.min_items.is_some() || node.max_items.is_some() || node.unique_items;
        node.string_checks = node.min_length.is_some() || node.max_length.is_some() || node.pattern.is_some();
        node.number_checks = node.minimum.is_some()
            || node.maximum.is_some()
            || node.exclusive_minimum.is_some()
            || node.exclusive_maximum.is_some()
            || node.multiple_of.is_some();
        node.value_checks = node.enumeration.is_some() || node.constant.is_some() || !node.any_of.is_empty();
        Ok(Schema::Node(Box::new(node)))
    }
}

fn check_annotations(map: &Map<String, Value>, path: &str) -> Result<(), AgentError> {
    for key in ["description", "title", "$schema"] {
        match map.get(key) {
            None | Some(Value::String(_)) => {}
            Some(other) => {
                return Err(err(
                    codes::SCHEMA_INVALID_ANNOTATION,
                    path,
                    format!("\"{key}\" must be a string, not {other}"),
                ))
            }
        }
    }
    Ok(())
}

fn parse_type(t: &Value, path: &str) -> Result<(u8, Box<str>), AgentError> {
    let one = |name: &str| -> Result<u8, AgentError> {
        TYPE_NAMES.iter().find(|(n, _)| *n == name).map(|(_, bit)| *bit).ok_or_else(|| {
            err(codes::SCHEMA_INVALID_TYPE, path, format!("unknown type {name:?} (expected one of null, boolean, object, array, number, string, integer)"))
        })
    };
    match t {
        Value::String(name) => Ok((one(name)?, name.as_str().into())),
        Value::Array(names) if !names.is_empty() => {
            let mut bits = 0u8;
            let mut text: Vec<&str> = Vec::new();
            for name in names {
                let Value::String(name) = name else {
                    return Err(err(
                        codes::SCHEMA_INVALID_TYPE,
                        path,
                        format!("\"type\" holds {name}, not a type name"),
                    ));
                };
                let bit = one(name)?;
                if bits & bit != 0 {
                    return Err(err(
                        codes::SCHEMA_INVALID_TYPE,
                        path,
                        format!("\"type\" names {name:?} twice"),
                    ));
                }
                bits |= bit;
                text.push(name);
            }
            Ok((bits, text.join(" or ").into()))
        }
        other => Err(err(
            codes::SCHEMA_INVALID_TYPE,
            path,
            format!("\"type\" must be a type name or a non-empty array of them, not {other}"),
        )),
    }
}
