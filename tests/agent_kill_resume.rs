//! The seed's acceptance scene across processes: confirm -> kill the process -> reload -> approve,
//! and again -> deny, and both again deciding with `approve_all` / `deny_all`. A child process
//! (this test binary, re-invoked with ARKAGENT_SCENE_CHILD) runs the agent on a file store until the dangerous call freezes its batch, reports the approval
//! id, and is killed with SIGKILL. The parent then decides in a fresh agent over the same directory
//! and resumes. The dangerous tool records each execution in a file, so "ran once" and "never ran"
//! are checked across the processes.
//!
//! The same again with the dangerous call made by a sub-agent (`delegate_task`): the parent freezes
//! on the worker's batch, is killed, and the decision made on the parent in the fresh process runs
//! (or never runs) the call in the worker, whose answer becomes the parent's result.
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
/// Set (to anything) for the child of the delegated scene.
const DELEGATED_ENV: &str = "ARKAGENT_SCENE_DELEGATED";

fn agent(dir: &Path, script: Vec<ModelResponse>, delegated: bool) -> Arc<Agent> {
    let agent = Arc::new(
        AgentBuilder::new(Arc::new(ScriptedModel::new(script)), Arc::new(FileStore::new(dir))).build(),
    );
    if delegated {
        agent.enable_delegation(None).unwrap();
    }
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

fn freeze_script(delegated: bool) -> Vec<ModelResponse> {
    let clear = ModelResponse::with_tool_calls(vec![ToolCall::new(
        "call_1",
        "clear_baking_cache",
        r#"{"confirm":"yes"}"#,
    )]);
    if !delegated {
        return vec![clear];
    }
    let delegate = ModelResponse::with_tool_calls(vec![ToolCall::new(
        "call_1",
        "delegate_task",
        r#"{"task":"清空烘焙缓存"}"#,
    )]);
    vec![delegate, clear]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The child: run until suspended, report, then wait to be killed.
fn child(dir: PathBuf, delegated: bool) {
    let rt = runtime();
    rt.block_on(async {
        let agent = agent(&dir, freeze_script(delegated), delegated);
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
fn confirm_then_kill(dir: &Path, delegated: bool) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(CHILD_ENV, dir).stdout(Stdio::piped());
    if delegated {
        command.env(DELEGATED_ENV, "1");
    }
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let approval_id =
        line.strip_prefix("SUSPENDED ").expect("the child reported its suspension").trim().to_string();
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed");
    approval_id
}

/// `all`: the fresh process decides with `approve_all` / `deny_all` instead of `approve` / `deny`.
fn scene(approve: bool, delegated: bool, all: bool) {
    let dir = tempfile::tempdir().unwrap();
    let approval_id = confirm_then_kill(dir.path(), delegated);
    assert_eq!(executions(dir.path()), 0, "nothing ran before the decision");
    runtime().block_on(async {
        // Delegated: the worker answers first (with what its call gave it), then the parent.
        let mut script = vec![ModelResponse::text("好的")];
        if delegated {
            let worker = if approve { "已清空" } else { "用户拒绝：不要清空" };
            script.insert(0, ModelResponse::text(worker));
        }
        let agent = agent(dir.path(), script, delegated);
        let state = agent.state("scene").await.unwrap().unwrap();
        assert_eq!(state.status, RunStatus::AwaitingApproval);
        let batch = state.pending_approval.as_ref().unwrap();
        assert_eq!(batch.items[0].approval_id, approval_id);
        assert_eq!(batch.items[0].tool_call.name, "clear_baking_cache");
        assert_eq!(batch.worker_session.is_some(), delegated);
        let decided = match (approve, all) {
            (true, false) => agent.approve("scene", &approval_id).await.unwrap(),
            (false, false) => agent.deny("scene", &approval_id, "不要清空").await.unwrap(),
            (true, true) => agent.approve_all("scene").await.unwrap(),
            (false, true) => agent.deny_all("scene", "不要清空").await.unwrap(),
        };
        assert!(decided.is_fully_decided());
        let out = agent.resume("scene", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        let state = agent.state("scene").await.unwrap().unwrap();
        assert!(state.pending_approval.is_none());
        let result = state.messages.iter().find_map(|m| match m {
            arkagent::ChatMessage::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        });
        let (content, is_error) = result.expect("the call has its result");
        if delegated {
            // The worker's answer, which it gave after its call's result.
            let worker = if approve { "已清空" } else { "用户拒绝：不要清空" };
            assert_eq!((content.as_str(), is_error), (worker, false));
        } else if approve {
            assert_eq!((content.as_str(), is_error), ("已清空", false));
        } else {
            assert!(is_error && content.contains("不要清空"), "{content}");
        }
    });
    assert_eq!(executions(dir.path()), usize::from(approve), "approved: ran once; denied: never");
}

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(PathBuf::from(dir), std::env::var_os(DELEGATED_ENV).is_some());
        return;
    }
    let mut passed = 0;
    for (name, approve, delegated, all) in [
        ("confirm_kill_reload_approve", true, false, false),
        ("confirm_kill_reload_deny", false, false, false),
        ("worker_confirm_kill_reload_approve", true, true, false),
        ("worker_confirm_kill_reload_deny", false, true, false),
        ("confirm_kill_reload_approve_all", true, false, true),
        ("confirm_kill_reload_deny_all", false, false, true),
        ("worker_confirm_kill_reload_approve_all", true, true, true),
        ("worker_confirm_kill_reload_deny_all", false, true, true),
    ] {
        scene(approve, delegated, all);
        println!("test {name} ... ok");
        passed += 1;
    }
    println!("\ntest result: ok. {passed} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}
