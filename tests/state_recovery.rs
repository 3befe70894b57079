//! Torn writes and corrupt files: a journal cut at every byte offset of its last record, flipped
//! bytes in snapshots and journals, and the leftovers of a crash during compaction.

mod state_support;

use arkagent::codes;
use arkagent::state::codec::{
    decode_snapshot, decode_snapshot_of, encode_snapshot, encode_snapshot_of, encode_state,
    JOURNAL_HEADER_LEN,
};
use arkagent::state::{AgentState, FileStore, FileStoreOptions, StateStore};
use state_support::{files, state_after, turn};
use std::fs;
use std::path::{Path, PathBuf};

async fn play(store: &FileStore, from: u64, to: u64, state: &mut AgentState) {
    for k in from..=to {
        let events = turn(k);
        for e in &events {
            state.apply(e);
        }
        store.commit(state, &events).await.unwrap();
    }
}

async fn load(root: &Path) -> Result<Option<AgentState>, arkagent::AgentError> {
    // A fresh store each time: what a restarted process sees.
    FileStore::new(root).load_unrepaired("s1").await
}

#[tokio::test]
async fn a_journal_cut_at_any_byte_of_its_last_record_loads_the_previous_commit() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let store = FileStore::new(root.path());
    let mut state = AgentState::new("s1");
    play(&store, 1, 9, &mut state).await;
    let journal = files(&dir, "journal-").pop().unwrap();
    let start = fs::metadata(&journal).unwrap().len() as usize;
    play(&store, 10, 10, &mut state).await;
    drop(store);
    let full = fs::read(&journal).unwrap();
    assert!(full.len() > start);
    let before = state_after("s1", 9);
    // Turn 10 is one group commit of several events, written as one record: a cut anywhere inside
    // it loads turn 9, never a part of turn 10 (a commit is loaded whole or not at all).
    assert!(turn(10).len() > 1);
    let after = state_after("s1", 10);
    for cut in start..=full.len() {
        fs::write(&journal, &full[..cut]).unwrap();
        let loaded = load(root.path()).await.unwrap().unwrap();
        let expected = if cut == full.len() { &after } else { &before };
        assert_eq!(&loaded, expected, "cut at {cut} (start {start}, len {})", full.len());
    }
    // After a cut, a new commit drops the torn bytes first, so it is not hidden behind them.
    fs::write(&journal, &full[..full.len() - 3]).unwrap();
    let store = FileStore::new(root.path());
    let mut state = store.load_unrepaired("s1").await.unwrap().unwrap();
    play(&store, 11, 11, &mut state).await;
    drop(store);
    let loaded = load(root.path()).await.unwrap().unwrap();
    assert_eq!(loaded, state);
    assert_eq!(loaded.metadata["seq"], 11);
}

#[tokio::test]
async fn a_commit_after_every_possible_torn_tail_is_kept() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    {
        let store = FileStore::new(root.path());
        let mut state = AgentState::new("s1");
        play(&store, 1, 5, &mut state).await;
        play(&store, 6, 6, &mut state).await;
    }
    let journal = files(&dir, "journal-").pop().unwrap();
    let full = fs::read(&journal).unwrap();
    let last_len = arkagent::state::codec::encode_records(&turn(6)).unwrap().len();
    let start = full.len() - last_len;
    // Every 5th offset plus the ends (each needs a durable commit: a few ms apiece).
    let cuts: Vec<usize> = (start..full.len()).step_by(5).chain([full.len() - 1]).collect();
    for cut in cuts {
        fs::write(&journal, &full[..cut]).unwrap();
        let store = FileStore::new(root.path());
        let mut state = store.load_unrepaired("s1").await.unwrap().unwrap();
        let seq_before = state.metadata["seq"].as_u64().unwrap();
        assert_eq!(seq_before, 5, "cut at {cut}");
        let ev = arkagent::state::StateEvent::MetadataSet { key: "after".into(), value: (cut as u64).into() };
        state.apply(&ev);
        store.commit(&state, &[ev]).await.unwrap();
        drop(store);
        let loaded = load(root.path()).await.unwrap().unwrap();
        assert_eq!(loaded, state, "cut at {cut}");
    }
}

/// A session with two generations and events in the newest journal.
async fn two_generations(root: &Path) -> AgentState {
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root, opts);
    let mut state = AgentState::new("s1");
    let mut k = 0;
    // Play until the newest journal holds some events after a compaction.
    loop {
        k += 1;
        play(&store, k, k, &mut state).await;
        let dir = root.join("s1");
        let snaps = files(&dir, "snapshot-");
        let newest_journal = files(&dir, "journal-").pop().unwrap();
        if snaps.len() == 2 && fs::metadata(&newest_journal).unwrap().len() > 300 {
            return state;
        }
        assert!(k < 500, "never compacted");
    }
}

#[tokio::test]
async fn a_flipped_byte_in_the_newest_snapshot_falls_back_without_losing_a_commit() {
    let root = tempfile::tempdir().unwrap();
    let state = two_generations(root.path()).await;
    let dir = root.path().join("s1");
    let newest = files(&dir, "snapshot-").pop().unwrap();
    let good = fs::read(&newest).unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state);
    // Every header byte, then every 7th payload byte.
    let offsets: Vec<usize> = (0..12).chain((12..good.len()).step_by(7)).collect();
    for i in offsets {
        let mut bad = good.clone();
        bad[i] ^= 0x5a;
        fs::write(&newest, &bad).unwrap();
        let loaded = load(root.path()).await.unwrap().unwrap();
        assert_eq!(loaded, state, "flip at {i}");
    }
    // A truncated or emptied snapshot too.
    for len in [0, 5, good.len() / 2, good.len() - 1] {
        fs::write(&newest, &good[..len]).unwrap();
        assert_eq!(load(root.path()).await.unwrap().unwrap(), state, "snapshot cut to {len}");
    }
    // And the store keeps working on top of the fallback.
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    let k = s.metadata["seq"].as_u64().unwrap();
    play(&store, k + 1, k + 3, &mut s).await;
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", k + 3));
}

#[tokio::test]
async fn both_snapshots_corrupt_is_state_corrupt_and_the_next_commit_starts_afresh() {
    let root = tempfile::tempdir().unwrap();
    let state = two_generations(root.path()).await;
    let dir = root.path().join("s1");
    for snap in files(&dir, "snapshot-") {
        let mut b = fs::read(&snap).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 1;
        fs::write(&snap, b).unwrap();
    }
    let e = load(root.path()).await.unwrap_err();
    assert_eq!(e.code, codes::STATE_CORRUPT);
    assert!(e.message.contains("checksum"), "{}", e.message);
    // The runtime's in-memory state is the best there is: committing it writes a new generation.
    let store = FileStore::new(root.path());
    let ev = arkagent::state::StateEvent::MetadataSet { key: "x".into(), value: 1.into() };
    let mut s = state.clone();
    s.apply(&ev);
    store.commit(&s, &[ev]).await.unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), s);
}

/// Session `s1` in a new root, played turns 1..=8 (the first snapshot holds turn 1, the journal
/// turns 2..=8): the root, the session's directory and its journal.
async fn eight_turns() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    {
        let store = FileStore::new(root.path());
        let mut state = AgentState::new("s1");
        play(&store, 1, 8, &mut state).await;
    }
    let journal = files(&dir, "journal-").pop().unwrap();
    (root, dir, journal)
}

#[tokio::test]
async fn a_flipped_byte_mid_journal_keeps_the_records_before_it() {
    let (root, _, journal) = eight_turns().await;
    let full = fs::read(&journal).unwrap();
    // The first snapshot holds turn 1 (it created the session); the journal holds turns 2..=8.
    let mut offset = JOURNAL_HEADER_LEN;
    for k in 2..=4 {
        offset += arkagent::state::codec::encode_records(&turn(k)).unwrap().len();
    }
    let mut bad = full.clone();
    bad[offset + 20] ^= 0xff; // inside the record of turn 5
    fs::write(&journal, &bad).unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 4));
}

#[tokio::test]
async fn a_commit_after_mid_journal_damage_keeps_the_damaged_journal_aside() {
    let (root, dir, journal) = eight_turns().await;
    let mut bad = fs::read(&journal).unwrap();
    let offset = JOURNAL_HEADER_LEN + arkagent::state::codec::encode_records(&turn(2)).unwrap().len();
    bad[offset + 20] ^= 0xff; // inside the record of turn 3: turns 4..=8 follow it whole
    fs::write(&journal, &bad).unwrap();
    let copy =
        dir.join(journal.file_name().unwrap().to_str().unwrap().replace("journal-", "damaged-journal-"));

    // A new process loads turns 1..=2 and goes on: its first commit truncates the damaged tail
    // of the journal to append after it, but the bytes it cuts are kept, byte for byte.
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 2));
    play(&store, 3, 3, &mut s).await;
    assert_eq!(fs::read(&copy).unwrap(), bad, "the damaged journal is kept whole");
    assert!(fs::metadata(&journal).unwrap().len() < bad.len() as u64, "the journal was truncated");
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 3));

    // Loads and compactions ignore the copy: more commits (compactions included) leave it as it
    // is, and no second copy is made.
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    play(&store, 4, 40, &mut s).await;
    assert!(files(&dir, "snapshot-").len() >= 2);
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 40));
    assert_eq!(fs::read(&copy).unwrap(), bad);
    assert_eq!(files(&dir, "damaged-").len(), 1);

    // Deleting the session takes the copy with it.
    store.delete("s1").await.unwrap();
    assert!(!dir.exists());
}

#[tokio::test]
async fn a_second_damage_in_the_same_generation_is_kept_aside_too() {
    let (root, dir, journal) = eight_turns().await;
    let record = |k| arkagent::state::codec::encode_records(&turn(k)).unwrap().len();
    // Damage 1: inside the record of turn 3 (turns 4..=8 follow it whole).
    let mut first = fs::read(&journal).unwrap();
    first[8 + record(2) + 20] ^= 0xff;
    fs::write(&journal, &first).unwrap();
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 2));
    play(&store, 3, 8, &mut s).await;
    drop(store);
    assert_eq!(files(&dir, "damaged-").len(), 1);

    // Damage 2, in the same generation: inside the record of turn 4 (turns 5..=8 follow it).
    let mut second = fs::read(&journal).unwrap();
    second[8 + record(2) + record(3) + 20] ^= 0xff;
    fs::write(&journal, &second).unwrap();
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 3));
    play(&store, 4, 8, &mut s).await;
    drop(store);
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 8));
    // Both damaged journals are on disk, byte for byte: the commits after each damage were not lost.
    let stem = first_copy_stem(&journal);
    assert_eq!(files(&dir, "damaged-journal-").len(), 2);
    assert_eq!(fs::read(dir.join(format!("{stem}.ark"))).unwrap(), first);
    assert_eq!(fs::read(dir.join(format!("{stem}-2.ark"))).unwrap(), second);

    // Damage 3, whose copy a commit that failed after making it left: not made again.
    let mut third = fs::read(&journal).unwrap();
    third[8 + record(2) + record(3) + record(4) + 20] ^= 0xff;
    fs::write(&journal, &third).unwrap();
    fs::write(dir.join(format!("{stem}-3.ark")), &third).unwrap();
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 4));
    play(&store, 5, 5, &mut s).await;
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 5));
    assert_eq!(files(&dir, "damaged-journal-").len(), 3);
}

/// `damaged-journal-<gen>` for `journal` (`journal-<gen>.ark`).
fn first_copy_stem(journal: &Path) -> String {
    let name = journal.file_name().unwrap().to_str().unwrap();
    name.replace("journal-", "damaged-journal-").trim_end_matches(".ark").to_string()
}

#[tokio::test]
async fn a_flipped_length_bit_mid_journal_is_kept_aside_not_cut_as_a_torn_tail() {
    let (root, dir, journal) = eight_turns().await;
    let mut bad = fs::read(&journal).unwrap();
    // One bit of the length of turn 3's record: it now runs past the end of the file.
    let at = JOURNAL_HEADER_LEN + arkagent::state::codec::encode_records(&turn(2)).unwrap().len();
    bad[at + 2] ^= 1;
    fs::write(&journal, &bad).unwrap();
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 2));
    play(&store, 3, 3, &mut s).await;
    let copies = files(&dir, "damaged-journal-");
    assert_eq!(copies.len(), 1, "turns 3..=8 are kept before the journal is cut");
    assert_eq!(fs::read(&copies[0]).unwrap(), bad);
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 3));
}

#[tokio::test]
async fn a_commit_after_a_cut_chain_keeps_the_journals_it_could_not_fold() {
    let root = tempfile::tempdir().unwrap();
    let state = two_generations(root.path()).await;
    let dir = root.path().join("s1");
    // The newest snapshot is bad, so the load falls back to the older generation, whose journal is
    // damaged too: the newer journal continues from records the chain lost.
    let mut snaps = files(&dir, "snapshot-");
    let newest = snaps.pop().unwrap();
    let mut b = fs::read(&newest).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    fs::write(&newest, b).unwrap();
    let journals = files(&dir, "journal-");
    assert_eq!(journals.len(), 2);
    let mut older = fs::read(&journals[0]).unwrap();
    let at = older.len() / 2;
    older[at] ^= 0xff;
    fs::write(&journals[0], &older).unwrap();
    let newer = fs::read(&journals[1]).unwrap();
    let loaded = load(root.path()).await.unwrap().unwrap();
    assert_ne!(loaded, state, "the chain is cut: the load cannot reach the last state");

    // The next commit starts a fresh generation, which prunes the older one: both journals the
    // load could not fold whole are kept aside first.
    let store = FileStore::new(root.path());
    let mut s = loaded.clone();
    let ev = arkagent::state::StateEvent::MetadataSet { key: "x".into(), value: 1.into() };
    s.apply(&ev);
    store.commit(&s, &[ev]).await.unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), s);
    let copies = files(&dir, "damaged-journal-");
    assert_eq!(copies.len(), 2, "{copies:?}");
    assert_eq!(fs::read(&copies[0]).unwrap(), older);
    assert_eq!(fs::read(&copies[1]).unwrap(), newer);
    assert!(!journals[0].exists(), "the older generation was pruned");
}

#[tokio::test]
async fn a_missing_or_empty_older_journal_stops_the_fallback_and_keeps_the_newer_one_aside() {
    for missing in [false, true] {
        let root = tempfile::tempdir().unwrap();
        let state = two_generations(root.path()).await;
        let dir = root.path().join("s1");
        let newest = files(&dir, "snapshot-").pop().unwrap();
        let mut b = fs::read(&newest).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 1;
        fs::write(&newest, b).unwrap();
        let journals = files(&dir, "journal-");
        assert_eq!(journals.len(), 2);
        if missing {
            fs::remove_file(&journals[0]).unwrap();
        } else {
            fs::write(&journals[0], b"").unwrap();
        }
        let newer = fs::read(&journals[1]).unwrap();
        // The older snapshot alone: its journal's records are gone, so the newer journal (which
        // continues from them) is not folded onto it.
        let older_snapshot = files(&dir, "snapshot-")[0].clone();
        let alone = decode_snapshot(&fs::read(&older_snapshot).unwrap()).unwrap();
        let loaded = load(root.path()).await.unwrap().unwrap();
        assert_eq!(loaded, alone, "missing: {missing}");
        assert_ne!(loaded, state);

        // The next commit starts a fresh generation and keeps the newer journal aside first.
        let store = FileStore::new(root.path());
        let mut s = loaded.clone();
        let ev = arkagent::state::StateEvent::MetadataSet { key: "x".into(), value: 1.into() };
        s.apply(&ev);
        store.commit(&s, &[ev]).await.unwrap();
        assert_eq!(load(root.path()).await.unwrap().unwrap(), s);
        let copies = files(&dir, "damaged-journal-");
        assert!(copies.iter().any(|c| fs::read(c).unwrap() == newer), "missing: {missing}, {copies:?}");
    }
}

#[tokio::test]
async fn leftovers_of_a_crash_during_compaction_are_ignored() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let state = {
        let store = FileStore::new(root.path());
        let mut state = AgentState::new("s1");
        play(&store, 1, 6, &mut state).await;
        state
    };
    let gen = files(&dir, "snapshot-").len() as u64;
    // A crash after the next generation's journal was created and its snapshot half written.
    fs::write(
        dir.join(format!("journal-{:020}.ark", gen + 1)),
        arkagent::state::codec::journal_header(gen + 1),
    )
    .unwrap();
    fs::write(dir.join(format!("snapshot-{:020}.tmp", gen + 1)), b"ARKS\x10\x00").unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state);
    // The next compaction clears them.
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    play(&store, 7, 7, &mut s).await;
    store.save_snapshot(&s).await.unwrap();
    assert!(files(&dir, "snapshot-").iter().all(|p| p.extension().unwrap() == "ark"));
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 7));
}

#[tokio::test]
async fn a_hand_deleted_newest_snapshot_folds_its_journal_onto_the_previous_one() {
    // Removed by hand, the newest snapshot took the records of its journal with it: the load read
    // the older generation alone, as the session stood at the compaction.
    let root = tempfile::tempdir().unwrap();
    let state = two_generations(root.path()).await;
    let dir = root.path().join("s1");
    let newest = files(&dir, "snapshot-").pop().unwrap();
    fs::remove_file(&newest).unwrap();
    // The older journal holds every event up to the newest snapshot: nothing is lost.
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state);
    assert_eq!(FileStore::new(root.path()).list().await.unwrap(), ["s1"]);

    // The store goes on from there (appending to the newest journal, then compacting past it),
    // with nothing kept aside: no record was left out.
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    let k = s.metadata["seq"].as_u64().unwrap();
    play(&store, k + 1, k + 1, &mut s).await;
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", k + 1));
    play(&store, k + 2, k + 30, &mut s).await;
    assert!(files(&dir, "snapshot-").pop().unwrap() > newest, "a later compaction went past it");
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", k + 30));
    assert!(files(&dir, "damaged-").is_empty());
}

/// The generation a snapshot file's name gives, and the one its content names.
fn generations_of(snapshot: &Path) -> (u64, Option<u64>) {
    let name = snapshot.file_stem().unwrap().to_str().unwrap();
    let named = name.strip_prefix("snapshot-").unwrap().parse().unwrap();
    (named, decode_snapshot_of(&fs::read(snapshot).unwrap()).unwrap().1)
}

#[tokio::test]
async fn an_older_snapshot_copied_under_the_newest_one_s_name_loses_no_commit() {
    // An older snapshot copied over the newest (by hand, or a backup put back) decoded fine and
    // was folded with the newest generation's journal: the records of the older journal (every
    // commit between the two snapshots) were left out, and the next compaction pruned them.
    let root = tempfile::tempdir().unwrap();
    let state = two_generations(root.path()).await;
    let dir = root.path().join("s1");
    let snaps = files(&dir, "snapshot-");
    assert_eq!(snaps.len(), 2);
    for snap in &snaps {
        let (named, written) = generations_of(snap);
        assert_eq!(written, Some(named), "a snapshot names its generation");
    }
    let journals = files(&dir, "journal-");
    assert!(fs::metadata(&journals[0]).unwrap().len() > JOURNAL_HEADER_LEN as u64);
    fs::copy(&snaps[0], &snaps[1]).unwrap();
    // It is passed by as a damaged one: the older generation and both journals, nothing lost.
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state);

    // The store goes on from there, and a compaction past it keeps every commit.
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    let k = s.metadata["seq"].as_u64().unwrap();
    play(&store, k + 1, k + 30, &mut s).await;
    assert!(files(&dir, "snapshot-").pop().unwrap() > snaps[1], "a later compaction went past it");
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", k + 30));
}

#[tokio::test]
async fn snapshots_written_before_the_generation_was_recorded_still_load() {
    let root = tempfile::tempdir().unwrap();
    let state = two_generations(root.path()).await;
    let dir = root.path().join("s1");
    // Both snapshots as earlier versions wrote them: no generation in them.
    let snaps = files(&dir, "snapshot-");
    for snap in &snaps {
        let older = decode_snapshot(&fs::read(snap).unwrap()).unwrap();
        fs::write(snap, encode_snapshot(&older).unwrap()).unwrap();
        assert_eq!(generations_of(snap).1, None);
    }
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state);
    assert_eq!(FileStore::new(root.path()).list().await.unwrap(), ["s1"]);
    // The fallback from a damaged newest snapshot reads them as before.
    let mut b = fs::read(&snaps[1]).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    fs::write(&snaps[1], b).unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state);

    // Commits go on; the snapshots compactions write name their generation.
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts);
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    let k = s.metadata["seq"].as_u64().unwrap();
    play(&store, k + 1, k + 30, &mut s).await;
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", k + 30));
    let newest = files(&dir, "snapshot-").pop().unwrap();
    assert!(newest > snaps[1]);
    let (named, written) = generations_of(&newest);
    assert_eq!(written, Some(named));
}

#[tokio::test]
async fn a_journal_whose_snapshot_is_gone_and_cannot_be_folded_is_kept_aside() {
    use arkagent::state::codec::encode_records;
    // Generation 1's journal is of the former format (2): the next commit (turn 4) started
    // generation 2 from a snapshot, without journaling turn 4 anywhere else. Folding generation
    // 2's journal onto generation 1 would give turns 1, 2, 3 and 5: a state that never was.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let mut state = AgentState::new("s1");
    play(&FileStore::new(root.path()), 1, 1, &mut state).await;
    let journal = files(&dir, "journal-").pop().unwrap();
    let mut former = b"ARKJ\x02\x00\x00\x00".to_vec();
    for e in [turn(2), turn(3)].concat() {
        former.extend(encode_records(std::slice::from_ref(&e)).unwrap());
        state.apply(&e);
    }
    fs::write(&journal, &former).unwrap();
    let store = FileStore::new(root.path());
    play(&store, 4, 5, &mut state).await;
    drop(store);
    assert_eq!(files(&dir, "snapshot-").len(), 2);
    let newest = files(&dir, "snapshot-").pop().unwrap();
    fs::remove_file(&newest).unwrap();
    let orphan = files(&dir, "journal-").pop().unwrap();
    let orphan_bytes = fs::read(&orphan).unwrap();

    // The load gives the session as it stood before the damage, never turns 1..=3 and 5.
    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 3));
    // The next commit starts a fresh generation; the journal it could not fold is kept first.
    let ev = arkagent::state::StateEvent::MetadataSet { key: "x".into(), value: 1.into() };
    s.apply(&ev);
    store.commit(&s, &[ev]).await.unwrap();
    let copies = files(&dir, "damaged-journal-");
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(
        copies[0].file_name(),
        Some(std::ffi::OsStr::new(
            &orphan.file_name().unwrap().to_str().unwrap().replace("journal-", "damaged-journal-"),
        ))
    );
    assert_eq!(fs::read(&copies[0]).unwrap(), orphan_bytes, "kept byte for byte");
    assert_eq!(load(root.path()).await.unwrap().unwrap(), s);
    // Later commits load on from the new generation; the copy stays as it is.
    play(&store, 6, 6, &mut s).await;
    assert_eq!(load(root.path()).await.unwrap().unwrap(), s);
    assert_eq!(fs::read(&copies[0]).unwrap(), orphan_bytes);
}

#[tokio::test]
async fn a_journal_whose_only_snapshot_is_gone_is_state_corrupt_not_a_missing_session() {
    // The session's only snapshot removed by hand: its journal continues from nothing left. The
    // load said `None`, so the session vanished from the listing, and a new run under its id
    // started afresh over the journal, which a later compaction pruned without a copy.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let mut state = AgentState::new("s1");
    play(&FileStore::new(root.path()), 1, 4, &mut state).await;
    assert_eq!(files(&dir, "snapshot-").len(), 1);
    fs::remove_file(files(&dir, "snapshot-").pop().unwrap()).unwrap();
    let journal = files(&dir, "journal-").pop().unwrap();
    let journal_bytes = fs::read(&journal).unwrap();

    let e = load(root.path()).await.unwrap_err();
    assert_eq!(e.code, codes::STATE_CORRUPT);
    assert!(e.message.contains("snapshot"), "{}", e.message);
    let store = FileStore::new(root.path());
    assert_eq!(store.list().await.unwrap(), ["s1"], "listed, with its error");
    assert!(store.exists("s1").await.unwrap());
    // A commit of a caller's state (the store's answer to a session no load reads) keeps the
    // journal aside before it writes a new generation.
    let fresh = state_after("s1", 1);
    store.save_snapshot(&fresh).await.unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), fresh);
    let copies = files(&dir, "damaged-journal-");
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(fs::read(&copies[0]).unwrap(), journal_bytes);

    // A journal holding no record (what a first commit cut short leaves) is still no session.
    let other = root.path().join("s2");
    fs::create_dir(&other).unwrap();
    fs::write(other.join(format!("journal-{:020}.ark", 1)), arkagent::state::codec::journal_header(1))
        .unwrap();
    assert_eq!(store.load("s2").await.unwrap(), None);
    assert_eq!(store.list().await.unwrap(), ["s1"]);
}

#[tokio::test]
async fn a_flipped_bit_of_the_journal_format_is_damage_not_a_newer_version() {
    // Format 4 with bit 2 flipped reads 0: with bit 0, 5, a format no arkagent wrote yet. The
    // header's checksum tells damage from a newer arkagent's journal, which would be refused.
    for bit in [0, 1, 3, 7] {
        let (root, dir, journal) = eight_turns().await;
        let mut bad = fs::read(&journal).unwrap();
        bad[4] ^= 1 << bit;
        fs::write(&journal, &bad).unwrap();
        let store = FileStore::new(root.path());
        // The journal is unreadable from its header on: the state of the snapshot (turn 1).
        let mut s = store.load_unrepaired("s1").await.unwrap_or_else(|e| panic!("bit {bit}: {e}")).unwrap();
        assert_eq!(s, state_after("s1", 1), "bit {bit}");
        assert_eq!(store.list().await.unwrap(), ["s1"]);
        // The next commit keeps the journal aside, byte for byte, and goes on.
        play(&store, 2, 2, &mut s).await;
        let copies = files(&dir, "damaged-journal-");
        assert_eq!(copies.len(), 1, "bit {bit}: {copies:?}");
        assert_eq!(fs::read(&copies[0]).unwrap(), bad);
        assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 2));
    }
}

#[tokio::test]
async fn a_copy_of_a_journal_under_another_generation_is_not_folded_twice() {
    // Generation 1: the snapshot of turn 1, the journal of turns 2..=3. A copy of that journal
    // named as generation 2's (no snapshot) looked like the continuation of generation 1, so its
    // records were applied a second time (turns 2 and 3 twice in the history).
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let mut state = AgentState::new("s1");
    play(&FileStore::new(root.path()), 1, 3, &mut state).await;
    let journal = files(&dir, "journal-").pop().unwrap();
    let copy = dir.join(format!("journal-{:020}.ark", 2));
    fs::copy(&journal, &copy).unwrap();
    let copied = fs::read(&copy).unwrap();

    let store = FileStore::new(root.path());
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, state_after("s1", 3));
    // The next commit keeps the copy aside and starts a fresh generation.
    play(&store, 4, 4, &mut s).await;
    let kept = files(&dir, "damaged-journal-");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(fs::read(&kept[0]).unwrap(), copied);
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 4));

    // The same copy over a generation that has its snapshot: that snapshot's state alone.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let opts = FileStoreOptions { compact_min_bytes: 1500, ..FileStoreOptions::default() };
    let mut state = AgentState::new("s1");
    play(&FileStore::with_options(root.path(), opts.clone()), 1, 30, &mut state).await;
    let journals = files(&dir, "journal-");
    assert_eq!(journals.len(), 2, "{journals:?}");
    let newest = FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap();
    fs::copy(&journals[0], &journals[1]).unwrap();
    let s = FileStore::new(root.path()).load_unrepaired("s1").await.unwrap().unwrap();
    assert!(s.messages.len() <= newest.messages.len(), "no message twice");
    let mut seen = std::collections::HashSet::new();
    for m in &s.messages {
        assert!(seen.insert(serde_json::to_string(m).unwrap()), "a message folded twice: {m:?}");
    }
}

#[tokio::test]
async fn a_generation_at_u64_max_never_panics_nor_wraps() {
    use arkagent::state::codec::journal_header;
    // Generation 1 renamed (by hand) to the last generation there can be, its journal's header
    // saying so: the compaction after it computed `gen + 1` and panicked (overflow), and the
    // commit failed with internal_panic.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    let mut state = AgentState::new("s1");
    play(&FileStore::new(root.path()), 1, 2, &mut state).await;
    let last = |kind: &str| dir.join(format!("{kind}-{:020}.ark", u64::MAX));
    let journal = files(&dir, "journal-").pop().unwrap();
    let mut bytes = journal_header(u64::MAX).to_vec();
    bytes.extend(&fs::read(&journal).unwrap()[JOURNAL_HEADER_LEN..]);
    fs::write(last("journal"), &bytes).unwrap();
    fs::remove_file(&journal).unwrap();
    // The snapshot names its generation: written again as the last one's, as the journal was.
    let snapshot = files(&dir, "snapshot-").pop().unwrap();
    let older = decode_snapshot(&fs::read(&snapshot).unwrap()).unwrap();
    fs::write(last("snapshot"), encode_snapshot_of(u64::MAX, &encode_state(&older).unwrap()).unwrap())
        .unwrap();
    fs::remove_file(&snapshot).unwrap();
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 2));

    // Compactions are due at every commit and cannot be made: the commits go on in the journal.
    let opts = FileStoreOptions { compact_min_bytes: 100, ..FileStoreOptions::default() };
    let store = FileStore::with_options(root.path(), opts.clone());
    play(&store, 3, 8, &mut state).await;
    assert_eq!(load(root.path()).await.unwrap().unwrap(), state_after("s1", 8));
    assert_eq!(files(&dir, "snapshot-"), [last("snapshot")]);
    assert_eq!(files(&dir, "journal-"), [last("journal")]);

    // A commit that must start a new generation (the journal is another generation's) is refused
    // with a structured error; the session still loads as it stood.
    let mut bad = fs::read(last("journal")).unwrap();
    bad[..JOURNAL_HEADER_LEN].copy_from_slice(&journal_header(1));
    fs::write(last("journal"), &bad).unwrap();
    let store = FileStore::with_options(root.path(), opts);
    let snapshot = decode_snapshot(&fs::read(last("snapshot")).unwrap()).unwrap();
    let mut s = store.load_unrepaired("s1").await.unwrap().unwrap();
    assert_eq!(s, snapshot);
    let ev = arkagent::state::StateEvent::MetadataSet { key: "x".into(), value: 1.into() };
    s.apply(&ev);
    let e = store.commit(&s, &[ev]).await.unwrap_err();
    assert_eq!(e.code, codes::STATE_CORRUPT, "{e}");
    assert!(e.message.contains("no new generation"), "{e}");
    assert_eq!(load(root.path()).await.unwrap().unwrap(), snapshot);
    assert!(store.delete("s1").await.unwrap());
}
