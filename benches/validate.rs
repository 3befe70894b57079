//! Parse + validate tool-call arguments, starting from the JSON text as the model sends it.
//!
//! For a typical small argument object and a large nested one (> 10 KB), in one run:
//! (a) serde_json parse into a `Value` alone, (b) our `parse_and_validate` (one pass), (c)
//! serde_json parse + the `jsonschema` crate's validator for the same schema, compiled once.
//! Targets: b/a <= 1.05 and b/c <= 0.8.
//!
//! Also a plain unanchored `pattern` on a long string it does not match (`pattern_no_match`).
//!
//! Run: `cargo bench --bench validate` (`VALIDATE_BENCH_QUICK=1` runs only the interleaved part,
//! `VALIDATE_BENCH_PATTERN=1` only the pattern row). After criterion's own report, the bench prints the ratios
//! from criterion's estimates, and a second, interleaved measurement (a, b, c alternating in short
//! rounds, median of the per-round ratios) that is less sensitive to a noisy shared machine.

use arkagent::json::JsonLimits;
use arkagent::schema::CompiledSchema;
use criterion::Criterion;
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn small_schema() -> Value {
    json!({
        "type": "object",
        "description": "Create an order for the bakery",
        "properties": {
            "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$", "description": "Order id"},
            "product": {"type": "string", "minLength": 1, "maxLength": 64},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
            "express": {"type": "boolean"},
            "status": {"type": "string", "enum": ["pending", "paid", "shipped"]},
            "note": {"type": ["string", "null"], "maxLength": 200},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10}
        },
        "required": ["order_id", "product", "quantity"],
        "additionalProperties": false
    })
}

fn small_args() -> String {
    r#"{"order_id": "ORD-004217", "product": "法棍 baguette", "quantity": 3, "express": true, "status": "pending", "note": "leave at the door, ring twice", "tags": ["gift", "fragile"]}"#
        .to_string()
}

fn large_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "batch_id": {"type": "string"},
            "orders": {
                "type": "array",
                "maxItems": 500,
                "items": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
                        "customer": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "maxLength": 100},
                                "phone": {"type": "string"},
                                "address": {
                                    "type": "object",
                                    "properties": {
                                        "city": {"type": "string"},
                                        "street": {"type": "string"},
                                        "zip": {"type": "string"}
                                    },
                                    "required": ["city", "street"],
                                    "additionalProperties": false
                                }
                            },
                            "required": ["name", "address"]
                        },
                        "lines": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "sku": {"type": "string"},
                                    "quantity": {"type": "integer", "minimum": 1},
                                    "unit_price": {"type": "number", "exclusiveMinimum": 0},
                                    "options": {"type": "array", "items": {"type": "string"}}
                                },
                                "required": ["sku", "quantity", "unit_price"],
                                "additionalProperties": false
                            }
                        },
                        "status": {"type": "string", "enum": ["pending", "paid", "shipped", "delivered"]},
                        "express": {"type": "boolean"},
                        "note": {"type": ["string", "null"]}
                    },
                    "required": ["order_id", "customer", "lines", "status"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["batch_id", "orders"]
    })
}

fn large_args() -> String {
    let statuses = ["pending", "paid", "shipped", "delivered"];
    let orders: Vec<Value> = (0..60)
        .map(|i| {
            json!({
                "order_id": format!("ORD-{:06}", 1000 + i),
                "customer": {
                    "name": format!("Customer {i} 王小明"),
                    "phone": format!("+86 138 0000 {:04}", i),
                    "address": {"city": "Shenzhen", "street": format!("{} Keyuan Road, Nanshan", i + 1), "zip": "518057"}
                },
                "lines": (0..3).map(|j| json!({
                    "sku": format!("BRD-{:04}", i * 3 + j),
                    "quantity": 1 + (i + j) % 5,
                    "unit_price": 12.5 + j as f64 * 3.25,
                    "options": ["sliced", "no sugar"]
                })).collect::<Vec<_>>(),
                "status": statuses[i % 4],
                "express": i % 2 == 0,
                "note": if i % 3 == 0 { Value::Null } else { json!("please call before delivery") }
            })
        })
        .collect();
    serde_json::to_string_pretty(&json!({"batch_id": "B-2026-11-30", "orders": orders})).unwrap()
}

struct Case {
    name: &'static str,
    text: String,
    ours: CompiledSchema,
    /// The schema `true`: our parser alone, for the breakdown.
    parse_only: CompiledSchema,
    theirs: jsonschema::Validator,
}

fn cases() -> Vec<Case> {
    let limits = JsonLimits::default();
    [("small", small_schema(), small_args()), ("large", large_schema(), large_args())]
        .into_iter()
        .map(|(name, schema, text)| {
            let ours = CompiledSchema::compile(&schema).expect("our schema compiles");
            let theirs = jsonschema::validator_for(&schema).expect("jsonschema compiles");
            // Same verdict on the benchmark input, and both reject a broken copy.
            let parsed: Value = serde_json::from_str(&text).unwrap();
            assert!(ours.parse_and_validate(&text, &limits).is_ok());
            assert!(theirs.is_valid(&parsed));
            let broken = text.replacen("\"ORD-", "\"ORDX-", 1);
            assert!(ours.parse_and_validate(&broken, &limits).is_err());
            assert!(!theirs.is_valid(&serde_json::from_str(&broken).unwrap()));
            let parse_only = CompiledSchema::compile_with(
                &Value::Bool(true),
                &arkagent::schema::SchemaOptions { tool_root: false, ..Default::default() },
            )
            .unwrap();
            Case { name, text, ours, parse_only, theirs }
        })
        .collect()
}

fn a(case: &Case) -> bool {
    serde_json::from_str::<Value>(black_box(&case.text)).is_ok()
}

fn b(case: &Case, limits: &JsonLimits) -> bool {
    case.ours.parse_and_validate(black_box(&case.text), limits).is_ok()
}

fn p(case: &Case, limits: &JsonLimits) -> bool {
    case.parse_only.parse_value_and_validate(black_box(&case.text), limits).is_ok()
}

fn c(case: &Case) -> bool {
    let v: Value = serde_json::from_str(black_box(&case.text)).unwrap();
    case.theirs.is_valid(&v)
}

fn criterion_run(c_: &mut Criterion, cases: &[Case]) {
    let limits = JsonLimits::default();
    for case in cases {
        let mut g = c_.benchmark_group(format!("validate_{}", case.name));
        g.bench_function("a_serde_parse", |bn| bn.iter(|| a(case)));
        g.bench_function("b_ours_parse_and_validate", |bn| bn.iter(|| b(case, &limits)));
        g.bench_function("c_serde_parse_plus_jsonschema", |bn| bn.iter(|| c(case)));
        g.bench_function("p_ours_parse_only", |bn| bn.iter(|| p(case, &limits)));
        g.finish();
    }
}

/// A plain unanchored `pattern` on a long string it does not match (`[a-z]+@` on 20,000 `a`s):
/// the search tries every start; each used to scan the rest of the run again (quadratic).
fn criterion_pattern(c_: &mut Criterion) {
    let schema = json!({"type": "object", "properties": {"email": {"type": "string", "pattern": "[a-z]+@"}}});
    let ours = CompiledSchema::compile(&schema).unwrap();
    let text = json!({"email": "a".repeat(20_000)}).to_string();
    let limits = JsonLimits::default();
    let mut g = c_.benchmark_group("pattern_no_match");
    g.bench_function("unanchored_20000_chars", |bn| {
        bn.iter(|| ours.parse_and_validate(black_box(&text), &limits).is_err())
    });
    g.finish();
}

fn estimate_ns(group: &str, name: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{dir}/criterion/{group}/{name}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn time_round(iters: u32, mut f: impl FnMut() -> bool) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    start.elapsed().as_nanos() as f64 / f64::from(iters)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    v[v.len() / 2]
}

fn interleaved(cases: &[Case]) {
    let limits = JsonLimits::default();
    println!("\ninterleaved rounds (median over rounds; each round runs a, b, c back to back):");
    for case in cases {
        let iters = if case.name == "small" { 2000 } else { 40 };
        let (mut ta, mut tb, mut tc, mut tp, mut ba, mut bc) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let deadline = Instant::now() + Duration::from_secs(6);
        while Instant::now() < deadline {
            let x = time_round(iters, || a(case));
            let y = time_round(iters, || b(case, &limits));
            let z = time_round(iters, || c(case));
            tp.push(time_round(iters, || p(case, &limits)));
            ta.push(x);
            tb.push(y);
            tc.push(z);
            ba.push(y / x);
            bc.push(y / z);
        }
        println!(
            "  {:5} ({} bytes, {} rounds): a {:.0} ns, b {:.0} ns, c {:.0} ns (our parser alone {:.0} ns) | b/a {:.3}, b/c {:.3}",
            case.name,
            case.text.len(),
            ta.len(),
            median(ta),
            median(tb),
            median(tc),
            median(tp),
            median(ba),
            median(bc)
        );
    }
}

fn main() {
    let cases = cases();
    if let Ok(which) = std::env::var("VALIDATE_BENCH_PROFILE") {
        // Profiling aid: loop one variant ("a", "b", "c" or "p") on one case for five seconds or
        // VALIDATE_BENCH_ROUNDS x 100 runs (for `perf stat`).
        let limits = JsonLimits::default();
        let (variant, name) = which.split_once(':').unwrap_or((&which, "large"));
        let case = cases.iter().find(|c| c.name == name).expect("small or large");
        let rounds: u64 =
            std::env::var("VALIDATE_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(u64::MAX);
        let deadline = Instant::now() + Duration::from_secs(5);
        for _ in 0..rounds {
            if Instant::now() > deadline {
                break;
            }
            for _ in 0..100 {
                black_box(match variant {
                    "a" => a(case),
                    "b" => b(case, &limits),
                    "c" => c(case),
                    _ => p(case, &limits),
                });
            }
        }
        return;
    }
    if std::env::var_os("VALIDATE_BENCH_PATTERN").is_some() {
        // Only the pattern row (BENCHMARKS.md, "Unanchored patterns").
        let mut crit = Criterion::default().configure_from_args();
        criterion_pattern(&mut crit);
        crit.final_summary();
        return;
    }
    if std::env::var_os("VALIDATE_BENCH_QUICK").is_some() {
        // Development shortcut: only the interleaved measurement.
        interleaved(&cases);
        return;
    }
    let mut crit = Criterion::default().configure_from_args();
    criterion_run(&mut crit, &cases);
    criterion_pattern(&mut crit);
    crit.final_summary();
    println!("\nratios from criterion's medians:");
    for case in &cases {
        let g = format!("validate_{}", case.name);
        let (Some(ea), Some(eb), Some(ec)) = (
            estimate_ns(&g, "a_serde_parse"),
            estimate_ns(&g, "b_ours_parse_and_validate"),
            estimate_ns(&g, "c_serde_parse_plus_jsonschema"),
        ) else {
            println!("  {}: estimates not found (run from the crate root)", case.name);
            continue;
        };
        println!(
            "  {:5} ({} bytes): a {:.0} ns, b {:.0} ns, c {:.0} ns | b/a {:.3} (target <= 1.05), b/c {:.3} (target <= 0.8)",
            case.name,
            case.text.len(),
            ea,
            eb,
            ec,
            eb / ea,
            eb / ec
        );
    }
    if std::env::args().all(|a| a != "--list") {
        interleaved(&cases);
    }
}
