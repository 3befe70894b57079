//! A local, fault-injecting, OpenAI-compatible HTTP/1.1 server for tests and benches.
//!
//! Share it with `#[path = "support/mock_server.rs"] mod mock_server;` from any file in `tests/`
//! (or `#[path = "../tests/support/mock_server.rs"]` from `benches/`). It needs only tokio (and
//! tokio-rustls for [`MockServer::start_tls`]). It binds 127.0.0.1:0, answers each request with
//! the next scripted [`Reply`] (a 404 when the script is empty), closes the connection after each
//! reply, records every request (method, path, headers, body), and counts connections the client
//! abandoned (a write failed, or the client closed while the server held the request).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// One `chat.completion.chunk` payload of a streamed answer: its choice's `delta` and
/// `finish_reason`.
pub fn chunk(delta: serde_json::Value, finish: Option<&str>) -> serde_json::Value {
    serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// How a streamed reply ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The terminating chunk, then close.
    Complete,
    /// Close without the terminating chunk (a truncated chunked body).
    Truncate,
    /// Reset the TCP connection (RST) without the terminating chunk.
    Reset,
    /// Keep the connection open without the terminating chunk until the client goes away.
    Stall,
}

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A whole response with `Content-Length`.
    Full { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// A 200 `text/event-stream` with a chunked body: each part is one chunk, `delay` before each.
    Stream { parts: Vec<Vec<u8>>, delay: Duration, end: End },
    /// Read the request and never answer (until the client goes away).
    Hang,
    /// A 200 JSON response of `len` bytes (`Content-Length`), written in 64 KiB pieces.
    Large { len: usize },
    /// A 200 event stream writing `part` every `every`, forever (until the client goes away).
    Endless { part: Vec<u8>, every: Duration },
    /// A 200 event stream: `parts` as [`Reply::Stream`] writes them (`delay` before each), then
    /// `ping` every `every`, forever (until the client goes away): a gateway that sends
    /// keep-alives after the answer instead of ending the body.
    Pinging { parts: Vec<Vec<u8>>, delay: Duration, ping: Vec<u8>, every: Duration },
    /// Close the connection right after reading the request.
    Close,
    /// Reset the connection (RST) right after reading the request.
    ResetAtOnce,
    /// These bytes exactly (status line, headers, body: any framing, any content type), then
    /// close.
    Verbatim(Vec<u8>),
    /// A 200 with this `Content-Type` (none when `None`) and a chunked body: each part is one
    /// chunk, `delay` before each (an HTML page, a JSON body or an event stream mislabelled).
    StreamAs { content_type: Option<String>, parts: Vec<Vec<u8>>, delay: Duration, end: End },
}

impl Reply {
    /// A JSON response.
    pub fn json(status: u16, body: &serde_json::Value) -> Reply {
        Reply::Full {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// A response with a raw body.
    pub fn raw(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full { status, headers: Vec::new(), body: body.into() }
    }

    /// The same reply with one more header (only for `Full`).
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Full { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// An SSE body in one chunk, ended properly.
    pub fn sse(body: &[u8]) -> Reply {
        Reply::Stream { parts: vec![body.to_vec()], delay: Duration::ZERO, end: End::Complete }
    }

    /// A streamed answer of these `chat.completion.chunk` payloads ([`chunk`]), then `[DONE]`.
    pub fn sse_chunks(chunks: &[serde_json::Value]) -> Reply {
        let mut out = String::new();
        for c in chunks {
            out.push_str(&format!("data: {c}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        Reply::sse(out.as_bytes())
    }

    /// A streamed text answer: `text`, then the finish reason `stop`.
    pub fn sse_text(text: &str) -> Reply {
        Reply::sse_chunks(&[
            chunk(serde_json::json!({"role": "assistant", "content": text}), None),
            chunk(serde_json::json!({}), Some("stop")),
        ])
    }

    /// An SSE body cut into pieces of `size` bytes, `delay` apart.
    pub fn sse_in_pieces(body: &[u8], size: usize, delay: Duration, end: End) -> Reply {
        Reply::Stream { parts: body.chunks(size.max(1)).map(<[u8]>::to_vec).collect(), delay, end }
    }

    /// An OpenAI-style error body.
    pub fn error(status: u16, code: &str, message: &str) -> Reply {
        Reply::json(
            status,
            &serde_json::json!({"error": {"message": message, "type": "test_error", "code": code}}),
        )
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `POST`...
    pub method: String,
    /// `/v1/chat/completions`...
    pub path: String,
    /// Header names in lower case, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    aborted: AtomicUsize,
    aborted_notify: Notify,
    connections: AtomicUsize,
}

/// The server. Dropping it stops accepting.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl MockServer {
    /// Binds 127.0.0.1:0 and serves these replies in order.
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        MockServer::start_on(listener, replies)
    }

    /// Serves on an already bound listener.
    pub fn start_on(listener: TcpListener, replies: impl IntoIterator<Item = Reply>) -> MockServer {
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared::default());
        shared.replies.lock().unwrap().extend(replies);
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                s.connections.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                tokio::spawn(async move {
                    let mut stream = stream;
                    if serve(&mut stream, &s).await == Ending::Reset {
                        #[allow(deprecated)]
                        let _ = stream.set_linger(Some(Duration::ZERO));
                    }
                    drop(stream);
                });
            }
        });
        MockServer { addr, shared, accept }
    }

    /// Binds 127.0.0.1:0 and serves TLS (HTTP/1.1 inside) with this acceptor.
    pub async fn start_tls(
        acceptor: tokio_rustls::TlsAcceptor,
        replies: impl IntoIterator<Item = Reply>,
    ) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared::default());
        shared.replies.lock().unwrap().extend(replies);
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                s.connections.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(stream).await {
                        serve(&mut tls, &s).await;
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        MockServer { addr, shared, accept }
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/v1`, a base URL for the client.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Appends a reply to the script.
    pub fn push(&self, reply: Reply) {
        self.shared.replies.lock().unwrap().push_back(reply);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// TCP connections accepted so far (a TLS handshake that failed counts too).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Connections the client abandoned while the server was still answering.
    pub fn aborted(&self) -> usize {
        self.shared.aborted.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` connections were abandoned; false on timeout.
    pub async fn wait_aborted(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.aborted_notify.notified();
            if self.aborted() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.aborted() >= n;
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Ending {
    Close,
    Reset,
}

fn mark_aborted(shared: &Shared) {
    shared.aborted.fetch_add(1, Ordering::SeqCst);
    shared.aborted_notify.notify_waiters();
}

async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<RecordedRequest> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(len);
    Some(RecordedRequest { method, path, headers, body })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, shared: &Shared) -> Ending {
    let Some(request) = read_request(stream).await else {
        return Ending::Close;
    };
    shared.requests.lock().unwrap().push(request);
    let reply = shared.replies.lock().unwrap().pop_front();
    let reply =
        reply.unwrap_or_else(|| Reply::error(404, "no_scripted_reply", "the mock server script is empty"));
    let result: std::io::Result<Ending> = async {
        match reply {
            Reply::Full { status, headers, body } => {
                let mut head = format!("HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nConnection: close\r\n", reason(status), body.len());
                for (n, v) in headers {
                    head.push_str(&format!("{n}: {v}\r\n"));
                }
                head.push_str("\r\n");
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&body).await?;
                stream.flush().await?;
                Ok(Ending::Close)
            }
            Reply::Stream { parts, delay, end } => {
                stream.write_all(STREAM_HEAD.as_bytes()).await?;
                stream.flush().await?;
                write_parts(stream, parts, delay, end).await
            }
            Reply::StreamAs { content_type, parts, delay, end } => {
                let mut head = String::from("HTTP/1.1 200 OK\r\n");
                if let Some(t) = content_type {
                    head.push_str(&format!("Content-Type: {t}\r\n"));
                }
                head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
                stream.write_all(head.as_bytes()).await?;
                stream.flush().await?;
                write_parts(stream, parts, delay, end).await
            }
            Reply::Verbatim(bytes) => {
                stream.write_all(&bytes).await?;
                stream.flush().await?;
                Ok(Ending::Close)
            }
            Reply::Hang => {
                // Hold the request until the client goes away (read returns 0 or fails).
                let mut tmp = [0u8; 1024];
                loop {
                    match stream.read(&mut tmp).await {
                        Ok(0) | Err(_) => return Err(std::io::Error::other("client went away")),
                        Ok(_) => {}
                    }
                }
            }
            Reply::Large { len } => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
                stream.write_all(head.as_bytes()).await?;
                let prefix = br#"{"choices":[{"message":{"content":""#;
                stream.write_all(prefix).await?;
                let piece = vec![b'x'; 64 * 1024];
                let mut left = len.saturating_sub(prefix.len());
                while left > 0 {
                    let n = left.min(piece.len());
                    stream.write_all(&piece[..n]).await?;
                    left -= n;
                }
                stream.flush().await?;
                Ok(Ending::Close)
            }
            Reply::Endless { part, every } => {
                stream.write_all(STREAM_HEAD.as_bytes()).await?;
                loop {
                    write_chunk(stream, &part).await?;
                    tokio::time::sleep(every).await;
                }
            }
            Reply::Pinging { parts, delay, ping, every } => {
                stream.write_all(STREAM_HEAD.as_bytes()).await?;
                stream.flush().await?;
                for part in parts {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    write_chunk(stream, &part).await?;
                }
                loop {
                    tokio::time::sleep(every).await;
                    write_chunk(stream, &ping).await?;
                }
            }
            Reply::Close => Ok(Ending::Close),
            Reply::ResetAtOnce => Ok(Ending::Reset),
        }
    }
    .await;
    match result {
        Ok(ending) => ending,
        Err(_) => {
            mark_aborted(shared);
            Ending::Close
        }
    }
}

const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";

/// Writes the chunks of a streamed body and ends it as `end` says.
async fn write_parts<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    parts: Vec<Vec<u8>>,
    delay: Duration,
    end: End,
) -> std::io::Result<Ending> {
    for part in parts {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        write_chunk(stream, &part).await?;
    }
    match end {
        End::Complete => {
            stream.write_all(b"0\r\n\r\n").await?;
            stream.flush().await?;
            Ok(Ending::Close)
        }
        End::Truncate => Ok(Ending::Close),
        End::Reset => Ok(Ending::Reset),
        End::Stall => {
            let mut tmp = [0u8; 1024];
            loop {
                match stream.read(&mut tmp).await {
                    Ok(0) | Err(_) => return Err(std::io::Error::other("client went away")),
                    Ok(_) => {}
                }
            }
        }
    }
}

async fn write_chunk<S: AsyncWrite + Unpin>(stream: &mut S, part: &[u8]) -> std::io::Result<()> {
    if part.is_empty() {
        return Ok(());
    }
    stream.write_all(format!("{:x}\r\n", part.len()).as_bytes()).await?;
    stream.write_all(part).await?;
    stream.write_all(b"\r\n").await?;
    stream.flush().await
}
