//! Fuzz target `jcs`: the check is in fuzz/checks/jcs.rs, shared with the regression replay
//! (tests/fuzz_regressions.rs).
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::jcs::run(data));
