//! Exact number semantics for the validator: JSON Schema compares numbers as mathematical values,
//! so `1 == 1.0`, a u64 bound compares exactly against a u64 argument, and `multipleOf` is decided
//! on the decimals as written (their shortest round-trip form), not on a lossy float division.
//! Also JSON equality (for `enum`, `const`, `uniqueItems`) and a hash consistent with it; both
//! are safe on values of any depth.

use crate::json::shortest_decimal;
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::hash::{BuildHasher, Hasher, RandomState};

/// A JSON number as serde_json holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num {
    U(u64),
    I(i64),
    F(f64),
}

impl Num {
    pub(crate) fn of(n: &Number) -> Num {
        if let Some(u) = n.as_u64() {
            Num::U(u)
        } else if let Some(i) = n.as_i64() {
            Num::I(i)
        } else {
            Num::F(n.as_f64().unwrap_or(0.0))
        }
    }

    /// True for a mathematical integer (`1.0` included, as in JSON Schema draft 6 and later).
    #[inline]
    pub(crate) fn is_integer(self) -> bool {
        match self {
            Num::U(_) | Num::I(_) => true,
            Num::F(f) => f.is_finite() && f.fract() == 0.0,
        }
    }

    fn as_int(self) -> Option<i128> {
        match self {
            Num::U(u) => Some(i128::from(u)),
            Num::I(i) => Some(i128::from(i)),
            Num::F(_) => None,
        }
    }

    /// Exact comparison of two finite numbers.
    pub(crate) fn cmp(self, other: Num) -> Ordering {
        match (self.as_int(), other.as_int(), self, other) {
            (Some(a), Some(b), _, _) => a.cmp(&b),
            (Some(a), None, _, Num::F(f)) => cmp_int_float(a, f),
            (None, Some(b), Num::F(f), _) => cmp_int_float(b, f).reverse(),
            (_, _, Num::F(a), Num::F(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            _ => Ordering::Equal,
        }
    }

    /// True when `self` is an integer multiple of `divisor` (> 0), decided exactly on the decimal
    /// forms.
    pub(crate) fn is_multiple_of(self, divisor: Num) -> bool {
        if let (Some(v), Some(d)) = (self.as_int(), divisor.as_int()) {
            return d != 0 && v % d == 0;
        }
        let Some((mv, ev)) = decimal(self) else { return true }; // zero
        let Some((md, ed)) = decimal(divisor) else { return false };
        if ev >= ed {
            // (mv * 10^(ev-ed)) mod md == 0
            let m = u128::from(md);
            let pow = pow_mod(10, (ev - ed) as u64, m);
            ((u128::from(mv) % m) * pow).is_multiple_of(m)
        } else {
            // mv mod (md * 10^(ed-ev)) == 0; mv < 2^64, so a divisor that overflows is larger.
            let mut d = u128::from(md);
            for _ in 0..(ed - ev) {
                match d.checked_mul(10) {
                    Some(x) if x <= u128::from(u64::MAX) => d = x,
                    _ => return false,
                }
            }
            u128::from(mv).is_multiple_of(d)
        }
    }
}

/// `|x| = digits * 10^exp`, or None for zero.
fn decimal(n: Num) -> Option<(u64, i32)> {
    match n {
        Num::U(0) | Num::I(0) => None,
        Num::U(u) => Some((u, 0)),
        Num::I(i) => Some((i.unsigned_abs(), 0)),
        Num::F(0.0) => None,
        Num::F(f) => Some(shortest_decimal(f)),
    }
}

fn pow_mod(mut base: u128, mut exp: u64, m: u128) -> u128 {
    let mut result = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = result * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    result
}

fn cmp_int_float(i: i128, f: f64) -> Ordering {
    // Every integer here fits in 65 bits; floats beyond ±2^70 settle it by sign.
    const BIG: f64 = 1.1805916207174113e21; // 2^70
    if f >= BIG {
        return Ordering::Less;
    }
    if f <= -BIG {
        return Ordering::Greater;
    }
    let floor = f.floor();
    match i.cmp(&(floor as i128)) {
        Ordering::Equal if f > floor => Ordering::Less,
        o => o,
    }
}

/// JSON Schema equality: numbers by value, objects regardless of member order. Iterative.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    // Scalars (the common case: enum of strings) without allocating a stack.
    match (a, b) {
        (Value::String(x), Value::String(y)) => return x == y,
        (Value::Number(x), Value::Number(y)) => return Num::of(x).cmp(Num::of(y)) == Ordering::Equal,
        (Value::Bool(x), Value::Bool(y)) => return x == y,
        (Value::Null, Value::Null) => return true,
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {}
        _ => return false,
    }
    let mut stack = vec![(a, b)];
    while let Some((a, b)) = stack.pop() {
        match (a, b) {
            (Value::Null, Value::Null) => {}
            (Value::Bool(x), Value::Bool(y)) if x == y => {}
            (Value::String(x), Value::String(y)) if x == y => {}
            (Value::Number(x), Value::Number(y)) if Num::of(x).cmp(Num::of(y)) == Ordering::Equal => {}
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => stack.extend(x.iter().zip(y)),
            (Value::Object(x), Value::Object(y)) if x.len() == y.len() => {
                for (k, v) in x {
                    match y.get(k) {
                        Some(w) => stack.push((v, w)),
                        None => return false,
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

/// A hash consistent with [`json_eq`], keyed by `keys` (SipHash with random keys: the values are
/// the model's, and a fixed hash of them could be made to collide, which would make `uniqueItems`
/// quadratic). Every level counts, however deep: a hash that stopped looking at some depth would
/// give every item that differs only below it the same hash, and `uniqueItems` would compare all
/// of them pairwise. Object members are combined regardless of order. Iterative (children are
/// hashed before their container, on a heap stack), so any depth is safe and the work is linear
/// in the value's size.
pub(crate) fn json_hash(value: &Value, keys: &RandomState) -> u64 {
    enum Work<'a> {
        Visit(&'a Value),
        // Combine the container's children, whose hashes are the last ones in `done`.
        Array(usize),
        Object(&'a Map<String, Value>),
    }
    if !matches!(value, Value::Array(_) | Value::Object(_)) {
        let mut h = keys.build_hasher();
        hash_scalar(value, &mut h);
        return h.finish();
    }
    let mut work = vec![Work::Visit(value)];
    let mut done: Vec<u64> = Vec::new();
    while let Some(w) = work.pop() {
        let mut h = keys.build_hasher();
        match w {
            Work::Visit(Value::Array(items)) => {
                work.push(Work::Array(items.len()));
                // Reversed, so that the children's hashes land in `done` in order.
                work.extend(items.iter().rev().map(Work::Visit));
                continue;
            }
            Work::Visit(Value::Object(map)) => {
                work.push(Work::Object(map));
                work.extend(map.values().rev().map(Work::Visit));
                continue;
            }
            Work::Visit(scalar) => hash_scalar(scalar, &mut h),
            Work::Array(len) => {
                h.write_u8(4);
                h.write_usize(len);
                for item in done.drain(done.len() - len..) {
                    h.write_u64(item);
                }
            }
            Work::Object(map) => {
                h.write_u8(5);
                let mut sum = 0u64;
                for (k, v) in map.keys().zip(done.drain(done.len() - map.len()..)) {
                    let mut e = keys.build_hasher();
                    e.write(k.as_bytes());
                    e.write_u64(v);
                    sum = sum.wrapping_add(e.finish());
                }
                h.write_u64(sum);
            }
        }
        done.push(h.finish());
    }
    done.pop().unwrap_or(0)
}

/// 2^64 (exact as a double): every integral double below it in magnitude is an `i128`, and an
/// integer that serde_json holds as a `u64` or an `i64` is below it.
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

fn hash_scalar(value: &Value, h: &mut impl Hasher) {
    match value {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
        // Equal numbers hash equal however they are written: an integral double that a `u64` or
        // an `i64` can equal hashes as that integer; any other double by its bits (`-0.0` is
        // integral, so it hashes as `0`).
        Value::Number(n) => match Num::of(n) {
            Num::U(u) => h.write_i128(i128::from(u)),
            Num::I(i) => h.write_i128(i128::from(i)),
            Num::F(f) if f.fract() == 0.0 && f.abs() < TWO_POW_64 => h.write_i128(f as i128),
            Num::F(f) => h.write_u64(f.to_bits()),
        },
        Value::String(s) => {
            h.write_u8(3);
            h.write(s.as_bytes());
        }
        // Containers are combined in `json_hash`.
        Value::Array(_) | Value::Object(_) => {}
    }
}

/// A small, fast, non-cryptographic hasher (the Fx hash of rustc) for the property lookup tables
/// built from a schema (never for the model's values: [`json_hash`]).
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
        self.add(bytes.len() as u64);
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The multiplication leaves the low bits as the input's (zero for most doubles), and
        // tables pick buckets by the low bits: the well-mixed high bits go there instead (as
        // rustc-hash 2 does).
        self.hash.rotate_left(26)
    }
}

/// `BuildHasher` for [`FxHasher`].
#[derive(Default, Clone, Copy)]
pub(crate) struct FxBuild;

impl std::hash::BuildHasher for FxBuild {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n(v: Value) -> Num {
        Num::of(v.as_number().unwrap())
    }

    #[test]
    fn exact_comparisons() {
        assert_eq!(n(json!(1)).cmp(n(json!(1.0))), Ordering::Equal);
        assert_eq!(n(json!(u64::MAX)).cmp(n(json!(18446744073709551600u64))), Ordering::Greater);
        assert_eq!(n(json!(9007199254740993u64)).cmp(Num::F(9007199254740992.0)), Ordering::Greater);
        assert_eq!(n(json!(-3)).cmp(Num::F(-2.5)), Ordering::Less);
        assert_eq!(n(json!(-2)).cmp(Num::F(-2.5)), Ordering::Greater);
        assert_eq!(Num::F(1e300).cmp(n(json!(u64::MAX))), Ordering::Greater);
    }

    #[test]
    fn multiple_of_on_decimals() {
        assert!(Num::F(0.0075).is_multiple_of(Num::F(0.0001)));
        assert!(!Num::F(0.00751).is_multiple_of(Num::F(0.0001)));
        assert!(Num::F(4.5).is_multiple_of(Num::F(1.5)));
        assert!(!n(json!(35)).is_multiple_of(Num::F(1.5)));
        assert!(!Num::F(1e308).is_multiple_of(Num::F(0.123456789)));
        assert!(n(json!(12391239123u64)).is_multiple_of(Num::F(1e-8)));
        assert!(n(json!(-10)).is_multiple_of(n(json!(2))));
        assert!(Num::F(0.3).is_multiple_of(Num::F(0.1)));
        assert!(!Num::F(1e20).is_multiple_of(n(json!(3)))); // 10^20 mod 3 == 1
        assert!(Num::F(1e20).is_multiple_of(n(json!(5))));
    }

    #[test]
    fn equality_and_hash_agree() {
        let pairs = [
            (json!(1), json!(1.0), true),
            (json!({"a": [1, {"b": 2.0}]}), json!({"a": [1.0, {"b": 2}]}), true),
            (json!([0]), json!([false]), false),
            (json!({"a": 1}), json!({"a": 1, "b": 2}), false),
            (json!("x"), json!("x"), true),
        ];
        let keys = RandomState::new();
        for (a, b, eq) in pairs {
            assert_eq!(json_eq(&a, &b), eq, "{a} {b}");
            if eq {
                assert_eq!(json_hash(&a, &keys), json_hash(&b, &keys));
            }
        }
    }

    #[test]
    fn integers_up_to_2_pow_64_hash_alike_in_both_spellings() {
        // Integral doubles between 1.8e19 and 2^64 once hashed by their bits, so uniqueItems let
        // [18400000000000000000, 1.84e19] through although json_eq (and const) call them equal.
        let keys = RandomState::new();
        let parse = |t: &str| -> Value { serde_json::from_str(t).unwrap() };
        for (int, float) in [
            ("1000", "1e3"),
            ("17000000000000000000", "1.7e19"),
            ("18000000000000000000", "1.8e19"),
            ("18400000000000000000", "1.84e19"),
            ("18446744073709549568", "1.8446744073709549568e19"), // the largest double below 2^64
            ("-9223372036854775808", "-9.223372036854775808e18"),
        ] {
            let (a, b) = (parse(int), parse(float));
            assert!(a.is_u64() || a.is_i64(), "{int}");
            assert!(b.is_f64(), "{float}");
            assert!(json_eq(&a, &b), "{int} {float}");
            assert_eq!(json_hash(&a, &keys), json_hash(&b, &keys), "{int} {float}");
        }
        // 2^64 itself is no u64: it is a double whichever way it is written.
        let (a, b) = (parse("18446744073709551616"), parse("1.8446744073709551616e19"));
        assert!(json_eq(&a, &b));
        assert_eq!(json_hash(&a, &keys), json_hash(&b, &keys));
        assert!(!json_eq(&a, &json!(u64::MAX)));
    }

    #[test]
    fn the_fx_hash_spreads_doubles_over_the_low_bits() {
        // Doubles such as i + 0.5 have their low 32 bits zero; tables pick buckets by the low bits.
        let low = |v: f64| {
            let mut h = FxHasher::default();
            h.write_u64(v.to_bits());
            h.finish() & 0xffff
        };
        let buckets: std::collections::HashSet<u64> = (0..10_000).map(|i| low(f64::from(i) + 0.5)).collect();
        assert!(buckets.len() > 5_000, "{} distinct low 16-bit values of 10000", buckets.len());
    }
}
