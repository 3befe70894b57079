//! A logger that keeps every line a test binary logs, as formatted (before any redaction: this is
//! not the crate's logger), for tests that assert what was logged, or was not, and how often. It is
//! the process logger: a binary that uses it installs no other.
#![allow(dead_code)]

use std::sync::{Mutex, OnceLock};

/// Every line logged since the binary started, as `LEVEL target: message`.
pub struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!("{} {}: {}", record.level(), record.target(), record.args());
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    fn flush(&self) {}
}

impl Capture {
    /// Every line logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The lines logged so far that contain every one of `parts`.
    pub fn lines_with(&self, parts: &[&str]) -> Vec<String> {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().filter(|l| parts.iter().all(|p| l.contains(p))).cloned().collect()
    }
}

/// The capture, installed as the process logger (level `Trace`) on first use.
pub fn capture() -> &'static Capture {
    static C: OnceLock<&'static Capture> = OnceLock::new();
    C.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Trace);
        c
    })
}
