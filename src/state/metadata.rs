//! The limits of a session's app metadata ([`AgentState::metadata`](super::AgentState)): what a key
//! may be, how large and deep one value may be, and how large the whole map may grow. Checked by
//! [`check_metadata_entry`] before anything is written; the runtime's `Agent::set_metadata` is the
//! one writer.
//!
//! Why bounds: the metadata is copied into every tool call's `ToolContext` and written with every
//! snapshot, so an unbounded map would make every call and every save pay for it.

use crate::error::{codes, AgentError};
use crate::json::JsonLimits;
use serde_json::Value;
use std::collections::BTreeMap;

/// The longest metadata key, in bytes.
pub const MAX_METADATA_KEY_LEN: usize = 128;

/// The limits of one metadata value, as compact JSON: 64 KiB, 64 levels of nesting.
pub const METADATA_VALUE_LIMITS: JsonLimits = JsonLimits { max_depth: 64, max_bytes: 64 * 1024 };

/// The largest a session's whole metadata may be: the sum over its entries of the key's length and
/// the value's compact JSON length, in bytes (256 KiB).
pub const MAX_METADATA_BYTES: usize = 256 * 1024;

/// Checks that `key` may be set to `value` in `current` (the session's metadata as it is): a
/// non-empty key of at most [`MAX_METADATA_KEY_LEN`] bytes without control characters, a value
/// within [`METADATA_VALUE_LIMITS`], and a map that stays within [`MAX_METADATA_BYTES`] once the
/// value replaces the key's old one. `Value::Null` (a removal) only needs a valid key.
///
/// # Errors
/// `metadata_key_invalid`, `json_too_deep`, `json_too_large` (the value), `metadata_too_large`
/// (the whole map).
pub fn check_metadata_entry(
    current: &BTreeMap<String, Value>,
    key: &str,
    value: &Value,
) -> Result<(), AgentError> {
    if key.is_empty() || key.len() > MAX_METADATA_KEY_LEN || key.chars().any(char::is_control) {
        return Err(AgentError::of(
            codes::METADATA_KEY_INVALID,
            format!(
                "a metadata key must be 1 to {MAX_METADATA_KEY_LEN} bytes without control characters, \
                 not {:?} ({} bytes)",
                key.chars().take(40).collect::<String>(),
                key.len()
            ),
        ));
    }
    if value.is_null() {
        return Ok(());
    }
    let limits = METADATA_VALUE_LIMITS;
    if crate::json::depth_exceeds(value, limits.max_depth) {
        return Err(AgentError::of(
            codes::JSON_TOO_DEEP,
            format!("the value of metadata key {key:?} nests deeper than {} levels", limits.max_depth),
        ));
    }
    let size = crate::json::compact_len(value, limits.max_bytes).ok_or_else(|| {
        AgentError::of(
            codes::JSON_TOO_LARGE,
            format!("the value of metadata key {key:?} is larger than {} bytes of JSON", limits.max_bytes),
        )
    })?;
    let mut total = key.len() + size;
    for (k, v) in current {
        if k != key {
            // Values already stored passed these limits: their size is known to be bounded.
            total += k.len() + crate::json::compact_len(v, usize::MAX).unwrap_or(usize::MAX / 2);
        }
    }
    if total > MAX_METADATA_BYTES {
        return Err(AgentError::of(
            codes::METADATA_TOO_LARGE,
            format!(
                "setting metadata key {key:?} would make the session's metadata {total} bytes, over the \
                 limit of {MAX_METADATA_BYTES}; remove keys (set them to null) to make room"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_checked_before_values() {
        let empty = BTreeMap::new();
        for key in ["", "a\u{0}b", "tab\there", "\u{7f}"] {
            let e = check_metadata_entry(&empty, key, &json!(1)).unwrap_err();
            assert_eq!(e.code, codes::METADATA_KEY_INVALID, "{key:?}");
        }
        for key in ["userId", "用户", "a.b/c d", &"k".repeat(MAX_METADATA_KEY_LEN)] {
            check_metadata_entry(&empty, key, &Value::Null).unwrap();
            check_metadata_entry(&empty, key, &json!({"x": [1, 2]})).unwrap();
        }
    }

    /// A string value whose compact JSON is `len` bytes.
    fn sized(len: usize) -> Value {
        json!("v".repeat(len - 2))
    }

    #[test]
    fn the_total_counts_keys_and_values_and_a_replaced_value_once() {
        // Four entries of 1 + 60000 bytes, then room for exactly one more key of 1 byte.
        let mut current: BTreeMap<String, Value> =
            ["a", "b", "c", "d"].iter().map(|k| (k.to_string(), sized(60_000))).collect();
        let room = MAX_METADATA_BYTES - 4 * 60_001 - 1;
        let e = check_metadata_entry(&current, "e", &sized(room + 1)).unwrap_err();
        assert_eq!(e.code, codes::METADATA_TOO_LARGE);
        check_metadata_entry(&current, "e", &sized(room)).unwrap();
        current.insert("e".into(), sized(room));
        // Full to the byte: replacing a value counts the new one instead of the old one.
        check_metadata_entry(&current, "a", &sized(60_000)).unwrap();
        let e = check_metadata_entry(&current, "a", &sized(60_001)).unwrap_err();
        assert_eq!(e.code, codes::METADATA_TOO_LARGE);
        // A removal always passes (it only makes room).
        check_metadata_entry(&current, "zz", &Value::Null).unwrap();
    }

    #[test]
    fn one_value_is_bounded_in_size_and_depth() {
        let empty = BTreeMap::new();
        check_metadata_entry(&empty, "k", &sized(METADATA_VALUE_LIMITS.max_bytes)).unwrap();
        let e = check_metadata_entry(&empty, "k", &sized(METADATA_VALUE_LIMITS.max_bytes + 1)).unwrap_err();
        assert_eq!(e.code, codes::JSON_TOO_LARGE);
        let nest = |levels: usize| (1..levels).fold(json!([]), |v, _| json!([v]));
        check_metadata_entry(&empty, "k", &nest(METADATA_VALUE_LIMITS.max_depth)).unwrap();
        let e = check_metadata_entry(&empty, "k", &nest(METADATA_VALUE_LIMITS.max_depth + 1)).unwrap_err();
        assert_eq!(e.code, codes::JSON_TOO_DEEP);
    }
}
