//! Fuzz target `schema_compile`: the check is in fuzz/checks/schema_compile.rs, shared with the regression replay
//! (tests/fuzz_regressions.rs).
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::schema_compile::run(data));
