//! Installs the crate's process logger ([`crate::logging`]) when the module loads: hilog on OHOS
//! (tag `arkagent`), stderr elsewhere, every line passed through the redactor (the Agent class
//! registers each API key as a secret). The level is `warn` unless the environment variable
//! `ARKAGENT_LOG` names another (`error`, `warn`, `info`, `debug`, `trace`, `off`). Panic reports
//! that would carry a secret go through the logger too (`install_panic_hook`).

use crate::logging::{init as init_logger, InitOutcome, LogConfig};
use log::LevelFilter;

/// The level kept by default: warnings and errors.
const DEFAULT_LEVEL: LevelFilter = LevelFilter::Warn;

/// Installs the logger (a no-op when another logger is already installed).
pub(crate) fn init() {
    let level = std::env::var("ARKAGENT_LOG").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_LEVEL);
    match init_logger(LogConfig { level, ..LogConfig::default() }) {
        Ok(InitOutcome::OtherLoggerActive) => {
            log::warn!("arkagent: another logger is installed; API keys are not redacted from it")
        }
        Ok(_) => {}
        Err(e) => eprintln!("arkagent: the logger could not be installed: {e}"),
    }
}

/// Keeps the API key out of the report of a panic: the process's panic hook prints a panic's
/// message to stderr as it is, and a panic's message may hold anything it formatted. A panic whose
/// message holds a registered secret is reported through the logger instead (redacted, at level
/// `error`); any other goes to the hook that was installed before (the default one, with its
/// backtrace), as it did.
pub(crate) fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| match crate::logging::panic_text(info.payload()) {
        Some(std::borrow::Cow::Owned(redacted)) => {
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            let thread = std::thread::current();
            let thread = thread.name().unwrap_or("<unnamed>");
            log::error!("arkagent: thread '{thread}' panicked{at}: {redacted}");
        }
        _ => previous(info),
    }));
}
