//! Memory paths: the normalisation rules of the protocol.
//!
//! A path is relative (`/` or `\` separated; a leading slash is refused, not stripped), empty and
//! `.` segments are dropped, `..` is refused, at most [`MAX_DEPTH`] segments and [`MAX_BYTES`]
//! bytes once normalised. Resolving one on disk without following symlinks is the server's
//! (`memory::path`).

use std::path::{Path, PathBuf};

use crate::error::{ApiError, ApiResult};

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
}
