//! Replays the inputs the fuzzers found (tests/fixtures/fuzz-regressions/<target>/*) through the
//! very checks the fuzz targets run (fuzz/checks, included by path), plus the fixture seeds the
//! corpora start from. A finding that comes back fails here under a plain `cargo test`.
//!
//! See docs/fuzzing.md for the targets and how to run them (`scripts/fuzz.sh`).

#[path = "../fuzz/checks/mod.rs"]
mod checks;

use std::path::Path;

/// A target's check: panics on a finding.
type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 5] = [
    ("schema_compile", checks::schema_compile::run),
    ("args_validate", checks::args_validate::run),
    ("sse_assembly", checks::sse_assembly::run),
    ("state_load", checks::state_load::run),
    ("jcs", checks::jcs::run),
];

fn replay_dir(target: &str, check: Check) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz-regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
    let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    for path in &files {
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let data = std::fs::read(path).unwrap();
        let result = std::panic::catch_unwind(|| check(&data));
        assert!(result.is_ok(), "{target}: {} fails again", path.display());
    }
    files.len()
}

#[test]
fn every_kept_finding_passes_its_check() {
    let mut total = 0;
    for (target, check) in TARGETS {
        total += replay_dir(target, check);
    }
    println!("replayed {total} kept fuzz findings");
}

#[test]
fn the_checks_accept_the_fixture_seeds() {
    // The same kinds of seeds the corpora start from, so that the checks themselves are exercised
    // (and cannot silently reject everything) even when no finding is kept.
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for entry in std::fs::read_dir(fx.join("sse")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "sse") {
            let mut data = vec![7u8];
            data.extend(std::fs::read(&path).unwrap());
            checks::sse_assembly::run(&data);
        }
    }
    for entry in std::fs::read_dir(fx.join("jcs/input")).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        checks::jcs::run(&data);
        checks::args_validate::run(&data);
    }
    let snapshot =
        std::fs::read(fx.join("state/v2-files/order-1/snapshot-00000000000000000001.ark")).unwrap();
    let journal = std::fs::read(fx.join("state/v2-files/order-1/journal-00000000000000000001.ark")).unwrap();
    let mut data = vec![0u8];
    data.extend((snapshot.len() as u16).to_le_bytes());
    data.extend(&snapshot);
    data.extend(&journal);
    checks::state_load::run(&data);
    checks::schema_compile::run(
        br#"[{"type":"object","properties":{"a":{"type":"integer","minimum":2}}},{"a":1},{"a":3}]"#,
    );
}
