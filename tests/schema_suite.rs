//! The JSON-Schema-Test-Suite (tests/fixtures/json-schema-test-suite, both drafts) as data: every
//! group whose schema uses only whitelisted keywords must agree with every upstream verdict, on
//! both validation paths (walking a value, and validating while parsing) and in both modes; every
//! other group must be refused at compile time as `schema_unsupported_keyword` naming a keyword it
//! really uses.
//!
//! Which keywords a schema uses is found here by a small independent scan, and cross-checked
//! against the manifest's classes (SUBSET, TYPE_ARRAY, BOOLEAN_SUBSCHEMA must be supported;
//! ITEMS_ARRAY_FORM must not).

use arkagent::json::JsonLimits;
use arkagent::schema::{CompiledSchema, SchemaOptions, ValidationMode, SUPPORTED_KEYWORDS};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/json-schema-test-suite");

/// Keywords a schema uses that are outside the whitelist (`items` in array form counts as one).
fn unsupported(schema: &Value, root: bool, out: &mut BTreeSet<String>) {
    let Value::Object(map) = schema else { return };
    for (k, v) in map {
        if root && k == "$schema" {
            continue;
        }
        if !SUPPORTED_KEYWORDS.contains(&k.as_str()) {
            out.insert(k.clone());
            continue;
        }
        match (k.as_str(), v) {
            ("properties", Value::Object(props)) => props.values().for_each(|s| unsupported(s, false, out)),
            ("items", Value::Array(_)) => {
                out.insert("items".into());
            }
            ("items" | "additionalProperties", s) => unsupported(s, false, out),
            ("anyOf", Value::Array(alts)) => alts.iter().for_each(|s| unsupported(s, false, out)),
            _ => {}
        }
    }
}

fn manifest_class(manifest: &Value, file: &str, group: usize) -> Option<String> {
    let detail = manifest["files"].get(file)?.get("group_detail")?.as_array()?;
    detail.iter().find(|g| g["group_index"] == group).map(|g| g["class"].as_str().unwrap().to_string())
}

#[test]
fn suite_agrees_on_every_supported_group_and_refuses_the_rest() {
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(Path::new(DIR).join("SUBSET-MANIFEST.json")).unwrap())
            .unwrap();
    let any_root = SchemaOptions { tool_root: false, ..SchemaOptions::default() };
    let limits = JsonLimits::default();
    let (mut supported_groups, mut refused_groups, mut cases) = (0, 0, 0);
    let mut disagreements = Vec::new();

    for draft in ["draft2020-12", "draft7"] {
        let mut files: Vec<_> =
            fs::read_dir(Path::new(DIR).join(draft)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for file in files {
            let rel = format!("{draft}/{}", file.file_name().unwrap().to_str().unwrap());
            let groups: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
            for (gi, group) in groups.as_array().unwrap().iter().enumerate() {
                let schema = &group["schema"];
                let mut bad = BTreeSet::new();
                unsupported(schema, true, &mut bad);
                match manifest_class(&manifest, &rel, gi).as_deref() {
                    Some("SUBSET" | "TYPE_ARRAY") => assert!(bad.is_empty(), "{rel}#{gi}: {bad:?}"),
                    // draft7 items#4 (`"items": [true, false]`) is classed boolean but is the tuple form.
                    Some("BOOLEAN_SUBSCHEMA") => {
                        assert!(bad.is_empty() || schema["items"].is_array(), "{rel}#{gi}: {bad:?}")
                    }
                    Some("ITEMS_ARRAY_FORM") => assert!(bad.contains("items"), "{rel}#{gi}"),
                    _ => {}
                }
                let compiled = CompiledSchema::compile_with(schema, &any_root);
                if !bad.is_empty() {
                    let e = compiled.expect_err(&format!("{rel}#{gi} uses {bad:?} and must be refused"));
                    assert_eq!(e.code, "schema_unsupported_keyword", "{rel}#{gi}: {e}");
                    assert!(
                        bad.iter().any(|k| e.message.contains(&format!("keyword: {k}"))),
                        "{rel}#{gi}: {e}"
                    );
                    refused_groups += 1;
                    continue;
                }
                let first = compiled.unwrap_or_else(|e| panic!("{rel}#{gi}: {e}"));
                let all = first.with_mode(ValidationMode::AllErrors);
                supported_groups += 1;
                for test in group["tests"].as_array().unwrap() {
                    let data = &test["data"];
                    let valid = test["valid"].as_bool().unwrap();
                    let text = serde_json::to_string(data).unwrap();
                    let verdicts = [
                        first.validate(data).is_ok(),
                        all.validate(data).is_ok(),
                        all.validate_all(data).is_empty(),
                        first.parse_value_and_validate(&text, &limits).is_ok(),
                        all.parse_value_and_validate(&text, &limits).is_ok(),
                    ];
                    if verdicts.iter().any(|&v| v != valid) {
                        disagreements.push(format!(
                            "{rel}#{gi} {:?} / {:?}: want {valid}, got {verdicts:?}",
                            group["description"], test["description"]
                        ));
                    }
                    // A failing value fails with a tool_argument_* code, never a decode error.
                    if !valid {
                        let e = first.parse_value_and_validate(&text, &limits).unwrap_err();
                        assert!(e.code.starts_with("tool_argument"), "{rel}#{gi}: {e}");
                    }
                    cases += 1;
                }
            }
        }
    }
    assert!(disagreements.is_empty(), "{} disagreements:\n{}", disagreements.len(), disagreements.join("\n"));
    eprintln!("supported groups {supported_groups}, refused groups {refused_groups}, test cases {cases}");
    // Guards against a vacuous pass (numbers from the fixture files as copied).
    assert_eq!((supported_groups, refused_groups, cases), (SUPPORTED_GROUPS, REFUSED_GROUPS, CASES));
}

const SUPPORTED_GROUPS: usize = 132;
const REFUSED_GROUPS: usize = 22;
const CASES: usize = 523;
