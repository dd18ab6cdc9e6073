//! `backup`, `verify` and `restore` (server/README.md "Backup and restore").
//!
//! A backup is a directory laid out like a data directory (`seed-agents.sqlite`, `secret.key`,
//! `agents/`, `session-attachments/`, `uploads/`) plus `manifest.json`, written last, with the
//! length and SHA-256 of every file and the schema version.
//!
//! The order of a backup is what makes it consistent while the server runs:
//!
//! 1. the database is snapshotted first, as of one commit (`db::maintenance::snapshot`);
//! 2. then the content trees are walked and copied. Every file a row of the snapshot can name
//!    (an agent's memory, a session's attachments, a staged upload) was written before that
//!    commit, and files are replaced by rename, never rewritten in place, so each copy is a whole
//!    file. Files created after the snapshot may be copied too: the server ignores or sweeps what
//!    no row names. What the copy cannot see is a file deleted after the snapshot (its agent,
//!    session or upload deleted or finished meanwhile): the restored row then lacks it;
//! 3. the key file, then the manifest, each fsynced.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::files::{self, DATABASE, Entry, FORMAT, KeySource, MANIFEST, Manifest};
use crate::app::{DataDirLock, RESTORE_MARKER};
use crate::config::Config;
use crate::db::maintenance;
use crate::durable;
use crate::secrets::crypto::SecretKey;

/// What a backup wrote.
#[derive(Debug)]
pub(crate) struct Summary {
    /// The manifest.
    pub(crate) manifest: Manifest,
    /// Where the key is.
    pub(crate) key: KeySource,
}

/// Backups hold the SQLite database; a PostgreSQL database is backed up with PostgreSQL's own
/// tools (docs/postgres.md, "Backups").
fn refuse_postgres(config: &Config, command: &str) -> Result<(), String> {
    match config.database_url {
        Some(_) => Err(format!(
            "{command} works on the SQLite database in the data directory; this server uses PostgreSQL \
             (--database-url): back it up with pg_dump and the data directory with your file backups \
             (docs/postgres.md)"
        )),
        None => Ok(()),
    }
}

/// Takes a backup of the data directory of `config` into `to` (missing or empty).
pub(crate) fn backup(config: &Config, to: &Path) -> Result<Summary, String> {
    refuse_postgres(config, "backup")?;
    let io_error = |what: &str, path: &Path| {
        let (what, path) = (what.to_owned(), path.display().to_string());
        move |error: io::Error| format!("cannot {what} {path}: {error}")
    };
    let database = config.database_path();
    if !database.is_file() {
        return Err(format!("{} has no database ({DATABASE}); is --data-dir right?", config.data_dir.display()));
    }
    if !files::is_missing_or_empty(to).map_err(io_error("read", to))? {
        return Err(format!("{} is not empty; back up into a new directory", to.display()));
    }
    let rotating = || {
        super::rotate::interrupted_in(&config.data_dir).then(|| {
            "a secret key rotation is under way or was interrupted (secret.key.next exists): the database and \
             secret.key may not match. Run `seed-agents-server rotate-secret-key` (or start the server) to finish \
             it, then back up"
                .to_owned()
        })
    };
    if let Some(refusal) = rotating() {
        return Err(refusal);
    }
    files::create_dir(to, true).map_err(io_error("create", to))?;
    let created_at_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_millis() as i64);

    // 1. The database, as of one commit.
    let snapshot = to.join(DATABASE);
    let schema_version = maintenance::snapshot(&database, &snapshot).map_err(|error| error.to_string())?;
    restrict(&snapshot).map_err(io_error("restrict", &snapshot))?;
    let database_entry = files::hash_file(&snapshot, DATABASE.to_owned()).map_err(io_error("read", &snapshot))?;

    // 2. The content trees, after the snapshot.
    let tree = files::walk(config).map_err(io_error("walk", &config.data_dir))?;
    for dir in &tree.dirs {
        files::create_dir(&to.join(dir), true).map_err(io_error("create", &to.join(dir)))?;
    }
    let mut copied = Vec::with_capacity(tree.files.len());
    for relative in &tree.files {
        let source = config.data_dir.join(relative);
        let file = match File::open(&source) {
            Ok(file) => file,
            // Deleted since the walk (after the snapshot): see the module docs.
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io_error("read", &source)(error)),
        };
        let name = files::manifest_path(relative).map_err(|error| error.to_string())?;
        copied.push(files::copy_hashed(file, &to.join(relative), name, true).map_err(io_error("copy", &source))?);
    }

    // 3. The key, then the manifest.
    let key = if std::env::var_os(SecretKey::ENV).is_some() { KeySource::Environment } else { KeySource::File };
    let key_file = match key {
        KeySource::Environment => None,
        KeySource::File => {
            let source = config.data_dir.join(SecretKey::FILE_NAME);
            let file = File::open(&source).map_err(io_error("read", &source))?;
            let target = to.join(SecretKey::FILE_NAME);
            Some(
                files::copy_hashed(file, &target, SecretKey::FILE_NAME.to_owned(), true)
                    .map_err(io_error("copy", &source))?,
            )
        }
    };
    // A rotation that ran meanwhile (beside no server) may have committed after the snapshot:
    // the key copied must open the snapshot's secrets, or no manifest is written.
    if let Some(refusal) = rotating() {
        return Err(refusal);
    }
    if key == KeySource::File {
        let copied = SecretKey::read_file(&to.join(SecretKey::FILE_NAME)).map_err(|error| error.to_string())?;
        let conn = maintenance::open_read_only(&snapshot).map_err(|error| error.to_string())?;
        let (total, unopened) = super::rotate::unopened(&conn, &copied).map_err(|error| error.to_string())?;
        if unopened > 0 {
            return Err(format!(
                "{unopened} of {total} secrets in the snapshot do not open with secret.key (was the key rotated \
                 during the backup?); back up again"
            ));
        }
    }
    let manifest = Manifest {
        format: FORMAT,
        created_at_ms,
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        schema_version,
        key,
        database: database_entry,
        key_file,
        dirs: tree
            .dirs
            .iter()
            .map(|dir| files::manifest_path(dir))
            .collect::<io::Result<_>>()
            .map_err(|e| e.to_string())?,
        files: copied,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|error| error.to_string())?;
    durable::write(&to.join(MANIFEST), &json, &files::COPY_TEMP).map_err(io_error("write", &to.join(MANIFEST)))?;
    for dir in &tree.dirs {
        durable::sync_dir(&to.join(dir)).map_err(io_error("sync", &to.join(dir)))?;
    }
    files::sync_up_to(to, to).map_err(io_error("sync", to))?;
    if let Some(parent) = to.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        durable::sync_dir(parent).map_err(io_error("sync", parent))?;
    }
    Ok(Summary { manifest, key })
}

/// Mode 0600 on a file of the backup.
fn restrict(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// What `verify` found wrong with a backup (empty: sound).
#[derive(Debug)]
pub(crate) struct Verified {
    /// The manifest, when it could be read.
    pub(crate) manifest: Option<Manifest>,
    /// Each problem, one line.
    pub(crate) problems: Vec<String>,
    /// Sealed values checked against the backup's key (`None` without a key file).
    pub(crate) secrets_checked: Option<usize>,
}

/// Checks the backup at `from`: the manifest, every file's length and SHA-256, `PRAGMA
/// integrity_check` and the schema version of the database, and that every sealed value opens
/// with the backup's key.
pub(crate) fn verify(from: &Path) -> Verified {
    let mut verified = Verified { manifest: None, problems: Vec::new(), secrets_checked: None };
    let manifest_path = from.join(MANIFEST);
    let manifest: Manifest = match std::fs::read(&manifest_path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(manifest) => manifest,
            Err(error) => {
                verified.problems.push(format!("{} is not a manifest: {error}", manifest_path.display()));
                return verified;
            }
        },
        Err(error) => {
            verified.problems.push(format!(
                "cannot read {}: {error} (a backup without one did not finish)",
                manifest_path.display()
            ));
            return verified;
        }
    };
    if manifest.format != FORMAT {
        verified
            .problems
            .push(format!("manifest format {} is not {FORMAT}, the one this build reads", manifest.format));
        verified.manifest = Some(manifest);
        return verified;
    }
    for entry in manifest.entries() {
        if let Err(problem) = check_entry(from, entry) {
            verified.problems.push(problem);
        }
    }
    for dir in &manifest.dirs {
        match files::relative_path(dir) {
            Ok(relative) if from.join(&relative).is_dir() => {}
            Ok(_) => verified.problems.push(format!("directory {dir} is missing")),
            Err(error) => verified.problems.push(error.to_string()),
        }
    }
    if verified.problems.is_empty() {
        check_database(from, &manifest, &mut verified);
    }
    verified.manifest = Some(manifest);
    verified
}

fn check_entry(from: &Path, entry: &Entry) -> Result<(), String> {
    let relative = files::relative_path(&entry.path).map_err(|error| error.to_string())?;
    let actual = files::hash_file(&from.join(relative), entry.path.clone())
        .map_err(|error| format!("cannot read {}: {error}", entry.path))?;
    if actual.bytes != entry.bytes {
        return Err(format!("{} is {} bytes, the manifest says {}", entry.path, actual.bytes, entry.bytes));
    }
    if actual.sha256 != entry.sha256 {
        return Err(format!("{} does not match its SHA-256 in the manifest", entry.path));
    }
    Ok(())
}

fn check_database(from: &Path, manifest: &Manifest, verified: &mut Verified) {
    let path = from.join(DATABASE);
    let conn = match maintenance::open_read_only(&path) {
        Ok(conn) => conn,
        Err(error) => return verified.problems.push(error.to_string()),
    };
    match maintenance::integrity_check(&conn) {
        Ok(findings) if findings == ["ok"] => {}
        Ok(findings) => verified.problems.push(format!("integrity_check: {}", findings.join("; "))),
        Err(error) => verified.problems.push(format!("integrity_check failed: {error}")),
    }
    match maintenance::schema_version(&conn) {
        Ok(version) if version == manifest.schema_version => {}
        Ok(version) => verified
            .problems
            .push(format!("the database has schema version {version}, the manifest says {}", manifest.schema_version)),
        Err(error) => verified.problems.push(format!("cannot read the schema version: {error}")),
    }
    if manifest.schema_version > maintenance::SCHEMA_VERSION {
        verified.problems.push(format!(
            "the backup has schema version {}, newer than this server's {}; restore it with a newer server",
            manifest.schema_version,
            maintenance::SCHEMA_VERSION
        ));
    }
    if manifest.key == KeySource::File {
        match SecretKey::read_file(&from.join(SecretKey::FILE_NAME)) {
            Ok(key) => match super::rotate::unopened(&conn, &key) {
                Ok((total, unopened)) => {
                    verified.secrets_checked = Some(total);
                    if unopened > 0 {
                        verified.problems.push(format!(
                            "{unopened} of {total} stored secrets do not open with the backup's secret.key"
                        ));
                    }
                }
                Err(error) => verified.problems.push(format!("cannot read the stored secrets: {error}")),
            },
            Err(error) => verified.problems.push(error.to_string()),
        }
    }
}

/// What `restore` did.
#[derive(Debug)]
pub(crate) struct Restored {
    /// The manifest restored.
    pub(crate) manifest: Manifest,
    /// Agent rows pointed at the new directory.
    pub(crate) relocated: usize,
}

/// Restores the backup at `from` into the data directory of `config`, which must be missing or
/// empty: verifies the backup first, copies every file durably under a marker that keeps a
/// server from starting on a half-restored directory, points the agents' state directories at
/// the new place, and removes the marker last.
pub(crate) fn restore(config: &Config, from: &Path) -> Result<Restored, String> {
    refuse_postgres(config, "restore")?;
    let target = &config.data_dir;
    let io_error = |what: &str, path: &Path| {
        let (what, path) = (what.to_owned(), path.display().to_string());
        move |error: io::Error| format!("cannot {what} {path}: {error}")
    };
    if !files::is_missing_or_empty(target).map_err(io_error("read", target))? {
        return Err(format!("{} is not empty; restore into a new or empty data directory", target.display()));
    }
    let verified = verify(from);
    if !verified.problems.is_empty() {
        return Err(format!("the backup does not verify:\n  {}", verified.problems.join("\n  ")));
    }
    let manifest = verified.manifest.ok_or("the backup has no manifest")?;
    files::create_dir(target, false).map_err(io_error("create", target))?;
    let _lock = DataDirLock::try_take(target)
        .map_err(io_error("lock", target))?
        .ok_or_else(|| format!("another process holds {}", target.display()))?;
    let marker = target.join(RESTORE_MARKER);
    durable::write(&marker, b"", &files::COPY_TEMP).map_err(io_error("write", &marker))?;

    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in &manifest.dirs {
        let relative = files::relative_path(dir).map_err(|error| error.to_string())?;
        files::create_dir(&target.join(&relative), false).map_err(io_error("create", &target.join(&relative)))?;
        dirs.push(relative);
    }
    for entry in manifest.entries() {
        let relative = files::relative_path(&entry.path).map_err(|error| error.to_string())?;
        let (source, destination) = (from.join(&relative), target.join(&relative));
        if let Some(parent) = destination.parent() {
            files::create_dir(parent, false).map_err(io_error("create", parent))?;
        }
        let file = File::open(&source).map_err(io_error("read", &source))?;
        let owner_only = entry.path == SecretKey::FILE_NAME;
        let copied = files::copy_hashed(file, &destination, entry.path.clone(), owner_only)
            .map_err(io_error("copy", &source))?;
        if copied != *entry {
            return Err(format!("{} changed while it was restored; run restore again", entry.path));
        }
    }
    let relocated = {
        let mut conn = maintenance::open_writable(&config.database_path()).map_err(|error| error.to_string())?;
        let agents_dir = config.agents_dir();
        maintenance::in_transaction(&mut conn, |conn| crate::agents::store::relocate_state_dirs(conn, &agents_dir))
            .map_err(|error| format!("cannot point the agents at {}: {error}", agents_dir.display()))?
    };
    for dir in dirs.iter().rev() {
        files::sync_up_to(&target.join(dir), target).map_err(io_error("sync", &target.join(dir)))?;
    }
    std::fs::remove_file(&marker).map_err(io_error("remove", &marker))?;
    durable::sync_dir(target).map_err(io_error("sync", target))?;
    if let Some(parent) = target.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        durable::sync_dir(parent).map_err(io_error("sync", parent))?;
    }
    Ok(Restored { manifest, relocated })
}
