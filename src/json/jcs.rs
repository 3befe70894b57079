//! RFC 8785 (JCS) canonical JSON: members sorted by key as UTF-16 code units, no whitespace,
//! minimal string escapes, numbers as ECMAScript `Number.prototype.toString` writes the IEEE-754
//! double. Iterative, so a value of any depth is safe.

use super::JsonLimits;
use crate::error::{codes, AgentError};
use serde_json::{Number, Value};
use std::cmp::Ordering;
use std::fmt::Write as _;

/// The canonical JSON text of a value (RFC 8785).
///
/// Infallible for a [`Value`]: serde_json numbers are always finite. Integers beyond 2^53 are
/// written as the double they round to, as JCS requires (`18446744073709551615` becomes
/// `18446744073709552000`).
pub fn canonicalize(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Parses JSON text within the limits and returns its canonical form. RFC 8785 takes I-JSON, so
/// an object with a name twice is refused.
///
/// # Errors
/// `json_too_large`, `json_invalid` (also: a name twice in an object) or `json_too_deep`.
pub fn canonicalize_str(text: &str, limits: &JsonLimits) -> Result<String, AgentError> {
    Ok(canonicalize(&super::parse_value_unique(text, limits)?))
}

/// Formats a double as ECMAScript `Number.prototype.toString` does (the JCS number form).
///
/// # Errors
/// `json_number_invalid` for NaN and the infinities, which JSON cannot carry.
pub fn format_number(x: f64) -> Result<String, AgentError> {
    if !x.is_finite() {
        return Err(AgentError::of(codes::JSON_NUMBER_INVALID, format!("{x} is not a JSON number")));
    }
    let mut out = String::new();
    write_f64(x, &mut out);
    Ok(out)
}

enum Work<'a> {
    Value(&'a Value),
    Key(&'a str),
    Raw(&'static str),
}

fn write_canonical(value: &Value, out: &mut String) {
    let mut stack = vec![Work::Value(value)];
    while let Some(work) = stack.pop() {
        match work {
            Work::Raw(s) => out.push_str(s),
            Work::Key(k) => {
                write_string(k, out);
                out.push(':');
            }
            Work::Value(v) => match v {
                Value::Null => out.push_str("null"),
                Value::Bool(true) => out.push_str("true"),
                Value::Bool(false) => out.push_str("false"),
                Value::Number(n) => write_f64(number_as_f64(n), out),
                Value::String(s) => write_string(s, out),
                Value::Array(items) => {
                    out.push('[');
                    stack.push(Work::Raw("]"));
                    for (i, item) in items.iter().enumerate().rev() {
                        stack.push(Work::Value(item));
                        if i > 0 {
                            stack.push(Work::Raw(","));
                        }
                    }
                }
                Value::Object(map) => {
                    out.push('{');
                    stack.push(Work::Raw("}"));
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    entries.sort_by(|a, b| utf16_cmp(a.0, b.0));
                    for (i, (k, v)) in entries.into_iter().enumerate().rev() {
                        stack.push(Work::Value(v));
                        stack.push(Work::Key(k));
                        if i > 0 {
                            stack.push(Work::Raw(","));
                        }
                    }
                }
            },
        }
    }
}

/// Compares two strings as sequences of UTF-16 code units (JCS member order).
pub(crate) fn utf16_cmp(a: &str, b: &str) -> Ordering {
    // UTF-8 byte order equals code point order, which differs from UTF-16 order only for
    // supplementary characters against U+E000..U+FFFF: compare code units only when needed.
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The value of a serde_json number as a double (JCS works on doubles only).
pub(crate) fn number_as_f64(n: &Number) -> f64 {
    if let Some(u) = n.as_u64() {
        u as f64
    } else if let Some(i) = n.as_i64() {
        i as f64
    } else {
        n.as_f64().unwrap_or(0.0)
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x09 => Some("\\t"),
            0x0A => Some("\\n"),
            0x0C => Some("\\f"),
            0x0D => Some("\\r"),
            0x00..=0x1F => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match escape {
            Some(e) => out.push_str(e),
            None => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// The shortest decimal that round-trips to `x` (x finite, not zero): `(digits, exponent)` with
/// `|x| = digits * 10^exponent` and no trailing zero in `digits`.
pub(crate) fn shortest_decimal(x: f64) -> (u64, i32) {
    let d = shortest_digits(x.abs());
    (d.value(), d.n - d.len as i32)
}

/// The digits `d1..dk` (ASCII, `k` at most 17) and exponent `n` of a double: `x ≈ 0.d1..dk * 10^n`.
struct Digits {
    bytes: [u8; 17],
    len: usize,
    n: i32,
}

impl Digits {
    fn as_str(&self) -> &str {
        // Only ASCII digits are ever stored.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("0")
    }

    /// The digits as an integer (17 digits fit a u64).
    fn value(&self) -> u64 {
        self.bytes[..self.len].iter().fold(0, |m, c| m * 10 + u64::from(c - b'0'))
    }
}

/// Text formatted on the stack: `{:e}` of a double and the short decimals compared with it, which
/// all fit in 32 bytes (17 digits, a point, a 5, `e`, a sign and 3 exponent digits).
struct StackText {
    buf: [u8; 32],
    len: usize,
}

impl StackText {
    fn of(args: std::fmt::Arguments<'_>) -> Option<StackText> {
        let mut t = StackText { buf: [0; 32], len: 0 };
        t.write_fmt(args).ok()?;
        Some(t)
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The digits `d1..dk` and exponent `n` of ECMA-262 Number::toString for a positive finite `x`:
/// `x ≈ 0.d1..dk * 10^n`, with `k` as small as possible, the closest such decimal, and on an
/// exact tie the even one.
fn shortest_digits(x: f64) -> Digits {
    let mut d = Digits { bytes: [b'0'; 17], len: 0, n: 1 };
    // Rust's `{:e}` prints the shortest round-trip digits, closest to the value; it breaks an
    // exact tie upwards where ECMAScript picks the even candidate, so ties are checked below. The
    // text fits the stack (at most 17 digits); the heap is only a guard.
    let stack = StackText::of(format_args!("{:e}", x));
    let heap;
    let sci = match &stack {
        Some(t) => t.as_str(),
        None => {
            heap = format!("{:e}", x);
            heap.as_str()
        }
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    for c in mantissa.bytes().filter(|c| *c != b'.').take(d.bytes.len()) {
        d.bytes[d.len] = c;
        d.len += 1;
    }
    let e10: i32 = exp.parse().unwrap_or(0);
    d.n = e10 + 1;
    let last = d.bytes[d.len.saturating_sub(1)].wrapping_sub(b'0');
    if d.len >= 2 && last % 2 == 1 && may_tie(x, d.value(), d.len, e10) {
        if let Some(even) = tie_breaker(x, d.as_str(), e10) {
            d.bytes[..even.len()].copy_from_slice(even.as_bytes());
        }
    }
    d
}

/// Whether `x` may lie exactly halfway between the k-digit decimal `s` (x's shortest digits,
/// exponent `e10` of the first) and a neighbour: a decimal that `x` equals exactly parses back
/// to `x`, so when neither midpoint does, there is no tie. Two short parses instead of the exact
/// expansion [`tie_breaker`] writes.
fn may_tie(x: f64, s: u64, k: usize, e10: i32) -> bool {
    let exp = e10 - k as i32;
    let parses_to_x = |m: u64| {
        StackText::of(format_args!("{m}5e{exp}")).and_then(|t| t.as_str().parse::<f64>().ok()) == Some(x)
    };
    parses_to_x(s) || parses_to_x(s - 1)
}

/// When `x` lies exactly halfway between `digits` and a neighbour with as many digits that also
/// round-trips, the neighbour (which is even, since `digits` ends odd).
fn tie_breaker(x: f64, digits: &str, e10: i32) -> Option<String> {
    let s: u128 = digits.parse().ok()?;
    let k = digits.len();
    // The exact decimal expansion of x (a double has at most 767 significant digits).
    let exact = format!("{:.800e}", x);
    let (em, ee) = exact.split_once('e')?;
    if ee.parse::<i32>().ok()? != e10 {
        return None;
    }
    let exact_digits: String = em.chars().filter(|c| *c != '.').collect();
    let exact_digits = exact_digits.trim_end_matches('0');
    for neighbour in [s - 1, s + 1] {
        let n_digits = neighbour.to_string();
        if n_digits.len() != k {
            continue;
        }
        // The midpoint of s and the neighbour, as k+1 digits ending in 5.
        let mid = (s.min(neighbour) * 10 + 5).to_string();
        if exact_digits != mid {
            continue;
        }
        let candidate = format!("{}.{}e{}", &n_digits[..1], &n_digits[1..], e10);
        if candidate.parse::<f64>().ok()? == x {
            return Some(n_digits);
        }
    }
    None
}

/// Writes a finite double as ECMAScript does (ECMA-262 Number::toString, radix 10).
fn write_f64(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0'); // also -0
        return;
    }
    // An integer below 2^53 in magnitude is exact and printed as itself (no exponent below 10^21).
    if x.fract() == 0.0 && x.abs() <= 9_007_199_254_740_992.0 {
        let _ = write!(out, "{}", x as i64);
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    let d = shortest_digits(x.abs());
    let digits = d.as_str();
    let (k, n) = (d.len as i32, d.n);
    if k <= n && n <= 21 {
        out.push_str(digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(digits);
    } else {
        let e = n - 1;
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if e >= 0 { '+' } else { '-' });
        let _ = write!(out, "{}", e.abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(x: f64) -> String {
        format_number(x).unwrap()
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(f(56.0), "56");
        assert_eq!(f(4.5), "4.5");
        assert_eq!(f(0.002), "0.002");
        assert_eq!(f(1e30), "1e+30");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(1e-7), "1e-7");
        assert_eq!(f(0.000001), "0.000001");
        assert_eq!(f(-0.0), "0");
        assert_eq!(f(-1.5e-9), "-1.5e-9");
        assert_eq!(f("333333333.33333329".parse().unwrap()), "333333333.3333333");
        assert_eq!(format_number(f64::NAN).unwrap_err().code, codes::JSON_NUMBER_INVALID);
    }

    #[test]
    fn exact_ties_pick_the_even_digit() {
        // 1424953923781206.25 is exactly halfway between ...206.2 and ...206.3.
        assert_eq!(f(f64::from_bits(0x43143ff3c1cb0959)), "1424953923781206.2");
    }

    /// The digits without the shortcuts (the `{:e}` digits, the exact tie check on every odd
    /// last digit), for the comparison below.
    fn reference_digits(x: f64) -> (String, i32) {
        let sci = format!("{:e}", x);
        let (mantissa, exp) = sci.split_once('e').unwrap();
        let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        let e10: i32 = exp.parse().unwrap();
        let odd = (digits.as_bytes()[digits.len() - 1] - b'0') % 2 == 1;
        match tie_breaker(x, &digits, e10) {
            Some(even) if digits.len() >= 2 && odd => (even, e10 + 1),
            _ => (digits, e10 + 1),
        }
    }

    #[test]
    fn shortcuts_agree_with_the_exact_digits() {
        // Random doubles of every magnitude, integers around 2^53, and ties (halves of integers
        // above 2^52 / 10, where the last kept digit decides).
        let mut rng = fastrand::Rng::with_seed(8785);
        let mut xs: Vec<f64> = (0..20_000).map(|_| f64::from_bits(rng.u64(..))).collect();
        xs.extend((0..2_000).map(|i| 9_007_199_254_740_992.0 - 1000.0 + f64::from(i)));
        xs.extend((0..2_000).map(|_| rng.u64(1 << 49..1 << 52) as f64 + 0.25 * f64::from(rng.u8(..4))));
        xs.push(f64::from_bits(0x43143ff3c1cb0959));
        for x in xs.into_iter().filter(|x| x.is_finite() && *x != 0.0) {
            let d = shortest_digits(x.abs());
            assert_eq!((d.as_str().to_string(), d.n), reference_digits(x.abs()), "{x:e}");
            if x.fract() == 0.0 && x.abs() < 1e21 {
                let (digits, n) = reference_digits(x.abs());
                let whole = format!(
                    "{}{digits}{}",
                    if x < 0.0 { "-" } else { "" },
                    "0".repeat((n - digits.len() as i32) as usize)
                );
                assert_eq!(f(x), whole, "{x:e}");
            }
        }
    }

    #[test]
    fn big_integers_become_doubles() {
        assert_eq!(canonicalize(&json!(u64::MAX)), "18446744073709552000");
        assert_eq!(canonicalize(&json!(-9007199254740993i64)), "-9007199254740992");
    }

    #[test]
    fn supplementary_characters_sort_by_utf16() {
        assert_eq!(utf16_cmp("\u{1F602}", "\u{FB33}"), Ordering::Less);
        assert_eq!("\u{1F602}".cmp("\u{FB33}"), Ordering::Greater);
    }

    #[test]
    fn shortest_decimal_digits() {
        assert_eq!(shortest_decimal(0.0075), (75, -4));
        assert_eq!(shortest_decimal(1e-8), (1, -8));
        assert_eq!(shortest_decimal(1500.0), (15, 2));
    }

    #[test]
    fn deep_values_do_not_recurse() {
        let mut v = json!(1);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let text = canonicalize(&v);
        assert_eq!(text.len(), 200_001);
        // Dropping a 100,000-deep Value would recurse inside serde_json: unwind it by hand.
        let mut cur = v;
        while let Value::Array(mut items) = cur {
            cur = items.pop().unwrap_or(Value::Null);
        }
    }
}
