//! Memory-file targets of uploads, on top of `crate::memory`'s path rules: checked at begin
//! without touching the disk, and committed by moving the staged file into place.

use std::path::{Path, PathBuf};

use seed_agents_protocol::generated::AgentMemoryEntry;

use crate::error::ApiResult;
use crate::memory::path::{self, MemoryPath};
use crate::memory::store;

/// The memory root of an agent's state directory.
pub(crate) fn root(state_dir: &Path) -> PathBuf {
    state_dir.join(path::MEMORY_DIR)
}

/// Refuses, before any byte is sent, a path that could not be written at commit (the memory
/// module's [`store::check_target`]). Creates nothing.
pub(crate) fn check(root: &Path, path: &MemoryPath) -> ApiResult<()> {
    store::check_target(root, path)
}

/// Moves the complete staged file into the agent's memory at `path` with one rename onto it
/// (across filesystems, a copy through a temp file beside it); the memory module creates the
/// parents and re-checks the path first. A failed move leaves the staged file for a retry.
pub(crate) fn commit(root: &Path, path: &MemoryPath, staged: &Path) -> ApiResult<AgentMemoryEntry> {
    store::prepare_target(root, path)?;
    store::commit_staged(root, path, staged)
}
