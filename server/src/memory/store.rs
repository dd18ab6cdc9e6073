//! The memory filesystem itself: blocking operations on `<stateDir>/memory`, run off the async
//! threads by the handlers. Nothing here follows a symlink; writes go through
//! [`crate::durable`] (a temp file in the target's directory, fsync, rename, directory fsync), so
//! a crash never leaves half a file.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    AgentMemoryEntry, AgentMemoryEntryType, AgentMemoryFile, AgentMemoryFileEncoding,
};

use super::mime;
use super::path::{self, Found, MemoryPath};
use crate::durable::{self, TempFile, TempOptions};
use crate::error::{ApiError, ApiResult};

/// Temp files beside their targets: `.seed-memory-<random>.tmp`, which listings hide.
pub(crate) const TEMP: TempOptions = TempOptions { prefix: ".seed-memory-", suffix: ".tmp", owner_only: false };

/// Every file and directory, sorted by path, and the total size of the files.
pub(crate) fn list_all(root: &Path) -> ApiResult<(Vec<AgentMemoryEntry>, i64)> {
    let mut entries = Vec::new();
    let mut total = 0i64;
    if !path::lstat(root).map_err(ApiError::internal)?.is_some_and(|meta| meta.file_type().is_dir()) {
        return Ok((entries, total));
    }
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = pending.pop() {
        for (name, meta) in children(&dir)? {
            let child_rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if meta.file_type().is_dir() {
                entries.push(dir_entry(child_rel.clone(), &meta, None));
                pending.push((dir.join(&name), child_rel));
            } else {
                total += size_of(&meta);
                entries.push(file_entry(child_rel, &meta));
            }
        }
    }
    sort(&mut entries);
    Ok((entries, total))
}

/// One directory level (`None`: the root): its normalised path, entries and files' total size.
pub(crate) fn list_dir(root: &Path, path: Option<&MemoryPath>) -> ApiResult<(String, Vec<AgentMemoryEntry>, i64)> {
    let (rel, dir) = match path {
        None => (String::new(), root.to_path_buf()),
        Some(path) => {
            let rel = path.as_str().to_owned();
            match path::inspect(root, path).map_err(ApiError::internal)? {
                Found::Dir => (rel, path.under(root)),
                Found::File(_) => {
                    return Err(ApiError::invalid(format!(
                        "Memory path is a file, not a directory: {rel}. Use memory_read for files."
                    )));
                }
                Found::Missing | Found::BlockedParent | Found::Link => {
                    return Err(ApiError::not_found(format!("Memory directory not found: {rel}")));
                }
            }
        }
    };
    let mut entries = Vec::new();
    let mut total = 0i64;
    if path.is_some() || path::lstat(&dir).map_err(ApiError::internal)?.is_some_and(|meta| meta.file_type().is_dir()) {
        for (name, meta) in children(&dir)? {
            let child_rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if meta.file_type().is_dir() {
                let count = std::fs::read_dir(dir.join(&name)).map(Iterator::count).unwrap_or(0);
                entries.push(dir_entry(child_rel, &meta, Some(count as i64)));
            } else {
                total += size_of(&meta);
                entries.push(file_entry(child_rel, &meta));
            }
        }
    }
    sort(&mut entries);
    Ok((rel, entries, total))
}

/// Reads one file: clean UTF-8 (no NUL byte) as text, anything else as bytes.
pub(crate) fn read(root: &Path, path: &MemoryPath) -> ApiResult<AgentMemoryFile> {
    let rel = path.as_str();
    let (mut file, opened) = open_file(root, path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    io::Read::read_to_end(&mut file, &mut bytes).map_err(ApiError::internal)?;
    let mime_type = mime::infer(rel);
    let (encoding, content, data) = match decode_text(&bytes) {
        Some(text) => (AgentMemoryFileEncoding::Utf8, Some(text.to_owned()), None),
        None => (AgentMemoryFileEncoding::Binary, None, Some(Bytes(bytes))),
    };
    Ok(AgentMemoryFile {
        extra: Default::default(),
        content,
        data,
        encoding,
        mime_type,
        path: rel.to_owned(),
        size: size_of(&opened),
        updated_at: mtime_ms(&opened),
    })
}

/// Opens a regular file for reading with upstream's messages: 404 `Memory file not found` when
/// missing or a symlink (or under one), 400 when a directory. The open file is checked to be the
/// one inspected, so a swap in between cannot smuggle a symlink in.
pub(crate) fn open_file(root: &Path, path: &MemoryPath) -> ApiResult<(std::fs::File, std::fs::Metadata)> {
    let rel = path.as_str();
    let meta = match path::inspect(root, path).map_err(ApiError::internal)? {
        Found::File(meta) => meta,
        Found::Dir => return Err(ApiError::invalid(format!("Memory path is a directory, not a file: {rel}"))),
        Found::Missing | Found::BlockedParent | Found::Link => {
            return Err(ApiError::not_found(format!("Memory file not found: {rel}")));
        }
    };
    let file = std::fs::File::open(path.under(root)).map_err(ApiError::internal)?;
    let opened = file.metadata().map_err(ApiError::internal)?;
    if !same_file(&meta, &opened) {
        // Swapped for something else (a symlink?) between the check and the open.
        return Err(ApiError::not_found(format!("Memory file not found: {rel}")));
    }
    Ok((file, opened))
}

/// Text iff no NUL byte and strict UTF-8; a leading byte-order mark is dropped (as the
/// TextDecoder upstream uses does).
pub(crate) fn decode_text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    Some(text.strip_prefix('\u{FEFF}').unwrap_or(text))
}

/// Writes a whole file (creating parents): temp file, fsync, rename.
pub(crate) fn write(root: &Path, path: &MemoryPath, content: &[u8]) -> ApiResult<AgentMemoryEntry> {
    let dir = prepare_target(root, path)?;
    let temp = TempFile::create(&dir, &TEMP).map_err(ApiError::internal)?;
    temp.file().write_all(content).map_err(ApiError::internal)?;
    commit(root, path, temp)
}

/// Checks that `path` may be written (not a symlink, not a directory, no symlink above it) and
/// creates its parents; returns the directory the file goes in.
pub(crate) fn prepare_target(root: &Path, path: &MemoryPath) -> ApiResult<PathBuf> {
    check_target(root, path)?;
    if !path::create_parents(root, path).map_err(write_error)? {
        return Err(not_writable(path));
    }
    let file = path.under(root);
    Ok(file.parent().map_or_else(|| root.to_path_buf(), Path::to_path_buf))
}

/// Refuses a path no write may take (creates nothing): a name of the server's temp files (hidden
/// from listings, removed at startup as a crash's leftovers), a directory, a symlink, or a
/// symlink or file above it.
pub(crate) fn check_target(root: &Path, path: &MemoryPath) -> ApiResult<()> {
    if is_temp_name(path.file_name()) {
        return Err(ApiError::invalid(format!(
            "Memory path is reserved for the server's temp files: {}",
            path.as_str()
        )));
    }
    match path::inspect(root, path).map_err(ApiError::internal)? {
        Found::Missing | Found::File(_) => Ok(()),
        Found::Dir => Err(ApiError::invalid(format!("Memory path is a directory, not a file: {}", path.as_str()))),
        Found::Link | Found::BlockedParent => Err(not_writable(path)),
    }
}

/// A segment longer than the filesystem's name limit (255 bytes on most) is the client's error.
fn write_error(error: io::Error) -> ApiError {
    match error.kind() {
        io::ErrorKind::InvalidFilename => ApiError::invalid("Memory path is too long"),
        _ => ApiError::internal(error),
    }
}

fn not_writable(path: &MemoryPath) -> ApiError {
    ApiError::invalid(format!("Memory path is not writable: {}", path.as_str()))
}

/// Persists `temp` (written by the caller) at `path`, re-checked first: fsync, rename, directory
/// fsync. The bytes are flushed before the re-check, so only a rename separates check and write
/// (the persist's own fsync then finds nothing left to flush).
pub(crate) fn commit(root: &Path, path: &MemoryPath, temp: TempFile) -> ApiResult<AgentMemoryEntry> {
    temp.file().sync_all().map_err(ApiError::internal)?;
    check_target(root, path)?;
    let target = path.under(root);
    temp.persist(&target).map_err(write_error)?;
    entry_at(path, &target)
}

/// Moves the complete file `staged` to `path`, re-checked first (see
/// [`durable::move_into_place`]); `staged` stays where it was when the move fails.
pub(crate) fn commit_staged(root: &Path, path: &MemoryPath, staged: &Path) -> ApiResult<AgentMemoryEntry> {
    check_target(root, path)?;
    let target = path.under(root);
    durable::move_into_place(staged, &target, &TEMP).map_err(write_error)?;
    entry_at(path, &target)
}

fn entry_at(path: &MemoryPath, target: &Path) -> ApiResult<AgentMemoryEntry> {
    let meta = std::fs::symlink_metadata(target).map_err(ApiError::internal)?;
    Ok(file_entry(path.as_str().to_owned(), &meta))
}

/// Removes a file or a directory recursively (a symlink is removed itself, never followed);
/// `false` when nothing was there.
pub(crate) fn delete(root: &Path, path: &MemoryPath) -> ApiResult<bool> {
    let target = path.under(root);
    let removed = match path::inspect(root, path).map_err(ApiError::internal)? {
        Found::Missing => return Ok(false),
        Found::BlockedParent => return Err(not_writable(path)),
        Found::Dir => std::fs::remove_dir_all(&target),
        Found::File(_) | Found::Link => std::fs::remove_file(&target),
    };
    match removed {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(ApiError::internal(error)),
    }
}

/// Whether a directory entry is one of our temp files (a write in flight, or left by a crash).
fn is_temp_name(name: &str) -> bool {
    name.starts_with(TEMP.prefix) && name.ends_with(TEMP.suffix)
}

/// The readable children of a directory: no symlinks, no temp files, no names that are not UTF-8.
fn children(dir: &Path) -> ApiResult<Vec<(String, std::fs::Metadata)>> {
    let reader = match std::fs::read_dir(dir) {
        Ok(reader) => reader,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(ApiError::internal(error)),
    };
    let mut out = Vec::new();
    for entry in reader {
        let entry = entry.map_err(ApiError::internal)?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        if is_temp_name(&name) {
            continue;
        }
        // `DirEntry::metadata` does not traverse symlinks.
        let Ok(meta) = entry.metadata() else { continue };
        if meta.file_type().is_dir() || meta.file_type().is_file() {
            out.push((name, meta));
        }
    }
    Ok(out)
}

/// Sorted as JavaScript compares strings (UTF-16 code units), as upstream sorts.
fn sort(entries: &mut [AgentMemoryEntry]) {
    entries.sort_by(|a, b| a.path.encode_utf16().cmp(b.path.encode_utf16()));
}

fn file_entry(rel: String, meta: &std::fs::Metadata) -> AgentMemoryEntry {
    AgentMemoryEntry {
        extra: Default::default(),
        entry_count: None,
        mime_type: mime::infer(&rel),
        path: rel,
        size: size_of(meta),
        type_: AgentMemoryEntryType::File,
        updated_at: mtime_ms(meta),
    }
}

fn dir_entry(rel: String, meta: &std::fs::Metadata, entry_count: Option<i64>) -> AgentMemoryEntry {
    AgentMemoryEntry {
        extra: Default::default(),
        entry_count,
        mime_type: None,
        path: rel,
        size: 0,
        type_: AgentMemoryEntryType::Dir,
        updated_at: mtime_ms(meta),
    }
}

fn size_of(meta: &std::fs::Metadata) -> i64 {
    i64::try_from(meta.len()).unwrap_or(i64::MAX)
}

/// Modification time in milliseconds, rounded (upstream's `Math.round(mtimeMs)`).
fn mtime_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| i64::try_from((since.as_nanos() + 500_000) / 1_000_000).unwrap_or(i64::MAX))
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    b.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_rule_matches_upstream() {
        assert_eq!(decode_text(b"hello"), Some("hello"));
        assert_eq!(decode_text("\u{FEFF}hi".as_bytes()), Some("hi"));
        assert_eq!(decode_text(b"a\0b"), None);
        assert_eq!(decode_text(&[0xff, 0xfe]), None);
        assert_eq!(decode_text(b""), Some(""));
    }

    #[test]
    fn temp_file_names_are_not_writable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("memory");
        for name in ["notes/.seed-memory-abc123.tmp", ".seed-memory-notes.tmp"] {
            let path = MemoryPath::parse(name).unwrap();
            let error = write(&root, &path, b"x").unwrap_err();
            assert_eq!(error.message(), format!("Memory path is reserved for the server's temp files: {name}"));
            assert!(!path.under(&root).exists());
        }
        // A folder of that name is only a folder.
        write(&root, &MemoryPath::parse(".seed-memory-abc123.tmp/a.md").unwrap(), b"x").unwrap();
    }

    #[test]
    fn writes_replace_atomically_and_leave_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("memory");
        let path = MemoryPath::parse("a/b/c.txt").unwrap();
        write(&root, &path, b"one").unwrap();
        let entry = write(&root, &path, b"second").unwrap();
        assert_eq!((entry.size, entry.mime_type.as_deref()), (6, Some("text/plain")));
        assert_eq!(std::fs::read(root.join("a/b/c.txt")).unwrap(), b"second");
        assert_eq!(std::fs::read_dir(root.join("a/b")).unwrap().count(), 1);
        // A write in flight (or a temp file a crash left) is hidden from listings.
        let in_flight = TempFile::create(&root.join("a/b"), &TEMP).unwrap();
        let (entries, total) = list_all(&root).unwrap();
        let paths: Vec<_> = entries.iter().map(|entry| entry.path.as_str()).collect();
        assert_eq!((paths, total), (vec!["a", "a/b", "a/b/c.txt"], 6));
        assert_eq!(list_dir(&root, Some(&MemoryPath::parse("a/b").unwrap())).unwrap().1.len(), 1);
        drop(in_flight);
    }
}
