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
    /// An event made of one `data:` line that lies whole in `bytes` (the usual shape of a model
    /// stream) is handed out borrowed from `bytes`, checked as UTF-8 together with the other
    /// complete lines of `bytes` (one check per read); other events are assembled in the parser's
    /// buffer. A line that is not valid UTF-8 is decoded lossily (each
    /// bad sequence becomes U+FFFD) either way.
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
        // The data of the event being read, while it is one line of `bytes` (else `self.data`).
        let mut pending: Option<&str> = None;
        let result = self.feed_lines(rest, &mut pending, &mut on_event);
        // What is left of it waits in the buffer for the rest of the event.
        self.keep_pending(pending);
        result
    }

    fn feed_lines<'b, F>(
        &mut self,
        mut rest: &'b [u8],
        pending: &mut Option<&'b str>,
        on_event: &mut F,
    ) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        // The complete lines of this read, checked as UTF-8 at once (a character never spans a
        // line end, which is ASCII); `None` when they hold a bad sequence (each line is then
        // checked alone, and decoded lossily if it is the bad one) or there is no line end.
        let mut text =
            memchr::memrchr2(b'\n', b'\r', rest).and_then(|end| std::str::from_utf8(&rest[..=end]).ok());
        loop {
            // A line end right away (the blank line after each data line) needs no search.
            let i = match rest.first() {
                Some(b'\n' | b'\r') => 0,
                _ => match memchr::memchr2(b'\n', b'\r', rest) {
                    Some(i) => i,
                    None => break,
                },
            };
            let is_cr = rest[i] == b'\r';
            if self.line.is_empty() {
                match self.classify(&rest[..i]) {
                    Line::Data(value) if !self.has_data && pending.is_none() => {
                        // The value ends the line: its text is `text[i - len..i]`.
                        let checked = text.and_then(|t| t.get(i - value.len()..i)).ok_or(());
                        match checked.or_else(|()| std::str::from_utf8(value).map_err(|_| ())) {
                            Ok(data) => {
                                self.check_size(data.len())?;
                                *pending = Some(data);
                            }
                            Err(()) => self.push_data(pending.take(), value)?,
                        }
                    }
                    line => self.apply(line, pending.take(), on_event)?,
                }
            } else {
                // The end of a line begun in an earlier read.
                self.line.extend_from_slice(&rest[..i]);
                self.check_size(self.line.len())?;
                let line = std::mem::take(&mut self.line);
                let kind = self.classify(&line);
                let result = self.apply(kind, pending.take(), on_event);
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
            text = text.and_then(|t| t.get(next..));
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
        self.dispatch(None, &mut on_event)
    }

    /// The bytes of the event being read that are buffered, not yet handed out: its data so far,
    /// its `event:` name (counted as one byte more than its length, so an empty name counts too)
    /// and an unfinished line, unless that line is a comment (`:`, a keep-alive). It grows while
    /// an event comes in pieces, which a client tells from silence, and is 0 only between events
    /// (an event's `event:` line complete but not its data is still an event being read).
    pub fn pending_event_bytes(&self) -> usize {
        let line = if self.line.first() == Some(&b':') { 0 } else { self.line.len() };
        let name = if self.has_event { self.event.len() + 1 } else { 0 };
        line + name + if self.has_data { self.data.len() } else { 0 }
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

    /// What one complete line (without its end) is; drops the stream's leading BOM.
    fn classify<'l>(&mut self, mut line: &'l [u8]) -> Line<'l> {
        if !self.started {
            self.started = true;
            if let Some(stripped) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = stripped;
            }
        }
        // The usual line, without a search for its colon.
        if let Some(value) = line.strip_prefix(b"data:") {
            return Line::Data(value.strip_prefix(b" ").unwrap_or(value));
        }
        if line.is_empty() {
            return Line::Blank;
        }
        if line[0] == b':' {
            return Line::Ignored;
        }
        let (field, mut value) = match memchr::memchr(b':', line) {
            Some(c) => (&line[..c], &line[c + 1..]),
            None => (line, &b""[..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match field {
            b"data" => Line::Data(value),
            b"event" => Line::Event(value),
            _ => Line::Ignored,
        }
    }

    /// Acts on one line; `pending` is the borrowed data of the event so far, if any.
    fn apply<F>(&mut self, line: Line<'_>, pending: Option<&str>, on_event: &mut F) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        match line {
            Line::Blank => return self.dispatch(pending, on_event),
            Line::Data(value) => self.push_data(pending, value)?,
            Line::Event(value) => {
                self.keep_pending(pending);
                self.event.clear();
                self.event.push_str(&String::from_utf8_lossy(value));
                self.has_event = true;
            }
            Line::Ignored => self.keep_pending(pending),
        }
        Ok(())
    }

    /// Moves borrowed data into the event buffer (a line follows that is not its end).
    fn keep_pending(&mut self, pending: Option<&str>) {
        if let Some(data) = pending {
            self.data.push_str(data);
            self.has_data = true;
        }
    }

    /// Appends a data line to the event buffer.
    fn push_data(&mut self, pending: Option<&str>, value: &[u8]) -> Result<(), AgentError> {
        self.keep_pending(pending);
        if self.has_data {
            self.data.push('\n');
        }
        // (`from_utf8` first: faster than the lossy decoder on the usual valid line.)
        match std::str::from_utf8(value) {
            Ok(text) => self.data.push_str(text),
            Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
        }
        self.has_data = true;
        self.check_size(self.data.len())
    }

    fn dispatch<F>(&mut self, pending: Option<&str>, on_event: &mut F) -> Result<(), AgentError>
    where
        F: FnMut(SseEvent<'_>) -> Result<(), AgentError>,
    {
        let data = match pending {
            Some(data) => Some(data),
            None => self.has_data.then_some(self.data.as_str()),
        };
        let result = match data {
            Some(data) => {
                let event =
                    if self.has_event && !self.event.is_empty() { Some(self.event.as_str()) } else { None };
                on_event(SseEvent { event, data })
            }
            None => Ok(()),
        };
        self.data.clear();
        self.has_data = false;
        self.event.clear();
        self.has_event = false;
        result
    }
}

/// One complete line, as far as the parser cares.
enum Line<'l> {
    /// An empty line: dispatches the event.
    Blank,
    /// A `data:` value.
    Data(&'l [u8]),
    /// An `event:` value.
    Event(&'l [u8]),
    /// A comment, `id:`, `retry:` or an unknown field.
    Ignored,
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
    fn pending_event_bytes_grow_while_an_event_comes_not_for_comments() {
        let mut p = SseParser::new();
        let mut sizes = Vec::new();
        for piece in
            [&b": keep"[..], b"-alive\n\n", b"data: {\"a\"", b":1}\n", b"\n", b"data: x\ndat", b"a: y\n\n"]
        {
            p.feed(piece, |_| Ok(())).unwrap();
            sizes.push(p.pending_event_bytes());
        }
        assert_eq!(sizes, [0, 0, 10, 7, 0, 4, 0]);
        // An event named before its data: between its lines it is still being read.
        let mut sizes = Vec::new();
        for piece in [
            &b"event: ping
"[..],
            b": note
",
            b"data: {}
",
            b"
",
            b"event:
",
            b"
",
        ] {
            p.feed(piece, |_| Ok(())).unwrap();
            sizes.push(p.pending_event_bytes());
        }
        assert_eq!(sizes, [5, 5, 7, 0, 1, 0]);
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
    fn one_line_events_borrowed_and_the_rest_buffered_read_alike() {
        // One `data:` line per event (borrowed from the read), several lines, an `event:` before
        // or after the data, comments and unknown fields between data lines: all as before.
        let body = b"data: {\"a\":1}\n\ndata: x\r\ndata: y\r\n\r\nevent: e\ndata: one\n\ndata: two\nevent: f\n\ndata: p\n: note\nid: 7\ndata: q\n\n";
        let want = vec![
            (None, "{\"a\":1}".to_string()),
            (None, "x\ny".to_string()),
            (Some("e".to_string()), "one".to_string()),
            (Some("f".to_string()), "two".to_string()),
            (None, "p\nq".to_string()),
        ];
        assert_eq!(parse(&[body]), want);
        // Every split of the body gives the same events.
        for cut in 0..=body.len() {
            assert_eq!(parse(&[&body[..cut], &body[cut..]]), want, "cut at {cut}");
        }
    }

    #[test]
    fn invalid_utf8_is_decoded_lossily_in_one_line_and_multi_line_events() {
        let want = vec![(None, "a\u{FFFD}b".to_string()), (None, "c\nd\u{FFFD}".to_string())];
        assert_eq!(parse(&[b"data: a\xFFb\n\ndata: c\ndata: d\xC3\n\n"]), want);
        // A cut sequence stays invalid whatever the split.
        assert_eq!(parse(&[b"data: a\xFF", b"b\n\ndata: c\ndata: d\xC3", b"\n\n"]), want);
        // The borrowed event ends at the end of a read: kept for the blank line of the next.
        assert_eq!(parse(&[b"data: \xE4\xBD\xA0\n", b"\n"]), vec![(None, "你".to_string())]);
    }

    #[test]
    fn a_bad_line_among_good_ones_and_a_character_cut_after_the_last_line_end() {
        // The lines of a read are checked as UTF-8 at once; with a bad one among them, each is
        // checked alone: only the bad one changes.
        let want: Vec<(Option<String>, String)> =
            ["ok", "a\u{FFFD}b", "你", "x"].iter().map(|d| (None, d.to_string())).collect();
        assert_eq!(parse(&[b"data: ok\n\ndata: a\xFFb\n\ndata: \xE4\xBD\xA0\n\ndata:x\n\n"]), want);
        // A character cut at the end of a read, after complete lines: they are read, the cut line
        // waits for the rest of its bytes.
        let want: Vec<(Option<String>, String)> =
            ["one", "你好"].iter().map(|d| (None, d.to_string())).collect();
        assert_eq!(parse(&[b"data: one\n\ndata: \xE4\xBD\xA0\xE5", b"\xA5\xBD\n\n"]), want);
        assert_eq!(parse(&[b"data: one\r\n\r\ndata: \xE4", b"\xBD\xA0\xE5\xA5\xBD\r\n\r\n"]), want);
    }

    #[test]
    fn data_fields_read_without_a_search_for_the_colon_are_the_same() {
        // One space after the colon is dropped, not two; `data` needs its colon to be followed by
        // the value; `dataX:` is another field.
        let want: Vec<(Option<String>, String)> =
            ["x", " two", "", "b"].iter().map(|d| (None, d.to_string())).collect();
        assert_eq!(parse(&[b"data:x\n\ndata:  two\n\ndata:\n\ndataX: a\ndata: b\n\n"]), want);
    }

    #[test]
    fn the_limit_holds_for_borrowed_and_buffered_events() {
        // 11 bytes: one line, two lines, four invalid bytes that become 12.
        for body in
            [&b"data: 0123456789a\n\n"[..], b"data: 01234\ndata: 56789\n\n", b"data: \xFF\xFF\xFF\xFF\n\n"]
        {
            let mut p = SseParser::with_max_event_bytes(10);
            let e = p.feed(body, |_| Ok(())).unwrap_err();
            assert_eq!(e.code, codes::PROVIDER_RESPONSE_TOO_LARGE, "{body:?}");
        }
        let mut p = SseParser::with_max_event_bytes(10);
        let mut got = Vec::new();
        p.feed(b"data: 0123456789\n\ndata: 01234\ndata: 5678\n\n", |e| {
            got.push(e.data.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, ["0123456789", "01234\n5678"]);
    }

    /// A plain reading of the rules on the whole body, line by line, every data line copied.
    fn reference(body: &[u8]) -> Vec<(Option<String>, String)> {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < body.len() {
            if body[i] == b'\n' || body[i] == b'\r' {
                lines.push(&body[start..i]);
                if body[i] == b'\r' && body.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            i += 1;
        }
        let (mut out, mut data, mut event): (Vec<_>, Option<String>, Option<String>) = (vec![], None, None);
        for line in lines {
            if line.is_empty() {
                if let Some(d) = data.take() {
                    out.push((event.take().filter(|e| !e.is_empty()), d));
                }
                event = None;
                continue;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(c) => (&line[..c], &line[c + 1..]),
                None => (line, &b""[..]),
            };
            let value = String::from_utf8_lossy(value.strip_prefix(b" ").unwrap_or(value)).into_owned();
            match field {
                b"data" => data = Some(data.map_or(value.clone(), |d| d + "\n" + &value)),
                b"event" => event = Some(value),
                _ => {}
            }
        }
        if let Some(d) = data {
            out.push((event.filter(|e| !e.is_empty()), d));
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn any_split_reads_as_the_plain_reference(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                &b"data: {\"x\":1}"[..], b"data:y", b"data", b"event: e", b"event:", b": c", b"id: 1",
                b"\n", b"\r", b"\r\n", b"\n\n", b"\xC3", b"\xA9", b"\xFF", b"\xEF\xBB\xBF", b" ", b"data: ",
            ]), 0..40),
            cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            let body: Vec<u8> = parts.concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for c in cuts.into_iter().chain(std::iter::once(body.len())) {
                pieces.push(&body[start..c]);
                start = c;
            }
            proptest::prop_assert_eq!(parse(&pieces), reference(&body));
        }
    }

    #[test]
    fn oversized_lines_are_errors() {
        let mut p = SseParser::with_max_event_bytes(10);
        let e = p.feed(b"data: 0123456789abcdef", |_| Ok(())).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_RESPONSE_TOO_LARGE);
    }
}
