//! [`OpenAiCompatibleClient`]: a [`ChatModel`] over HTTP (reqwest + rustls with ring, HTTP/1.1 with
//! keep-alive; HTTP/2 by ALPN and gzip with the cargo features `http2` and `gzip`) for any
//! OpenAI-compatible chat-completions endpoint.
//!
//! Faults: connect errors, a connection that breaks before the response head
//! (`broke_before_head`), a streamed request's first-byte timeout, 408, 409, 429 and 5xx are
//! retried with exponential backoff and jitter
//! (the statuses the official OpenAI SDKs retry, see [`is_retried_status`]), and so is an error
//! body sent with a 2xx that stands for one of them (below); never once a piece of the answer was
//! handed out (a stream that started is never replayed). Whether an error response is retried is
//! decided in this order:
//! 1. an error that lasts (an exhausted quota or balance, a 402, a refused key or locked account
//!    named by the body's code: [`is_lasting`](super::wire::ProviderErrorDetail::is_lasting)) is
//!    never retried, whatever the headers say: no wait of seconds changes it, and a gateway that
//!    adds `x-should-retry: true` to every 429 would otherwise spend the retries and the user's
//!    time on a certain failure; nor is content refused by the provider's moderation
//!    (`provider_content_filtered`, whatever the status): the same request meets the same filter;
//! 2. `x-should-retry: false` is never retried, `x-should-retry: true` is retried whatever the
//!    status (a 400 included), as the official OpenAI SDKs obey it (`_should_retry` of
//!    openai-python, `shouldRetry` of openai-node; this client also takes either value in any
//!    case and with blank space around, and ignores any other value);
//! 3. otherwise the status decides ([`is_retried_status`]).
//!
//! The error's code is the one the body's own code names
//! ([`stable_code`](super::wire::ProviderErrorDetail::stable_code): `provider_auth`,
//! `provider_rate_limited`, `provider_quota_exhausted`, `provider_content_filtered`), else the
//! status's (401/403 auth, 402 quota exhausted, 429 rate limited, any other
//! `provider_http_status`).
//!
//! An error body sent with a 2xx (MiniMax's `base_resp`, Baidu's `error_code`, `{"error": ...}`,
//! whole or as an event of a stream) is read the same way, and retried as a response with the
//! status it stands for would be
//! ([`equivalent_status`](super::wire::ProviderErrorDetail::equivalent_status): a rate limit such
//! as Qianfan's 336501/18/4 or MiniMax's 1002 as a 429, a failure on the provider's side such as
//! MiniMax's 1000/1001/1013 as a 5xx, a code that is an HTTP status (OpenRouter's `error.code`,
//! a gateway's top-level `code`) as that status; an exhausted quota, a refused key, content refused by
//! moderation or a code no table knows not), by the same rules, under the 2xx's headers, counted
//! against the same retry limit as the statuses' retries, with the same waits, log line and
//! cancellation. Any other failure of a 2xx answer (a timeout, a broken or undecodable body) is
//! not retried. A streamed answer is read ahead until its first piece (text, reasoning, a tool
//! call once announced, with its whole name, or its end; a usage report is held back with it): an error before it may be retried, as
//! nothing was handed out; once the first piece is handed out, an error ends the stream as an item
//! and is never retried (the caller would get the answer twice). Events of the read that brought
//! an error are dropped with it, so a piece that came in the same read is never handed out
//! either. [`complete`](ChatModel::complete) hands out nothing before the end, so a stream
//! answering it is retried on such an error wherever it comes.
//!
//! The wait before a retry is what the server asks for: `retry-after-ms` (milliseconds, not a
//! standard header; the SDKs prefer it to `Retry-After`, which only has whole seconds in its
//! standard form), else `Retry-After` (seconds or an HTTP date), else the policy's backoff. A wait
//! asked for above [`RetryPolicy::max_retry_after`](super::config::RetryPolicy::max_retry_after),
//! by either header, is not waited for: the error is returned (the SDKs fall back to their backoff
//! there; a server that asks for minutes is not helped by a retry within seconds). A wait that
//! would end past the total timeout returns the error at once. Dropping the call's future during a
//! wait cancels it: no further attempt is sent. Timeouts: connect,
//! first byte (request sent -> response head), idle (between two body chunks, keep-alive comments
//! included), after the finish reason (how long a stream whose answer is complete may go on
//! without a usage report or its end: a few seconds, where idle can be minutes; keep-alives do not
//! extend it, see [`Timeouts::after_finish`](super::config::Timeouts::after_finish)) and total
//! (the whole call, retries included). A stream that times out or breaks
//! off after its finish reason came is complete, as one whose body ends there is, unless answer
//! data came after its last finish reason (a provider that sends them early: the stream may have
//! been cut inside a call, which is then interrupted, never run with what came of it). Bodies and
//! streams are capped at `max_response_bytes`. A streamed request answered with a JSON body (a
//! gateway that ignores `stream: true`, an error body sent with a 200) is read as a non-streamed
//! answer and handed out as the events of one; so is a body under another content type that holds
//! no event (see [`StreamDecoder`]). A body labelled JSON that begins as an event stream (some
//! proxies) is streamed as one. The other way round, a non-streamed request answered with an event
//! stream (a gateway that always streams) gives the answer the stream holds. Dropping the returned
//! future or stream closes the connection at once.
//! The API key is only ever put in the `Authorization` header (marked sensitive); it is scrubbed
//! from every error message as a last guard.

use super::assemble::{starts_as_event_stream, StreamDecoder};
use super::config::ClientConfig;
use super::convert::{
    error_of_body, event_with_app_names, parse_response, raw_excerpt, raw_excerpt_of_prefix, renames_of,
    response_with_app_names,
};
use super::wire::ProviderErrorDetail;
use super::{tls, ChatModel, ChatRequest, ModelEvent, ModelEventStream, ModelResponse};
use crate::error::{codes, AgentError};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Most bytes of an HTTP error body read.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The OpenAI-compatible HTTP client. Cheap to share (`Arc`); one connection pool per client.
pub struct OpenAiCompatibleClient {
    http: reqwest::Client,
    endpoint: String,
    /// `endpoint` parsed once (not for every request).
    url: reqwest::Url,
    config: Arc<ClientConfig>,
    bodies: super::body_cache::BodyCache,
}

impl fmt::Debug for OpenAiCompatibleClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiCompatibleClient")
            .field("preset", &self.config.preset)
            .field("endpoint", &self.endpoint)
            .field("model", &self.config.model)
            .field("api_key", &self.config.api_key)
            .finish()
    }
}

/// A failed attempt and whether it may be retried.
struct AttemptError {
    error: AgentError,
    retryable: bool,
}

impl OpenAiCompatibleClient {
    /// Builds a client (checks the URL, builds the TLS configuration and the connection pool).
    ///
    /// # Errors
    /// `config_invalid` / `insecure_url` for a bad base URL or model (see
    /// [`ClientConfig::endpoint`]) or an API key an HTTP header cannot carry (see
    /// [`ClientConfig::check_api_key`]); `provider_tls` for a bad extra root PEM.
    pub fn new(config: ClientConfig) -> Result<Self, AgentError> {
        let endpoint = config.endpoint()?;
        config.check_api_key()?;
        let url = reqwest::Url::parse(&endpoint)
            .map_err(|e| AgentError::of(codes::CONFIG_INVALID, format!("base_url: {e}")))?;
        if config.max_response_bytes == 0 {
            return Err(AgentError::of(codes::CONFIG_INVALID, "max_response_bytes: must be > 0"));
        }
        let tls = tls::client_tls_config(&config.extra_root_pems)?;
        let builder = reqwest::Client::builder();
        // Without a decoder for compressed bodies, say so: with no Accept-Encoding at all a server
        // may pick any coding (RFC 9110, 12.5.3). With the `gzip` feature reqwest asks for gzip.
        #[cfg(not(feature = "gzip"))]
        let builder = builder.default_headers(reqwest::header::HeaderMap::from_iter([(
            reqwest::header::ACCEPT_ENCODING,
            reqwest::header::HeaderValue::from_static("identity"),
        )]));
        let http = builder
            .tls_backend_preconfigured(tls)
            .connect_timeout(config.timeouts.connect)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("arkagent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AgentError::of(codes::PROVIDER_TLS, format!("building the HTTP client: {e}")))?;
        Ok(OpenAiCompatibleClient {
            http,
            endpoint,
            url,
            config: Arc::new(config),
            bodies: Default::default(),
        })
    }

    /// The configuration (its API key stays redacted).
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The chat-completions URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn body(&self, request: &ChatRequest, stream: bool) -> Result<bytes::Bytes, AgentError> {
        if let Some(t) = request.temperature {
            if !t.is_finite() {
                return Err(AgentError::of(codes::CONFIG_INVALID, "temperature: not a finite number"));
            }
        }
        self.bodies
            .body(request, &self.config.model, &self.config.quirks, stream)
            .map_err(|e| AgentError::of(codes::CONFIG_INVALID, format!("request cannot be serialised: {e}")))
    }

    /// Sends with retries until a 2xx response head arrives. `retries` counts the retries of
    /// the whole call (a 2xx error body retried by the caller counts too).
    async fn send(
        &self,
        body: bytes::Bytes,
        stream: bool,
        deadline: Instant,
        retries: &mut u32,
    ) -> Result<reqwest::Response, AgentError> {
        loop {
            let (error, wait) = match self.send_once(body.clone(), stream, deadline).await {
                Ok(resp) if resp.status().is_success() => {
                    // A body in a coding the client did not ask for and cannot decode would fail
                    // as "not UTF-8" or as garbled text: say what came instead. Not retried (the
                    // proxy that encoded it would again).
                    if let Some(coding) = undecoded_coding(resp.headers()) {
                        return Err(AgentError::of(codes::PROVIDER_DECODE, undecoded_body(&coding)));
                    }
                    return Ok(resp);
                }
                Ok(resp) => {
                    let status = resp.status();
                    let advice = RetryAdvice::of(resp.headers());
                    let (error, never) = self.status_error(resp, deadline).await;
                    retry_verdict(error, is_retried_status(status), never, advice)?
                }
                Err(AttemptError { error, retryable: false }) => return Err(error),
                Err(AttemptError { error, retryable: true }) => (error, None),
            };
            self.wait_to_retry(error, wait, retries, deadline).await?;
        }
    }

    /// Waits before retry number `*retries + 1` and counts it, or returns the error when the
    /// policy allows no further attempt: the retry limit is reached, the wait the server asked
    /// for is over [`RetryPolicy::max_retry_after`](super::config::RetryPolicy::max_retry_after),
    /// or the wait would end past the total timeout. `wait` is the server's (and the header that
    /// asked), else the policy's backoff applies. Dropping the future during the wait cancels
    /// the call.
    async fn wait_to_retry(
        &self,
        error: AgentError,
        wait: AskedWait,
        retries: &mut u32,
        deadline: Instant,
    ) -> Result<(), AgentError> {
        let policy = self.config.retry;
        if *retries >= policy.max_retries {
            return Err(with_attempts(error, *retries));
        }
        let wait = match wait {
            Some((d, header)) if d > policy.max_retry_after => {
                return Err(with_note(error, &format!("{header} {d:?} exceeds the limit; not retried")))
            }
            Some((d, _)) => d,
            None => policy.backoff(*retries),
        };
        if Instant::now().checked_add(wait).is_none_or(|at| at >= deadline) {
            return Err(with_note(error, "no time left before the total timeout to retry"));
        }
        log::info!("provider: {} - retry {} in {wait:?}", error, *retries + 1);
        tokio::time::sleep(wait).await;
        *retries += 1;
        Ok(())
    }

    async fn send_once(
        &self,
        body: bytes::Bytes,
        stream: bool,
        deadline: Instant,
    ) -> Result<reqwest::Response, AttemptError> {
        let mut rb = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, if stream { "text/event-stream" } else { "application/json" })
            .body(body);
        if !self.config.api_key.is_empty() {
            rb = rb.bearer_auth(self.config.api_key.expose());
        }
        let until = deadline.min(Instant::now() + self.config.timeouts.first_byte);
        match tokio::time::timeout_at(until, rb.send()).await {
            // A streaming server sends its head as it starts answering: none within the limit is
            // a request stuck on the way (a gateway or balancer that lost it), and nothing came,
            // so it is sent again, as the official SDKs retry a timeout. Not a non-streamed one:
            // its head waits for the whole answer, which the model is likely still writing (a
            // new attempt would pay for it twice and meet the same limit). The total timeout
            // bounds both (no retry once it is reached).
            Err(_) => Err(AttemptError {
                error: self.timeout_error(deadline, "first byte", self.config.timeouts.first_byte),
                retryable: stream && Instant::now() < deadline,
            }),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(self.classify(&e)),
        }
    }

    fn classify(&self, e: &reqwest::Error) -> AttemptError {
        let text = self.redact(error_chain(e));
        if has_tls_cause(e) {
            return AttemptError {
                error: AgentError::of(codes::PROVIDER_TLS, format!("TLS handshake failed: {text}")),
                retryable: false,
            };
        }
        if e.is_connect() {
            let code = if e.is_timeout() { codes::PROVIDER_TIMEOUT } else { codes::PROVIDER_CONNECT };
            return AttemptError {
                error: AgentError::of(code, format!("cannot connect: {text}")),
                retryable: true,
            };
        }
        if e.is_timeout() {
            return AttemptError { error: AgentError::of(codes::PROVIDER_TIMEOUT, text), retryable: false };
        }
        if broke_before_head(e) {
            return AttemptError {
                error: AgentError::of(
                    codes::PROVIDER_CONNECT,
                    format!("the connection broke before the response: {text}"),
                ),
                retryable: true,
            };
        }
        AttemptError {
            error: AgentError::of(codes::PROVIDER_CONNECT, format!("request failed: {text}")),
            retryable: false,
        }
    }

    /// The error of a response with an error status, and why no retry may change it when it
    /// names such a condition ([`never_retried`]).
    async fn status_error(
        &self,
        mut resp: reqwest::Response,
        deadline: Instant,
    ) -> (AgentError, Option<&'static str>) {
        let status = resp.status();
        let by_status = match status.as_u16() {
            401 | 403 => codes::PROVIDER_AUTH,
            // Payment Required: DeepSeek's "Insufficient Balance", OpenRouter's credits.
            402 => codes::PROVIDER_QUOTA_EXHAUSTED,
            429 => codes::PROVIDER_RATE_LIMITED,
            _ => codes::PROVIDER_HTTP_STATUS,
        };
        // Redirects are not followed (a POST would be replayed elsewhere, with the key): the
        // message says where the server sent the request, the usual fix of the base URL.
        let redirect = match resp.headers().get(reqwest::header::LOCATION) {
            Some(to) if status.is_redirection() => format!(
                " (redirected to {}; redirects are not followed: use that URL's base as the base URL)",
                raw_excerpt(to.as_bytes())
            ),
            _ => String::new(),
        };
        let coding = undecoded_coding(resp.headers());
        let mut body = Vec::new();
        let whole =
            read_into(&mut resp, &mut body, ERROR_BODY_LIMIT, self.config.timeouts.idle, deadline, |_| false)
                .await
                .is_ok();
        // Text first, as `parse_response` does: serde_json's parser exists once, for text
        // (BENCHMARKS.md, "Size of the stripped release `.so`"). A body that is not UTF-8 is shown
        // raw.
        let parsed = std::str::from_utf8(&body).ok().and_then(ProviderErrorDetail::of_body);
        // The body's own code is more precise than the status (Zhipu sends an exhausted balance
        // and a locked account with a 429, as it does its rate limits). An exhausted quota lasts
        // whether the body or the status (a 402) says so.
        let code = parsed.as_ref().and_then(ProviderErrorDetail::stable_code).unwrap_or(by_status);
        let lasting = code == codes::PROVIDER_QUOTA_EXHAUSTED
            || parsed.as_ref().is_some_and(ProviderErrorDetail::is_lasting);
        let never = never_retried(code, lasting);
        let detail = match parsed {
            Some(e) => e.describe(),
            None if body.is_empty() => "(empty body)".to_string(),
            None if coding.is_some() => format!(
                "a body of {} bytes not shown: {}",
                body.len(),
                undecoded_body(coding.as_deref().unwrap_or_default())
            ),
            None if whole => format!("raw body: {}", raw_excerpt(&body)),
            None => format!("raw body: {}", raw_excerpt_of_prefix(&body)),
        };
        (AgentError::of(code, self.redact(format!("HTTP {}: {detail}{redirect}", status.as_u16()))), never)
    }

    /// Reads the body of a 2xx answer under the size limit, the idle timeout and the deadline: a
    /// body whose first bytes are those of an event stream is handed back as a stream still being
    /// read (the limit after the finish reason applies to it, and its events come as they arrive),
    /// any other body whole. A body that ended before its first bytes told is whole too.
    ///
    /// # Errors
    /// The timeout, broken body and size errors of reading it, or the error of decoding its first
    /// bytes as an event stream (with the provider's error, when an event was one); the key
    /// redacted.
    async fn read_answer(&self, mut resp: reqwest::Response, deadline: Instant) -> Result<Answer, Failed> {
        let key = self.config.api_key.expose();
        let (limit, idle) = (self.config.max_response_bytes, self.config.timeouts.idle);
        let mut bytes = Vec::new();
        let tells = |b: &[u8]| starts_as_event_stream(b).is_some();
        let ended = read_into(&mut resp, &mut bytes, limit, idle, deadline, tells)
            .await
            .map_err(|e| Failed::bare(redact_error(e, key)))?;
        if ended {
            return Ok(Answer::Whole(bytes));
        }
        if starts_as_event_stream(&bytes) == Some(true) {
            let mut state = StreamState::new(resp, deadline, self.config.clone());
            state.received = bytes.len();
            let finished = state.decoder.feed(&bytes, &mut state.scratch).map_err(|e| Failed {
                error: redact_error(e, key),
                detail: state.decoder.provider_error().cloned(),
            })?;
            state.pending.extend(state.scratch.drain(..));
            if finished {
                state.resp = None;
            }
            return Ok(Answer::Stream(Box::new(state)));
        }
        read_into(&mut resp, &mut bytes, limit, idle, deadline, |_| false)
            .await
            .map_err(|e| Failed::bare(redact_error(e, key)))?;
        Ok(Answer::Whole(bytes))
    }

    fn timeout_error(&self, deadline: Instant, phase: &str, limit: Duration) -> AgentError {
        timeout_error(deadline, phase, limit, self.config.timeouts.total)
    }

    fn redact(&self, text: String) -> String {
        redact_message(text, self.config.api_key.expose())
    }
}

/// The `Content-Encoding` of a response whose body the client does not decode: any coding but
/// `identity` (with the `gzip` feature reqwest decodes gzip and removes the header, so what is
/// left is a coding it does not decode either: `br`, `deflate`, `zstd`).
fn undecoded_coding(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let codings: Vec<&str> = headers
        .get_all(reqwest::header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("(not text)").split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .collect();
    (!codings.is_empty()).then(|| codings.join(", "))
}

/// What the message of a body in `coding` (see [`undecoded_coding`]) says.
fn undecoded_body(coding: &str) -> String {
    #[cfg(not(feature = "gzip"))]
    let (asked, remedy) = (
        "Accept-Encoding: identity",
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            "; build with the cargo feature `gzip` to read gzip bodies, or have the server or proxy send them unencoded"
        } else {
            "; have the server or proxy send it unencoded"
        },
    );
    #[cfg(feature = "gzip")]
    let (asked, remedy) =
        ("Accept-Encoding: gzip", "; have the server or proxy send it unencoded or gzip-encoded");
    format!(
        "the response body came encoded with Content-Encoding: {}, which the client did not ask for \
         ({asked}) and cannot decode{remedy}",
        raw_excerpt(coding.as_bytes())
    )
}

/// The shortest start of the key [`redact_message`] takes out before a cut. Three bytes or fewer
/// of a key are a provider's public prefix (`sk-`) or at most three characters of a secret of 32
/// or more; a shorter minimum would take text that merely ends like the key (a word ending in
/// `s` before `...`, when the key starts with `s`) out of messages, for no gain in secrecy.
const KEY_START_REDACTED: usize = 4;

/// An error message with the key taken out, also where JSON escapes spell it ([`redact_key`],
/// [`redact_escaped_key`]: a message shows excerpts of the provider's raw text, and a gateway whose
/// JSON encoder escapes characters echoes the key as `\u0073k-...`), and any start of it
/// ([`KEY_START_REDACTED`] bytes or more, literal or escaped) that ends where an excerpt of a body
/// was cut (right before a `...`: [`raw_excerpt`], [`raw_excerpt_of_prefix`]). The excerpt ends
/// before a word it would cut, but a key is not always one word: iFlytek Spark's
/// `APIKey:APISecret` is two, a key glued to a run of word characters longer than a key could be
/// is cut where the excerpt ends, and an escape's `\` is no word character; the whole key is not
/// there for [`redact_key`] to find. Every error of the provider goes through here
/// ([`redact_error`]).
fn redact_message(text: String, key: &str) -> String {
    let mut text = redact_key(text, key);
    if key.len() < 6 {
        return text;
    }
    redact_escaped_key(&mut text, key);
    // Where a `...` starts: in a run of dots, at each dot with two after it (a key with a `.` cut
    // after it shows as `ak-1234....`).
    let bytes = text.as_bytes();
    let mut marks = Vec::new();
    let mut from = 0;
    while let Some(offset) = memchr::memchr(b'.', &bytes[from..]) {
        let run = from + offset;
        from = run + bytes[run..].iter().take_while(|&&b| b == b'.').count();
        marks.extend(run..from.saturating_sub(2));
    }
    if marks.is_empty() {
        return text;
    }
    // The text decoded (`\/`, `\u0073`), with where each decoded byte came from, when it holds an
    // escape: a start of the key its escapes spell is looked for there.
    let (mut decoded, mut origins) = (Vec::new(), Vec::new());
    if memchr::memchr(b'\\', bytes).is_some() {
        decode_escapes(bytes, &mut decoded, Some(&mut origins));
    }
    let shown_start = |before: &[u8]| {
        (KEY_START_REDACTED..key.len()).rev().find(|&n| before.ends_with(&key.as_bytes()[..n]))
    };
    // The ranges to take out, in order; overlapping ones merged.
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for at in marks {
        let literal = shown_start(&bytes[..at]).map(|n| at - n);
        // A `.` is never part of an escape: the decoded bytes before it are those of `..at`, but
        // for the `\` of an escape the cut left alone (it falls before the escape's `u0073`, a
        // word), taken out with what it follows.
        let escaped =
            (!origins.is_empty())
                .then(|| origins.partition_point(|o: &(usize, usize)| o.1 <= at))
                .map(|d| {
                    if at > 0 && bytes[at - 1] == b'\\' && origins[d - 1] == (at - 1, at) {
                        d - 1
                    } else {
                        d
                    }
                })
                .and_then(|d| shown_start(&decoded[..d]).map(|n| origins[d - n].0));
        let Some(start) = literal.into_iter().chain(escaped).min() else { continue };
        if !text.is_char_boundary(start) {
            continue;
        }
        match cuts.last_mut() {
            Some(last) if last.1 >= start => *last = (last.0.min(start), at.max(last.1)),
            _ => cuts.push((start, at)),
        }
    }
    for (start, end) in cuts.into_iter().rev() {
        text.replace_range(start..end, "<redacted>");
    }
    text
}

/// `text` with every copy of `key` (6 bytes or more) replaced by `<redacted>`, and its
/// JSON-escaped form too when it holds a `/`: a JSON encoder may write `/` as `\/` (PHP's does by
/// default), and keys with slashes exist (Qianfan's `bce-v3/ALTAK-.../...`), so a gateway that
/// echoes the key in a body shown raw would show it whole.
fn redact_key(text: String, key: &str) -> String {
    if key.len() < 6 {
        return text;
    }
    let mut text = if text.contains(key) { text.replace(key, "<redacted>") } else { text };
    if key.contains('/') {
        let escaped = key.replace('/', "\\/");
        if text.contains(&escaped) {
            text = text.replace(&escaped, "<redacted>");
        }
    }
    redact_percent_encoded_key(&mut text, key, false);
    if key.contains(' ') {
        redact_percent_encoded_key(&mut text, key, true);
    }
    text
}

/// `text` with every copy of `key` that percent-encoding spells replaced by `<redacted>`: a
/// gateway that echoes the key in a URL, a query or a form field writes it so (Qianfan's
/// `bce-v3/ALTAK-.../...` as `bce-v3%2FALTAK-...`), with hex digits in either case, and with
/// `+` for a space when `plus_is_space` (HTML form encoding; a `+` of the key itself is then
/// `%2B`, so [`redact_key`] asks for this only when the key holds a space, after a pass that keeps
/// `+` as it is). Any byte may be encoded or not, so the text is decoded and the key looked for
/// there; only the bytes that spell it are replaced, the rest of the text is kept byte for byte.
/// Text without a `%` (and, with `plus_is_space`, without a `+`) is left as it is.
fn redact_percent_encoded_key(text: &mut String, key: &str, plus_is_space: bool) {
    let bytes = text.as_bytes();
    let plus = plus_is_space && memchr::memchr(b'+', bytes).is_some();
    if !plus && memchr::memchr(b'%', bytes).is_none() {
        return;
    }
    let hex = |b: u8| char::from(b).to_digit(16);
    // The decoded bytes, with where each came from in `text`.
    let (mut decoded, mut origins) = (Vec::with_capacity(bytes.len()), Vec::with_capacity(bytes.len()));
    let mut i = 0;
    while i < bytes.len() {
        let escape = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        let (byte, len) = match (escape, bytes[i]) {
            (Some(value), _) => (value as u8, 3),
            (None, b'+') if plus_is_space => (b' ', 1),
            (None, b) => (b, 1),
        };
        decoded.push(byte);
        origins.push((i, i + len));
        i += len;
    }
    let ranges: Vec<(usize, usize)> = memchr::memmem::find_iter(&decoded, key.as_bytes())
        .map(|at| (origins[at].0, origins[at + key.len() - 1].1))
        .filter(|&(start, end)| text.is_char_boundary(start) && text.is_char_boundary(end))
        .collect();
    for (start, end) in ranges.into_iter().rev() {
        text.replace_range(start..end, "<redacted>");
    }
}

/// `text` with the key taken out ([`redact_key`]), in place.
fn redact_text(text: &mut String, key: &str) {
    *text = redact_key(std::mem::take(text), key);
}

/// `response` with the key taken out of every text the provider wrote into it (its text,
/// reasoning, calls and finish reason; the usage is counts): a gateway that echoes the request's
/// `Authorization` header into a successful answer would otherwise put it in the state, the
/// events (`run_finished` carries the finish reason), the outcome and the tools' arguments.
fn redact_response(response: &mut ModelResponse, key: &str) {
    let texts = [&mut response.content, &mut response.reasoning_content, &mut response.finish_reason];
    for text in texts.into_iter().flatten() {
        redact_text(text, key);
    }
    for call in &mut response.tool_calls {
        redact_call(call, key);
    }
}

/// `call` with the key taken out of its id, name and arguments ([`redact_response`]); out of the
/// arguments also where JSON escapes spell it ([`redact_escaped_key`]).
fn redact_call(call: &mut crate::message::ToolCall, key: &str) {
    for text in [&mut call.id, &mut call.name, &mut call.arguments] {
        redact_text(text, key);
    }
    redact_escaped_key(&mut call.arguments, key);
}

/// `json` (a call's arguments, or a piece of them; an error message quoting the provider's raw
/// text: [`redact_message`]) with every copy of `key` that its JSON escapes
/// spell (`"\u0073k-..."`: a gateway whose JSON encoder escapes characters copies the
/// `Authorization` header into the arguments) replaced by `<redacted>`. The arguments are decoded
/// later (the registry hands the tool the decoded strings; the loop detection writes a signature
/// of them to the state), so the literal key alone is not enough. Only `\u` escapes can spell a
/// key that [`redact_key`] does not find (the other escapes are of `"`, `\` and control
/// characters, which keys do not hold, and of `/`, whose form it looks for): text without one is
/// left as it is without decoding (with any backslash, for a key that does hold such a
/// character). Escapes are decoded wherever they are, inside strings or not, so a piece of
/// arguments or arguments that are not valid JSON are covered too; the escapes that spell the key
/// (and the plain characters between them) are replaced, the rest of the text is kept byte for
/// byte, and a string stays a valid JSON string.
fn redact_escaped_key(json: &mut String, key: &str) {
    let odd_key = key.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\');
    let escape: &[u8] = if odd_key { b"\\" } else { b"\\u" };
    if key.len() < 6 || memchr::memmem::find(json.as_bytes(), escape).is_none() {
        return;
    }
    let mut decoded = Vec::with_capacity(json.len());
    decode_escapes(json.as_bytes(), &mut decoded, None);
    if memchr::memmem::find(&decoded, key.as_bytes()).is_none() {
        return;
    }
    // Again, with where each decoded byte came from (its escape or byte in `json`).
    let mut origins = Vec::with_capacity(decoded.len());
    decoded.clear();
    decode_escapes(json.as_bytes(), &mut decoded, Some(&mut origins));
    let ranges: Vec<(usize, usize)> = memchr::memmem::find_iter(&decoded, key.as_bytes())
        .map(|at| (origins[at].0, origins[at + key.len() - 1].1))
        .collect();
    for (start, end) in ranges.into_iter().rev() {
        json.replace_range(start..end, "<redacted>");
    }
}

/// Decodes the JSON escapes of `text` into `out` (other bytes copied): a lone surrogate becomes
/// U+FFFD, an escape that is not one (a stray or final `\`) is copied as it is. With `origins`,
/// pushes for each byte written the range of `text` it came from.
fn decode_escapes(text: &[u8], out: &mut Vec<u8>, mut origins: Option<&mut Vec<(usize, usize)>>) {
    let unit = |at: usize| {
        let hex = text.get(at..at + 6).filter(|e| e.starts_with(b"\\u"))?;
        let hex = std::str::from_utf8(&hex[2..]).ok().filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))?;
        u32::from_str_radix(hex, 16).ok()
    };
    let mut i = 0;
    while i < text.len() {
        let (ch, len) = match (text[i], text.get(i + 1)) {
            (b'\\', Some(b'u')) => match unit(i) {
                Some(high @ 0xD800..=0xDBFF) => match unit(i + 6) {
                    Some(low @ 0xDC00..=0xDFFF) => {
                        (char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)), 12)
                    }
                    _ => (Some('\u{FFFD}'), 6),
                },
                Some(u) => (Some(char::from_u32(u).unwrap_or('\u{FFFD}')), 6),
                None => (None, 1),
            },
            (b'\\', Some(&c @ (b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't'))) => {
                let c = match c {
                    b'b' => '\u{8}',
                    b'f' => '\u{C}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    c => char::from(c),
                };
                (Some(c), 2)
            }
            _ => (None, 1),
        };
        let before = out.len();
        match ch {
            Some(c) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            None => out.push(text[i]),
        }
        if let Some(origins) = origins.as_deref_mut() {
            origins.extend(std::iter::repeat_n((i, i + len), out.len() - before));
        }
        i += len;
    }
}

/// `event` with the key taken out ([`redact_response`]). A piece of text is redacted on its own:
/// a key cut across two pieces reaches the app's listener in those two pieces, but never the
/// assembled answer, its calls or the state.
fn redact_event(mut event: ModelEvent, key: &str) -> ModelEvent {
    match &mut event {
        ModelEvent::TextDelta(text) | ModelEvent::ReasoningDelta(text) => redact_text(text, key),
        ModelEvent::ToolCallStarted { id, name, .. } => {
            redact_text(id, key);
            redact_text(name, key);
        }
        ModelEvent::ToolCallArgumentsDelta { delta, .. } => {
            redact_text(delta, key);
            redact_escaped_key(delta, key);
        }
        ModelEvent::ToolCallFinished { call, .. } => redact_call(call, key),
        ModelEvent::Finished(response) => redact_response(response, key),
        ModelEvent::Usage(_) => {}
    }
    event
}

fn redact_error(mut e: AgentError, key: &str) -> AgentError {
    e.message = redact_message(std::mem::take(&mut e.message), key);
    e
}

fn timeout_error(deadline: Instant, phase: &str, limit: Duration, total: Duration) -> AgentError {
    if Instant::now() >= deadline {
        AgentError::of(codes::PROVIDER_TIMEOUT, format!("total timeout of {total:?} reached"))
    } else {
        AgentError::of(codes::PROVIDER_TIMEOUT, format!("{phase} timeout of {limit:?} reached"))
    }
}

fn with_attempts(mut e: AgentError, retries: u32) -> AgentError {
    if retries > 0 {
        e.message = format!("{} (after {} retries)", e.message, retries);
    }
    e
}

fn with_note(mut e: AgentError, note: &str) -> AgentError {
    e.message = format!("{} ({note})", e.message);
    e
}

/// The error and its causes on one line.
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    for s in causes(e) {
        text.push_str(": ");
        text.push_str(&s.to_string());
    }
    text
}

/// The causes of `e`, the nearest first (its `source`, that one's, ...).
fn causes(e: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(e), |s| s.source())
}

/// True when a rustls error (bad certificate...) is among the causes. `io::Error::source` and a
/// boxed error's `source` skip the error they wrap, so those are opened by downcasting.
fn has_tls_cause(e: &reqwest::Error) -> bool {
    fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
        if e.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                return is_tls(inner);
            }
        }
        false
    }
    causes(e).any(is_tls)
}

/// Whether the request failed because the connection was closed or reset before a response head
/// came: hyper's "connection closed before message completed", or a reset, abort, broken pipe or
/// end of stream under it. A server's keep-alive timeout racing a new request on a kept connection
/// meets it (hyper's pool resends a request only when the connection closed before it was
/// written), so does a phone whose network changed while a connection sat idle, and a gateway
/// restarting. Nothing of an answer came, so a new attempt hands nothing out twice; the request may
/// have reached the model, and a retry then costs one answer's tokens, as a retried 5xx does. The
/// official SDKs retry it as a connection error (openai-python's `APIConnectionError`,
/// openai-node's `APIConnectionError`).
fn broke_before_head(e: &reqwest::Error) -> bool {
    use std::io::ErrorKind;
    causes(e).any(|s| {
        s.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message)
            || s.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::BrokenPipe
                        | ErrorKind::UnexpectedEof
                )
            })
    })
}

/// Whether a response with this (error) status is retried: 408, 409, 429 and every 5xx, as the
/// official OpenAI SDKs (Python, Node, .NET) do. 408 (Request Timeout): the server gave up
/// waiting for the request, which a new attempt may send in time. 409 (Conflict): OpenAI answers
/// it for a lock timeout on its side; a chat completion changes no resource, so a conflict can
/// only be with another request in flight (gateways use it for a busy session or a duplicate
/// request still running) and a later attempt may pass; a 409 whose body says it lasts is
/// returned at once like a 429. Any other 4xx is the request's own fault and is never retried.
pub fn is_retried_status(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 429) || status.is_server_error()
}

/// The wait a server asked for before a retry and the header that asked, if it asked.
type AskedWait = Option<(Duration, &'static str)>;

/// What an error response's headers say about retrying it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RetryAdvice {
    /// `x-should-retry: true` / `false` (any case, blank space around); `None` when absent or
    /// anything else.
    should_retry: Option<bool>,
    /// The wait the server asks for and the header that asked: `retry-after-ms` when it holds a
    /// number of milliseconds (finite, not negative), else `Retry-After`.
    wait: AskedWait,
}

impl RetryAdvice {
    fn of(headers: &reqwest::header::HeaderMap) -> RetryAdvice {
        let should_retry = headers.get("x-should-retry").and_then(|v| v.to_str().ok()).and_then(|v| {
            let v = v.trim();
            if v.eq_ignore_ascii_case("true") {
                Some(true)
            } else if v.eq_ignore_ascii_case("false") {
                Some(false)
            } else {
                None
            }
        });
        let wait = headers
            .get("retry-after-ms")
            .and_then(parse_retry_after_ms)
            .map(|d| (d, "retry-after-ms"))
            .or_else(|| {
                headers
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(parse_retry_after)
                    .map(|d| (d, "Retry-After"))
            });
        RetryAdvice { should_retry, wait }
    }
}

/// Parses `retry-after-ms` (not a standard header; the official OpenAI SDKs read it before
/// `Retry-After`): a number of milliseconds, fractions allowed. Not a number, negative or not
/// finite: `None` (`Retry-After` is read instead). A delay too long for a [`Duration`] is
/// [`Duration::MAX`].
pub fn parse_retry_after_ms(value: &reqwest::header::HeaderValue) -> Option<Duration> {
    let ms = value.to_str().ok()?.trim().parse::<f64>().ok()?;
    if !ms.is_finite() || ms < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::MAX))
}

/// Whether a response's `Content-Type` is JSON (`application/json` or a `+json` type, any
/// parameters, any case) rather than an event stream.
fn is_json(headers: &reqwest::header::HeaderMap) -> bool {
    let Some(value) = headers.get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

/// Parses `Retry-After`: delay seconds or an HTTP date (IMF-fixdate). A delay too long for a
/// [`Duration`] is [`Duration::MAX`] (longer than any limit, never a panic).
pub fn parse_retry_after(value: &reqwest::header::HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = text.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX));
        }
    }
    let at = parse_http_date(text)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` -> seconds since the Unix epoch.
fn parse_http_date(text: &str) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u64 = parts.next()?.parse().ok()?;
    let month_name = parts.next()?;
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        .iter()
        .position(|m| *m == month_name)? as u64
        + 1;
    // Four digits (a longer year overflowed the day count below).
    let year: i64 = parts.next()?.parse().ok().filter(|y| (0..=9999).contains(y))?;
    let mut hms = parts.next()?.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + (h * 3600 + m * 60 + s) as i64).ok()
}

/// Reads body chunks into `buf` under the size limit (counting what `buf` holds), the idle timeout
/// and the deadline, until the body ends (`Ok(true)`) or `enough(buf)` after a chunk
/// (`Ok(false)`). On an error `buf` holds what came.
async fn read_into(
    resp: &mut reqwest::Response,
    buf: &mut Vec<u8>,
    limit: usize,
    idle: Duration,
    deadline: Instant,
    enough: impl Fn(&[u8]) -> bool,
) -> Result<bool, AgentError> {
    loop {
        let until = deadline.min(Instant::now() + idle);
        match tokio::time::timeout_at(until, resp.chunk()).await {
            Err(_) => {
                return Err(if Instant::now() >= deadline {
                    AgentError::of(codes::PROVIDER_TIMEOUT, "total timeout reached while reading the body")
                } else {
                    AgentError::of(
                        codes::PROVIDER_TIMEOUT,
                        format!("idle timeout of {idle:?} reached while reading the body"),
                    )
                });
            }
            Ok(Err(e)) => {
                return Err(AgentError::of(
                    codes::PROVIDER_STREAM_INTERRUPTED,
                    format!("the body broke off after {} bytes: {}", buf.len(), error_chain(&e)),
                ));
            }
            Ok(Ok(None)) => return Ok(true),
            Ok(Ok(Some(chunk))) => {
                if buf.len() + chunk.len() > limit {
                    let take = limit.saturating_sub(buf.len());
                    buf.extend_from_slice(&chunk[..take]);
                    return Err(AgentError::of(
                        codes::PROVIDER_RESPONSE_TOO_LARGE,
                        format!(
                            "the response exceeds {limit} bytes; raw body starts: {}",
                            raw_excerpt_of_prefix(buf)
                        ),
                    ));
                }
                buf.extend_from_slice(&chunk);
                if enough(buf) {
                    return Ok(false);
                }
            }
        }
    }
}

impl OpenAiCompatibleClient {
    /// The answer of a 2xx response to a non-streamed request, or its error with the provider's
    /// error body when it was one (for [`body_retry_verdict`]).
    async fn answer(&self, resp: reqwest::Response, deadline: Instant) -> Result<ModelResponse, Failed> {
        let key = self.config.api_key.expose();
        let bytes = match self.read_answer(resp, deadline).await? {
            Answer::Whole(bytes) => bytes,
            Answer::Stream(state) => {
                // A gateway that streams whatever `stream` says, still streaming: the answer the
                // stream holds, read as a stream is (the limit after the finish reason too).
                log::debug!("provider: a non-streamed request is answered with an event stream");
                let mut state = *state;
                loop {
                    match state.next().await {
                        Some((Ok(ModelEvent::Finished(response)), _)) => return Ok(response),
                        Some((Ok(_), next)) => state = next,
                        Some((Err(error), state)) => {
                            return Err(Failed { error, detail: state.decoder.provider_error().cloned() })
                        }
                        None => {
                            return Err(Failed::bare(AgentError::of(
                                codes::PROVIDER_STREAM_INTERRUPTED,
                                "the event stream ended without finishing",
                            )))
                        }
                    }
                }
            }
        };
        if starts_as_event_stream(&bytes) == Some(true) {
            // A gateway that streams whatever `stream` says: the answer the stream holds.
            log::debug!("provider: a non-streamed request was answered with an event stream");
            let (events, decoder) = decode_whole_stream(&bytes);
            match events {
                Ok(events) => {
                    if let Some(ModelEvent::Finished(response)) = events.into_iter().last() {
                        return Ok(response);
                    }
                }
                Err(e) => {
                    let detail = decoder.provider_error().cloned();
                    return Err(Failed { error: redact_error(e, key), detail });
                }
            }
        }
        parse_response(&bytes)
            .map_err(|e| Failed { error: redact_error(e, key), detail: error_of_body(&bytes) })
    }

    /// The events of a 2xx response to a streamed request, once the first piece of the answer
    /// came (text, reasoning, a call, or the end): until then nothing is handed out, so an error
    /// the provider sends before it may be retried. A usage report before it is held back with
    /// it. An error after it is a stream item, never retried (the caller has part of the answer).
    async fn open_stream(&self, resp: reqwest::Response, deadline: Instant) -> Opened {
        if !is_json(resp.headers()) {
            return Opened::first_piece(StreamState::new(resp, deadline, self.config.clone())).await;
        }
        // A gateway that ignores `stream: true` (a whole `chat.completion`), or an error body
        // sent with a 200: read as a non-streamed answer, under the same limits. Its errors are
        // those of the call, not stream items.
        log::debug!("provider: a streamed request was answered with a JSON body");
        let key = self.config.api_key.expose();
        let bytes = match self.read_answer(resp, deadline).await {
            Err(failed) => return Opened::Failed(failed, None),
            Ok(Answer::Stream(state)) => {
                // An event stream mislabelled as JSON (some proxies), still coming.
                return Opened::first_piece(*state).await;
            }
            Ok(Answer::Whole(bytes)) => bytes,
        };
        if starts_as_event_stream(&bytes) == Some(true) {
            // An event stream mislabelled as JSON that ended in its first read: decoded as one.
            let (events, decoder) = decode_whole_stream(&bytes);
            return match events {
                Ok(events) => Opened::Ready(Box::pin(futures_util::stream::iter(events.into_iter().map(Ok)))),
                Err(e) => Opened::Failed(
                    Failed { error: redact_error(e, key), detail: decoder.provider_error().cloned() },
                    None,
                ),
            };
        }
        match parse_response(&bytes) {
            Ok(response) => {
                let events = ModelEvent::for_whole_answer(response).into_iter().map(Ok);
                Opened::Ready(Box::pin(futures_util::stream::iter(events)))
            }
            Err(e) => {
                Opened::Failed(Failed { error: redact_error(e, key), detail: error_of_body(&bytes) }, None)
            }
        }
    }
}

/// The error of an answer that came with a 2xx, and the provider's error body it is made of,
/// when it is one (what [`body_retry_verdict`] decides on).
struct Failed {
    error: AgentError,
    detail: Option<ProviderErrorDetail>,
}

impl Failed {
    /// An error that is not the provider's error body (a timeout, a broken or oversized body).
    fn bare(error: AgentError) -> Failed {
        Failed { error, detail: None }
    }
}

/// A streamed answer as [`OpenAiCompatibleClient::open_stream`] opened it.
enum Opened {
    /// Its events (the first piece of the answer included, or all of them).
    Ready(ModelEventStream),
    /// It failed before any piece of the answer came. With the events held back (usage reports),
    /// it failed as a stream (the error is handed out after them as an item, when not retried);
    /// with `None`, as a whole body (the error is the call's).
    Failed(Failed, Option<Vec<ModelEvent>>),
}

impl Opened {
    /// Reads `state` until the first piece of the answer or an error.
    async fn first_piece(mut state: StreamState) -> Opened {
        let mut held = Vec::new();
        loop {
            match state.next().await {
                None => return Opened::Ready(Box::pin(futures_util::stream::iter(held.into_iter().map(Ok)))),
                Some((Ok(event), next)) => {
                    let answer_began = !matches!(event, ModelEvent::Usage(_));
                    held.push(event);
                    if answer_began {
                        let rest = futures_util::stream::unfold(next, StreamState::next);
                        let events = futures_util::stream::iter(held.into_iter().map(Ok));
                        return Opened::Ready(Box::pin(futures_util::StreamExt::chain(events, rest)));
                    }
                    state = next;
                }
                Some((Err(error), state)) => {
                    let detail = state.decoder.provider_error().cloned();
                    return Opened::Failed(Failed { error, detail }, Some(held));
                }
            }
        }
    }
}

/// Decodes a whole event-stream body, keeping the decoder (for the provider's error).
fn decode_whole_stream(bytes: &[u8]) -> (Result<Vec<ModelEvent>, AgentError>, StreamDecoder) {
    let mut decoder = StreamDecoder::new();
    let mut events = Vec::new();
    let result = decoder.feed(bytes, &mut events).and_then(|_| decoder.finish(&mut events)).map(|()| events);
    (result, decoder)
}

#[async_trait]
impl ChatModel for OpenAiCompatibleClient {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        let deadline = Instant::now() + self.config.timeouts.total;
        // A model that answers only streamed requests is asked with one, and its answer read whole
        // from the stream (`answer` reads an event stream).
        let stream = self.config.quirks.stream_only;
        let renames = renames_of(request, &self.config.quirks)?;
        let body = self.body(request, stream)?;
        let mut retries = 0;
        loop {
            let resp = self.send(body.clone(), stream, deadline, &mut retries).await?;
            let advice = RetryAdvice::of(resp.headers());
            let failed = match self.answer(resp, deadline).await {
                Ok(mut response) => {
                    response_with_app_names(&mut response, &renames);
                    redact_response(&mut response, self.config.api_key.expose());
                    return Ok(response);
                }
                Err(failed) => failed,
            };
            let (error, wait) = body_retry_verdict(failed, advice)?;
            self.wait_to_retry(error, wait, &mut retries, deadline).await?;
        }
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        let deadline = Instant::now() + self.config.timeouts.total;
        let renames = renames_of(request, &self.config.quirks)?;
        let body = self.body(request, true)?;
        let mut retries = 0;
        loop {
            let resp = self.send(body.clone(), true, deadline, &mut retries).await?;
            let advice = RetryAdvice::of(resp.headers());
            let (failed, held) = match self.open_stream(resp, deadline).await {
                Opened::Ready(events) => {
                    let key = self.config.api_key.expose().to_string();
                    let events = futures_util::StreamExt::map(events, move |e| {
                        e.map(|e| redact_event(event_with_app_names(e, &renames), &key))
                    });
                    return Ok(Box::pin(events));
                }
                Opened::Failed(failed, held) => (failed, held),
            };
            let verdict = match body_retry_verdict(failed, advice) {
                Ok((error, wait)) => self.wait_to_retry(error, wait, &mut retries, deadline).await,
                Err(error) => Err(error),
            };
            let Err(error) = verdict else { continue };
            // Not retried: the error as it would have come without retries.
            return match held {
                None => Err(error),
                Some(held) => {
                    let events = held.into_iter().map(Ok).chain(std::iter::once(Err(error)));
                    Ok(Box::pin(futures_util::stream::iter(events)))
                }
            };
        }
    }
}

/// Why no retry may change an error of stable code `code` (`lasting`: it lasts until the account
/// is seen to, [`is_lasting`](ProviderErrorDetail::is_lasting)), when none may: the note its
/// error gets when a status or `x-should-retry` would have had it retried.
fn never_retried(code: &str, lasting: bool) -> Option<&'static str> {
    if lasting {
        Some("not retried: it lasts until the account is seen to")
    } else if code == codes::PROVIDER_CONTENT_FILTERED {
        Some("not retried: the provider's moderation refused it, and the same request meets the same filter")
    } else {
        None
    }
}

/// Whether a failed answer is retried, by the rules of the module docs in their order: an error
/// no retry may change never (`never`, the note saying why: [`never_retried`]), then
/// `x-should-retry`, then the status (`retried_status`). `Ok` with the wait the server asked for
/// when it is, `Err` with the error to return when not.
fn retry_verdict(
    error: AgentError,
    retried_status: bool,
    never: Option<&'static str>,
    advice: RetryAdvice,
) -> Result<(AgentError, AskedWait), AgentError> {
    match advice.should_retry {
        Some(false) if retried_status => {
            return Err(with_note(error, "not retried: the server said x-should-retry: false"))
        }
        Some(false) => return Err(error),
        None if !retried_status => return Err(error),
        Some(true) | None => {}
    }
    if let Some(why) = never {
        return Err(with_note(error, why));
    }
    Ok((error, advice.wait))
}

/// [`retry_verdict`] for the error of an answer sent with a 2xx: only an error body of the
/// provider's may be retried, as a response with the status it stands for
/// ([`equivalent_status`](ProviderErrorDetail::equivalent_status)) would be, under the headers
/// of the 2xx; any other error (a timeout, a broken or undecodable body) is not.
fn body_retry_verdict(failed: Failed, advice: RetryAdvice) -> Result<(AgentError, AskedWait), AgentError> {
    let Some(detail) = failed.detail else { return Err(failed.error) };
    let retried_status = detail
        .equivalent_status()
        .and_then(|s| reqwest::StatusCode::from_u16(s).ok())
        .is_some_and(is_retried_status);
    let never =
        never_retried(detail.stable_code().unwrap_or(codes::PROVIDER_HTTP_STATUS), detail.is_lasting());
    retry_verdict(failed.error, retried_status, never, advice)
}

/// A 2xx body as [`OpenAiCompatibleClient::read_answer`] read it.
enum Answer {
    /// The whole body.
    Whole(Vec<u8>),
    /// An event stream, its first bytes decoded, the rest still to read.
    Stream(Box<StreamState>),
}

/// The state of one streamed answer; dropping it drops the response and closes the connection.
struct StreamState {
    resp: Option<reqwest::Response>,
    decoder: StreamDecoder,
    pending: VecDeque<ModelEvent>,
    scratch: Vec<ModelEvent>,
    received: usize,
    deadline: Instant,
    /// The idle and total timeout of the whole stream: one timer, moved only when it fires before
    /// the limit now in force (chunks came since it was set), not a timer set and cancelled for
    /// every chunk. It never fires later than that limit: limits only move forward, but for the
    /// once the finish reason came (the smaller `after_finish` limit), when it is moved back.
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// While the answer looks complete: since when the limit after the finish reason counts. It
    /// starts when the answer first looks complete and starts again only when a usage report
    /// comes (what a complete answer may still gain); keep-alives (comments, blank lines, empty
    /// payloads and deltas, a repeated finish reason) do not move it. `None` otherwise.
    complete_since: Option<Instant>,
    /// While the bytes of an event are coming after the answer looked complete: `complete_since`
    /// as it was before they began. The limit counts from the latest of those bytes while they
    /// come (a usage chunk read a few bytes at a time is no keep-alive), and if the event turns
    /// out to be one (an empty payload, a named ping, an empty delta: no usage, no answer data),
    /// the limit from before it is put back: a keep-alive split across two reads extends the
    /// limit no more than a whole one.
    before_event: Option<Option<Instant>>,
    config: Arc<ClientConfig>,
}

impl StreamState {
    fn new(resp: reqwest::Response, deadline: Instant, config: Arc<ClientConfig>) -> StreamState {
        StreamState {
            resp: Some(resp),
            decoder: StreamDecoder::new(),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            received: 0,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline.min(Instant::now() + config.timeouts.idle))),
            complete_since: None,
            before_event: None,
            config,
        }
    }

    async fn next(mut self) -> Option<(Result<ModelEvent, AgentError>, StreamState)> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some((Ok(ev), self));
            }
            let resp = self.resp.as_mut()?;
            let mut idle = self.config.timeouts.idle;
            let after_finish = self.decoder.answer_looks_complete();
            let until = if after_finish {
                // The answer is complete: only the usage chunk and `[DONE]` may still come, within
                // the limit counted from the answer's completion or the last usage report (a
                // gateway that sends keep-alives every few seconds and never `[DONE]` does not hold
                // the answer until the idle or total limit). Not once answer data followed a
                // finish reason: this provider sends them early, and more calls may come after a
                // long pause, so the idle limit applies from the last bytes, keep-alives included.
                idle = idle.min(self.config.timeouts.after_finish);
                let since = *self.complete_since.get_or_insert_with(Instant::now);
                self.deadline.min(since + idle)
            } else {
                self.deadline.min(Instant::now() + idle)
            };
            let timer = &mut self.timer;
            if after_finish && timer.deadline() > until {
                // The one limit that moves back: the timer may be set for the idle limit.
                timer.as_mut().reset(until);
            }
            let chunk = loop {
                tokio::select! {
                    biased;
                    chunk = resp.chunk() => break Ok(chunk),
                    () = timer.as_mut() => {
                        if timer.deadline() >= until {
                            break Err(());
                        }
                        timer.as_mut().reset(until);
                    }
                }
            };
            let step = match chunk {
                Err(()) | Ok(Err(_)) if self.decoder.ends_on_finish_reason() => {
                    // The answer is complete (what is missing is at most the usage chunk and
                    // `[DONE]`): a gateway that stalls or breaks the connection instead of ending
                    // the body does not lose it.
                    log::warn!(
                        "provider: the stream stalled or sent only keep-alives ({idle:?}), or broke \
                         off, after its finish reason; the answer is complete"
                    );
                    self.decoder.finish(&mut self.scratch).map(|_| true)
                }
                Err(()) => Err(timeout_error(self.deadline, "idle", idle, self.config.timeouts.total)),
                Ok(Err(e)) => Err(AgentError::of(
                    codes::PROVIDER_STREAM_INTERRUPTED,
                    format!("the stream broke off after {} bytes: {}", self.received, error_chain(&e)),
                )),
                Ok(Ok(None)) => self.decoder.finish(&mut self.scratch).map(|_| true),
                Ok(Ok(Some(chunk))) => {
                    self.received += chunk.len();
                    if self.received > self.config.max_response_bytes {
                        Err(AgentError::of(
                            codes::PROVIDER_RESPONSE_TOO_LARGE,
                            format!("the stream exceeds {} bytes", self.config.max_response_bytes),
                        ))
                    } else {
                        let usage = self.decoder.usage();
                        let partial = self.decoder.pending_event_bytes();
                        let fed = self.decoder.feed(&chunk, &mut self.scratch);
                        let pending = self.decoder.pending_event_bytes();
                        if !self.decoder.answer_looks_complete() || self.decoder.usage() != usage {
                            // Not a keep-alive of a complete answer: the limit after the finish
                            // reason (if it applies) counts from now.
                            self.complete_since = None;
                            self.before_event = None;
                        } else if pending > partial {
                            // Bytes of an event still coming (the usage chunk read a few bytes
                            // at a time on a slow link, or a keep-alive split across reads): the
                            // limit counts from them for now.
                            self.before_event.get_or_insert(self.complete_since);
                            self.complete_since = None;
                        } else if pending == 0 {
                            if let Some(before) = self.before_event.take() {
                                // The event ended and was a keep-alive: no usage came and the
                                // answer still looks complete. The limit counts as before it.
                                self.complete_since = before;
                            }
                        }
                        fed
                    }
                }
            };
            self.pending.extend(self.scratch.drain(..));
            match step {
                Ok(false) => {}
                Ok(true) => self.resp = None,
                Err(e) => {
                    // Events completed before the failure are dropped with it: the answer is lost.
                    self.pending.clear();
                    self.resp = None;
                    return Some((Err(redact_error(e, self.config.api_key.expose())), self));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        let h = |s: &str| reqwest::header::HeaderValue::from_str(s).unwrap();
        assert_eq!(parse_retry_after(&h("3")), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(&h("0.25")), Some(Duration::from_millis(250)));
        assert_eq!(parse_retry_after(&h("Sun, 06 Nov 1994 08:49:37 GMT")), Some(Duration::ZERO));
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse_retry_after(&h("soon")), None);
        assert_eq!(parse_retry_after(&h("-1")), None);
        // Delays no Duration holds: longer than any limit, and no panic.
        assert_eq!(parse_retry_after(&h("20000000000000000000")), Some(Duration::MAX));
        assert_eq!(parse_retry_after(&h("1e300")), Some(Duration::MAX));
        assert_eq!(parse_retry_after(&h("Sun, 06 Nov 99999999999 08:49:37 GMT")), None);
        assert_eq!(parse_retry_after(&h("Sun, 06 Nov -99999999999999 08:49:37 GMT")), None);
        assert_eq!(parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT"), Some(253_402_300_799));
    }

    #[test]
    fn retry_after_ms_forms() {
        let h = |s: &str| reqwest::header::HeaderValue::from_str(s).unwrap();
        assert_eq!(parse_retry_after_ms(&h("250")), Some(Duration::from_millis(250)));
        assert_eq!(parse_retry_after_ms(&h(" 1.5 ")), Some(Duration::from_micros(1500)));
        assert_eq!(parse_retry_after_ms(&h("0")), Some(Duration::ZERO));
        assert_eq!(parse_retry_after_ms(&h("1e300")), Some(Duration::MAX));
        for bad in ["", "-1", "NaN", "inf", "-inf", "soon", "Sun, 06 Nov 1994 08:49:37 GMT"] {
            assert_eq!(parse_retry_after_ms(&h(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_advice_reads_both_headers() {
        let map = |pairs: &[(&'static str, &str)]| {
            let mut m = reqwest::header::HeaderMap::new();
            for (n, v) in pairs {
                m.insert(*n, reqwest::header::HeaderValue::from_str(v).unwrap());
            }
            RetryAdvice::of(&m)
        };
        assert_eq!(map(&[]), RetryAdvice { should_retry: None, wait: None });
        assert_eq!(map(&[("x-should-retry", "true")]).should_retry, Some(true));
        assert_eq!(map(&[("x-should-retry", " FALSE")]).should_retry, Some(false));
        assert_eq!(map(&[("x-should-retry", "yes")]).should_retry, None);
        let both = map(&[("retry-after", "7"), ("retry-after-ms", "20")]);
        assert_eq!(both.wait, Some((Duration::from_millis(20), "retry-after-ms")));
        let bad_ms = map(&[("retry-after", "7"), ("retry-after-ms", "x")]);
        assert_eq!(bad_ms.wait, Some((Duration::from_secs(7), "Retry-After")));
    }

    #[test]
    fn json_content_types() {
        let h = |v: &str| {
            let mut m = reqwest::header::HeaderMap::new();
            m.insert(reqwest::header::CONTENT_TYPE, reqwest::header::HeaderValue::from_str(v).unwrap());
            is_json(&m)
        };
        assert!(h("application/json"));
        assert!(h("Application/JSON; charset=utf-8"));
        assert!(h("application/problem+json"));
        assert!(!h("text/event-stream"));
        assert!(!h("text/event-stream; charset=utf-8"));
        assert!(!h("text/plain"));
        assert!(!h("application/jsonl"));
        assert!(!is_json(&reqwest::header::HeaderMap::new()));
    }

    #[test]
    fn redaction_replaces_the_key() {
        assert_eq!(redact_key("bad key sk-123456 here".into(), "sk-123456"), "bad key <redacted> here");
        assert_eq!(redact_key("short k".into(), "k"), "short k");
        assert_eq!(redact_key(r#"a\/b-123 and a/b-123"#.into(), "a/b-123"), "<redacted> and <redacted>");
    }

    #[test]
    fn a_key_spelt_with_percent_encoding_is_taken_out() {
        let key = "bce-v3/ALTAK-abc/SECRET9";
        for (text, want) in [
            ("denied for bce-v3%2FALTAK-abc%2FSECRET9", "denied for <redacted>"),
            ("denied for bce-v3%2fALTAK-abc%2fSECRET9.", "denied for <redacted>."),
            // Every byte encoded, or only some; twice, beside other escapes that are kept.
            ("k=%62%63%65%2D%76%33%2F%41LTAK-abc/SECRET9&x=%20%ZZ%", "k=<redacted>&x=%20%ZZ%"),
            ("a=bce-v3%2FALTAK-abc%2FSECRET9 b=bce-v3/ALTAK-abc%2fSECRET9", "a=<redacted> b=<redacted>"),
            // Escapes that spell no key, a cut key: kept as they are.
            ("bce-v3%2FALTAK-abc%2FSECRET", "bce-v3%2FALTAK-abc%2FSECRET"),
            ("caf%C3%A9 100%", "caf%C3%A9 100%"),
        ] {
            assert_eq!(redact_key(text.into(), key), want, "{text}");
        }
        // Form encoding writes a space as `+` (and a `+` as `%2B`); a key without a space keeps
        // its own `+` literal.
        let spaced = "key with space+plus";
        assert_eq!(redact_key("k=key+with%20space%2Bplus&n=1+2".into(), spaced), "k=<redacted>&n=1+2");
        assert_eq!(redact_key("k=ak%2Dplus+part".into(), "ak-plus+part"), "k=<redacted>");
        // A key too short to look for is not looked for.
        assert_eq!(redact_key("%61bcde".into(), "abcde"), "%61bcde");
    }

    #[test]
    fn a_key_spelt_with_json_escapes_is_taken_out() {
        let redacted = |text: &str, key: &str| {
            let mut text = text.to_string();
            redact_escaped_key(&mut text, key);
            text
        };
        let key = "sk-abc123";
        for (text, want) in [
            (r#"{"q":"\u0073k-abc\u00312\u0033"}"#, r#"{"q":"<redacted>"}"#),
            // A piece of arguments, not valid JSON; twice; a lone surrogate and bad escapes before.
            (r#"\ud800 \uZZ \"x\u0073k-abc123:sk-\u0061bc123"#, r#"\ud800 \uZZ \"x<redacted>:<redacted>"#),
            // Escapes that spell no key, an escaped backslash before `u`, no `\u`: kept as they are.
            (r#"{"q":"\u00e9 \\u0073k-abc123"}"#, r#"{"q":"\u00e9 \\u0073k-abc123"}"#),
            (r#"{"q":"sk-abc123\n"}"#, r#"{"q":"sk-abc123\n"}"#),
            ("\\u", "\\u"),
            ("\\", "\\"),
        ] {
            assert_eq!(redacted(text, key), want, "{text}");
        }
        // A key holding a character only another escape spells.
        assert_eq!(redacted(r#""key\twith tab""#, "key\twith tab"), r#""<redacted>""#);
        // A key too short to look for is not looked for.
        assert_eq!(redacted(r#""\u0061bcde""#, "abcde"), r#""\u0061bcde""#);
    }

    #[test]
    fn a_message_never_shows_the_start_of_the_key_where_an_excerpt_was_cut() {
        let key = "ak-1234.5678:secret/part";
        let cases = [
            // The cut in the second of two words, after the first, after a `.` of the key.
            ("Bearer ak-1234.5678:... (3000 bytes in all)", "Bearer <redacted>... (3000 bytes in all)"),
            ("xxak-1234.5...", "xx<redacted>..."),
            ("Bearer ak-1234....", "Bearer <redacted>..."),
            // The JSON-escaped form, and the whole key elsewhere in the message.
            (
                r#"{"k":"ak-1234.5678:secret\/p... (9 bytes in all) ak-1234.5678:secret/part"#,
                r#"{"k":"<redacted>... (9 bytes in all) <redacted>"#,
            ),
            // Three bytes stay: no more than a public prefix, and text that only ends like the key
            // is kept; so is a start of the key that no cut follows.
            ("ak-... (3000 bytes in all)", "ak-... (3000 bytes in all)"),
            ("ak-1234 is not cut", "ak-1234 is not cut"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_message(text.into(), key), want, "{text}");
        }
        // A key too short to look for is not looked for.
        assert_eq!(redact_message("abcd...".into(), "abcde"), "abcd...");
        // The key spelt with JSON escapes (an encoder that escapes characters), whole or cut.
        let key = "sk-abc123/xyz";
        for (text, want) in [
            (r#"raw body: {"d":"Bearer \u0073k-abc123\/xyz"}"#, r#"raw body: {"d":"Bearer <redacted>"}"#),
            (
                r#"raw body: {"d":"Bearer \u0073\u006b\u002d\u0061... (3000 bytes in all)"#,
                r#"raw body: {"d":"Bearer <redacted>... (3000 bytes in all)"#,
            ),
            (r#"{"d":"\u0073k-abc1\u0032..."#, r#"{"d":"<redacted>..."#),
            // The cut fell inside an escape's `u0073`: its `\` is left before the `...`.
            (
                r#"{"d":"\u0073\u006b\u002d\u0061\... (3000 bytes in all)"#,
                r#"{"d":"<redacted>... (3000 bytes in all)"#,
            ),
            // Escapes that spell no start of the key, and three bytes of it, are kept.
            (
                r#"{"d":"\u00e9 \u0073k-... (3000 bytes in all)"#,
                r#"{"d":"\u00e9 \u0073k-... (3000 bytes in all)"#,
            ),
        ] {
            assert_eq!(redact_message(text.into(), key), want, "{text}");
        }
    }
}
