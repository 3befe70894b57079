//! Loading the SSE recordings of tests/fixtures/sse (shared by the recording, fault and bench code).
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The fixture directory.
pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse")
}

/// The parsed MANIFEST.json.
pub fn manifest() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("MANIFEST.json")).expect("MANIFEST.json");
    serde_json::from_str(&text).expect("manifest JSON")
}

/// A recording as an SSE body: `.sse` files as recorded, `.jsonl` files framed as
/// `data: <line>\n\n` (no `[DONE]`, as recorded).
pub fn sse_body(file: &str) -> Vec<u8> {
    let raw = std::fs::read(fixture_dir().join(file)).expect("recording");
    if file.ends_with(".jsonl") {
        let text = String::from_utf8(raw).expect("utf-8 jsonl");
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("data: {l}\n\n"))
            .collect::<String>()
            .into_bytes()
    } else {
        raw
    }
}

/// Every streaming entry of the manifest.
pub fn streaming_entries() -> Vec<Value> {
    manifest()["streaming"].as_array().expect("streaming list").clone()
}
