//! The upload chunk order (`server-core/src/upload_order.rs`) under arbitrary arrivals, on paused time.
//!
//! Each chunk runs the steps `uploads::append_file_upload_chunk` takes around `AppendOrder`, with
//! a `tokio::sync::Mutex` holding `received` as the staging lock and a sleep as the write:
//! enter; lock; when ahead of `received`, reserve the waiting place, unlock, wait, lock again;
//! append only at `received` (409 otherwise), waking the waiter when done. Two runs per input:
//!
//! - free: chunks of two uploads at arbitrary times and offsets. One waiter per upload; a waiter
//!   wakes at once when an append at the expected offset finishes (no lost wakeup) and otherwise
//!   only when its bound passed: the grace while alone, and never before `WAIT` while another
//!   append is in the server; no wait lasts past `WAIT`; afterwards nothing is left behind (the
//!   place is free, a lone waiter waits exactly the grace).
//! - pipelined: a client like the SDK's (two chunks in flight, each sent in order, each on the
//!   wire less than the grace): every chunk is appended, none is refused.

#![no_main]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use seed_agents_server_core::upload_order::{AppendOrder, WAIT};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;
use tokio::task::LocalSet;
use tokio::time::{Instant, sleep};

#[derive(Debug, Arbitrary)]
struct Input {
    grace_ms: u16,
    chunks: Vec<Chunk>,
}

#[derive(Debug, Arbitrary)]
struct Chunk {
    /// Which of the two uploads (free run only).
    second_upload: bool,
    /// Free run: arrival, in ms from the start. Pipelined run: the client's pause before sending.
    at_ms: u16,
    /// Pipelined run: time on the wire (kept under the grace).
    net_ms: u16,
    /// How long the write holds the staging lock (under 5 s).
    write_ms: u16,
    len: u8,
    offset: Offset,
}

#[derive(Debug, Arbitrary)]
enum Offset {
    /// Where the client thinks the upload is: the sum of its earlier chunks.
    Expected,
    /// Off from that by this many bytes (free run only).
    Skewed(i8),
}

const UPLOADS: [&str; 2] = ["u0", "u1"];
const MAX_CHUNKS: usize = 32;

thread_local! {
    static RUNTIME: Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
}

fuzz_target!(|input: Input| {
    let Input { grace_ms, mut chunks } = input;
    chunks.truncate(MAX_CHUNKS);
    let grace = Duration::from_millis(10 + u64::from(grace_ms) % 10_000);
    RUNTIME.with(|runtime| {
        LocalSet::new().block_on(runtime, async {
            let everything = async {
                free_run(grace, &chunks).await;
                pipelined_run(grace, &chunks).await;
            };
            // Paused time jumps to the next timer when all tasks wait, so a deadlock with any timer
            // left shows as this timeout (and one with none as libFuzzer's).
            tokio::time::timeout(Duration::from_secs(24 * 3600), everything).await.expect("the appends finish");
        });
    });
});

/// What an append answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Appended,
    /// 409: the offset is not `received`.
    Conflict,
    /// 400: past the declared size.
    TooLarge,
}

/// One server: the order, and per upload the staging lock (holding `received`) and its size.
struct Server {
    order: AppendOrder,
    grace: Duration,
    staging: [Mutex<u64>; 2],
    size: [u64; 2],
    model: RefCell<Model>,
}

/// What the test knows independently of `AppendOrder`, per upload.
#[derive(Default)]
struct Model {
    /// Appends between `enter` and the end of their in-flight guard.
    in_flight: [usize; 2],
    /// Chunks inside `Waiter::wait`.
    waiting: [usize; 2],
    /// Appends at the expected offset that finished, numbered, with when.
    finished: [Vec<Instant>; 2],
}

impl Server {
    fn new(grace: Duration, size: [u64; 2]) -> Rc<Self> {
        Rc::new(Server {
            order: AppendOrder::with_grace(grace),
            grace,
            staging: [Mutex::new(0), Mutex::new(0)],
            size,
            model: RefCell::default(),
        })
    }

    /// `append_file_upload_chunk`'s steps around the order (see the module doc).
    async fn append(&self, upload: usize, offset: u64, len: u64, write: Duration) -> Outcome {
        let id = UPLOADS[upload];
        self.model.borrow_mut().in_flight[upload] += 1;
        let in_flight = self.order.enter(id);
        let mut received = self.staging[upload].lock().await;
        if offset > *received {
            match self.order.reserve(id) {
                None => assert_eq!(self.model.borrow().waiting[upload], 1, "the waiting place was refused while free"),
                Some(waiter) => {
                    let (bound, seen) = {
                        let mut model = self.model.borrow_mut();
                        assert_eq!(model.waiting[upload], 0, "two chunks wait on one upload");
                        model.waiting[upload] = 1;
                        let bound = if model.in_flight[upload] > 1 { WAIT } else { self.grace };
                        (bound, model.finished[upload].len())
                    };
                    drop(received);
                    let started = Instant::now();
                    waiter.wait().await;
                    self.check_wait(upload, started, bound, seen);
                    received = self.staging[upload].lock().await;
                }
            }
        }
        let finished = (offset == *received).then(|| self.order.on_finish(id));
        let outcome = if offset != *received {
            Outcome::Conflict
        } else if offset + len > self.size[upload] {
            // The real handler returns here with its finish guard dropped before the lock.
            self.record_finish(upload);
            drop(finished);
            Outcome::TooLarge
        } else {
            sleep(write).await;
            *received += len;
            drop(received);
            self.record_finish(upload);
            drop(finished);
            Outcome::Appended
        };
        self.model.borrow_mut().in_flight[upload] -= 1;
        drop(in_flight);
        outcome
    }

    fn record_finish(&self, upload: usize) {
        self.model.borrow_mut().finished[upload].push(Instant::now());
    }

    /// The invariants of a wait that just returned (nothing else ran since).
    fn check_wait(&self, upload: usize, started: Instant, bound: Duration, seen: usize) {
        let mut model = self.model.borrow_mut();
        model.waiting[upload] = 0;
        let now = Instant::now();
        let waited = now - started;
        assert!(waited <= WAIT, "waited {waited:?}, past {WAIT:?}");
        match model.finished[upload].get(seen) {
            // Woken by the first finish after it took its place, at that very moment.
            Some(first) => assert_eq!(now, *first, "woke {:?} after the finish it waited for", now - *first),
            None => {
                assert!(waited >= bound, "woke after {waited:?} with nothing finished (bound {bound:?})");
                let alone = model.in_flight[upload] <= 1;
                assert!(waited >= WAIT || alone, "gave up after {waited:?} while its predecessor is in the server");
            }
        }
    }

    /// Nothing is left of the uploads: the waiting place is free, and a lone chunk ahead waits
    /// exactly the grace (no append is still counted in the server).
    async fn check_idle(&self) {
        for (upload, id) in UPLOADS.iter().enumerate() {
            assert_eq!(self.model.borrow().in_flight[upload], 0);
            let _me = self.order.enter(id);
            let waiter = self.order.reserve(id).expect("the waiting place is free once all appends answered");
            let started = Instant::now();
            waiter.wait().await;
            assert_eq!(started.elapsed(), self.grace, "a lone waiter did not wait the grace: state was left behind");
        }
    }
}

/// Chunks of two uploads arriving at arbitrary times, at arbitrary offsets.
async fn free_run(grace: Duration, chunks: &[Chunk]) {
    let mut next = [0u64; 2];
    let mut planned = Vec::new();
    for chunk in chunks {
        let upload = usize::from(chunk.second_upload);
        let len = 1 + u64::from(chunk.len % 64);
        let offset = match chunk.offset {
            Offset::Expected => next[upload],
            Offset::Skewed(by) => next[upload].saturating_add_signed(i64::from(by)),
        };
        next[upload] += len;
        planned.push((upload, offset, len, Duration::from_millis(chunk.at_ms.into()), write_time(chunk)));
    }
    let server = Server::new(grace, next);
    let tasks: Vec<_> = planned
        .into_iter()
        .map(|(upload, offset, len, at, write)| {
            let server = server.clone();
            tokio::task::spawn_local(async move {
                sleep(at).await;
                let outcome = server.append(upload, offset, len, write).await;
                (upload, len, outcome)
            })
        })
        .collect();
    let mut appended = [0u64; 2];
    for task in tasks {
        let (upload, len, outcome) = task.await.expect("an append task panicked");
        if outcome == Outcome::Appended {
            appended[upload] += len;
        }
    }
    for upload in 0..2 {
        assert_eq!(*server.staging[upload].lock().await, appended[upload]);
        assert!(appended[upload] <= server.size[upload]);
    }
    server.check_idle().await;
}

/// One upload sent as the SDK sends it: in order, two chunks in flight, each on the wire for less
/// than the grace. Every chunk must be appended.
async fn pipelined_run(grace: Duration, chunks: &[Chunk]) {
    let lens: Vec<u64> = chunks.iter().map(|chunk| 1 + u64::from(chunk.len % 64)).collect();
    let server = Server::new(grace, [lens.iter().sum(), 0]);
    let grace_ms = grace.as_millis() as u64;
    let mut in_flight = VecDeque::new();
    let mut offset = 0;
    for (chunk, len) in chunks.iter().zip(lens) {
        if in_flight.len() == 2 {
            answered(in_flight.pop_front()).await;
        }
        // The client's own pause (signing, reading the file), then the wire.
        sleep(Duration::from_millis(u64::from(chunk.at_ms) % 1_000)).await;
        let net = Duration::from_millis(1 + u64::from(chunk.net_ms) % (grace_ms - 1));
        let (server, write) = (server.clone(), write_time(chunk));
        in_flight.push_back(tokio::task::spawn_local(async move {
            sleep(net).await;
            server.append(0, offset, len, write).await
        }));
        offset += len;
    }
    while let Some(task) = in_flight.pop_front() {
        answered(Some(task)).await;
    }
    assert_eq!(*server.staging[0].lock().await, offset);
    server.check_idle().await;
}

async fn answered(task: Option<tokio::task::JoinHandle<Outcome>>) {
    let Some(task) = task else { return };
    assert_eq!(task.await.expect("an append task panicked"), Outcome::Appended, "a pipelined chunk was refused");
}

fn write_time(chunk: &Chunk) -> Duration {
    Duration::from_millis(u64::from(chunk.write_ms) % 5_000)
}
