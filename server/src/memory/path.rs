//! Memory paths: the normalisation rules of the protocol and a resolver that refuses symlinks.
//!
//! A path is relative (`/` or `\` separated; a leading slash is refused, not stripped), empty and
//! `.` segments are dropped, `..` is refused, at most [`MAX_DEPTH`] segments and [`MAX_BYTES`]
//! bytes once normalised. Resolving walks the components from the memory root with
//! `symlink_metadata`, so no symlink is ever followed.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{ApiError, ApiResult};

/// Name of the memory directory inside an agent's state directory.
pub(crate) const MEMORY_DIR: &str = "memory";
/// Largest normalised path, in UTF-8 bytes.
pub const MAX_BYTES: usize = 512;
/// Deepest nesting, in segments.
pub const MAX_DEPTH: usize = 16;

/// A normalised relative memory path: `/`-separated, no empty, `.` or `..` segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPath {
    rel: String,
}

impl MemoryPath {
    /// Validates and normalises a client's path, with upstream's messages (all 400).
    pub fn parse(raw: &str) -> ApiResult<Self> {
        if raw.contains('\0') {
            return Err(ApiError::invalid("Memory path contains an invalid character"));
        }
        let slashed = raw.replace('\\', "/");
        if slashed.starts_with('/') {
            return Err(ApiError::invalid("Memory path must be relative"));
        }
        let segments: Vec<&str> = slashed.split('/').filter(|segment| !segment.is_empty() && *segment != ".").collect();
        if segments.is_empty() {
            return Err(ApiError::invalid("Memory path is required"));
        }
        if segments.len() > MAX_DEPTH {
            return Err(ApiError::invalid("Memory path is nested too deeply"));
        }
        if segments.contains(&"..") {
            return Err(ApiError::invalid("Memory path cannot contain \"..\""));
        }
        let rel = segments.join("/");
        if rel.len() > MAX_BYTES {
            return Err(ApiError::invalid("Memory path is too long"));
        }
        Ok(Self { rel })
    }

    /// The normalised path, as responses show it.
    pub fn as_str(&self) -> &str {
        &self.rel
    }

    /// The segments, root first.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.rel.split('/')
    }

    /// The last segment.
    pub fn file_name(&self) -> &str {
        self.rel.rsplit('/').next().unwrap_or(&self.rel)
    }

    /// The path under `root`.
    pub fn under(&self, root: &Path) -> PathBuf {
        self.segments().fold(root.to_path_buf(), |path, segment| path.join(segment))
    }
}

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

    fn ok(raw: &str) -> String {
        MemoryPath::parse(raw).unwrap().as_str().to_owned()
    }

    fn err(raw: &str) -> String {
        MemoryPath::parse(raw).unwrap_err().message().to_owned()
    }

    #[test]
    fn normalises_separators_and_dot_segments() {
        assert_eq!(ok("notes/a.md"), "notes/a.md");
        assert_eq!(ok("notes\\sub\\a.md"), "notes/sub/a.md");
        assert_eq!(ok("./notes//./a.md/"), "notes/a.md");
        assert_eq!(ok("a..b/..c"), "a..b/..c", "dots inside a name are fine");
        assert_eq!(MemoryPath::parse("x/y/z").unwrap().file_name(), "z");
    }

    #[test]
    fn refuses_escapes_and_absolute_paths() {
        assert_eq!(err("../x"), "Memory path cannot contain \"..\"");
        assert_eq!(err("a/../../b"), "Memory path cannot contain \"..\"");
        assert_eq!(err("a\\..\\b"), "Memory path cannot contain \"..\"");
        assert_eq!(err("/etc/passwd"), "Memory path must be relative");
        assert_eq!(err("\\etc\\passwd"), "Memory path must be relative");
        assert_eq!(err("a\0b"), "Memory path contains an invalid character");
        assert_eq!(err(""), "Memory path is required");
        assert_eq!(err("./."), "Memory path is required");
    }

    #[test]
    fn enforces_depth_and_length() {
        let deep = vec!["d"; MAX_DEPTH].join("/");
        assert_eq!(ok(&deep), deep);
        assert_eq!(err(&format!("{deep}/x")), "Memory path is nested too deeply");
        let long = "a".repeat(MAX_BYTES);
        assert_eq!(ok(&long), long);
        assert_eq!(err(&format!("{long}b")), "Memory path is too long");
        // Bytes, not characters: 171 three-byte characters are 513 bytes.
        assert_eq!(err(&"€".repeat(171)), "Memory path is too long");
        // Dropped segments do not count.
        assert_eq!(ok(&format!("{}{deep}", "./".repeat(40))), deep);
    }

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
