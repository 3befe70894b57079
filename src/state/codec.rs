//! The on-disk encodings of snapshots and journals, as pure functions over bytes (the file store
//! does the I/O; fuzzers and recovery tests call these directly).
//!
//! A snapshot file is `ARKS` + payload length (u32 LE) + CRC-32 (u32 LE) of length and payload + the
//! payload: the state as JSON. Any flipped bit is caught by the checksum. The file store writes
//! the generation of the snapshot (the `<gen>` of its `snapshot-<gen>.ark` name) into that JSON,
//! as its first key [`SNAPSHOT_GENERATION_KEY`] ([`encode_snapshot_of`]), so that a snapshot
//! under another generation's name (a copy, or an older one put back by hand) is never folded with
//! the journals of the generation it names; snapshots written before it have none
//! ([`encode_snapshot`]) and load as before. A reader that predates the key ignores it (states are
//! read without refusing unknown fields), so it reads such a snapshot as its own.
//!
//! A journal file is a header, then records, each payload length (u32 LE) + CRC-32 (u32 LE) of
//! length and payload + the payload: one commit's events as JSON, a [`StateEvent`] object for a
//! commit of one event, an array of them for a commit of several. The header of the format this
//! code writes ([`JOURNAL_FORMAT`], 4) is `ARKJ` + its format (u32 LE) + the generation of the
//! journal (u64 LE: the `<gen>` of its `journal-<gen>.ark` name) + CRC-32 (u32 LE) of those 16
//! bytes, [`JOURNAL_HEADER_LEN`] bytes in all; formats 1 to 3 had only `ARKJ` + format
//! ([`LEGACY_JOURNAL_HEADER_LEN`] bytes). Records are only ever appended; a crash can leave a torn
//! last record, which the checksum (or the missing bytes) exposes, and which is dropped on load.
//! Only bytes a crash could leave of one record count as torn: a prefix of its payload (compact
//! JSON, no byte below 0x20), maybe followed by zeros. A length that runs past the end over
//! anything else (the header of a later record, after a flipped bit of the length) or over a whole
//! record is corruption, which the file store keeps aside before it truncates. A commit is thus
//! loaded whole or not at all: a commit of several events is never half applied.
//!
//! Formats: 1 and 2 name the schema version of the events, one event per record (journals written
//! before commits were one record; they load as before); 3 is schema-2 events, one record per
//! commit; 4 is format 3 with the generation and the checksum in the header. A journal of a
//! format this code does not know is refused (`state_version_unsupported`) only when its header
//! checksum holds: every format from 4 on keeps this header, so a format field damaged by a
//! flipped bit (the checksum fails) is damage ([`JournalTail::Corrupt`]), never taken for a file
//! of a newer arkagent. (A format-3 header damaged into a newer format is damage too: the bytes
//! where the checksum would be are its first record's, which match with a chance of 2^-32.) Code
//! that knows only format 2 refuses a format-3 journal in the same way instead of misreading its
//! records. New records are never appended to a journal of an older format (the file store starts
//! a new generation first). The generation in the header lets the file store fold a journal only
//! onto the generation it was written for: a copy under another generation's name is damage, not
//! commits to replay twice (journals of formats 1 to 3 carry none).

use super::migrate::migrate_value;
use super::{AgentState, StateEvent};
use crate::error::{codes, AgentError};
use serde_json::Value;

/// The magic bytes that open a snapshot file.
pub const SNAPSHOT_MAGIC: &[u8; 4] = b"ARKS";
/// The magic bytes that open a journal file.
pub const JOURNAL_MAGIC: &[u8; 4] = b"ARKJ";
/// The format of the journals this code writes (see the module doc).
pub const JOURNAL_FORMAT: u32 = 4;
/// Bytes of the journal header of format 4 on (magic + format + generation + checksum).
pub const JOURNAL_HEADER_LEN: usize = 20;
/// Bytes of the journal header of formats 1 to 3 (magic + format).
pub const LEGACY_JOURNAL_HEADER_LEN: usize = 8;
/// The newest format whose header is [`LEGACY_JOURNAL_HEADER_LEN`] bytes (no generation, no
/// checksum).
pub const LAST_LEGACY_JOURNAL_FORMAT: u32 = 3;
/// Bytes before each record's payload (length + checksum).
pub const RECORD_HEADER_LEN: usize = 8;
/// The largest record or snapshot payload accepted (a guard against a corrupt length).
pub const MAX_PAYLOAD_LEN: usize = 1 << 30;

fn checksum(len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

fn corrupt(message: impl Into<String>) -> AgentError {
    AgentError::of(codes::STATE_CORRUPT, message)
}

fn too_large(len: usize) -> AgentError {
    AgentError::of(codes::STATE_IO, format!("a record of {len} bytes is larger than the limit"))
}

fn frame(magic: Option<&[u8; 4]>, payload: &[u8], out: &mut Vec<u8>) -> Result<(), AgentError> {
    if payload.len() > MAX_PAYLOAD_LEN {
        return Err(too_large(payload.len()));
    }
    let len = payload.len() as u32;
    if let Some(m) = magic {
        out.extend_from_slice(m);
    }
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(len, payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// The key of a snapshot's JSON that names the generation it was written for (see the module
/// doc). [`AgentState`] has no field of that name.
pub const SNAPSHOT_GENERATION_KEY: &str = "snapshot_generation";

/// Encodes a state as a snapshot file that names no generation, as snapshots were written before
/// the generation was recorded (the file store writes [`encode_snapshot_of`]).
///
/// # Errors
/// `state_io` when the state cannot be serialised (a payload over [`MAX_PAYLOAD_LEN`]).
pub fn encode_snapshot(state: &AgentState) -> Result<Vec<u8>, AgentError> {
    let payload = encode_state(state)?;
    let mut out = Vec::with_capacity(payload.len() + 12);
    frame(Some(SNAPSHOT_MAGIC), &payload, &mut out)?;
    Ok(out)
}

/// A state as the JSON a snapshot holds, before its generation is known: [`encode_snapshot_of`]
/// makes the snapshot file of it. (The file store serialises the state on the caller's task, and
/// picks the generation when it writes.)
///
/// # Errors
/// `state_io` when the state cannot be serialised (JSON over [`MAX_PAYLOAD_LEN`]).
pub fn encode_state(state: &AgentState) -> Result<Vec<u8>, AgentError> {
    let json = serde_json::to_vec(state)
        .map_err(|e| AgentError::of(codes::STATE_IO, format!("cannot serialise the state: {e}")))?;
    if json.len() > MAX_PAYLOAD_LEN {
        return Err(too_large(json.len()));
    }
    Ok(json)
}

/// Encodes `state_json` (from [`encode_state`]) as the snapshot file of generation `gen`: the
/// generation goes into the JSON as its first key, [`SNAPSHOT_GENERATION_KEY`].
///
/// # Errors
/// `state_io` when `state_json` is no JSON object holding a key, or the payload is over
/// [`MAX_PAYLOAD_LEN`].
pub fn encode_snapshot_of(gen: u64, state_json: &[u8]) -> Result<Vec<u8>, AgentError> {
    let keys = state_json
        .strip_prefix(b"{")
        .filter(|rest| rest.first().is_some_and(|b| *b != b'}'))
        .ok_or_else(|| AgentError::of(codes::STATE_IO, "the state did not serialise as a JSON object"))?;
    let head = format!("{{\"{SNAPSHOT_GENERATION_KEY}\":{gen},");
    let len = head.len() + keys.len();
    if len > MAX_PAYLOAD_LEN {
        return Err(too_large(len));
    }
    // Framed in place (the payload is the whole state: copied once, not twice).
    let mut out = Vec::with_capacity(12 + len);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(keys);
    let crc = checksum(len as u32, &out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a snapshot file: checks magic, length and checksum, then migrates the JSON to the
/// current schema. The generation the snapshot names is not looked at ([`decode_snapshot_of`]).
///
/// # Errors
/// As [`decode_snapshot_of`].
pub fn decode_snapshot(bytes: &[u8]) -> Result<AgentState, AgentError> {
    decode_snapshot_of(bytes).map(|(state, _)| state)
}

/// Decodes a snapshot file as [`decode_snapshot`] does, with the generation it names
/// ([`SNAPSHOT_GENERATION_KEY`]; `None` for a snapshot written before it was recorded).
///
/// # Errors
/// `state_corrupt` (bad magic, length or checksum, JSON that is no state, or a generation that
/// is no integer), `state_version_unsupported` (written by a newer version),
/// `state_migration_failed`.
pub fn decode_snapshot_of(bytes: &[u8]) -> Result<(AgentState, Option<u64>), AgentError> {
    if bytes.len() < 12 || &bytes[..4] != SNAPSHOT_MAGIC {
        return Err(corrupt("the snapshot has no valid header"));
    }
    let len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let crc = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let payload = &bytes[12..];
    if payload.len() != len as usize {
        return Err(corrupt(format!("the snapshot says {len} bytes but holds {}", payload.len())));
    }
    if checksum(len, payload) != crc {
        return Err(corrupt("the snapshot checksum does not match"));
    }
    let value = parse_state(payload)?;
    let gen = value.get(SNAPSHOT_GENERATION_KEY).map(|v| v.as_u64());
    let state = migrate_value(value)?;
    match gen {
        None => Ok((state, None)),
        Some(Some(gen)) => Ok((state, Some(gen))),
        Some(None) => Err(corrupt(format!("the snapshot's {SNAPSHOT_GENERATION_KEY} is not a generation"))),
    }
}

/// Decodes a state from plain JSON of any known schema version (a snapshot payload, or the
/// single `state.json` file of a version-1 store), migrating it to the current schema.
///
/// # Errors
/// `state_corrupt`, `state_version_unsupported`, `state_migration_failed`.
pub fn decode_state_json(json: &[u8]) -> Result<AgentState, AgentError> {
    migrate_value(parse_state(json)?)
}

/// Parses a state's JSON, not yet migrated.
fn parse_state(json: &[u8]) -> Result<Value, AgentError> {
    parse_text(json).map_err(|e| corrupt(format!("the state is not valid JSON: {e}")))
}

/// Parses JSON bytes as text: UTF-8 checked first, then `serde_json::from_str`. The same bytes are
/// accepted as with `from_slice` (everything here is decoded through a `Value`, whose strings are
/// all checked either way), and serde_json's parser is then instantiated once, for text, as the
/// rest of the crate uses it (`from_slice` had a second copy: BENCHMARKS.md, "Size of the stripped
/// release `.so`").
fn parse_text<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(json).map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// The CRC-32 of a journal header's first 16 bytes (magic, format, generation).
fn header_checksum(fields: &[u8]) -> u32 {
    crc32fast::hash(fields)
}

/// The journal header of the format this code writes ([`JOURNAL_FORMAT`]) for the journal of
/// generation `gen`.
pub fn journal_header(gen: u64) -> [u8; JOURNAL_HEADER_LEN] {
    let mut h = [0u8; JOURNAL_HEADER_LEN];
    h[..4].copy_from_slice(JOURNAL_MAGIC);
    h[4..8].copy_from_slice(&JOURNAL_FORMAT.to_le_bytes());
    h[8..16].copy_from_slice(&gen.to_le_bytes());
    let crc = header_checksum(&h[..16]);
    h[16..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Encodes one commit's events as one journal record (one write, one sync: the group commit; one
/// checksum, so the commit loads whole or not at all). No events, no record.
///
/// # Errors
/// `state_io` when an event cannot be serialised.
pub fn encode_records(events: &[StateEvent]) -> Result<Vec<u8>, AgentError> {
    let payload = match events {
        [] => return Ok(Vec::new()),
        [event] => serde_json::to_vec(event),
        events => serde_json::to_vec(events),
    }
    .map_err(|e| AgentError::of(codes::STATE_IO, format!("cannot serialise an event: {e}")))?;
    let mut out = Vec::with_capacity(payload.len() + RECORD_HEADER_LEN);
    frame(None, &payload, &mut out)?;
    Ok(out)
}

/// How a journal ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalTail {
    /// Every byte belongs to a whole, valid record.
    Clean,
    /// The last record is incomplete (a write cut short by a crash); dropped.
    Torn,
    /// A record is complete but its checksum or content is wrong; it and everything after it are
    /// dropped.
    Corrupt,
}

/// What a journal holds.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalScan {
    /// The events of the valid records, in order.
    pub events: Vec<StateEvent>,
    /// The length of the valid prefix (header included); appends continue from here.
    pub valid_len: usize,
    /// How the journal ends.
    pub tail: JournalTail,
    /// The format its header names (0 when it has no valid header).
    pub format: u32,
    /// The generation its header names (format 4 on; `None` for formats 1 to 3 and without a
    /// valid header).
    pub generation: Option<u64>,
}

/// Whether `present`, the bytes after a record's header that end the file short of its length,
/// could be what a crash left of the last record: a prefix of its payload (compact JSON, no byte
/// below 0x20), maybe followed by zeros (blocks that never reached the disk). A record header
/// after it (its length's high bytes are zero) or any other control byte is damage instead.
fn could_be_torn(present: &[u8]) -> bool {
    let written = present.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    present[..written].iter().all(|b| *b >= 0x20)
}

/// Decodes a journal, keeping the longest valid prefix of records. An empty or headerless file is
/// an empty journal (a crash while it was being created).
///
/// # Errors
/// `state_version_unsupported` when the header names a newer format and its checksum holds (the
/// events may mean something this code does not know); a header that fails its checksum is
/// [`JournalTail::Corrupt`] instead.
pub fn decode_journal(bytes: &[u8]) -> Result<JournalScan, AgentError> {
    let mut scan = JournalScan {
        events: Vec::new(),
        valid_len: 0,
        tail: JournalTail::Clean,
        format: 0,
        generation: None,
    };
    if bytes.len() < LEGACY_JOURNAL_HEADER_LEN {
        scan.tail = if bytes.is_empty() { JournalTail::Clean } else { JournalTail::Torn };
        return Ok(scan);
    }
    if &bytes[..4] != JOURNAL_MAGIC {
        scan.tail = JournalTail::Corrupt;
        return Ok(scan);
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version == 0 {
        scan.tail = JournalTail::Corrupt;
        return Ok(scan);
    }
    let mut pos = LEGACY_JOURNAL_HEADER_LEN;
    if version > LAST_LEGACY_JOURNAL_FORMAT {
        if bytes.len() < JOURNAL_HEADER_LEN {
            // A header cut short: a crash while the journal was being created.
            scan.tail = JournalTail::Torn;
            return Ok(scan);
        }
        let crc = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        if header_checksum(&bytes[..16]) != crc {
            // A damaged header (a flipped bit of the format, say), not a newer arkagent's.
            scan.tail = JournalTail::Corrupt;
            return Ok(scan);
        }
        if version > JOURNAL_FORMAT {
            return Err(AgentError::of(
                codes::STATE_VERSION_UNSUPPORTED,
                format!("the journal has format {version}; this code knows up to {JOURNAL_FORMAT}"),
            ));
        }
        let mut gen = [0u8; 8];
        gen.copy_from_slice(&bytes[8..16]);
        scan.generation = Some(u64::from_le_bytes(gen));
        pos = JOURNAL_HEADER_LEN;
    }
    scan.format = version;
    scan.valid_len = pos;
    read_records(bytes, pos, &mut scan);
    Ok(scan)
}

/// Decodes the records of a journal of this format appended after a valid length the caller
/// already folded: `bytes` start at a record's boundary, past the header. As [`decode_journal`]
/// (a torn or corrupt tail ends the scan), with `valid_len` counted from the start of `bytes`
/// and no header (`format` is [`JOURNAL_FORMAT`], `generation` `None`).
pub fn decode_records(bytes: &[u8]) -> JournalScan {
    let mut scan = JournalScan {
        events: Vec::new(),
        valid_len: 0,
        tail: JournalTail::Clean,
        format: JOURNAL_FORMAT,
        generation: None,
    };
    read_records(bytes, 0, &mut scan);
    scan
}

/// Folds the records of `bytes` from `pos` (a record's boundary) into `scan`: its events, the
/// valid length and how the journal ends.
fn read_records(bytes: &[u8], mut pos: usize, scan: &mut JournalScan) {
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest.len() < RECORD_HEADER_LEN {
            scan.tail = JournalTail::Torn;
            return;
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len as usize > MAX_PAYLOAD_LEN {
            scan.tail = JournalTail::Corrupt;
            return;
        }
        let end = RECORD_HEADER_LEN + len as usize;
        if rest.len() < end {
            // A length running past the end is a torn last record only when what follows could
            // be what a crash left of one; else (a flipped bit of the length) it hides records.
            let present = &rest[RECORD_HEADER_LEN..];
            let whole = checksum(present.len() as u32, present) == crc;
            scan.tail =
                if !whole && could_be_torn(present) { JournalTail::Torn } else { JournalTail::Corrupt };
            return;
        }
        let payload = &rest[RECORD_HEADER_LEN..end];
        if checksum(len, payload) != crc {
            // A torn write of the last record can also leave garbage of the right length: only a
            // bad record with nothing after it is "torn"; one followed by more bytes is corruption.
            scan.tail = if rest.len() == end { JournalTail::Torn } else { JournalTail::Corrupt };
            return;
        }
        // A commit of several events is an array; one event (and every record of a journal
        // written before commits were one record) an object.
        let decoded = if payload.first() == Some(&b'[') {
            parse_text::<Vec<StateEvent>>(payload).map(|events| scan.events.extend(events))
        } else {
            parse_text::<StateEvent>(payload).map(|event| scan.events.push(event))
        };
        match decoded {
            Ok(()) => {}
            Err(_) => {
                scan.tail = JournalTail::Corrupt;
                return;
            }
        }
        pos += end;
        scan.valid_len = pos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ChatMessage;

    fn events() -> Vec<StateEvent> {
        vec![
            StateEvent::RunStarted { run_id: "r1".into(), delegation: None },
            StateEvent::MessageAppended { message: ChatMessage::user("hi") },
        ]
    }

    #[test]
    fn journal_round_trips() {
        let mut bytes = journal_header(1).to_vec();
        bytes.extend(encode_records(&events()).unwrap());
        let scan = decode_journal(&bytes).unwrap();
        assert_eq!(scan.events, events());
        assert_eq!(scan.valid_len, bytes.len());
        assert_eq!(scan.tail, JournalTail::Clean);
    }

    #[test]
    fn a_commit_is_one_record_and_old_journals_of_one_event_per_record_still_load() {
        let whole = encode_records(&events()).unwrap();
        let payload = &whole[RECORD_HEADER_LEN..];
        assert_eq!(payload.first(), Some(&b'['));
        assert_eq!(u32::from_le_bytes(whole[..4].try_into().unwrap()) as usize, payload.len());
        assert!(encode_records(&[]).unwrap().is_empty());
        // The former layout: format 2, each event its own record.
        let mut old = legacy_header(2);
        for event in events() {
            let payload = serde_json::to_vec(&event).unwrap();
            frame(None, &payload, &mut old).unwrap();
        }
        old.extend(encode_records(&events()).unwrap());
        let scan = decode_journal(&old).unwrap();
        assert_eq!(scan.events, [events(), events()].concat());
        assert_eq!(scan.tail, JournalTail::Clean);
        assert_eq!(scan.format, 2);
        assert_eq!(decode_journal(&journal_header(1)).unwrap().format, JOURNAL_FORMAT);
    }

    #[test]
    fn a_cut_record_is_torn_and_dropped() {
        let mut bytes = journal_header(1).to_vec();
        bytes.extend(encode_records(&events()[..1]).unwrap());
        let first_end = bytes.len();
        bytes.extend(encode_records(&events()[1..]).unwrap());
        for cut in first_end + 1..bytes.len() {
            let scan = decode_journal(&bytes[..cut]).unwrap();
            assert_eq!(scan.events, events()[..1].to_vec(), "cut at {cut}");
            assert_eq!(scan.valid_len, first_end);
            assert_eq!(scan.tail, JournalTail::Torn);
        }
    }

    #[test]
    fn a_record_or_a_state_that_is_not_utf8_is_corrupt() {
        for payload in [
            &b"{\"event\":\"run_started\",\"run_id\":\"r\xff\"}"[..],
            b"{\"event\":\"run_started\",\"run_id\":\"r\",\"x\":\"\xff\"}",
        ] {
            let mut bytes = journal_header(1).to_vec();
            bytes.extend(encode_records(&events()[..1]).unwrap());
            let valid = bytes.len();
            let len = payload.len() as u32;
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&checksum(len, payload).to_le_bytes());
            bytes.extend_from_slice(payload);
            let scan = decode_journal(&bytes).unwrap();
            assert_eq!(scan.events, events()[..1].to_vec());
            assert_eq!(scan.valid_len, valid);
            assert_eq!(scan.tail, JournalTail::Corrupt);
        }
        let e = decode_state_json(b"{\"schema_version\":2,\"session_id\":\"s\",\"x\":\"\xff\"}").unwrap_err();
        assert_eq!(e.code, codes::STATE_CORRUPT);
        assert!(e.message.starts_with("the state is not valid JSON"), "{}", e.message);
    }

    #[test]
    fn a_flipped_length_bit_is_corrupt_not_a_torn_tail() {
        let mut bytes = journal_header(1).to_vec();
        for _ in 0..3 {
            bytes.extend(encode_records(&events()).unwrap());
        }
        let second = JOURNAL_HEADER_LEN + encode_records(&events()).unwrap().len();
        let third = second + encode_records(&events()).unwrap().len();
        for (at, bit, start) in [(second, 2, second), (second + 1, 0, second), (third + 2, 0, third)] {
            let mut bad = bytes.clone();
            bad[at] ^= 1 << bit;
            let scan = decode_journal(&bad).unwrap();
            assert_eq!(scan.tail, JournalTail::Corrupt, "flip at {at}");
            assert_eq!(scan.valid_len, start, "flip at {at}");
        }
        // What a crash leaves stays torn: a cut prefix, or one padded with zeros.
        let mut padded = bytes[..third + 20].to_vec();
        padded.extend([0u8; 40]);
        assert_eq!(decode_journal(&padded).unwrap().tail, JournalTail::Torn);
        assert_eq!(decode_journal(&bytes[..third + 20]).unwrap().tail, JournalTail::Torn);
    }

    /// The header of a journal of format 1 to 3 (magic and format only).
    fn legacy_header(format: u32) -> Vec<u8> {
        [&JOURNAL_MAGIC[..], &format.to_le_bytes()].concat()
    }

    /// A header of `format` for generation `gen` whose checksum holds.
    fn header_of(format: u32, gen: u64) -> Vec<u8> {
        let mut h = journal_header(gen);
        h[4..8].copy_from_slice(&format.to_le_bytes());
        let crc = header_checksum(&h[..16]);
        h[16..].copy_from_slice(&crc.to_le_bytes());
        h.to_vec()
    }

    #[test]
    fn a_newer_journal_is_refused() {
        let mut bytes = header_of(JOURNAL_FORMAT + 1, 1);
        bytes.extend(encode_records(&events()).unwrap());
        let e = decode_journal(&bytes).unwrap_err();
        assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED);
    }

    #[test]
    fn a_flipped_bit_of_the_header_is_damage_not_a_newer_format() {
        let mut bytes = journal_header(7).to_vec();
        bytes.extend(encode_records(&events()).unwrap());
        let scan = decode_journal(&bytes).unwrap();
        assert_eq!((scan.format, scan.generation, scan.tail), (JOURNAL_FORMAT, Some(7), JournalTail::Clean));
        assert_eq!(scan.events, events());
        for at in 4..JOURNAL_HEADER_LEN {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[at] ^= 1 << bit;
                let scan = decode_journal(&bad).unwrap_or_else(|e| panic!("flip {bit} of byte {at}: {e}"));
                assert_eq!(scan.tail, JournalTail::Corrupt, "flip {bit} of byte {at}");
                assert!(scan.events.is_empty(), "flip {bit} of byte {at}");
            }
        }
        // A format-3 journal (no checksum in its header) whose format reads as a newer one: its
        // first record stands where the checksum would be.
        let mut old = legacy_header(3);
        old.extend(encode_records(&events()).unwrap());
        assert_eq!(decode_journal(&old).unwrap().generation, None);
        for bit in 2..32 {
            let mut bad = old.clone();
            let format = 3u32 ^ (1 << bit);
            bad[4..8].copy_from_slice(&format.to_le_bytes());
            assert_eq!(decode_journal(&bad).unwrap().tail, JournalTail::Corrupt, "format {format}");
        }
    }

    #[test]
    fn a_snapshot_names_its_generation_and_one_without_it_still_decodes() {
        let mut s = AgentState::new("s1");
        s.messages.push(ChatMessage::user("hello"));
        for gen in [1, 42, u64::MAX] {
            let bytes = encode_snapshot_of(gen, &encode_state(&s).unwrap()).unwrap();
            assert_eq!(decode_snapshot_of(&bytes).unwrap(), (s.clone(), Some(gen)));
            assert_eq!(decode_snapshot(&bytes).unwrap(), s);
            let payload: Value = serde_json::from_slice(&bytes[12..]).unwrap();
            assert_eq!(payload[SNAPSHOT_GENERATION_KEY], gen);
        }
        // As snapshots were written before the generation was recorded.
        assert_eq!(decode_snapshot_of(&encode_snapshot(&s).unwrap()).unwrap(), (s.clone(), None));
        // A generation that is no integer is damage, never a snapshot of no generation.
        let mut payload: Value = serde_json::to_value(&s).unwrap();
        payload[SNAPSHOT_GENERATION_KEY] = Value::from("7");
        let mut bytes = Vec::new();
        frame(Some(SNAPSHOT_MAGIC), &serde_json::to_vec(&payload).unwrap(), &mut bytes).unwrap();
        assert_eq!(decode_snapshot_of(&bytes).unwrap_err().code, codes::STATE_CORRUPT);
        for bad in [&b"{}"[..], b"[1]", b""] {
            assert_eq!(encode_snapshot_of(1, bad).unwrap_err().code, codes::STATE_IO);
        }
    }

    #[test]
    fn snapshot_round_trips_and_catches_flips() {
        let mut s = AgentState::new("s1");
        s.messages.push(ChatMessage::user("hello"));
        let bytes = encode_snapshot(&s).unwrap();
        assert_eq!(decode_snapshot(&bytes).unwrap(), s);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            let e = decode_snapshot(&b).unwrap_err();
            assert_eq!(e.code, codes::STATE_CORRUPT, "flip at {i}");
        }
    }
}
