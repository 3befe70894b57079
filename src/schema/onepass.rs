//! Validation while parsing: a hand-written JSON parser driven by the compiled tree builds the
//! argument [`Value`] and checks it in the same pass, so validating costs little beyond the parse
//! that has to happen anyway. It accepts exactly what serde_json accepts and builds the same
//! values (u64 / i64 / correctly rounded f64, `-0` as `-0.0`, the last of duplicate keys), which
//! tests/fuzz.rs checks against serde_json.
//!
//! Violations are recorded, never returned as parse errors, so that the gates keep their order:
//! invalid JSON (or too deep) wins over any schema violation met before the broken spot. Depth is
//! checked on entering each container, so recursion is bounded by the limit (at most 128).

use super::check::{check_array, check_required, check_scalar, check_value, kind_ok, type_ok, Sink};
use super::compile::{ty, Additional, Node, Schema};
use super::path::Path;
use serde_json::{Map, Number, Value};
use std::cell::Cell;

const ANY: &Schema = &Schema::Any;

/// The most containers the parser nests, whatever the limit says (as the JSON module's parser).
pub(crate) const HARD_DEPTH: usize = crate::json::DEPTH_CAP;

/// Why parsing stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// Not JSON: what was expected, at which byte.
    Invalid(&'static str, usize),
    /// Nested deeper than the limit.
    TooDeep,
}

pub(crate) struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    max_depth: usize,
    pub(crate) sink: Sink,
    /// Why the parse stopped, once it has.
    stop: Option<Stop>,
    /// Items of the arrays being parsed, stacked: each array is then allocated once, at its size.
    items: Vec<Value>,
    /// The first key an object repeated, if any: the value keeps the last one (as serde_json), and
    /// the caller refuses the text (which value was meant is ambiguous).
    pub(crate) duplicate_key: Option<String>,
}

/// A failed parse; what went wrong is kept in [`Parser::stop`]. Zero-sized so that results stay
/// small and values are written in place (returning `Result<Value, _>` through the recursion made
/// the caller re-read each value with unaligned copies: store-forwarding stalls).
pub(crate) struct Fail;

type R<T> = Result<T, Fail>;

/// Bytes that end the fast scan of a string: `"`, `\` and control characters.
static SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

thread_local! {
    /// The item stack, kept between parses on this thread so a small call allocates nothing for it.
    static SCRATCH: Cell<Vec<Value>> = const { Cell::new(Vec::new()) };
}

/// Writes a parsed value into its slot, which holds the `Null` placeholder: nothing to drop, so
/// no call to `drop_in_place` per value (the compiler cannot see that the slot is `Null`).
#[inline]
fn put(slot: &mut Value, value: Value) {
    let old = std::mem::replace(slot, value);
    debug_assert!(old.is_null());
    std::mem::forget(old);
}

/// Writes a finished array into its slot (which holds `Null`): the tag, then the vector's own
/// three words. `put(slot, Value::Array(items))` compiled to a copy of the enum's bytes 1..32
/// through a temporary, whose unaligned 16-byte load stalled on the stores just made to it.
#[inline]
fn put_array(slot: &mut Value, items: Vec<Value>) {
    put(slot, Value::Array(Vec::new()));
    if let Value::Array(empty) = slot {
        *empty = items;
    }
}

/// [`put_array`] for an object.
#[inline]
fn put_object(slot: &mut Value, map: Map<String, Value>) {
    put(slot, Value::Object(Map::new()));
    if let Value::Object(empty) = slot {
        // The empty map owns nothing: not dropped (the compiler did not see that and called the
        // map's drop).
        std::mem::forget(std::mem::replace(empty, map));
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        let mut items = std::mem::take(&mut self.items);
        items.clear(); // leftovers of a failed parse
        if items.capacity() <= 1024 {
            SCRATCH.with(|s| s.set(items));
        }
    }
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str, max_depth: usize, sink: Sink) -> Self {
        Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            depth: 0,
            max_depth: max_depth.min(HARD_DEPTH),
            sink,
            stop: None,
            items: SCRATCH.with(Cell::take),
            duplicate_key: None,
        }
    }

    /// Parses the whole text as one value checked against `schema`, into `out` (which holds
    /// `Null`; written in place rather than returned, to spare a move of the result).
    pub(crate) fn parse_document(&mut self, schema: &Schema, out: &mut Value) -> Result<(), Stop> {
        let parsed = self.value(schema, &Path::ROOT, out).and_then(|()| {
            self.skip_ws();
            if self.pos != self.bytes.len() {
                return Err(self.fail(Stop::Invalid("trailing characters", self.pos)));
            }
            Ok(())
        });
        match parsed {
            Ok(()) => Ok(()),
            Err(Fail) => Err(self.stop.take().unwrap_or(Stop::Invalid("invalid JSON", self.pos))),
        }
    }

    #[cold]
    fn fail(&mut self, stop: Stop) -> Fail {
        self.stop = Some(stop);
        Fail
    }

    /// `line N column M` of a byte offset (1-based, columns in characters), for messages.
    pub(crate) fn location(&self, at: usize) -> String {
        let at = at.min(self.bytes.len());
        let before = &self.bytes[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let col_end = crate::text::floor_char_boundary(self.text, at);
        let column = self.text[line_start..col_end].chars().count() + 1;
        format!("line {line} column {column}")
    }

    #[inline]
    fn skip_ws(&mut self) {
        // Compact JSON has no whitespace between most tokens: one compare settles it.
        match self.bytes.get(self.pos) {
            Some(&b) if b > b' ' => return,
            None => return,
            _ => {}
        }
        // Indentation comes in runs of spaces: skip eight at a time first.
        const SPACES: u64 = 0x2020_2020_2020_2020;
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 8) {
            if u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) != SPACES {
                break;
            }
            self.pos += 8;
        }
        while let Some(&b) = self.bytes.get(self.pos) {
            if b == b' ' || b == b'\n' || b == b'\r' || b == b'\t' {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn value(&mut self, schema: &Schema, path: &Path<'_>, out: &mut Value) -> R<()> {
        self.skip_ws();
        let scalar = match self.peek() {
            Some(b'{') => return self.object(schema, path, out),
            Some(b'[') => return self.array(schema, path, out),
            Some(b'"') => {
                // A string without escapes is copied straight into the slot (not returned
                // through a `Result<String>` and wrapped).
                let start = self.pos + 1;
                let end = self.scan(start);
                if self.bytes.get(end) == Some(&b'"') {
                    self.pos = end + 1;
                    Value::String(self.text[start..end].to_owned())
                } else {
                    Value::String(self.string()?)
                }
            }
            Some(b't') => {
                self.literal("true")?;
                Value::Bool(true)
            }
            Some(b'f') => {
                self.literal("false")?;
                Value::Bool(false)
            }
            Some(b'n') => {
                self.literal("null")?;
                Value::Null
            }
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(_) => return Err(self.fail(Stop::Invalid("expected value", self.pos))),
            None => return Err(self.fail(Stop::Invalid("EOF while parsing a value", self.pos))),
        };
        put(out, scalar);
        match schema {
            Schema::Any => {}
            _ if self.sink.done() => {}
            Schema::Never => self.sink.never(path),
            // The type check inline; the keyword checks only where the node has some.
            Schema::Node(node) => {
                if !type_ok(node.types, out) {
                    self.sink.type_mismatch(node, path);
                } else if node.string_checks || node.number_checks || node.value_checks {
                    check_scalar(node, out, path, &mut self.sink);
                }
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static str) -> R<()> {
        let word = word.as_bytes();
        let matched = self.bytes.get(self.pos..self.pos + word.len()).is_some_and(|got| {
            // Byte by byte: a memcmp call costs more than these four or five compares.
            got.iter().zip(word).all(|(a, b)| a == b)
        });
        if matched {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.fail(Stop::Invalid("expected ident", self.pos)))
        }
    }

    fn number(&mut self) -> R<Value> {
        let start = self.pos;
        let b = self.bytes;
        let negative = b[self.pos] == b'-';
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match b.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                    self.pos += 1;
                }
            }
            _ => return Err(self.fail(Stop::Invalid("invalid number", self.pos))),
        }
        let int_end = self.pos;
        let mut is_float = false;
        if b.get(self.pos) == Some(&b'.') {
            is_float = true;
            self.pos += 1;
            if !matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                return Err(self.fail(Stop::Invalid("invalid number", self.pos)));
            }
            while matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
        }
        if matches!(b.get(self.pos), Some(b'e' | b'E')) {
            is_float = true;
            self.pos += 1;
            if matches!(b.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                return Err(self.fail(Stop::Invalid("invalid number", self.pos)));
            }
            while matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
        }
        if !is_float {
            let mut n: u64 = 0;
            let mut overflow = false;
            for &d in &b[int_start..int_end] {
                match n.checked_mul(10).and_then(|x| x.checked_add(u64::from(d - b'0'))) {
                    Some(x) => n = x,
                    None => {
                        overflow = true;
                        break;
                    }
                }
            }
            if !overflow {
                if !negative {
                    return Ok(Value::Number(n.into()));
                }
                if n == 0 {
                    // serde_json reads "-0" as the double -0.0.
                    return Ok(Number::from_f64(-0.0).map_or(Value::Null, Value::Number));
                }
                if n <= 1 << 63 {
                    return Ok(Value::Number(Number::from((n as i64).wrapping_neg())));
                }
            }
        }
        match self.text[start..self.pos].parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Number::from_f64(f).map_or(Value::Null, Value::Number)),
            _ => Err(self.fail(Stop::Invalid("number out of range", start))),
        }
    }

    /// A string starting at the opening quote.
    fn string(&mut self) -> R<String> {
        self.pos += 1;
        let start = self.pos;
        let end = self.scan(start);
        if self.bytes.get(end) == Some(&b'"') {
            self.pos = end + 1;
            return Ok(self.text[start..end].to_owned());
        }
        let mut out = String::with_capacity(end - start + 16);
        out.push_str(&self.text[start..end]);
        self.pos = end;
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(self.fail(Stop::Invalid("control character in string", self.pos))),
                None => return Err(self.fail(Stop::Invalid("EOF while parsing a string", self.pos))),
            }
            let from = self.pos;
            let to = self.scan(from);
            out.push_str(&self.text[from..to]);
            self.pos = to;
        }
    }

    /// The first special byte at or after `i` (or the end), eight bytes at a time.
    #[inline(always)]
    fn scan(&self, mut i: usize) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let b = self.bytes;
        while let Some(chunk) = b.get(i..i + 8) {
            // One unaligned load (indexing the eight bytes one by one compiled to eight loads,
            // eight bounds checks and shifts).
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            let q = w ^ (ONES * u64::from(b'"'));
            let s = w ^ (ONES * u64::from(b'\\'));
            let hit = (q.wrapping_sub(ONES) & !q)
                | (s.wrapping_sub(ONES) & !s)
                | (w.wrapping_sub(ONES * 0x20) & !w);
            let hit = hit & HIGH;
            if hit != 0 {
                return i + (hit.trailing_zeros() / 8) as usize;
            }
            i += 8;
        }
        while i < b.len() && !SPECIAL[b[i] as usize] {
            i += 1;
        }
        i
    }

    fn escape(&mut self, out: &mut String) -> R<()> {
        let Some(c) = self.peek() else {
            return Err(self.fail(Stop::Invalid("EOF while parsing a string", self.pos)));
        };
        self.pos += 1;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let first = self.hex4()?;
                let ch = if (0xD800..0xDC00).contains(&first) {
                    if !self.bytes[self.pos..].starts_with(b"\\u") {
                        return Err(
                            self.fail(Stop::Invalid("lone leading surrogate in hex escape", self.pos))
                        );
                    }
                    self.pos += 2;
                    let second = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&second) {
                        return Err(
                            self.fail(Stop::Invalid("lone leading surrogate in hex escape", self.pos))
                        );
                    }
                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else if (0xDC00..0xE000).contains(&first) {
                    return Err(self.fail(Stop::Invalid("lone trailing surrogate in hex escape", self.pos)));
                } else {
                    first
                };
                match char::from_u32(ch) {
                    Some(c) => out.push(c),
                    None => return Err(self.fail(Stop::Invalid("invalid unicode code point", self.pos))),
                }
            }
            _ => return Err(self.fail(Stop::Invalid("invalid escape", self.pos - 1))),
        }
        Ok(())
    }

    fn hex4(&mut self) -> R<u32> {
        let mut n = 0u32;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                Some(_) => return Err(self.fail(Stop::Invalid("invalid escape", self.pos))),
                None => return Err(self.fail(Stop::Invalid("EOF while parsing a string", self.pos))),
            };
            n = n * 16 + u32::from(d);
            self.pos += 1;
        }
        Ok(n)
    }

    #[inline]
    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(self.fail(Stop::TooDeep));
        }
        Ok(())
    }

    /// The node to check a container of kind `bit` against, or None (after recording a type
    /// mismatch or a `false` schema, or when nothing is left to check).
    #[inline]
    fn container_node<'s>(&mut self, schema: &'s Schema, bit: u8, path: &Path<'_>) -> Option<&'s Node> {
        if self.sink.done() {
            return None;
        }
        match schema {
            Schema::Any => None,
            Schema::Never => {
                self.sink.never(path);
                None
            }
            Schema::Node(node) if kind_ok(node.types, bit) => Some(node),
            Schema::Node(node) => {
                self.sink.type_mismatch(node, path);
                None
            }
        }
    }

    fn object(&mut self, schema: &Schema, path: &Path<'_>, dest: &mut Value) -> R<()> {
        self.enter()?;
        self.pos += 1;
        let node = self.container_node(schema, ty::OBJECT, path);
        let mut out = Map::new();
        let mut seen = 0u64;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.skip_ws();
                match self.peek() {
                    Some(b'"') => {}
                    Some(_) => return Err(self.fail(Stop::Invalid("key must be a string", self.pos))),
                    None => return Err(self.fail(Stop::Invalid("EOF while parsing an object", self.pos))),
                }
                let key_start = self.pos + 1;
                let key = self.string()?;
                // The key as written when it has no escape (each escape is longer than what it
                // stands for): looking it up in the input, not in the copy just written, avoids
                // reading bytes whose stores are still in flight.
                let raw = self.pos - 1 - key_start;
                let (name, found_in): (&str, (&[u8], usize)) = if raw == key.len() {
                    (&self.text[key_start..self.pos - 1], (self.bytes, key_start))
                } else {
                    (&key, (key.as_bytes(), 0))
                };
                self.skip_ws();
                if self.peek() != Some(b':') {
                    return Err(self.fail(Stop::Invalid("expected `:`", self.pos)));
                }
                self.pos += 1;
                let child_path = path.key(name);
                let child: &Schema = match node {
                    Some(node) if !self.sink.done() => {
                        match node.properties.find_in(found_in.0, found_in.1, name.len()) {
                            Some(i) => {
                                if i < 64 {
                                    seen |= 1 << i;
                                }
                                &node.properties.entries[i].1
                            }
                            None => match &node.additional {
                                Additional::Any => ANY,
                                Additional::Deny => {
                                    self.sink.additional(&child_path);
                                    ANY
                                }
                                Additional::Schema(s) => s,
                            },
                        }
                    }
                    _ => ANY,
                };
                let mut value = Value::Null;
                self.value(child, &child_path, &mut value)?;
                match out.entry(key) {
                    serde_json::map::Entry::Vacant(slot) => {
                        slot.insert(value);
                    }
                    serde_json::map::Entry::Occupied(mut slot) => {
                        self.duplicate_key.get_or_insert_with(|| slot.key().clone());
                        slot.insert(value);
                    }
                }
                self.skip_ws();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    Some(_) => return Err(self.fail(Stop::Invalid("expected `,` or `}`", self.pos))),
                    None => return Err(self.fail(Stop::Invalid("EOF while parsing an object", self.pos))),
                }
            }
        }
        self.depth -= 1;
        let Some(node) = node else {
            put_object(dest, out);
            return Ok(());
        };
        if !self.sink.done() && !node.required.is_empty() {
            match node.required_mask {
                Some(mask) if seen & mask == mask => {}
                _ => check_required(node, &out, path, &mut self.sink),
            }
        }
        put_object(dest, out);
        if node.value_checks && !self.sink.done() {
            check_value(node, dest, path, &mut self.sink);
        }
        Ok(())
    }

    fn array(&mut self, schema: &Schema, path: &Path<'_>, dest: &mut Value) -> R<()> {
        self.enter()?;
        self.pos += 1;
        let node = self.container_node(schema, ty::ARRAY, path);
        let item_schema = node.and_then(|n| n.items.as_ref()).unwrap_or(ANY);
        let base = self.items.len();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                let item_path = path.index(self.items.len() - base);
                let s = if self.sink.done() { ANY } else { item_schema };
                // The item is parsed into its slot on the stack. (Parsing it into a local pushed
                // afterwards made the small benchmark object 1-2 % faster but our parse of the
                // large one 15-20 % slower, in alternated runs.)
                // The placeholder is written straight into the stack's buffer (`push` built it
                // aside and copied it in, reading back its one-byte store: a stall).
                let last = self.items.len();
                self.items.resize_with(last + 1, || Value::Null);
                // The slot holds `Null`: not read back (`take` stalled on the store just made).
                let mut item = Value::Null;
                self.value(s, &item_path, &mut item)?;
                put(&mut self.items[last], item);
                self.skip_ws();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b']') => {
                        self.pos += 1;
                        break;
                    }
                    Some(_) => return Err(self.fail(Stop::Invalid("expected `,` or `]`", self.pos))),
                    None => return Err(self.fail(Stop::Invalid("EOF while parsing a list", self.pos))),
                }
            }
        }
        self.depth -= 1;
        // One copy of the items into a vector of their number (collecting a `drain` moved each
        // item through the stack in pieces, which stalled on reading them back).
        let out = self.items.split_off(base);
        let Some(node) = node else {
            put_array(dest, out);
            return Ok(());
        };
        if !self.sink.done() && (node.min_items.is_some() || node.max_items.is_some() || node.unique_items) {
            check_array(node, &out, path, &mut self.sink);
        }
        put_array(dest, out);
        if node.value_checks && !self.sink.done() {
            check_value(node, dest, path, &mut self.sink);
        }
        Ok(())
    }
}
