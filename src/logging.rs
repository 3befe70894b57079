//! Logging: the crate logs through the `log` facade; this module owns the process logger behind it.
//! On HarmonyOS (`target_env = "ohos"`) lines go to hilog with a configurable domain and tag; on
//! every other target they go to stderr. Every line passes through a [`Redactor`] first, so a
//! registered secret (the API key) is never written, whatever code formatted it.
//!
//! [`init`] is idempotent: the first call installs the logger, later calls only update the level and
//! add secrets (the domain and tag are fixed for the process, as hilog wants).

use crate::error::{codes, AgentError};
use log::{LevelFilter, Log, Metadata, Record};
use std::borrow::Cow;
use std::io::Write as _;
use std::sync::{OnceLock, RwLock};

/// What replaces a secret in a written line.
pub const REDACTED: &str = "[REDACTED]";

/// hilog's longest tag in bytes (its buffer holds 32 with the terminating NUL).
pub const MAX_TAG_BYTES: usize = 31;

/// hilog cuts a line at about 4 KiB; longer lines are written as several records of at most this.
pub const MAX_LINE_BYTES: usize = 4000;

/// How the process logger is set up.
#[derive(Clone)]
pub struct LogConfig {
    /// The most verbose level written.
    pub level: LevelFilter,
    /// hilog service domain, 0x0000..=0xFFFF (ignored off HarmonyOS).
    pub domain: u32,
    /// hilog tag, 1 to [`MAX_TAG_BYTES`] bytes without NUL; also prefixes stderr lines.
    pub tag: String,
    /// Strings never to be written (the API key); see [`Redactor`].
    pub secrets: Vec<String>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: LevelFilter::Info,
            domain: 0x0000,
            tag: "arkagent".to_owned(),
            secrets: Vec::new(),
        }
    }
}

// Never prints the secrets, only how many there are.
impl std::fmt::Debug for LogConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogConfig")
            .field("level", &self.level)
            .field("domain", &format_args!("{:#06x}", self.domain))
            .field("tag", &self.tag)
            .field("secrets", &format_args!("<{} redacted>", self.secrets.len()))
            .finish()
    }
}

impl LogConfig {
    /// Checks the domain and the tag.
    ///
    /// # Errors
    /// `config_invalid` (config layer) for a domain above 0xFFFF or an empty, too long or NUL-bearing
    /// tag.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.domain > 0xFFFF {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!("log domain {:#x} is outside 0x0000..=0xFFFF", self.domain),
            ));
        }
        if self.tag.is_empty() || self.tag.len() > MAX_TAG_BYTES || self.tag.contains('\0') {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!(
                    "log tag must be 1 to {MAX_TAG_BYTES} bytes without NUL, got {} bytes",
                    self.tag.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Removes every occurrence of `secret` from `line` (replaced by [`REDACTED`]). An empty secret
/// changes nothing. Borrowed when there is nothing to remove.
pub fn redact<'a>(line: &'a str, secret: &str) -> Cow<'a, str> {
    if secret.is_empty() || !line.contains(secret) {
        Cow::Borrowed(line)
    } else {
        Cow::Owned(line.replace(secret, REDACTED))
    }
}

/// A set of secrets removed from every line. Longer secrets are removed first, so a secret that
/// contains another is never left half-written.
#[derive(Default, Clone)]
pub struct Redactor {
    // Each secret with how many holders added it (see [`Redactor::release`]), longest first.
    secrets: Vec<(String, usize)>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor(<{} secrets>)", self.secrets.len())
    }
}

impl Redactor {
    /// A redactor for these secrets (empty ones are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut r = Redactor::default();
        for s in secrets {
            r.add(s);
        }
        r
    }

    /// Adds a secret (ignored when empty; counted once more when already known).
    pub fn add(&mut self, secret: impl Into<String>) {
        let secret = secret.into();
        if secret.is_empty() {
            return;
        }
        if let Some((_, holders)) = self.secrets.iter_mut().find(|(s, _)| *s == secret) {
            *holders += 1;
            return;
        }
        // In its place among the longer ones first.
        let at = self.secrets.partition_point(|(s, _)| s.len() >= secret.len());
        self.secrets.insert(at, (secret, 1));
    }

    /// Takes back one [`add`](Self::add) of `secret`: once every holder took its own back, the
    /// secret is no longer removed (nor looked for). Unknown secrets are ignored.
    pub fn release(&mut self, secret: &str) {
        if let Some(i) = self.secrets.iter().position(|(s, _)| s == secret) {
            self.secrets[i].1 -= 1;
            if self.secrets[i].1 == 0 {
                self.secrets.remove(i);
            }
        }
    }

    /// How many secrets it removes.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// True when it removes nothing.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The line with every secret removed.
    pub fn redact<'a>(&self, line: &'a str) -> Cow<'a, str> {
        self.redact_at_least(line, 0)
    }

    /// The line with every secret of at least `min_len` bytes removed.
    fn redact_at_least<'a>(&self, line: &'a str, min_len: usize) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(line);
        for (secret, _) in self.secrets.iter().filter(|(s, _)| s.len() >= min_len) {
            if let Cow::Owned(changed) = redact(&out, secret) {
                out = Cow::Owned(changed);
            }
        }
        out
    }
}

/// Where formatted, redacted lines go.
pub trait LogSink: Send + Sync {
    /// Writes one line (no trailing newline) at `level`.
    fn write_line(&self, level: log::Level, line: &str);
}

/// Writes `[tag LEVEL target] message` lines to stderr.
#[derive(Debug)]
pub struct StderrSink {
    tag: String,
}

impl LogSink for StderrSink {
    fn write_line(&self, level: log::Level, line: &str) {
        // One write per line, so lines of concurrent threads do not interleave.
        let text = format!("[{} {level:<5}] {line}\n", self.tag);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// Splits a line into hilog-sized pieces (at most `max` bytes each, cut on char boundaries) and
/// replaces NUL bytes (which would end a C string early) with `\0`.
pub fn hilog_pieces(line: &str, max: usize) -> Vec<String> {
    let clean = line.replace('\0', "\\0");
    let mut pieces = Vec::new();
    let mut rest = clean.as_str();
    while rest.len() > max {
        let mut cut = crate::text::floor_char_boundary(rest, max);
        if cut == 0 {
            // max is smaller than one character: take that character whole.
            cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        pieces.push(rest[..cut].to_owned());
        rest = &rest[cut..];
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(rest.to_owned());
    }
    pieces
}

#[cfg(target_env = "ohos")]
mod hilog {
    //! The hilog sink. The message goes as an argument of a `%{public}s` format, never as the format
    //! itself: ohos-hilog-binding's own writers pass the text as the printf format, so a `%` in a
    //! message would read arguments that are not there.
    use super::{hilog_pieces, LogSink, MAX_LINE_BYTES};
    use std::ffi::CString;

    #[derive(Debug)]
    pub(super) struct HilogSink {
        pub(super) domain: u32,
        pub(super) tag: CString,
    }

    impl LogSink for HilogSink {
        fn write_line(&self, level: log::Level, line: &str) {
            let level = match level {
                log::Level::Error => ohos_hilogs_sys::LogLevel_LOG_ERROR,
                log::Level::Warn => ohos_hilogs_sys::LogLevel_LOG_WARN,
                log::Level::Info => ohos_hilogs_sys::LogLevel_LOG_INFO,
                log::Level::Debug | log::Level::Trace => ohos_hilogs_sys::LogLevel_LOG_DEBUG,
            };
            for piece in hilog_pieces(line, MAX_LINE_BYTES) {
                // hilog_pieces removed every NUL, so this cannot fail.
                let Ok(message) = CString::new(piece) else { continue };
                // SAFETY: tag, format and message are NUL-terminated and outlive the call; the format
                // takes exactly one string argument, which is given.
                unsafe {
                    ohos_hilogs_sys::OH_LOG_Print(
                        ohos_hilogs_sys::LogType_LOG_APP,
                        level,
                        self.domain,
                        self.tag.as_ptr(),
                        c"%{public}s".as_ptr(),
                        message.as_ptr(),
                    );
                }
            }
        }
    }
}

/// The `log::Log` implementation: formats a record, redacts it, hands it to its sink.
pub struct ArkagentLogger {
    level: RwLock<LevelFilter>,
    redactor: RwLock<Redactor>,
    sink: Box<dyn LogSink>,
}

impl std::fmt::Debug for ArkagentLogger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArkagentLogger").field("level", &self.level()).finish_non_exhaustive()
    }
}

impl ArkagentLogger {
    /// A logger writing to `sink` (used by [`init`] with the platform sink, and by tests).
    pub fn new(level: LevelFilter, redactor: Redactor, sink: Box<dyn LogSink>) -> Self {
        ArkagentLogger { level: RwLock::new(level), redactor: RwLock::new(redactor), sink }
    }

    /// The current level.
    pub fn level(&self) -> LevelFilter {
        *self.level.read().unwrap_or_else(|p| p.into_inner())
    }

    fn set_level(&self, level: LevelFilter) {
        *self.level.write().unwrap_or_else(|p| p.into_inner()) = level;
    }

    /// Adds a secret to remove from every later line.
    pub fn add_secret(&self, secret: &str) {
        self.redactor.write().unwrap_or_else(|p| p.into_inner()).add(secret);
    }
}

impl Log for ArkagentLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format!("{}: {}", record.target(), record.args());
        let redactor = self.redactor.read().unwrap_or_else(|p| p.into_inner());
        let line = redactor.redact(&line);
        self.sink.write_line(record.level(), &line);
    }

    fn flush(&self) {}
}

static LOGGER: OnceLock<ArkagentLogger> = OnceLock::new();
// Whether `log::set_logger` took our logger. A OnceLock (not a flag) so that concurrent first calls
// wait for the one that installs instead of reading a half-done state.
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// What [`init`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// This call installed the logger.
    Installed,
    /// The logger was already installed: the level was updated and the secrets were added.
    Updated,
    /// Another logger owns the `log` facade; ours was not installed (secrets still apply to lines
    /// written through [`ArkagentLogger`] directly, never to the other logger's).
    OtherLoggerActive,
}

fn platform_sink(config: &LogConfig) -> Box<dyn LogSink> {
    #[cfg(target_env = "ohos")]
    {
        // validate() rejected NUL in the tag.
        let tag = std::ffi::CString::new(config.tag.clone()).unwrap_or_default();
        Box::new(hilog::HilogSink { domain: config.domain, tag })
    }
    #[cfg(not(target_env = "ohos"))]
    {
        Box::new(StderrSink { tag: config.tag.clone() })
    }
}

/// Sets up the process logger: hilog on HarmonyOS, stderr elsewhere, with `config.secrets` redacted.
/// Idempotent: later calls update the level and add secrets; domain and tag stay those of the first
/// call.
///
/// # Errors
/// `config_invalid` when the domain or the tag is invalid ([`LogConfig::validate`]).
pub fn init(config: LogConfig) -> Result<InitOutcome, AgentError> {
    config.validate()?;
    let logger =
        LOGGER.get_or_init(|| ArkagentLogger::new(config.level, Redactor::default(), platform_sink(&config)));
    // Every call adds its secrets and sets its level, whichever call built the logger.
    for secret in &config.secrets {
        logger.add_secret(secret);
    }
    logger.set_level(config.level);
    let mut first = false;
    let ours = *INSTALLED.get_or_init(|| {
        first = true;
        log::set_logger(logger).is_ok()
    });
    if !ours {
        return Ok(InitOutcome::OtherLoggerActive);
    }
    log::set_max_level(config.level);
    Ok(if first { InitOutcome::Installed } else { InitOutcome::Updated })
}

/// Adds a secret (the API key) to the process logger, if it is installed; a no-op otherwise. The
/// secret is removed from lines and texts for as long as the returned registration (or another
/// of the same secret) lives: an app that makes an Agent per user, or rotates short-lived
/// tokens, does not keep every key it ever used, nor look for each in every later line.
pub fn register_secret(secret: &str) -> SecretRegistration {
    match LOGGER.get() {
        Some(logger) if !secret.is_empty() => {
            logger.add_secret(secret);
            SecretRegistration { secret: Some(secret.to_string()) }
        }
        _ => SecretRegistration { secret: None },
    }
}

/// A secret registered with the process logger ([`register_secret`]); dropped, it takes its
/// registration back.
#[must_use = "the secret is no longer redacted once the registration is dropped"]
pub struct SecretRegistration {
    secret: Option<String>,
}

impl std::fmt::Debug for SecretRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretRegistration(<redacted>)")
    }
}

impl Drop for SecretRegistration {
    fn drop(&mut self) {
        if let (Some(secret), Some(logger)) = (self.secret.take(), LOGGER.get()) {
            logger.redactor.write().unwrap_or_else(|p| p.into_inner()).release(&secret);
        }
    }
}

/// How many secrets the process logger removes (0 when it is not installed): for the tests that
/// check registrations are taken back.
#[doc(hidden)]
pub fn registered_secrets() -> usize {
    LOGGER.get().map_or(0, |l| l.redactor.read().unwrap_or_else(|p| p.into_inner()).len())
}

/// The shortest secret [`redact_secrets`] removes, in bytes (the provider's rule for its error
/// texts): a shorter "key" is no real key, and removing it would garble ordinary words.
pub const MIN_TEXT_SECRET_LEN: usize = 6;

/// `text` without the secrets registered with the process logger (each replaced by [`REDACTED`]),
/// those of at least [`MIN_TEXT_SECRET_LEN`] bytes; unchanged when the logger is not installed. For
/// text from app code that reaches errors, state or events (an ArkTS executor's error message), so
/// a secret the app put there goes no further. (Log lines lose every secret, however short.)
pub fn redact_secrets(text: &str) -> Cow<'_, str> {
    let Some(logger) = LOGGER.get() else {
        return Cow::Borrowed(text);
    };
    let redactor = logger.redactor.read().unwrap_or_else(|p| p.into_inner());
    redactor.redact_at_least(text, MIN_TEXT_SECRET_LEN)
}

/// The message of a caught panic (`None` for a payload that is not text), through
/// [`redact_secrets`]: a panic's text may hold anything it formatted, an API key included.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<Cow<'_, str>> {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))?;
    Some(redact_secrets(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Default, Clone)]
    struct MemorySink(Arc<Mutex<Vec<(log::Level, String)>>>);

    impl LogSink for MemorySink {
        fn write_line(&self, level: log::Level, line: &str) {
            self.0.lock().unwrap().push((level, line.to_owned()));
        }
    }

    fn emit(logger: &ArkagentLogger, level: log::Level, args: std::fmt::Arguments<'_>) {
        logger.log(&Record::builder().level(level).target("arkagent::provider").args(args).build());
    }

    #[test]
    fn redact_removes_every_occurrence_and_borrows_when_clean() {
        assert_eq!(redact("key=sk-1 and sk-1", "sk-1"), "key=[REDACTED] and [REDACTED]");
        assert!(matches!(redact("nothing here", "sk-1"), Cow::Borrowed(_)));
        assert!(matches!(redact("sk-1", ""), Cow::Borrowed("sk-1")));
    }

    #[test]
    fn redactor_removes_longer_secrets_first() {
        let r = Redactor::new(["abc", "abcdef", ""]);
        assert_eq!(r.redact("x abcdef y abc"), "x [REDACTED] y [REDACTED]");
        assert!(!format!("{r:?}").contains("abc"));
    }

    #[test]
    fn a_secret_is_removed_until_its_last_holder_releases_it() {
        let mut r = Redactor::new(["key-a"]);
        r.add("key-a");
        r.add("key-longer-b");
        assert_eq!(r.len(), 2);
        assert_eq!(r.redact("key-a key-longer-b"), "[REDACTED] [REDACTED]");
        r.release("key-a");
        assert_eq!(r.redact("key-a"), "[REDACTED]", "one holder is left");
        r.release("key-a");
        assert_eq!(r.redact("key-a key-longer-b"), "key-a [REDACTED]");
        r.release("key-a");
        r.release("unknown");
        r.release("key-longer-b");
        assert!(r.is_empty());
        // Added again after it went: removed again, longest first as ever.
        r.add("ab");
        r.add("abcd");
        assert_eq!(r.redact("abcd ab"), "[REDACTED] [REDACTED]");
    }

    #[test]
    fn logger_redacts_the_key_from_every_line_at_every_level() {
        let key = "sk-live-0123456789abcdef";
        let sink = MemorySink::default();
        let logger = ArkagentLogger::new(LevelFilter::Trace, Redactor::new([key]), Box::new(sink.clone()));
        emit(&logger, log::Level::Error, format_args!("HTTP 401 for Authorization: Bearer {key}"));
        emit(&logger, log::Level::Debug, format_args!("{key}{key}"));
        let lines = sink.0.lock().unwrap().clone();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            (
                log::Level::Error,
                "arkagent::provider: HTTP 401 for Authorization: Bearer [REDACTED]".to_owned()
            )
        );
        assert_eq!(lines[1].1, "arkagent::provider: [REDACTED][REDACTED]");
        for (_, line) in &lines {
            assert!(!line.contains(key));
        }
    }

    #[test]
    fn logger_filters_by_level_and_takes_new_secrets() {
        let sink = MemorySink::default();
        let logger = ArkagentLogger::new(LevelFilter::Warn, Redactor::default(), Box::new(sink.clone()));
        emit(&logger, log::Level::Info, format_args!("dropped"));
        logger.add_secret("later-key");
        emit(&logger, log::Level::Warn, format_args!("later-key leaked?"));
        assert_eq!(
            sink.0.lock().unwrap().clone(),
            vec![(log::Level::Warn, "arkagent::provider: [REDACTED] leaked?".to_owned())]
        );
    }

    #[test]
    fn config_is_validated_and_debug_hides_secrets() {
        assert!(LogConfig::default().validate().is_ok());
        let bad_domain = LogConfig { domain: 0x1_0000, ..LogConfig::default() };
        assert_eq!(bad_domain.validate().unwrap_err().code, codes::CONFIG_INVALID);
        for tag in ["", "a\0b", &"t".repeat(MAX_TAG_BYTES + 1)] {
            let c = LogConfig { tag: tag.to_owned(), ..LogConfig::default() };
            assert_eq!(c.validate().unwrap_err().code, codes::CONFIG_INVALID, "{tag:?}");
        }
        let c = LogConfig { secrets: vec!["sk-secret".into()], ..LogConfig::default() };
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret") && shown.contains("<1 redacted>"), "{shown}");
    }

    #[test]
    fn hilog_pieces_cut_on_char_boundaries_and_escape_nul() {
        assert_eq!(hilog_pieces("", 4), vec![String::new()]);
        assert_eq!(hilog_pieces("a\0b", 10), vec!["a\\0b".to_owned()]);
        let pieces = hilog_pieces("ééé", 3); // 2 bytes each
        assert_eq!(pieces, vec!["é", "é", "é"]);
        let long = "x".repeat(MAX_LINE_BYTES * 2 + 5);
        let pieces = hilog_pieces(&long, MAX_LINE_BYTES);
        assert_eq!(
            pieces.iter().map(String::len).collect::<Vec<_>>(),
            vec![MAX_LINE_BYTES, MAX_LINE_BYTES, 5]
        );
        assert_eq!(hilog_pieces("😀", 2), vec!["😀"]);
    }
}
