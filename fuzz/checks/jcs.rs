//! Arbitrary JSON -> `canonicalize`: the canonical text parses back, and canonicalizing it again
//! changes nothing (idempotence), also through `canonicalize_str`.
use arkagent::json::{canonicalize, canonicalize_str, JsonLimits};
use serde_json::Value;

/// Checks one input; panics on a finding.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(value) = serde_json::from_str::<Value>(text) else { return };
    let once = canonicalize(&value);
    let back: Value = serde_json::from_str(&once).unwrap_or_else(|e| panic!("{once:?} does not parse: {e}"));
    let twice = canonicalize(&back);
    assert_eq!(once, twice, "not idempotent for {text:?}");
    let limits = JsonLimits { max_depth: 128, max_bytes: usize::MAX };
    match canonicalize_str(text, &limits) {
        Ok(s) => assert_eq!(s, once),
        Err(e) => assert!(e.code == "json_too_deep", "{e} for {text:?}"),
    }
}
