//! `UploadAgentMemoryFileToIpfs`: a memory file (or a session attachment, [`publish_file`]) as
//! UnixFS blocks (docs/hypermedia.md §3), published to the Hypermedia server through `PublishBlobs`.
//!
//! The file is never held whole: it is read on the blocking pool in [`CHUNK_BYTES`] leaves, a
//! batch of at most [`MAX_BATCH_BYTES`] at a time, hashed into a streaming [`Builder`] there, and
//! each batch is published before the next is read. Children go out before their parents and
//! the root last. A failed publish is a 502 carrying the Hypermedia client's message.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use super::download::blocking;
use super::path::MemoryPath;
use super::store;
use crate::error::{ApiError, ApiResult};
use crate::hm::unixfs::{Builder, CHUNK_BYTES};
use crate::hm::{Blob, HmClient};

/// Most bytes of block data in one `PublishBlobs` request.
pub(crate) const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Room kept in a batch for the interior nodes a leaf may complete (each under 8 KiB, one per
/// level).
const NODE_ROOM: usize = 64 * 1024;

/// What was published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// The root CID string.
    pub cid: String,
    /// Bytes of file content published.
    pub size: i64,
}

/// The reading side, moved to the blocking pool and back for each batch.
struct Reader {
    file: File,
    builder: Builder,
    size: u64,
    done: bool,
}

/// Publishes the memory file at `path` under `root`: missing or a symlink is 404 `Memory file not
/// found: <path>`, a directory 400 `Memory path is a directory, not a file: <path>`.
pub(crate) async fn publish(client: &HmClient<'_>, root: PathBuf, path: MemoryPath) -> ApiResult<Published> {
    let file = blocking(move || store::open_file(&root, &path).map(|(file, _)| file)).await?;
    publish_file(client, file).await
}

/// Publishes the content of `file` from where it stands (a memory file, an attachment), batch by
/// batch as [`publish`] does.
pub(crate) async fn publish_file(client: &HmClient<'_>, file: File) -> ApiResult<Published> {
    stream(Some(client), file).await
}

/// What [`publish`] would answer for the memory file at `path`, computed the same way (streamed)
/// without sending anything: for dry runs.
pub(crate) async fn root_of(root: PathBuf, path: MemoryPath) -> ApiResult<Published> {
    let file = blocking(move || store::open_file(&root, &path).map(|(file, _)| file)).await?;
    stream(None, file).await
}

/// Reads `file` into UnixFS blocks batch by batch, sending each batch to `client` when there is
/// one.
async fn stream(client: Option<&HmClient<'_>>, file: File) -> ApiResult<Published> {
    let mut reader = Reader { file, builder: Builder::default(), size: 0, done: false };
    loop {
        let (next, blobs) = blocking(move || read_batch(reader)).await?;
        reader = next;
        if reader.done {
            let Reader { builder, size, .. } = reader;
            let (cid, rest) = builder.finish();
            if let Some(client) = client {
                send(client, blobs, rest).await?;
            }
            return Ok(Published { cid, size: i64::try_from(size).unwrap_or(i64::MAX) });
        }
        if let Some(client) = client {
            send(client, blobs, Vec::new()).await?;
        }
    }
}

/// Reads and hashes leaves until the batch is full or the file ends.
fn read_batch(mut reader: Reader) -> ApiResult<(Reader, Vec<Blob>)> {
    let mut blobs = Vec::new();
    let mut bytes = 0;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    while bytes + CHUNK_BYTES + NODE_ROOM <= MAX_BATCH_BYTES {
        let len = fill(&mut reader.file, &mut chunk).map_err(ApiError::internal)?;
        // An empty file still has its (empty) leaf, which `finish` adds.
        if len > 0 {
            reader.size += len as u64;
            let new = reader.builder.push(&chunk[..len]);
            bytes += new.iter().map(|blob| blob.data.len()).sum::<usize>();
            blobs.extend(new);
        }
        if len < CHUNK_BYTES {
            reader.done = true;
            break;
        }
    }
    Ok((reader, blobs))
}

/// Reads until `buffer` is full or the file ends; the number of bytes read.
fn fill(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Publishes `blobs` then `tail`, in requests of at most [`MAX_BATCH_BYTES`] of block data.
async fn send(client: &HmClient<'_>, blobs: Vec<Blob>, tail: Vec<Blob>) -> ApiResult<()> {
    let mut batch: Vec<Blob> = Vec::new();
    let mut bytes = 0;
    for blob in blobs.into_iter().chain(tail) {
        if !batch.is_empty() && bytes + blob.data.len() > MAX_BATCH_BYTES {
            flush(client, &mut batch).await?;
            bytes = 0;
        }
        // A block repeated in the same request is sent once.
        if !batch.iter().any(|kept| kept.cid == blob.cid) {
            bytes += blob.data.len();
            batch.push(blob);
        }
    }
    flush(client, &mut batch).await
}

async fn flush(client: &HmClient<'_>, batch: &mut Vec<Blob>) -> ApiResult<()> {
    if batch.is_empty() {
        return Ok(());
    }
    client.publish_blobs(batch).await.map_err(|error| ApiError::upstream(error.to_string()))?;
    batch.clear();
    Ok(())
}
