//! Where the crate's `log` records go: hilog on OHOS (tag `arkagent`), stderr elsewhere. The core
//! only uses the `log` facade; the binding installs the backend once, when the module loads.

/// The level kept by default: warnings and errors.
const LEVEL: log::LevelFilter = log::LevelFilter::Warn;

/// Installs the backend (a no-op when another logger is already installed).
pub(crate) fn init() {
    #[cfg(target_env = "ohos")]
    ohos_hilog_binding::log::init_once(
        ohos_hilog_binding::log::Config::default().with_max_level(LEVEL).with_tag("arkagent"),
    );
    #[cfg(not(target_env = "ohos"))]
    if log::set_logger(&StderrLogger).is_ok() {
        log::set_max_level(LEVEL);
    }
}

/// Writes records to stderr (host builds: Node tests, the benchmark).
#[cfg(not(target_env = "ohos"))]
struct StderrLogger;

#[cfg(not(target_env = "ohos"))]
impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= LEVEL
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("[{} {}] {}", record.level(), record.target(), record.args());
        }
    }

    fn flush(&self) {}
}
