//! "先落盘再 approvalRequired" (arkagent-tool-system.md 7.5): when the app hears of a frozen batch,
//! through the `approval_required` event or the `on_approval_required` hook, the batch is already
//! on disk. Both listeners read the session back through a second `FileStore` over the same
//! directory (what a restarted process would see) at the moment they are called. The same holds
//! when the frozen call is a sub-agent's: the parent's batch and the worker's are both on disk.

use arkagent::agent::{AgentBuilder, AgentEvent, EventSink, RunOutcome};
use arkagent::approval::PendingApprovalBatch;
use arkagent::hook::{AgentHook, HookContext};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;
use arkagent::agent::DELEGATE_TASK;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::{answer, calls, Script};

/// What a listener read from disk: the session's status, the id of its pending batch and, for a
/// worker's batch, the worker session's status.
type Seen = Arc<Mutex<Vec<(RunStatus, Option<String>, Option<RunStatus>)>>>;

async fn on_disk(
    root: &Path,
    batch: &PendingApprovalBatch,
) -> (RunStatus, Option<String>, Option<RunStatus>) {
    let store = FileStore::new(root.to_path_buf());
    let state = store.load("s").await.unwrap().expect("the session is on disk");
    let worker = match &batch.worker_session {
        Some(w) => Some(store.load(w).await.unwrap().expect("the worker's session is on disk").status),
        None => None,
    };
    (state.status, state.pending_approval.map(|b| b.batch_id), worker)
}

/// Reads the disk when `approval_required` goes out (the sink is synchronous: it blocks on the
/// read, which runs on the runtime's blocking pool).
struct DiskOnEvent {
    root: PathBuf,
    seen: Seen,
}

impl EventSink for DiskOnEvent {
    fn emit(&self, event: AgentEvent) {
        if let AgentEvent::ApprovalRequired { batch } = event {
            let read = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(on_disk(&self.root, &batch))
            });
            self.seen.lock().unwrap().push(read);
        }
    }
}

/// Reads the disk when the hook is told.
struct DiskOnHook {
    root: PathBuf,
    seen: Seen,
}

#[async_trait::async_trait]
impl AgentHook for DiskOnHook {
    async fn on_approval_required(&self, _ctx: &HookContext<'_>, batch: &PendingApprovalBatch) {
        let read = on_disk(&self.root, batch).await;
        self.seen.lock().unwrap().push(read);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frozen_batch_is_on_disk_before_the_app_hears_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("clear_baking_cache", "清空本地烘焙缓存", json!({"type": "object"}))
                .with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("已清空")) })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![calls(&[("c1", "clear_baking_cache", "{}")]), answer("done")]));
    let (by_event, by_hook): (Seen, Seen) = Default::default();
    let agent = AgentBuilder::new(model, Arc::new(FileStore::new(root.clone())))
        .tools(tools)
        .hook(Arc::new(DiskOnHook { root: root.clone(), seen: by_hook.clone() }))
        .build();
    let sink = DiskOnEvent { root: root.clone(), seen: by_event.clone() };
    let out = agent.run("s", "清空烘焙缓存", &sink, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected a suspension: {out:?}") };
    let want = vec![(RunStatus::AwaitingApproval, Some(batch.batch_id.clone()), None)];
    assert_eq!(*by_event.lock().unwrap(), want, "what the approval_required event's listener found on disk");
    assert_eq!(*by_hook.lock().unwrap(), want, "what on_approval_required found on disk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_frozen_call_is_on_disk_in_both_sessions_before_the_parent_announces_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        calls(&[("p1", DELEGATE_TASK, r#"{"task":"清缓存"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ]));
    let (by_event, by_hook): (Seen, Seen) = Default::default();
    let agent = Arc::new(
        AgentBuilder::new(model, Arc::new(FileStore::new(root.clone())))
            .tools(delegation::tools(&cleared))
            .hook(Arc::new(DiskOnHook { root: root.clone(), seen: by_hook.clone() }))
            .build(),
    );
    agent.enable_delegation(None).unwrap();
    let sink = DiskOnEvent { root: root.clone(), seen: by_event.clone() };
    let out = agent.run("s", "清缓存", &sink, &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("expected a suspension: {out:?}") };
    assert_eq!(cleared.load(Ordering::SeqCst), 0);
    // The worker's session is read when the parent announces its batch, as the parent's is.
    let want =
        vec![(RunStatus::AwaitingApproval, Some(batch.batch_id.clone()), Some(RunStatus::AwaitingApproval))];
    assert_eq!(
        *by_event.lock().unwrap(),
        want,
        "the parent's approval_required (the worker's own is wrapped)"
    );
    assert_eq!(*by_hook.lock().unwrap(), want, "on_approval_required, told once, by the parent");
    let worker = batch.worker_session.expect("the batch names the worker");
    let worker_state = FileStore::new(root.clone()).load(&worker).await.unwrap().unwrap();
    assert_eq!(worker_state.status, RunStatus::AwaitingApproval);
}
