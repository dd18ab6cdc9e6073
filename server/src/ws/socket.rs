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
//!
//! Server frames are written straight to the connection, framed here (with tungstenite's
//! `FrameHeader`) in a buffer that lives for one write: the WebSocket library's own write buffer
//! keeps the capacity of the largest burst it ever sent, for the life of the socket, and an idle
//! socket should hold none (ARCHITECTURE.md, "Bounded resources"). Pings, pongs and the
//! close frame still go through the library, and whatever it has pending is flushed before a
//! frame of ours goes out, so the two never interleave.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use seed_agents_protocol::generated::{
    AgentWsEvent, AppendFrame, ChangeFrame, ConnectedFrame, RunJournalEntryInfo, SessionEvent, SubscribedFrame,
};
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use seed_agents_protocol::wire;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::frames;
use super::live::WsLimits;
use super::registry::{self, Bound, Outbox, SocketId};
use super::subscribe::{self, Accepted, Refused, Replay};
use crate::edge::Edge;
use crate::error::ApiError;

/// An upgraded connection, as the socket task reads and writes it.
pub(crate) type Stream = WebSocketStream<TokioIo<Upgraded>>;

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
///
/// The socket is built before its future is, so the future holds it once: an idle socket's task
/// is this future, and its size is most of what the socket costs.
pub(crate) fn run(
    edge: Arc<Edge>,
    ws: Stream,
    id: SocketId,
    permit: OwnedSemaphorePermit,
) -> impl Future<Output = ()> + Send {
    let limits = &edge.live.limits;
    let outbox = Arc::new(Outbox::new(limits.queue_frames, limits.queue_bytes));
    let mut socket = Socket { edge, id, ws, outbox, account: None, replayed: Vec::new(), unanswered_ping: None };
    // An `async` block, not an `async fn` taking the socket: a function's arguments are moved
    // into locals of its future, which would then hold the socket twice.
    async move {
        let reason = socket.serve().await;
        socket.close(reason).await;
        drop(permit);
    }
}

// An idle socket's task holds its `Socket` and a small waiting state, and that is most of what an
// idle socket costs (ARCHITECTURE.md, "Bounded resources"): grow it knowingly. Most of it is
// tungstenite's `WebSocketStream` (328 bytes).
const _: () = assert!(std::mem::size_of::<Socket>() <= 448, "a socket's state grew");

struct Socket {
    edge: Arc<Edge>,
    id: SocketId,
    ws: Stream,
    /// Its outgoing queue; the hub reaches it once the socket is bound.
    outbox: Arc<Outbox>,
    /// The account and protocol of the first accepted `Subscribe`.
    account: Option<(Arc<str>, u32)>,
    /// Per session (or run), the highest `seq` a replay sent: queued appends up to it are
    /// duplicates. A socket has a few subscriptions, so a list.
    replayed: Vec<(Arc<str>, i64)>,
    /// When the first ping the peer has not answered went out: anything the peer sends (a pong,
    /// a frame) answers it.
    unanswered_ping: Option<Instant>,
}

/// Why the loop ended: a close frame to send, or none (the peer is gone).
type Ending = Option<(CloseCode, &'static str)>;

impl Socket {
    /// Leaves the registry, and says why to the peer when there is a reason to.
    async fn close(&mut self, reason: Ending) {
        self.edge.live.registry().remove_socket(self.id);
        // Out of the registry, nothing more is queued: what is left is dropped.
        self.outbox.release();
        if let Some((code, reason)) = reason {
            let close = CloseFrame { code, reason: reason.into() };
            let timeout = self.limits().send_timeout;
            let _ = tokio::time::timeout(timeout, self.ws.send(Message::Close(Some(close)))).await;
        }
    }

    fn limits(&self) -> &WsLimits {
        &self.edge.live.limits
    }

    /// The `connected` frame (built apart from `serve`, so it is not held across its waits).
    fn connected(&self) -> Utf8Bytes {
        let connected = AgentWsEvent::ConnectedFrame(ConnectedFrame {
            extra: Default::default(),
            connected_at: self.edge.app.clock.now_ms(),
        });
        frames::encode(&connected, AGENTS_PROTOCOL_VERSION)
    }

    async fn serve(&mut self) -> Ending {
        if !self.edge.live.open(self.id, self.outbox.clone()) {
            return Some((CloseCode::Away, SHUTTING_DOWN));
        }
        let connected = self.connected();
        // Boxed, like every wait but the idle one: the future of a write is larger than the
        // waiting state, and an idle socket should not carry it.
        if Box::pin(self.send(connected)).await.is_err() {
            return None;
        }
        let outbox = self.outbox.clone();
        // Everything but the peer's frames reaches the socket through its outbox's one wake-up
        // (deliveries, falling behind, pings, shutdown): an idle socket waits on two things. The
        // wait is armed once and polled again on each turn of the loop, not rebuilt: arming a
        // `Notify` wait takes its lock, and a socket that follows a busy session wakes once per
        // delivery.
        let woken = outbox.notify.notified();
        tokio::pin!(woken);
        loop {
            tokio::select! {
                // The outbox first: nearly every wake-up is for a delivery, and a ready branch
                // ends the select before the branches after it are polled. Nothing after it
                // starves for long: the queue holds what the hub queued, a falling-behind socket
                // is checked for before each delivery goes out (`forward`), and silence is judged
                // from unanswered pings, not from how long the peer was left unread.
                biased;
                () = &mut woken => {
                    // Re-armed before the flags and the queue are read: anything raised from
                    // here on wakes the next turn (a `Notify` keeps one wake-up for a wait not yet
                    // polled).
                    woken.set(outbox.notify.notified());
                    if outbox.closing() {
                        return Some((CloseCode::Away, SHUTTING_DOWN));
                    }
                    if outbox.take_ping()
                        && let Err(ending) = Box::pin(self.ping()).await
                    {
                        return ending;
                    }
                    if let Err(ending) = Box::pin(self.forward(&outbox)).await {
                        return ending;
                    }
                }
                message = self.ws.next() => match message {
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
                        return Some((CloseCode::Protocol, "Invalid WebSocket frame"));
                    }
                    None => return None,
                },
            }
        }
    }

    /// Pings the peer, unless it has been silent too long (`Err`: the socket ends).
    async fn ping(&mut self) -> Result<(), Ending> {
        let now = Instant::now();
        let sent = *self.unanswered_ping.get_or_insert(now);
        if now.duration_since(sent) > silence_limit(self.limits().ping_interval) {
            return Err(Some((CloseCode::Away, NO_PONG)));
        }
        self.send_message(Message::Ping(Default::default())).await.map_err(|()| None)
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
        let accepted = subscribe::accept(&self.edge, bytes).await.map_err(Failure::Refused)?;
        let account: Arc<str> = Arc::from(accepted.caller.account_id.as_str());
        let refuse = |error: ApiError| Failure::Refused(Refused { error, key: Some(accepted.key.clone()) });
        match &self.account {
            Some((bound, _)) if **bound != *account => {
                return Err(refuse(ApiError::forbidden("WebSocket account switch is not allowed")));
            }
            Some(_) => {}
            None => self.bind(account, accepted.caller.protocol).await?,
        }
        let limit = self.limits().subscriptions;
        let registered =
            self.edge.live.registry().subscribe(self.id, &accepted.registered, accepted.sub.clone(), limit);
        registered.map_err(|refused| match refused {
            registry::Refused::NotBound => refuse(ApiError::internal("a WebSocket subscribed before it was bound")),
            registry::Refused::SocketFull | registry::Refused::AccountFull => refuse(too_many_subscriptions(limit)),
        })?;
        // Registered first, read second: an event committed after this read is queued live, one
        // committed before it is in the replay, and one in both is dropped from the queue.
        let replay = match subscribe::load(&self.edge.app, accepted.plan.clone()).await {
            Ok(replay) => replay,
            Err(error) => {
                self.edge.live.registry().unsubscribe(self.id, &accepted.registered);
                return Err(refuse(error));
            }
        };
        self.replay(accepted, replay).await
    }

    /// Binds the socket to `account` (its first accepted subscription).
    async fn bind(&mut self, account: Arc<str>, protocol: u32) -> Result<(), Failure> {
        let limits = *self.limits();
        let outcome = {
            let mut registry = self.edge.live.registry();
            self.outbox.bind(registry.account_bytes(&account), limits.account_queue_bytes);
            let bound = Bound::new(account.clone(), protocol, self.outbox.clone(), self.edge.live.dropped.clone());
            registry.bind(self.id, bound, limits.per_account)
        };
        match outcome {
            Ok(()) => {
                self.account = Some((account, protocol));
                Ok(())
            }
            Err(_) => {
                let error = ApiError::too_many(ACCOUNT_FULL).with_code(SOCKET_LIMIT);
                let _ = self.send(frames::error(&error, None, protocol)).await;
                Err(Failure::Close(Some((CloseCode::Again, ACCOUNT_FULL))))
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
        self.replayed_through(session_id, seq);
        Ok(())
    }

    /// Sends a replayed journal entry, remembering its `seq` so the live copy is dropped.
    async fn send_journal(&mut self, key: &str, entry: RunJournalEntryInfo, protocol: u32) -> Result<(), Failure> {
        let (run_id, seq): (Arc<str>, i64) = (Arc::from(entry.run_id.as_str()), entry.seq);
        let frame = AgentWsEvent::AppendFrame(frames::journal(key.to_owned(), entry));
        self.send(frames::encode(&frame, protocol)).await.map_err(|()| Failure::Close(None))?;
        self.replayed_through(&run_id, seq);
        Ok(())
    }

    /// Remembers that a replay sent `stream`'s events up to `seq`.
    fn replayed_through(&mut self, stream: &Arc<str>, seq: i64) {
        match self.replayed.iter_mut().find(|(known, _)| known == stream) {
            Some((_, through)) => *through = (*through).max(seq),
            None => self.replayed.push((stream.clone(), seq)),
        }
    }

    /// Whether a replay already sent `stream`'s event `seq`.
    fn was_replayed(&self, stream: &str, seq: i64) -> bool {
        self.replayed.iter().any(|(known, through)| &**known == stream && seq <= *through)
    }

    /// Sends what is queued, [`BATCH`] deliveries to a write, until the queue is empty; frames a
    /// replay already sent are skipped. A socket that fell behind sends nothing more: a frame
    /// queued after one it lost would leave a gap.
    async fn forward(&mut self, outbox: &Outbox) -> Result<(), Ending> {
        loop {
            let mut out = Vec::new();
            let mut taken = 0;
            while taken < BATCH {
                if outbox.overflowed() {
                    return Err(self.too_slow());
                }
                let Some(delivery) = outbox.pop() else { break };
                taken += 1;
                for part in delivery.parts() {
                    let replayed = part.append.as_ref().is_some_and(|(stream, seq)| self.was_replayed(stream, *seq));
                    if !replayed {
                        frame_into(&mut out, part.text.as_bytes());
                    }
                }
            }
            if !out.is_empty() {
                self.write(&out).await.map_err(|()| None)?;
            }
            if taken < BATCH {
                return Ok(());
            }
        }
    }

    /// The ending of a socket that fell behind: its client resumes from its last `seq`.
    fn too_slow(&self) -> Ending {
        tracing::info!(socket = self.id, "closing a WebSocket that fell behind");
        Some((CloseCode::Again, TOO_SLOW))
    }

    /// Sends one text frame.
    async fn send(&mut self, text: Utf8Bytes) -> Result<(), ()> {
        let mut out = Vec::new();
        frame_into(&mut out, text.as_bytes());
        self.write(&out).await
    }

    /// Writes framed bytes to the connection, after what the WebSocket library has pending (an
    /// answer to a ping); a peer that does not take them within `send_timeout` is gone.
    async fn write(&mut self, framed: &[u8]) -> Result<(), ()> {
        let timeout = self.limits().send_timeout;
        let ws = &mut self.ws;
        let write = async {
            ws.flush().await.map_err(io::Error::other)?;
            let connection = ws.get_mut();
            connection.write_all(framed).await?;
            connection.flush().await
        };
        finished(self.id, timeout, write).await
    }

    /// Sends one message through the WebSocket library (pings); a peer that does not take it
    /// within `send_timeout` is gone.
    async fn send_message(&mut self, message: Message) -> Result<(), ()> {
        finished(self.id, self.limits().send_timeout, self.ws.send(message)).await
    }
}

/// Waits for a write to `socket`'s peer: one that fails, or that the peer does not take within
/// `timeout`, means the peer is gone (`Err`).
async fn finished<E: std::fmt::Display>(
    socket: SocketId,
    timeout: Duration,
    write: impl Future<Output = Result<(), E>>,
) -> Result<(), ()> {
    match tokio::time::timeout(timeout, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => {
            tracing::debug!(%error, "WebSocket write failed");
            Err(())
        }
        Err(_) => {
            tracing::debug!(socket, "WebSocket write timed out");
            Err(())
        }
    }
}

/// Appends `text` to `out` as one unmasked text frame (RFC 6455 §5.2: a server's frames carry no
/// mask).
fn frame_into(out: &mut Vec<u8>, text: &[u8]) {
    let header = FrameHeader { opcode: OpCode::Data(Data::Text), ..FrameHeader::default() };
    let length = text.len() as u64;
    out.reserve(header.len(length) + text.len());
    // Writing into a `Vec` cannot fail.
    let _ = header.format(length, out);
    out.extend_from_slice(text);
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
