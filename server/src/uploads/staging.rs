//! Staging files: `<dataDir>/uploads/<id>.part`, appended in place and fsynced per chunk.
//!
//! Every operation on an upload first takes an exclusive lock on its staging file (a `flock`,
//! held while the returned `File` lives) and only then reads the upload's row, so appends,
//! commits, aborts and the sweeper never interleave on one upload.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::durable;

/// Where staging files live.
pub(super) fn dir(config: &Config) -> PathBuf {
    config.data_dir.join("uploads")
}

/// The staging path stored in the row (relative to the data directory).
pub(super) fn relative_path(id: &str) -> String {
    format!("uploads/{id}.part")
}

/// An upload's staging file.
pub(super) fn part_path(config: &Config, id: &str) -> PathBuf {
    dir(config).join(format!("{id}.part"))
}

/// Creates the empty staging file durably (the file and its directory entry are fsynced).
pub(super) fn create(path: &Path) -> io::Result<()> {
    let parent = path.parent().ok_or_else(|| io::Error::other("staging path has no parent"))?;
    fs::create_dir_all(parent)?;
    durable::create_empty(path)
}

/// Opens and locks the staging file (waiting for another holder); `None` when it is gone.
pub(super) async fn open_locked(path: PathBuf) -> io::Result<Option<File>> {
    tokio::task::spawn_blocking(move || match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(file) => {
            file.lock()?;
            Ok(Some(file))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    })
    .await
    .map_err(io::Error::other)?
}

/// Opens and locks the staging file unless another holder has it; `None` when gone or busy.
pub(super) fn try_open_locked(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(error)) => Err(error),
        },
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Writes `chunk` at `received` and makes it durable. Bytes past `received` (a chunk written
/// before a crash but never recorded) are cut off first.
pub(super) fn append(file: &File, received: u64, chunk: &[u8]) -> io::Result<()> {
    let length = file.metadata()?.len();
    if length < received {
        return Err(io::Error::other(format!("staging file has {length} bytes but {received} were recorded")));
    }
    if length > received {
        file.set_len(received)?;
    }
    file.write_all_at(chunk, received)?;
    file.sync_data()
}

/// Cuts the staging file back to `size` bytes (the recorded total) and makes that durable.
pub(super) fn trim(file: &File, size: u64) -> io::Result<()> {
    let length = file.metadata()?.len();
    if length < size {
        return Err(io::Error::other(format!("staging file has {length} bytes but {size} were recorded")));
    }
    if length > size {
        file.set_len(size)?;
        file.sync_data()?;
    }
    Ok(())
}

/// Removes a staging file; a missing one is fine.
pub(super) fn remove(path: &Path) {
    if let Err(error) = fs::remove_file(path)
        && error.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(%error, path = %path.display(), "could not remove a staging file");
    }
}
