//! Behaviour of the two stores: round trips through a fresh store (a new process), compaction,
//! snapshots, deletion, session id checks, and repair on load.

mod state_support;

use arkagent::codes;
use arkagent::state::{
    check_pairing, AgentState, FileStore, FileStoreOptions, MemoryStore, RepairPolicy, RunStatus, StateEvent,
    StateStore,
};
use arkagent::{ChatMessage, ToolCall};
use state_support::{files, state_after, turn};
use std::fs;
use std::sync::Arc;

async fn play(store: &dyn StateStore, from: u64, to: u64, state: &mut AgentState) {
    for k in from..=to {
        let events = turn(k);
        for e in &events {
            state.apply(e);
        }
        store.commit(state, &events).await.unwrap();
    }
}

#[tokio::test]
async fn commits_load_back_equal_through_a_fresh_store() {
    let root = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(root.path()));
    assert_eq!(store.load("s1").await.unwrap(), None);
    let mut state = AgentState::new("s1");
    play(store.as_ref(), 1, 23, &mut state).await;
    assert_eq!(state, state_after("s1", 23));
    // The same store, and a fresh one (as after a restart), see the same state.
    assert_eq!(store.load_unrepaired("s1").await.unwrap().unwrap(), state);
    let fresh = FileStore::new(root.path());
    assert_eq!(fresh.load_unrepaired("s1").await.unwrap().unwrap(), state);
    // What a tool may read of it: version, id and metadata only.
    let view = fresh.load("s1").await.unwrap().unwrap().readonly_view();
    assert_eq!((view.schema_version, view.session_id.as_str()), (arkagent::state::SCHEMA_VERSION, "s1"));
    assert_eq!(view.metadata["seq"], 23);
    // A fresh store continues the journal where the old one stopped.
    play(&fresh, 24, 40, &mut state).await;
    assert_eq!(
        FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap(),
        state_after("s1", 40)
    );
}

#[tokio::test]
async fn one_commit_is_one_append_to_the_journal() {
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    play(&store, 1, 1, &mut state).await;
    let dir = root.path().join("s1");
    let journal = files(&dir, "journal-").pop().unwrap();
    let before = fs::metadata(&journal).unwrap().len();
    play(&store, 2, 2, &mut state).await;
    let after = fs::metadata(&journal).unwrap().len();
    let expected = arkagent::state::codec::encode_records(&turn(2)).unwrap().len() as u64;
    assert_eq!(after - before, expected, "the journal grows by exactly the turn's records");
    assert_eq!(files(&dir, "snapshot-").len(), 1, "no snapshot rewrite below the threshold");
}

#[tokio::test]
async fn compaction_rotates_generations_and_keeps_the_previous_one() {
    let root = tempfile::tempdir().unwrap();
    let opts = FileStoreOptions { compact_min_bytes: 2048, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut state = AgentState::new("s1");
    play(&store, 1, 300, &mut state).await;
    let dir = root.path().join("s1");
    let snaps = files(&dir, "snapshot-");
    let journals = files(&dir, "journal-");
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    assert_eq!(journals.len(), 2, "{journals:?}");
    let newest = snaps[1].file_name().unwrap().to_str().unwrap().to_string();
    assert!(newest.as_str() > "snapshot-00000000000000000003.ark", "compacted several times: {newest}");
    // The journal never grows much past the larger of the threshold and the snapshot.
    let snap_len = fs::metadata(&snaps[1]).unwrap().len();
    let journal_len = fs::metadata(&journals[1]).unwrap().len();
    assert!(journal_len < snap_len.max(2048) + 2048, "journal {journal_len}, snapshot {snap_len}");
    assert_eq!(
        FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap(),
        state_after("s1", 300)
    );
}

#[tokio::test]
async fn save_snapshot_starts_an_empty_journal() {
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    play(&store, 1, 7, &mut state).await;
    store.save_snapshot(&state).await.unwrap();
    let dir = root.path().join("s1");
    let journal = files(&dir, "journal-").pop().unwrap();
    assert_eq!(
        fs::metadata(&journal).unwrap().len(),
        arkagent::state::codec::JOURNAL_HEADER_LEN as u64,
        "header only"
    );
    assert_eq!(FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap(), state);
}

#[tokio::test]
async fn delete_removes_the_session() {
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    play(&store, 1, 3, &mut state).await;
    assert!(store.delete("s1").await.unwrap());
    assert!(!root.path().join("s1").exists());
    assert!(!store.delete("s1").await.unwrap());
    assert_eq!(store.load("s1").await.unwrap(), None);
    // The session can start again after deletion.
    let mut state = AgentState::new("s1");
    play(&store, 1, 2, &mut state).await;
    assert_eq!(store.load_unrepaired("s1").await.unwrap().unwrap(), state_after("s1", 2));
}

#[tokio::test]
async fn a_deleted_session_goes_whole_through_the_trash_which_the_next_deletion_sweeps() {
    // A deletion moves the session's directory into the trash in one step, then removes it: a
    // kill after the move leaves files there that no load reads (tests/state_delete_crash.rs
    // kills deletions), and the next deletion sweeps them.
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    play(&store, 1, 3, &mut state).await;
    assert!(store.delete("s1").await.unwrap());
    let trash = root.path().join(arkagent::state::TRASH_DIR);
    assert_eq!(fs::read_dir(&trash).unwrap().count(), 0, "removed once moved");
    // What a kill right after the move leaves: the session's files in the trash.
    let mut state = AgentState::new("s1");
    play(&store, 1, 3, &mut state).await;
    let left = trash.join("s1.killed");
    fs::rename(root.path().join("s1"), &left).unwrap();
    let fresh = FileStore::new(root.path());
    assert_eq!(fresh.load("s1").await.unwrap(), None);
    assert!(!fresh.exists("s1").await.unwrap());
    // Another session's deletion sweeps it.
    let mut other = AgentState::new("s2");
    play(&fresh, 1, 2, &mut other).await;
    assert!(fresh.delete("s2").await.unwrap());
    assert_eq!(fs::read_dir(&trash).unwrap().count(), 0, "swept");
    assert_eq!(fresh.load("s2").await.unwrap(), None);
}

#[tokio::test]
async fn a_deletion_that_cannot_make_the_trash_goes_through_the_root_and_is_swept() {
    // On a full disk a new directory needs a block there is none of: the first deletion ever
    // failed making the trash (`state_io`), though deleting old sessions is how an app frees
    // room. The trash is now made with the root's first session, while there is room; a root
    // without it (an older version's) deletes through a grave in the root itself.
    let root = tempfile::tempdir().unwrap();
    let trash = root.path().join(arkagent::state::TRASH_DIR);
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    play(&store, 1, 2, &mut state).await;
    assert!(trash.is_dir(), "made by the first commit of the root's first session");
    // A trash that cannot be made (a file stands in its place, as good as a full disk here).
    fs::remove_dir(&trash).unwrap();
    fs::write(&trash, b"not a directory").unwrap();
    let mut other = AgentState::new("s2");
    play(&store, 1, 3, &mut other).await;
    assert!(store.delete("s1").await.unwrap(), "deleted without the trash");
    assert_eq!(FileStore::new(root.path()).load("s1").await.unwrap(), None);
    assert!(!store.exists("s1").await.unwrap());
    let mut names: Vec<String> =
        fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, [arkagent::state::TRASH_DIR, "s2"], "nothing left of s1");
    // What a kill between that rename and the removal leaves in the root: read by no load or
    // listing, swept by an open (and a first listing, and the next deletion).
    play(&store, 1, 2, &mut AgentState::new("s1")).await;
    let grave = root.path().join("..trash-s1.0123456789abcdef");
    fs::rename(root.path().join("s1"), &grave).unwrap();
    assert_eq!(store.list().await.unwrap(), ["s2"]);
    assert_eq!(store.load("s1").await.unwrap(), None);
    FileStore::open(root.path(), FileStoreOptions::default()).await.unwrap();
    assert!(!grave.exists(), "swept by open");
    assert_eq!(store.load_unrepaired("s2").await.unwrap().unwrap(), other);
}

#[tokio::test]
async fn invalid_session_ids_are_refused_by_every_operation_of_both_stores() {
    let root = tempfile::tempdir().unwrap();
    let inner = root.path().join("root");
    let file = FileStore::new(&inner);
    let mem = MemoryStore::new();
    let long = "x".repeat(300);
    for store in [&file as &dyn StateStore, &mem] {
        for id in ["", "..", "../escape", "a/b", "a\\b", "a\0b", ".", long.as_str()] {
            let state = AgentState::new(id);
            let errs = [
                store.load(id).await.unwrap_err(),
                store.load_unrepaired(id).await.unwrap_err(),
                store.commit(&state, &turn(1)).await.unwrap_err(),
                store.save_snapshot(&state).await.unwrap_err(),
                store.delete(id).await.unwrap_err(),
            ];
            for e in errs {
                assert_eq!(e.code, codes::SESSION_ID_INVALID, "{id:?}");
            }
        }
    }
    assert!(!inner.exists(), "nothing was created");
    assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn memory_store_agrees_with_the_file_store() {
    let root = tempfile::tempdir().unwrap();
    let file = FileStore::new(root.path());
    let mem = MemoryStore::new();
    let (mut a, mut b) = (AgentState::new("s1"), AgentState::new("s1"));
    play(&file, 1, 13, &mut a).await;
    play(&mem, 1, 13, &mut b).await;
    // Turn 13 leaves call-11 started and unfinished: both stores repair it the same way on load.
    let from_file = file.load("s1").await.unwrap().unwrap();
    let from_mem = mem.load("s1").await.unwrap().unwrap();
    assert_eq!(from_file, from_mem);
    assert_eq!(mem.session_ids(), vec!["s1".to_string()]);
    assert!(mem.delete("s1").await.unwrap());
    assert_eq!(mem.load("s1").await.unwrap(), None);
}

#[tokio::test]
async fn load_repairs_with_the_store_policy_and_load_unrepaired_does_not() {
    let root = tempfile::tempdir().unwrap();
    let mut state = AgentState::new("s1");
    let conservative = FileStore::new(root.path());
    play(&conservative, 1, 13, &mut state).await;
    // Turn 13 started call-11 (approved batch, status running): a crash now leaves it orphaned.
    assert_eq!(state.status, RunStatus::Running);
    let raw = conservative.load_unrepaired("s1").await.unwrap().unwrap();
    assert!(check_pairing(&raw.messages, &[]).is_err());
    let repaired = conservative.load("s1").await.unwrap().unwrap();
    check_pairing(&repaired.messages, &[]).unwrap();
    let last = repaired.messages.last().unwrap();
    assert!(matches!(last, ChatMessage::Tool { tool_call_id, is_error: true, content, .. }
        if tool_call_id == "call-11" && content.contains("tool_interrupted")));

    // A store whose policy knows the tool is idempotent leaves the call for the runtime.
    let opts = FileStoreOptions {
        repair: RepairPolicy::with_idempotent(|name| name == "clear_baking_cache"),
        ..FileStoreOptions::default()
    };
    let lenient = FileStore::with_options(root.path(), opts);
    let s = lenient.load("s1").await.unwrap().unwrap();
    assert_eq!(s.messages, raw.messages);
    check_pairing(&s.messages, &["call-11"]).unwrap();
}

#[tokio::test]
async fn an_awaiting_batch_is_loaded_as_pending_not_orphaned() {
    let store = MemoryStore::new();
    let mut state = AgentState::new("s1");
    play(&store, 1, 1, &mut state).await;
    assert_eq!(state.status, RunStatus::AwaitingApproval);
    let loaded = store.load("s1").await.unwrap().unwrap();
    assert_eq!(loaded, state, "nothing synthesised for a batch awaiting approval");
    let call: &ToolCall = &loaded.messages.last().unwrap().tool_calls()[0];
    check_pairing(&loaded.messages, &[call.id.as_str()]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_commit_concurrently() {
    let root = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::with_options(
        root.path(),
        FileStoreOptions { compact_min_bytes: 1024, ..FileStoreOptions::default() },
    ));
    let mut tasks = Vec::new();
    for n in 0..6 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("s{n}");
            let mut state = AgentState::new(&id);
            for k in 1..=40 {
                let events = turn(k);
                for e in &events {
                    state.apply(e);
                }
                store.commit(&state, &events).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let fresh = FileStore::new(root.path());
    for n in 0..6 {
        let id = format!("s{n}");
        assert_eq!(fresh.load_unrepaired(&id).await.unwrap().unwrap(), state_after(&id, 40));
    }
}

#[tokio::test]
async fn events_that_create_a_session_are_held_by_its_first_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    state.metadata.insert("set-directly".into(), 1.into());
    let ev = StateEvent::MessageAppended { message: ChatMessage::user("first") };
    state.apply(&ev);
    store.commit(&state, &[ev]).await.unwrap();
    let dir = root.path().join("s1");
    assert_eq!(
        fs::metadata(files(&dir, "journal-").pop().unwrap()).unwrap().len(),
        arkagent::state::codec::JOURNAL_HEADER_LEN as u64
    );
    assert_eq!(FileStore::new(root.path()).load("s1").await.unwrap().unwrap(), state);
}

#[tokio::test]
async fn a_journal_of_the_former_format_is_read_and_never_appended_to() {
    use arkagent::state::codec::{decode_journal, encode_records, JOURNAL_FORMAT};
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let mut state = AgentState::new("s1");
    play(&FileStore::new(root.path()), 1, 1, &mut state).await;
    // Turns 2 and 3 as the former code journaled them: format 2, one event per record.
    let journal = files(&dir, "journal-").pop().unwrap();
    let mut legacy = b"ARKJ\x02\x00\x00\x00".to_vec();
    for e in [turn(2), turn(3)].concat() {
        legacy.extend(encode_records(std::slice::from_ref(&e)).unwrap());
        state.apply(&e);
    }
    fs::write(&journal, &legacy).unwrap();
    let store = FileStore::new(root.path());
    assert_eq!(store.load_unrepaired("s1").await.unwrap().unwrap(), state_after("s1", 3));
    // The next commit starts a new generation instead of appending commit records to it, which
    // code that knows only format 2 would misread.
    play(&store, 4, 4, &mut state).await;
    assert_eq!(fs::read(&journal).unwrap(), legacy, "the former journal is left as it was");
    let newest = files(&dir, "journal-").pop().unwrap();
    assert_ne!(newest, journal);
    assert_eq!(decode_journal(&fs::read(&newest).unwrap()).unwrap().format, JOURNAL_FORMAT);
    play(&store, 5, 5, &mut state).await;
    drop(store);
    let loaded = FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(loaded, state_after("s1", 5));
}

/// The files under `dir` this process holds open (Linux: `/proc/self/fd`).
fn open_files_under(dir: &std::path::Path) -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[tokio::test]
async fn a_store_keeps_a_bounded_number_of_journals_open() {
    // One journal per written session stayed open for the store's life: an app with hundreds of
    // conversations ran out of file descriptors ("Too many open files"), for everything it opens.
    let root = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(root.path()).unwrap();
    let store = FileStore::new(&dir);
    let sessions = 3 * arkagent::state::MAX_OPEN_JOURNALS;
    let mut states: Vec<AgentState> = (0..sessions).map(|n| AgentState::new(format!("c{n}"))).collect();
    for state in &mut states {
        play(&store, 1, 2, state).await;
    }
    let open = open_files_under(&dir);
    assert!(open <= arkagent::state::MAX_OPEN_JOURNALS, "{open} files open for {sessions} sessions");
    // A session whose journal was closed appends at its next commit as before.
    for state in &mut states {
        play(&store, 3, 3, state).await;
    }
    assert!(open_files_under(&dir) <= arkagent::state::MAX_OPEN_JOURNALS);
    let fresh = FileStore::new(&dir);
    for state in &states {
        assert_eq!(fresh.load_unrepaired(&state.session_id).await.unwrap().as_ref(), Some(state));
    }
}

#[tokio::test]
async fn a_directory_of_the_app_s_own_is_no_session_and_deleting_its_name_removes_nothing() {
    // A root the app shares: its own directory, no file of the store in it. It was no session
    // for loads and listings, yet `delete` of its name removed it with the app's files.
    let root = tempfile::tempdir().unwrap();
    let images = root.path().join("images");
    fs::create_dir_all(images.join("thumbs")).unwrap();
    fs::write(images.join("cat.png"), b"png").unwrap();
    fs::write(images.join("thumbs/cat.png"), b"png").unwrap();
    // Names near the store's, but not its own.
    for name in ["snapshot-x.ark", "journal-1.ark.bak", "upload.tmp", "damaged-journal-1-x.ark"] {
        fs::write(images.join(name), b"app").unwrap();
    }
    let store = FileStore::new(root.path());
    assert_eq!(store.load("images").await.unwrap(), None);
    assert!(store.list().await.unwrap().is_empty());
    assert!(!store.exists("images").await.unwrap());
    assert!(!store.delete("images").await.unwrap(), "no session of that name");
    assert_eq!(files(&images, "").len(), 6, "every file of the app's is still there");
    assert_eq!(fs::read(images.join("thumbs/cat.png")).unwrap(), b"png");
}

#[tokio::test]
async fn deleting_a_session_removes_the_store_s_files_and_keeps_the_app_s_own() {
    // A session whose directory also holds the app's files (a root it shares, an id that names
    // one of its directories): the deletion removes the session, never those files.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    fs::create_dir_all(dir.join("attachments")).unwrap();
    fs::write(dir.join("attachments/a.txt"), b"a").unwrap();
    fs::write(dir.join("notes.tmp"), b"notes").unwrap();
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut state = AgentState::new("s1");
    play(&store, 1, 30, &mut state).await;
    assert!(files(&dir, "snapshot-").len() >= 2, "compactions ran");
    assert_eq!(
        fs::read(dir.join("notes.tmp")).unwrap(),
        b"notes",
        "a compaction prunes only its own temp files"
    );
    assert!(store.delete("s1").await.unwrap());
    assert_eq!(store.load("s1").await.unwrap(), None);
    assert!(!store.exists("s1").await.unwrap());
    assert!(store.list().await.unwrap().is_empty());
    let mut left: Vec<String> =
        fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["attachments", "notes.tmp"], "the app's files stay where they were");
    assert_eq!(fs::read(dir.join("attachments/a.txt")).unwrap(), b"a");
    let trash = root.path().join(arkagent::state::TRASH_DIR);
    assert_eq!(fs::read_dir(&trash).unwrap().count(), 0);

    // A kill right after the move leaves the app's files in the trash: the next sweep moves them
    // back, removing only the store's.
    let mut state = AgentState::new("s1");
    play(&store, 1, 3, &mut state).await;
    fs::rename(&dir, trash.join("s1.killed")).unwrap();
    let fresh = FileStore::open(root.path(), FileStoreOptions::default()).await.unwrap();
    assert_eq!(fs::read_dir(&trash).unwrap().count(), 0, "swept");
    assert_eq!(fresh.load("s1").await.unwrap(), None);
    assert_eq!(fs::read(dir.join("attachments/a.txt")).unwrap(), b"a");
    assert_eq!(fs::read(dir.join("notes.tmp")).unwrap(), b"notes");
    assert!(files(&dir, "snapshot-").is_empty() && files(&dir, "journal-").is_empty());
}

#[tokio::test]
async fn a_compaction_keeps_a_state_json_of_the_app_s_own() {
    // A version-1 `state.json` is the store's to prune only when it holds this session's state;
    // one the app put in the session's directory later stays through every compaction.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut state = AgentState::new("s1");
    play(&store, 1, 3, &mut state).await;
    let before = files(&dir, "snapshot-");
    fs::write(dir.join("state.json"), br#"{"session_id":"other","app":true}"#).unwrap();
    play(&store, 4, 30, &mut state).await;
    assert_ne!(files(&dir, "snapshot-"), before, "compactions ran");
    assert_eq!(fs::read(dir.join("state.json")).unwrap(), br#"{"session_id":"other","app":true}"#);
    assert_eq!(store.load("s1").await.unwrap(), Some(state));
}
