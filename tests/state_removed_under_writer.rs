//! A session's directory, or the whole state directory, removed or moved away by something other
//! than a store while a writer holds its journal open (an app's "clear data", a cache cleaner, a
//! tool of the run). The writer's next append used to go through the open handle into the
//! unlinked (or moved) journal, its sync succeeded, and the commit returned as durable with
//! nothing a load reads on disk: a frozen batch announced, then `session_not_found` for its
//! approval. Each commit now checks that the journal's path still names the file it wrote.

#[path = "state_support/mod.rs"]
mod state_support;
#[path = "support/runtime.rs"]
mod support;

use arkagent::codes;
use arkagent::state::{AgentState, FileStore, StateStore};
use state_support::turn;
use std::fs;
use std::path::Path;

/// What happens to the files under `root` (a session `s` in `root/state`) between two commits.
#[derive(Debug, Clone, Copy)]
enum Removal {
    RemoveSession,
    RemoveRoot,
    MoveSession,
    MoveRoot,
}

impl Removal {
    fn apply(self, root: &Path) {
        let state = root.join("state");
        match self {
            Removal::RemoveSession => fs::remove_dir_all(state.join("s")).unwrap(),
            Removal::RemoveRoot => fs::remove_dir_all(&state).unwrap(),
            Removal::MoveSession => fs::rename(state.join("s"), state.join("s-old")).unwrap(),
            Removal::MoveRoot => fs::rename(&state, root.join("state-moved")).unwrap(),
        }
    }
}

#[tokio::test]
async fn a_commit_into_a_journal_removed_or_moved_away_fails_instead_of_returning_as_durable() {
    for removal in [Removal::RemoveSession, Removal::RemoveRoot, Removal::MoveSession, Removal::MoveRoot] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        let store = FileStore::new(&root);
        let mut state = AgentState::new("s");
        for k in 1..=2 {
            let events = turn(k);
            for event in &events {
                state.apply(event);
            }
            store.commit(&state, &events).await.unwrap();
        }
        removal.apply(dir.path());
        let events = turn(3);
        for event in &events {
            state.apply(event);
        }
        let e =
            store.commit(&state, &events).await.expect_err(&format!("{removal:?}: the commit is on no disk"));
        assert_eq!(e.code, codes::STATE_IO, "{removal:?}: {e}");
        assert!(e.message.contains("no longer names the journal"), "{removal:?}: {e}");
        // What a restarted process reads: nothing, as the failed commit said.
        assert_eq!(FileStore::new(&root).load("s").await.unwrap(), None, "{removal:?}");
        // The next commit of the caller's state makes the session again, whole.
        let events = turn(4);
        for event in &events {
            state.apply(event);
        }
        store.commit(&state, &events).await.unwrap();
        let back = FileStore::new(&root).load_unrepaired("s").await.unwrap().expect("made again");
        assert_eq!(back, state, "{removal:?}");
    }
}

#[tokio::test]
async fn commits_go_on_when_the_journal_is_still_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let mut state = AgentState::new("s");
    for k in 1..=20 {
        let events = turn(k);
        for event in &events {
            state.apply(event);
        }
        store.commit(&state, &events).await.unwrap();
    }
    // A file of the app's own in the session's directory changes nothing.
    fs::write(dir.path().join("s").join("notes.txt"), b"the app's").unwrap();
    let events = turn(21);
    for event in &events {
        state.apply(event);
    }
    store.commit(&state, &events).await.unwrap();
    assert_eq!(FileStore::new(dir.path()).load_unrepaired("s").await.unwrap().unwrap(), state);
}

/// The exploratory scene: a tool of the run removes the session's directory, and the next round
/// freezes a dangerous call. The frozen batch cannot be committed, so the app never hears of it
/// (no `approval_required`, no suspension), and the run says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_directory_a_tool_removed_never_announces_a_batch_that_is_on_no_disk() {
    use arkagent::agent::{AgentBuilder, AgentEvent, EventSink, RunOutcome};
    use arkagent::tool::FnExecutor;
    use arkagent::{CancellationSignal, RiskLevel, ToolDefinition, ToolRegistry, ToolResult};
    use serde_json::json;
    use std::sync::{Arc, Mutex};
    use support::{answer, calls, Script};

    struct Events(Mutex<Vec<String>>);
    impl EventSink for Events {
        fn emit(&self, event: AgentEvent) {
            if matches!(event, AgentEvent::ApprovalRequired { .. }) {
                self.0.lock().unwrap().push("approval_required".into());
            }
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("state");
    let session = root.join("s");
    let mut tools = ToolRegistry::new();
    tools
        .register(
            ToolDefinition::new("clear_data", "removes the app's data", json!({"type": "object"})),
            Arc::new(FnExecutor(move |_a, _c| {
                let session = session.clone();
                async move {
                    fs::remove_dir_all(&session).unwrap();
                    Ok(ToolResult::text("cleared"))
                }
            })),
        )
        .unwrap();
    tools
        .register(
            ToolDefinition::new("wipe", "dangerous", json!({"type": "object"}))
                .with_risk(RiskLevel::Dangerous),
            Arc::new(FnExecutor(|_a, _c| async move { Ok(ToolResult::text("wiped")) })),
        )
        .unwrap();
    let model = Arc::new(Script::new(vec![
        calls(&[("c1", "clear_data", "{}")]),
        calls(&[("c2", "wipe", "{}")]),
        answer("done"),
    ]));
    let agent = AgentBuilder::new(model, Arc::new(FileStore::new(&root))).tools(tools).build();
    let events = Events(Mutex::default());
    let out = agent.run("s", "go", &events, &CancellationSignal::new()).await;
    assert!(!matches!(out, Ok(RunOutcome::Suspended { .. })), "suspended on a batch on no disk: {out:?}");
    assert!(events.0.lock().unwrap().is_empty(), "approval_required of a batch on no disk");
    let on_disk = FileStore::new(&root).load("s").await.unwrap();
    assert!(
        on_disk.as_ref().is_none_or(|s| s.pending_approval.is_none()),
        "a batch on disk would have been announced: {on_disk:?}"
    );
    match out {
        Err(e) => assert_eq!(e.code, codes::STATE_IO, "{e}"),
        Ok(out) => panic!("the run ends on the failed commit: {out:?}"),
    }
}
