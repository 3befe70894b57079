//! Fuzz target `sse_assembly`: the check is in fuzz/checks/sse_assembly.rs, shared with the regression replay
//! (tests/fuzz_regressions.rs).
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::sse_assembly::run(data));
