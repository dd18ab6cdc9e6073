//! Pipelined appends: a chunk that arrives ahead of its predecessor waits for it (the server's
//! `uploads` feature holds one [`AppendOrder`] in its `App`).
//!
//! A client may send chunk N+1 before chunk N is answered (the SDK keeps two in flight, so
//! signing and sending the next chunk overlap the server's write and fsync of this one). The two
//! requests race for the staging file's lock; when N+1 wins, its offset is ahead of `received`.
//! Instead of refusing it, the append releases the lock and waits until an append at the
//! expected offset finishes (successfully or not; a misplaced chunk's 409 does not count), then
//! looks again — and only then answers 409 if the offset still does not match.
//!
//! How long it waits depends on whether its predecessor is plausibly coming: while another
//! append on the upload is in the server (verified, not yet answered), up to [`WAIT`]; when none
//! is, only the short arrival grace (the predecessor may still be on the wire or being
//! verified), so a client that skips ahead by mistake hears its 409 quickly.
//!
//! Bounds: one waiter per upload (a second chunk ahead, or a chunk further ahead while one
//! waits, gets the 409 at once), and a chunk is checked (non-empty, at most 8 MiB) before it may
//! wait. Other appends to the same upload queue on its staging lock, as any concurrent requests
//! do; the waiting place only decides who may wait for a predecessor instead of failing.
//!
//! A waiter whose grace ends while its predecessor has meanwhile entered the server keeps
//! waiting, up to [`WAIT`] in all.
//!
//! No wakeup is lost: the waiter takes its slot while it holds the staging lock, and the append
//! it waits for takes that lock after it, so its finish is always seen.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

/// How long a chunk that is ahead waits while another append on its upload is in the server.
pub const WAIT: Duration = Duration::from_secs(30);

/// How long it waits when no other append is in the server yet (its predecessor may be on the
/// wire, or being verified).
pub const ARRIVAL_GRACE: Duration = Duration::from_secs(2);

/// Appends in the server, per upload, and the chunks waiting for a predecessor.
#[derive(Debug)]
pub struct AppendOrder {
    uploads: Mutex<HashMap<String, Slot>>,
    /// [`ARRIVAL_GRACE`], shorter in tests of sequences that skip ahead on purpose.
    grace: Duration,
    /// Counts the waiting places taken, so [`AppendOrder::waiting`] can watch for one.
    reserved: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Appends between verification and their answer.
    in_flight: usize,
    /// The waiting chunk's wakeup: how many appends at the expected offset finished.
    waiter: Option<watch::Sender<u64>>,
}

impl Default for AppendOrder {
    fn default() -> Self {
        AppendOrder::with_grace(ARRIVAL_GRACE)
    }
}

impl AppendOrder {
    /// An order with another arrival grace.
    pub fn with_grace(grace: Duration) -> Self {
        AppendOrder { uploads: Mutex::default(), grace, reserved: watch::channel(0).0 }
    }

    /// Counts an append as in the server until the returned guard drops.
    pub fn enter<'a>(&'a self, upload_id: &str) -> InFlight<'a> {
        self.lock().entry(upload_id.to_owned()).or_default().in_flight += 1;
        InFlight { order: self, upload_id: upload_id.to_owned() }
    }

    /// Takes the upload's waiting place; `None` when another chunk already holds it. Call with
    /// the staging lock held, from an append that [`entered`](Self::enter).
    pub fn reserve<'a>(&'a self, upload_id: &str) -> Option<Waiter<'a>> {
        let mut uploads = self.lock();
        let slot = uploads.entry(upload_id.to_owned()).or_default();
        if slot.waiter.is_some() {
            return None;
        }
        let (sender, finished) = watch::channel(0);
        slot.waiter = Some(sender);
        let bound = if slot.in_flight > 1 { WAIT } else { self.grace };
        self.reserved.send_modify(|count| *count += 1);
        Some(Waiter { order: self, upload_id: upload_id.to_owned(), finished, bound })
    }

    /// Resolves once a chunk holds the upload's waiting place (at once if one does now): what a
    /// test waits for before it sends the chunk that must find the place taken.
    pub async fn waiting(&self, upload_id: &str) {
        let mut reserved = self.reserved.subscribe();
        // Subscribed before looking: a place taken after the look is a change still to be seen.
        while self.lock().get(upload_id).is_none_or(|slot| slot.waiter.is_none()) {
            if reserved.changed().await.is_err() {
                return;
            }
        }
    }

    /// Appends on the upload in the server now (the asking waiter's own included).
    fn in_flight(&self, upload_id: &str) -> usize {
        self.lock().get(upload_id).map_or(0, |slot| slot.in_flight)
    }

    /// A guard that, when dropped, records that this append at the upload's expected offset
    /// finished (either way).
    pub fn on_finish<'a>(&'a self, upload_id: &'a str) -> Finished<'a> {
        Finished { order: self, upload_id }
    }

    /// Records that an append at the upload's expected offset finished (either way).
    fn finished(&self, upload_id: &str) {
        if let Some(waiter) = self.lock().get(upload_id).and_then(|slot| slot.waiter.as_ref()) {
            waiter.send_modify(|count| *count += 1);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        // Every change leaves the map consistent, so a panic elsewhere while it was held does
        // not make it unusable.
        self.uploads.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies `change` to the upload's slot and forgets the slot once it is idle.
    fn update(&self, upload_id: &str, change: impl FnOnce(&mut Slot)) {
        let mut uploads = self.lock();
        if let Some(slot) = uploads.get_mut(upload_id) {
            change(slot);
            if slot.in_flight == 0 && slot.waiter.is_none() {
                uploads.remove(upload_id);
            }
        }
    }
}

/// An append in the server; dropping it ends that.
#[derive(Debug)]
pub struct InFlight<'a> {
    order: &'a AppendOrder,
    upload_id: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.order.update(&self.upload_id, |slot| slot.in_flight = slot.in_flight.saturating_sub(1));
    }
}

/// Wakes the chunk waiting behind an append when dropped (see [`AppendOrder::on_finish`]).
#[derive(Debug)]
pub struct Finished<'a> {
    order: &'a AppendOrder,
    upload_id: &'a str,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.order.finished(self.upload_id);
    }
}

/// A chunk's waiting place; dropping it frees the place.
#[derive(Debug)]
pub struct Waiter<'a> {
    order: &'a AppendOrder,
    upload_id: String,
    finished: watch::Receiver<u64>,
    bound: Duration,
}

impl Waiter<'_> {
    /// Waits until an append at the expected offset finishes, or the bound passes. When the
    /// grace ends with another append now in the server, waits on for it, up to [`WAIT`] in all.
    pub async fn wait(mut self) {
        let started = tokio::time::Instant::now();
        let mut bound = self.bound;
        loop {
            let finished = self.finished.wait_for(|count| *count > 0);
            if tokio::time::timeout(bound, finished).await.is_ok() {
                return;
            }
            let elapsed = started.elapsed();
            if elapsed >= WAIT || self.order.in_flight(&self.upload_id) <= 1 {
                return;
            }
            bound = WAIT - elapsed;
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.order.update(&self.upload_id, |slot| slot.waiter = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_waiter_per_upload_woken_by_a_finish() {
        let order = AppendOrder::default();
        let (_first, _second) = (order.enter("u"), order.enter("u"));
        let waiter = order.reserve("u").expect("the place is free");
        assert_eq!(waiter.bound, WAIT, "another append is in the server");
        assert!(order.reserve("u").is_none(), "a second chunk ahead is refused");
        let _other = order.enter("v");
        assert!(order.reserve("v").is_some(), "other uploads are independent");
        order.finished("u");
        waiter.wait().await; // returns at once: the finish was recorded before waiting
        assert!(order.reserve("u").is_some(), "the place is free again after the wait");
    }

    #[tokio::test]
    async fn alone_a_chunk_ahead_waits_only_the_grace() {
        let order = AppendOrder::with_grace(Duration::from_millis(20));
        let _me = order.enter("u");
        let waiter = order.reserve("u").expect("free");
        assert_eq!(waiter.bound, Duration::from_millis(20));
        let started = std::time::Instant::now();
        waiter.wait().await;
        assert!(started.elapsed() >= Duration::from_millis(20));
        order.finished("nobody waits"); // a finish with no waiter is a no-op
    }

    #[tokio::test]
    async fn a_predecessor_entering_during_the_grace_extends_the_wait() {
        let order = AppendOrder::with_grace(Duration::from_millis(20));
        let _me = order.enter("u");
        let waiter = order.reserve("u").expect("free");
        let _predecessor = order.enter("u"); // arrived after the waiter took its place
        let wait = waiter.wait();
        tokio::pin!(wait);
        // Well past the grace, the waiter still waits (for the predecessor's finish).
        assert!(tokio::time::timeout(Duration::from_millis(200), &mut wait).await.is_err());
        order.finished("u");
        wait.await;
    }

    #[tokio::test]
    async fn a_taken_waiting_place_is_seen_whenever_it_is_taken() {
        let order = AppendOrder::default();
        let _append = order.enter("u");
        let seen = order.waiting("u");
        tokio::pin!(seen);
        assert!(futures_util::FutureExt::now_or_never(seen.as_mut()).is_none(), "nobody waits yet");
        let _waiter = order.reserve("u").expect("free");
        seen.await;
        order.waiting("u").await; // taken already: resolves at once
    }

    #[test]
    fn idle_uploads_are_forgotten() {
        let order = AppendOrder::default();
        {
            let _append = order.enter("u");
            let _waiter = order.reserve("u");
        }
        assert!(order.lock().is_empty());
    }
}
