//! Chunked uploads: [`Client::upload`] sends a file of any size in signed chunks, with progress.
//!
//! The upload keeps [`WINDOW`] chunks in flight: while the server writes and fsyncs one chunk,
//! the next is already signed (on a blocking thread: Ed25519 hashes every chunk twice) and on its
//! way, and the server holds it until its predecessor is durable. Only chunks the server has
//! acknowledged count as progress, and every acknowledged byte is on the server's disk.
//!
//! Transient failures (no answer, a 5xx, an offset conflict) are retried from the server's
//! acknowledged offset, up to [`MAX_ATTEMPTS`] times without progress; unacknowledged chunks
//! are kept in memory for that, so the source is read once, front to back. When an upload fails
//! anyway, [`Error::Upload`] says how far it got: the server keeps the staged bytes for an hour,
//! and [`Client::resume_upload`] continues from there.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AppendFileUploadChunk, AppendFileUploadChunkResponse, BeginFileUpload, CommitFileUpload, CommitFileUploadResponse,
    FileUploadTarget,
};
use seed_agents_protocol::{Action, AgentResponse, UploadId};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use crate::error::{DecodeError, ErrorCode};
use crate::{Client, Error};

/// Chunks in flight at once. Two is what the server accepts out of order (one chunk may wait
/// for its predecessor); a third would be refused with 409 and retried.
pub const WINDOW: usize = 2;

/// Attempts per chunk before the upload gives up (counted only while no chunk is acknowledged).
pub const MAX_ATTEMPTS: u32 = 4;

/// The chunk size when the server does not suggest one (its limit: 8 MiB).
const DEFAULT_CHUNK: u64 = 8 * 1024 * 1024;

/// The largest chunk used whatever the server suggests (each is held in memory until
/// acknowledged).
const MAX_CHUNK: u64 = 64 * 1024 * 1024;

/// How far an upload has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes the server has acknowledged (durably written).
    pub received: u64,
    /// The upload's declared size.
    pub size: u64,
}

impl Client {
    /// Uploads `size` bytes read from `source` to `target` (agent memory or a session
    /// attachment) and commits them. `on_progress` hears every acknowledged chunk.
    ///
    /// ```no_run
    /// use seed_agents_protocol::generated::{FileUploadTarget, MemoryUploadTarget};
    /// # use seed_agents_protocol::AgentId;
    /// # async fn run(client: seed_agents_sdk::Client, agent_id: AgentId) -> Result<(), seed_agents_sdk::Error> {
    /// let file = tokio::fs::File::open("notes.pdf").await.expect("readable");
    /// let size = file.metadata().await.expect("a file").len();
    /// let target = FileUploadTarget::from(MemoryUploadTarget::new(agent_id, "docs/notes.pdf"));
    /// let done = client
    ///     .upload(target, size, file, |p| eprintln!("{} of {} bytes", p.received, p.size))
    ///     .await?;
    /// println!("{:?}", done.entry);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn upload<R>(
        &self,
        target: FileUploadTarget,
        size: u64,
        source: R,
        on_progress: impl FnMut(Progress),
    ) -> Result<CommitFileUploadResponse, Error>
    where
        R: AsyncRead + Unpin,
    {
        let size_field = i64::try_from(size).map_err(|_| Error::Source(std::io::Error::other("file too large")))?;
        let begun = self.call(BeginFileUpload::new(size_field, target)).await?;
        let chunk =
            u64::try_from(begun.max_chunk_bytes).ok().filter(|n| *n > 0).map_or(DEFAULT_CHUNK, |n| n.min(MAX_CHUNK));
        self.finish_upload(begun.upload_id, size, 0, chunk, source, on_progress).await
    }

    /// [`Client::upload`] of the file at `path`.
    pub async fn upload_file(
        &self,
        target: FileUploadTarget,
        path: impl AsRef<Path>,
        on_progress: impl FnMut(Progress),
    ) -> Result<CommitFileUploadResponse, Error> {
        let file = tokio::fs::File::open(path).await.map_err(Error::Source)?;
        let size = file.metadata().await.map_err(Error::Source)?.len();
        self.upload(target, size, file, on_progress).await
    }

    /// Continues an upload that stopped (see [`Error::Upload`]) at `received` bytes of `size`:
    /// `source` must yield the file from byte `received` on. If the server has more than
    /// `received`, the bytes it already has are skipped.
    pub async fn resume_upload<R>(
        &self,
        upload_id: impl Into<UploadId>,
        size: u64,
        received: u64,
        source: R,
        on_progress: impl FnMut(Progress),
    ) -> Result<CommitFileUploadResponse, Error>
    where
        R: AsyncRead + Unpin,
    {
        self.finish_upload(upload_id.into(), size, received, DEFAULT_CHUNK, source, on_progress).await
    }

    async fn finish_upload<R>(
        &self,
        upload_id: UploadId,
        size: u64,
        start: u64,
        chunk: u64,
        source: R,
        on_progress: impl FnMut(Progress),
    ) -> Result<CommitFileUploadResponse, Error>
    where
        R: AsyncRead + Unpin,
    {
        let (outcome, received) = {
            let mut sender = Sender {
                client: self,
                upload_id: &upload_id,
                size,
                chunk,
                source,
                read_to: start,
                acked: start,
                queue: VecDeque::new(),
                on_progress,
            };
            let outcome = sender.run().await;
            // Dropping the sender stops any request still in flight.
            (outcome, sender.acked)
        };
        if let Err(source) = outcome {
            return Err(Error::Upload { upload_id, received, source: Box::new(source) });
        }
        self.call(CommitFileUpload::new(&upload_id)).await.map_err(|source| Error::Upload {
            upload_id,
            received,
            source: Box::new(source),
        })
    }
}

/// One chunk read from the source and not yet acknowledged.
struct Chunk {
    offset: u64,
    data: Vec<u8>,
    /// The request carrying it, while one is in flight.
    request: Option<JoinHandle<Result<AppendFileUploadChunkResponse, Error>>>,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// The state of one upload's chunk loop.
struct Sender<'a, R, P> {
    client: &'a Client,
    upload_id: &'a str,
    size: u64,
    chunk: u64,
    source: R,
    /// The next offset to read from the source.
    read_to: u64,
    /// Bytes the server acknowledged.
    acked: u64,
    /// Unacknowledged chunks in offset order; the first ones are in flight.
    queue: VecDeque<Chunk>,
    on_progress: P,
}

impl<R: AsyncRead + Unpin, P: FnMut(Progress)> Sender<'_, R, P> {
    async fn run(&mut self) -> Result<(), Error> {
        let mut attempts = 0;
        loop {
            if let Err(error) = self.fill().await {
                // Whatever is in flight may still land; report how far the server got.
                self.settle().await;
                return Err(error);
            }
            let Some(front) = self.queue.front_mut() else {
                return Ok(());
            };
            let end = front.end();
            let outcome = match front.request.take() {
                Some(request) => joined(request.await),
                None => Err(Error::Source(std::io::Error::other("a chunk was not sent"))),
            };
            match outcome {
                Ok(answer) if acknowledges(&answer, end) => {
                    self.queue.pop_front();
                    self.acknowledge(end);
                    attempts = 0;
                }
                Ok(answer) => {
                    let error = Error::Decode {
                        status: 200,
                        bytes: bytes::Bytes::new(),
                        source: DecodeError::UnexpectedAcknowledgement { received: answer.received, expected: end },
                    };
                    return Err(error);
                }
                Err(error) if !retryable(&error) => return Err(error),
                Err(error) => {
                    attempts += 1;
                    if attempts >= MAX_ATTEMPTS {
                        return Err(error);
                    }
                    let known = self.drain(conflict_received(&error)).await;
                    if self.rewind(known).await? {
                        attempts = 0;
                    }
                    // A rate-limit refusal says how long to wait (bounded like every retry here).
                    let asked = error.retry_after().unwrap_or_default().min(crate::client::MAX_RETRY_AFTER);
                    tokio::time::sleep(Duration::from_millis(100 << attempts).max(asked)).await;
                }
            }
        }
    }

    /// Puts chunks in flight until [`WINDOW`] are, resending kept chunks before reading new ones.
    async fn fill(&mut self) -> Result<(), Error> {
        loop {
            let in_flight = self.queue.iter().filter(|chunk| chunk.request.is_some()).count();
            if in_flight >= WINDOW {
                return Ok(());
            }
            let index = match self.queue.iter().position(|chunk| chunk.request.is_none()) {
                Some(index) => index,
                None if self.read_to < self.size => {
                    let len = self.chunk.min(self.size - self.read_to);
                    let mut data = vec![0; len as usize];
                    self.source.read_exact(&mut data).await.map_err(Error::Source)?;
                    self.queue.push_back(Chunk { offset: self.read_to, data, request: None });
                    self.read_to += len;
                    self.queue.len() - 1
                }
                None => return Ok(()),
            };
            let chunk = &mut self.queue[index];
            let data = std::mem::take(&mut chunk.data);
            let (body, data) = sign_off_thread(self.client, self.upload_id, chunk.offset, data).await?;
            chunk.data = data;
            let client = self.client.clone();
            chunk.request = Some(tokio::spawn(async move { append_answer(client.post(body).await) }));
        }
    }

    /// Waits for the requests in flight, acknowledging them in order until one fails.
    async fn settle(&mut self) {
        while let Some(request) = self.queue.front_mut().and_then(|chunk| chunk.request.take()) {
            let end = self.queue.front().map_or(0, Chunk::end);
            match joined(request.await) {
                Ok(answer) if acknowledges(&answer, end) => {
                    self.queue.pop_front();
                    self.acknowledge(end);
                }
                _ => return,
            }
        }
    }

    /// Waits for every request still in flight; answers the highest offset the server is known
    /// to have (from acknowledgements and conflict messages).
    async fn drain(&mut self, mut known: Option<u64>) -> Option<u64> {
        for chunk in &mut self.queue {
            let Some(request) = chunk.request.take() else { continue };
            let reported = match joined(request.await) {
                Ok(answer) => u64::try_from(answer.received).ok(),
                Err(error) => conflict_received(&error),
            };
            known = known.max(reported);
        }
        known
    }

    /// Drops what the server has (`known`, or what was acknowledged) from the queue, so sending
    /// resumes there; skips source bytes the server has beyond what was read. Answers whether
    /// that was progress.
    async fn rewind(&mut self, known: Option<u64>) -> Result<bool, Error> {
        // A conflict reports the offset when that chunk was refused; a later acknowledgement
        // may have passed it, so an older figure is stale, not a loss.
        let server = known.map_or(self.acked, |known| known.max(self.acked));
        if server > self.size {
            return Err(Error::Source(std::io::Error::other(format!(
                "the server reports {server} bytes of a {}-byte upload",
                self.size
            ))));
        }
        while let Some(front) = self.queue.front_mut() {
            if front.end() <= server {
                self.queue.pop_front();
            } else {
                if front.offset < server {
                    front.data.drain(..(server - front.offset) as usize);
                    front.offset = server;
                }
                break;
            }
        }
        if server > self.read_to {
            let skip = server - self.read_to;
            let skipped = tokio::io::copy(&mut (&mut self.source).take(skip), &mut tokio::io::sink())
                .await
                .map_err(Error::Source)?;
            if skipped != skip {
                return Err(Error::Source(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.read_to = server;
        }
        let progressed = server > self.acked;
        if progressed {
            self.acknowledge(server);
        }
        Ok(progressed)
    }

    fn acknowledge(&mut self, received: u64) {
        self.acked = received;
        (self.on_progress)(Progress { received, size: self.size });
    }
}

impl<R, P> Drop for Sender<'_, R, P> {
    /// Stops requests still in flight: after a failure, and when an upload future is dropped
    /// midway (a timeout around it), no posts keep running.
    fn drop(&mut self) {
        for chunk in &mut self.queue {
            if let Some(request) = chunk.request.take() {
                request.abort();
            }
        }
    }
}

/// Signs one chunk on a blocking thread (hashing 8 MiB twice would stall the async workers).
/// The chunk moves into the action and comes back out after signing, so it is not copied.
/// The signer's future is driven there with `block_on`: a signer that itself waits for a
/// blocking task needs a runtime with more than one blocking thread.
async fn sign_off_thread(
    client: &Client,
    upload_id: &str,
    offset: u64,
    data: Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let map = chunk_action(upload_id, offset, data);
    let (client, runtime) = (client.clone(), tokio::runtime::Handle::current());
    let (body, mut map) = tokio::task::spawn_blocking(move || runtime.block_on(client.sign_map(map)))
        .await
        .map_err(|error| Error::Source(std::io::Error::other(error)))??;
    match map.remove("content") {
        Some(Ipld::Bytes(data)) => Ok((body, data)),
        _ => Err(Error::Source(std::io::Error::other("the signed chunk lost its content"))),
    }
}

/// `AppendFileUploadChunk` as the map the typed action serialises to (a test checks they agree).
fn chunk_action(upload_id: &str, offset: u64, data: Vec<u8>) -> BTreeMap<String, Ipld> {
    BTreeMap::from([
        ("_".to_owned(), Ipld::String(AppendFileUploadChunk::NAME.to_owned())),
        ("content".to_owned(), Ipld::Bytes(data)),
        ("offset".to_owned(), Ipld::Integer(offset.into())),
        ("uploadId".to_owned(), Ipld::String(upload_id.to_owned())),
    ])
}

fn append_answer(response: Result<AgentResponse, Error>) -> Result<AppendFileUploadChunkResponse, Error> {
    match response? {
        AgentResponse::AppendFileUploadChunkResponse(answer) => Ok(answer),
        other => Err(Error::Decode {
            status: 200,
            bytes: bytes::Bytes::new(),
            source: DecodeError::UnexpectedResponse { expected: "AppendFileUploadChunkResponse", got: other.name() },
        }),
    }
}

/// Whether an append's answer acknowledges exactly the bytes up to `end`.
fn acknowledges(answer: &AppendFileUploadChunkResponse, end: u64) -> bool {
    u64::try_from(answer.received) == Ok(end)
}

fn joined<T>(result: Result<Result<T, Error>, tokio::task::JoinError>) -> Result<T, Error> {
    result.map_err(|error| Error::Source(std::io::Error::other(error)))?
}

/// Failures worth another attempt: no answer, a server error, an offset conflict.
fn retryable(error: &Error) -> bool {
    match error {
        Error::Transport(_) => true,
        Error::Api { code: Some(ErrorCode::UploadOffsetMismatch | ErrorCode::RateLimited), .. } => true,
        Error::Api { status, .. } => *status >= 500,
        _ => false,
    }
}

/// The bytes the server holds, from its 409 with code `upload_offset_mismatch` (never from the
/// message, which is for people).
fn conflict_received(error: &Error) -> Option<u64> {
    match error {
        Error::Api { code: Some(ErrorCode::UploadOffsetMismatch), received, .. } => *received,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> Error {
        Error::api(status, message, None)
    }

    fn mismatch(received: Option<u64>) -> Error {
        Error::Api {
            status: 409,
            message: "Chunk offset 0 does not match 8388608 bytes received".to_owned(),
            code: Some(ErrorCode::UploadOffsetMismatch),
            received,
            retry_after: None,
        }
    }

    #[test]
    fn the_hand_built_chunk_action_is_the_typed_one() {
        let typed =
            AppendFileUploadChunk::new(seed_agents_protocol::Bytes(vec![1, 2, 3]), 8_388_608, "u-1").into_action();
        let typed = seed_agents_protocol::wire::to_ipld(&typed).expect("serialises");
        assert_eq!(Ipld::Map(chunk_action("u-1", 8_388_608, vec![1, 2, 3])), typed);
    }

    #[tokio::test]
    async fn rewind_trims_what_the_server_has_and_ignores_stale_offsets() {
        let client = Client::new("http://127.0.0.1:9", crate::Ed25519Signer::from_seed(&[3; 32])).expect("client");
        let mut reports = Vec::new();
        let mut sender = Sender {
            client: &client,
            upload_id: "u",
            size: 30,
            chunk: 10,
            source: &[0u8; 0][..],
            read_to: 30,
            acked: 10,
            queue: VecDeque::from([
                Chunk { offset: 10, data: (10..20).collect(), request: None },
                Chunk { offset: 20, data: (20..30).collect(), request: None },
            ]),
            on_progress: |progress: Progress| reports.push(progress.received),
        };
        // A 409 older than an acknowledgement that came later: stale, nothing lost.
        assert!(!sender.rewind(Some(4)).await.expect("stale is fine"));
        assert_eq!((sender.acked, sender.queue.len()), (10, 2));
        // The server has 3 bytes of the next chunk's range beyond that (a shorter chunk landed).
        assert!(sender.rewind(Some(13)).await.expect("progress"));
        assert_eq!(sender.acked, 13);
        assert_eq!((sender.queue[0].offset, sender.queue[0].data[0]), (13, 13));
        assert!(sender.rewind(Some(31)).await.is_err(), "more than the upload's size");
        drop(sender);
        assert_eq!(reports, [13]);
    }

    #[test]
    fn reads_the_offset_from_the_conflict_code_not_the_message() {
        assert_eq!(conflict_received(&mismatch(Some(8_388_608))), Some(8_388_608));
        assert_eq!(conflict_received(&mismatch(None)), None);
        // The sentence alone decides nothing.
        assert_eq!(conflict_received(&api(409, "Chunk offset 0 does not match 8388608 bytes received")), None);
        assert_eq!(conflict_received(&api(409, "Client request ID payload mismatch")), None);
    }

    #[test]
    fn retries_only_what_may_pass_next_time() {
        assert!(retryable(&mismatch(Some(0))));
        assert!(!retryable(&api(409, "Chunk offset 1 does not match 0 bytes received")));
        assert!(!retryable(&api(409, "Client request ID payload mismatch")));
        assert!(retryable(&api(503, "busy")));
        assert!(!retryable(&api(404, "Upload not found")));
        assert!(!retryable(&api(400, "Upload exceeds its declared size")));
        assert!(!retryable(&api(413, "Chunk is too large")));
    }
}
