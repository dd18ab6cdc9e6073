//! Who listens to what: sockets bound to an account, and the keys each is subscribed to.
//!
//! Shared by the sockets (which subscribe before they read their replay, so nothing committed
//! after the read can be missed) and the hub (which looks up a key's subscribers for each event).
//! It lives behind one `std::sync::Mutex`: every operation is a few map lookups and no `.await`
//! happens while it is held.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rustc_hash::FxHashMap;
use tokio::sync::Notify;

use super::frames::OutFrame;
use crate::access::Role;

/// A socket's number, unique for the life of the server.
pub(crate) type SocketId = u64;

/// A socket's outgoing queue and its one wake-up: what the hub hands it, the bounds on what it may
/// hold, and the flags the pinger and shutdown raise (so a socket waits on one thing, not on a
/// timer and a shutdown signal of its own).
///
/// One allocation per socket, and nothing more until frames are queued: an idle socket costs a
/// few machine words here (ARCHITECTURE.md, "Bounded resources"). The hub pushes under a
/// lock held for one `VecDeque` push; the socket takes frames out the same way. Anything that
/// would take the queue past its slots or bytes marks the socket as fallen behind instead: it
/// closes (1013) and its client resumes from its cursor.
#[derive(Debug)]
pub(crate) struct Outbox {
    frames: Mutex<VecDeque<Arc<OutFrame>>>,
    /// Deliveries the queue may hold.
    slots: usize,
    /// Set when the socket fell behind: it must close.
    overflowed: AtomicBool,
    /// Set by the pinger: the socket pings its peer (or, silent too long, closes).
    ping_due: AtomicBool,
    /// Set when the server shuts down: the socket closes (1001).
    closing: AtomicBool,
    /// Wakes the socket's task: a delivery was queued, it fell behind, a ping is due, or the
    /// server is shutting down.
    pub notify: Notify,
    /// The bytes queued frames hold, against the socket's bound.
    bytes: AtomicUsize,
    bytes_max: usize,
    /// The account's counter of bytes queued for all its sockets, and its bound; set when the
    /// socket binds (nothing is queued for a socket before).
    account: OnceLock<(Arc<AtomicUsize>, usize)>,
}

// Every open socket has one, for its whole life: grow it knowingly.
const _: () = assert!(std::mem::size_of::<Outbox>() <= 128, "a socket's outbox grew");

/// Queues this short past their use keep no more room than this many deliveries.
const KEPT_SLOTS: usize = 8;

impl Outbox {
    /// An empty queue of at most `slots` deliveries and `bytes_max` bytes.
    pub(crate) fn new(slots: usize, bytes_max: usize) -> Self {
        Self {
            frames: Mutex::default(),
            slots: slots.max(1),
            overflowed: AtomicBool::new(false),
            ping_due: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            notify: Notify::new(),
            bytes: AtomicUsize::new(0),
            bytes_max,
            account: OnceLock::new(),
        }
    }

    /// Counts the queue's bytes against `account` too (of at most `account_max` bytes).
    pub(crate) fn bind(&self, account: Arc<AtomicUsize>, account_max: usize) {
        let _ = self.account.set((account, account_max));
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<Arc<OutFrame>>> {
        self.frames.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `frame` and wakes the socket, unless that would take the queue past its slots or
    /// its (or its account's) bytes: then the socket falls behind. `false` when it did.
    fn push(&self, frame: &Arc<OutFrame>) -> bool {
        if self.overflowed() || !self.take(frame.bytes()) {
            return false;
        }
        let queued = {
            let mut queue = self.queue();
            let room = queue.len() < self.slots;
            if room {
                queue.push_back(frame.clone());
            }
            room
        };
        if !queued {
            self.give(frame.bytes());
            return false;
        }
        self.notify.notify_one();
        true
    }

    /// The next queued delivery, its bytes given back.
    pub(crate) fn pop(&self) -> Option<Arc<OutFrame>> {
        let frame = {
            let mut queue = self.queue();
            let frame = queue.pop_front();
            if frame.is_none() && queue.capacity() > KEPT_SLOTS {
                queue.shrink_to(KEPT_SLOTS);
            }
            frame
        };
        if let Some(frame) = &frame {
            self.give(frame.bytes());
        }
        frame
    }

    /// Takes `bytes` for a frame about to be queued, unless that would pass either bound.
    fn take(&self, bytes: usize) -> bool {
        let socket = self.bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let account_over = match self.account.get() {
            Some((account, max)) => account.fetch_add(bytes, Ordering::AcqRel) + bytes > *max,
            None => false,
        };
        if socket > self.bytes_max || account_over {
            self.give(bytes);
            return false;
        }
        true
    }

    /// Gives back the `bytes` of a frame that left the queue.
    fn give(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if let Some((account, _)) = self.account.get() {
            account.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// Drops what is still queued and gives its bytes back (the socket closed). Call it only once
    /// the socket is out of the registry, so nothing is queued after.
    pub(crate) fn release(&self) {
        let dropped = std::mem::take(&mut *self.queue());
        drop(dropped);
        let left = self.bytes.swap(0, Ordering::AcqRel);
        if let Some((account, _)) = self.account.get() {
            account.fetch_sub(left, Ordering::AcqRel);
        }
    }

    /// Marks the socket as fallen behind and wakes it.
    pub(crate) fn overflow(&self) {
        self.overflowed.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Whether the socket fell behind.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    /// Tells the socket a ping is due.
    pub(crate) fn ping(&self) {
        self.ping_due.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Whether a ping is due (and it is no longer).
    pub(crate) fn take_ping(&self) -> bool {
        self.ping_due.swap(false, Ordering::AcqRel)
    }

    /// Tells the socket the server is shutting down.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Whether the server is shutting down.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Bytes queued for the socket now.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }
}

/// A socket bound to an account (by its first accepted `Subscribe`).
#[derive(Debug)]
pub(crate) struct Bound {
    /// The account every subscription of the socket acts for.
    pub account_id: Arc<str>,
    /// The protocol its client declared (the shape of its frames).
    pub protocol: u32,
    /// Its outgoing queue.
    pub outbox: Arc<Outbox>,
    /// Frames dropped server-wide because their socket fell behind (`/metrics`).
    pub dropped: Arc<AtomicU64>,
    /// The keys it is subscribed to (for limits and for removal).
    keys: Vec<Arc<str>>,
}

impl Bound {
    /// A socket of `account_id` speaking `protocol`, with no subscriptions yet.
    pub(crate) fn new(account_id: Arc<str>, protocol: u32, outbox: Arc<Outbox>, dropped: Arc<AtomicU64>) -> Self {
        Self { account_id, protocol, outbox, dropped, keys: Vec::new() }
    }

    /// Queues `frame`; a full queue, or one that would pass its byte bounds, marks the socket as
    /// fallen behind instead of waiting.
    pub(crate) fn send(&self, frame: &Arc<OutFrame>) {
        if !self.outbox.push(frame) {
            self.dropped.fetch_add(frame.parts().len() as u64, Ordering::Relaxed);
            self.outbox.overflow();
        }
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
    /// The socket is not bound to an account (it subscribes only once bound).
    NotBound,
}

/// The registry.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    // Maps keyed by socket id hash with Fx: the ids are the server's own counter, never a
    // client's choice, and the hub looks one up for every frame it hands to a socket.
    sockets: FxHashMap<SocketId, Bound>,
    /// Every open socket's queue, bound or not (for pings and shutdown).
    open: FxHashMap<SocketId, Arc<Outbox>>,
    keys: HashMap<Arc<str>, FxHashMap<SocketId, Sub>>,
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
    /// Counts a socket as open, until [`Self::remove_socket`].
    pub(crate) fn open(&mut self, socket: SocketId, outbox: Arc<Outbox>) {
        self.open.insert(socket, outbox);
    }

    /// Every open socket's queue.
    pub(crate) fn open_sockets(&self) -> impl Iterator<Item = &Outbox> {
        self.open.values().map(|outbox| &**outbox)
    }

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
        let keys = &mut self.sockets.get_mut(&socket).ok_or(Refused::NotBound)?.keys;
        let key: Arc<str> = match keys.iter().find(|known| &***known == key) {
            Some(known) => known.clone(),
            None if keys.len() >= limit => return Err(Refused::SocketFull),
            None => {
                let key: Arc<str> = Arc::from(key);
                // Most sockets follow one key: room for exactly that, not the four a push makes.
                keys.reserve_exact(1);
                keys.push(key.clone());
                key
            }
        };
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
        if let Some(bound) = self.sockets.get_mut(&socket) {
            bound.keys.retain(|known| &**known != key);
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
            pairs.remove(&(socket, Arc::from(key)));
            if pairs.is_empty() {
                self.by_agent.remove(agent);
            }
        }
    }

    /// Forgets a socket and all its subscriptions.
    pub(crate) fn remove_socket(&mut self, socket: SocketId) {
        self.open.remove(&socket);
        let Some(bound) = self.sockets.remove(&socket) else { return };
        for key in &bound.keys {
            if let Some(subscribers) = self.keys.get_mut(key) {
                if let Some(Sub { agent_id: Some(agent), .. }) = subscribers.remove(&socket)
                    && let Some(pairs) = self.by_agent.get_mut(&agent)
                {
                    pairs.remove(&(socket, key.clone()));
                    if pairs.is_empty() {
                        self.by_agent.remove(&agent);
                    }
                }
                if subscribers.is_empty() {
                    self.keys.remove(key);
                    if is_account_key(key) {
                        self.account_keys -= 1;
                    }
                }
            }
        }
        if let Some((count, _)) = self.per_account.get_mut(&bound.account_id) {
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

    fn bound(account: &str) -> Bound {
        bound_with(account, Outbox::new(1, usize::MAX))
    }

    /// A socket of `account` with `outbox`.
    fn bound_with(account: &str, outbox: Outbox) -> Bound {
        Bound::new(account.into(), 3, Arc::new(outbox), Arc::default())
    }

    #[test]
    fn queued_bytes_stay_within_the_socket_and_account_bounds() {
        let frame = |bytes: usize| OutFrame::plain("x".repeat(bytes).into());
        let account = Arc::new(AtomicUsize::new(0));
        let socket = |max: usize| {
            let outbox = Outbox::new(100, max);
            outbox.bind(account.clone(), 250);
            bound_with("alice", outbox)
        };
        let first = socket(100);
        for _ in 0..3 {
            first.send(&frame(30));
        }
        assert!(!first.outbox.overflowed());
        first.send(&frame(30));
        assert!(first.outbox.overflowed(), "a fourth frame of 30 bytes would pass the socket's 100");
        assert_eq!((first.outbox.queued(), account.load(Ordering::Acquire)), (90, 90));
        // A frame that leaves the queue gives its bytes back.
        assert!(first.outbox.pop().is_some());
        assert_eq!((first.outbox.queued(), account.load(Ordering::Acquire)), (60, 60));

        // The account's total bounds its sockets together.
        let second = socket(1000);
        for _ in 0..6 {
            second.send(&frame(30));
        }
        assert!(!second.outbox.overflowed());
        second.send(&frame(30));
        assert!(second.outbox.overflowed(), "the account's 250 bytes, not the socket's 1000, stopped it");
        assert_eq!((second.outbox.queued(), account.load(Ordering::Acquire)), (180, 240));
        // A closed socket gives back what it still had queued.
        first.outbox.release();
        second.outbox.release();
        assert_eq!(account.load(Ordering::Acquire), 0);
        assert!(second.outbox.pop().is_none(), "a released queue holds nothing");
    }

    #[test]
    fn a_drained_queue_gives_back_the_room_a_burst_took() {
        let outbox = Outbox::new(1024, usize::MAX);
        let frame = OutFrame::plain("{}".to_owned().into());
        for _ in 0..500 {
            assert!(outbox.push(&frame));
        }
        assert!(outbox.queue().capacity() >= 500);
        while outbox.pop().is_some() {}
        assert!(outbox.queue().capacity() <= KEPT_SLOTS);
    }

    fn sub(agent: &str) -> Sub {
        Sub { agent_id: Some(agent.into()), role: Role::Reader, member: true }
    }

    #[test]
    fn limits_and_removal_keep_every_index_consistent() {
        let mut registry = Registry::default();
        assert_eq!(registry.subscribe(1, "agents/x", sub("x"), 2), Err(Refused::NotBound));
        registry.bind(1, bound("alice"), 2).unwrap();
        registry.bind(2, bound("alice"), 2).unwrap();
        assert_eq!(registry.bind(3, bound("alice"), 2), Err(Refused::AccountFull));
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
        // Unsubscribed, the key no longer counts against the socket's limit.
        registry.subscribe(1, "agents/y", sub("y"), 2).unwrap();
        registry.open(1, Arc::new(Outbox::new(1, 1)));
        registry.open(4, Arc::new(Outbox::new(1, 1)));
        assert_eq!(registry.open_sockets().count(), 2);
        registry.remove_socket(1);
        registry.remove_socket(2);
        registry.remove_socket(4);
        assert_eq!(registry.open_sockets().count(), 0);
        assert_eq!(registry.counts(), (0, 0));
        assert!(!registry.has_account_keys());
        assert!(registry.of_agent("x").is_empty() && !registry.has("sessions/s"));
        assert!(registry.per_account.is_empty() && registry.by_agent.is_empty());
        registry.bind(3, bound("alice"), 1).unwrap();
    }

    #[test]
    fn a_full_queue_marks_the_socket_instead_of_waiting() {
        let bound = bound("alice");
        let frame = OutFrame::plain("{}".to_owned().into());
        bound.send(&frame);
        assert!(!bound.outbox.overflowed());
        bound.send(&frame);
        assert!(bound.outbox.overflowed());
        assert_eq!(bound.dropped.load(Ordering::Relaxed), 1);
    }
}
