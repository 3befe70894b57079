//! Validation while parsing: a serde `DeserializeSeed` driven by the compiled tree builds the
//! argument [`Value`] and checks it in the same pass, so validating costs little beyond the parse
//! that has to happen anyway. Violations are recorded, never returned as parse errors, so that
//! the gates keep their order: invalid JSON (or too deep) wins over any schema violation found
//! before the parser reached the broken spot.

use super::check::{check, check_array, check_required, check_value, kind_ok, Sink};
use super::compile::{ty, Additional, Node, Schema};
use super::path::Path;
use crate::json::{Depth, PlainSeed};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

const ANY: &Schema = &Schema::Any;

/// State shared down the parse: the depth counter and the violations.
pub(crate) struct Cx {
    pub(crate) depth: Depth,
    pub(crate) sink: Sink,
}

pub(crate) struct Seed<'c, 's, 'p> {
    pub(crate) cx: &'c mut Cx,
    pub(crate) schema: &'s Schema,
    pub(crate) path: &'p Path<'p>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_, '_, '_> {
    type Value = Value;

    #[inline]
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Seed<'_, '_, '_> {
    #[inline]
    fn scalar(self, value: Value) -> Value {
        if !matches!(self.schema, Schema::Any) && !self.cx.sink.done() {
            check(self.schema, &value, self.path, &mut self.cx.sink);
        }
        value
    }

    /// The node that applies to a container of kind `bit`, or None when nothing is to be checked
    /// (after recording a type mismatch or a `false` schema).
    #[inline]
    fn container_node(&mut self, bit: u8) -> Option<&'_ Node> {
        if self.cx.sink.done() {
            return None;
        }
        match self.schema {
            Schema::Any => None,
            Schema::Never => {
                self.cx.sink.never(self.path);
                None
            }
            Schema::Node(node) => {
                if kind_ok(node.types, bit) {
                    Some(node)
                } else {
                    self.cx.sink.type_mismatch(node, self.path);
                    None
                }
            }
        }
    }
}

impl<'de> Visitor<'de> for Seed<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(self.scalar(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(self.scalar(Value::Number(v.into())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(self.scalar(Value::Number(v.into())))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(self.scalar(Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(self.scalar(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(self.scalar(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(self.scalar(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(self.scalar(Value::Null))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        self.cx.depth.enter()?;
        let schema = self.schema;
        let path = self.path;
        let node = match self.container_node(ty::OBJECT) {
            Some(_) => match schema {
                Schema::Node(n) => Some(&**n),
                _ => None,
            },
            None => None,
        };
        let cx = self.cx;
        let mut out = Map::new();
        let Some(node) = node else {
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value_seed(PlainSeed { depth: &mut cx.depth })?;
                out.insert(key, value);
            }
            cx.depth.leave();
            return Ok(Value::Object(out));
        };
        let mut seen = 0u64;
        while let Some(key) = map.next_key::<String>()? {
            let child_path = path.key(&key);
            let child: &Schema = if cx.sink.done() {
                ANY
            } else {
                match node.properties.find(&key) {
                    Some(i) => {
                        if i < 64 {
                            seen |= 1 << i;
                        }
                        &node.properties.entries[i].1
                    }
                    None => match &node.additional {
                        Additional::Any => ANY,
                        Additional::Deny => {
                            cx.sink.additional(&child_path);
                            ANY
                        }
                        Additional::Schema(s) => s,
                    },
                }
            };
            let value = map.next_value_seed(Seed { cx: &mut *cx, schema: child, path: &child_path })?;
            out.insert(key, value);
        }
        if !cx.sink.done() && !node.required.is_empty() {
            match node.required_mask {
                Some(mask) if seen & mask == mask => {}
                _ => check_required(node, &out, path, &mut cx.sink),
            }
        }
        let value = Value::Object(out);
        if node.value_checks && !cx.sink.done() {
            check_value(node, &value, path, &mut cx.sink);
        }
        cx.depth.leave();
        Ok(value)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.cx.depth.enter()?;
        let schema = self.schema;
        let path = self.path;
        let node = match self.container_node(ty::ARRAY) {
            Some(_) => match schema {
                Schema::Node(n) => Some(&**n),
                _ => None,
            },
            None => None,
        };
        let cx = self.cx;
        let mut out = Vec::new();
        let Some(node) = node else {
            while let Some(item) = seq.next_element_seed(PlainSeed { depth: &mut cx.depth })? {
                out.push(item);
            }
            cx.depth.leave();
            return Ok(Value::Array(out));
        };
        let item_schema = node.items.as_ref().unwrap_or(ANY);
        loop {
            let item_path = path.index(out.len());
            let schema = if cx.sink.done() { ANY } else { item_schema };
            match seq.next_element_seed(Seed { cx: &mut *cx, schema, path: &item_path })? {
                Some(item) => out.push(item),
                None => break,
            }
        }
        if !cx.sink.done() && (node.min_items.is_some() || node.max_items.is_some() || node.unique_items) {
            check_array(node, &out, path, &mut cx.sink);
        }
        let value = Value::Array(out);
        if node.value_checks && !cx.sink.done() {
            check_value(node, &value, path, &mut cx.sink);
        }
        cx.depth.leave();
        Ok(value)
    }
}
