//! A deterministic, local, OpenAI-compatible chat-completions server for the end-to-end benchmark
//! (`scripts/bench.sh`): it plays one fixed tool-calling conversation to any client.
//!
//! ```text
//! cargo run --release --example mock_openai -- [--port N] [--rounds R] [--port-file PATH]
//! ```
//!
//! It binds 127.0.0.1 (port 0 by default: the kernel picks one), prints `listening on
//! 127.0.0.1:PORT` on stdout (and writes the port to `--port-file`), and serves
//! `POST …/chat/completions` over HTTP/1.1 with keep-alive, a thread per connection.
//!
//! # The conversation
//! The state is derived from the request alone, so any client plays it: the round is the number of
//! `assistant` messages already in `messages`. While that number is below R, the answer is one
//! assistant turn with 3 calls of the tool [`TOOL_NAME`] (6-property schema,
//! `benches/e2e/tool_schema.json`), arguments distinct per call (so no loop detector fires), streamed in
//! 8-character deltas; at round R the answer is a final text, streamed in 8-character deltas too.
//! R is the `--rounds` value (default 20) unless the request's model name ends in `-r<digits>`
//! (`bench-r200` plays 200 rounds), so one server serves every run.
//!
//! A request that does not carry one `tool` message per call so far (3 per past round) gets a
//! 400 with an OpenAI-style error: a client that skips a tool result cannot pass for a fast one.
//! `"stream": true` gets an SSE body (chunked), with a usage chunk when
//! `stream_options.include_usage` is set; otherwise one `chat.completion` JSON body.
//!
//! The server counts requests and answers `GET /stats` with `{"requests":N,"rejected":M}`.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The one tool of the conversation.
pub const TOOL_NAME: &str = "record_reading";
/// Calls per round.
pub const CALLS_PER_ROUND: usize = 3;
/// Characters per streamed delta.
pub const DELTA_CHARS: usize = 8;

/// The arguments of call `i` of round `round` (distinct for every call).
fn arguments(round: usize, i: usize) -> String {
    json!({
        "station": format!("ST-{:03}", i + 1),
        "day": "2026-11-30",
        "seq": round * CALLS_PER_ROUND + i,
        "unit": if i.is_multiple_of(2) { "celsius" } else { "fahrenheit" },
        "verified": i != 1,
        "note": format!("round {round} call {i}")
    })
    .to_string()
}

fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(DELTA_CHARS).map(|c| c.iter().collect()).collect()
}

struct Stats {
    requests: AtomicU64,
    rejected: AtomicU64,
}

struct Config {
    default_rounds: usize,
}

fn main() {
    let mut port = 0u16;
    let mut rounds = 20usize;
    let mut port_file: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{a} needs a value")));
        match a.as_str() {
            "--port" => port = value().parse().unwrap_or_else(|_| usage("bad --port")),
            "--rounds" => rounds = value().parse().unwrap_or_else(|_| usage("bad --rounds")),
            "--port-file" => port_file = Some(value()),
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap_or_else(|e| {
        eprintln!("mock_openai: bind 127.0.0.1:{port}: {e}");
        std::process::exit(1)
    });
    let addr = listener.local_addr().expect("local addr");
    if let Some(path) = port_file {
        std::fs::write(&path, addr.port().to_string()).expect("write port file");
    }
    println!("listening on {addr}");
    let _ = std::io::stdout().flush();
    let stats = Arc::new(Stats { requests: AtomicU64::new(0), rejected: AtomicU64::new(0) });
    let config = Arc::new(Config { default_rounds: rounds });
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let stats = Arc::clone(&stats);
        let config = Arc::clone(&config);
        std::thread::spawn(move || {
            let _ = serve(stream, &config, &stats);
        });
    }
}

fn usage(why: &str) -> ! {
    eprintln!("mock_openai: {why}\nusage: mock_openai [--port N] [--rounds R] [--port-file PATH]");
    std::process::exit(2)
}

/// One connection: requests until the client closes it.
fn serve(stream: TcpStream, config: &Config, stats: &Stats) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = BufWriter::with_capacity(64 * 1024, stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let request_line = line.trim_end().to_string();
        if request_line.is_empty() {
            continue;
        }
        let mut content_length = 0usize;
        let mut close = false;
        let mut chunked = false;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => content_length = value.parse().unwrap_or(0),
                    "connection" => close = value.eq_ignore_ascii_case("close"),
                    "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                    _ => {}
                }
            }
        }
        let body =
            if chunked { read_chunked(&mut reader)? } else { read_exact(&mut reader, content_length)? };
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("");
        let path = parts.next().unwrap_or("");
        if method == "GET" && path.ends_with("/stats") {
            let s = json!({
                "requests": stats.requests.load(Ordering::Relaxed),
                "rejected": stats.rejected.load(Ordering::Relaxed)
            });
            write_full(&mut out, 200, "application/json", s.to_string().as_bytes(), close)?;
        } else if method == "POST" && path.ends_with("/chat/completions") {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            match answer(&body, config) {
                Ok(Answer::Stream(events)) => write_stream(&mut out, &events, close)?,
                Ok(Answer::Full(v)) => {
                    write_full(&mut out, 200, "application/json", v.to_string().as_bytes(), close)?
                }
                Err(message) => {
                    stats.rejected.fetch_add(1, Ordering::Relaxed);
                    eprintln!("mock_openai: rejected a request: {message}");
                    let e =
                        json!({"error": {"message": message, "type": "invalid_request_error", "code": null}});
                    write_full(&mut out, 400, "application/json", e.to_string().as_bytes(), close)?;
                }
            }
        } else {
            write_full(&mut out, 404, "text/plain", b"not found", close)?;
        }
        out.flush()?;
        if close {
            return Ok(());
        }
    }
}

fn read_exact(reader: &mut impl Read, len: usize) -> std::io::Result<Vec<u8>> {
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    Ok(body)
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_text = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            // Trailers until the empty line.
            loop {
                let mut l = String::new();
                if reader.read_line(&mut l)? == 0 || l.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        body.extend(read_exact(reader, size)?);
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

fn write_full(
    out: &mut impl Write,
    status: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        _ => "Not Found",
    };
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
        body.len(),
        if close { "close" } else { "keep-alive" }
    )?;
    out.write_all(body)
}

fn write_stream(out: &mut impl Write, events: &[String], close: bool) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: {}\r\n\r\n",
        if close { "close" } else { "keep-alive" }
    )?;
    for data in events {
        let frame = format!("data: {data}\n\n");
        write!(out, "{:x}\r\n{frame}\r\n", frame.len())?;
    }
    out.write_all(b"0\r\n\r\n")
}

enum Answer {
    Stream(Vec<String>),
    Full(Value),
}

/// The answer to one request body (or why it is rejected).
fn answer(body: &[u8], config: &Config) -> Result<Answer, String> {
    let request: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let messages = request["messages"].as_array().ok_or("no messages array")?;
    let model = request["model"].as_str().unwrap_or("mock").to_string();
    let rounds = rounds_of(&model).unwrap_or(config.default_rounds);
    let round = messages.iter().filter(|m| m["role"] == "assistant").count();
    let tool_messages = messages.iter().filter(|m| m["role"] == "tool").count();
    if tool_messages != round * CALLS_PER_ROUND {
        return Err(format!(
            "round {round}: expected {} tool messages, got {tool_messages}",
            round * CALLS_PER_ROUND
        ));
    }
    let has_tool =
        request["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == TOOL_NAME));
    if round < rounds && !has_tool {
        return Err(format!("the request does not offer the tool {TOOL_NAME}"));
    }
    let stream = request["stream"].as_bool().unwrap_or(false);
    let include_usage = request["stream_options"]["include_usage"].as_bool().unwrap_or(false);
    let usage =
        json!({"prompt_tokens": 100 + 40 * round, "completion_tokens": 30, "total_tokens": 130 + 40 * round});
    let id = format!("chatcmpl-bench-{round}");
    let created = 1_764_460_800u64;
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
        .to_string()
    };
    if round < rounds {
        let calls: Vec<(String, String)> =
            (0..CALLS_PER_ROUND).map(|i| (format!("call_{round}_{i}"), arguments(round, i))).collect();
        if !stream {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|(cid, a)| json!({"id": cid, "type": "function", "function": {"name": TOOL_NAME, "arguments": a}}))
                .collect();
            return Ok(Answer::Full(json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": tool_calls},
                             "finish_reason": "tool_calls"}],
                "usage": usage
            })));
        }
        let mut events = vec![chunk(json!({"role": "assistant", "content": null}), Value::Null)];
        for (i, (cid, a)) in calls.iter().enumerate() {
            events.push(chunk(
                json!({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                       "function": {"name": TOOL_NAME, "arguments": ""}}]}),
                Value::Null,
            ));
            for piece in pieces(a) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        events.push(chunk(json!({}), json!("tool_calls")));
        finish_stream(&mut events, include_usage, &id, created, &model, usage);
        Ok(Answer::Stream(events))
    } else {
        let text =
            format!("All {rounds} rounds are recorded: {} readings in total.", rounds * CALLS_PER_ROUND);
        if !stream {
            return Ok(Answer::Full(json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage
            })));
        }
        let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
        for piece in pieces(&text) {
            events.push(chunk(json!({"content": piece}), Value::Null));
        }
        events.push(chunk(json!({}), json!("stop")));
        finish_stream(&mut events, include_usage, &id, created, &model, usage);
        Ok(Answer::Stream(events))
    }
}

fn finish_stream(
    events: &mut Vec<String>,
    include_usage: bool,
    id: &str,
    created: u64,
    model: &str,
    usage: Value,
) {
    if include_usage {
        events.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": usage})
            .to_string(),
        );
    }
    events.push("[DONE]".to_string());
}

/// R from a model name ending in `-r<digits>`.
fn rounds_of(model: &str) -> Option<usize> {
    let (_, tail) = model.rsplit_once("-r")?;
    tail.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(round: usize, tool_messages: usize, stream: bool) -> Vec<u8> {
        let mut messages =
            vec![json!({"role": "system", "content": "s"}), json!({"role": "user", "content": "go"})];
        for r in 0..round {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": []}));
            for i in 0..CALLS_PER_ROUND {
                if r * CALLS_PER_ROUND + i < tool_messages {
                    messages.push(
                        json!({"role": "tool", "tool_call_id": format!("call_{r}_{i}"), "content": "{}"}),
                    );
                }
            }
        }
        json!({"model": "bench-r3", "stream": stream, "stream_options": {"include_usage": true},
               "messages": messages, "tools": [{"type": "function", "function": {"name": TOOL_NAME}}]})
        .to_string()
        .into_bytes()
    }

    fn config() -> Config {
        Config { default_rounds: 20 }
    }

    fn events(body: &[u8]) -> Vec<Value> {
        let Ok(Answer::Stream(events)) = answer(body, &config()) else { panic!("expected a stream") };
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).expect("chunk is JSON")).collect()
    }

    #[test]
    fn a_tool_round_streams_three_calls_in_8_char_deltas() {
        let chunks = events(&request(1, 3, true));
        let mut args = vec![String::new(); CALLS_PER_ROUND];
        let mut ids = Vec::new();
        for c in &chunks {
            for call in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
                let i = call["index"].as_u64().unwrap() as usize;
                if let Some(id) = call["id"].as_str() {
                    ids.push(id.to_string());
                    assert_eq!(call["function"]["name"], TOOL_NAME);
                }
                let piece = call["function"]["arguments"].as_str().unwrap();
                assert!(piece.chars().count() <= DELTA_CHARS, "delta {piece:?}");
                args[i].push_str(piece);
            }
        }
        assert_eq!(ids, ["call_1_0", "call_1_1", "call_1_2"]);
        let finish: Vec<&Value> =
            chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
        assert_eq!(finish, [&json!("tool_calls")]);
        assert!(chunks.last().unwrap()["usage"]["total_tokens"].is_u64());
        let schema: Value = serde_json::from_str(include_str!("../benches/e2e/tool_schema.json")).unwrap();
        let required = schema["required"].as_array().unwrap();
        let mut seqs = Vec::new();
        for a in &args {
            let v: Value = serde_json::from_str(a).expect("assembled arguments are JSON");
            let obj = v.as_object().unwrap();
            assert_eq!(obj.len(), 6);
            assert!(required.iter().all(|k| obj.contains_key(k.as_str().unwrap())));
            seqs.push(v["seq"].as_u64().unwrap());
        }
        assert_eq!(seqs, [3, 4, 5], "arguments differ per call");
    }

    #[test]
    fn the_round_after_the_last_is_the_final_answer() {
        let chunks = events(&request(3, 9, true));
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(text, "All 3 rounds are recorded: 9 readings in total.");
        assert!(chunks.iter().all(|c| c["choices"][0]["delta"]["tool_calls"].is_null()));
    }

    #[test]
    fn a_missing_tool_result_is_rejected() {
        let Err(why) = answer(&request(2, 5, true), &config()) else { panic!("expected a rejection") };
        assert!(why.contains("expected 6 tool messages, got 5"), "{why}");
    }

    #[test]
    fn unstreamed_requests_get_one_completion() {
        let Ok(Answer::Full(v)) = answer(&request(0, 0, false), &config()) else { panic!("expected JSON") };
        assert_eq!(v["choices"][0]["message"]["tool_calls"].as_array().unwrap().len(), CALLS_PER_ROUND);
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn rounds_come_from_the_model_name() {
        assert_eq!(rounds_of("bench-r200"), Some(200));
        assert_eq!(rounds_of("gpt-4o"), None);
    }
}
