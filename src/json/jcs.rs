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

/// Parses JSON text within the limits and returns its canonical form (used for call signatures).
///
/// # Errors
/// `json_too_large`, `json_invalid` or `json_too_deep`.
pub fn canonicalize_str(text: &str, limits: &JsonLimits) -> Result<String, AgentError> {
    Ok(canonicalize(&super::parse_value(text, limits)?))
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
    let (digits, n) = shortest_digits(x.abs());
    let mut m: u64 = 0;
    for c in digits.bytes() {
        m = m * 10 + u64::from(c - b'0');
    }
    (m, n - digits.len() as i32)
}

/// The digits `d1..dk` and exponent `n` of ECMA-262 Number::toString for a positive finite `x`:
/// `x ≈ 0.d1..dk * 10^n`, with `k` as small as possible, the closest such decimal, and on an
/// exact tie the even one.
fn shortest_digits(x: f64) -> (String, i32) {
    // Rust's `{:e}` prints the shortest round-trip digits, closest to the value; it breaks an
    // exact tie upwards where ECMAScript picks the even candidate, so ties are checked below.
    let sci = format!("{:e}", x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let e10: i32 = exp.parse().unwrap_or(0);
    let last = digits.as_bytes()[digits.len() - 1] - b'0';
    if digits.len() >= 2 && last % 2 == 1 {
        if let Some(even) = tie_breaker(x, &digits, e10) {
            return (even, e10 + 1);
        }
    }
    (digits, e10 + 1)
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
    if x < 0.0 {
        out.push('-');
    }
    let (digits, n) = shortest_digits(x.abs());
    let k = digits.len() as i32;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
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
