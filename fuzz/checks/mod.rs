//! The checks behind the fuzz targets, one module per target. Each `run(data)` panics on a
//! finding. Shared by the cargo-fuzz targets (fuzz/fuzz_targets) and the replay of kept findings
//! (tests/fuzz_regressions.rs), which includes this file by path, so a regression input is checked
//! exactly as the fuzzer checked it.
#![allow(dead_code)]

pub mod args_validate;
pub mod jcs;
pub mod schema_compile;
pub mod sse_assembly;
pub mod state_load;
