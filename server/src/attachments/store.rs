//! The attachment files themselves: blocking, crash-safe writes and reads of one session's
//! directory. Callers run these on a blocking thread. Each `<id>.bin` and its `<id>.json` sidecar
//! is written or moved into place with [`crate::durable`]; the sidecar comes last, so a record
//! never names bytes that are not there.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use seed_agents_protocol::generated::SessionAttachmentInfo;
use sha2::{Digest, Sha256};

use super::{MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS_PER_SESSION, mime_type_for};
use crate::durable::{self, TempOptions};
use crate::error::{ApiError, ApiResult};

/// Temp files of the bytes and of the sidecar: hidden, and not ending in `.json`, so
/// [`SessionFiles::check_room`] does not count them.
const BIN_TEMP: TempOptions = TempOptions { prefix: ".", suffix: ".bin.tmp", owner_only: false };
const JSON_TEMP: TempOptions = TempOptions { prefix: ".", suffix: ".json.tmp", owner_only: false };
/// Both, for the startup removal of what a crash left (`crate::leftovers`).
pub(crate) const TEMPS: [TempOptions; 2] = [BIN_TEMP, JSON_TEMP];

/// The MIME type of a file name's extension (the memory module's table, as upstream shares it).
pub(crate) fn infer_mime_type(name: &str) -> Option<String> {
    crate::memory::mime::infer(name)
}

/// Stores `content` as an attachment of `session_id` in `dir` (or answers the existing record
/// for the same bytes). `name` is already normalised.
pub(crate) fn store_bytes(
    dir: &Path,
    session_id: &str,
    name: &str,
    given_mime: Option<&str>,
    content: &[u8],
    now_ms: i64,
) -> ApiResult<SessionAttachmentInfo> {
    check_size(content.len() as u64)?;
    let id = hex::encode(Sha256::digest(content));
    let session = SessionFiles::open(dir)?;
    if let Some(existing) = session.existing(&id) {
        return Ok(existing);
    }
    session.check_room()?;
    durable::write(&session.bin_path(&id), content, &BIN_TEMP).map_err(ApiError::internal)?;
    session.finish(&id, session_id, name, given_mime, content.len() as u64, now_ms)
}

/// Stores the complete staged file `staged` as an attachment (moving it: the staged file is gone
/// afterwards, also when the same bytes were already attached; it stays when the move fails).
/// The hash is computed by streaming, so memory stays flat whatever the size.
pub(crate) fn store_staged(
    dir: &Path,
    session_id: &str,
    name: &str,
    given_mime: Option<&str>,
    staged: &Path,
    now_ms: i64,
) -> ApiResult<SessionAttachmentInfo> {
    let size = fs::metadata(staged).map_err(ApiError::internal)?.len();
    check_size(size)?;
    let id = hash_file(staged).map_err(ApiError::internal)?;
    let session = SessionFiles::open(dir)?;
    if let Some(existing) = session.existing(&id) {
        remove_quietly(staged);
        return Ok(existing);
    }
    session.check_room()?;
    durable::move_into_place(staged, &session.bin_path(&id), &BIN_TEMP).map_err(ApiError::internal)?;
    session.finish(&id, session_id, name, given_mime, size, now_ms)
}

/// One attachment's record: 400 for a malformed id, 404 `Attachment not found: <id>` when missing.
pub(crate) fn info(dir: &Path, attachment_id: &str) -> ApiResult<SessionAttachmentInfo> {
    check_id(attachment_id)?;
    read_meta(&dir.join(format!("{attachment_id}.json")))
        .ok_or_else(|| ApiError::not_found(format!("Attachment not found: {attachment_id}")))
}

/// One attachment's record and bytes: 400 for a malformed id, 404 when missing.
pub(crate) fn read(dir: &Path, attachment_id: &str) -> ApiResult<(SessionAttachmentInfo, Vec<u8>)> {
    check_id(attachment_id)?;
    let info = read_meta(&dir.join(format!("{attachment_id}.json")))
        .ok_or_else(|| ApiError::not_found(format!("Attachment not found: {attachment_id}")))?;
    let data = fs::read(dir.join(format!("{attachment_id}.bin")))
        .map_err(|_| ApiError::not_found(format!("Attachment content missing: {attachment_id}")))?;
    Ok((info, data))
}

/// One attachment's record and its bytes as an open file, for a reader that streams them: 400
/// for a malformed id, 404 when missing.
pub(crate) fn open(dir: &Path, attachment_id: &str) -> ApiResult<(SessionAttachmentInfo, File)> {
    let info = info(dir, attachment_id)?;
    let file = File::open(dir.join(format!("{attachment_id}.bin")))
        .map_err(|_| ApiError::not_found(format!("Attachment content missing: {attachment_id}")))?;
    Ok((info, file))
}

fn check_size(size: u64) -> ApiResult<()> {
    if size == 0 {
        return Err(ApiError::invalid("Attachment content must be non-empty bytes"));
    }
    if size > MAX_ATTACHMENT_BYTES {
        return Err(ApiError::too_large(format!("Attachment exceeds the {} MiB limit", MAX_ATTACHMENT_BYTES >> 20)));
    }
    Ok(())
}

fn check_id(id: &str) -> ApiResult<()> {
    if id.len() == 64 && id.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!("Invalid attachment id: {id}")))
    }
}

/// A session's directory, locked for writing while this lives.
struct SessionFiles<'a> {
    dir: &'a Path,
    _lock: File,
}

impl<'a> SessionFiles<'a> {
    fn open(dir: &'a Path) -> ApiResult<Self> {
        fs::create_dir_all(dir).map_err(ApiError::internal)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))
            .map_err(ApiError::internal)?;
        lock.lock().map_err(ApiError::internal)?;
        Ok(Self { dir, _lock: lock })
    }

    fn existing(&self, id: &str) -> Option<SessionAttachmentInfo> {
        read_meta(&self.dir.join(format!("{id}.json"))).filter(|_| self.dir.join(format!("{id}.bin")).is_file())
    }

    fn check_room(&self) -> ApiResult<()> {
        let mut count = 0;
        for entry in fs::read_dir(self.dir).map_err(ApiError::internal)? {
            let entry = entry.map_err(ApiError::internal)?;
            count += usize::from(entry.file_name().to_string_lossy().ends_with(".json"));
        }
        if count >= MAX_ATTACHMENTS_PER_SESSION {
            return Err(ApiError::too_large(format!("Session already has {MAX_ATTACHMENTS_PER_SESSION} attachments")));
        }
        Ok(())
    }

    fn bin_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.bin"))
    }

    /// Writes the sidecar of the bytes already in place at `<id>.bin`.
    fn finish(
        &self,
        id: &str,
        session_id: &str,
        name: &str,
        given_mime: Option<&str>,
        size: u64,
        now_ms: i64,
    ) -> ApiResult<SessionAttachmentInfo> {
        let info = SessionAttachmentInfo {
            extra: Default::default(),
            created_at: now_ms,
            id: id.into(),
            mime_type: mime_type_for(name, given_mime),
            name: name.to_owned(),
            session_id: session_id.into(),
            size: size as i64,
        };
        let meta = serde_json::to_vec(&info).map_err(ApiError::internal)?;
        durable::write(&self.dir.join(format!("{id}.json")), &meta, &JSON_TEMP).map_err(ApiError::internal)?;
        Ok(info)
    }
}

fn read_meta(path: &Path) -> Option<SessionAttachmentInfo> {
    // A corrupt sidecar counts as missing, so the same bytes can be attached again.
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

fn remove_quietly(path: &Path) {
    if let Err(error) = fs::remove_file(path)
        && error.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(%error, path = %path.display(), "could not remove a temporary file");
    }
}

fn hash_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn identical_bytes_keep_the_first_record_and_the_cap_holds() {
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join("s");
        let first = store_bytes(&session, "s", "a.txt", None, b"hello", 1).unwrap();
        assert_eq!(first.id, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
        assert_eq!(first.mime_type.as_deref(), Some("text/plain"));
        let again = store_bytes(&session, "s", "b.png", Some("image/png"), b"hello", 2).unwrap();
        assert_eq!(again, first);
        let (info, data) = read(&session, &first.id).unwrap();
        assert_eq!((info, data.as_slice()), (first, &b"hello"[..]));
        for n in 1..MAX_ATTACHMENTS_PER_SESSION {
            store_bytes(&session, "s", "n", None, n.to_string().as_bytes(), 3).unwrap();
        }
        let error = store_bytes(&session, "s", "n", None, b"one too many", 4).unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::TooLarge, "Session already has 200 attachments"));
        assert!(store_bytes(&session, "s", "n", None, b"hello", 5).is_ok(), "a known id is still answered");
        let leftovers = fs::read_dir(&session).unwrap().filter_map(Result::ok);
        assert!(leftovers.into_iter().all(|entry| !entry.file_name().to_string_lossy().ends_with(".tmp")));
    }

    #[test]
    fn reads_check_the_id_and_report_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let error = read(dir.path(), "../x").unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::Invalid, "Invalid attachment id: ../x"));
        let id = "0".repeat(64);
        assert_eq!(read(dir.path(), &id).unwrap_err().message(), format!("Attachment not found: {id}"));
        let error = store_bytes(dir.path(), "s", "x", None, b"", 1).unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::Invalid, "Attachment content must be non-empty bytes"));
    }
}
