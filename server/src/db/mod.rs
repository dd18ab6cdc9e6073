//! The database: one SQLite file in WAL mode, one writer connection on its own thread with group
//! commit, and a few read-only connections, each on its own thread, taking read jobs from one
//! queue.
//!
//! Invariants:
//! - Every write runs on the writer thread inside a transaction, and its caller hears back only
//!   after that transaction committed (`synchronous=FULL`: the commit is on disk).
//! - Writes queued while the writer is busy are committed together (group commit): each runs in
//!   its own savepoint, so a failing write rolls back alone and the others still commit.
//! - No database work runs on the async executor's threads.
//! - Both queues are bounded ([`Queues`]): when one is full the caller hears
//!   [`ErrorKind::Unavailable`](crate::error::ErrorKind) at once (503 with `Retry-After` over
//!   HTTP) instead of waiting behind an unbounded backlog.

mod cbor;
pub(crate) mod maintenance;
mod migrations;
mod pg;
#[cfg(test)]
mod pg_tests;
mod sql;

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use rusqlite::OpenFlags;
use tokio::sync::oneshot;

use crate::error::{ApiError, ApiResult};

pub(crate) use cbor::{Cbor, Generic, Text};
pub(crate) use pg::{redacted as redacted_url, with_schema as pg_with_schema};
pub use sql::{Connection, Error, FromSql, MappedRows, OptionalExtension, Params, Result, Row, Rows, Statement, ToSql};
pub(crate) use sql::{Dialect, FromSqlError, FromSqlResult, ToSqlOutput, Value, ValueRef, params, params_from_iter};

use crate::telemetry::{BATCH_BUCKETS, Histogram, LATENCY_BUCKETS};

/// The most writes committed in one transaction.
const MAX_BATCH: usize = 256;

/// Read connections (and reader threads) kept open: one per core, at least two (a slow read
/// does not hold up every other) and at most four.
///
/// Reads are CPU work once the pages are cached, so readers beyond the cores only compete with
/// the executor's threads: on a 2-core machine the turns bench's first-byte-to-partial p99 fell
/// from 8.8/7.9/9.4 ms with four readers to 6.9/7.7/8.0 ms with two (runs alternated), and the
/// load bench's read throughput did not change.
fn readers() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get).clamp(2, 4)
}

/// What a caller hears when a queue is full.
pub(crate) const BUSY: &str = "The server is busy; try again in a moment";

/// How many jobs may wait for the writer and for the readers. Past these, new work is refused
/// with [`BUSY`] instead of queueing: a saturated server answers quickly and its memory stays
/// bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queues {
    /// Writes waiting for the writer thread (a batch being committed is not counted).
    pub writes: usize,
    /// Reads waiting for a reader thread.
    pub reads: usize,
}

impl Default for Queues {
    /// 4,096 writes (sixteen full group commits) and 4,096 reads: seconds of work at the rates
    /// the load bench measures, far above what a healthy server holds.
    fn default() -> Self {
        Self { writes: 4096, reads: 4096 }
    }
}

/// A read: given a reader's connection, it does its work and replies itself.
type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

enum ReadMessage {
    Job(ReadJob),
    Stop,
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite refused.
    #[error("database {path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// PostgreSQL refused, or could not be reached.
    #[error("database {url}: {source}")]
    Postgres {
        /// The database's URL, without its password.
        url: String,
        /// What went wrong.
        source: Error,
    },
    /// Another server process (or operator command) uses the PostgreSQL database.
    #[error(
        "database {url}: another seed-agents-server process uses it; several processes on one \
         database are not supported yet: give each server its own database or schema (docs/postgres.md)"
    )]
    InUse {
        /// The database's URL, without its password.
        url: String,
    },
    /// The file was written by a newer server.
    #[error(
        "database {path} has schema version {found}, newer than this server understands ({supported}); \
         run the newer server, or start this one on another database (--data-dir, --database-url)"
    )]
    TooNew {
        /// The database file.
        path: String,
        /// The version in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A file operation on a database file failed (a snapshot's fsync, say).
    #[error("database {path}: {source}")]
    Io {
        /// The database file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The writer thread could not start.
    #[error("could not start the database writer thread: {0}")]
    Thread(std::io::Error),
}

/// A write: given the connection inside the batch's transaction (or `None` when the transaction
/// could not begin, so the work must not run), it does its work and says how to complete.
///
/// It also answers whether the transaction is still sound: `false` when one of its savepoint
/// statements failed, after which PostgreSQL would turn the batch's `COMMIT` into a silent
/// rollback, so the batch is rolled back and every job of it hears the failure.
type Job = Box<dyn FnOnce(Option<&Connection>) -> (Completion, bool) + Send>;
/// Runs after the batch's commit (with `None`) or its failure (with the error).
type Completion = Box<dyn FnOnce(Option<&ApiError>) + Send>;

/// Handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Inner>,
}

struct Inner {
    /// What the writer counts (`/metrics`).
    stats: Arc<WriterStats>,
    writer: Mutex<Option<mpsc::SyncSender<Job>>>,
    writer_thread: Mutex<Option<thread::JoinHandle<()>>>,
    reads: crossbeam_channel::Sender<ReadMessage>,
    /// Reads allowed to wait (the channel holds one more per reader, for `Stop`).
    read_bound: usize,
    reader_threads: Mutex<Vec<thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").finish_non_exhaustive()
    }
}

impl Db {
    /// Opens (creating if needed) the database at `path`, applies pending migrations, and starts
    /// the writer thread, with the default [`Queues`].
    pub fn open(path: &Path) -> Result<Self, DbError> {
        Self::open_with(path, Queues::default())
    }

    /// [`Db::open`] with other queue bounds.
    pub fn open_with(path: &Path, queues: Queues) -> Result<Self, DbError> {
        let display = path.display().to_string();
        let sqlite = |source| DbError::Sqlite { path: display.clone(), source };
        let mut writer = rusqlite::Connection::open(path).map_err(sqlite)?;
        configure(&writer, false).map_err(sqlite)?;
        migrations::apply(&mut writer, &display)?;
        let writer = Connection::sqlite(writer);
        let mut connections = Vec::with_capacity(readers());
        for _ in 0..readers() {
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let reader = rusqlite::Connection::open_with_flags(path, flags).map_err(sqlite)?;
            configure(&reader, true).map_err(sqlite)?;
            connections.push(Connection::sqlite(reader));
        }
        Self::start(writer, connections, None, queues)
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user@host:port/database`),
    /// applies pending migrations, and starts the writer and reader threads, each with its own
    /// connection (docs/postgres.md). A lost connection is opened again before the next job.
    pub fn open_postgres(url: &str, queues: Queues) -> Result<Self, DbError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(DbError::Postgres {
                url: pg::redacted(url),
                source: Error::Unsupported("a database URL other than postgres://… or postgresql://…"),
            });
        }
        // The synchronous client runs its own small runtime, which must not start inside the
        // caller's (the server opens its database from async code): connect from a plain thread.
        let connect = || -> Result<(Connection, Vec<Connection>), DbError> {
            let writer = pg::open(url)?;
            let mut connections = Vec::with_capacity(readers());
            for _ in 0..readers() {
                connections.push(pg::connect(url)?);
            }
            Ok((writer, connections))
        };
        let (writer, connections) = thread::scope(|scope| {
            thread::Builder::new()
                .spawn_scoped(scope, connect)
                .map_err(DbError::Thread)?
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        Self::start(writer, connections, Some(url.into()), queues)
    }

    fn start(
        writer: Connection,
        connections: Vec<Connection>,
        reconnect: Option<Arc<str>>,
        queues: Queues,
    ) -> Result<Self, DbError> {
        let name = match writer.dialect() {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        };
        // `Stop` messages at shutdown must fit too: room for one per reader beyond the bound.
        let (reads, read_queue) = crossbeam_channel::bounded::<ReadMessage>(queues.reads.max(1) + connections.len());
        let mut reader_threads = Vec::with_capacity(connections.len());
        for (index, reader) in connections.into_iter().enumerate() {
            let queue = read_queue.clone();
            let reconnect = reconnect.clone();
            let thread = thread::Builder::new()
                .name(format!("{name}-reader-{index}"))
                .spawn(move || reader_loop(reader, reconnect, queue))
                .map_err(DbError::Thread)?;
            reader_threads.push(thread);
        }
        let (sender, receiver) = mpsc::sync_channel::<Job>(queues.writes.max(1));
        let stats = Arc::new(WriterStats::default());
        let writer_stats = stats.clone();
        let thread = thread::Builder::new()
            .name(format!("{name}-writer"))
            .spawn(move || writer_loop(writer, reconnect, receiver, &writer_stats))
            .map_err(DbError::Thread)?;
        Ok(Self {
            inner: Arc::new(Inner {
                stats,
                writer: Mutex::new(Some(sender)),
                writer_thread: Mutex::new(Some(thread)),
                reads,
                read_bound: queues.reads.max(1),
                reader_threads: Mutex::new(reader_threads),
            }),
        })
    }

    /// Runs `work` on the writer connection inside a transaction; answers after the commit.
    ///
    /// An `Err` from `work` rolls back what it wrote (and only that). The write is queued when
    /// this is called (or refused then, when the queue is full), not when the future is polled.
    pub fn write<T, F>(&self, work: F) -> impl Future<Output = ApiResult<T>> + Send + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> ApiResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<ApiResult<T>>();
        let job: Job = Box::new(move |conn: Option<&Connection>| {
            let (outcome, sound) = match conn {
                Some(conn) => run_in_savepoint(conn, work),
                None => (Err(ApiError::internal("the write transaction could not begin")), true),
            };
            let completion: Completion = Box::new(move |commit_error: Option<&ApiError>| {
                let outcome = match (outcome, commit_error) {
                    (Ok(_), Some(error)) => Err(error.clone()),
                    (outcome, _) => outcome,
                };
                // The caller may have gone away (client disconnected); the write stands.
                let _ = reply.send(outcome);
            });
            (completion, sound)
        });
        let queued = match lock(&self.inner.writer).as_ref() {
            None => Err(ApiError::internal("database writer is closed")),
            Some(sender) => sender.try_send(job).map_err(|error| match error {
                mpsc::TrySendError::Full(_) => ApiError::unavailable(BUSY),
                mpsc::TrySendError::Disconnected(_) => ApiError::internal("database writer stopped"),
            }),
        };
        async move {
            queued?;
            answer.await.map_err(|_| ApiError::internal("database writer dropped a write"))?
        }
    }

    /// Runs `work` on a read-only connection, on one of the reader threads. Like [`Db::write`],
    /// the read is queued (or refused) when this is called.
    pub fn read<T, F>(&self, work: F) -> impl Future<Output = ApiResult<T>> + Send + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> ApiResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<ApiResult<T>>();
        let job: ReadJob = Box::new(move |conn: &Connection| {
            let _ = reply.send(run_in_snapshot(conn, work));
        });
        // Leave the last places to the shutdown messages.
        let queued = if self.inner.reads.len() >= self.inner.read_bound {
            Err(ApiError::unavailable(BUSY))
        } else {
            self.inner.reads.try_send(ReadMessage::Job(job)).map_err(|error| match error {
                crossbeam_channel::TrySendError::Full(_) => ApiError::unavailable(BUSY),
                crossbeam_channel::TrySendError::Disconnected(_) => ApiError::internal("database readers stopped"),
            })
        };
        async move {
            queued?;
            answer.await.map_err(|_| ApiError::internal("database reader dropped a read"))?
        }
    }

    /// What the writer counted: batch sizes and commit latency.
    pub(crate) fn writer_stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    /// Whether the writer thread is running and takes writes (readiness).
    pub(crate) fn writer_alive(&self) -> bool {
        lock(&self.inner.writer).is_some()
            && lock(&self.inner.writer_thread).as_ref().is_some_and(|thread| !thread.is_finished())
    }

    /// Stops accepting writes, lets the writer finish what is queued, and waits for it.
    ///
    /// Readers close first, so the writer's connection is the last one: SQLite then checkpoints
    /// the write-ahead log into the database file and removes it.
    pub fn close(&self) {
        let readers: Vec<_> = lock(&self.inner.reader_threads).drain(..).collect();
        for _ in &readers {
            let _ = self.inner.reads.send(ReadMessage::Stop);
        }
        for reader in readers {
            if reader.join().is_err() {
                tracing::error!("database reader thread panicked");
            }
        }
        lock(&self.inner.writer).take();
        if let Some(thread) = lock(&self.inner.writer_thread).take()
            && thread.join().is_err()
        {
            tracing::error!("database writer thread panicked");
        }
    }
}

/// Records that `account_id` exists (every account the server has seen has a row). Call inside a
/// write.
pub(crate) fn ensure_account(conn: &Connection, account_id: &str, now_ms: i64) -> Result<()> {
    conn.prepare_cached("INSERT INTO accounts (id, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING")?
        .execute(params![account_id, now_ms])?;
    Ok(())
}

/// Runs `work` under a savepoint nested in the caller's transaction: when it fails, what it
/// wrote is rolled back and the transaction goes on (the error is returned, as `work`'s type:
/// a caller that only logs an [`Error`] keeps it out of the internal-error log).
pub(crate) fn savepoint<T, E: From<Error>>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<T, E> {
    run_cached(conn, "SAVEPOINT nested")?;
    let outcome = work(conn);
    if outcome.is_err() {
        run_cached(conn, "ROLLBACK TO nested")?;
    }
    run_cached(conn, "RELEASE nested")?;
    outcome
}

/// A migrated in-memory database with foreign keys on, for unit tests of the features' SQL.
#[cfg(test)]
pub(crate) fn migrated_in_memory() -> Connection {
    let mut conn = rusqlite::Connection::open_in_memory().expect("in-memory database");
    conn.pragma_update(None, "foreign_keys", "ON").expect("foreign keys on");
    migrations::apply(&mut conn, ":memory:").expect("migrations apply");
    Connection::sqlite(conn)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while these locks are held; recover the data if it ever did.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn configure(conn: &rusqlite::Connection, read_only: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Statement journals (one per savepoint, so one per write of a batch) and sort trees stay in
    // memory: by default SQLite spills a statement journal over 64 KiB to a new temporary file,
    // which the writer paid for (open, write, unlink) on most batches.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    if read_only {
        // Readers share the OS page cache; a small private cache each keeps memory flat (1 MiB).
        conn.pragma_update(None, "cache_size", -1024)?;
    }
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Runs a statement without parameters through the statement cache (no parse per call).
fn run_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Runs a read inside one read transaction, so every statement of it sees the same snapshot
/// (an access check and the rows it guards agree), and the WAL read lock is taken once.
fn run_in_snapshot<T>(conn: &Connection, work: impl FnOnce(&Connection) -> ApiResult<T>) -> ApiResult<T> {
    let begin = match conn.dialect() {
        Dialect::Sqlite => run_cached(conn, "BEGIN"),
        Dialect::Postgres => conn.execute_batch("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
    };
    if let Err(error) = begin {
        return Err(ApiError::internal(error));
    }
    // A panic in one read must not take its reader thread with it.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(conn)))
        .unwrap_or_else(|_| Err(ApiError::internal("a database read panicked")));
    if let Err(error) = run_cached(conn, "COMMIT") {
        tracing::warn!(%error, "ending a read transaction failed");
        let _ = conn.execute_batch("ROLLBACK");
    }
    outcome
}

/// Runs one write of a batch under its own savepoint; answers its outcome and whether the
/// savepoint's statements succeeded (the transaction is still sound).
fn run_in_savepoint<T>(conn: &Connection, work: impl FnOnce(&Connection) -> ApiResult<T>) -> (ApiResult<T>, bool) {
    if let Err(error) = run_cached(conn, "SAVEPOINT job") {
        return (Err(ApiError::internal(error)), false);
    }
    // A panic in one write must not take the writer thread (and every later write) with it.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(conn)))
        .unwrap_or_else(|_| Err(ApiError::internal("a database write panicked")));
    if outcome.is_err()
        && let Err(error) = run_cached(conn, "ROLLBACK TO job")
    {
        return (Err(ApiError::internal(error)), false);
    }
    if let Err(error) = run_cached(conn, "RELEASE job") {
        // On PostgreSQL a statement of the job failed and the job went on (it swallowed the
        // error): the transaction is aborted until the savepoint is rolled back. Undo the job
        // alone, as SQLite would have kept the rest of it; only if even that fails is the
        // transaction broken.
        let recovered = run_cached(conn, "ROLLBACK TO job").and_then(|()| run_cached(conn, "RELEASE job"));
        return (Err(ApiError::internal(error)), recovered.is_ok());
    }
    (outcome, true)
}

fn reader_loop(mut conn: Connection, reconnect: Option<Arc<str>>, queue: crossbeam_channel::Receiver<ReadMessage>) {
    while let Ok(ReadMessage::Job(job)) = queue.recv() {
        reconnect_if_lost(&mut conn, reconnect.as_deref());
        job(&conn);
    }
    drop(conn);
}

/// What the writer counts, as atomics (`/metrics`): writes per batch and each batch's time from
/// `BEGIN` to the end of `COMMIT` (the fsync included).
#[derive(Debug)]
pub(crate) struct WriterStats {
    /// Writes per committed batch.
    pub batch_size: Histogram,
    /// Seconds from `BEGIN` to the end of `COMMIT`.
    pub commit_seconds: Histogram,
}

impl Default for WriterStats {
    fn default() -> Self {
        Self { batch_size: Histogram::new(BATCH_BUCKETS), commit_seconds: Histogram::new(LATENCY_BUCKETS) }
    }
}

/// Opens a PostgreSQL connection again when the last one was lost (the server restarted, a
/// network blip, a proxy that closed it while idle): the job then runs on the new one, or fails
/// as before when it cannot be opened. Answers whether it opened a new one.
fn reconnect_if_lost(conn: &mut Connection, url: Option<&str>) -> bool {
    let Some(url) = url else { return false };
    if conn.as_postgres().is_none_or(pg::Client::is_usable) {
        return false;
    }
    match pg::Client::connect(url) {
        Ok(client) => {
            tracing::info!("reconnected to PostgreSQL");
            *conn = Connection::postgres(client);
            true
        }
        Err(error) => {
            tracing::warn!(%error, "reconnecting to PostgreSQL failed");
            false
        }
    }
}

fn writer_loop(mut conn: Connection, reconnect: Option<Arc<str>>, jobs: mpsc::Receiver<Job>, stats: &WriterStats) {
    // On PostgreSQL the writer's connection holds the schema's process lock (`pg::open`); a new
    // connection must take it again before it writes.
    let mut holds_lock = true;
    while let Ok(first) = jobs.recv() {
        if reconnect_if_lost(&mut conn, reconnect.as_deref()) {
            holds_lock = false;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if conn.dialect() == Dialect::Postgres && !holds_lock {
            holds_lock = pg::take_process_lock(&conn).unwrap_or(false);
            if !holds_lock {
                tracing::error!(
                    "another server process holds this database's lock; writes are refused until it is free"
                );
                let error = ApiError::internal("another server process holds the database");
                for job in batch {
                    (job(None).0)(Some(&error));
                }
                continue;
            }
        }
        let started = std::time::Instant::now();
        let size = batch.len();
        let commit = run_batch(&conn, batch);
        stats.commit_seconds.observe_duration(started.elapsed());
        stats.batch_size.observe(size as f64);
        let error = commit.result.err().map(ApiError::internal);
        for completion in commit.completions {
            completion(error.as_ref());
        }
    }
    if let Some(sqlite) = conn.as_sqlite()
        && let Err(error) = sqlite.execute_batch("PRAGMA optimize")
    {
        tracing::warn!(%error, "PRAGMA optimize at shutdown failed");
    }
    if let Err(error) = conn.close() {
        tracing::error!(%error, "closing the database writer failed");
    }
}

struct BatchOutcome {
    result: Result<()>,
    completions: Vec<Completion>,
}

fn run_batch(conn: &Connection, batch: Vec<Job>) -> BatchOutcome {
    let begin = match conn.dialect() {
        Dialect::Sqlite => conn.execute_batch("BEGIN IMMEDIATE"),
        Dialect::Postgres => conn.execute_batch(pg::BEGIN_WRITE),
    };
    if let Err(error) = begin {
        if conn.dialect() == Dialect::Postgres {
            let _ = conn.execute_batch("ROLLBACK");
        }
        // Run nothing; every job hears the failure.
        let failed: Vec<Completion> = batch.into_iter().map(|job| job(None).0).collect();
        return BatchOutcome { result: Err(error), completions: failed };
    }
    let mut sound = true;
    let completions: Vec<Completion> = batch
        .into_iter()
        .map(|job| {
            let (completion, ok) = job(Some(conn));
            sound &= ok;
            completion
        })
        .collect();
    // PostgreSQL answers `COMMIT` of an aborted transaction with a rollback, not an error: a
    // statement first tells the two apart.
    if sound && conn.dialect() == Dialect::Postgres {
        sound = conn.execute_batch("SELECT 1").is_ok();
    }
    if !sound {
        let _ = conn.execute_batch("ROLLBACK");
        return BatchOutcome { result: Err(Error::Aborted), completions };
    }
    let result = conn.execute_batch("COMMIT");
    if result.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    BatchOutcome { result, completions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn count(conn: &Connection) -> ApiResult<i64> {
        Ok(conn.query_row("SELECT COUNT(*) FROM accounts", [], |row| row.get(0))?)
    }

    #[test]
    fn a_failed_savepoint_rolls_back_its_own_writes_and_the_transaction_goes_on() {
        let conn = migrated_in_memory();
        conn.execute_batch("BEGIN").unwrap();
        ensure_account(&conn, "before", 1).unwrap();
        let failed: crate::db::Result<()> = savepoint(&conn, |conn| {
            ensure_account(conn, "inside", 1)?;
            conn.execute("INSERT INTO accounts (id, created_at) VALUES ('before', 1)", []).map(drop)
        });
        assert!(failed.is_err(), "the duplicate id fails the savepoint's work");
        let kept: crate::db::Result<()> = savepoint(&conn, |conn| ensure_account(conn, "after", 1));
        kept.unwrap();
        conn.execute_batch("COMMIT").unwrap();
        let ids: Vec<String> = conn
            .prepare("SELECT id FROM accounts ORDER BY id")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<crate::db::Result<_>>()
            .unwrap();
        assert_eq!(ids, ["after", "before"], "what failed inside is gone; before and after stay");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_rolls_back_alone_within_a_group_commit() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("test.sqlite")).unwrap();
        let mut writes = Vec::new();
        for index in 0..64 {
            let db = db.clone();
            writes.push(tokio::spawn(async move {
                db.write(move |conn| {
                    ensure_account(conn, &format!("account-{index}"), 1)?;
                    if index % 4 == 0 {
                        return Err(ApiError::invalid("refused after writing"));
                    }
                    Ok(index)
                })
                .await
            }));
        }
        let mut refused = 0;
        for write in writes {
            if write.await.unwrap().is_err() {
                refused += 1;
            }
        }
        assert_eq!(refused, 16);
        assert_eq!(db.read(count).await.unwrap(), 48, "only the refused writes were rolled back");
        // A panicking write is contained and the writer keeps serving.
        let panicked = db.write(|_| -> ApiResult<()> { panic!("boom") }).await;
        assert_eq!(panicked.unwrap_err().kind(), ErrorKind::Internal);
        db.write(|conn| Ok(ensure_account(conn, "after", 1)?)).await.unwrap();
        assert_eq!(db.read(count).await.unwrap(), 49);
        db.close();
    }

    /// A job that says when it started, then holds its thread until `release` is passed.
    fn blocker(
        started: &std::sync::mpsc::Sender<()>,
        release: &std::sync::Arc<std::sync::Barrier>,
    ) -> impl FnOnce(&Connection) -> ApiResult<()> + Send + 'static {
        let (started, release) = (started.clone(), release.clone());
        move |_| {
            let _ = started.send(());
            release.wait();
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_queues_refuse_at_once_and_recover() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_with(&dir.path().join("test.sqlite"), Queues { writes: 2, reads: 3 }).unwrap();
        let (started, starts) = std::sync::mpsc::channel();
        let starts = std::sync::Arc::new(std::sync::Mutex::new(starts));
        let wait_started = |count: usize| {
            let starts = starts.clone();
            tokio::task::spawn_blocking(move || {
                for _ in 0..count {
                    starts.lock().unwrap().recv_timeout(std::time::Duration::from_secs(30)).expect("the job started");
                }
            })
        };

        // The writer runs one job while two wait; a third waiting write is refused.
        let release = std::sync::Arc::new(std::sync::Barrier::new(2));
        let running = db.write(blocker(&started, &release));
        wait_started(1).await.unwrap();
        let waiting: Vec<_> =
            (0..2).map(|index| db.write(move |conn| Ok(ensure_account(conn, &format!("w{index}"), 1)?))).collect();
        let refused = db.write(|conn| Ok(ensure_account(conn, "refused", 1)?)).await.unwrap_err();
        assert_eq!((refused.kind(), refused.message()), (ErrorKind::Unavailable, BUSY));
        tokio::task::spawn_blocking(move || release.wait()).await.unwrap();
        running.await.unwrap();
        for write in waiting {
            write.await.unwrap();
        }
        assert_eq!(db.read(count).await.unwrap(), 2, "the waiting writes committed, the refused one did not");

        // Every reader busy, three reads waiting: the next read is refused.
        let release = std::sync::Arc::new(std::sync::Barrier::new(readers() + 1));
        let mut busy = Vec::new();
        for _ in 0..readers() {
            // One at a time: each is taken off the queue before the next is queued.
            busy.push(db.read(blocker(&started, &release)));
            wait_started(1).await.unwrap();
        }
        let queued: Vec<_> = (0..3).map(|_| db.read(count)).collect();
        assert_eq!(db.read(count).await.unwrap_err().kind(), ErrorKind::Unavailable);
        tokio::task::spawn_blocking(move || release.wait()).await.unwrap();
        for read in busy {
            read.await.unwrap();
        }
        for read in queued {
            assert_eq!(read.await.unwrap(), 2);
        }
        assert_eq!(db.read(count).await.unwrap(), 2, "a drained queue takes reads again");
        db.close();
    }
}
