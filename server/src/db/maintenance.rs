//! The database as the operator's commands see it (`backup`, `verify`, `restore`,
//! `rotate-secret-key`, `doctor`; server/README.md "Operations"): a plain connection of its own,
//! never the server's writer or readers, and the whole-file operations SQLite offers.
//!
//! Invariants:
//! - a snapshot is one read transaction of the source: SQLite's online backup API copies every
//!   page in a single step, so the copy is the database as of one commit, and (in WAL mode) the
//!   server's writer goes on meanwhile;
//! - a snapshot is a self-contained file (rollback journal, not WAL), fsynced before it is
//!   reported done.

use std::path::Path;

use rusqlite::OpenFlags;

use super::Connection;

use super::{DbError, configure, migrations};

pub(crate) use super::migrations::{SCHEMA_VERSION, schema_version};

fn sqlite_error(path: &Path) -> impl Fn(rusqlite::Error) -> DbError + '_ {
    move |source| DbError::Sqlite { path: path.display().to_string(), source }
}

/// Opens the database at `path` for writing (creating it when missing), configured as the
/// server's writer is (WAL, `synchronous=FULL`, foreign keys) and migrated to this build's schema.
pub(crate) fn open_writable(path: &Path) -> Result<Connection, DbError> {
    let mut conn = rusqlite::Connection::open(path).map_err(sqlite_error(path))?;
    configure(&conn, false).map_err(sqlite_error(path))?;
    migrations::apply(&mut conn, &path.display().to_string())?;
    Ok(Connection::sqlite(conn))
}

/// Connects to the PostgreSQL database at `url` for an operator command, without migrating it
/// (commands run outside the async runtime, so the synchronous client may start here).
pub(crate) fn open_postgres(url: &str) -> Result<Connection, DbError> {
    super::pg::connect(url)
}

/// Connects to the PostgreSQL database at `url` for an operator command and migrates it, as
/// [`open_writable`] does a SQLite file. Outside the async runtime only.
pub(crate) fn open_writable_postgres(url: &str) -> Result<Connection, DbError> {
    super::pg::open(url)
}

/// Opens an existing database read-only, with the readers' settings.
pub(crate) fn open_read_only(path: &Path) -> Result<Connection, DbError> {
    open_sqlite_read_only(path).map(Connection::sqlite)
}

fn open_sqlite_read_only(path: &Path) -> Result<rusqlite::Connection, DbError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(path, flags).map_err(sqlite_error(path))?;
    configure(&conn, true).map_err(sqlite_error(path))?;
    Ok(conn)
}

/// Copies the live database at `source` into a new file at `target` (which must not exist) as
/// of one commit, then switches the copy to a rollback journal and fsyncs it. Answers the
/// copy's schema version.
pub(crate) fn snapshot(source: &Path, target: &Path) -> Result<i64, DbError> {
    let io_error = |source| DbError::Io { path: target.display().to_string(), source };
    if target.exists() {
        return Err(io_error(std::io::Error::from(std::io::ErrorKind::AlreadyExists)));
    }
    let from = open_sqlite_read_only(source)?;
    let mut to = rusqlite::Connection::open(target).map_err(sqlite_error(target))?;
    {
        let backup = rusqlite::backup::Backup::new(&from, &mut to).map_err(sqlite_error(target))?;
        // -1: every page in one step, under one read transaction of the source. In smaller steps
        // a write by the server between two steps would restart the copy, possibly forever.
        // (rusqlite's `run_to_completion` takes only positive step sizes.)
        let mut waits = 0;
        loop {
            match backup.step(-1).map_err(sqlite_error(target))? {
                rusqlite::backup::StepResult::Done => break,
                // A lock held for a moment (a checkpoint): try again, for up to ten seconds.
                _ if waits < 1000 => {
                    waits += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => {
                    return Err(sqlite_error(target)(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        Some("the database stayed locked for ten seconds".to_owned()),
                    )));
                }
            }
        }
    }
    drop(from);
    to.pragma_update(None, "journal_mode", "DELETE").map_err(sqlite_error(target))?;
    let version = migrations::sqlite_schema_version(&to).map_err(sqlite_error(target))?;
    to.close().map_err(|(_, source)| sqlite_error(target)(source))?;
    std::fs::File::open(target).and_then(|file| file.sync_all()).map_err(io_error)?;
    Ok(version)
}

/// `PRAGMA integrity_check`: `["ok"]` for a sound file, else SQLite's findings (at most 100).
pub(crate) fn integrity_check(conn: &Connection) -> super::Result<Vec<String>> {
    let Some(conn) = conn.as_sqlite() else {
        return Err(super::Error::Unsupported("an integrity check of a PostgreSQL database"));
    };
    let mut findings = Vec::new();
    conn.pragma_query(None, "integrity_check", |row| {
        findings.push(row.get::<_, String>(0)?);
        Ok(())
    })?;
    Ok(findings)
}

/// Runs `work` in one write transaction (`BEGIN IMMEDIATE`), committing when it answers `Ok`.
pub(crate) fn in_transaction<T, E: From<super::Error>>(
    conn: &mut Connection,
    work: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<T, E> {
    conn.execute_batch(match conn.dialect() {
        super::Dialect::Sqlite => "BEGIN IMMEDIATE",
        super::Dialect::Postgres => "BEGIN",
    })?;
    match work(conn) {
        Ok(outcome) => {
            // PostgreSQL answers `COMMIT` of an aborted transaction with a silent rollback; a
            // statement first fails instead.
            if conn.dialect() == super::Dialect::Postgres
                && let Err(error) = conn.execute_batch("SELECT 1")
            {
                conn.execute_batch("ROLLBACK")?;
                return Err(error.into());
            }
            conn.execute_batch("COMMIT")?;
            Ok(outcome)
        }
        Err(error) => {
            conn.execute_batch("ROLLBACK")?;
            Err(error)
        }
    }
}
