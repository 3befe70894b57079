//! Installs the crate's process logger ([`crate::logging`]) when the module loads: hilog on OHOS
//! (tag `arkagent`), stderr elsewhere, every line passed through the redactor (the Agent class
//! registers each API key as a secret). The level is `warn` unless the environment variable
//! `ARKAGENT_LOG` names another (`error`, `warn`, `info`, `debug`, `trace`, `off`).

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
