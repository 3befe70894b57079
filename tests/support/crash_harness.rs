//! The parent side the SIGKILL crash harnesses share (tests/state_crash.rs,
//! tests/state_delete_crash.rs): their settings from the environment, the child they run and kill,
//! and a temp root on tmpfs.
//!
//! - `ARKAGENT_LONG=1`: the long number of kills instead of the short one.
//! - `ARKAGENT_CRASH_KILLS=<n>`: any number of kills.
//! - `ARKAGENT_CRASH_SEED=<u64>`: replay a run (the seed is printed).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How many kills a run makes and the seed of its kill moments.
pub struct CrashRun {
    pub kills: usize,
    pub seed: u64,
}

impl CrashRun {
    /// The settings from the environment (see the module docs), `short` or `long` kills by
    /// default; prints them with `name`, and how to replay the run.
    pub fn from_env(name: &str, short: usize, long: usize) -> CrashRun {
        let is_long = std::env::var("ARKAGENT_LONG").is_ok_and(|v| v == "1");
        let kills: usize = std::env::var("ARKAGENT_CRASH_KILLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if is_long { long } else { short });
        let seed: u64 = std::env::var("ARKAGENT_CRASH_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..));
        println!("{name}: {kills} kills, seed {seed} (ARKAGENT_CRASH_SEED={seed} replays the kill moments)");
        CrashRun { kills, seed }
    }
}

/// Runs this test binary again as the child (with `child_env` set to `root`), kills it with
/// SIGKILL after `delay`, and returns the lines it printed (read while it runs, so it never
/// blocks on a full pipe). Fails if the child exited by itself.
pub fn run_child_then_kill(child_env: &str, root: &Path, delay: Duration, kill: usize) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(child_env, root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader =
        std::thread::spawn(move || BufReader::new(stdout).lines().map(|l| l.unwrap()).collect::<Vec<_>>());
    std::thread::sleep(delay);
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "kill {kill}: the child must have been killed, not exited ({status})");
    reader.join().unwrap()
}

/// A temp directory on tmpfs when there is one: syncs cost nothing there, so more kills (or
/// racing loads) land in the middle of an operation.
pub fn tmpfs_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}
