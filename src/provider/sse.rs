//! A streaming Server-Sent-Events parser: bytes in (any split), events out.
//!
//! Follows the WHATWG event-stream rules that matter for model streams: lines end in CRLF, LF or
//! CR (a CRLF split across two reads counts once); lines starting with `:` are comments
//! (keep-alives such as `: OPENROUTER PROCESSING`); `data:` lines of one event are joined with
//! `\n`; an optional single space after the colon is dropped; a blank line dispatches the event;
//! `event:` names it; `id:` and `retry:` are ignored; a leading UTF-8 BOM is dropped. Bytes are
//! buffered until a line is complete, so a UTF-8 character split across reads is decoded whole.
//! At the end of the body a complete but undispatched event is still delivered (a missing final
//! blank line); an unterminated last line is dropped (it was cut off).

use crate::error::{codes, AgentError};

/// One dispatched event, borrowed from the parser's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` name, if one was given.
    pub event: Option<&'a str>,
    /// The data lines joined with `\n`.
    pub data: &'a str,
}

/// The incremental parser. Feed it bytes as they arrive.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    started: bool,
    data: String,
    has_data: bool,
    event: String,
    has_event: bool,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new()
    }
}

impl SseParser {
    /// A parser accepting events of up to 16 MiB.
    pub fn new() -> Self {
        SseParser::with_max_event_bytes(16 * 1024 * 1024)
    }

    /// A parser with another limit on one line or one event's data.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            started: false,
            data: String::new(),
            has_data: false,
            event: String::new(),
            has_event: false,
            max_event_bytes,
        }
    }

    /// Feeds bytes; calls `on_event` for every event completed by them.
    ///
    /// # Errors
    /// `provider_response_too_large` when a line or an event exceeds the limit; any error of
    /// `on_event` (parsing stops there).
    pub fn feed<F>(&mut self, bytes: &[u8], mut on_event: F) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
            self.after_cr = false;
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', rest) {
            let is_cr = rest[i] == b'\r';
            if self.line.is_empty() {
                self.process_line(&rest[..i], &mut on_event)?;
            } else {
                self.line.extend_from_slice(&rest[..i]);
                self.check_size(self.line.len())?;
                let line = std::mem::take(&mut self.line);
                let result = self.process_line(&line, &mut on_event);
                self.line = line;
                self.line.clear();
                result?;
            }
            let mut next = i + 1;
            if is_cr {
                if next < rest.len() {
                    if rest[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    self.after_cr = true;
                }
            }
            rest = &rest[next..];
        }
        if !rest.is_empty() {
            self.line.extend_from_slice(rest);
            self.check_size(self.line.len())?;
        }
        Ok(())
    }

    /// Ends the stream: delivers an event whose data lines were complete but whose blank line
    /// never came; drops an unterminated last line.
    ///
    /// # Errors
    /// Any error of `on_event`.
    pub fn finish<F>(&mut self, mut on_event: F) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        self.line.clear();
        self.after_cr = false;
        self.dispatch(&mut on_event)
    }

    /// True when bytes of an unfinished line are buffered.
    pub fn has_partial_line(&self) -> bool {
        !self.line.is_empty()
    }

    fn check_size(&self, n: usize) -> Result<(), AgentError> {
        if n > self.max_event_bytes {
            return Err(AgentError::of(
                codes::PROVIDER_RESPONSE_TOO_LARGE,
                format!("an SSE line or event exceeds {} bytes", self.max_event_bytes),
            ));
        }
        Ok(())
    }

    fn process_line<F>(&mut self, mut line: &[u8], on_event: &mut F) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        if !self.started {
            self.started = true;
            if let Some(stripped) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = stripped;
            }
        }
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, mut value) = match memchr::memchr(b':', line) {
            Some(c) => (&line[..c], &line[c + 1..]),
            None => (line, &b""[..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.has_data = true;
                self.check_size(self.data.len())?;
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&String::from_utf8_lossy(value));
                self.has_event = true;
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch<F>(&mut self, on_event: &mut F) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        let result = if self.has_data {
            let event =
                if self.has_event && !self.event.is_empty() { Some(self.event.as_str()) } else { None };
            on_event(SseEvent { event, data: &self.data })
        } else {
            Ok(())
        };
        self.data.clear();
        self.has_data = false;
        self.event.clear();
        self.has_event = false;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Vec<(Option<String>, String)> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |e| {
                out.push((e.event.map(str::to_string), e.data.to_string()));
                Ok(())
            })
            .unwrap();
        }
        p.finish(|e| {
            out.push((e.event.map(str::to_string), e.data.to_string()));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn line_endings_comments_and_fields() {
        let want = vec![(None, "a".to_string()), (Some("ping".to_string()), "x\ny".to_string())];
        assert_eq!(parse(&[b"data: a\n\n: keep-alive\n\nevent: ping\ndata: x\ndata:y\n\n"]), want);
        assert_eq!(parse(&[b"data: a\r\n\r\n:c\r\n\r\nevent: ping\r\ndata: x\r\ndata:y\r\n\r\n"]), want);
        assert_eq!(parse(&[b"data: a\r\r:c\r\revent: ping\rdata: x\rdata:y\r\r"]), want);
        assert_eq!(parse(&[b"data: a\r", b"\n\r", b"\nevent: ping\r\ndata: x\r\ndata:y\r\n\r\n"]), want);
        assert_eq!(parse(&[b"\xEF\xBB\xBFdata: a\n\nid: 3\nretry: 5\nevent: ping\ndata: x\ndata: y\n"]), {
            let mut w = want.clone();
            w[1].1 = "x\ny".into();
            w
        });
    }

    #[test]
    fn utf8_split_across_reads_and_unterminated_tail() {
        let s = "data: 你好\n\ndata: cut".as_bytes();
        let (a, b) = s.split_at(8); // inside the first character
        assert_eq!(parse(&[a, b]), vec![(None, "你好".to_string())]);
        assert_eq!(parse(&[b"data: one\n"]), vec![(None, "one".to_string())]);
        assert_eq!(parse(&[b"event: only\n\ndata\n\n"]), vec![(None, String::new())]);
    }

    #[test]
    fn oversized_lines_are_errors() {
        let mut p = SseParser::with_max_event_bytes(10);
        let e = p.feed(b"data: 0123456789abcdef", |_| Ok(())).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_RESPONSE_TOO_LARGE);
    }
}
