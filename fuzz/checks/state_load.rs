//! Arbitrary snapshot and journal bytes -> the decoders of `state::codec`, and a `FileStore` load
//! of a session directory holding them. Never a panic; a load either fails with a `state_*` error
//! or gives a state whose tool calls and results pair up.
//!
//! Input: byte 0 picks how the snapshot is made (raw bytes, or a valid frame around them so the
//! fuzzer reaches the JSON and the migrations), bytes 1..3 the snapshot length, then the snapshot,
//! then the journal (likewise raw, or valid records around JSON payloads split at NUL bytes).
use arkagent::state::codec::{decode_journal, decode_snapshot, decode_state_json, journal_header};
use arkagent::state::{check_pairing, FileStore, RunStatus, StateStore};
use std::sync::OnceLock;

fn frame(payload: &[u8], out: &mut Vec<u8>) {
    let len = payload.len() as u32;
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(payload);
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static R: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    R.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("runtime"))
}

/// Checks one input; panics on a finding.
pub fn run(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let flags = data[0];
    let snap_len = usize::from(u16::from_le_bytes([data[1], data[2]])).min(data.len() - 3);
    let (snap_raw, journal_raw) = data[3..].split_at(snap_len);

    let snapshot = if flags & 1 == 1 {
        let mut s = b"ARKS".to_vec();
        frame(snap_raw, &mut s);
        s
    } else {
        snap_raw.to_vec()
    };
    let journal = if flags & 2 == 2 {
        let mut j = journal_header(1).to_vec();
        for payload in journal_raw.split(|&b| b == 0) {
            frame(payload, &mut j);
        }
        j
    } else {
        journal_raw.to_vec()
    };

    let _ = decode_snapshot(&snapshot);
    let _ = decode_state_json(snap_raw);
    if let Ok(scan) = decode_journal(&journal) {
        assert!(scan.valid_len <= journal.len());
    }

    // The store: a session directory with these files (generation 1), or a legacy state.json.
    let dir = tempfile::tempdir().expect("tempdir");
    let session = dir.path().join("s");
    std::fs::create_dir(&session).expect("mkdir");
    if flags & 4 == 4 {
        std::fs::write(session.join("state.json"), snap_raw).expect("write");
    } else {
        std::fs::write(session.join("snapshot-00000000000000000001.ark"), &snapshot).expect("write");
    }
    std::fs::write(session.join("journal-00000000000000000001.ark"), &journal).expect("write");
    let store = FileStore::new(dir.path());
    match runtime().block_on(store.load("s")) {
        Ok(Some(state)) => {
            // Calls of a batch awaiting approval may be unanswered; everything else pairs up.
            let pending: Vec<&str> = match (&state.pending_approval, state.status) {
                (Some(batch), RunStatus::AwaitingApproval) => batch
                    .items
                    .iter()
                    .map(|i| i.tool_call.id.as_str())
                    .chain(batch.assistant_message.tool_calls().iter().map(|c| c.id.as_str()))
                    .collect(),
                _ => Vec::new(),
            };
            if let Err(e) = check_pairing(&state.messages, &pending) {
                panic!("a loaded state breaks the pairing: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => assert!(e.code.starts_with("state_"), "{e}"),
    }
}
