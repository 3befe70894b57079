//! The demo agent: the seeds' baking tools (read_baking_records, clear_baking_cache: dangerous) and
//! order tools (query_order, query_stock) with the mock data of the DevEco demo (entry-demo/): the
//! seeds' records and order, SKU001 bread flour 42 in stock, SKU002 out of stock, a cache of 12.
//!
//! Offline by default, on a built-in scripted model whose scenario shows a tool call, an unknown
//! tool, an invalid argument and an approval. Against a real OpenAI-compatible endpoint when
//! ARKAGENT_MODEL and an endpoint are set: ARKAGENT_BASE_URL, or ARKAGENT_PROVIDER naming a preset
//! (openai, deepseek, zhipu, qwen, moonshot; it also picks the preset's quirks; default custom),
//! whose URL is used when no ARKAGENT_BASE_URL is given. ARKAGENT_API_KEY is required for a
//! preset's own URL and optional with ARKAGENT_BASE_URL (a local keyless server sends none). Any
//! other combination of these variables is refused, naming what is missing, rather than run
//! offline; a variable set to a blank value counts as set and is refused, naming it.
//! ARKAGENT_STREAM=0 (or `--no-stream`) asks the model without streaming (Huawei MaaS needs it for
//! tools); ARKAGENT_ALLOW_INSECURE_HTTP=1 (or `--allow-insecure-http`) allows plain http:// to a
//! host other than loopback (a LAN gateway).
//!
//! ```text
//! cargo run --release --example assistant [-- [--approve|--deny|--later] [--resume] [--list] [--no-stream] [--allow-insecure-http] [--state-dir DIR] [--session ID] [PROMPT]]
//! ```
//! The approval is asked on the terminal; when stdin is not a terminal, `--approve` or `--deny`
//! decides (deny by default); `--later` leaves it pending and exits. State goes to `--state-dir`
//! (default `.arkagent-demo`), in the session `demo` offline and `live` against an endpoint (so
//! the scripted conversation never reaches a real model), unless `--session` names another; after
//! a suspension (Ctrl-C at the prompt, or a kill), `--resume` continues the session. `--list`
//! shows the conversations of the state directory (status, what each waits for, its first
//! question) and exits.
//!
//! Exit status: 0 when the run completed (or was left pending with `--later`, or there was
//! nothing to resume), 1 when it failed (the error on stderr) or the agent refused the request,
//! 2 for a bad option or configuration (incomplete or blank ARKAGENT_* variables, a refused URL:
//! insecure_url, an unknown preset...), 3 when the run ended without the model's answer
//! (max_rounds: the round limit's fallback answer, printed; loop_detected; aborted by a hook;
//! cancelled). The run's final text is printed when the streamed or printed answers did not show
//! it already (the max_rounds fallback, which no model wrote), never twice. When stdout is closed
//! (`| head`), the demo exits at once, quietly, with 0; the state is saved as the run went, and
//! `--resume` continues it.

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, RunOutcome};
use arkagent::hook::{AgentHook, HookContext};
use arkagent::provider::{
    ChatModel, ChatRequest, ClientConfig, ModelEventStream, ModelResponse, OpenAiCompatibleClient,
    ProviderPreset, ScriptedModel,
};
use arkagent::state::{FileStore, RunStatus};
use arkagent::tool::FnExecutor;
use arkagent::{
    codes, AgentError, CancellationSignal, ChatMessage, RiskLevel, ToolCall, ToolDefinition, ToolResult,
};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const DEFAULT_PROMPT: &str = "我的订单 20261010 到哪了？SKU001 还有货吗？顺便把烘焙缓存清空。";

fn args_str(args: &Map<String, Value>, key: &str) -> String {
    args.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn demo_tools(agent: &Agent) -> Result<(), AgentError> {
    let string_prop = |d: &str| json!({"type": "string", "description": d});
    agent.register_tool(
        ToolDefinition::new(
            "read_baking_records",
            "读取本地烘焙记录。可选参数 recordId：记录编号（r1、r2、r3），不传则返回全部。",
            json!({"type": "object", "properties": {"recordId": string_prop("记录编号")}}),
        ),
        Arc::new(FnExecutor(|args: Map<String, Value>, _ctx| async move {
            let records = [("r1", "法棍 500g"), ("r2", "吐司 680g"), ("r3", "贝果 320g")];
            let id = args_str(&args, "recordId");
            if id.is_empty() {
                let all: Vec<&str> = records.iter().map(|(_, r)| *r).collect();
                return Ok(ToolResult::text(all.join(", ")));
            }
            match records.iter().find(|(k, _)| *k == id) {
                Some((_, r)) => Ok(ToolResult::text(*r)),
                None => Ok(ToolResult::error_text(format!("unknown record: {id}"))),
            }
        })),
    )?;
    agent.register_tool(
        ToolDefinition::new(
            "clear_baking_cache",
            "清空本地烘焙缓存（危险操作，需用户确认）。",
            json!({"type": "object", "properties": {"confirm": string_prop("确认口令")}}),
        )
        .with_risk(RiskLevel::Dangerous),
        Arc::new(FnExecutor(|_args, _ctx| async move { Ok(ToolResult::text("已清空 12 条烘焙缓存")) })),
    )?;
    agent.register_tool(
        ToolDefinition::new(
            "query_order",
            "查询订单状态与物流信息。参数 order_id：订单号字符串，例如 \"20261010\"。",
            json!({"type": "object", "properties": {"order_id": string_prop("订单号")}, "required": ["order_id"]}),
        ),
        Arc::new(FnExecutor(|args: Map<String, Value>, _ctx| async move {
            let id = args_str(&args, "order_id");
            if id == "20261010" {
                Ok(ToolResult::json(json!({"status": "已发货", "logistics": "顺丰 SF123456", "eta": "2026-10-12"})))
            } else {
                Ok(ToolResult::error_text(format!("订单不存在: {id}")))
            }
        })),
    )?;
    agent.register_tool(
        ToolDefinition::new(
            "query_stock",
            "查询商品库存。参数 sku：商品编号，例如 \"SKU001\"。",
            json!({"type": "object", "properties": {"sku": string_prop("商品编号")}, "required": ["sku"]}),
        ),
        Arc::new(FnExecutor(|args: Map<String, Value>, _ctx| async move {
            let sku = args_str(&args, "sku");
            match sku.as_str() {
                "SKU001" => Ok(ToolResult::json(
                    json!({"sku": "SKU001", "name": "高筋面粉 5kg", "stock": 42, "warehouse": "上海"}),
                )),
                "SKU002" => Ok(ToolResult::json(
                    json!({"sku": "SKU002", "name": "烤盘", "stock": 0, "warehouse": "上海"}),
                )),
                _ => Ok(ToolResult::error_text(format!("未知商品: {sku}"))),
            }
        })),
    )?;
    Ok(())
}

fn turn(text: &str, calls: Vec<ToolCall>) -> ModelResponse {
    ModelResponse { content: Some(text.into()), ..ModelResponse::with_tool_calls(calls) }
}

/// The offline scenario. The answer is chosen by how many assistant messages the conversation
/// already has, so a resumed process continues the script where the killed one stopped.
struct DemoModel {
    script: Vec<ModelResponse>,
}

impl DemoModel {
    fn new() -> Self {
        let call = |id: &str, name: &str, args: &str| ToolCall::new(id, name, args);
        DemoModel {
            script: vec![
                turn(
                    "我先查一下订单、库存和物流。",
                    vec![
                        call("call_1", "query_order", r#"{"order_id":"20261010"}"#),
                        call("call_2", "query_stock", r#"{"sku":"SKU001"}"#),
                        call("call_3", "track_parcel", r#"{"order_id":"20261010"}"#),
                        call("call_4", "query_order", r#"{"order_id":20261010}"#),
                    ],
                ),
                turn(
                    "订单和库存已查到。接下来清空烘焙缓存，并读取烘焙记录。",
                    vec![
                        call("call_5", "clear_baking_cache", r#"{"confirm":"yes"}"#),
                        call("call_6", "read_baking_records", "{}"),
                    ],
                ),
                ModelResponse::text(
                    "订单 20261010 已发货（顺丰 SF123456，预计 2026-10-12 送达）；SKU001 高筋面粉在上海仓还有 42 件。\
                     烘焙缓存的处理结果见上方工具结果。",
                ),
            ],
        }
    }

    fn pick(&self, request: &ChatRequest) -> ModelResponse {
        // Assistant answers since the user's last message: each new prompt replays the scenario.
        let since =
            request.messages.iter().rposition(|m| matches!(m, ChatMessage::User { .. })).map_or(0, |i| i + 1);
        let answered =
            request.messages[since..].iter().filter(|m| matches!(m, ChatMessage::Assistant { .. })).count();
        self.script[answered.min(self.script.len() - 1)].clone()
    }
}

#[async_trait]
impl ChatModel for DemoModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        Ok(self.pick(request))
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        ScriptedModel::new([self.pick(request)]).with_chunk_chars(3).stream(request).await
    }
}

const USAGE: &str = "usage: assistant [--approve|--deny|--later] [--resume] [--list] [--no-stream] \
[--allow-insecure-http] [--state-dir DIR] [--session ID] [PROMPT]
  offline on a scripted model unless ARKAGENT_MODEL and ARKAGENT_BASE_URL (or ARKAGENT_PROVIDER
  naming a preset) are set; ARKAGENT_API_KEY, ARKAGENT_STREAM=0, ARKAGENT_ALLOW_INSECURE_HTTP=1
  (a variable set but blank is refused)
  exit status: 0 completed (or left pending), 1 failed or refused, 2 bad option or configuration
  (incomplete or blank ARKAGENT_* variables, a refused URL such as plain http to a LAN host),
  3 ended without the model's answer (max_rounds, loop_detected, aborted, cancelled)";

struct Options {
    approve: Option<bool>,
    later: bool,
    resume: bool,
    list: bool,
    help: bool,
    /// `--no-stream`; ARKAGENT_STREAM otherwise.
    no_stream: bool,
    /// `--allow-insecure-http`; ARKAGENT_ALLOW_INSECURE_HTTP otherwise.
    allow_insecure_http: bool,
    state_dir: String,
    /// `--session`; by default `demo` offline, `live` online ([`Options::session`]).
    session: Option<String>,
    prompt: Option<String>,
}

impl Options {
    /// The session the run uses: `--session`, or one per mode, so that the offline scenario's
    /// history (its scripted calls, a cache clearing pending) is never sent to a real model.
    fn session(&self, online: bool) -> String {
        self.session.clone().unwrap_or_else(|| if online { "live" } else { "demo" }.into())
    }
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        approve: None,
        later: false,
        resume: false,
        list: false,
        help: false,
        no_stream: false,
        allow_insecure_http: false,
        state_dir: ".arkagent-demo".into(),
        session: None,
        prompt: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--approve" => o.approve = Some(true),
            "--deny" => o.approve = Some(false),
            "--resume" => o.resume = true,
            "--list" => o.list = true,
            "--later" => o.later = true,
            "--no-stream" => o.no_stream = true,
            "--allow-insecure-http" => o.allow_insecure_http = true,
            "--state-dir" => o.state_dir = args.next().ok_or("--state-dir needs a directory")?,
            "--session" => o.session = Some(args.next().ok_or("--session needs an id")?),
            "-h" | "--help" => o.help = true,
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            _ if o.prompt.is_some() => return Err("one prompt only (quote it)".into()),
            other => o.prompt = Some(other.to_string()),
        }
    }
    if o.resume && o.prompt.is_some() {
        return Err("--resume continues the session as it stands and takes no prompt: \
                    ask without --resume (after the session's run has ended), or in another --session"
            .into());
    }
    Ok(o)
}

/// An ARKAGENT_* variable as it is set.
enum EnvVar {
    Unset,
    /// Set to nothing but whitespace (`ARKAGENT_MODEL=`, or `ARKAGENT_API_KEY=$KEY` with `KEY`
    /// unset): set, yet giving nothing, so refused rather than taken for unset.
    Blank,
    Value(String),
}

/// An ARKAGENT_* variable. Its value never goes into an error (it may be the API key).
///
/// # Errors
/// When it is set but not UTF-8.
fn env_var(name: &str) -> Result<EnvVar, String> {
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Ok(EnvVar::Blank),
        Ok(v) => Ok(EnvVar::Value(v)),
        Err(std::env::VarError::NotPresent) => Ok(EnvVar::Unset),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{name} is set but not valid UTF-8")),
    }
}

/// A yes/no ARKAGENT_* variable: `None` when unset.
///
/// # Errors
/// When set to anything else, blank included.
fn env_flag(name: &str) -> Result<Option<bool>, String> {
    match env_var(name)? {
        EnvVar::Unset => Ok(None),
        EnvVar::Blank => Err(format!("{name} is set but blank: expected 1 or 0, or unset it")),
        EnvVar::Value(v) => match v.trim().to_ascii_lowercase() {
            v if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(Some(true)),
            v if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(Some(false)),
            v => Err(format!("{name}={v}: expected 1 or 0")),
        },
    }
}

/// The model the ARKAGENT_* variables configure, with a label saying which it is and whether it
/// is a real endpoint; the scripted model when none of them is set.
///
/// # Errors
/// A message naming what is missing when the variables are set but incomplete, or set but blank
/// (never a silent offline run), or what is wrong with them (an unknown preset, a bad URL, plain
/// http://).
fn model_from_env(o: &Options, streaming: bool) -> Result<(Arc<dyn ChatModel>, String, bool), String> {
    let names = ["ARKAGENT_BASE_URL", "ARKAGENT_API_KEY", "ARKAGENT_MODEL", "ARKAGENT_PROVIDER"];
    let mut blank = Vec::new();
    let mut values = Vec::new();
    for name in names {
        values.push(match env_var(name)? {
            EnvVar::Unset => None,
            EnvVar::Blank => {
                blank.push(name);
                Some(String::new())
            }
            EnvVar::Value(v) => Some(v),
        });
    }
    let [url, key, model, provider]: [Option<String>; 4] = values.try_into().expect("four variables");
    if url.is_none() && key.is_none() && model.is_none() && provider.is_none() {
        return Ok((Arc::new(DemoModel::new()), "the built-in scripted model (offline)".into(), false));
    }
    // A blank variable is set (so the run is not offline) and missing as much as an unset one:
    // named first, as such.
    let mut missing: Vec<String> =
        blank.iter().map(|name| format!("{name} (set but blank: give it a value, or unset it)")).collect();
    let given = |v: Option<String>| v.filter(|v| !v.is_empty());
    let (url, key, model, provider) = (given(url), given(key), given(model), given(provider));
    let preset = match &provider {
        Some(p) => ProviderPreset::from_name(p).map_err(|e| format!("ARKAGENT_PROVIDER: {}", e.message))?,
        None => ProviderPreset::Custom,
    };
    let unnamed = |name: &str| !blank.contains(&name);
    if model.is_none() && unnamed("ARKAGENT_MODEL") {
        missing.push("ARKAGENT_MODEL".into());
    }
    if url.is_none() && preset.default_base_url().is_none() && unnamed("ARKAGENT_BASE_URL") {
        missing.push("ARKAGENT_BASE_URL (or ARKAGENT_PROVIDER naming a preset with its own URL)".into());
    }
    // A preset's own URL is a hosted service, which needs a key; a base URL given may be a local
    // server that takes none.
    if url.is_none() && key.is_none() && preset.default_base_url().is_some() && unnamed("ARKAGENT_API_KEY") {
        missing.push("ARKAGENT_API_KEY (needed by the preset's hosted endpoint)".into());
    }
    if !missing.is_empty() {
        return Err(format!(
            "incomplete endpoint configuration: missing {}; unset every ARKAGENT_* variable to run \
             offline on the scripted model",
            missing.join(", ")
        ));
    }
    let model = model.unwrap_or_default();
    let mut config = ClientConfig::new(preset, model.clone(), key.unwrap_or_default());
    if let Some(url) = url {
        config = config.with_base_url(url);
    }
    config.allow_insecure_http =
        o.allow_insecure_http || env_flag("ARKAGENT_ALLOW_INSECURE_HTTP")?.unwrap_or(false);
    let endpoint = config.endpoint().map_err(config_error)?;
    let keyless = if config.api_key.is_empty() { ", no API key" } else { "" };
    let streamed = if streaming { "streamed" } else { "not streamed" };
    let label = format!("{model} at {endpoint} (online, {streamed}{keyless})");
    let client = OpenAiCompatibleClient::new(config).map_err(config_error)?;
    Ok((Arc::new(client), label, true))
}

/// A refused client configuration, with the demo's own way round an `insecure_url` (the library's
/// message names the native config's and Rust's settings, not the demo's flag and variable).
fn config_error(e: AgentError) -> String {
    if e.code == codes::INSECURE_URL {
        format!(
            "{e}\n  the demo allows it with --allow-insecure-http or ARKAGENT_ALLOW_INSECURE_HTTP=1 \
             (the key and the conversation then go unencrypted: a trusted LAN only)"
        )
    } else {
        e.to_string()
    }
}

/// True while streamed text has not ended its line.
static MID_LINE: AtomicBool = AtomicBool::new(false);

/// The text of the model's answer shown last, streamed or printed by [`PrintAnswers`]: the run's
/// final text is printed at its end only when it is not this one (the max_rounds fallback, which
/// no model wrote, or an answer given before a `--resume`), so an answer never shows twice.
static SHOWN_ANSWER: Mutex<String> = Mutex::new(String::new());
/// True once the streamed answer has ended (its calls ran, the run stopped...): the next text
/// delta starts another answer.
static ANSWER_ENDED: AtomicBool = AtomicBool::new(true);

fn shown_answer() -> std::sync::MutexGuard<'static, String> {
    SHOWN_ANSWER.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes to stdout; when the reader has gone (`assistant | head -3`), exits at once and quietly:
/// nothing more can be shown, and the state is saved as the run went (`--resume` continues it).
fn show(write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = write(&mut out).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}

/// `println!` through [`show`].
macro_rules! say {
    ($($arg:tt)*) => { show(|out| writeln!(out, $($arg)*)) };
}

/// Prints events readably as they happen.
fn print_event(event: AgentEvent) {
    show(|out| write_event(out, event));
}

fn write_event(out: &mut impl Write, event: AgentEvent) -> std::io::Result<()> {
    if !matches!(event, AgentEvent::TextDelta { .. }) && MID_LINE.swap(false, Ordering::Relaxed) {
        writeln!(out)?;
    }
    // What is streamed of one answer: its text, its reasoning and its calls; anything else comes
    // after it.
    if !matches!(
        event,
        AgentEvent::TextDelta { .. }
            | AgentEvent::ReasoningDelta { .. }
            | AgentEvent::ToolCallStarted { .. }
            | AgentEvent::ToolCallArgumentsDelta { .. }
            | AgentEvent::ToolCallFinished { .. }
    ) {
        ANSWER_ENDED.store(true, Ordering::Relaxed);
    }
    match event {
        AgentEvent::TextDelta { delta } => {
            MID_LINE.store(true, Ordering::Relaxed);
            let mut shown = shown_answer();
            if ANSWER_ENDED.swap(false, Ordering::Relaxed) {
                shown.clear();
            }
            shown.push_str(&delta);
            write!(out, "{delta}")
        }
        AgentEvent::ToolCallFinished { call, .. } => write_call(out, &call),
        AgentEvent::ToolResult { name, result, .. } => {
            let mark = if result.is_error { "✗" } else { "✓" };
            writeln!(out, "  {mark} {name} → {}", result.to_model_text())
        }
        AgentEvent::ApprovalRequired { batch } => {
            writeln!(out, "  ⏸  需要确认（已保存，可安全退出后用 --resume 继续）:")?;
            for item in &batch.items {
                writeln!(
                    out,
                    "     - {} {} ({:?}): {}",
                    item.tool_call.name, item.tool_call.arguments, item.risk_level, item.reason
                )?;
            }
            Ok(())
        }
        AgentEvent::RunFinished { status, final_text, .. } => {
            if let Some(text) = final_text.filter(|t| !t.trim().is_empty()) {
                let mut shown = shown_answer();
                if shown.trim() != text.trim() {
                    writeln!(out, "{text}")?;
                    *shown = text;
                }
            }
            writeln!(out, "[run finished: {status:?}]")
        }
        _ => Ok(()),
    }
}

fn write_call(out: &mut impl Write, call: &ToolCall) -> std::io::Result<()> {
    writeln!(out, "  🔧 {} {}", call.name, call.arguments)
}

/// Prints each answer of a model asked without streaming, which sends no text or call events:
/// its text and its calls, as the streamed events show them.
struct PrintAnswers;

#[async_trait]
impl AgentHook for PrintAnswers {
    async fn after_model_response(&self, _ctx: &HookContext<'_>, response: &ModelResponse) {
        let text = response.content.as_deref().filter(|t| !t.is_empty());
        *shown_answer() = text.unwrap_or_default().to_string();
        show(|out| {
            if let Some(text) = text {
                writeln!(out, "{text}")?;
            }
            response.tool_calls.iter().try_for_each(|call| write_call(out, call))
        });
    }
}

fn ask(question: &str, flag: Option<bool>) -> bool {
    if let Some(decision) = flag {
        say!("  {question} {}", if decision { "yes (--approve)" } else { "no (--deny)" });
        return decision;
    }
    if !std::io::stdin().is_terminal() {
        say!("  {question} no (stdin is not a terminal; pass --approve to approve)");
        return false;
    }
    show(|out| write!(out, "  {question} [y/N] "));
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    matches!(line.trim(), "y" | "Y" | "yes")
}

async fn decide_and_resume(
    agent: &Agent,
    o: &Options,
    session: &str,
    mut outcome: RunOutcome,
) -> Result<RunOutcome, AgentError> {
    let sink = print_event;
    while let RunOutcome::Suspended { batch } = &outcome {
        if o.later {
            say!("  left pending (--later): continue with --resume");
            return Ok(outcome);
        }
        for item in batch.pending_items() {
            let q = format!("执行 {} {}？", item.tool_call.name, item.tool_call.arguments);
            if ask(&q, o.approve) {
                agent.approve(session, &item.approval_id).await?;
            } else {
                agent.deny(session, &item.approval_id, "用户拒绝了操作").await?;
            }
        }
        outcome = agent.resume(session, &sink, &CancellationSignal::new()).await?;
    }
    Ok(outcome)
}

/// `--list`: the conversations of the state directory, one line each, and what to do with them.
async fn list_conversations(agent: &Agent, o: &Options) -> Result<(), AgentError> {
    let sessions = agent.list_sessions().await?;
    say!("{} conversation(s) in {}", sessions.len(), o.state_dir);
    for s in sessions {
        let what = match (&s.error, s.status) {
            (Some(e), _) => format!("unreadable ({})", e.code),
            // Another process holds it (runs or decides it): --resume would be session_busy.
            _ if s.busy => "busy: in use by another process".into(),
            _ if s.approval_pending => "awaiting approval: --resume to decide".into(),
            _ if s.interrupted => "interrupted: --resume to continue".into(),
            (None, Some(status)) => format!("{status:?}"),
            (None, None) => "unknown".into(),
        };
        let title = s.title.as_deref().unwrap_or("");
        say!("  {:<12} {what:<38} {:>3} msg  {title}", s.session_id, s.message_count);
    }
    Ok(())
}

/// How the demo ends: its exit status (see the module's docs).
enum Exit {
    Ok,
    /// 1: the run failed, or the agent refused what was asked (the message on stderr).
    Failed(String),
    /// 2: a bad option or an incomplete configuration.
    Usage(String),
    /// 3: the run ended without the model's answer.
    NoAnswer(RunStatus),
}

async fn main_async(o: Options) -> Exit {
    let streaming = match env_flag("ARKAGENT_STREAM") {
        Ok(stream) => !o.no_stream && stream.unwrap_or(true),
        Err(e) => return Exit::Usage(e),
    };
    let (model, label, online) = match model_from_env(&o, streaming) {
        Ok(m) => m,
        Err(e) => return Exit::Usage(e),
    };
    let session = o.session(online);
    let store = Arc::new(FileStore::new(&o.state_dir));
    let config = AgentConfig {
        system_prompt: Some("你是烘焙店的助手。需要事实时调用工具，不要编造。".into()),
        streaming,
        ..AgentConfig::default()
    };
    let mut builder = AgentBuilder::new(model, store).config(config);
    if !streaming {
        builder = builder.hook(Arc::new(PrintAnswers));
    }
    let agent = builder.build();
    let result = async {
        demo_tools(&agent)?;
        if o.list {
            list_conversations(&agent, &o).await?;
            return Ok(Exit::Ok);
        }
        say!("arkagent demo — model: {label}; state: {}/{session}", o.state_dir);
        run_session(&agent, &o, &session).await
    }
    .await;
    result.unwrap_or_else(|e| {
        let hint = if e.code == codes::APPROVAL_PENDING {
            format!(
                "\n  the session {session} waits for a decision on its last run: continue it with \
                 --resume (with --approve or --deny when stdin is not a terminal), or ask in another \
                 session with --session ID"
            )
        } else {
            String::new()
        };
        Exit::Failed(format!("{e}{hint}"))
    })
}

async fn run_session(agent: &Agent, o: &Options, session: &str) -> Result<Exit, AgentError> {
    let cancel = CancellationSignal::new();
    let sink = print_event;
    let outcome = if o.resume {
        match agent.state(session).await? {
            Some(s) if s.status == RunStatus::AwaitingApproval => {
                let batch = s.pending_approval.clone().expect("awaiting approval has a batch");
                say!("resuming a suspended run ({} item(s) waiting)", batch.items.len());
                RunOutcome::Suspended { batch }
            }
            Some(s) if s.status == RunStatus::Running => agent.resume(session, &sink, &cancel).await?,
            Some(s) => {
                say!("nothing to resume: the session is {:?}", s.status);
                return Ok(Exit::Ok);
            }
            None => return Ok(Exit::Failed(format!("no session {session} in {}", o.state_dir))),
        }
    } else {
        let prompt = o.prompt.clone().unwrap_or_else(|| DEFAULT_PROMPT.to_string());
        say!("> {prompt}");
        agent.run(session, &prompt, &sink, &cancel).await?
    };
    Ok(match decide_and_resume(agent, o, session, outcome).await? {
        RunOutcome::Finished { status: RunStatus::Completed, .. } | RunOutcome::Suspended { .. } => Exit::Ok,
        RunOutcome::Finished { status, error: Some(e), .. } if status == RunStatus::Failed => {
            Exit::Failed(format!("run ended {status:?}: {e}"))
        }
        RunOutcome::Finished { status, error, .. } => {
            if let Some(e) = error {
                eprintln!("run ended {status:?}: {e}");
            }
            Exit::NoAnswer(status)
        }
    })
}

fn main() {
    let options = match parse_options() {
        Ok(o) if o.help => {
            say!("{USAGE}");
            return;
        }
        Ok(o) => o,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let _ = arkagent::logging::init(arkagent::logging::LogConfig::default());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let exit = match runtime {
        Ok(rt) => rt.block_on(main_async(options)),
        Err(e) => Exit::Failed(format!("cannot start the runtime: {e}")),
    };
    match exit {
        Exit::Ok => {}
        Exit::Failed(message) => {
            eprintln!("error: {message}");
            std::process::exit(1);
        }
        Exit::Usage(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
        Exit::NoAnswer(status) => {
            eprintln!("the run ended without the model's answer: {status:?}");
            std::process::exit(3);
        }
    }
}
