//! Who listens to what: sockets bound to an account, and the keys each is subscribed to.
//!
//! Shared by the sockets (which subscribe before they read their replay, so nothing committed
//! after the read can be missed) and the hub (which looks up a key's subscribers for each event).
//! It lives behind one `std::sync::Mutex`: every operation is a few map lookups and no `.await`
//! happens while it is held.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// A socket bound to an account (by its first accepted `Subscribe`).
#[derive(Debug)]
pub(crate) struct Bound {
    /// The account every subscription of the socket acts for.
    pub account_id: Arc<str>,
    /// The protocol its client declared (the shape of its frames).
    pub protocol: u32,
    /// Frames for the socket's task to send.
    pub queue: mpsc::Sender<Arc<OutFrame>>,
    /// Out-of-band wake-ups.
    pub signal: Arc<Signal>,
}

impl Bound {
    /// Queues `frame`; a full queue marks the socket as fallen behind instead of waiting.
    pub(crate) fn send(&self, frame: &Arc<OutFrame>) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.queue.try_send(frame.clone()) {
            self.signal.overflow();
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
}

/// The registry.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    sockets: HashMap<SocketId, Bound>,
    keys: HashMap<Arc<str>, HashMap<SocketId, Sub>>,
    /// Keys per socket (for limits and for removal).
    by_socket: HashMap<SocketId, HashSet<Arc<str>>>,
    /// `(socket, key)` pairs per agent (for revocation).
    by_agent: HashMap<Arc<str>, HashSet<(SocketId, Arc<str>)>>,
    /// Bound sockets per account.
    per_account: HashMap<Arc<str>, usize>,
    /// How many `account/<id>` keys have subscribers.
    account_keys: usize,
}

fn is_account_key(key: &str) -> bool {
    key.starts_with("account/")
}

impl Registry {
    /// Binds `socket` to its account, unless the account already has `limit` sockets.
    pub(crate) fn bind(&mut self, socket: SocketId, bound: Bound, limit: usize) -> Result<(), Refused> {
        let count = self.per_account.entry(bound.account_id.clone()).or_default();
        if *count >= limit {
            return Err(Refused::AccountFull);
        }
        *count += 1;
        self.sockets.insert(socket, bound);
        Ok(())
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
            && let Some(count) = self.per_account.get_mut(&bound.account_id)
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
        (self.sockets.len(), self.keys.values().map(HashMap::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(account: &str) -> (Bound, mpsc::Receiver<Arc<OutFrame>>) {
        let (queue, frames) = mpsc::channel(1);
        (Bound { account_id: account.into(), protocol: 3, queue, signal: Arc::default() }, frames)
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
