//! Migration from every old schema version (fixtures in tests/fixtures/state/), and refusal of a
//! newer one, both through the pure functions and through a `FileStore` directory.

use arkagent::codes;
use arkagent::state::codec::decode_state_json;
use arkagent::state::file_store::LEGACY_STATE_FILE;
use arkagent::state::migrate::{migrate_json, migrate_value, schema_version_of};
use arkagent::state::{AgentState, FileStore, RunStatus, StateEvent, StateStore, SCHEMA_VERSION};
use arkagent::{ChatMessage, ToolResult};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

fn fixture(path: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state").join(path);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).unwrap()
}

/// Every file of a directory tree with its bytes, to prove nothing was touched.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(tree(&p));
        } else {
            out.push((p.clone(), fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn v1_migrates_to_the_hand_written_v2() {
    let migrated = migrate_json(json("v1/state.json")).unwrap();
    assert_eq!(migrated, json("v1/expected_v2.json"));
    let state = migrate_value(json("v1/state.json")).unwrap();
    assert_eq!(state.schema_version, SCHEMA_VERSION);
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.messages.len(), 7);
    assert_eq!(state.messages[2].tool_calls()[0].arguments, "{\"orderId\":42}");
    assert!(state.pending_approval.is_none() && state.tool_runs.is_empty() && state.loop_window.is_empty());
    assert_eq!(state.usage.total_tokens, 150);
}

#[test]
fn minimal_v1_gets_defaults_and_bad_v1_fails_with_a_path() {
    let s = migrate_value(json("v1/minimal.json")).unwrap();
    assert_eq!(s, AgentState::new("bare"));
    let e = migrate_value(json("v1/bad_role.json")).unwrap_err();
    assert_eq!(e.code, codes::STATE_MIGRATION_FAILED);
    assert!(e.message.contains("$.messages[0].role"), "{}", e.message);
}

#[test]
fn current_fixture_decodes_as_is() {
    let v = json("v2/state.json");
    assert_eq!(schema_version_of(&v).unwrap(), 2);
    let s = decode_state_json(&fixture("v2/state.json")).unwrap();
    assert_eq!(serde_json::to_value(&s).unwrap(), v, "v2 must round-trip without loss");
    let batch = s.pending_approval.as_ref().unwrap();
    assert_eq!(batch.items[0].decided_at_ms, Some(1764460900000));
}

#[test]
fn newer_version_is_refused() {
    let e = migrate_value(json("v3/state.json")).unwrap_err();
    assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED);
    assert!(e.message.contains('3'), "{}", e.message);
}

#[tokio::test]
async fn file_store_migrates_a_v1_session_and_replaces_it_on_the_first_commit() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("order-chat-1");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join(LEGACY_STATE_FILE), fixture("v1/state.json")).unwrap();
    let store = FileStore::new(root.path());
    let mut state = store.load("order-chat-1").await.unwrap().unwrap();
    assert_eq!(serde_json::to_value(&state).unwrap(), json("v1/expected_v2.json"));
    // Loading wrote nothing.
    assert_eq!(tree(&dir).len(), 1);

    let ev = StateEvent::MessageAppended { message: ChatMessage::user("again") };
    state.apply(&ev);
    store.commit(&state, &[ev]).await.unwrap();
    assert!(!dir.join(LEGACY_STATE_FILE).exists(), "the v1 file is replaced by a snapshot");
    let fresh = FileStore::new(root.path());
    assert_eq!(fresh.load("order-chat-1").await.unwrap().unwrap(), state);
}

#[tokio::test]
async fn file_store_deletes_a_v1_session() {
    // Its `state.json` (version 1 spells the id `sessionId`) is the store's: the session is listed
    // and deleted whole, never taken for a directory of the app's own.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("order-chat-1");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join(LEGACY_STATE_FILE), fixture("v1/state.json")).unwrap();
    let store = FileStore::new(root.path());
    assert!(store.exists("order-chat-1").await.unwrap());
    assert!(store.delete("order-chat-1").await.unwrap());
    assert!(!dir.exists());
    assert_eq!(store.load("order-chat-1").await.unwrap(), None);
}

#[tokio::test]
async fn file_store_lists_loads_and_deletes_a_torn_v1_session_alike() {
    // A version-1 file cut short is the store's, damaged: listed, refused on load, deleted.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("torn");
    fs::create_dir(&dir).unwrap();
    let whole = fixture("v1/state.json");
    fs::write(dir.join(LEGACY_STATE_FILE), &whole[..whole.len() / 2]).unwrap();
    let store = FileStore::new(root.path());
    assert_eq!(store.list().await.unwrap(), ["torn"]);
    assert_eq!(store.load("torn").await.unwrap_err().code, codes::STATE_CORRUPT);
    assert!(store.exists("torn").await.unwrap());
    assert!(store.delete("torn").await.unwrap());
    assert!(!dir.exists());
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn file_store_passes_by_a_state_json_of_the_app_s_own() {
    // JSON that names no session (or another) is the app's: not listed, not loaded, not deleted;
    // a session of that id lives beside it.
    let root = tempfile::tempdir().unwrap();
    for (id, text) in [("prefs", r#"{"theme":"dark"}"#), ("other", r#"{"sessionId":"someone-else"}"#)] {
        let dir = root.path().join(id);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join(LEGACY_STATE_FILE), text).unwrap();
    }
    let store = FileStore::new(root.path());
    assert!(store.list().await.unwrap().is_empty());
    assert_eq!(store.load("prefs").await.unwrap(), None);
    assert!(!store.exists("prefs").await.unwrap());
    assert!(!store.delete("prefs").await.unwrap());
    assert_eq!(fs::read(root.path().join("prefs").join(LEGACY_STATE_FILE)).unwrap(), br#"{"theme":"dark"}"#);

    let mut state = AgentState::new("other");
    let ev = StateEvent::MessageAppended { message: ChatMessage::user("hi") };
    state.apply(&ev);
    store.commit(&state, &[ev]).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["other"]);
    assert_eq!(FileStore::new(root.path()).load("other").await.unwrap(), Some(state));
    assert!(store.delete("other").await.unwrap());
    assert_eq!(
        fs::read(root.path().join("other").join(LEGACY_STATE_FILE)).unwrap(),
        br#"{"sessionId":"someone-else"}"#
    );
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn file_store_leaves_a_newer_session_untouched_byte_for_byte() {
    let root = tempfile::tempdir().unwrap();
    // A v3 session as a v1-style file and one as a framed snapshot + journal.
    let legacy_dir = root.path().join("future-1");
    fs::create_dir(&legacy_dir).unwrap();
    fs::write(legacy_dir.join(LEGACY_STATE_FILE), fixture("v3/state.json")).unwrap();

    let snap_dir = root.path().join("future-2");
    {
        let store = FileStore::new(root.path());
        let mut s = AgentState::new("future-2");
        store.save_snapshot(&s).await.unwrap();
        let ev = StateEvent::MessageAppended { message: ChatMessage::user("x") };
        s.apply(&ev);
        store.commit(&s, &[ev]).await.unwrap();
    }
    // Rewrite its snapshot as one from version 3 (valid frame and checksum).
    let snap = fs::read_dir(&snap_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("snapshot-"))
        .unwrap();
    let mut v: Value = json("v3/state.json");
    v["session_id"] = "future-2".into();
    let payload = serde_json::to_vec(&v).unwrap();
    let mut framed = b"ARKS".to_vec();
    framed.extend((payload.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&(payload.len() as u32).to_le_bytes());
    h.update(&payload);
    framed.extend(h.finalize().to_le_bytes());
    framed.extend(&payload);
    fs::write(&snap, framed).unwrap();

    let before = tree(root.path());
    let store = FileStore::new(root.path());
    for id in ["future-1", "future-2"] {
        let e = store.load(id).await.unwrap_err();
        assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED, "{id}");
        let mut s = AgentState::new(id);
        let ev = StateEvent::ToolFinished {
            call_id: "c".into(),
            name: "t".into(),
            result: ToolResult::text("r"),
            stop_requested: false,
            injected: Vec::new(),
        };
        s.apply(&ev);
        let e = store.commit(&s, &[ev]).await.unwrap_err();
        assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED, "{id}");
        let e = store.save_snapshot(&s).await.unwrap_err();
        assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED, "{id}");
    }
    assert_eq!(tree(root.path()), before, "no byte of a newer session may change");
}

#[tokio::test]
async fn v2_files_written_by_this_format_still_load() {
    // Snapshot + journal bytes committed in tests/fixtures/state/v2-files: a change to the byte
    // format that cannot read them fails here. Loaded from a copy, so the fixture is never written.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state/v2-files");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("order-1");
    fs::create_dir(&dir).unwrap();
    for e in fs::read_dir(src.join("order-1")).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let expected: AgentState = serde_json::from_slice(&fs::read(src.join("expected.json")).unwrap()).unwrap();
    let loaded = FileStore::new(root.path()).load_unrepaired("order-1").await.unwrap().unwrap();
    assert_eq!(loaded, expected);
    assert_eq!(loaded.metadata["seq"], 7);
}
