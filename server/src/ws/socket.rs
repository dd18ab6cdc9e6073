//! One WebSocket: its task reads `Subscribe` frames, sends replays and queued live frames, pings
//! its peer, and closes when told to.
//!
//! Everything a socket does happens on this one task, so its frames go out in one order:
//! `connected`; per subscription `subscribed`, the replay, then live frames. Live frames for a
//! key start queueing the moment the subscription is registered, which is before the replay is
//! read; a queued `append` whose `seq` the replay already sent is dropped, so there is neither a
//! gap nor a duplicate between the two. The queue is bounded: a socket whose client does not read
//! fast enough is closed (1013) rather than buffered without limit, and its client resumes from
//! its last `seq`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, close_code};
use futures_util::SinkExt as _;
use seed_agents_protocol::generated::{
    AgentWsEvent, AppendFrame, ChangeFrame, ConnectedFrame, RunJournalEntryInfo, SessionEvent, SubscribedFrame,
};
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use seed_agents_protocol::wire;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::Instant;

use super::frames::{self, OutFrame};
use super::live::{Live, WsLimits};
use super::registry::{Bound, Budget, Signal, SocketId};
use super::subscribe::{self, Accepted, Refused, Replay};
use crate::edge::Edge;
use crate::error::ApiError;

/// Queued frames sent together, at most.
const BATCH: usize = 32;

/// Why a socket closes, as the close frame says it.
const SHUTTING_DOWN: &str = "Server shutting down";
const TOO_SLOW: &str = "Subscriber fell behind; reconnect and resume from the last seq";
const NO_PONG: &str = "No answer to ping";
const ACCOUNT_FULL: &str = "Too many live connections for this account";

/// The `code` of the refusal when a socket has as many subscriptions as it may.
pub(crate) const SUBSCRIPTION_LIMIT: &str = "subscription_limit";
/// The `code` of the refusal when an account has as many sockets as it may.
pub(crate) const SOCKET_LIMIT: &str = "socket_limit";

/// The error when a socket has as many subscriptions as it may.
pub(crate) fn too_many_subscriptions(limit: usize) -> ApiError {
    ApiError::too_many(format!("Too many subscriptions on this connection (limit {limit})"))
        .with_code(SUBSCRIPTION_LIMIT)
}

/// Serves one upgraded socket until it closes.
pub(crate) async fn run(edge: Arc<Edge>, socket: WebSocket, id: SocketId, permit: OwnedSemaphorePermit) {
    let live = &edge.live;
    let limits = live.limits;
    let (queue, frames) = mpsc::channel(limits.queue_frames.max(1));
    let mut task = Socket {
        edge: &edge,
        live,
        limits,
        id,
        ws: socket,
        queue: Some(queue),
        frames,
        signal: Arc::new(Signal::default()),
        budget: None,
        account: None,
        replayed: HashMap::new(),
        unanswered_ping: None,
    };
    let reason = task.serve().await;
    live.registry().remove_socket(id);
    // Out of the registry, nothing more is queued: what is left in the queue is dropped with it.
    if let Some(budget) = &task.budget {
        budget.release();
    }
    if let Some((code, reason)) = reason {
        let close = CloseFrame { code, reason: reason.into() };
        let _ = tokio::time::timeout(limits.send_timeout, task.ws.send(Message::Close(Some(close)))).await;
    }
    drop(permit);
}

struct Socket<'a> {
    edge: &'a Edge,
    live: &'a Live,
    limits: WsLimits,
    id: SocketId,
    ws: WebSocket,
    /// Given to the registry when the socket binds to an account.
    queue: Option<mpsc::Sender<Arc<OutFrame>>>,
    frames: mpsc::Receiver<Arc<OutFrame>>,
    signal: Arc<Signal>,
    /// The bytes its queue may hold, once bound.
    budget: Option<Arc<Budget>>,
    /// The account and protocol of the first accepted `Subscribe`.
    account: Option<(Arc<str>, u32)>,
    /// Per session, the highest `seq` a replay sent: queued appends up to it are duplicates.
    replayed: HashMap<Arc<str>, i64>,
    /// When the first ping the peer has not answered went out: anything the peer sends (a pong,
    /// a frame) answers it.
    unanswered_ping: Option<Instant>,
}

/// Why the loop ended: a close frame to send, or none (the peer is gone).
type Ending = Option<(u16, &'static str)>;

impl Socket<'_> {
    async fn serve(&mut self) -> Ending {
        let connected = AgentWsEvent::ConnectedFrame(ConnectedFrame {
            extra: Default::default(),
            connected_at: self.edge.app.clock.now_ms(),
        });
        if self.send(frames::encode(&connected, AGENTS_PROTOCOL_VERSION)).await.is_err() {
            return None;
        }
        let mut shutdown = self.live.shutdown_signal();
        let signal = self.signal.clone();
        let mut ping = tokio::time::interval_at(Instant::now() + self.limits.ping_interval, self.limits.ping_interval);
        // The waits that outlive one frame are armed once and polled again on each turn of the
        // loop, not rebuilt: arming a `Notify` wait takes its lock, and a socket that follows a
        // busy session wakes once per queued frame.
        let shutting_down = shutdown.changed();
        tokio::pin!(shutting_down);
        let fell_behind = signal.notify.notified();
        tokio::pin!(fell_behind);
        loop {
            tokio::select! {
                // Queued frames first: nearly every wake-up is for one, and a ready branch ends
                // the select before the branches after it are polled. Nothing after it starves
                // for long: the queue holds what the hub queued, a falling-behind socket is
                // checked for before each frame goes out (`forward`), and silence is judged
                // from unanswered pings, not from how long the peer was left unread.
                biased;
                Some(frame) = self.frames.recv() => {
                    if let Err(ending) = self.forward(frame, &signal).await {
                        return ending;
                    }
                }
                () = &mut fell_behind => {
                    if signal.overflowed() {
                        return self.too_slow();
                    }
                    fell_behind.set(signal.notify.notified());
                }
                _ = &mut shutting_down => return Some((close_code::AWAY, SHUTTING_DOWN)),
                message = self.ws.recv() => match message {
                    Some(Ok(message)) => {
                        self.unanswered_ping = None;
                        // Boxed: subscribing (verification, database reads, replay) takes far more
                        // state than waiting does, and an idle socket should not carry it.
                        if let Err(ending) = Box::pin(self.on_message(message)).await {
                            return ending;
                        }
                    }
                    Some(Err(error)) => {
                        tracing::debug!(%error, "WebSocket read failed");
                        return Some((close_code::PROTOCOL, "Invalid WebSocket frame"));
                    }
                    None => return None,
                },
                _ = ping.tick() => {
                    let now = Instant::now();
                    let sent = *self.unanswered_ping.get_or_insert(now);
                    if now.duration_since(sent) > silence_limit(self.limits.ping_interval) {
                        return Some((close_code::AWAY, NO_PONG));
                    }
                    if self.send_message(Message::Ping(Default::default())).await.is_err() {
                        return None;
                    }
                }
            }
        }
    }

    /// Handles one message from the peer; `Err` ends the socket.
    async fn on_message(&mut self, message: Message) -> Result<(), Ending> {
        let Some(bytes) = subscribe::frame_bytes(message) else { return Ok(()) };
        let outcome = match bytes {
            Ok(bytes) => self.subscribe(bytes).await,
            Err(error) => Err(Failure::Refused(error.into())),
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(Failure::Refused(Refused { error, key })) => {
                let protocol = self.account.as_ref().map_or(AGENTS_PROTOCOL_VERSION, |(_, protocol)| *protocol);
                self.send(frames::error(&error, key.as_deref(), protocol)).await.map_err(|()| None)
            }
            Err(Failure::Close(ending)) => Err(ending),
        }
    }

    async fn subscribe(&mut self, bytes: Vec<u8>) -> Result<(), Failure> {
        let accepted = subscribe::accept(self.edge, bytes).await.map_err(Failure::Refused)?;
        let account: Arc<str> = Arc::from(accepted.caller.account_id.as_str());
        let refuse = |error: ApiError| Failure::Refused(Refused { error, key: Some(accepted.key.clone()) });
        match &self.account {
            Some((bound, _)) if **bound != *account => {
                return Err(refuse(ApiError::forbidden("WebSocket account switch is not allowed")));
            }
            Some(_) => {}
            None => self.bind(account, accepted.caller.protocol).await?,
        }
        let limit = self.limits.subscriptions;
        let registered = self.live.registry().subscribe(self.id, &accepted.registered, accepted.sub.clone(), limit);
        registered.map_err(|_| refuse(too_many_subscriptions(limit)))?;
        // Registered first, read second: an event committed after this read is queued live, one
        // committed before it is in the replay, and one in both is dropped from the queue.
        let replay = match subscribe::load(&self.edge.app, accepted.plan.clone()).await {
            Ok(replay) => replay,
            Err(error) => {
                self.live.registry().unsubscribe(self.id, &accepted.registered);
                return Err(refuse(error));
            }
        };
        self.replay(accepted, replay).await
    }

    /// Binds the socket to `account` (its first accepted subscription).
    async fn bind(&mut self, account: Arc<str>, protocol: u32) -> Result<(), Failure> {
        let queue = self.queue.take().ok_or(Failure::Close(None))?;
        let outcome = {
            let mut registry = self.live.registry();
            let account_bytes = registry.account_bytes(&account);
            let budget = Arc::new(Budget::new(self.limits.queue_bytes, account_bytes, self.limits.account_queue_bytes));
            let bound = Bound {
                account_id: account.clone(),
                protocol,
                queue,
                budget: budget.clone(),
                signal: self.signal.clone(),
                dropped: self.live.dropped.clone(),
            };
            registry.bind(self.id, bound, self.limits.per_account).map(|()| budget)
        };
        match outcome {
            Ok(budget) => {
                self.budget = Some(budget);
                self.account = Some((account, protocol));
                Ok(())
            }
            Err(_) => {
                let error = ApiError::too_many(ACCOUNT_FULL).with_code(SOCKET_LIMIT);
                let _ = self.send(frames::error(&error, None, protocol)).await;
                Err(Failure::Close(Some((close_code::AGAIN, ACCOUNT_FULL))))
            }
        }
    }

    /// `subscribed`, then what the key replays.
    async fn replay(&mut self, accepted: Accepted, replay: Replay) -> Result<(), Failure> {
        let protocol = accepted.caller.protocol;
        let key = accepted.key;
        let subscribed = AgentWsEvent::SubscribedFrame(SubscribedFrame {
            extra: Default::default(),
            account_id: accepted.caller.account_id.into(),
            key: key.clone(),
        });
        self.send(frames::encode(&subscribed, protocol)).await.map_err(|()| Failure::Close(None))?;
        match replay {
            Replay::Nothing => Ok(()),
            Replay::Runs(runs, entries) => {
                for run in runs {
                    self.send_change(&accepted.registered, &run, protocol).await?;
                }
                for entry in entries {
                    self.send_journal(&accepted.registered, entry, protocol).await?;
                }
                Ok(())
            }
            Replay::Session { session, events } => {
                let session_id: Arc<str> = Arc::from(session.id.as_str());
                self.send_change(&key, &*session, protocol).await?;
                let mut page = events;
                loop {
                    let last = page.last().map(|event| event.seq);
                    let full = page.len() as i64 >= subscribe::REPLAY_PAGE;
                    for event in page {
                        self.send_append(&key, &session_id, event, protocol).await?;
                    }
                    match last {
                        Some(last) if full => page = subscribe::more_events(&self.edge.app, &session_id, last).await?,
                        _ => return Ok(()),
                    }
                }
            }
        }
    }

    async fn send_change<T: serde::Serialize>(&mut self, key: &str, value: &T, protocol: u32) -> Result<(), Failure> {
        let value = wire::to_ipld(value).map_err(ApiError::internal)?;
        let frame = AgentWsEvent::ChangeFrame(ChangeFrame {
            extra: Default::default(),
            key: key.to_owned(),
            value: value.into(),
        });
        self.send(frames::encode(&frame, protocol)).await.map_err(|()| Failure::Close(None))
    }

    async fn send_append(
        &mut self,
        key: &str,
        session_id: &Arc<str>,
        event: SessionEvent,
        protocol: u32,
    ) -> Result<(), Failure> {
        let seq = event.seq;
        let frame = AgentWsEvent::AppendFrame(AppendFrame {
            extra: Default::default(),
            created_at: None,
            entry: None,
            event: Some(event),
            key: key.to_owned(),
            run_id: None,
            seq: None,
        });
        self.send(frames::encode(&frame, protocol)).await.map_err(|()| Failure::Close(None))?;
        let through = self.replayed.entry(session_id.clone()).or_default();
        *through = (*through).max(seq);
        Ok(())
    }

    /// Sends a replayed journal entry, remembering its `seq` so the live copy is dropped.
    async fn send_journal(&mut self, key: &str, entry: RunJournalEntryInfo, protocol: u32) -> Result<(), Failure> {
        let (run_id, seq): (Arc<str>, i64) = (Arc::from(entry.run_id.as_str()), entry.seq);
        let frame = AgentWsEvent::AppendFrame(frames::journal(key.to_owned(), entry));
        self.send(frames::encode(&frame, protocol)).await.map_err(|()| Failure::Close(None))?;
        let through = self.replayed.entry(run_id).or_default();
        *through = (*through).max(seq);
        Ok(())
    }

    /// Sends a queued live frame and those queued behind it (up to [`BATCH`]), flushed once, so a
    /// burst costs one write; frames a replay already sent are skipped. A socket that fell behind
    /// sends nothing more: a frame queued after one it lost would leave a gap.
    async fn forward(&mut self, first: Arc<OutFrame>, signal: &Signal) -> Result<(), Ending> {
        let send = async {
            let mut next = Some(first);
            let mut taken = 0;
            while let Some(frame) = next.take() {
                if let Some(budget) = &self.budget {
                    budget.give(frame.bytes());
                }
                if signal.overflowed() {
                    return Ok(false);
                }
                for part in frame.parts() {
                    let replayed = part
                        .append
                        .as_ref()
                        .is_some_and(|(session, seq)| self.replayed.get(session).is_some_and(|through| seq <= through));
                    if !replayed {
                        self.ws.feed(Message::Text(part.text.clone())).await?;
                    }
                }
                taken += 1;
                if taken < BATCH {
                    next = self.frames.try_recv().ok();
                }
            }
            self.ws.flush().await.map(|()| true)
        };
        match tokio::time::timeout(self.limits.send_timeout, send).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(self.too_slow()),
            Ok(Err(error)) => {
                tracing::debug!(%error, "WebSocket write failed");
                Err(None)
            }
            Err(_) => {
                tracing::debug!(socket = self.id, "WebSocket write timed out");
                Err(None)
            }
        }
    }

    /// The ending of a socket that fell behind: its client resumes from its last `seq`.
    fn too_slow(&self) -> Ending {
        tracing::info!(socket = self.id, "closing a WebSocket that fell behind");
        Some((close_code::AGAIN, TOO_SLOW))
    }

    async fn send(&mut self, text: Utf8Bytes) -> Result<(), ()> {
        self.send_message(Message::Text(text)).await
    }

    /// Sends one message; a peer that does not take it within `send_timeout` is gone.
    async fn send_message(&mut self, message: Message) -> Result<(), ()> {
        match tokio::time::timeout(self.limits.send_timeout, self.ws.send(message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::debug!(%error, "WebSocket write failed");
                Err(())
            }
            Err(_) => {
                tracing::debug!(socket = self.id, "WebSocket write timed out");
                Err(())
            }
        }
    }
}

/// Why a subscription did not go through: an `error` frame (the socket stays open), or the end of
/// the socket.
enum Failure {
    Refused(Refused),
    Close(Ending),
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Self {
        Failure::Refused(error.into())
    }
}

/// How long a peer may stay silent (pongs count) before it is taken for dead: two and a half
/// ping intervals, so one lost pong is forgiven.
pub(crate) fn silence_limit(interval: Duration) -> Duration {
    interval * 5 / 2
}
