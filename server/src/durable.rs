//! Durable file writes: a file is replaced whole or not at all, and once a call returns `Ok` the
//! new file survives a crash or a power cut.
//!
//! Every write takes the same steps, in this order:
//!
//! 1. create a temp file in the target's own directory (so the rename below never crosses a
//!    filesystem), with `O_EXCL` and a fresh random name, mode 0666 less the umask or, for
//!    [`TempOptions::owner_only`], 0600;
//! 2. write the bytes and `fsync` the file;
//! 3. `rename(2)` it over the target: readers see the old file or the new one, never an empty or
//!    half-written one. The target's last component is replaced, never followed: a symlink there
//!    is replaced by the file, and whatever it pointed to is left alone;
//! 4. `fsync` the directory, so the rename itself is on disk.
//!
//! An error in steps 1–3 leaves the target as it was and removes the temp file. An error in step 4
//! means the new file is in place but may not survive a power cut; it is reported like any other.
//!
//! What a crash leaves behind: the one temp file of each write that was between steps 1 and 3,
//! named `<prefix><6 random letters or digits><suffix>` from the caller's [`TempOptions`].
//! Callers choose names their listings recognise and hide, and the server removes them once at
//! startup ([`remove_leftovers`], for files older than the process).
//!
//! Temp files come from `tempfile` (unique names, `O_EXCL` with retries, the mode, removal on
//! every early return). Its `persist` is only `rename(2)`, without the two syncs around it, so
//! this module does the rename itself between them.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tempfile::TempPath;

/// How a write names its temp file and who may read the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TempOptions {
    /// Start of the temp file's name (a leading `.` keeps it out of a plain `ls`).
    pub prefix: &'static str,
    /// End of the temp file's name.
    pub suffix: &'static str,
    /// Create the file readable and writable by its owner only (0600), not 0666 less the umask.
    pub owner_only: bool,
}

/// How many random characters `tempfile` puts between a temp file's prefix and suffix.
const RANDOM_CHARS: usize = 6;

impl TempOptions {
    /// Whether `name` is a temp file name of these options: `<prefix><6 letters or digits><suffix>`.
    pub(crate) fn names(&self, name: &str) -> bool {
        name.strip_prefix(self.prefix).and_then(|rest| rest.strip_suffix(self.suffix)).is_some_and(|random| {
            random.len() == RANDOM_CHARS && random.bytes().all(|byte| byte.is_ascii_alphanumeric())
        })
    }
}

/// What [`remove_leftovers`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Removed {
    /// Temp files removed.
    pub files: u64,
    /// Their sizes, summed.
    pub bytes: u64,
}

/// Removes the temp files an interrupted write left in `dir` (and, with `recursive`, in every
/// directory below it): regular files that one of `options` [names](TempOptions::names), last
/// modified before `before` (a write of this process started later, so its temp file is never
/// touched). Symlinks are neither followed (`dir` itself included) nor removed; a missing `dir`
/// removes nothing. An entry that cannot be read or removed is logged and skipped, so one bad
/// entry does not keep the rest; only an unreadable `dir` itself is an error.
pub(crate) fn remove_leftovers(
    dir: &Path,
    options: &[TempOptions],
    before: SystemTime,
    recursive: bool,
) -> io::Result<Removed> {
    let mut removed = Removed::default();
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(removed),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(removed),
        Err(error) => return Err(error),
    }
    let mut pending = vec![dir.to_path_buf()];
    let mut top = true;
    while let Some(dir) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if top => return Err(error),
            Err(error) => {
                skipped(&dir, &error);
                continue;
            }
        };
        top = false;
        for entry in entries {
            if let Err((path, error)) = leftover(entry, options, before, recursive, &mut pending, &mut removed) {
                skipped(&path, &error);
            }
        }
    }
    Ok(removed)
}

/// Looks at one entry of [`remove_leftovers`]: queues a directory, removes a leftover.
fn leftover(
    entry: io::Result<fs::DirEntry>,
    options: &[TempOptions],
    before: SystemTime,
    recursive: bool,
    pending: &mut Vec<PathBuf>,
    removed: &mut Removed,
) -> Result<(), (PathBuf, io::Error)> {
    let entry = entry.map_err(|error| (PathBuf::new(), error))?;
    let path = entry.path();
    // `DirEntry::file_type` and `metadata` do not traverse symlinks.
    let kind = entry.file_type().map_err(|error| (path.clone(), error))?;
    if kind.is_dir() {
        if recursive {
            pending.push(path);
        }
        return Ok(());
    }
    let name = entry.file_name();
    let Some(name) = name.to_str() else { return Ok(()) };
    if !kind.is_file() || !options.iter().any(|options| options.names(name)) {
        return Ok(());
    }
    let meta = entry.metadata().map_err(|error| (path.clone(), error))?;
    if meta.modified().map_err(|error| (path.clone(), error))? >= before {
        return Ok(());
    }
    match fs::remove_file(&path) {
        Ok(()) => {
            removed.files += 1;
            removed.bytes += meta.len();
            Ok(())
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err((path, error)),
    }
}

fn skipped(path: &Path, error: &io::Error) {
    tracing::warn!(%error, path = %path.display(), "could not look at or remove a leftover temp file; skipped");
}

/// Writes `bytes` to `path` whole or not at all, replacing any file there (steps 1–4 of the
/// module documentation). The directory must exist.
pub(crate) fn write(path: &Path, bytes: &[u8], options: &TempOptions) -> io::Result<()> {
    let temp = TempFile::create(parent_of(path), options)?;
    io::Write::write_all(&mut temp.file(), bytes)?;
    temp.persist(path)
}

/// Moves the complete file `from` to `to` durably, replacing any file there: `from` is fsynced,
/// renamed, and `to`'s directory fsynced. Across filesystems (where a rename cannot go) the bytes
/// are copied with [`write()`]'s steps into a temp file beside `to`, and `from` is removed only once
/// the copy is in place. On an error before the move, `from` is left where it was.
pub(crate) fn move_into_place(from: &Path, to: &Path, options: &TempOptions) -> io::Result<()> {
    File::open(from)?.sync_all()?;
    match fs::rename(from, to) {
        Ok(()) => sync_dir(parent_of(to)),
        Err(error) if error.kind() == io::ErrorKind::CrossesDevices => {
            let temp = TempFile::create(parent_of(to), options)?;
            io::copy(&mut File::open(from)?, &mut temp.file())?;
            temp.persist(to)?;
            fs::remove_file(from)
        }
        Err(error) => Err(error),
    }
}

/// Creates an empty file at `path`, failing with [`io::ErrorKind::AlreadyExists`] when anything
/// is there (a symlink included), and makes it durable: the file and its directory are fsynced.
pub(crate) fn create_empty(path: &Path) -> io::Result<()> {
    File::create_new(path)?.sync_all()?;
    sync_dir(parent_of(path))
}

/// A temp file beside its target, for writers that fill it themselves (a stream, a blocking
/// copy): steps 1 and 2–4 of the module documentation are [`TempFile::create`] and
/// [`TempFile::persist`]. Removed when dropped without being persisted; inside a Tokio runtime
/// the removal runs on the blocking pool, so an async writer that gives up never touches the
/// disk on an executor thread.
#[derive(Debug)]
pub(crate) struct TempFile {
    file: File,
    path: PathBuf,
    cleanup: Cleanup,
}

impl TempFile {
    /// Creates an empty temp file in `dir` (blocking), open for reading and writing.
    pub(crate) fn create(dir: &Path, options: &TempOptions) -> io::Result<Self> {
        let (file, temp_path) = tempfile::Builder::new()
            .prefix(options.prefix)
            .suffix(options.suffix)
            .permissions(permissions(options.owner_only))
            .tempfile_in(dir)?
            .into_parts();
        let path = temp_path.to_path_buf();
        Ok(Self { file, path, cleanup: Cleanup(Some(temp_path)) })
    }

    /// The open file, to write the content through (`&File` implements `Write`) or to clone for
    /// an async writer.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Fsyncs the file, renames it over `target` and fsyncs `target`'s directory (blocking). On
    /// an error before the rename, the target is untouched and the temp file removed.
    pub(crate) fn persist(self, target: &Path) -> io::Result<()> {
        let Self { file, path, cleanup } = self;
        file.sync_all()?;
        drop(file);
        fs::rename(&path, target)?;
        cleanup.disarm();
        sync_dir(parent_of(target))
    }
}

/// Removes an unpersisted temp file when dropped (see [`TempFile`]).
#[derive(Debug)]
struct Cleanup(Option<TempPath>);

impl Cleanup {
    /// The file was renamed away: nothing is left to remove.
    fn disarm(mut self) {
        if let Some(mut path) = self.0.take() {
            path.disable_cleanup(true);
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // Dropping a `TempPath` removes its file.
        let Some(path) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(path))),
            Err(_) => drop(path),
        }
    }
}

/// Fsyncs a directory, so the renames and creations in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

fn permissions(owner_only: bool) -> fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    // What `OpenOptions` asks for by default (the umask still applies), or owner-only.
    fs::Permissions::from_mode(if owner_only { 0o600 } else { 0o666 })
}

#[cfg(test)]
mod tests;
