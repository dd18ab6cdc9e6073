//! The live-update state shared by the upgrade route, the sockets and the hub, and its bounds.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

use super::registry::{Outbox, Registry, SocketId};
use crate::config::Config;

/// How sockets are bounded (from the configuration).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WsLimits {
    /// Sockets open at once on the server.
    pub max_sockets: usize,
    /// Sockets one account may have bound at once.
    pub per_account: usize,
    /// Subscriptions one socket may hold.
    pub subscriptions: usize,
    /// Frames queued for one socket before it counts as fallen behind.
    pub queue_frames: usize,
    /// Bytes of frames queued for one socket before it counts as fallen behind.
    pub queue_bytes: usize,
    /// Bytes of frames queued for all of one account's sockets together.
    pub account_queue_bytes: usize,
    /// How often a socket pings its peer.
    pub ping_interval: Duration,
    /// How long one frame may take to go out before the peer counts as gone.
    pub send_timeout: Duration,
}

impl WsLimits {
    /// The limits `config` sets.
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            max_sockets: config.ws_max_sockets,
            per_account: config.ws_per_account,
            subscriptions: config.ws_subscriptions,
            queue_frames: config.ws_queue,
            queue_bytes: config.ws_queue_bytes,
            account_queue_bytes: config.ws_account_queue_bytes,
            ping_interval: config.ws_ping_interval,
            send_timeout: config.body_timeout,
        }
    }
}

/// The live-update state shared by the upgrade route, the sockets and the hub.
#[derive(Debug)]
pub(crate) struct Live {
    registry: Mutex<Registry>,
    /// How sockets are bounded.
    pub limits: WsLimits,
    /// One permit per open socket.
    pub(super) sockets: Arc<Semaphore>,
    pub(super) next_id: AtomicU64,
    /// `true` once shutdown started: sockets close with 1001.
    pub(super) shutdown: watch::Sender<bool>,
    /// Frames dropped because their socket fell behind (`/metrics`).
    pub(crate) dropped: Arc<AtomicU64>,
}

impl Live {
    /// No sockets yet.
    pub(crate) fn new(limits: WsLimits) -> Self {
        let max_sockets = limits.max_sockets.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Self {
            registry: Mutex::default(),
            limits: WsLimits { max_sockets, ..limits },
            sockets: Arc::new(Semaphore::new(max_sockets)),
            next_id: AtomicU64::new(1),
            shutdown: watch::channel(false).0,
            dropped: Arc::default(),
        }
    }

    /// The registry (held briefly; never across an `.await`).
    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Changes to `true` when the server starts shutting down.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Sockets open right now.
    pub(crate) fn open_sockets(&self) -> usize {
        self.limits.max_sockets - self.sockets.available_permits()
    }

    /// Counts a socket as open, unless the server is shutting down (`false`: it closes at once).
    pub(crate) fn open(&self, socket: SocketId, outbox: Arc<Outbox>) -> bool {
        let mut registry = self.registry();
        registry.open(socket, outbox);
        // Under the lock `shut_down` takes after raising the flag: a socket opened before it
        // looked is told by it, one opened after sees the flag here.
        !*self.shutdown.borrow()
    }

    /// Every `ping_interval`, tells each open socket to ping its peer, until shutdown. One timer
    /// for all of them instead of one each (ARCHITECTURE.md, "Bounded resources").
    pub(crate) async fn pinger(self: Arc<Self>) {
        let interval = self.limits.ping_interval;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown_signal();
        loop {
            tokio::select! {
                _ = ticks.tick() => self.registry().open_sockets().for_each(Outbox::ping),
                _ = shutdown.wait_for(|closing| *closing) => return,
            }
        }
    }

    /// Closes every socket with 1001 and waits (at most `wait`) for them to finish.
    pub(crate) async fn shut_down(&self, wait: Duration) {
        self.shutdown.send_replace(true);
        self.registry().open_sockets().for_each(Outbox::close);
        let all = self.limits.max_sockets as u32;
        if tokio::time::timeout(wait, self.sockets.acquire_many(all)).await.is_err() {
            tracing::warn!(open = self.open_sockets(), "WebSockets still open after the shutdown wait");
        }
    }
}
