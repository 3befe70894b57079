//! The process logger end to end: `logging::init` installs the stderr backend once (later calls
//! update it), and the API key never reaches stderr. The logger is process-global, so the logging
//! happens in a child process (this test binary run again with `ARKAGENT_LOGGING_CHILD` set) whose
//! stderr the parent reads.

use arkagent::logging::{self, InitOutcome, LogConfig};
use log::LevelFilter;
use std::process::Command;

const KEY: &str = "sk-test-7f3a9c2e5b1d";
const LATER_KEY: &str = "sk-second-agent-key-42";

#[test]
fn child_logs_through_init() {
    if std::env::var_os("ARKAGENT_LOGGING_CHILD").is_none_or(|v| v != "ours") {
        return; // only meaningful inside the child started below
    }
    // Before the logger is installed there is nothing to redact with.
    assert_eq!(logging::redact_secrets(&format!("x {KEY}")), format!("x {KEY}"));
    let first = logging::init(LogConfig {
        level: LevelFilter::Info,
        secrets: vec![KEY.into()],
        ..LogConfig::default()
    });
    assert_eq!(first.unwrap(), InitOutcome::Installed);
    assert_eq!(logging::redact_secrets(&format!("failed with {KEY}!")), "failed with [REDACTED]!");
    assert_eq!(logging::redact_secrets("clean"), "clean");
    log::info!("request with Authorization: Bearer {KEY}");
    log::debug!("debug line not written at Info");
    let again = logging::init(LogConfig {
        level: LevelFilter::Debug,
        secrets: vec![LATER_KEY.into()],
        ..LogConfig::default()
    });
    assert_eq!(again.unwrap(), InitOutcome::Updated);
    log::debug!("second key {LATER_KEY} and first key {KEY}");
    let registered = logging::register_secret("registered-later");
    log::warn!("registered-later must not show");
    assert_eq!(logging::redact_secrets("a registered-later b"), "a [REDACTED] b");
    // A "secret" too short to be a key is kept out of log lines only, not out of other text.
    let _short = logging::register_secret("k");
    assert_eq!(logging::redact_secrets("unknown key"), "unknown key");
    // Once its registration is dropped, a secret is no longer looked for.
    let twice = logging::register_secret("registered-later");
    drop(registered);
    assert_eq!(logging::redact_secrets("a registered-later b"), "a [REDACTED] b", "one holder left");
    drop(twice);
    assert_eq!(logging::redact_secrets("a registered-later b"), "a registered-later b");
    let bad = logging::init(LogConfig { domain: 0x2_0000, ..LogConfig::default() });
    assert_eq!(bad.unwrap_err().code, arkagent::codes::CONFIG_INVALID);
}

#[test]
fn stderr_backend_redacts_and_init_is_idempotent() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_logs_through_init", "--nocapture", "--test-threads=1"])
        .env("ARKAGENT_LOGGING_CHILD", "ours")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("[arkagent ")).collect();
    assert_eq!(
        lines,
        vec![
            "[arkagent INFO ] logging_init: request with Authorization: Bearer [REDACTED]",
            "[arkagent DEBUG] logging_init: second key [REDACTED] and first key [REDACTED]",
            "[arkagent WARN ] logging_init: [REDACTED] must not show",
        ],
        "stderr was:\n{stderr}"
    );
    for secret in [KEY, LATER_KEY, "registered-later"] {
        assert!(!stderr.contains(secret), "{secret} leaked:\n{stderr}");
    }
}

struct OtherLogger;

impl log::Log for OtherLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        eprintln!("other: {}", record.args());
    }
    fn flush(&self) {}
}

#[test]
fn child_with_another_logger() {
    if std::env::var_os("ARKAGENT_LOGGING_CHILD").is_none_or(|v| v != "other") {
        return; // only meaningful inside the child started below
    }
    log::set_logger(&OtherLogger).unwrap();
    log::set_max_level(LevelFilter::Info);
    for _ in 0..2 {
        let outcome = logging::init(LogConfig { secrets: vec![KEY.into()], ..LogConfig::default() });
        assert_eq!(outcome.unwrap(), InitOutcome::OtherLoggerActive);
    }
    log::info!("still the other logger");
}

#[test]
fn init_reports_another_logger_and_leaves_it_in_place() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_with_another_logger", "--nocapture", "--test-threads=1"])
        .env("ARKAGENT_LOGGING_CHILD", "other")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains("other: still the other logger"), "{stderr}");
    assert!(!stderr.contains("[arkagent "), "{stderr}");
}
