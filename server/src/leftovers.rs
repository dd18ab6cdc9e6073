//! What interrupted writes left in the data directory: temp files of [`crate::durable`] writes
//! that were between creating their temp file and renaming it when the previous process died.
//! They are hidden from every listing, but they hold disk space (a memory file's temp is as large
//! as the file), so the server removes them once, on a blocking thread, when it starts:
//!
//! - the secret key's (`.secret.key.tmp-*`) in the data directory;
//! - memory writes' and downloads' (`.seed-memory-*.tmp`) anywhere under `agents/<id>/memory`;
//! - attachment writes' (`.*.bin.tmp`, `.*.json.tmp`) in each `session-attachments/<session>`.
//!
//! Only files older than the process are touched ([`durable::remove_leftovers`]): the data
//! directory's lock keeps any other server out, so those belong to no write in flight. Staged
//! uploads and deleted sessions' attachment directories are the upload sweep's
//! (`uploads::sweep`).

use std::path::Path;
use std::time::SystemTime;

use crate::config::Config;
use crate::durable::{self, Removed};

/// Every kind of temp file a durable write of the server can leave behind, wherever it is: the
/// key's, memory writes', attachments'. `doctor` reports files so named and `backup` skips them.
const TEMPS: [durable::TempOptions; 4] = [
    crate::secrets::crypto::KEY_TEMP,
    crate::memory::store::TEMP,
    crate::attachments::store::TEMPS[0],
    crate::attachments::store::TEMPS[1],
];

/// Whether a file named `name` is the temp file of an interrupted durable write (or of one in
/// flight, while a server runs).
pub(crate) fn is_temp(name: &str) -> bool {
    TEMPS.iter().any(|options| options.names(name))
}

/// Removes the leftovers (see the module docs) modified before `before`; logs what it removed
/// and any directory it could not read, and answers the totals.
pub(crate) fn remove(config: &Config, before: SystemTime) -> Removed {
    let mut total = Removed::default();
    let mut sweep = |dir: &Path, options: &[durable::TempOptions], recursive: bool| match durable::remove_leftovers(
        dir, options, before, recursive,
    ) {
        Ok(removed) => {
            total.files += removed.files;
            total.bytes += removed.bytes;
        }
        Err(error) => {
            tracing::warn!(%error, dir = %dir.display(), "could not remove temp files left by an earlier process");
        }
    };
    sweep(&config.data_dir, &[crate::secrets::crypto::KEY_TEMP], false);
    for agent in children(&config.agents_dir()) {
        sweep(&agent.join(crate::memory::path::MEMORY_DIR), &[crate::memory::store::TEMP], true);
    }
    for session in children(&crate::attachments::root(config)) {
        sweep(&session, &crate::attachments::store::TEMPS, false);
    }
    if total.files > 0 {
        tracing::info!(files = total.files, bytes = total.bytes, "removed temp files left by an earlier process");
    }
    total
}

/// The directories directly in `dir` (none when it cannot be read); symlinks are not followed.
fn children(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .collect()
}
