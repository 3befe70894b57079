//! The demo agent: the seeds' baking tools (read_baking_records, clear_baking_cache: dangerous) and
//! order tools (query_order, query_stock) with their mock data.
//!
//! Offline by default, on a built-in scripted model whose scenario shows a tool call, an unknown
//! tool, an invalid argument and an approval. Against a real OpenAI-compatible endpoint when
//! ARKAGENT_BASE_URL, ARKAGENT_API_KEY and ARKAGENT_MODEL are set (ARKAGENT_PROVIDER picks a
//! preset's quirks: openai, deepseek, zhipu, qwen, moonshot; default custom).
//!
//! ```text
//! cargo run --release --example assistant [-- [--approve|--deny|--later] [--resume] [--list] [--state-dir DIR] [--session ID] [PROMPT]]
//! ```
//! The approval is asked on the terminal; when stdin is not a terminal, `--approve` or `--deny`
//! decides (deny by default); `--later` leaves it pending and exits. State goes to `--state-dir` (default `.arkagent-demo`); after a
//! suspension (Ctrl-C at the prompt, or a kill), `--resume` continues the session. `--list` shows the
//! conversations of the state directory (status, what each waits for, its first question) and exits.

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, RunOutcome};
use arkagent::provider::{
    ChatModel, ChatRequest, ClientConfig, ModelEventStream, ModelResponse, OpenAiCompatibleClient,
    ProviderPreset, ScriptedModel,
};
use arkagent::state::{FileStore, RunStatus};
use arkagent::tool::FnExecutor;
use arkagent::{
    AgentError, CancellationSignal, ChatMessage, RiskLevel, ToolCall, ToolDefinition, ToolResult,
};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
        Arc::new(FnExecutor(|_args, _ctx| async move { Ok(ToolResult::text("已清空 3 条烘焙缓存")) })),
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
                "SKU001" => Ok(ToolResult::json(json!({"sku": "SKU001", "name": "法棍", "stock": 12}))),
                "SKU002" => Ok(ToolResult::json(json!({"sku": "SKU002", "name": "吐司", "stock": 0}))),
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
                    "订单 20261010 已发货（顺丰 SF123456，预计 2026-10-12 送达）；SKU001 法棍还有 12 件。\
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

struct Options {
    approve: Option<bool>,
    later: bool,
    resume: bool,
    list: bool,
    state_dir: String,
    session: String,
    prompt: Option<String>,
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        approve: None,
        later: false,
        resume: false,
        list: false,
        state_dir: ".arkagent-demo".into(),
        session: "demo".into(),
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
            "--state-dir" => o.state_dir = args.next().ok_or("--state-dir needs a directory")?,
            "--session" => o.session = args.next().ok_or("--session needs an id")?,
            "-h" | "--help" => return Err("usage: assistant [--approve|--deny|--later] [--resume] [--list] [--state-dir DIR] [--session ID] [PROMPT]".into()),
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            other => o.prompt = Some(other.to_string()),
        }
    }
    Ok(o)
}

fn model_from_env() -> Result<(Arc<dyn ChatModel>, String), AgentError> {
    let (url, key, model) = (
        std::env::var("ARKAGENT_BASE_URL"),
        std::env::var("ARKAGENT_API_KEY"),
        std::env::var("ARKAGENT_MODEL"),
    );
    match (url, key, model) {
        (Ok(url), Ok(key), Ok(model)) if !url.is_empty() && !model.is_empty() => {
            let preset = match std::env::var("ARKAGENT_PROVIDER") {
                Ok(p) if !p.is_empty() => ProviderPreset::from_name(&p)?,
                _ => ProviderPreset::Custom,
            };
            let config = ClientConfig::new(preset, model.clone(), key).with_base_url(url);
            let label = format!("{} at {}", model, config.endpoint()?);
            Ok((Arc::new(OpenAiCompatibleClient::new(config)?), label))
        }
        _ => Ok((Arc::new(DemoModel::new()), "the built-in scripted model (offline)".into())),
    }
}

/// True while streamed text has not ended its line.
static MID_LINE: AtomicBool = AtomicBool::new(false);

/// Prints events readably as they happen.
fn print_event(event: AgentEvent) {
    let mut out = std::io::stdout().lock();
    let _ = write_event(&mut out, event);
    let _ = out.flush();
}

fn write_event(out: &mut impl Write, event: AgentEvent) -> std::io::Result<()> {
    if !matches!(event, AgentEvent::TextDelta { .. }) && MID_LINE.swap(false, Ordering::Relaxed) {
        writeln!(out)?;
    }
    match event {
        AgentEvent::TextDelta { delta } => {
            MID_LINE.store(true, Ordering::Relaxed);
            write!(out, "{delta}")
        }
        AgentEvent::ToolCallFinished { call, .. } => writeln!(out, "  🔧 {} {}", call.name, call.arguments),
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
        AgentEvent::RunFinished { status, .. } => writeln!(out, "[run finished: {status:?}]"),
        _ => Ok(()),
    }
}

fn ask(question: &str, flag: Option<bool>) -> bool {
    if let Some(decision) = flag {
        println!("  {question} {}", if decision { "yes (--approve)" } else { "no (--deny)" });
        return decision;
    }
    if !std::io::stdin().is_terminal() {
        println!("  {question} no (stdin is not a terminal; pass --approve to approve)");
        return false;
    }
    print!("  {question} [y/N] ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    matches!(line.trim(), "y" | "Y" | "yes")
}

async fn decide_and_resume(
    agent: &Agent,
    o: &Options,
    mut outcome: RunOutcome,
) -> Result<RunOutcome, AgentError> {
    let sink = print_event;
    while let RunOutcome::Suspended { batch } = &outcome {
        if o.later {
            println!("  left pending (--later): continue with --resume");
            return Ok(outcome);
        }
        for item in batch.pending_items() {
            let q = format!("执行 {} {}？", item.tool_call.name, item.tool_call.arguments);
            if ask(&q, o.approve) {
                agent.approve(&o.session, &item.approval_id).await?;
            } else {
                agent.deny(&o.session, &item.approval_id, "用户拒绝了操作").await?;
            }
        }
        outcome = agent.resume(&o.session, &sink, &CancellationSignal::new()).await?;
    }
    Ok(outcome)
}

/// `--list`: the conversations of the state directory, one line each, and what to do with them.
async fn list_conversations(agent: &Agent, o: &Options) -> Result<(), AgentError> {
    let sessions = agent.list_sessions().await?;
    println!("{} conversation(s) in {}", sessions.len(), o.state_dir);
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
        println!("  {:<12} {what:<38} {:>3} msg  {title}", s.session_id, s.message_count);
    }
    Ok(())
}

async fn main_async(o: Options) -> Result<(), AgentError> {
    let (model, label) = model_from_env()?;
    let store = Arc::new(FileStore::new(&o.state_dir));
    let config = AgentConfig {
        system_prompt: Some("你是烘焙店的助手。需要事实时调用工具，不要编造。".into()),
        ..AgentConfig::default()
    };
    let agent = AgentBuilder::new(model, store).config(config).build();
    demo_tools(&agent)?;
    if o.list {
        return list_conversations(&agent, &o).await;
    }
    println!("arkagent demo — model: {label}; state: {}/{}", o.state_dir, o.session);
    let cancel = CancellationSignal::new();
    let sink = print_event;
    let outcome = if o.resume {
        match agent.state(&o.session).await? {
            Some(s) if s.status == RunStatus::AwaitingApproval => {
                let batch = s.pending_approval.clone().expect("awaiting approval has a batch");
                println!("resuming a suspended run ({} item(s) waiting)", batch.items.len());
                RunOutcome::Suspended { batch }
            }
            Some(s) if s.status == RunStatus::Running => agent.resume(&o.session, &sink, &cancel).await?,
            Some(s) => {
                println!("nothing to resume: the session is {:?}", s.status);
                return Ok(());
            }
            None => {
                println!("no session {} in {}", o.session, o.state_dir);
                return Ok(());
            }
        }
    } else {
        let prompt = o.prompt.clone().unwrap_or_else(|| DEFAULT_PROMPT.to_string());
        println!("> {prompt}");
        agent.run(&o.session, &prompt, &sink, &cancel).await?
    };
    let outcome = decide_and_resume(&agent, &o, outcome).await?;
    if let RunOutcome::Finished { status, error: Some(e), .. } = &outcome {
        println!("run ended {status:?}: {e}");
    }
    Ok(())
}

fn main() {
    let options = match parse_options() {
        Ok(o) => o,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let _ = arkagent::logging::init(arkagent::logging::LogConfig::default());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let result = match runtime {
        Ok(rt) => rt.block_on(main_async(options)),
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
