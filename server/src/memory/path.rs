//! Memory paths on disk: a resolver that refuses symlinks. The normalisation rules of a path are
//! [`MemoryPath`]'s, in the server's core crate.
//!
//! Resolving walks the components from the memory root with `symlink_metadata`, so no symlink is
//! ever followed.

use std::io;
use std::path::Path;

pub(crate) use seed_agents_server_core::memory_path::MemoryPath;

/// Name of the memory directory inside an agent's state directory.
pub(crate) const MEMORY_DIR: &str = "memory";

/// What a path names on disk, found without following symlinks.
#[derive(Debug)]
pub(crate) enum Found {
    /// Nothing there (or a parent is missing).
    Missing,
    /// The root or a parent directory is a symlink or not a directory.
    BlockedParent,
    /// The path itself is a symlink (or another non-file, non-directory).
    Link,
    /// A directory.
    Dir,
    /// A regular file.
    File(std::fs::Metadata),
}

/// Looks at `path` under `root` (blocking): every component, the root included, is checked with
/// `symlink_metadata`; a symlink anywhere is reported, never followed.
pub(crate) fn inspect(root: &Path, path: &MemoryPath) -> io::Result<Found> {
    match lstat(root)? {
        None => return Ok(Found::Missing),
        Some(meta) if !meta.file_type().is_dir() => return Ok(Found::BlockedParent),
        Some(_) => {}
    }
    let segments: Vec<&str> = path.segments().collect();
    let mut current = root.to_path_buf();
    for (index, segment) in segments.iter().enumerate() {
        current.push(segment);
        let Some(meta) = lstat(&current)? else { return Ok(Found::Missing) };
        let file_type = meta.file_type();
        let last = index + 1 == segments.len();
        if !last {
            if !file_type.is_dir() {
                return Ok(if file_type.is_file() { Found::Missing } else { Found::BlockedParent });
            }
            continue;
        }
        return Ok(if file_type.is_dir() {
            Found::Dir
        } else if file_type.is_file() {
            Found::File(meta)
        } else {
            Found::Link
        });
    }
    Ok(Found::Missing)
}

/// Creates the root and the parents of `path` (blocking), refusing any symlink or non-directory
/// on the way: `Ok(false)` when one is in the way.
pub(crate) fn create_parents(root: &Path, path: &MemoryPath) -> io::Result<bool> {
    let segments: Vec<&str> = path.segments().collect();
    let mut current = root.to_path_buf();
    let parents = segments.len().saturating_sub(1);
    for step in 0..=parents {
        if step > 0 {
            current.push(segments[step - 1]);
        }
        match lstat(&current)? {
            Some(meta) if meta.file_type().is_dir() => {}
            Some(_) => return Ok(false),
            None => match std::fs::create_dir(&current) {
                Ok(()) => {}
                // Someone else created it meanwhile: check what it is.
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                    if !lstat(&current)?.is_some_and(|meta| meta.file_type().is_dir()) {
                        return Ok(false);
                    }
                }
                Err(error) => return Err(error),
            },
        }
    }
    Ok(true)
}

/// `symlink_metadata`, with "not found" as `None`.
pub(crate) fn lstat(path: &Path) -> io::Result<Option<std::fs::Metadata>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        // A name longer than the filesystem allows cannot exist.
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory | io::ErrorKind::InvalidFilename
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn inspect_never_follows_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("memory");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        std::fs::write(root.join("real/file"), b"f").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("file-link")).unwrap();
        let path = |raw: &str| MemoryPath::parse(raw).unwrap();
        assert!(matches!(inspect(&root, &path("real/file")).unwrap(), Found::File(_)));
        assert!(matches!(inspect(&root, &path("real")).unwrap(), Found::Dir));
        assert!(matches!(inspect(&root, &path("nope/file")).unwrap(), Found::Missing));
        assert!(matches!(inspect(&root, &path("link/secret")).unwrap(), Found::BlockedParent));
        assert!(matches!(inspect(&root, &path("link")).unwrap(), Found::Link));
        assert!(matches!(inspect(&root, &path("file-link")).unwrap(), Found::Link));
        assert!(!create_parents(&root, &path("link/new/file")).unwrap());
        assert!(!outside.join("new").exists());
        assert!(create_parents(&root, &path("fresh/deeper/file")).unwrap());
        assert!(root.join("fresh/deeper").is_dir());
    }
}
