//! Fuzz target `state_load`: the check is in fuzz/checks/state_load.rs, shared with the regression replay
//! (tests/fuzz_regressions.rs).
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::state_load::run(data));
