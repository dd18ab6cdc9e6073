//! The files of a data directory as the operator's commands see them: the content trees (agents'
//! memory, session attachments, staged uploads) walked without following symlinks, files copied
//! and hashed as one stream (never whole in memory), and a backup's manifest.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::durable::{self, TempOptions};

/// The manifest's file name inside a backup.
pub(crate) const MANIFEST: &str = "manifest.json";
/// The format of the manifest this build writes and reads.
pub(crate) const FORMAT: u32 = 1;
/// The database file's name, in a data directory and in a backup.
pub(crate) const DATABASE: &str = Config::DATABASE_FILE;
/// Temp files of the backup and restore copies (hidden, and never a name the server uses).
pub(crate) const COPY_TEMP: TempOptions = TempOptions { prefix: ".seed-copy-", suffix: ".tmp", owner_only: true };

/// Where the key the backed-up secrets are sealed with lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum KeySource {
    /// `secret.key`, copied into the backup.
    File,
    /// `SEED_AGENTS_SECRET_KEY`: not in the backup; the operator keeps it.
    Environment,
}

/// One file of a backup: its path relative to the backup (and to the data directory it is
/// restored into), length and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) path: String,
    pub(crate) bytes: u64,
    pub(crate) sha256: String,
}

/// `manifest.json`: what a backup holds. Written last, so a backup without one is incomplete.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    /// [`FORMAT`].
    pub(crate) format: u32,
    /// When the database snapshot was taken, in Unix milliseconds.
    pub(crate) created_at_ms: i64,
    /// The server version that took it.
    pub(crate) server_version: String,
    /// The database's schema version (`user_version`, the migrations applied).
    pub(crate) schema_version: i64,
    /// Where the secrets' key is.
    pub(crate) key: KeySource,
    /// The database snapshot.
    pub(crate) database: Entry,
    /// The key file, when [`KeySource::File`].
    pub(crate) key_file: Option<Entry>,
    /// The directories of the content trees (relative), so empty ones come back too.
    pub(crate) dirs: Vec<String>,
    /// The content files, in path order.
    pub(crate) files: Vec<Entry>,
}

impl Manifest {
    /// Every file entry: the database, the key file, the content files.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        std::iter::once(&self.database).chain(self.key_file.as_ref()).chain(&self.files)
    }
}

/// The content trees of a data directory, relative to it.
pub(crate) fn content_roots(config: &Config) -> Vec<PathBuf> {
    [config.agents_dir(), crate::attachments::root(config), crate::uploads::staging_dir(config)]
        .into_iter()
        .filter_map(|dir| dir.strip_prefix(&config.data_dir).ok().map(Path::to_path_buf))
        .collect()
}

/// What a walk of the content trees found, relative to the data directory.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    /// Directories (the roots included, when they exist).
    pub(crate) dirs: Vec<PathBuf>,
    /// Regular files that are not temp files.
    pub(crate) files: Vec<PathBuf>,
    /// Temp files of interrupted (or, beside a running server, in-flight) durable writes.
    pub(crate) temps: Vec<PathBuf>,
    /// Anything else (symlinks, sockets): the server never makes them.
    pub(crate) strange: Vec<PathBuf>,
}

/// Walks the content trees of the data directory, following no symlink.
pub(crate) fn walk(config: &Config) -> io::Result<Tree> {
    let mut tree = Tree::default();
    let base = &config.data_dir;
    let mut pending: Vec<PathBuf> = content_roots(config);
    while let Some(relative) = pending.pop() {
        let entries = match fs::read_dir(base.join(&relative)) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        tree.dirs.push(relative.clone());
        for entry in entries {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                if entry.file_name().to_str().is_some_and(crate::leftovers::is_temp) {
                    tree.temps.push(path);
                } else {
                    tree.files.push(path);
                }
            } else {
                tree.strange.push(path);
            }
        }
    }
    tree.dirs.sort();
    tree.files.sort();
    tree.temps.sort();
    Ok(tree)
}

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W> Hashing<W> {
    fn new(inner: W) -> Self {
        Self { inner, hasher: Sha256::new(), bytes: 0 }
    }

    fn entry(self, path: String) -> Entry {
        Entry { path, bytes: self.bytes, sha256: hex::encode(self.hasher.finalize()) }
    }
}

/// The length and SHA-256 of the file at `path`, read as a stream.
pub(crate) fn hash_file(path: &Path, name: String) -> io::Result<Entry> {
    let mut hashing = Hashing::new(io::sink());
    io::copy(&mut File::open(path)?, &mut hashing)?;
    Ok(hashing.entry(name))
}

/// Copies the open file `from` to `to` durably (a temp file beside `to`, fsynced, renamed, the
/// directory fsynced), hashing the bytes on the way; `owner_only` makes the copy 0600.
pub(crate) fn copy_hashed(mut from: File, to: &Path, name: String, owner_only: bool) -> io::Result<Entry> {
    let options = TempOptions { owner_only, ..COPY_TEMP };
    let parent = to.parent().ok_or_else(|| io::Error::other("a copy's target has no directory"))?;
    let temp = durable::TempFile::create(parent, &options)?;
    let mut hashing = Hashing::new(temp.file());
    io::copy(&mut from, &mut hashing)?;
    let entry = hashing.entry(name);
    temp.persist(to)?;
    Ok(entry)
}

/// `relative` as a manifest path (`/`-separated), refusing anything but plain names.
pub(crate) fn manifest_path(relative: &Path) -> io::Result<String> {
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts
                .push(part.to_str().ok_or_else(|| io::Error::other(format!("{} is not UTF-8", relative.display())))?),
            _ => return Err(io::Error::other(format!("{} is not a plain relative path", relative.display()))),
        }
    }
    Ok(parts.join("/"))
}

/// A manifest path as a relative path, refusing one that could leave the directory (absolute,
/// `..`, empty): a tampered manifest must not make `restore` write elsewhere.
pub(crate) fn relative_path(manifest_path: &str) -> io::Result<PathBuf> {
    let path = PathBuf::from(manifest_path);
    let plain = !manifest_path.is_empty() && path.components().all(|part| matches!(part, Component::Normal(_)));
    if !plain {
        return Err(io::Error::other(format!("the manifest names {manifest_path:?}, not a plain relative path")));
    }
    Ok(path)
}

/// Creates `dir` (and missing parents) with mode 0700 when `owner_only`, else the default.
pub(crate) fn create_dir(dir: &Path, owner_only: bool) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    if owner_only {
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Whether `dir` is missing or an empty directory (what `backup --to` and `restore` accept).
pub(crate) fn is_missing_or_empty(dir: &Path) -> io::Result<bool> {
    match fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(error) => Err(error),
    }
}

/// Fsyncs `dir` and each of its ancestors up to (and including) `root`, so new directory entries
/// on the way survive a crash.
pub(crate) fn sync_up_to(dir: &Path, root: &Path) -> io::Result<()> {
    let mut current = Some(dir);
    while let Some(path) = current {
        durable::sync_dir(path)?;
        if path == root {
            break;
        }
        current = path.parent();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_paths_stay_inside_the_directory() {
        assert_eq!(manifest_path(Path::new("agents/a/memory/n.md")).unwrap(), "agents/a/memory/n.md");
        assert_eq!(relative_path("agents/a/memory/n.md").unwrap(), PathBuf::from("agents/a/memory/n.md"));
        for bad in ["", "/etc/passwd", "../secret.key", "agents/../../x", "./x"] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
        assert!(manifest_path(Path::new("../x")).is_err());
    }

    #[test]
    fn walk_sorts_content_files_from_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(dir.path(), "127.0.0.1:0".parse().unwrap());
        let memory = dir.path().join("agents/a/memory");
        fs::create_dir_all(&memory).unwrap();
        fs::write(memory.join("n.md"), b"n").unwrap();
        fs::write(memory.join(".seed-memory-abc123.tmp"), b"half").unwrap();
        fs::create_dir_all(dir.path().join("session-attachments/s")).unwrap();
        fs::write(dir.path().join("session-attachments/s/.abc123.bin.tmp"), b"half").unwrap();
        fs::write(dir.path().join("seed-agents.sqlite"), b"not walked").unwrap();
        std::os::unix::fs::symlink("/etc", memory.join("link")).unwrap();
        let tree = walk(&config).unwrap();
        assert_eq!(tree.files, [PathBuf::from("agents/a/memory/n.md")]);
        assert_eq!(tree.temps.len(), 2);
        assert_eq!(tree.strange, [PathBuf::from("agents/a/memory/link")]);
        assert!(tree.dirs.contains(&PathBuf::from("session-attachments/s")));
    }

    #[test]
    fn copies_are_hashed_as_they_stream() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        let content: Vec<u8> = (0..200_000u32).map(|n| n as u8).collect();
        fs::write(&source, &content).unwrap();
        let target = dir.path().join("target");
        let entry = copy_hashed(File::open(&source).unwrap(), &target, "t".into(), true).unwrap();
        assert_eq!(entry.bytes, 200_000);
        assert_eq!(entry.sha256, hex::encode(Sha256::digest(&content)));
        assert_eq!(fs::read(&target).unwrap(), content);
        assert_eq!(hash_file(&target, "t".into()).unwrap(), entry);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_half_restored_directory_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(dir.path(), "127.0.0.1:0".parse().unwrap());
        fs::write(dir.path().join(crate::app::RESTORE_MARKER), b"").unwrap();
        let error = crate::app::DataDirLock::take(&config).unwrap_err();
        assert!(error.to_string().contains("a restore into this directory did not finish"), "{error}");
        fs::remove_file(dir.path().join(crate::app::RESTORE_MARKER)).unwrap();
        let held = crate::app::DataDirLock::take(&config).unwrap();
        assert!(crate::app::DataDirLock::try_take(dir.path()).unwrap().is_none());
        drop(held);
        assert!(crate::app::DataDirLock::try_take(dir.path()).unwrap().is_some());
    }
}
