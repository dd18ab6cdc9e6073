//! Pipelined appends: a chunk that arrives ahead of its predecessor waits for it.
//!
//! A client may send chunk N+1 before chunk N is answered (the SDK keeps two in flight, so
//! signing and sending the next chunk overlap the server's write and fsync of this one). The two
//! requests race for the staging file's lock; when N+1 wins, its offset is ahead of `received`.
//! Instead of refusing it, the append releases the lock and waits until an append at the
//! expected offset finishes (successfully or not; a misplaced chunk's 409 does not count), then
//! looks again — and only then answers 409 if the offset still does not match.
//!
//! Bounds: one waiter per upload (a second chunk ahead, or a chunk further ahead while one
//! waits, gets the 409 at once), and the wait ends after [`WAIT`] even if nothing finished (a
//! predecessor that never arrives). So at most one extra chunk per upload is held in memory.
//!
//! No wakeup is lost: the waiter takes its slot while it holds the staging lock, and an append
//! reports that it finished while it holds that lock, so every finish after the waiter looked
//! at `received` is seen.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

/// How long a chunk that is ahead waits for its predecessor.
pub const WAIT: Duration = Duration::from_secs(30);

/// Uploads with a chunk waiting for its predecessor.
#[derive(Debug, Default)]
pub struct AppendOrder {
    /// Upload id → how many appends on it finished since its waiter arrived.
    waiting: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl AppendOrder {
    /// Takes the upload's waiting slot; `None` when another chunk already holds it. Call with
    /// the staging lock held.
    pub fn reserve<'a>(&'a self, upload_id: &str) -> Option<Waiter<'a>> {
        let mut waiting = self.lock();
        if waiting.contains_key(upload_id) {
            return None;
        }
        let (sender, receiver) = watch::channel(0);
        waiting.insert(upload_id.to_owned(), sender);
        Some(Waiter { order: self, upload_id: upload_id.to_owned(), finished: receiver })
    }

    /// Records that an append at the upload's expected offset finished (either way).
    pub fn finished(&self, upload_id: &str) {
        if let Some(sender) = self.lock().get(upload_id) {
            sender.send_modify(|count| *count += 1);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // The map is only ever left consistent (single inserts and removals), so a panic
        // elsewhere while it was held does not make it unusable.
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A chunk's place in line; dropping it frees the upload's slot.
#[derive(Debug)]
pub struct Waiter<'a> {
    order: &'a AppendOrder,
    upload_id: String,
    finished: watch::Receiver<u64>,
}

impl Waiter<'_> {
    /// Waits until an append on the upload finishes, or `bound` ([`WAIT`] in the server)
    /// passes.
    pub async fn wait(mut self, bound: Duration) {
        let _ = tokio::time::timeout(bound, self.finished.wait_for(|count| *count > 0)).await;
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.order.lock().remove(&self.upload_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_waiter_per_upload_woken_by_a_finish() {
        let order = AppendOrder::default();
        let waiter = order.reserve("u").expect("the slot is free");
        assert!(order.reserve("u").is_none(), "a second chunk ahead is refused");
        assert!(order.reserve("v").is_some(), "other uploads are independent");
        order.finished("u");
        waiter.wait(WAIT).await; // returns at once: the finish was recorded before waiting
        assert!(order.reserve("u").is_some(), "the slot is free again after the wait");
    }

    #[tokio::test]
    async fn a_wait_with_no_finish_ends_after_the_bound() {
        let order = AppendOrder::default();
        let bound = Duration::from_millis(20);
        let started = std::time::Instant::now();
        order.reserve("u").expect("free").wait(bound).await;
        assert!(started.elapsed() >= bound);
        order.finished("nobody waits"); // a finish with no waiter is a no-op
        assert!(order.reserve("u").is_some());
    }
}
