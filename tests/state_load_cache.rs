//! The file store's loads while a big frozen batch is decided one item at a time: after the
//! first, each folds only the records appended since onto the state it cached, and loads what a
//! fresh store reads from the files; a session another store wrote meanwhile is read whole.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome};
use arkagent::approval::{ApprovalDecision, PendingApprovalBatch};
use arkagent::state::{FileStore, StateStore};
use arkagent::tool::FnExecutor;
use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
use serde_json::json;
use std::sync::Arc;
use support::{answer, calls, Script};

async fn suspend(agent: &Agent) -> PendingApprovalBatch {
    let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    batch
}

/// A file store's agent whose model asks for `n` dangerous calls.
fn many_wipes(store: Arc<FileStore>, n: usize) -> Agent {
    let wipes: Vec<(String, String)> = (0..n).map(|k| (format!("c{k}"), format!(r#"{{"k":{k}}}"#))).collect();
    let wipes: Vec<(&str, &str, &str)> =
        wipes.iter().map(|(id, a)| (id.as_str(), "wipe", a.as_str())).collect();
    let model = Script::new(vec![calls(&wipes), answer("ok")]);
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("wipe", "t", json!({"type":"object"})).with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(|_a, _ctx| async move { Ok(ToolResult::text("done")) })),
        )
        .unwrap();
    AgentBuilder::new(Arc::new(model), store).tools(tools).build()
}

#[tokio::test]
async fn deciding_a_big_batch_one_by_one_folds_only_the_new_records_and_loads_what_a_fresh_store_loads() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::new(dir.path()));
    let agent = many_wipes(Arc::clone(&store), 50);
    let batch = suspend(&agent).await;
    let before = store.whole_loads();
    for (k, item) in batch.items.iter().enumerate() {
        let decided = if k % 7 == 3 {
            agent.deny("s", &item.approval_id, "not this one").await.unwrap()
        } else {
            agent.approve("s", &item.approval_id).await.unwrap()
        };
        // What this store returns is what the files hold.
        let fresh = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
        assert_eq!(fresh.pending_approval.as_ref(), Some(&decided), "after decision {k}");
        assert_eq!(store.load("s").await.unwrap().unwrap(), fresh, "after decision {k}");
    }
    // The first load after the freeze reads the session whole; the others fold the new records.
    assert!(
        store.whole_loads() - before <= 1,
        "{} whole loads for 50 decisions",
        store.whole_loads() - before
    );
}

#[tokio::test]
async fn a_cached_state_is_not_used_once_another_store_wrote_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::new(dir.path()));
    let agent = many_wipes(Arc::clone(&store), 3);
    let batch = suspend(&agent).await;
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    // Another process decides the second item (its own store, its own lease)...
    let other = many_wipes(Arc::new(FileStore::new(dir.path())), 3);
    other.approve("s", &batch.items[1].approval_id).await.unwrap();
    // ...which this store's loads (and its next decision) see.
    let state = store.load("s").await.unwrap().unwrap();
    assert_eq!(
        state.pending_approval.unwrap().item(&batch.items[1].approval_id).unwrap().decision,
        ApprovalDecision::Approved
    );
    let decided = agent.approve("s", &batch.items[2].approval_id).await.unwrap();
    assert!(decided.is_fully_decided(), "{decided:?}");
    assert_eq!(FileStore::new(dir.path()).load("s").await.unwrap().unwrap().pending_approval, Some(decided));
}

/// Flips one byte (at `at` of the file's length) of session `s`'s newest journal where it lies:
/// the file keeps its length.
fn flip_in_place(root: &std::path::Path, at: fn(usize) -> usize) {
    let journal = std::fs::read_dir(root.join("s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("journal-"))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&journal).unwrap();
    let i = at(bytes.len());
    bytes[i] ^= 0x20;
    std::fs::write(&journal, &bytes).unwrap();
}

#[tokio::test]
async fn a_journal_written_over_in_place_is_read_whole_not_from_the_cache() {
    // A byte of the journal flipped where it lies (the file keeps its length): this store's loads
    // read what the files hold, as a fresh store does, not the state it cached before.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::new(dir.path()));
    let agent = many_wipes(Arc::clone(&store), 3);
    let batch = suspend(&agent).await;
    agent.approve("s", &batch.items[0].approval_id).await.unwrap();
    let cached = store.load("s").await.unwrap().unwrap();
    flip_in_place(dir.path(), |len| len / 2);
    let fresh = FileStore::new(dir.path()).load("s").await.map_err(|e| e.code);
    assert_ne!(
        fresh.as_ref().ok().and_then(|s| s.as_ref()),
        Some(&cached),
        "the flip changed what the files hold"
    );
    assert_eq!(store.load("s").await.map_err(|e| e.code), fresh);
}

#[tokio::test]
async fn a_writer_whose_journal_was_written_over_in_place_reopens_it_and_loses_no_later_commit() {
    // The writer's next commit after the flip reopens the session (the damaged record kept aside,
    // the tail cut) instead of appending after the damage, where no load would ever read it.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::new(dir.path()));
    let model = Script::new(vec![answer("a1"), answer("a2"), answer("a3")]);
    let agent = AgentBuilder::new(Arc::new(model), Arc::clone(&store) as Arc<dyn StateStore>).build();
    for q in ["q1", "q2"] {
        agent.run("s", q, &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    }
    flip_in_place(dir.path(), |len| len - 3);
    agent.run("s", "q3", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    let fresh = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    let users: Vec<String> = fresh
        .messages
        .iter()
        .filter_map(|m| match m {
            arkagent::ChatMessage::User { content } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        users.last().map(String::as_str),
        Some("q3"),
        "the commit after the damage is durable: {users:?}"
    );
    assert_eq!(store.load("s").await.unwrap().unwrap(), fresh);
}
