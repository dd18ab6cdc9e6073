//! What the kill-and-restart tests share: a client whose account survives restarts, a labelled
//! start, the number of kills, deterministic randomness for the kill points, and the database
//! file checked after a clean stop.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use seed_agents_sdk::{Client, Ed25519Signer};

use crate::process::{Launch, ServerProcess};

/// The SQLite file inside a data directory (`Config::database_path`).
pub const DATABASE_FILE: &str = "seed-agents.sqlite";

/// How many kills a test makes: `CRASH_KILLS` when set, else `default`.
pub fn kills(default: usize) -> usize {
    std::env::var("CRASH_KILLS").ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// An SDK client for the account of the fixed `seed` (so it is the same account after restarts).
pub fn client(url: &str, seed: &[u8; 32]) -> Client {
    Client::builder(url, Ed25519Signer::from_seed(seed)).build().unwrap()
}

/// Starts `binary` over `data_dir`, logging into `<log_dir>/<label>.log`; returns once healthy.
pub async fn start(binary: &str, data_dir: &Path, log_dir: &Path, label: &str) -> ServerProcess {
    ServerProcess::start(&Launch::new(binary, data_dir, &log_dir.join(format!("{label}.log")))).await
}

/// The database of `data_dir`, read-only, once `PRAGMA integrity_check` said `ok` and
/// `PRAGMA foreign_key_check` found nothing (call it after a clean stop).
pub fn open_sound(data_dir: &Path) -> Connection {
    let conn = Connection::open_with_flags(data_dir.join(DATABASE_FILE), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let integrity: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(integrity, ["ok"], "PRAGMA integrity_check");
    let violations: Vec<(String, Option<i64>, String)> = conn
        .prepare("PRAGMA foreign_key_check")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(violations.is_empty(), "PRAGMA foreign_key_check (table, rowid, parent): {violations:?}");
    conn
}

/// A small deterministic generator (a linear congruential one) for kill points and scripts: the
/// same seed, the same run; no dependency for a test's randomness.
#[derive(Debug, Clone)]
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number below `below`.
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }

    /// The next number from `low` up to (not including) `high`.
    pub fn next_in(&mut self, low: u64, high: u64) -> u64 {
        low + self.next(high - low)
    }
}
