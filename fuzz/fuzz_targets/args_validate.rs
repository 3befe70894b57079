//! Fuzz target `args_validate`: the check is in fuzz/checks/args_validate.rs, shared with the regression replay
//! (tests/fuzz_regressions.rs).
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::args_validate::run(data));
