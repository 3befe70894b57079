//! The seed's acceptance scene across processes: confirm -> kill the process -> reload -> approve,
//! and again -> deny. A child process (this test binary, re-invoked with ARKAGENT_SCENE_CHILD)
//! runs the agent on a file store until the dangerous call freezes its batch, reports the approval
//! id, and is killed with SIGKILL. The parent then decides in a fresh agent over the same directory
//! and resumes. The dangerous tool records each execution in a file, so "ran once" and "never ran"
//! are checked across the processes.
//!
//! `harness = false`: this file has its own `main` (see Cargo.toml).

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome};
use arkagent::provider::{ModelResponse, ScriptedModel};
use arkagent::state::{FileStore, RunStatus};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolCall, ToolDefinition, ToolResult};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

const CHILD_ENV: &str = "ARKAGENT_SCENE_CHILD";

fn agent(dir: &Path, script: Vec<ModelResponse>) -> Agent {
    let agent =
        AgentBuilder::new(Arc::new(ScriptedModel::new(script)), Arc::new(FileStore::new(dir))).build();
    let ran = dir.join("ran.log");
    agent
        .register_tool(
            ToolDefinition::new("clear_baking_cache", "清空本地烘焙缓存", json!({"type":"object"}))
                .with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(move |_args, ctx: arkagent::ToolContext| {
                let ran = ran.clone();
                async move {
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&ran).unwrap();
                    writeln!(f, "{}", ctx.call_id).unwrap();
                    Ok(ToolResult::text("已清空"))
                }
            })),
        )
        .unwrap();
    agent
}

fn freeze_script() -> Vec<ModelResponse> {
    vec![ModelResponse::with_tool_calls(vec![ToolCall::new(
        "call_1",
        "clear_baking_cache",
        r#"{"confirm":"yes"}"#,
    )])]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The child: run until suspended, report, then wait to be killed.
fn child(dir: PathBuf) {
    let rt = runtime();
    rt.block_on(async {
        let agent = agent(&dir, freeze_script());
        let out =
            agent.run("scene", "清空烘焙缓存", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else { panic!("expected a suspension: {out:?}") };
        println!("SUSPENDED {}", batch.items[0].approval_id);
        std::io::stdout().flush().unwrap();
        std::future::pending::<()>().await;
    });
}

fn executions(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("ran.log")).map(|s| s.lines().count()).unwrap_or(0)
}

/// Runs the child until it reports the frozen batch, then kills it with SIGKILL.
fn confirm_then_kill(dir: &Path) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let approval_id =
        line.strip_prefix("SUSPENDED ").expect("the child reported its suspension").trim().to_string();
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed");
    approval_id
}

fn scene(approve: bool) {
    let dir = tempfile::tempdir().unwrap();
    let approval_id = confirm_then_kill(dir.path());
    assert_eq!(executions(dir.path()), 0, "nothing ran before the decision");
    runtime().block_on(async {
        let agent = agent(dir.path(), vec![ModelResponse::text("好的")]);
        let state = agent.state("scene").await.unwrap().unwrap();
        assert_eq!(state.status, RunStatus::AwaitingApproval);
        assert_eq!(state.pending_approval.as_ref().unwrap().items[0].approval_id, approval_id);
        if approve {
            agent.approve("scene", &approval_id).await.unwrap();
        } else {
            agent.deny("scene", &approval_id, "不要清空").await.unwrap();
        }
        let out = agent.resume("scene", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        let state = agent.state("scene").await.unwrap().unwrap();
        assert!(state.pending_approval.is_none());
        let result = state.messages.iter().find_map(|m| match m {
            arkagent::ChatMessage::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        });
        let (content, is_error) = result.expect("the call has its result");
        if approve {
            assert_eq!((content.as_str(), is_error), ("已清空", false));
        } else {
            assert!(is_error && content.contains("不要清空"), "{content}");
        }
    });
    assert_eq!(executions(dir.path()), usize::from(approve), "approved: ran once; denied: never");
}

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(PathBuf::from(dir));
        return;
    }
    let mut passed = 0;
    for (name, approve) in [("confirm_kill_reload_approve", true), ("confirm_kill_reload_deny", false)] {
        scene(approve);
        println!("test {name} ... ok");
        passed += 1;
    }
    println!("\ntest result: ok. {passed} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}
