//! `doctor` (server/README.md "Doctor"): looks the data directory over and says what to do about
//! each thing it finds. It changes nothing.
//!
//! The checks: the key file (present, 0600, 32 bytes) and a rotation or restore left unfinished;
//! the database (`PRAGMA integrity_check`, the schema version); that every stored secret opens
//! with the key; free disk space; and, only while no server runs (the data directory's lock is
//! free), files no row names (an agent's directory, a session's attachments, a staged upload) and
//! temp files interrupted writes left (the names `leftovers` knows). Beside a running server
//! those would be writes in flight, so they are skipped with a note.

use std::collections::HashSet;
use std::path::Path;

use super::files::{self, Tree};
use crate::app::{DataDirLock, LOCK_FILE, RESTORE_MARKER};
use crate::config::Config;
use crate::db::maintenance;
use crate::secrets::crypto::SecretKey;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Fine; said so the operator sees what was checked.
    Ok,
    /// Worth knowing; nothing is wrong yet.
    Note,
    /// Something to fix (the command exits non-zero).
    Problem,
}

/// One finding: what was found and, for a problem, what to do.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) level: Level,
    pub(crate) what: String,
    pub(crate) fix: Option<String>,
}

/// Free space below either of these is a problem: the database cannot grow, and SQLite needs
/// room for its journal and checkpoints.
const LOW_FREE_BYTES: u64 = 1 << 30;
const LOW_FREE_PERCENT: u64 = 5;

/// Runs every check on the data directory of `config`.
pub(crate) fn examine(config: &Config) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut say = |level: Level, what: String, fix: Option<&str>| {
        findings.push(Finding { level, what, fix: fix.map(str::to_owned) });
    };
    let dir = &config.data_dir;
    if !dir.is_dir() {
        say(Level::Problem, format!("{} is not a directory", dir.display()), Some("check --data-dir"));
        return findings;
    }
    // Every server start creates the lock file: without one, no server runs (and doctor does not
    // create it).
    let has_lock_file = dir.join(LOCK_FILE).exists();
    let lock = if has_lock_file {
        match DataDirLock::try_take(dir) {
            Ok(lock) => lock,
            Err(error) => {
                say(Level::Problem, format!("cannot open {}: {error}", dir.join(LOCK_FILE).display()), None);
                None
            }
        }
    } else {
        None
    };
    let running = has_lock_file && lock.is_none();
    if running {
        say(Level::Note, "a server is running on this directory".to_owned(), None);
    }
    if dir.join(RESTORE_MARKER).exists() {
        say(
            Level::Problem,
            "a restore into this directory did not finish".to_owned(),
            Some("empty the directory and run `seed-agents-server restore` again"),
        );
    }
    if super::rotate::interrupted_in(dir) {
        say(
            Level::Problem,
            format!("a secret key rotation was interrupted ({} exists)", super::rotate::NEXT_KEY_FILE),
            Some("run `seed-agents-server rotate-secret-key` again, or start the server: either finishes or undoes it"),
        );
    }

    let key = check_key(dir, &mut say);
    check_database(config, key.as_ref(), &mut say);
    check_free_space(dir, &mut say);

    if running {
        say(
            Level::Note,
            "orphaned and temp files were not checked: beside a running server they may be writes in flight".to_owned(),
            Some("stop the server and run doctor again to check them"),
        );
    } else {
        check_files(config, &mut say);
    }
    drop(lock);
    findings
}

fn check_key(dir: &Path, say: &mut impl FnMut(Level, String, Option<&str>)) -> Option<SecretKey> {
    if let Ok(value) = std::env::var(SecretKey::ENV) {
        return match SecretKey::load(dir, Some(&value)) {
            Ok(key) => {
                say(Level::Ok, format!("the secret key comes from {}", SecretKey::ENV), None);
                Some(key)
            }
            Err(error) => {
                say(Level::Problem, error.to_string(), None);
                None
            }
        };
    }
    let path = dir.join(SecretKey::FILE_NAME);
    if !path.exists() {
        say(
            Level::Note,
            format!("{} does not exist yet (the server creates it on first start)", path.display()),
            Some("if secrets were stored before, restore secret.key from a backup before starting the server"),
        );
        return None;
    }
    match SecretKey::read_file(&path) {
        Ok(key) => {
            say(Level::Ok, format!("{}: mode 0600, 32 bytes", path.display()), None);
            Some(key)
        }
        // The error names the fix (`chmod 600 …`, restore from a backup).
        Err(error) => {
            say(Level::Problem, error.to_string(), None);
            None
        }
    }
}

fn check_database(config: &Config, key: Option<&SecretKey>, say: &mut impl FnMut(Level, String, Option<&str>)) {
    if let Some(url) = &config.database_url {
        match maintenance::open_postgres(url) {
            Ok(conn) => {
                say(Level::Ok, format!("database {}: connected", crate::db::redacted_url(url)), None);
                check_schema_and_secrets(&conn, key, say);
            }
            Err(error) => say(Level::Problem, error.to_string(), Some("check --database-url and that PostgreSQL runs")),
        }
        return;
    }
    let path = config.database_path();
    if !path.exists() {
        say(Level::Note, format!("{} does not exist yet (created on first start)", path.display()), None);
        return;
    }
    let conn = match maintenance::open_read_only(&path) {
        Ok(conn) => conn,
        Err(error) => {
            say(Level::Problem, error.to_string(), Some("restore the data directory from a backup"));
            return;
        }
    };
    match maintenance::integrity_check(&conn) {
        Ok(findings) if findings == ["ok"] => say(Level::Ok, "database integrity_check: ok".to_owned(), None),
        Ok(findings) => say(
            Level::Problem,
            format!("database integrity_check: {}", findings.join("; ")),
            Some("stop the server and restore the data directory from a backup (`seed-agents-server restore`)"),
        ),
        Err(error) => say(Level::Problem, format!("database integrity_check failed: {error}"), None),
    }
    check_schema_and_secrets(&conn, key, say);
}

/// The schema version, and whether every stored secret opens with the key.
fn check_schema_and_secrets(
    conn: &crate::db::Connection,
    key: Option<&SecretKey>,
    say: &mut impl FnMut(Level, String, Option<&str>),
) {
    match maintenance::schema_version(conn) {
        Ok(version) if version > maintenance::SCHEMA_VERSION => say(
            Level::Problem,
            format!("database schema version {version} is newer than this build's {}", maintenance::SCHEMA_VERSION),
            Some("run the newer server that wrote it"),
        ),
        Ok(version) if version < maintenance::SCHEMA_VERSION => say(
            Level::Note,
            format!(
                "database schema version {version}; the server migrates it to {} on start",
                maintenance::SCHEMA_VERSION
            ),
            None,
        ),
        Ok(version) => say(Level::Ok, format!("database schema version {version}"), None),
        Err(error) => say(Level::Problem, format!("cannot read the schema version: {error}"), None),
    }
    let Some(key) = key else { return };
    // A database older than this build may lack the tables; the server migrates it first.
    if maintenance::schema_version(conn).is_ok_and(|version| version != maintenance::SCHEMA_VERSION) {
        return;
    }
    match super::rotate::unopened(conn, key) {
        Ok((total, 0)) => say(Level::Ok, format!("all {total} stored secrets open with the key"), None),
        Ok((total, unopened)) => say(
            Level::Problem,
            format!("{unopened} of {total} stored secrets do not open with the key"),
            Some("the key is not the one they were sealed with: restore the matching secret.key from a backup"),
        ),
        Err(error) => say(Level::Problem, format!("cannot read the stored secrets: {error}"), None),
    }
}

fn check_free_space(dir: &Path, say: &mut impl FnMut(Level, String, Option<&str>)) {
    match rustix::fs::statvfs(dir) {
        Ok(stats) => {
            let free = stats.f_bavail.saturating_mul(stats.f_frsize);
            let total = stats.f_blocks.saturating_mul(stats.f_frsize);
            let percent = free.saturating_mul(100).checked_div(total).unwrap_or(100);
            let text = format!("{} MiB free of {} MiB ({percent}%)", free >> 20, total >> 20);
            if free < LOW_FREE_BYTES || percent < LOW_FREE_PERCENT {
                say(
                    Level::Problem,
                    format!("low disk space: {text}"),
                    Some("free space or move the data directory: SQLite needs room to commit and checkpoint"),
                );
            } else {
                say(Level::Ok, text, None);
            }
        }
        Err(error) => say(Level::Problem, format!("cannot read free disk space: {error}"), None),
    }
}

fn check_files(config: &Config, say: &mut impl FnMut(Level, String, Option<&str>)) {
    let tree: Tree = match files::walk(config) {
        Ok(tree) => tree,
        Err(error) => return say(Level::Problem, format!("cannot walk the data directory: {error}"), None),
    };
    let mut temps = tree.temps.clone();
    for entry in std::fs::read_dir(&config.data_dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if name.to_str().is_some_and(|name| crate::leftovers::is_temp(name) || files::COPY_TEMP.names(name)) {
            temps.push(name.into());
        }
    }
    if temps.is_empty() {
        say(Level::Ok, "no temp files left by interrupted writes".to_owned(), None);
    } else {
        let bytes: u64 =
            temps.iter().filter_map(|path| std::fs::metadata(config.data_dir.join(path)).ok()).map(|m| m.len()).sum();
        say(
            Level::Problem,
            format!("{} temp files left by interrupted writes ({bytes} bytes): {}", temps.len(), list(&temps)),
            Some("start the server: it removes them at start"),
        );
    }
    if !tree.strange.is_empty() {
        say(
            Level::Problem,
            format!(
                "{} entries the server never makes (symlinks, devices): {}",
                tree.strange.len(),
                list(&tree.strange)
            ),
            Some("move them out of the data directory"),
        );
    }
    let opened = match &config.database_url {
        Some(url) => maintenance::open_postgres(url),
        None => maintenance::open_read_only(&config.database_path()),
    };
    let Ok(conn) = opened else { return };
    let known = (|| -> crate::error::ApiResult<_> {
        Ok((
            crate::agents::store::all_ids(&conn)?,
            crate::sessions::store::all_ids(&conn)?,
            crate::uploads::all_ids(&conn)?,
        ))
    })();
    let (agents, sessions, uploads) = match known {
        Ok(known) => known,
        Err(error) => return say(Level::Problem, format!("cannot read the rows that own files: {error}"), None),
    };
    let orphans = orphans(config, &agents, &sessions, &uploads);
    if orphans.is_empty() {
        say(Level::Ok, "every agent directory, attachment directory and staged upload has its row".to_owned(), None);
    } else {
        say(
            Level::Problem,
            format!("{} files or directories no row names: {}", orphans.len(), list(&orphans)),
            Some(
                "start the server: its upload sweep removes staged uploads and attachment directories without a row; \
                 an agent directory without a row is left for you to inspect and delete",
            ),
        );
    }
}

/// The top-level entries of the content trees whose owner row is gone.
fn orphans(
    config: &Config,
    agents: &HashSet<String>,
    sessions: &HashSet<String>,
    uploads: &HashSet<String>,
) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut scan = |dir: std::path::PathBuf, owned: &dyn Fn(&str) -> bool| {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !crate::leftovers::is_temp(&name) && !owned(&name) {
                found.push(entry.path().strip_prefix(&config.data_dir).unwrap_or(&entry.path()).to_path_buf());
            }
        }
    };
    scan(config.agents_dir(), &|name| agents.contains(name));
    scan(crate::attachments::root(config), &|name| sessions.contains(name));
    scan(crate::uploads::staging_dir(config), &|name| {
        name.strip_suffix(".part").is_some_and(|id| uploads.contains(id))
    });
    found.sort();
    found
}

/// At most ten paths, then how many more.
fn list(paths: &[std::path::PathBuf]) -> String {
    let mut shown: Vec<String> = paths.iter().take(10).map(|path| path.display().to_string()).collect();
    if paths.len() > 10 {
        shown.push(format!("and {} more", paths.len() - 10));
    }
    shown.join(", ")
}
