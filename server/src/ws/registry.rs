//! Who listens to what: sockets bound to an account, and the keys each is subscribed to.
//!
//! Shared by the sockets (which subscribe before they read their replay, so nothing committed
//! after the read can be missed) and the hub (which looks up a key's subscribers for each event).
//! It lives behind one `std::sync::Mutex`: every operation is a few map lookups and no `.await`
//! happens while it is held.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use rustc_hash::FxHashMap;
use tokio::sync::{Notify, mpsc};

use super::frames::OutFrame;
use crate::access::Role;

/// A socket's number, unique for the life of the server.
pub(crate) type SocketId = u64;

/// What the hub can tell a socket without going through its (possibly full) queue.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Set when the socket's queue overflowed: it must close, its client resumes from its cursor.
    overflowed: AtomicBool,
    /// Wakes the socket's task.
    pub notify: Notify,
}

impl Signal {
    /// Marks the socket as fallen behind and wakes it.
    pub(crate) fn overflow(&self) {
        self.overflowed.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Whether the socket fell behind.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }
}

/// The bytes of frames queued for one socket, counted against its own bound and its account's
/// total (schema/PROTOCOL.md, "Limits, with codes"): a frame that would take either past its bound is not
/// queued, and the socket counts as fallen behind.
#[derive(Debug)]
pub(crate) struct Budget {
    socket: AtomicUsize,
    socket_max: usize,
    account: Arc<AtomicUsize>,
    account_max: usize,
}

impl Budget {
    /// A socket's budget of `socket_max` bytes, within its account's `account` counter of
    /// `account_max`.
    pub(crate) fn new(socket_max: usize, account: Arc<AtomicUsize>, account_max: usize) -> Self {
        Self { socket: AtomicUsize::new(0), socket_max, account, account_max }
    }

    /// Takes `bytes` for a frame about to be queued, unless that would pass either bound.
    fn take(&self, bytes: usize) -> bool {
        let socket = self.socket.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let account = self.account.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if socket > self.socket_max || account > self.account_max {
            self.give(bytes);
            return false;
        }
        true
    }

    /// Gives back the `bytes` of a frame that left the queue.
    pub(crate) fn give(&self, bytes: usize) {
        self.socket.fetch_sub(bytes, Ordering::AcqRel);
        self.account.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Gives back whatever the socket still had queued (it closed; its queue is dropped). Call it
    /// only once the socket is out of the registry, so nothing is queued after.
    pub(crate) fn release(&self) {
        let left = self.socket.swap(0, Ordering::AcqRel);
        self.account.fetch_sub(left, Ordering::AcqRel);
    }

    /// Bytes queued for the socket now.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.socket.load(Ordering::Acquire)
    }
}

/// A socket bound to an account (by its first accepted `Subscribe`).
#[derive(Debug)]
pub(crate) struct Bound {
    /// The account every subscription of the socket acts for.
    pub account_id: Arc<str>,
    /// The protocol its client declared (the shape of its frames).
    pub protocol: u32,
    /// Frames for the socket's task to send.
    pub queue: mpsc::Sender<Arc<OutFrame>>,
    /// What the queued frames may weigh.
    pub budget: Arc<Budget>,
    /// Out-of-band wake-ups.
    pub signal: Arc<Signal>,
    /// Frames dropped server-wide because their socket fell behind (`/metrics`).
    pub dropped: Arc<AtomicU64>,
}

impl Bound {
    /// Queues `frame`; a full queue, or one that would pass its byte bounds, marks the socket as
    /// fallen behind instead of waiting.
    pub(crate) fn send(&self, frame: &Arc<OutFrame>) {
        let bytes = frame.bytes();
        if !self.budget.take(bytes) {
            self.fell_behind(frame);
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(_) | mpsc::error::TrySendError::Closed(_)) =
            self.queue.try_send(frame.clone())
        {
            self.budget.give(bytes);
            self.fell_behind(frame);
        }
    }

    /// `frame` was not queued: it counts as dropped and the socket as fallen behind.
    fn fell_behind(&self, frame: &OutFrame) {
        self.dropped.fetch_add(frame.parts().len() as u64, Ordering::Relaxed);
        self.signal.overflow();
    }
}

/// How one socket is subscribed to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sub {
    /// The agent the key belongs to (`None` for `account/<id>`).
    pub agent_id: Option<Arc<str>>,
    /// The subscriber's role on that agent.
    pub role: Role,
    /// Whether the role comes from ownership or membership rather than public access.
    pub member: bool,
}

/// Why a subscription could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The account has as many bound sockets as it may.
    AccountFull,
    /// The socket has as many subscriptions as it may.
    SocketFull,
}

/// The registry.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    // Maps keyed by socket id hash with Fx: the ids are the server's own counter, never a
    // client's choice, and the hub looks one up for every frame it hands to a socket.
    sockets: FxHashMap<SocketId, Bound>,
    keys: HashMap<Arc<str>, FxHashMap<SocketId, Sub>>,
    /// Keys per socket (for limits and for removal).
    by_socket: FxHashMap<SocketId, HashSet<Arc<str>>>,
    /// `(socket, key)` pairs per agent (for revocation).
    by_agent: HashMap<Arc<str>, HashSet<(SocketId, Arc<str>)>>,
    /// Bound sockets per account, and the bytes queued for all of them.
    per_account: HashMap<Arc<str>, (usize, Arc<AtomicUsize>)>,
    /// How many `account/<id>` keys have subscribers.
    account_keys: usize,
}

fn is_account_key(key: &str) -> bool {
    key.starts_with("account/")
}

impl Registry {
    /// Binds `socket` to its account, unless the account already has `limit` sockets.
    pub(crate) fn bind(&mut self, socket: SocketId, bound: Bound, limit: usize) -> Result<(), Refused> {
        let (count, _) = self.per_account.entry(bound.account_id.clone()).or_default();
        if *count >= limit {
            return Err(Refused::AccountFull);
        }
        *count += 1;
        self.sockets.insert(socket, bound);
        Ok(())
    }

    /// The counter of bytes queued for all of `account`'s sockets (for a socket about to bind).
    pub(crate) fn account_bytes(&mut self, account: &Arc<str>) -> Arc<AtomicUsize> {
        self.per_account.entry(account.clone()).or_default().1.clone()
    }

    /// The bound socket `socket`.
    pub(crate) fn socket(&self, socket: SocketId) -> Option<&Bound> {
        self.sockets.get(&socket)
    }

    /// Subscribes a bound socket to `key` (again: its access is refreshed), unless it already has
    /// `limit` other keys.
    pub(crate) fn subscribe(&mut self, socket: SocketId, key: &str, sub: Sub, limit: usize) -> Result<(), Refused> {
        let keys = self.by_socket.entry(socket).or_default();
        if !keys.contains(key) && keys.len() >= limit {
            return Err(Refused::SocketFull);
        }
        let key: Arc<str> = keys.get(key).cloned().unwrap_or_else(|| Arc::from(key));
        keys.insert(key.clone());
        if let Some(agent) = &sub.agent_id {
            self.by_agent.entry(agent.clone()).or_default().insert((socket, key.clone()));
        }
        let subscribers = self.keys.entry(key.clone()).or_default();
        if subscribers.is_empty() && is_account_key(&key) {
            self.account_keys += 1;
        }
        subscribers.insert(socket, sub);
        Ok(())
    }

    /// Drops one subscription.
    pub(crate) fn unsubscribe(&mut self, socket: SocketId, key: &str) {
        if let Some(keys) = self.by_socket.get_mut(&socket) {
            keys.remove(key);
        }
        let Some(subscribers) = self.keys.get_mut(key) else { return };
        let Some(sub) = subscribers.remove(&socket) else { return };
        if subscribers.is_empty() {
            self.keys.remove(key);
            if is_account_key(key) {
                self.account_keys -= 1;
            }
        }
        if let Some(agent) = &sub.agent_id
            && let Some(pairs) = self.by_agent.get_mut(agent)
        {
            pairs.retain(|(id, pair_key)| !(*id == socket && &**pair_key == key));
            if pairs.is_empty() {
                self.by_agent.remove(agent);
            }
        }
    }

    /// Forgets a socket and all its subscriptions.
    pub(crate) fn remove_socket(&mut self, socket: SocketId) {
        for key in self.by_socket.remove(&socket).unwrap_or_default() {
            if let Some(subscribers) = self.keys.get_mut(&key) {
                if let Some(Sub { agent_id: Some(agent), .. }) = subscribers.remove(&socket)
                    && let Some(pairs) = self.by_agent.get_mut(&agent)
                {
                    pairs.remove(&(socket, key.clone()));
                    if pairs.is_empty() {
                        self.by_agent.remove(&agent);
                    }
                }
                if subscribers.is_empty() {
                    self.keys.remove(&key);
                    if is_account_key(&key) {
                        self.account_keys -= 1;
                    }
                }
            }
        }
        if let Some(bound) = self.sockets.remove(&socket)
            && let Some((count, _)) = self.per_account.get_mut(&bound.account_id)
        {
            *count -= 1;
            if *count == 0 {
                self.per_account.remove(&bound.account_id);
            }
        }
    }

    /// The subscribers of `key`.
    pub(crate) fn subscribers(&self, key: &str) -> impl Iterator<Item = (SocketId, &Sub)> {
        self.keys.get(key).into_iter().flat_map(|subscribers| subscribers.iter().map(|(id, sub)| (*id, sub)))
    }

    /// Whether any socket listens to an `account/<id>` key.
    pub(crate) fn has_account_keys(&self) -> bool {
        self.account_keys > 0
    }

    /// Whether anyone listens to `key`.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// Every `(socket, key, subscription)` that depends on access to `agent`.
    pub(crate) fn of_agent(&self, agent: &str) -> Vec<(SocketId, Arc<str>, Sub)> {
        let Some(pairs) = self.by_agent.get(agent) else { return Vec::new() };
        pairs
            .iter()
            .filter_map(|(socket, key)| {
                let sub = self.keys.get(key)?.get(socket)?;
                Some((*socket, key.clone(), sub.clone()))
            })
            .collect()
    }

    /// Every bound socket.
    pub(crate) fn sockets(&self) -> impl Iterator<Item = (SocketId, &Bound)> {
        self.sockets.iter().map(|(id, bound)| (*id, bound))
    }

    /// Bound sockets and subscriptions.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        (self.sockets.len(), self.keys.values().map(|subscribers| subscribers.len()).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(account: &str) -> (Bound, mpsc::Receiver<Arc<OutFrame>>) {
        bound_with(account, 1, Budget::new(usize::MAX, Arc::default(), usize::MAX))
    }

    /// A socket of `account` with a queue of `frames` slots and `budget`.
    fn bound_with(account: &str, frames: usize, budget: Budget) -> (Bound, mpsc::Receiver<Arc<OutFrame>>) {
        let (queue, frames) = mpsc::channel(frames);
        let bound = Bound {
            account_id: account.into(),
            protocol: 3,
            queue,
            budget: Arc::new(budget),
            signal: Arc::default(),
            dropped: Arc::default(),
        };
        (bound, frames)
    }

    #[test]
    fn queued_bytes_stay_within_the_socket_and_account_bounds() {
        let frame = |bytes: usize| OutFrame::plain("x".repeat(bytes).into());
        let account = Arc::new(AtomicUsize::new(0));
        let socket = |max: usize| bound_with("alice", 100, Budget::new(max, account.clone(), 250));
        let (first, mut first_frames) = socket(100);
        for _ in 0..3 {
            first.send(&frame(30));
        }
        assert!(!first.signal.overflowed());
        first.send(&frame(30));
        assert!(first.signal.overflowed(), "a fourth frame of 30 bytes would pass the socket's 100");
        assert_eq!((first.budget.queued(), account.load(Ordering::Acquire)), (90, 90));
        // A frame that leaves the queue gives its bytes back.
        let sent = first_frames.try_recv().unwrap();
        first.budget.give(sent.bytes());
        assert_eq!((first.budget.queued(), account.load(Ordering::Acquire)), (60, 60));

        // The account's total bounds its sockets together.
        let (second, _second_frames) = socket(1000);
        for _ in 0..6 {
            second.send(&frame(30));
        }
        assert!(!second.signal.overflowed());
        second.send(&frame(30));
        assert!(second.signal.overflowed(), "the account's 250 bytes, not the socket's 1000, stopped it");
        assert_eq!((second.budget.queued(), account.load(Ordering::Acquire)), (180, 240));
        // A closed socket gives back what it still had queued.
        first.budget.release();
        second.budget.release();
        assert_eq!(account.load(Ordering::Acquire), 0);
    }

    fn sub(agent: &str) -> Sub {
        Sub { agent_id: Some(agent.into()), role: Role::Reader, member: true }
    }

    #[test]
    fn limits_and_removal_keep_every_index_consistent() {
        let mut registry = Registry::default();
        let (first, _a) = bound("alice");
        let (second, _b) = bound("alice");
        registry.bind(1, first, 2).unwrap();
        registry.bind(2, second, 2).unwrap();
        assert_eq!(registry.bind(3, bound("alice").0, 2), Err(Refused::AccountFull));
        registry.subscribe(1, "agents/x", sub("x"), 2).unwrap();
        registry.subscribe(1, "sessions/s", sub("x"), 2).unwrap();
        registry.subscribe(1, "sessions/s", sub("x"), 2).unwrap();
        assert_eq!(registry.subscribe(1, "agents/y", sub("y"), 2), Err(Refused::SocketFull));
        registry.subscribe(2, "account/alice", Sub { agent_id: None, role: Role::Owner, member: true }, 2).unwrap();
        assert!(registry.has_account_keys());
        registry.subscribe(2, "sessions/s", sub("x"), 3).unwrap();
        assert_eq!(registry.subscribers("sessions/s").count(), 2);
        assert_eq!(registry.of_agent("x").len(), 3);
        registry.unsubscribe(1, "sessions/s");
        assert_eq!(registry.of_agent("x").len(), 2);
        registry.remove_socket(1);
        registry.remove_socket(2);
        assert_eq!(registry.counts(), (0, 0));
        assert!(!registry.has_account_keys());
        assert!(registry.of_agent("x").is_empty() && !registry.has("sessions/s"));
        assert!(registry.per_account.is_empty() && registry.by_socket.is_empty() && registry.by_agent.is_empty());
        registry.bind(3, bound("alice").0, 1).unwrap();
    }

    #[test]
    fn a_full_queue_marks_the_socket_instead_of_waiting() {
        let (bound, _frames) = bound("alice");
        let frame = OutFrame::plain("{}".to_owned().into());
        bound.send(&frame);
        assert!(!bound.signal.overflowed());
        bound.send(&frame);
        assert!(bound.signal.overflowed());
    }
}
