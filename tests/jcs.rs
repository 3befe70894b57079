//! RFC 8785 (JCS) conformance over the vectors of the RFC author's repository
//! (tests/fixtures/jcs): the six input/output pairs byte for byte, and the 10,000 ECMAScript number
//! formatting lines.

use arkagent::json::{canonicalize, canonicalize_str, format_number, JsonLimits};
use std::fs;
use std::path::Path;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jcs");

#[test]
fn every_input_canonicalizes_to_its_expected_bytes() {
    let mut seen = 0;
    let mut names: Vec<_> =
        fs::read_dir(Path::new(DIR).join("input")).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for input in names {
        let name = input.file_name().unwrap().to_owned();
        let text = fs::read_to_string(&input).unwrap();
        let expected = fs::read(Path::new(DIR).join("output").join(&name)).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(canonicalize(&value).as_bytes(), &expected[..], "{name:?}");
        // The text entry point gives the same bytes.
        assert_eq!(canonicalize_str(&text, &JsonLimits::default()).unwrap().as_bytes(), &expected[..]);
        // And the outhex copy agrees with the output file.
        let hex = fs::read_to_string(
            Path::new(DIR).join("outhex").join(name.to_str().unwrap().replace(".json", ".txt")),
        )
        .unwrap();
        let bytes: Vec<u8> = hex.split_whitespace().map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(bytes, expected);
        seen += 1;
    }
    assert_eq!(seen, 6);
}

#[test]
fn es6_number_formatting_matches_all_10000_lines() {
    let text = fs::read_to_string(Path::new(DIR).join("es6-numbers-10000.txt")).unwrap();
    let mut count = 0;
    let mut failures = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (hex, expected) = line.split_once(',').unwrap();
        let x = f64::from_bits(u64::from_str_radix(hex, 16).unwrap());
        let got = format_number(x).unwrap();
        if got != expected {
            failures.push(format!("{hex}: got {got}, want {expected}"));
        }
        // Through a Value too (what canonicalize sees after parsing the expected text).
        let v: serde_json::Value = serde_json::from_str(expected).unwrap();
        assert_eq!(canonicalize(&v), expected, "{hex}");
        count += 1;
    }
    assert_eq!(count, 10_000);
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

#[test]
fn canonical_form_ignores_key_order_and_whitespace() {
    let l = JsonLimits::default();
    let a = canonicalize_str(r#"{"b": [1, 2.0, {"y": null, "x": true}], "a": "\u00e9"}"#, &l).unwrap();
    let b = canonicalize_str("{\"a\":\"é\",\"b\":[1,2,{\"x\":true,\"y\":null}]}", &l).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, "{\"a\":\"é\",\"b\":[1,2,{\"x\":true,\"y\":null}]}");
}

#[test]
fn canonicalize_str_respects_the_limits() {
    let l = JsonLimits { max_depth: 2, max_bytes: 16 };
    assert_eq!(canonicalize_str("[[[]]]", &l).unwrap_err().code, "json_too_deep");
    assert_eq!(canonicalize_str("[\"0123456789abcdef\"]", &l).unwrap_err().code, "json_too_large");
    assert_eq!(canonicalize_str("{", &l).unwrap_err().code, "json_invalid");
}

#[test]
fn a_name_twice_in_an_object_is_refused() {
    // RFC 8785 canonicalizes I-JSON, which has no duplicate names: keeping one of them would give
    // two different texts the same canonical form.
    let l = JsonLimits::default();
    for text in [r#"{"a":1,"a":2}"#, r#"[{"x":{"b":true,"b":true}}]"#] {
        let e = canonicalize_str(text, &l).unwrap_err();
        assert_eq!(e.code, "json_invalid", "{text}: {e}");
        assert!(e.message.contains("appears twice"), "{e}");
    }
    assert_eq!(canonicalize_str(r#"{"a":{"a":1},"b":{"a":2}}"#, &l).unwrap(), r#"{"a":{"a":1},"b":{"a":2}}"#);
    // Plain parsing (tool arguments) keeps the last, as serde_json and JSON.parse do.
    assert_eq!(arkagent::json::parse_value(r#"{"a":1,"a":2}"#, &l).unwrap()["a"], 2);
}
