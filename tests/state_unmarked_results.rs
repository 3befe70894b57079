//! Failed results saved before they were marked. Since results carry the mark (docs/spec-audit.md,
//! F1), a failed result's text for the model starts with `error` (`error: <text>` unless it already
//! does). Sessions saved by earlier versions hold failed results without it; resumed after an
//! update, their history went to the model with `unknown record: r9` reading like data.
//!
//! `tests/fixtures/state/v2-unmarked/order-7` is such a session as `FileStore` writes it (snapshot
//! and journal; see the fixtures' README): one unmarked failure in the snapshot, two in the journal,
//! next to a runtime error, a success and a failure whose own text starts with `Error`.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog};
use arkagent::state::{AgentState, FileStore, RunStatus, StateStore};
use arkagent::CancellationSignal;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use support::{answer, tool_messages, Script};

const ID: &str = "order-7";

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state/v2-unmarked")
}

fn copy_session(to: &Path) {
    let from = fixture().join(ID);
    fs::create_dir(to.join(ID)).unwrap();
    for entry in fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(ID).join(entry.file_name())).unwrap();
    }
}

#[tokio::test]
async fn failed_results_saved_unmarked_reach_the_model_marked_and_stay_as_saved() {
    let root = tempfile::tempdir().unwrap();
    copy_session(root.path());
    let expected: AgentState =
        serde_json::from_slice(&fs::read(fixture().join("expected.json")).unwrap()).unwrap();
    let store = Arc::new(FileStore::new(root.path()));
    let saved = store.load(ID).await.unwrap().unwrap();
    assert_eq!(saved, expected, "the fixture loads as written");
    let unmarked = vec![
        ("c1".to_string(), "unknown record: r9".to_string(), true),
        ("c2".to_string(), "法棍 500g".to_string(), false),
        ("c3".to_string(), "error [tool_not_found]: Tool not found: missing_tool".to_string(), true),
        ("c4".to_string(), "denied by user: not now".to_string(), true),
        ("c5".to_string(), "Error: the oven is offline".to_string(), true),
    ];
    assert_eq!(tool_messages(&saved.messages), unmarked);

    let model = Arc::new(Script::new(vec![answer("不客气")]));
    let agent = AgentBuilder::new(model.clone(), store.clone()).build();
    let outcome = agent.run(ID, "谢谢", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);

    // What the model read: every failure says so; the rest is as saved.
    let sent = &model.requests()[0].messages;
    assert_eq!(
        tool_messages(sent),
        vec![
            ("c1".to_string(), "error: unknown record: r9".to_string(), true),
            ("c2".to_string(), "法棍 500g".to_string(), false),
            ("c3".to_string(), "error [tool_not_found]: Tool not found: missing_tool".to_string(), true),
            ("c4".to_string(), "error: denied by user: not now".to_string(), true),
            ("c5".to_string(), "Error: the oven is offline".to_string(), true),
        ]
    );
    assert_eq!(sent.len(), saved.messages.len() + 1, "the history and the new question");

    // The history on disk keeps its text as it was written, and the new turn follows it.
    let after = FileStore::new(root.path()).load(ID).await.unwrap().unwrap();
    assert_eq!(after.messages[..saved.messages.len()], saved.messages[..]);
    assert_eq!(tool_messages(&after.messages), unmarked);
    assert_eq!(after.messages.len(), saved.messages.len() + 2);
}
