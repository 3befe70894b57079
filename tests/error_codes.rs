//! The one table of error codes (`arkagent::error::codes`) also lists the codes the ArkTS bindings
//! raise themselves (`JsonError`, `ArkAgentError`): an app matches on one set of codes, whichever
//! side of the boundary an error comes from.

use arkagent::error::codes;
use std::path::Path;

fn ets_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            ets_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "ets") {
            out.push(path);
        }
    }
}

/// The first argument of every `new <class>('<code>'` in `text`.
fn codes_raised(text: &str, class: &str) -> Vec<String> {
    let needle = format!("new {class}('");
    text.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &text[at + needle.len()..];
            rest[..rest.find('\'').unwrap()].to_string()
        })
        .collect()
}

#[test]
fn every_code_the_arkts_bindings_raise_is_in_the_table() {
    let mut files = Vec::new();
    ets_files(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/arkts-bindings/src/main/ets")), &mut files);
    assert!(files.len() > 5, "the bindings' sources: {files:?}");
    let mut raised = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for class in ["JsonError", "ArkAgentError"] {
            raised.extend(codes_raised(&text, class).into_iter().map(|c| (c, file.clone())));
        }
    }
    assert!(raised.len() >= 10, "the scan finds the bindings' errors: {raised:?}");
    for (code, file) in &raised {
        assert!(
            codes::ALL.iter().any(|(c, _)| c == code),
            "{} raises `{code}`, which is not in arkagent::error::codes",
            file.display()
        );
    }
}
