//! [`FileStore`]: the default [`StateStore`], a directory per session under a root.
//!
//! # Files of a session
//! - `snapshot-<gen>.ark`: a checksummed snapshot of the whole state ([`codec`](super::codec)).
//! - `journal-<gen>.ark`: the events committed after snapshot `<gen>`, appended record by record.
//! - `state.json`: a version-1 session (plain JSON, no journal); read and migrated when no snapshot
//!   exists, removed once a snapshot holds its (migrated) state.
//!
//! # Writes
//! `commit` appends all its events in one write and one `fdatasync` (group commit): its cost does
//! not depend on the length of the history. The store keeps the journal open between commits, for
//! the [`MAX_OPEN_JOURNALS`] sessions written last; an older one is closed and reopened at its
//! session's next commit (as after a restart), so the store holds a bounded number of files. A
//! commit that finds no file descriptor left (a low `ulimit -n`) halves that number for the
//! store's life, closes the least recently written journals beyond it and tries once more; a
//! session's first commit that fails removes what it made (its directory, its journal), so a
//! failure leaves no session that loads as none. When the journal has grown to at least
//! `max(compact_min_bytes, size of the snapshot)` bytes, the commit also compacts: a new generation
//! is written (its empty journal created and synced, then the snapshot to a temp file, `fsync`,
//! `rename`, directory `fsync`), and generations older than the previous one are deleted. A
//! snapshot is rewritten at most once per its own size in journal bytes, so the amortised cost of
//! a commit stays bounded by a constant factor of its own bytes. `save_snapshot` compacts at once.
//!
//! A compaction that fails (a full disk lets the small append through, not the whole snapshot)
//! does not fail its commit, whose events were durable before it began. What it left is removed
//! (a temp file, the new generation's empty journal: no load reads them) and the commits go on
//! appending to the same journal, which the loads keep reading whole. The writer then backs off:
//! it tries again only once its journal has grown by as many bytes as it holds and as the
//! snapshot that failed (so the journal at least doubles between two tries), each try logged once
//! as a warning. While compactions keep failing, a commit still serialises nothing unless a try is
//! due, and the tries' cost stays within a constant factor of the bytes committed between them;
//! their number grows with the logarithm of the journal's size. A compaction that succeeds starts
//! a fresh writer, with no backoff. Should a failure leave the new generation in place (its
//! snapshot renamed, the directory not synced), the writer is dropped and the next commit reopens
//! the session from what is on disk, appending to the newest journal. No generation follows
//! `u64::MAX` (a number only a file renamed by hand can reach): a compaction past it fails as
//! above (the commits go on in the journal), and a commit that needs a new generation fails with
//! `state_corrupt`; a generation never wraps to 0, which would sort before the older files.
//! The first commit of a session in a process also reads the session once (to find the end of its
//! journal and drop a torn tail) and serialises the state once (in case a snapshot must be started).
//! After its sync, each append checks (one `stat`) that the journal's path still names the file
//! it wrote: a session's directory or the whole root removed or moved away meanwhile by something
//! other than a store (an app's "clear data", a cache cleaner) fails the commit with `state_io`
//! instead of claiming records no load reads, and the next commit makes the session again from
//! the caller's state.
//!
//! # Deletion
//! `delete` moves the session's directory into `..trash` under the root in one `rename` (the root
//! then synced) and removes it there: a kill at any point leaves the session whole or gone, never
//! an older generation alone (which loads as the session stood before its last compaction).
//! Leftovers in the trash (a kill between the rename and the removal) are read by nothing and
//! swept by [`FileStore::open`], by a store's first [`list`](StateStore::list) and by each deletion.
//! The trash is made with the root's first session and by [`FileStore::open`], while there is
//! room: on a full disk a new directory needs a block. A deletion that cannot make it renames the
//! directory in the root instead (`..trash-<id>.<uuid>`, swept the same way).
//!
//! The store removes only the files it writes (`is_store_file`; a version-1 `state.json` only
//! when it is that session's, `legacy_state_is_ours`, which listing and loading follow too), never the app's (a root the app shares). A directory
//! holding none of them is no session: `exists` is false and `delete` touches nothing in it, but
//! removes it when it is empty (what a first commit cut short by a kill made before its first
//! file: a worker its parent names but that was never written). Files of
//! the app's in a session's directory go into the trash with the directory (so the session
//! still goes in one step) and come back out of it: the sweep removes the store's files of each
//! directory in the trash and moves the rest back to the session's place under the root (made
//! again if needed), so after a deletion they stand where they stood. A kill before the sweep
//! leaves them in the trash until the next sweep; one that cannot move them back (something of
//! the same name stands there) leaves them there, logged, never removed. Compactions prune only
//! the store's own temp files too.
//! A load by another store (loads take no lease) that the move catches part way finds files gone
//! under it: it looks at the directory again and answers `None` when it is gone (the load came
//! after the deletion), never `state_io`, `state_corrupt` or the older state of a snapshot read
//! without its journal.
//!
//! A file or a link that stands where a session's directory should be (made by a bug or by hand;
//! this store never makes one) is no session the listing names, since it may be the app's own.
//! Named by its id, it is `state_corrupt` for loads and commits (which write nothing), and
//! `delete` moves it to the trash as it moves a directory (a link itself, never what it points
//! to), so the app can be rid of it.
//!
//! # Loads and recovery
//! `load` reads the newest snapshot that decodes and folds the journals from its generation on with
//! [`AgentState::apply`]. A torn last record (a crash mid-append) is dropped. A snapshot that fails
//! its checksum falls back to the previous generation, whose journal holds every event up to the
//! newer snapshot, followed by the newer journal: nothing committed is lost. So does a snapshot
//! that names another generation than its file name (each names its own, [`encode_snapshot_of`]):
//! a copy, or an older snapshot put back by hand, folded with this generation's journal, would
//! leave out every commit between the two (and the next compaction would prune them). A snapshot
//! written before the generation was recorded names none and is read as its name says. Damage a crash cannot
//! leave (a bad record with more bytes after it, a journal header that fails its checksum, a
//! journal whose header names another generation than its file name, e.g. a copy of another
//! generation's journal, or an older journal cut, emptied or missing when the fallback needs it)
//! loads the state as it stood before the damage; the first commit after it copies the
//! journals it cannot fold to `damaged-journal-<gen>.ark` (read by no load, removed with the
//! session) and logs a warning naming the copies before it truncates or prunes them. A copy is
//! never written over: the same journal damaged again in the same generation (other bytes) is
//! kept as `damaged-journal-<gen>-2.ark`, then `-3` and so on; the same bytes (a commit that
//! failed after its copy) are not copied twice.
//!
//! A journal holding records past the newest snapshot had its snapshot removed by something other
//! than a store (a writer appends only once a generation's snapshot is in place). It is folded
//! after the journal before it, as when that snapshot is corrupt, if a compaction of that journal
//! began its generation: the journal is of the generation just before, read whole, and of this
//! format (the generation after a journal of an older format began from a snapshot of a commit
//! that journal does not hold, so a fold would make a state that never was). Otherwise the state
//! loads as it stood before it, and the next commit keeps it aside as damaged (above) before
//! starting a new generation. Records with no snapshot at all left to fold them onto make the
//! session `state_corrupt` (listed with that error and deletable), never a session that does not
//! exist, over whose journal a new run would start; a commit of the caller's state keeps such
//! journals aside too.
//!
//! A load of a session whose journal this store holds open (it wrote the session) keeps the
//! state it folded, when it read the newest generation whole, to where the writer appends; the
//! next load folds only the records appended after it (read back from the open journal) onto a
//! copy, so deciding the items of a big frozen batch one by one does not decode the whole batch
//! again each time. The copy is used only while the journal is as the writer left it (the
//! checks a lease makes: the same file, its length, still the newest generation, and its change
//! time as the writer opened it or its last append left it, so a journal written over in place,
//! same length, is read whole and its damage found as by any other reader, and the writer's next
//! lease reopens the session, keeping the damage aside, instead of appending after it); otherwise the
//! load reads the session whole, as any load does without it. At most [`MAX_CACHED_STATES`]
//! sessions keep one (those loaded last), and a compaction or a closed journal drops it.
//!
//! A state written by a newer schema version is refused with `state_version_unsupported`, and
//! neither `load` nor `commit` changes any file of it. `load` never writes; the first `commit` of
//! a session in a process truncates a torn tail before appending after it.
//!
//! # Writers
//! Concurrent calls on one session through one store are serialised by a per-session lock. Across
//! stores and processes, a writer takes a [lease](StateStore::lease): an exclusive `flock` of
//! `..locks/<session id>` under the root (a name no session id can take, since ids never contain
//! `..`). A second lease fails at once with `session_busy`; the kernel releases a lease whose
//! process died.
//!
//! A lease dropped while its session does not exist (it never came to exist, or it was deleted
//! under the lease, also when its directory stays for the app's own files: a directory holding
//! none of the store's files is no session) removes its lock file, so reads, refused calls and
//! deletions leave no lock file behind. What a process killed while it held a lease left (its
//! deletion killed after it moved the session into the trash, a session whose first commit never
//! came) is removed the same way, locked first, if no lease holds it: by
//! [`FileStore::open`], a store's first [`list`](StateStore::list) and
//! [`FileStore::sweep_trash`] for every such lock file, and by
//! [`StateStore::remove_stale_lease`] (a deletion that finds no session) for its own. A lease
//! that meets such a removal in the instant it locks the file can answer `session_busy` (as it
//! can meet a lease dropped then). Two writers still never hold locks on two different
//! files: a lock file is removed only by the lease that holds its lock, before that lock is
//! released, and a lease is granted only when, once locked, its file is still the one the path
//! names (a lease that locked a file its holder removed meanwhile opens the path again). Versions before this one
//! never check that, so processes of an older and a newer version must not share a root.
//! [`StateStore::exists`] reads without any lease (the runtime asks it before a call that acts
//! only on an existing session), so a call on a session that does not exist creates nothing. The lock file is opened close-on-exec, but a process started while a lease is held still
//! shares the lock between its fork and its exec (a child that forks without exec, for as long as
//! it lives). On taking a lease, the store checks that the journal it keeps open is still the
//! session's newest and that nobody appended to it or wrote over it (its length and change time);
//! otherwise it reopens the session at its next commit, so a store never appends after another
//! writer's compaction, nor after damage no load would read past.
//!
//! [`StateStore::lease_held`] (what a listing asks to tell a session another process runs now
//! from one a kill cut short) probes the lock file without creating it: a shared try-lock, which
//! fails only under a lease's exclusive lock, released at once. A lease whose lock meets only such
//! shared locks tries again after a short pause (for 50 ms at most) instead of
//! answering `session_busy`; one held by another lease is still busy at once. Versions before
//! this one do not try again, and a probe may make their lease busy: another reason processes
//! of an older and a newer version must not share a root.

use super::codec::{
    decode_journal, decode_records, decode_snapshot_of, decode_state_json, encode_records,
    encode_snapshot_of, encode_state, journal_header, JournalTail, JOURNAL_FORMAT, JOURNAL_HEADER_LEN,
};
use super::repair::{repair_pairing, RepairPolicy};
use super::session_id::validate_session_id;
use super::{AgentState, SessionLease, StateEvent, StateStore};
use crate::error::{codes, AgentError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name of a version-1 session's single state file.
pub const LEGACY_STATE_FILE: &str = "state.json";

/// The directory of the lease lock files under the root (see "Writers" in the module docs).
pub const LOCK_DIR: &str = "..locks";

/// The directory under the root where a deleted session's directory is moved, then removed (a
/// name no session id can take, since ids never contain `..`; see `delete_session_dir`).
pub const TRASH_DIR: &str = "..trash";

/// The prefix of the name a deleted session's directory takes in the root itself when
/// [`TRASH_DIR`] cannot be made (a full disk has no block for a new directory): `..trash-<id>.<uuid>`,
/// a name no session id can take either. Swept with the trash.
const ROOT_GRAVE_PREFIX: &str = "..trash-";

/// Tuning of a [`FileStore`].
#[derive(Debug, Clone)]
pub struct FileStoreOptions {
    /// The journal is folded into a new snapshot once it holds at least this many bytes and at
    /// least as many as the snapshot (default 256 KiB).
    pub compact_min_bytes: u64,
    /// The repair `load` applies (default [`RepairPolicy::conservative`]).
    pub repair: RepairPolicy,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        FileStoreOptions { compact_min_bytes: 256 * 1024, repair: RepairPolicy::conservative() }
    }
}

/// The open journal of a session this process writes.
#[derive(Debug)]
struct Writer {
    dir: PathBuf,
    gen: u64,
    journal: File,
    journal_len: u64,
    snapshot_len: u64,
    /// Compactions of this generation that failed in a row (see "Writes" in the module docs).
    failed_compactions: u32,
    /// The journal length before which no compaction is tried again after a failure (0: none).
    retry_at: u64,
    /// The session as a load last read it (see "Loads and recovery" in the module docs).
    cached: Option<CachedState>,
    /// The journal's change time as this writer opened it or its last append left it
    /// ([`changed`]): any other write to the file moves it.
    changed: Option<(i64, i64)>,
    /// The journal's device and inode as this writer opened it ([`file_id`]): each commit checks
    /// that the journal's path still names it (see [`Writer::append`]).
    file_id: (u64, u64),
}

/// A session's state as a load of this store folded it from the snapshot and the writer's
/// journal up to `journal_len`: the next load folds only the records appended since.
#[derive(Debug)]
struct CachedState {
    state: AgentState,
    journal_len: u64,
}

/// A file's device and inode.
fn file_id(meta: &fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (meta.dev(), meta.ino())
}

/// A file's change time (seconds, nanoseconds): moved by every write to it, by anyone.
fn changed(file: &File) -> Option<(i64, i64)> {
    use std::os::unix::fs::MetadataExt as _;
    file.metadata().ok().map(|m| (m.ctime(), m.ctime_nsec()))
}

type Slot = Arc<tokio::sync::Mutex<Option<Writer>>>;

/// The fewest slots [`FileStore`] prunes at (see `prune_idle_slots`).
const PRUNE_SLOTS_AT: usize = 256;

/// A crash-safe [`StateStore`] on the file system: one directory per session under a root.
/// See the module docs for the files and the guarantees. Its blocking I/O runs on the tokio
/// runtime's blocking pool (`spawn_blocking`), so its methods must be awaited inside the runtime
/// the app (or the binding) owns.
#[derive(Debug)]
pub struct FileStore {
    root: PathBuf,
    options: FileStoreOptions,
    // A std Mutex: held only to find or insert a session's slot, never across an await. The slot's
    // own lock (tokio) is held across the blocking I/O of one operation.
    sessions: std::sync::Mutex<HashMap<String, Slot>>,
    // The sessions whose journal this store may hold open, least recently written first: at most
    // [`MAX_OPEN_JOURNALS`] stay open (see `keep_open`). A std Mutex, never held across an await.
    open: std::sync::Mutex<std::collections::VecDeque<String>>,
    // How many journals `open` keeps open at most: [`MAX_OPEN_JOURNALS`], halved each time a
    // commit runs out of file descriptors (see `give_back_journals`).
    max_open: std::sync::atomic::AtomicUsize,
    // The sessions whose state a writer keeps cached, least recently loaded first: at most
    // [`MAX_CACHED_STATES`] (see `keep_cached`). A std Mutex, never held across an await.
    cached: std::sync::Mutex<std::collections::VecDeque<String>>,
    // The size of `sessions` past which idle slots are pruned (see `prune_idle_slots`).
    prune_slots_at: std::sync::atomic::AtomicUsize,
    // Whether this store swept the trash already (at `open` or its first `list`).
    trash_swept: std::sync::atomic::AtomicBool,
    // How many loads read their session whole (see `whole_loads`).
    whole_loads: Arc<std::sync::atomic::AtomicU64>,
}

/// How many sessions' journals a store keeps open at most. Each open journal is a file descriptor
/// for as long as it stays open; an app with many conversations (or a server with one store)
/// would otherwise run out of them (`Too many open files`, for everything the process opens). A
/// session whose journal was closed reopens it at its next commit, as after a restart. Under a
/// lower limit of the process's descriptors, a commit that finds none left halves the number
/// its store keeps open (for the store's life), closes the least recently written journals
/// beyond it and tries once more.
pub const MAX_OPEN_JOURNALS: usize = 64;

/// How many sessions' states a store keeps cached at most (see "Loads and recovery" in the module
/// docs): each is a whole state in memory.
pub const MAX_CACHED_STATES: usize = 4;

/// `EMFILE` and `ENFILE` (the same numbers on every Unix): no file descriptor left for the
/// process, or for the system.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

thread_local! {
    /// Whether an [`io_err`] of this thread found no file descriptor left since
    /// [`noting_out_of_files`] began.
    static OUT_OF_FILES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (on one thread) and tells whether an error it made on the way ([`io_err`]) was for
/// want of a file descriptor: a commit that failed so tries again once it gave back journals
/// (see [`FileStore::give_back_journals`]). A failure after which a second try would apply the
/// commit's events twice (they are in a snapshot in place: [`write_generation`]) clears the flag.
fn noting_out_of_files<T>(f: impl FnOnce() -> T) -> (T, bool) {
    OUT_OF_FILES.set(false);
    let out = f();
    (out, OUT_OF_FILES.replace(false))
}

fn io_err(what: &str, path: &Path, e: io::Error) -> AgentError {
    if matches!(e.raw_os_error(), Some(EMFILE | ENFILE)) {
        OUT_OF_FILES.set(true);
    }
    AgentError::of(codes::STATE_IO, format!("{what} {}: {e}", path.display()))
}

fn snapshot_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("snapshot-{gen:020}.ark"))
}

fn journal_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("journal-{gen:020}.ark"))
}

fn sync_dir(dir: &Path) -> Result<(), AgentError> {
    #[cfg(test)]
    if tests::dir_sync_fails(dir) {
        // Out of descriptors: the failure a commit may try again after (see `noting_out_of_files`).
        return Err(io_err("cannot sync the directory", dir, io::Error::from_raw_os_error(EMFILE)));
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err("cannot sync the directory", dir, e))
}

/// The generations of a session's snapshots and of its journals (ascending), and stray temp files.
struct Listing {
    snaps: Vec<u64>,
    journals: Vec<u64>,
    temps: Vec<PathBuf>,
}

/// Whether `name` is one this store gives the files it writes in a session's directory:
/// `snapshot-<gen>.ark` and its `.tmp`, `journal-<gen>.ark`, `damaged-journal-<gen>[-<n>].ark` and
/// its `.tmp`. (A version-1 `state.json` is the store's only when it holds the session's state:
/// see [`written_by_store`].) Anything else in the directory is the app's own, or a hand's: never
/// removed (see "Deletion" in the module docs).
fn is_store_file(name: &str) -> bool {
    let gen = |rest: &str| !rest.is_empty() && rest.len() <= 20 && rest.bytes().all(|b| b.is_ascii_digit());
    let of = |prefix: &str, suffixes: &[&str]| {
        name.strip_prefix(prefix)
            .and_then(|rest| suffixes.iter().find_map(|suffix| rest.strip_suffix(suffix)))
            .is_some_and(|middle| {
                // `damaged-journal-<gen>-<n>`: the copies after the first.
                let (g, n) = middle.split_once('-').unwrap_or((middle, "1"));
                gen(g) && (prefix == "damaged-journal-" || middle == g) && gen(n)
            })
    };
    of("snapshot-", &[".ark", ".tmp"])
        || of("journal-", &[".ark"])
        || of("damaged-journal-", &[".ark", ".tmp"])
}

/// Whether the entry `name` of session `id`'s directory `dir` was written by this store
/// ([`is_store_file`]), or is a `state.json` of the session's ([`legacy_state_is_ours`]).
fn written_by_store(dir: &Path, name: &str, id: &str) -> bool {
    if is_store_file(name) {
        return true;
    }
    name == LEGACY_STATE_FILE
        && matches!(read_optional(&dir.join(name)), Ok(Some(bytes)) if legacy_state_is_ours(&bytes, id))
}

/// Whether a `state.json` in session `id`'s directory is the store's: a version-1 session's
/// (whole or damaged), not a file of the app's own. It is the app's when it is JSON that does not
/// name the session (`session_id`, or version 1's `sessionId`): listing, loading and deleting then
/// all pass it by. Text that is not JSON is a damaged file of the store's (a version-1 write cut
/// short): listed and loaded as `state_corrupt`, and deleted with its session.
fn legacy_state_is_ours(bytes: &[u8], id: &str) -> bool {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Err(_) => true,
        Ok(value) => {
            ["session_id", "sessionId"].iter().any(|key| value.get(key).and_then(|v| v.as_str()) == Some(id))
        }
    }
}

/// The bytes of the `state.json` of session `id`'s directory `dir` when it is the store's
/// ([`legacy_state_is_ours`]); `None` when there is none or it is the app's.
fn read_legacy_state(dir: &Path, id: &str) -> Result<Option<Vec<u8>>, AgentError> {
    Ok(read_optional(&dir.join(LEGACY_STATE_FILE))?.filter(|bytes| legacy_state_is_ours(bytes, id)))
}

/// Whether session `id`'s directory `dir` holds any file this store wrote ([`written_by_store`]).
/// A directory that holds none is no session, whatever else it holds: it is the app's own (a root
/// the app shares), which [`delete`](StateStore::delete) leaves alone. One that cannot be listed
/// counts as the session's (its load tells the error).
fn holds_store_files(dir: &Path, id: &str) -> bool {
    let Ok(entries) = fs::read_dir(dir) else { return true };
    entries
        .flatten()
        .any(|entry| entry.file_name().to_str().is_some_and(|name| written_by_store(dir, name, id)))
}

fn list_generations(dir: &Path) -> Result<Listing, AgentError> {
    let mut snaps = Vec::new();
    let mut journals = Vec::new();
    let mut temps = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| io_err("cannot list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err("cannot list", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let gen_of =
            |prefix: &str, suffix: &str| name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse::<u64>().ok();
        if let Some(g) = gen_of("snapshot-", ".ark") {
            snaps.push(g);
        } else if let Some(g) = gen_of("journal-", ".ark") {
            journals.push(g);
        } else if name.ends_with(".tmp") && is_store_file(name) {
            temps.push(entry.path());
        }
    }
    snaps.sort_unstable();
    journals.sort_unstable();
    Ok(Listing { snaps, journals, temps })
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, AgentError> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("cannot read", path, e)),
    }
}

/// [`read_optional`] of a file a listing named: its absence is noted in `vanished`.
fn read_listed(path: &Path, vanished: &mut bool) -> Result<Option<Vec<u8>>, AgentError> {
    let bytes = read_optional(path)?;
    *vanished |= bytes.is_none();
    Ok(bytes)
}

/// A session as found on disk.
struct Scan {
    state: AgentState,
    /// The newest generation with a snapshot file (0 for a version-1 session).
    latest_gen: u64,
    /// Whether new events may be appended to the newest journal (false for a version-1 session or
    /// when the chain of journals was cut by corruption: then a fresh snapshot is needed).
    appendable: bool,
    /// The valid length of the newest journal.
    journal_valid_len: u64,
    /// The size of the snapshot the state came from.
    snapshot_len: u64,
    /// Journals holding bytes the load could not fold (see [`Damage`]).
    damage: Option<Damage>,
}

/// Journal bytes a load could not fold, other than a torn last record: a bad record with more
/// bytes after it in the newest journal, or a journal before the newest one that lost records
/// (the later journals continue from a state the chain cannot reach). The state loads as it stood
/// before the damage; the next commit would truncate or prune those bytes, so it first copies the
/// journals of generations `from_gen` on aside ([`keep_damaged`]).
struct Damage {
    from_gen: u64,
    /// What was found, for the warning: the journal and the offset of its first unread byte.
    what: String,
}

/// How many times [`scan_session`] reads a session whose files vanished while it read them and
/// whose directory still stands (another writer compacted meanwhile, or the session was deleted
/// and made again) before it answers with what it read.
const SCAN_ATTEMPTS: usize = 3;

/// What stands at a session's path under the root.
enum SessionEntry {
    /// Nothing: the session does not exist.
    Missing,
    /// A directory (links followed), by its device and inode.
    Dir(u64, u64),
    /// Anything else: a file, a link to a file, a link to nothing. This store never makes one
    /// (a bug or a hand did, or it is the app's own): no load reads it (`state_corrupt`), no
    /// commit writes over it, the listing leaves it out (as anything this store did not make)
    /// and [`delete`](StateStore::delete) of its id removes it (the link, never what it points
    /// to).
    Stray,
}

fn session_entry(dir: &Path) -> Result<SessionEntry, AgentError> {
    use std::os::unix::fs::MetadataExt as _;
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(SessionEntry::Dir(m.dev(), m.ino())),
        Ok(_) => Ok(SessionEntry::Stray),
        // A link to nothing (or a loop of links) is there all the same.
        Err(e) => match fs::symlink_metadata(dir) {
            Ok(link) if link.file_type().is_symlink() => Ok(SessionEntry::Stray),
            Err(l) if l.kind() == io::ErrorKind::NotFound => Ok(SessionEntry::Missing),
            _ => Err(io_err("cannot open", dir, e)),
        },
    }
}

/// The error of a session whose path holds a [`SessionEntry::Stray`].
fn stray_error(dir: &Path) -> AgentError {
    AgentError::of(
        codes::STATE_CORRUPT,
        format!(
            "{} is not a session directory (a file or a link stands in its place); deleting the session removes it",
            dir.display()
        ),
    )
}

/// The identity of a session's directory: `None` when it does not exist, `state_corrupt` when
/// something else stands in its place.
fn dir_identity(dir: &Path) -> Result<Option<(u64, u64)>, AgentError> {
    match session_entry(dir)? {
        SessionEntry::Missing => Ok(None),
        SessionEntry::Dir(dev, ino) => Ok(Some((dev, ino))),
        SessionEntry::Stray => Err(stray_error(dir)),
    }
}

/// Reads a session: newest good snapshot + the journals from its generation on. Never writes.
///
/// Another store (another process) may delete the session meanwhile: `delete` moves the whole
/// directory away in one rename, so files listed, or read in part, vanish under the read, which
/// then finds no snapshot, cannot list the directory, or folds a snapshot without its journal
/// (an older state). Whenever something vanished or failed, the directory is looked at again:
/// gone, the session is `None` (the load came after the deletion); another directory in its
/// place, or files gone from the same one, it is read again (up to [`SCAN_ATTEMPTS`] times).
/// A read during which nothing vanished saw every file whole, before any move.
fn scan_session(dir: &Path, session_id: &str) -> Result<Option<Scan>, AgentError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some(identity) = dir_identity(dir)? else { return Ok(None) };
        let mut vanished = false;
        let result = scan_files(dir, session_id, &mut vanished);
        if result.is_ok() && !vanished {
            return result;
        }
        let again = match dir_identity(dir) {
            Ok(None) => return Ok(None),
            Ok(Some(now)) => vanished || now != identity,
            Err(_) => false,
        };
        if !again || attempts >= SCAN_ATTEMPTS {
            return result;
        }
    }
}

/// [`scan_session`]'s one read of the files of `dir` (which existed just before); `vanished` is
/// set when a listed file, or the directory itself, was gone when it was read.
fn scan_files(dir: &Path, session_id: &str, vanished: &mut bool) -> Result<Option<Scan>, AgentError> {
    let listing = match list_generations(dir) {
        Ok(listing) => listing,
        Err(e) => {
            *vanished = true;
            return Err(e);
        }
    };
    let orphans = orphan_journals(dir, &listing, vanished)?;
    let snaps = listing.snaps;
    if snaps.is_empty() {
        let legacy = dir.join(LEGACY_STATE_FILE);
        let Some(bytes) = read_legacy_state(dir, session_id)? else {
            // Records with no snapshot left to fold them onto: no state to give, but a session
            // all the same (listed, deleted), never one that does not exist, over whose journal
            // a new run would start.
            return match orphans.first() {
                None => Ok(None),
                Some(&gen) => Err(AgentError::of(
                    codes::STATE_CORRUPT,
                    format!(
                        "no snapshot in {}: {} holds records, but the snapshot they continue from is gone",
                        dir.display(),
                        journal_path(dir, gen).display()
                    ),
                )),
            };
        };
        let state = decode_state_json(&bytes)?;
        if state.session_id != session_id {
            return Err(AgentError::of(
                codes::STATE_CORRUPT,
                format!("{} belongs to another session", legacy.display()),
            ));
        }
        // A journal after a version-1 state began from a snapshot of the state and the commit
        // that converted it: its records never continue `state.json`.
        let damage = orphans.first().map(|&gen| Damage {
            from_gen: gen,
            what: format!(
                "{} holds records, but its snapshot is gone and {} does not lead to them",
                journal_path(dir, gen).display(),
                legacy.display()
            ),
        });
        return Ok(Some(Scan {
            state,
            latest_gen: 0,
            appendable: false,
            journal_valid_len: 0,
            snapshot_len: bytes.len() as u64,
            damage,
        }));
    }
    let newest_snapshot = *snaps.last().unwrap_or(&0);
    let mut first_error: Option<AgentError> = None;
    for (idx, &gen) in snaps.iter().enumerate().rev() {
        let path = snapshot_path(dir, gen);
        let Some(bytes) = read_listed(&path, vanished)? else { continue };
        let mut state = match decode_snapshot_of(&bytes) {
            // A snapshot written for another generation (a copy, or an older one put back, under
            // this one's name): folded with this generation's journals, it would make a state that
            // never was. Passed by as a corrupt one is: the previous generation leads here whole.
            Ok((_, Some(written))) if written != gen => {
                first_error.get_or_insert_with(|| {
                    AgentError::of(
                        codes::STATE_CORRUPT,
                        format!("{} is the snapshot of generation {written}, not of {gen}", path.display()),
                    )
                });
                continue;
            }
            Ok((s, _)) if s.session_id == session_id => s,
            Ok(_) => {
                first_error.get_or_insert_with(|| {
                    AgentError::of(
                        codes::STATE_CORRUPT,
                        format!("{} belongs to another session", path.display()),
                    )
                });
                continue;
            }
            Err(e) if e.code == codes::STATE_VERSION_UNSUPPORTED => return Err(e),
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        // The journals to fold: each generation's from this snapshot on, then those whose
        // snapshot is gone.
        let chain: Vec<u64> = snaps[idx..].iter().chain(&orphans).copied().collect();
        let latest = *chain.last().unwrap_or(&gen);
        let mut appendable = true;
        let mut journal_valid_len = 0;
        let mut damage = None;
        // The generation and format of the last journal folded.
        let mut folded: Option<(u64, u32)> = None;
        for &g in &chain {
            let jpath = journal_path(dir, g);
            if g > newest_snapshot {
                // Its snapshot is gone. Its records continue the journal before it only when a
                // compaction of that journal began this generation: the journal is the
                // generation just before and was read whole (else the chain stopped there), in
                // this format. A journal of an older format is never appended to: the
                // generation after it began from a snapshot of a commit it does not hold, and
                // folding onto it would make a state that never was.
                let after = folded.map_or(gen, |(prev, _)| prev);
                let continues = folded
                    .is_some_and(|(prev, format)| prev.checked_add(1) == Some(g) && format == JOURNAL_FORMAT);
                if !continues {
                    appendable = false;
                    damage = Some(Damage {
                        from_gen: g,
                        what: format!(
                            "{} holds records, but its snapshot is gone and the journal of generation {after} does \
                             not lead to them",
                            jpath.display()
                        ),
                    });
                    break;
                }
            }
            let bytes = read_listed(&jpath, vanished)?.unwrap_or_default();
            let scan = decode_journal(&bytes)?;
            if let Some(written) = scan.generation.filter(|written| *written != g) {
                // A journal written for another generation (a copy under this one's name): its
                // records continue another snapshot, some of them maybe folded already.
                appendable = false;
                damage = Some(Damage {
                    from_gen: g,
                    what: format!("{} is the journal of generation {written}, not of {g}", jpath.display()),
                });
                break;
            }
            for event in &scan.events {
                state.apply(event);
            }
            folded = Some((g, scan.format));
            if g == latest {
                journal_valid_len = scan.valid_len as u64;
                if scan.tail == JournalTail::Corrupt {
                    damage = Some(Damage {
                        from_gen: g,
                        what: format!(
                            "{} is damaged at byte {} of {}",
                            jpath.display(),
                            scan.valid_len,
                            bytes.len()
                        ),
                    });
                }
                // Records are never appended to a journal of an older format (code that knows only
                // that format would misread them): the next commit starts a new generation.
                if scan.format != 0 && scan.format < JOURNAL_FORMAT {
                    appendable = false;
                }
            } else if scan.format == 0 && scan.tail == JournalTail::Clean {
                // Missing or empty: never what a compaction left (it creates and syncs the
                // journal's header before the snapshot of its generation), so no continuation.
                appendable = false;
                damage = Some(Damage {
                    from_gen: g,
                    what: format!(
                        "{} is missing or empty; the later journals continue from records it lost",
                        jpath.display()
                    ),
                });
                break;
            } else if scan.tail != JournalTail::Clean {
                // A journal before the newest one lost records: later journals continue from a
                // state this chain cannot reach. Stop here; the next commit starts a fresh snapshot.
                appendable = false;
                damage = Some(Damage {
                    from_gen: g,
                    what: format!(
                        "{} is cut at byte {} of {}; the later journals continue from records it lost",
                        jpath.display(),
                        scan.valid_len,
                        bytes.len()
                    ),
                });
                break;
            }
        }
        return Ok(Some(Scan {
            state,
            latest_gen: latest,
            appendable,
            journal_valid_len,
            snapshot_len: bytes.len() as u64,
            damage,
        }));
    }
    let cause = first_error.map(|e| e.message).unwrap_or_else(|| "no snapshot could be read".into());
    Err(AgentError::of(codes::STATE_CORRUPT, format!("no good snapshot in {}: {cause}", dir.display())))
}

/// The generations of the journals `listing` names past its newest snapshot (all of them when it
/// names none) that hold records, whose snapshot is gone. A writer appends to a journal only once
/// its generation's snapshot is in place, and prunes a generation's snapshot only below the two
/// newest ones, so such a snapshot was removed by something other than a store (by hand). A
/// journal holding no more than its header is what a compaction or a first commit cut short left
/// (no record was ever appended to it). A journal's snapshot is looked for after the journal was
/// seen holding records: one the listing missed (another process's compaction renamed it in
/// meanwhile) sets `vanished`, and the session is read again; so does a listed journal gone.
fn orphan_journals(dir: &Path, listing: &Listing, vanished: &mut bool) -> Result<Vec<u64>, AgentError> {
    let newest = listing.snaps.last().copied();
    let mut orphans = Vec::new();
    for &gen in listing.journals.iter().filter(|g| newest.is_none_or(|n| **g > n)) {
        let jpath = journal_path(dir, gen);
        let len = match fs::metadata(&jpath) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                *vanished = true;
                continue;
            }
            Err(e) => return Err(io_err("cannot open", &jpath, e)),
        };
        if len <= JOURNAL_HEADER_LEN as u64 {
            continue;
        }
        let spath = snapshot_path(dir, gen);
        match fs::symlink_metadata(&spath) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => orphans.push(gen),
            Ok(_) => *vanished = true,
            Err(e) => return Err(io_err("cannot open", &spath, e)),
        }
    }
    Ok(orphans)
}

/// Whether anything of a session is on disk: its directory holding a file this store wrote
/// (maybe no state a load reads, e.g. what a first commit cut short left), or a stray file in its
/// place. A directory holding none of the store's files is the app's own, no session. Never
/// writes.
fn session_on_disk(dir: &Path, id: &str) -> Result<bool, AgentError> {
    Ok(match session_entry(dir)? {
        SessionEntry::Missing => false,
        // A stray file in its place is there too: its deletion removes it.
        SessionEntry::Stray => true,
        SessionEntry::Dir(..) => holds_store_files(dir, id),
    })
}

/// Whether session `id`'s directory holds a state a load reads or refuses: a snapshot file, or a
/// version-1 `state.json` of the session's ([`legacy_state_is_ours`]). A directory a first commit cut short (its journal made, its snapshot
/// not yet renamed in place: only a temp file) holds none: `load` answers `None` for it, so it is
/// no session to list. A directory that cannot be read is counted in: its load tells the error;
/// so is one whose journal holds records with no snapshot left (`state_corrupt`).
fn holds_state(dir: &Path, id: &str) -> bool {
    match list_generations(dir) {
        Ok(listing) => {
            let mut missed = false;
            !listing.snaps.is_empty()
                || read_legacy_state(dir, id).map_or(true, |legacy| legacy.is_some())
                || orphan_journals(dir, &listing, &mut missed).map_or(true, |o| !o.is_empty())
                || missed
        }
        Err(_) => true,
    }
}

/// The sessions under `root` (see [`StateStore::list`]): the directories whose names are valid
/// session ids (so never [`TRASH_DIR`] or [`LOCK_DIR`]) and that hold a state, sorted. A root
/// that does not exist holds none. Never writes.
fn list_session_dirs(root: &Path) -> Result<Vec<String>, AgentError> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("cannot list", root, e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err("cannot list", root, e))?;
        let name = entry.file_name();
        // A name that is not UTF-8 or not a valid id was not made by this store for a session.
        let Some(name) = name.to_str() else { continue };
        if validate_session_id(name).is_err() {
            continue;
        }
        let path = entry.path();
        // A directory (links followed) that holds a state. Anything else was not made by this
        // store: a file may be the app's own (a root it shares), so it is never offered as a
        // damaged session to delete. Named by id, such a stray file is `state_corrupt` and
        // `delete` removes it.
        if matches!(session_entry(&path), Ok(SessionEntry::Dir(..))) && holds_state(&path, name) {
            ids.push(name.to_string());
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The newest modification time (ms since the epoch) of the files a load reads in session `id`'s
/// directory `dir` (snapshots, journals, a `state.json` of the session's: [`written_by_store`]);
/// `None` when there are none. A file of the app's own (a `state.json` that is not the store's, a
/// name of the store's pattern that is not one of its files) tells nothing: the time agrees with
/// what a load reads. Never writes.
fn last_written_ms(dir: &Path, id: &str) -> Result<Option<u64>, AgentError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("cannot list", dir, e)),
    };
    let mut newest: Option<u64> = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let read_by_load = (name == LEGACY_STATE_FILE
            || ((name.starts_with("snapshot-") || name.starts_with("journal-")) && name.ends_with(".ark")))
            && written_by_store(dir, name, id);
        if !read_by_load {
            continue;
        }
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else { continue };
        let ms = modified.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        newest = Some(newest.map_or(ms, |n| n.max(ms)));
    }
    Ok(newest)
}

/// Removes what deletions left in [`TRASH_DIR`], and in the root under [`ROOT_GRAVE_PREFIX`] (a
/// kill between a deletion's rename and its removal); returns how many entries this sweep
/// removed. Best effort: an entry that cannot be removed stays for the next sweep. Safe at any
/// time: nothing reads the trash, and a session enters it only whole, in one rename, already gone
/// for every load. Sweeps may run at once (each deletion sweeps, in this process or another): an
/// entry another sweep removed first is no failure (see [`empty_grave`]). Sweeps of this process
/// take turns ([`SWEEPING`]): two emptying one grave at once made the second find it still
/// being emptied ("Directory not empty") and warn that it kept the app's files.
fn sweep_trash(root: &Path) -> usize {
    let _turn = SWEEPING.lock().unwrap_or_else(|p| p.into_inner());
    let in_trash = fs::read_dir(root.join(TRASH_DIR)).into_iter().flatten().flatten();
    // The graves a deletion left in the root itself, when it could not make the trash.
    let in_root =
        fs::read_dir(root).into_iter().flatten().flatten().filter(|entry| {
            entry.file_name().to_str().is_some_and(|name| name.starts_with(ROOT_GRAVE_PREFIX))
        });
    let mut removed = 0;
    for entry in in_trash.chain(in_root) {
        let path = entry.path();
        let gone = if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            empty_grave(root, &path)
        } else {
            fs::remove_file(&path)
        };
        if gone.is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Held by each [`sweep_trash`] of the process: one sweep at a time, whichever store or root
/// (sweeps are short, and rare: a deletion, a store's open and first listing).
static SWEEPING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What [`FileStore::open`], a store's first [`list`](StateStore::list) and
/// [`FileStore::sweep_trash`] remove of what kills left: the trash ([`sweep_trash`]), then the
/// lock files of sessions that no longer exist and that no lease holds ([`sweep_stale_locks`]).
/// Returns how many entries went.
fn sweep_leftovers(root: &Path) -> usize {
    sweep_trash(root) + sweep_stale_locks(root)
}

/// Removes the lock files in [`LOCK_DIR`] of sessions that do not exist and that no lease holds
/// (see [`remove_stale_lock`]): what a process killed while it held a lease left, the lease that
/// would have removed it gone with it (a deletion killed after it moved the session into the
/// trash, a lease taken for a session whose first commit never came). Returns how many went.
/// Best effort; the lock files of sessions that exist are only looked at, never locked.
fn sweep_stale_locks(root: &Path) -> usize {
    let locks = root.join(LOCK_DIR);
    let entries = fs::read_dir(&locks).into_iter().flatten().flatten();
    let mut removed = 0;
    for entry in entries {
        let name = entry.file_name();
        let Some(id) = name.to_str().filter(|id| validate_session_id(id).is_ok()) else { continue };
        if remove_stale_lock(&entry.path(), &root.join(id), id) {
            removed += 1;
        }
    }
    removed
}

/// Removes the lock file at `path` of session `id` (whose directory is `session_dir`) when the
/// session does not exist ([`session_on_disk`] is false) and no lease holds it; returns whether
/// it did. The protocol a lease dropped for a session that does not exist follows (see
/// [`SessionLock`]): the file is locked first (a lease that holds it makes that fail: left as it
/// is), still the file the path names ([`is_current_lock`]), the session looked at again under
/// the lock, and the file removed before the lock is released; a lease that locks the removed
/// file meanwhile finds its path gone and opens it again ([`lock_session`]). Never creates the
/// file, and never locks that of a session that exists (its writers' leases are left alone).
fn remove_stale_lock(path: &Path, session_dir: &Path, id: &str) -> bool {
    if !matches!(session_on_disk(session_dir, id), Ok(false)) {
        return false;
    }
    let Ok(file) = OpenOptions::new().read(true).write(true).open(path) else { return false };
    let removable = file.try_lock().is_ok()
        && is_current_lock(&file, path)
        && matches!(session_on_disk(session_dir, id), Ok(false));
    // Removed before `file` is closed, which releases the lock.
    removable && fs::remove_file(path).is_ok()
}

/// Empties and removes a session directory moved into the trash (`<id>.<uuid>`, or
/// `..trash-<id>.<uuid>` in the root: [`ROOT_GRAVE_PREFIX`]): the files this
/// store wrote are removed; anything else (the app's own files in the session's directory) is
/// moved back to the session's place under the root, made again if needed, and never removed. An
/// entry that cannot go back (something of that name stands there, or a file stands in the
/// directory's place) stays in the trash, as does the grave then (logged).
///
/// Another sweep may empty the same grave at the same time: what it removed or moved back first
/// is done, not a failure, and a grave it removed first is `NotFound` here, not logged (before,
/// each of many deletions at once warned that the grave kept the app's files). Only what stays
/// once this sweep has gone through every entry is logged: an entry neither sweep could put back.
fn empty_grave(root: &Path, grave: &Path) -> io::Result<()> {
    let grave_name = grave.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let grave_name = grave_name.strip_prefix(ROOT_GRAVE_PREFIX).unwrap_or(grave_name);
    let id = grave_name.rsplit_once('.').map_or(grave_name, |(id, _)| id);
    let home = root.join(id);
    let mut restored = false;
    for entry in fs::read_dir(grave)?.flatten() {
        let name = entry.file_name();
        let path = entry.path();
        if name.to_str().is_some_and(|name| written_by_store(grave, name, id)) {
            // A name of the store's: whatever stands under it (a directory made by a hand in a
            // snapshot's place) is not the app's.
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => fs::remove_dir_all(&path),
                Ok(_) => fs::remove_file(&path),
                Err(e) => Err(e),
            };
            match removed {
                // Removed by another sweep meanwhile.
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => continue,
            }
        }
        if validate_session_id(id).is_err()
            || !matches!(session_entry(&home), Ok(SessionEntry::Dir(..) | SessionEntry::Missing))
        {
            continue;
        }
        match fs::create_dir(&home) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(_) => continue,
        }
        let back = home.join(&name);
        if fs::symlink_metadata(&back).is_err() && fs::rename(&path, &back).is_ok() {
            restored = true;
        }
    }
    if restored {
        let _ = sync_dir(&home);
        let _ = sync_dir(root);
    }
    fs::remove_dir(grave).inspect_err(|e| {
        // NotFound: another sweep emptied and removed it first, nothing kept.
        if e.kind() != io::ErrorKind::NotFound {
            log::warn!(
                "arkagent: {} keeps files of the app's own that could not go back to {}: {e}",
                grave.display(),
                home.display()
            );
        }
    })
}

/// Writes generation `gen` with the state `payload` (its JSON, [`encode_state`]) as its snapshot,
/// which names `gen` ([`encode_snapshot_of`]), and an empty journal, then prunes the generations
/// before `gen - 1`, its temp files and a version-1 `state.json` of the session's.
fn write_generation(dir: &Path, gen: u64, payload: &[u8]) -> Result<Writer, AgentError> {
    let snapshot = encode_snapshot_of(gen, payload)?;
    let jpath = journal_path(dir, gen);
    // O_APPEND: every write lands at the end, whatever else holds the file.
    let mut journal = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&jpath)
        .map_err(|e| io_err("cannot create", &jpath, e))?;
    journal.set_len(0).map_err(|e| io_err("cannot truncate", &jpath, e))?;
    journal.write_all(&journal_header(gen)).map_err(|e| io_err("cannot write", &jpath, e))?;
    journal.sync_all().map_err(|e| io_err("cannot sync", &jpath, e))?;
    let spath = snapshot_path(dir, gen);
    let tmp = snapshot_temp_path(dir, gen);
    {
        let mut f = File::create(&tmp).map_err(|e| io_err("cannot create", &tmp, e))?;
        f.write_all(&snapshot).map_err(|e| io_err("cannot write", &tmp, e))?;
        f.sync_all().map_err(|e| io_err("cannot sync", &tmp, e))?;
    }
    fs::rename(&tmp, &spath).map_err(|e| io_err("cannot rename to", &spath, e))?;
    // From here loads read the new generation: a commit whose events it holds must not be tried
    // again for want of a descriptor (they would be appended after it a second time).
    sync_dir(dir).inspect_err(|_| OUT_OF_FILES.set(false))?;
    // Pruning is best effort: a leftover old generation is ignored by loads and pruned next time.
    if let Ok(Listing { snaps, journals, temps }) = list_generations(dir) {
        let keep_from = gen.saturating_sub(1);
        for g in snaps.into_iter().filter(|g| *g < keep_from || *g > gen) {
            let _ = fs::remove_file(snapshot_path(dir, g));
        }
        for g in journals.into_iter().filter(|g| *g < keep_from || *g > gen) {
            let _ = fs::remove_file(journal_path(dir, g));
        }
        for t in temps {
            let _ = fs::remove_file(t);
        }
        // The directory's name is its session's id; a `state.json` of another's is the app's.
        let ours = dir
            .file_name()
            .and_then(|id| id.to_str())
            .is_some_and(|id| written_by_store(dir, LEGACY_STATE_FILE, id));
        if ours {
            let _ = fs::remove_file(dir.join(LEGACY_STATE_FILE));
        }
    }
    let changed = changed(&journal);
    let file_id = file_id(&journal.metadata().map_err(|e| io_err("cannot stat", &jpath, e))?);
    Ok(Writer {
        dir: dir.to_path_buf(),
        gen,
        journal,
        journal_len: JOURNAL_HEADER_LEN as u64,
        snapshot_len: snapshot.len() as u64,
        failed_compactions: 0,
        retry_at: 0,
        cached: None,
        changed,
        file_id,
    })
}

/// The temp file a snapshot of generation `gen` is written to before its rename.
fn snapshot_temp_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("snapshot-{gen:020}.tmp"))
}

/// Opens the session's newest journal for appending, truncating a torn or corrupt tail. Returns
/// `true` when the session had to be (re)created from `payload` (which then already holds the
/// events being committed).
fn ensure_open(
    slot: &mut Option<Writer>,
    root: &Path,
    dir: &Path,
    session_id: &str,
    payload: Option<&[u8]>,
) -> Result<bool, AgentError> {
    if slot.is_some() {
        return Ok(false);
    }
    let scan = scan_session(dir, session_id);
    if let Ok(Some(Scan { damage: Some(damage), .. })) = &scan {
        keep_damaged(dir, session_id, damage)?;
    }
    let fresh_gen = match scan {
        Ok(Some(scan)) if scan.appendable => {
            let jpath = journal_path(dir, scan.latest_gen);
            // Readable too: a load folds the records appended since its cached state from it.
            let mut journal = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&jpath)
                .map_err(|e| io_err("cannot open", &jpath, e))?;
            let meta = journal.metadata().map_err(|e| io_err("cannot stat", &jpath, e))?;
            let len = meta.len();
            let mut valid = scan.journal_valid_len;
            if valid < JOURNAL_HEADER_LEN as u64 {
                journal.set_len(0).map_err(|e| io_err("cannot truncate", &jpath, e))?;
                journal
                    .write_all(&journal_header(scan.latest_gen))
                    .map_err(|e| io_err("cannot write", &jpath, e))?;
                valid = JOURNAL_HEADER_LEN as u64;
                journal.sync_all().map_err(|e| io_err("cannot sync", &jpath, e))?;
                sync_dir(dir)?;
            } else if len != valid {
                journal.set_len(valid).map_err(|e| io_err("cannot truncate", &jpath, e))?;
                journal.sync_all().map_err(|e| io_err("cannot sync", &jpath, e))?;
            }
            let changed = changed(&journal);
            *slot = Some(Writer {
                dir: dir.to_path_buf(),
                gen: scan.latest_gen,
                journal,
                journal_len: valid,
                snapshot_len: scan.snapshot_len,
                failed_compactions: 0,
                retry_at: 0,
                changed,
                cached: None,
                file_id: file_id(&meta),
            });
            return Ok(false);
        }
        Ok(Some(_)) => next_gen(dir)?,
        Ok(None) => {
            fs::create_dir_all(root).map_err(|e| io_err("cannot create", root, e))?;
            prepare_trash(root);
            match fs::create_dir(dir) {
                Ok(()) => {
                    // A first commit that fails leaves nothing of the session: no directory (nor
                    // a lock file, which a lease removes when the session is not on disk).
                    let first = sync_dir(root)
                        .and_then(|()| next_gen(dir))
                        .and_then(|gen| write_fresh_generation(dir, gen, payload));
                    if first.is_err() {
                        let _ = fs::remove_dir(dir);
                    }
                    *slot = Some(first?);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("cannot create", dir, e)),
            }
            next_gen(dir)?
        }
        Err(e) if e.code == codes::STATE_CORRUPT => {
            // A stray file in the session's place is never written over (nor into).
            if !matches!(session_entry(dir)?, SessionEntry::Dir(..)) {
                return Err(e);
            }
            // Nothing on disk can be read: the caller's state is the best there is. Journals
            // whose snapshot is gone hold records no load folds: kept aside first.
            let listing = list_generations(dir)?;
            if let Some(&from_gen) = orphan_journals(dir, &listing, &mut false)?.first() {
                keep_damaged(dir, session_id, &Damage { from_gen, what: e.message })?;
            }
            next_gen(dir)?
        }
        Err(e) => return Err(e),
    };
    *slot = Some(write_fresh_generation(dir, fresh_gen, payload)?);
    Ok(true)
}

/// [`write_generation`] of the state `payload` a commit prepared for a session it had to make or
/// start again ([`ensure_open`]). What a failure left is removed ([`remove_unmade_generation`]).
fn write_fresh_generation(dir: &Path, gen: u64, payload: Option<&[u8]>) -> Result<Writer, AgentError> {
    let payload = payload.ok_or_else(|| {
        AgentError::of(codes::INTERNAL_PANIC, "a new snapshot is needed but none was prepared")
    })?;
    write_generation(dir, gen, payload).inspect_err(|_| {
        remove_unmade_generation(dir, gen);
    })
}

/// Removes what a [`write_generation`] of `gen` that failed left (its temp snapshot, its empty
/// journal: no load reads them, and they may hold the space a full disk lacks), unless its
/// snapshot is in place or cannot be told (then loads read the new generation). Returns whether
/// it removed them.
fn remove_unmade_generation(dir: &Path, gen: u64) -> bool {
    match fs::symlink_metadata(snapshot_path(dir, gen)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let _ = fs::remove_file(snapshot_temp_path(dir, gen));
            let _ = fs::remove_file(journal_path(dir, gen));
            true
        }
        _ => false,
    }
}

/// The name the `n`th distinct copy of generation `gen`'s damaged journal takes (`n` from 1; the
/// first has no number): read by no load, pruned by no compaction, removed with the session.
fn damaged_copy_path(dir: &Path, gen: u64, n: u64) -> PathBuf {
    if n <= 1 {
        dir.join(format!("damaged-journal-{gen:020}.ark"))
    } else {
        dir.join(format!("damaged-journal-{gen:020}-{n}.ark"))
    }
}

/// Where `bytes` of generation `gen`'s journal are kept: the copy that already holds these very
/// bytes (`false`: a commit that failed after making it), else the first free name (`true`: to
/// write). A copy of other bytes (the journal was damaged again since, in the same generation)
/// is never written over.
fn damaged_copy_for(dir: &Path, gen: u64, bytes: &[u8]) -> Result<(PathBuf, bool), AgentError> {
    for n in 1.. {
        let copy = damaged_copy_path(dir, gen, n);
        match fs::symlink_metadata(&copy) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((copy, true)),
            Err(e) => return Err(io_err("cannot open", &copy, e)),
            Ok(m) if m.is_file() && m.len() == bytes.len() as u64 => {
                if read_optional(&copy)?.as_deref() == Some(bytes) {
                    return Ok((copy, false));
                }
            }
            Ok(_) => {}
        }
    }
    unreachable!("a free name is found before u64::MAX copies")
}

/// Copies the journals of generations `damage.from_gen` on aside ([`damaged_copy_for`]; synced,
/// then the directory) before a commit truncates or prunes what no load could read of them, and
/// logs a warning naming the copies. A copy of the same bytes already there (a commit that
/// failed after making it) is kept, not made again; each damage with other bytes gets its own.
/// A failure fails the commit: the session is not written over until its bytes are kept.
fn keep_damaged(dir: &Path, session_id: &str, damage: &Damage) -> Result<(), AgentError> {
    let journals = list_generations(dir)?.journals;
    let mut kept = Vec::new();
    for gen in journals.into_iter().filter(|g| *g >= damage.from_gen) {
        let from = journal_path(dir, gen);
        let Some(bytes) = read_optional(&from)? else { continue };
        let (copy, to_write) = damaged_copy_for(dir, gen, &bytes)?;
        if to_write {
            let tmp = copy.with_extension("tmp");
            let mut f = File::create(&tmp).map_err(|e| io_err("cannot create", &tmp, e))?;
            f.write_all(&bytes).map_err(|e| io_err("cannot write", &tmp, e))?;
            f.sync_all().map_err(|e| io_err("cannot sync", &tmp, e))?;
            fs::rename(&tmp, &copy).map_err(|e| io_err("cannot rename to", &copy, e))?;
        }
        kept.push(copy.display().to_string());
    }
    sync_dir(dir)?;
    log::warn!(
        "arkagent: session {session_id} loads as it stood before damage on disk ({}); the damaged journals \
         are kept as {}",
        damage.what,
        kept.join(", ")
    );
    Ok(())
}

/// One past the highest generation of any file of the session.
///
/// # Errors
/// `state_corrupt` past `u64::MAX` ([`gen_after`]).
fn next_gen(dir: &Path) -> Result<u64, AgentError> {
    let l = list_generations(dir)?;
    gen_after(dir, l.snaps.into_iter().chain(l.journals).max().unwrap_or(0))
}

/// The generation after `gen`. None follows `u64::MAX`, a name only a hand (or damage) gives a
/// file: `state_corrupt`, never a wrap to 0, whose files would sort before the older ones.
fn gen_after(dir: &Path, gen: u64) -> Result<u64, AgentError> {
    gen.checked_add(1).ok_or_else(|| {
        AgentError::of(
            codes::STATE_CORRUPT,
            format!(
                "{} holds generation {gen}, the last there can be: no new generation can be written (the session \
                 can still be loaded and deleted)",
                dir.display()
            ),
        )
    })
}

impl Writer {
    /// Whether the open journal is still the session's newest file and ends where this writer
    /// left it: no other writer appended to it, compacted past it, or deleted the session.
    fn is_current(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        let (Ok(open), Ok(named)) =
            (self.journal.metadata(), fs::metadata(journal_path(&self.dir, self.gen)))
        else {
            return false;
        };
        let newest =
            list_generations(&self.dir).ok().and_then(|l| l.snaps.into_iter().chain(l.journals).max());
        open.len() == self.journal_len
            && file_id(&named) == self.file_id
            && newest == Some(self.gen)
            && self.changed.is_some_and(|c| c == (open.ctime(), open.ctime_nsec()))
    }

    /// The session's state from the cache a load left, folded with the records appended to the
    /// journal since (this writer's commits), read from the open journal. `None` when there is
    /// none, or the journal is no longer as this writer left it (another writer appended or
    /// compacted, the session was deleted), or those records do not decode whole: the caller
    /// then scans the session as a load without a cache does.
    fn cached_state(&mut self) -> Option<AgentState> {
        use std::os::unix::fs::FileExt as _;
        let CachedState { mut state, journal_len } = self.cached.take()?;
        if journal_len > self.journal_len || !self.is_current() {
            return None;
        }
        if journal_len < self.journal_len {
            let mut bytes = vec![0; usize::try_from(self.journal_len - journal_len).ok()?];
            self.journal.read_exact_at(&mut bytes, journal_len).ok()?;
            let scan = decode_records(&bytes);
            if scan.tail != JournalTail::Clean || scan.valid_len != bytes.len() {
                return None;
            }
            for event in &scan.events {
                state.apply(event);
            }
        }
        self.cached = Some(CachedState { state: state.clone(), journal_len: self.journal_len });
        Some(state)
    }

    /// Keeps the state a load of the whole session found as the cache, when it is the fold of
    /// this writer's journal as it stands: the newest generation, read whole without damage, up
    /// to where this writer appends. Returns whether it was kept.
    fn cache_scan(&mut self, scan: &Scan) -> bool {
        let whole = scan.appendable
            && scan.damage.is_none()
            && scan.latest_gen == self.gen
            && scan.journal_valid_len == self.journal_len;
        if whole && self.is_current() {
            self.cached = Some(CachedState { state: scan.state.clone(), journal_len: self.journal_len });
        }
        self.cached.is_some()
    }

    /// Appends `records` in one write and one `fdatasync`, then checks that the journal's path
    /// still names the file written (one `stat`): synced into a journal that something other
    /// than a store removed or moved away with its directory or the whole root (an app's "clear
    /// data", a cache cleaner), the records are in no file a load reads, so the commit fails
    /// with `state_io` instead of returning as durable.
    fn append(&mut self, records: &[u8]) -> Result<(), AgentError> {
        let path = journal_path(&self.dir, self.gen);
        self.journal.write_all(records).map_err(|e| io_err("cannot append to", &path, e))?;
        self.journal.sync_data().map_err(|e| io_err("cannot sync", &path, e))?;
        self.journal_len += records.len() as u64;
        self.changed = changed(&self.journal);
        match fs::metadata(&path) {
            Ok(named) if file_id(&named) == self.file_id => Ok(()),
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("cannot stat", &path, e)),
            _ => Err(AgentError::of(
                codes::STATE_IO,
                format!(
                    "{} no longer names the journal written: the session's directory or the state directory was \
                     removed or moved while the session was written, and the commit is not on disk",
                    path.display()
                ),
            )),
        }
    }

    fn compact(&mut self, payload: &[u8]) -> Result<(), AgentError> {
        let next = write_generation(&self.dir, gen_after(&self.dir, self.gen)?, payload)?;
        *self = next;
        Ok(())
    }

    /// The compaction a commit whose events are durable starts (see "Writes" in the module
    /// docs): a failure is not the commit's. Returns false when this writer must not append
    /// again (a failure left the new generation in place): the caller drops it, and the next
    /// commit reopens the session from disk.
    fn compact_after_commit(&mut self, payload: &[u8], session_id: &str) -> bool {
        let failures = self.failed_compactions;
        let e = match self.compact(payload) {
            Ok(()) => {
                if failures > 0 {
                    log::info!(
                        "arkagent: the journal of session {session_id} was compacted after {failures} failed tries"
                    );
                }
                return true;
            }
            Err(e) => e,
        };
        // No generation after `u64::MAX`: nothing was made (the commits go on appending).
        // Otherwise what the failure left is removed, unless the new snapshot is in place (only
        // syncing its directory failed, or it cannot be told): loads read the new generation,
        // so this journal is no longer theirs.
        if self.gen.checked_add(1).is_some_and(|next| !remove_unmade_generation(&self.dir, next)) {
            log::warn!(
                "arkagent: the journal of session {session_id} was compacted, but not durably \
                 (reopened from disk at its next commit): {e}"
            );
            return false;
        }
        self.failed_compactions = failures.saturating_add(1);
        let grow = self.journal_len.max(payload.len() as u64);
        self.retry_at = self.journal_len.saturating_add(grow);
        log::warn!(
            "arkagent: the journal of session {session_id} could not be compacted ({} failed tries in a \
             row; its commits go on, and the next try comes once the journal reaches {} bytes): {e}",
            self.failed_compactions,
            self.retry_at
        );
        true
    }

    /// The journal length at which a compaction is due: `max(compact_min_bytes, snapshot size)`,
    /// or later while backing off after a failure.
    fn compact_at(&self, min_bytes: u64) -> u64 {
        min_bytes.max(self.snapshot_len).max(self.retry_at)
    }
}

/// Deletes a session's directory at once: renamed into [`TRASH_DIR`] (one atomic step, then the
/// root is synced), then removed there. Removed file by file where it stands, a kill part way
/// could leave an older generation alone, which loads as the session stood before its last
/// compaction: a deleted session came back as an older state (its settled batch pending again).
/// What a kill leaves in the trash no load reads; each deletion sweeps it (best effort).
///
/// The trash is made with the root's first session ([`prepare_trash`]), while there is room: on a
/// full disk, where deleting old sessions is the way out, a new directory needs a block there is
/// none of. A deletion that cannot make it (a root of an older version, whose trash was never
/// made) renames the directory in the root instead, to `..trash-<id>.<uuid>`
/// ([`ROOT_GRAVE_PREFIX`]), which needs no new directory and is swept the same way.
fn delete_session_dir(root: &Path, dir: &Path, id: &str) -> Result<bool, AgentError> {
    let trash = root.join(TRASH_DIR);
    // A stray file (or link) in the session's place goes the same way: the rename moves the
    // entry itself, never what a link points to.
    match session_entry(dir)? {
        SessionEntry::Missing => return Ok(false),
        // No file of the store, no session: the app's own directory, left as it is. But an empty
        // one goes (`remove_dir` removes only an empty directory, never a file of the app's):
        // what a first commit cut short by a kill made before its first file, as for a worker
        // its parent named but that was never written (it stayed after the parent's deletion).
        SessionEntry::Dir(..) if !holds_store_files(dir, id) => {
            let _ = fs::remove_dir(dir);
            return Ok(false);
        }
        _ => {}
    }
    let grave_name = format!("{id}.{}", uuid::Uuid::new_v4().simple());
    let grave = match fs::create_dir_all(&trash) {
        Ok(()) => trash.join(grave_name),
        Err(e) => {
            log::warn!(
                "arkagent: cannot create {} ({e}); session {id} is deleted through the root instead",
                trash.display()
            );
            root.join(format!("{ROOT_GRAVE_PREFIX}{grave_name}"))
        }
    };
    match fs::rename(dir, &grave) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("cannot delete", dir, e)),
    }
    sync_dir(root)?;
    // Best effort from here: the session is gone for every load.
    sweep_trash(root);
    Ok(true)
}

/// Makes the root's [`TRASH_DIR`] if it is not there, while a commit still finds room for a new
/// session (see `delete_session_dir`). Best effort: a deletion without it goes through the root.
fn prepare_trash(root: &Path) {
    let _ = fs::create_dir(root.join(TRASH_DIR));
}

/// How many times a lease tries again when the lock file it locked was removed (and maybe made
/// again) by the holder it waited behind, before it gives up with `session_busy`.
const LOCK_ATTEMPTS: usize = 16;

/// How long a lease waits, at most, while only [`probe_lock`]s hold its lock file (each for the
/// instant of a try-lock), before it gives up with `session_busy`; and its first pause (doubled
/// up to [`PROBE_PAUSE_MAX`]). A lease held by a writer is answered at once, without waiting.
const PROBE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);
const PROBE_PAUSE: std::time::Duration = std::time::Duration::from_micros(100);
const PROBE_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(2);

/// A held lease's lock file (see "Writers" in the module docs): locked, and still the file its
/// path names. When dropped while the session does not exist (it never came to exist, or it was
/// deleted under this lease: [`session_on_disk`] is false, also when its directory stays for the
/// app's own files), the lock file is removed before the lock is released.
#[derive(Debug)]
struct SessionLock {
    // Held, not read: closing it releases the lock.
    #[allow(dead_code)]
    file: File,
    path: PathBuf,
    session_dir: PathBuf,
    id: String,
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Removed only while locked: a lease that locked this file meanwhile finds its path gone
        // (or naming a newer file) and tries again, so no two leases ever hold two different
        // files. A lock file left (the removal failed, or the session could not be looked at) is
        // harmless: the next lease uses it. A look at the session's directory (a stat, a listing
        // that stops at the first file of the store's) and an unlink on the thread that drops the
        // lease: not worth a blocking task, and the lease must be released when the drop returns
        // (a caller takes it again next).
        if matches!(session_on_disk(&self.session_dir, &self.id), Ok(false)) {
            let _ = fs::remove_file(&self.path);
        }
        // Then `file` is closed, which releases the lock.
    }
}

/// Whether `file` (locked) is still the file at `path`: a lease's holder removes the lock file
/// of a session that does not exist before it releases its lock (see [`SessionLock`]), so a lock
/// taken on a file opened before that removal holds nothing.
fn is_current_lock(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::metadata(path)) {
        (Ok(open), Ok(named)) => file_id(&open) == file_id(&named),
        _ => false,
    }
}

/// Whether a lease holds the lock file at `path` at this moment ([`StateStore::lease_held`]):
/// `None` on a file system without locks. Takes nothing a lease waits for: the file is opened
/// read-only and never created (a session no lease took has no lock file, nor one whose lease
/// was dropped while it did not exist), and its lock is tried shared, which fails only under a
/// lease's exclusive lock. A shared lock taken is released at once (the file closed on return); a
/// lease that meets it in that instant sees that only a probe holds the file and tries again
/// (see [`lock_session`]). The kernel releases the lock of a process that died, so a held lock
/// is a live holder.
fn probe_lock(path: &Path) -> Result<Option<bool>, AgentError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(false)),
        Err(e) => return Err(io_err("cannot open", path, e)),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Some(false)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(Some(true)),
        Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err("cannot lock", path, e)),
    }
}

/// Takes the lease lock of session `id` at `path` (in `dir`, created if needed): `None` on a file
/// system without locks. A lock that only [`probe_lock`]s hold is tried again for up to
/// [`PROBE_PATIENCE`]; one a lease holds is `session_busy` at once.
fn lock_session(
    dir: &Path,
    path: PathBuf,
    session_dir: PathBuf,
    id: &str,
) -> Result<Option<SessionLock>, AgentError> {
    let busy = || {
        AgentError::of(
            codes::SESSION_BUSY,
            format!(
                "session {id} is being written (a run, resume or decision of an agent, in this or another \
                 process, holds it); try again when it has finished"
            ),
        )
    };
    fs::create_dir_all(dir).map_err(|e| io_err("cannot create", dir, e))?;
    let mut attempts = 0;
    let mut probed_since: Option<std::time::Instant> = None;
    let mut pause = PROBE_PAUSE;
    while attempts < LOCK_ATTEMPTS {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err("cannot open", &path, e))?;
        match file.try_lock() {
            Ok(()) if is_current_lock(&file, &path) => {
                return Ok(Some(SessionLock { file, path, session_dir, id: id.to_string() }));
            }
            // The holder it waited behind removed the file: try again on the current one.
            Ok(()) => attempts += 1,
            // Held exclusively by a lease, or shared by `lease_held` probes, each for the
            // instant of its try-lock (see `probe_lock`): a shared try-lock tells them apart. It
            // fails only under an exclusive lock, a lease's: busy at once. It succeeds only
            // while nothing but probes hold the file: released at once (`file` closed), and the
            // lock tried again after a pause, so a listing never makes a lease fail. (Versions
            // before this one answer busy to a probe's lock too: see the module docs.)
            // Locked by a holder that removed the file meanwhile, before it released it (a
            // lease dropped, a stale lock's removal): try again on the current one.
            Err(std::fs::TryLockError::WouldBlock) if !is_current_lock(&file, &path) => attempts += 1,
            Err(std::fs::TryLockError::WouldBlock) => {
                let waited = probed_since.get_or_insert_with(std::time::Instant::now).elapsed();
                if waited >= PROBE_PATIENCE || file.try_lock_shared().is_err() {
                    return Err(busy());
                }
                drop(file);
                std::thread::sleep(pause);
                pause = (pause * 2).min(PROBE_PAUSE_MAX);
            }
            // A file system without locks: the per-store lock still serialises this store.
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                log::warn!(
                    "arkagent: {} cannot be locked ({e}); sessions are not guarded across stores",
                    path.display()
                );
                return Ok(None);
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("cannot lock", &path, e)),
        }
    }
    // Other leases keep taking and removing the file: as busy as a held lease.
    Err(busy())
}

impl FileStore {
    /// A store under `root` with default options. Nothing is touched until the first commit (which
    /// creates `root` if needed).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FileStore::with_options(root, FileStoreOptions::default())
    }

    /// A store under `root` with the given options.
    pub fn with_options(root: impl Into<PathBuf>, options: FileStoreOptions) -> Self {
        FileStore {
            root: root.into(),
            options,
            sessions: std::sync::Mutex::new(HashMap::new()),
            open: std::sync::Mutex::new(std::collections::VecDeque::new()),
            max_open: std::sync::atomic::AtomicUsize::new(MAX_OPEN_JOURNALS),
            cached: std::sync::Mutex::new(std::collections::VecDeque::new()),
            prune_slots_at: std::sync::atomic::AtomicUsize::new(PRUNE_SLOTS_AT),
            trash_swept: std::sync::atomic::AtomicBool::new(false),
            whole_loads: Arc::default(),
        }
    }

    /// Creates `root` (and its parents) if needed and returns a store under it.
    ///
    /// # Errors
    /// `state_io` when the directory cannot be created or is not a directory.
    pub async fn open(root: impl Into<PathBuf>, options: FileStoreOptions) -> Result<Self, AgentError> {
        let root = root.into();
        let r = root.clone();
        tokio::task::spawn_blocking(move || {
            fs::create_dir_all(&r).map_err(|e| io_err("cannot create", &r, e))?;
            if !fs::metadata(&r).map_err(|e| io_err("cannot open", &r, e))?.is_dir() {
                return Err(AgentError::of(codes::STATE_IO, format!("{} is not a directory", r.display())));
            }
            prepare_trash(&r);
            sweep_leftovers(&r);
            Ok(())
        })
        .await
        .map_err(join_error)??;
        let store = FileStore::with_options(root, options);
        store.trash_swept.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(store)
    }

    /// Removes what deletions cut short by a kill left in [`TRASH_DIR`] (see "Deletion" in the
    /// module docs), and the lock files in [`LOCK_DIR`] of sessions that do not exist and that no
    /// lease holds (a process killed while it held the lease: see "Writers"); returns how many
    /// entries went. Done by [`open`](Self::open) and by the first [`list`](StateStore::list) of a
    /// store (each deletion sweeps the trash); best effort (an entry that cannot be removed stays
    /// for the next sweep). Touches nothing a load reads.
    ///
    /// # Errors
    /// None so far (the `Result` leaves room for a store that must report one).
    pub async fn sweep_trash(&self) -> Result<usize, AgentError> {
        let root = self.root.clone();
        let removed =
            tokio::task::spawn_blocking(move || sweep_leftovers(&root)).await.map_err(join_error)?;
        self.trash_swept.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(removed)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of a session.
    ///
    /// # Errors
    /// `session_id_invalid`.
    pub fn session_dir(&self, session_id: &str) -> Result<PathBuf, AgentError> {
        validate_session_id(session_id)?;
        Ok(self.root.join(session_id))
    }

    fn slot(&self, session_id: &str) -> Slot {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(session_id) {
            self.prune_idle_slots(&mut map);
        }
        map.entry(session_id.to_string()).or_default().clone()
    }

    /// Drops the slots of sessions nothing uses (only the map holds the slot, and it holds no open
    /// journal: a session deleted, only loaded, or whose journal was closed), once the map has
    /// grown past its threshold, which then becomes twice what is left (at least
    /// [`PRUNE_SLOTS_AT`]): a store that sees new sessions for days keeps those it writes, not
    /// every id it ever saw. A slot comes back empty at the next call, as after a restart.
    fn prune_idle_slots(&self, map: &mut HashMap<String, Slot>) {
        use std::sync::atomic::Ordering::Relaxed;
        if map.len() < self.prune_slots_at.load(Relaxed).max(PRUNE_SLOTS_AT) {
            return;
        }
        map.retain(|_, slot| Arc::strong_count(slot) > 1 || slot.try_lock().map_or(true, |w| w.is_some()));
        self.prune_slots_at.store((2 * map.len()).max(PRUNE_SLOTS_AT), Relaxed);
    }

    /// How many loads read their session whole (snapshot and journals) instead of folding the
    /// records appended after a cached state (the tests of the cache).
    #[doc(hidden)]
    pub fn whole_loads(&self) -> u64 {
        self.whole_loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many sessions this store keeps a slot for (the tests of the pruning).
    #[doc(hidden)]
    pub fn tracked_sessions(&self) -> usize {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Notes that `session_id` was just written (its journal may be open), and closes the
    /// journals of the least recently written sessions beyond [`MAX_OPEN_JOURNALS`]. A session
    /// in use at that moment (its slot locked: a commit, a load) is passed over this time. Closing
    /// costs nothing durable: every commit synced its records.
    fn keep_open(&self, session_id: &str) {
        let max = self.max_open.load(std::sync::atomic::Ordering::Relaxed);
        self.keep_recent(&self.open, session_id, max, |writer| *writer = None);
    }

    /// After a commit of `session_id` found no file descriptor left: halves the number of
    /// journals this store keeps open from now on, and closes the least recently written ones
    /// beyond it (those in use at that moment passed over), as [`keep_open`](Self::keep_open)
    /// does. Returns whether it closed any, so the commit may succeed if tried again.
    fn give_back_journals(&self, session_id: &str) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner()).len();
        let max = (open / 2).max(1);
        self.max_open.fetch_min(max, Relaxed);
        let closed =
            self.keep_recent(&self.open, session_id, self.max_open.load(Relaxed), |writer| *writer = None);
        log::warn!(
            "arkagent: no file descriptor left for session {session_id}'s journal: {closed} idle journals closed, \
             at most {} kept open from now on",
            self.max_open.load(Relaxed)
        );
        closed > 0
    }

    /// Notes that a writer of `session_id` just cached its state, and drops the cached states of
    /// the sessions loaded least recently beyond [`MAX_CACHED_STATES`] (their next load reads
    /// the session whole), as [`keep_open`](Self::keep_open) closes journals.
    fn keep_cached(&self, session_id: &str) {
        self.keep_recent(&self.cached, session_id, MAX_CACHED_STATES, |writer| {
            if let Some(w) = writer.as_mut() {
                w.cached = None;
            }
        });
    }

    /// Moves `session_id` to the back of `recent`, and applies `release` to the slots of the
    /// sessions at its front beyond `max`. A session in use at that moment (its slot locked: a
    /// commit, a load) is passed over this time. Returns how many of the slots released held a
    /// writer.
    fn keep_recent(
        &self,
        recent: &std::sync::Mutex<std::collections::VecDeque<String>>,
        session_id: &str,
        max: usize,
        release: impl Fn(&mut Option<Writer>),
    ) -> usize {
        let mut released_writers = 0;
        let mut recent = recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = recent.iter().position(|s| s == session_id) {
            recent.remove(at);
        }
        recent.push_back(session_id.to_string());
        let mut passed = 0;
        while recent.len() > max && passed < recent.len() - max {
            let Some(oldest) = recent.pop_front() else { break };
            let Some(slot) = self.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(&oldest).cloned()
            else {
                continue;
            };
            let released = match slot.try_lock() {
                Ok(mut writer) => {
                    released_writers += usize::from(writer.is_some());
                    release(&mut writer);
                    true
                }
                Err(_) => false,
            };
            if !released {
                // Written or read right now: released another time.
                recent.push_back(oldest);
                passed += 1;
            }
        }
        released_writers
    }

    /// One try of [`commit`](StateStore::commit); `out_of_files` tells whether it failed for want
    /// of a file descriptor ([`noting_out_of_files`]).
    async fn try_commit(
        &self,
        state: &AgentState,
        events: &[StateEvent],
        out_of_files: &mut bool,
    ) -> Result<(), AgentError> {
        let dir = self.session_dir(&state.session_id)?;
        let slot = self.slot(&state.session_id);
        let mut guard = slot.lock_owned().await;
        let records = encode_records(events)?;
        let min = self.options.compact_min_bytes;
        let need_payload = match guard.as_ref() {
            None => true,
            Some(w) => w.journal_len + records.len() as u64 >= w.compact_at(min),
        };
        // Serialising the whole state happens only when a snapshot may be written.
        let payload = if need_payload { Some(encode_state(state)?) } else { None };
        let root = self.root.clone();
        let id = state.session_id.clone();
        let (result, out) = tokio::task::spawn_blocking(move || {
            noting_out_of_files(|| {
                let result = (|| {
                    if ensure_open(&mut guard, &root, &dir, &id, payload.as_deref())? {
                        return Ok(());
                    }
                    let Some(w) = guard.as_mut() else { return Ok(()) };
                    if !records.is_empty() {
                        w.append(&records)?;
                    }
                    // The events are durable (appended and synced): the commit succeeds whatever the
                    // compaction does.
                    if let Some(p) = payload.as_deref() {
                        if w.journal_len >= w.compact_at(min) && !w.compact_after_commit(p, &id) {
                            *guard = None;
                        }
                    }
                    Ok(())
                })();
                if result.is_err() {
                    // The journal may end in a partial record: reopen (and truncate it) next time.
                    *guard = None;
                }
                result
            })
        })
        .await
        .map_err(join_error)?;
        *out_of_files = out;
        result?;
        self.keep_open(&state.session_id);
        Ok(())
    }
}

fn join_error(e: tokio::task::JoinError) -> AgentError {
    AgentError::of(codes::INTERNAL_PANIC, format!("a state I/O task failed: {e}"))
}

#[async_trait]
impl StateStore for FileStore {
    async fn load(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        let mut state = self.load_unrepaired(session_id).await?;
        if let Some(s) = state.as_mut() {
            repair_pairing(s, &self.options.repair);
        }
        Ok(state)
    }

    async fn load_unrepaired(&self, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        let dir = self.session_dir(session_id)?;
        let slot = self.slot(session_id);
        // Held so a load never reads a commit half-way.
        let mut guard = slot.lock_owned().await;
        let id = session_id.to_string();
        let whole_loads = Arc::clone(&self.whole_loads);
        let (state, cached) = tokio::task::spawn_blocking(move || {
            if let Some(state) = guard.as_mut().and_then(Writer::cached_state) {
                return Ok((Some(state), true));
            }
            whole_loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let scan = scan_session(&dir, &id)?;
            let cached = match (guard.as_mut(), scan.as_ref()) {
                (Some(w), Some(scan)) => w.cache_scan(scan),
                _ => false,
            };
            Ok::<_, AgentError>((scan.map(|s| s.state), cached))
        })
        .await
        .map_err(join_error)??;
        if cached {
            self.keep_cached(session_id);
        }
        Ok(state)
    }

    async fn exists(&self, session_id: &str) -> Result<bool, AgentError> {
        let dir = self.session_dir(session_id)?;
        let id = session_id.to_string();
        tokio::task::spawn_blocking(move || session_on_disk(&dir, &id)).await.map_err(join_error)?
    }

    async fn commit(&self, state: &AgentState, events: &[StateEvent]) -> Result<(), AgentError> {
        let mut out_of_files = false;
        let result = self.try_commit(state, events, &mut out_of_files).await;
        if result.is_err() && out_of_files && self.give_back_journals(&state.session_id) {
            return self.try_commit(state, events, &mut out_of_files).await;
        }
        result
    }

    async fn save_snapshot(&self, state: &AgentState) -> Result<(), AgentError> {
        let dir = self.session_dir(&state.session_id)?;
        let slot = self.slot(&state.session_id);
        let mut guard = slot.lock_owned().await;
        let payload = encode_state(state)?;
        let root = self.root.clone();
        let id = state.session_id.clone();
        tokio::task::spawn_blocking(move || {
            let result = (|| {
                if ensure_open(&mut guard, &root, &dir, &id, Some(&payload))? {
                    return Ok(());
                }
                match guard.as_mut() {
                    Some(w) => w.compact(&payload),
                    None => Ok(()),
                }
            })();
            if result.is_err() {
                *guard = None;
            }
            result
        })
        .await
        .map_err(join_error)??;
        self.keep_open(&state.session_id);
        Ok(())
    }

    /// The directories under the root that are sessions holding a state (see
    /// [`StateStore::list`]): [`TRASH_DIR`], [`LOCK_DIR`], names no session id can take and
    /// directories a first commit cut short (no snapshot yet) are skipped. Takes no lease and
    /// writes no session: the first listing of a store sweeps the trash (what deletions a kill cut
    /// short left there, already gone for every load), as [`open`](FileStore::open) does.
    async fn list(&self) -> Result<Vec<String>, AgentError> {
        let root = self.root.clone();
        let sweep = !self.trash_swept.swap(true, std::sync::atomic::Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            if sweep {
                sweep_leftovers(&root);
            }
            list_session_dirs(&root)
        })
        .await
        .map_err(join_error)?
    }

    async fn updated_at_ms(&self, session_id: &str) -> Result<Option<u64>, AgentError> {
        let dir = self.session_dir(session_id)?;
        let id = session_id.to_string();
        tokio::task::spawn_blocking(move || last_written_ms(&dir, &id)).await.map_err(join_error)?
    }

    async fn lease(&self, session_id: &str) -> Result<SessionLease, AgentError> {
        validate_session_id(session_id)?;
        let dir = self.root.join(LOCK_DIR);
        let path = dir.join(session_id);
        let session_dir = self.root.join(session_id);
        let id = session_id.to_string();
        let lock = tokio::task::spawn_blocking(move || lock_session(&dir, path, session_dir, &id))
            .await
            .map_err(join_error)??;
        // Another writer may have changed the session since this store last wrote it.
        let slot = self.slot(session_id);
        let mut guard = slot.lock_owned().await;
        if guard.is_some() {
            tokio::task::spawn_blocking(move || {
                if !guard.as_ref().is_some_and(Writer::is_current) {
                    *guard = None;
                }
            })
            .await
            .map_err(join_error)?;
        }
        Ok(lock.map(SessionLease::holding).unwrap_or_default())
    }

    /// Probes the session's lock file (see "Writers" in the module docs): held while a lease of
    /// any store or process on this root is alive, this store's included.
    async fn lease_held(&self, session_id: &str) -> Result<Option<bool>, AgentError> {
        validate_session_id(session_id)?;
        let path = self.root.join(LOCK_DIR).join(session_id);
        tokio::task::spawn_blocking(move || probe_lock(&path)).await.map_err(join_error)?
    }

    /// Removes the session's lock file when the session does not exist and no lease holds it
    /// (see "Writers" in the module docs).
    async fn remove_stale_lease(&self, session_id: &str) -> Result<(), AgentError> {
        validate_session_id(session_id)?;
        let path = self.root.join(LOCK_DIR).join(session_id);
        let session_dir = self.root.join(session_id);
        let id = session_id.to_string();
        tokio::task::spawn_blocking(move || remove_stale_lock(&path, &session_dir, &id))
            .await
            .map_err(join_error)?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<bool, AgentError> {
        let dir = self.session_dir(session_id)?;
        let slot = self.slot(session_id);
        let mut guard = slot.lock_owned().await;
        let root = self.root.clone();
        let id = session_id.to_string();
        tokio::task::spawn_blocking(move || {
            *guard = None;
            delete_session_dir(&root, &dir, &id)
        })
        .await
        .map_err(join_error)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ChatMessage;
    use std::sync::Mutex;

    /// The directory whose syncs fail ([`sync_dir`]), for the test that needs a compaction whose
    /// snapshot is renamed in place but whose directory cannot be synced: a failure no file
    /// placed from outside the store can cause. Keyed by path, so tests running at the same time
    /// (each in its own temp directory) are not touched.
    static FAILING_DIR_SYNC: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    pub(super) fn dir_sync_fails(dir: &Path) -> bool {
        FAILING_DIR_SYNC.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|d| d == dir)
    }

    fn fail_dir_sync(dir: &Path, fail: bool) {
        let mut failing = FAILING_DIR_SYNC.lock().unwrap_or_else(|e| e.into_inner());
        failing.retain(|d| d != dir);
        if fail {
            failing.push(dir.to_path_buf());
        }
    }

    #[tokio::test]
    async fn a_commit_whose_new_snapshot_is_in_place_is_not_tried_again_for_want_of_descriptors() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::new(root.path());
        // An idle journal the store can give back.
        let other = AgentState::new("other");
        store.commit(&other, &[]).await.unwrap();
        // The session's first commit renames its snapshot in place, then cannot sync the
        // directory for want of a descriptor.
        let dir = root.path().join("s");
        fail_dir_sync(&dir, true);
        let mut state = AgentState::new("s");
        let event = StateEvent::MessageAppended { message: ChatMessage::user("once") };
        state.apply(&event);
        let e = store.commit(&state, std::slice::from_ref(&event)).await.unwrap_err();
        fail_dir_sync(&dir, false);
        assert_eq!(e.code, codes::STATE_IO, "{e}");
        // The snapshot holds the event; tried again, the commit would append it after it too.
        let loaded = FileStore::new(root.path()).load_unrepaired("s").await.unwrap().unwrap();
        assert_eq!(loaded, state, "the message once");
    }

    #[tokio::test]
    async fn a_compaction_renamed_in_place_but_not_synced_leaves_the_commits_on_the_new_generation() {
        let root = tempfile::tempdir().unwrap();
        let opts = FileStoreOptions { compact_min_bytes: 1024, ..FileStoreOptions::default() };
        let store = FileStore::with_options(root.path(), opts);
        let dir = root.path().join("s");
        let mut state = AgentState::new("s");
        let mut commit = |k: usize| {
            let event = StateEvent::MessageAppended {
                message: ChatMessage::user(format!("{k} {}", "x".repeat(200))),
            };
            state.apply(&event);
            (state.clone(), vec![event])
        };
        // Generation 1, then commits until the next one compacts.
        let (saved, events) = commit(0);
        store.commit(&saved, &events).await.unwrap();
        let mut k = 1;
        while !snapshot_path(&dir, 2).exists() {
            if k == 3 {
                // The compaction this commit starts renames its snapshot, then cannot sync the
                // directory.
                fail_dir_sync(&dir, true);
            }
            let (saved, events) = commit(k);
            store.commit(&saved, &events).await.unwrap_or_else(|e| panic!("commit {k}: {e}"));
            k += 1;
            assert!(k < 50, "no compaction");
        }
        fail_dir_sync(&dir, false);
        let compacted_at = k - 1;
        assert!(compacted_at >= 3, "the failing sync was armed before the compaction ({compacted_at})");
        // The commit succeeded, and the writer was dropped: the next commits reopen the session
        // from disk and append to generation 2's journal. Neither is generation 1's journal, which
        // loads no longer read, written again, nor generation 2's removed as a failed
        // compaction's leftover (the commits after it would then be read by no load).
        let journal_1 = fs::metadata(journal_path(&dir, 1)).unwrap().len();
        for _ in 0..3 {
            let (saved, events) = commit(k);
            store.commit(&saved, &events).await.unwrap();
            k += 1;
            let other = FileStore::new(root.path()).load_unrepaired("s").await.unwrap().unwrap();
            assert_eq!(other, saved, "another store reads every commit (after {k})");
        }
        let journal_2 = fs::metadata(journal_path(&dir, 2)).unwrap().len();
        assert!(journal_2 > JOURNAL_HEADER_LEN as u64, "the later commits are in generation 2's journal");
        assert_eq!(fs::metadata(journal_path(&dir, 1)).unwrap().len(), journal_1);
        assert!(!snapshot_path(&dir, 3).exists());
        assert_eq!(store.load_unrepaired("s").await.unwrap().unwrap(), state);
    }

    #[test]
    fn a_lock_taken_on_a_file_its_holder_removed_is_retaken_on_the_current_one() {
        let root = tempfile::tempdir().unwrap();
        let locks = root.path().join(LOCK_DIR);
        let path = locks.join("s");
        let session_dir = root.path().join("s");
        let first = lock_session(&locks, path.clone(), session_dir.clone(), "s").unwrap().unwrap();
        assert!(is_current_lock(&first.file, &path));
        // Another lease opened the file before the first one dropped, and locks it after.
        let stale = File::open(&path).unwrap();
        assert!(matches!(stale.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
        drop(first);
        assert!(!path.exists(), "the session does not exist: its lock file went with the lease");
        stale.try_lock().unwrap();
        assert!(!is_current_lock(&stale, &path), "a removed file holds nothing");
        // A lease now locks the file its path names, though the stale lock is still held.
        let second = lock_session(&locks, path.clone(), session_dir.clone(), "s").unwrap().unwrap();
        assert!(is_current_lock(&second.file, &path));
        let e = lock_session(&locks, path.clone(), session_dir.clone(), "s").unwrap_err();
        assert_eq!(e.code, codes::SESSION_BUSY);
        // A session that exists keeps its lock file; a directory of the app's own is no session.
        fs::create_dir(&session_dir).unwrap();
        fs::write(session_dir.join("notes.txt"), b"the app's").unwrap();
        drop(second);
        assert!(!path.exists());
        fs::write(snapshot_path(&session_dir, 1), b"a snapshot").unwrap();
        let third = lock_session(&locks, path.clone(), session_dir.clone(), "s").unwrap().unwrap();
        drop(third);
        assert!(path.is_file());
    }
}
