//! Live subscriptions: a [`Stream`] of a server's frames for one or more keys, on one
//! WebSocket that reconnects by itself and resumes where it left off.
//!
//! [`Client::subscribe`] names the first key (`sessions/<id>`, `agents/<id>`, `runs/<root>` or
//! `account/<id>`); [`SubscriptionBuilder::key`] adds more on the same socket. The stream yields
//! [`Event`]s until it is dropped, which closes the socket.
//!
//! What a subscriber can rely on:
//!
//! - **every durable session event once, in `seq` order.** The stream remembers the last `seq`
//!   it delivered per session; a repeat is dropped; a `seq` that skips ahead is a gap, filled
//!   from `GetSession` before the event that revealed it.
//! - **resumption.** When the socket drops (server restart, network), the stream says so
//!   ([`Event::Disconnected`]), reconnects with jittered exponential back-off (each failed attempt
//!   is an [`Event::Retrying`]), signs a fresh
//!   `Subscribe` per key (a `sessions/` key with `afterSeq` = the last `seq` delivered, so the
//!   server replays exactly what was missed) and says it is back ([`Event::Resumed`]) with what
//!   could not be replayed: keys whose changes are live-only, and whether a streaming message
//!   was cut off.
//! - **refusals are events.** A key the server refuses arrives as [`Event::Error`] with the
//!   server's message and `code`; that key is not subscribed again after a reconnect, and the
//!   other keys go on.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use backon::BackoffBuilder as _;
use futures_util::{SinkExt as _, Stream, StreamExt as _};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{AgentWsEvent, AppendFrame, GetSession, PartialPatch, SessionEvent, Subscribe};
use seed_agents_protocol::{AccountId, AgentAction, RunId, SessionId, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::{Client, Error};

/// One thing a subscription reports.
///
/// `#[non_exhaustive]`: later releases may add variants (match with a `_` arm).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The server accepted `key` for `account_id` (after each (re)connection).
    Subscribed {
        /// The key as subscribed.
        key: String,
        /// The account the socket acts for.
        account_id: AccountId,
    },
    /// A durable session event, delivered once and in `seq` order per session.
    Append {
        /// The key it arrived under (`sessions/<id>`).
        key: String,
        /// The event.
        event: Box<SessionEvent>,
    },
    /// A durable run journal entry (`runs/<root>` keys).
    RunAppend {
        /// The key it arrived under.
        key: String,
        /// The run whose journal grew.
        run_id: RunId,
        /// The entry's sequence number.
        seq: i64,
        /// The entry.
        entry: Value,
    },
    /// A live, never persisted change to a streaming message or run; lost while disconnected.
    Partial {
        /// The key it arrived under.
        key: String,
        /// Which stream it patches.
        partial_id: String,
        /// For `runs/` keys: the run.
        run_id: Option<RunId>,
        /// The change.
        patch: Box<PartialPatch>,
    },
    /// A snapshot of something that changed: SessionInfo, AgentInfo, RunInfo or an account
    /// change hint, by the key's prefix.
    Change {
        /// The key (a `sessions/`, `agents/`, `runs/` or `account/` key).
        key: String,
        /// The snapshot.
        value: Value,
    },
    /// The server refused or ended a subscription (or a frame); the socket stays open.
    Error {
        /// The key it concerns, when known.
        key: Option<String>,
        /// The server's message.
        message: String,
        /// The server's machine-readable code, when it sent one.
        code: Option<String>,
    },
    /// The socket dropped (or the first connection failed); the subscription is reconnecting.
    Disconnected {
        /// What happened.
        reason: String,
    },
    /// An attempt to reconnect after [`Event::Disconnected`] failed too; the next one follows
    /// after `retry_in`.
    Retrying {
        /// Why the attempt failed.
        reason: String,
        /// How long until the next attempt.
        retry_in: Duration,
    },
    /// The subscription is back after a disconnection, and every key resubscribed.
    Resumed {
        /// Keys whose changes are not replayed (`account/` and `agents/` keys): re-read what they
        /// describe to catch up.
        refetch: Vec<String>,
        /// Whether a streaming message was cut off (its partials are lost; the final durable
        /// event still arrives).
        partials_lost: bool,
    },
}

/// How a subscription reconnects.
#[derive(Debug, Clone, Copy)]
pub struct Reconnect {
    /// The first delay.
    pub min_delay: Duration,
    /// The longest delay.
    pub max_delay: Duration,
    /// A socket that hears nothing for this long (the server pings every 20 s) is taken for dead.
    pub silence: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self {
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(10),
            silence: Duration::from_secs(60),
        }
    }
}

/// Names the keys of a subscription; [`SubscriptionBuilder::start`] opens it.
#[derive(Debug)]
pub struct SubscriptionBuilder {
    client: Client,
    keys: Vec<(String, Option<i64>)>,
    reconnect: Reconnect,
}

impl Client {
    /// Starts building a subscription to `key` (`sessions/<id>`, `agents/<id>`, `runs/<root>` or
    /// `account/<id>`).
    ///
    /// ```no_run
    /// # async fn run(client: seed_agents_sdk::Client) {
    /// use futures_util::StreamExt as _;
    /// use seed_agents_sdk::subscription::Event;
    ///
    /// let mut events = client.subscribe("sessions/0b6c…").after_seq(41).start();
    /// while let Some(event) = events.next().await {
    ///     match event {
    ///         Ok(Event::Append { event, .. }) => println!("seq {}", event.seq),
    ///         Ok(other) => println!("{other:?}"),
    ///         Err(error) => return eprintln!("{error}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn subscribe(&self, key: impl Into<String>) -> SubscriptionBuilder {
        SubscriptionBuilder { client: self.clone(), keys: vec![(key.into(), None)], reconnect: Reconnect::default() }
    }
}

impl SubscriptionBuilder {
    /// Replays the last key's events after `seq` (for `sessions/` keys; the default replays all).
    pub fn after_seq(mut self, seq: i64) -> Self {
        if let Some((_, after)) = self.keys.last_mut() {
            *after = Some(seq);
        }
        self
    }

    /// Subscribes to another key on the same socket.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.keys.push((key.into(), None));
        self
    }

    /// Other reconnection timings.
    pub fn reconnect(mut self, reconnect: Reconnect) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// Opens the subscription (in a task on the current Tokio runtime). Dropping the returned
    /// stream closes the socket.
    pub fn start(self) -> Subscription {
        let (events, receiver) = mpsc::channel(256);
        let task = tokio::spawn(run(self, events));
        Subscription { events: receiver, task }
    }
}

/// A running subscription: a stream of [`Event`]s, ending only with a fatal [`Error`] (the
/// server URL or the signer is unusable) or when dropped.
#[derive(Debug)]
pub struct Subscription {
    events: mpsc::Receiver<Result<Event, Error>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stream for Subscription {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one subscription remembers across sockets.
struct State {
    client: Client,
    /// Keys in order, with the `afterSeq` asked for.
    keys: Vec<(String, Option<i64>)>,
    /// Keys the server refused: not asked for again.
    refused: HashSet<String>,
    /// Per session: the last `seq` delivered.
    delivered: HashMap<SessionId, i64>,
    /// Partial streams open (no `done` yet).
    open_partials: HashSet<String>,
    events: mpsc::Sender<Result<Event, Error>>,
}

/// Why a socket's session ended.
enum Ended {
    /// The consumer dropped the stream.
    Dropped,
    /// The socket dropped; reconnect.
    Lost(String),
    /// Nothing to reconnect for.
    Fatal(Error),
}

async fn run(builder: SubscriptionBuilder, events: mpsc::Sender<Result<Event, Error>>) {
    let SubscriptionBuilder { client, keys, reconnect } = builder;
    let url = match client.socket_url() {
        Ok(url) => url,
        Err(error) => {
            let _ = events.send(Err(error)).await;
            return;
        }
    };
    let mut state = State {
        client,
        keys,
        refused: HashSet::new(),
        delivered: HashMap::new(),
        open_partials: HashSet::new(),
        events,
    };
    let schedule = || {
        backon::ExponentialBuilder::default()
            .with_min_delay(reconnect.min_delay)
            .with_max_delay(reconnect.max_delay)
            .with_jitter()
            .without_max_times()
            .build()
    };
    let mut delays = schedule();
    let mut resuming = false;
    loop {
        let ended = match tokio_tungstenite::connect_async(url.as_str()).await {
            Ok((socket, _)) => {
                let mut subscribed = false;
                let ended = state.serve(socket, resuming, reconnect.silence, &mut subscribed).await;
                if subscribed {
                    // It worked for a while: the next outage starts the back-off over.
                    delays = schedule();
                    resuming = false;
                }
                ended
            }
            Err(error) => Ended::Lost(error.to_string()),
        };
        let delay = match ended {
            Ended::Dropped => return,
            Ended::Fatal(error) => {
                let _ = state.events.send(Err(error)).await;
                return;
            }
            Ended::Lost(reason) => {
                let delay = delays.next().unwrap_or(reconnect.max_delay);
                let event =
                    if resuming { Event::Retrying { reason, retry_in: delay } } else { Event::Disconnected { reason } };
                if state.deliver(event).await.is_err() {
                    return;
                }
                resuming = true;
                delay
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = state.events.closed() => return,
        }
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl State {
    async fn deliver(&self, event: Event) -> Result<(), Ended> {
        self.events.send(Ok(event)).await.map_err(|_| Ended::Dropped)
    }

    /// Subscribes every key on `socket` and pumps frames until it drops; `subscribed` is set once
    /// every key was answered.
    async fn serve(&mut self, socket: Socket, resuming: bool, silence: Duration, subscribed: &mut bool) -> Ended {
        match self.pump(socket, resuming, silence, subscribed).await {
            Ok(never) => match never {},
            Err(ended) => ended,
        }
    }

    async fn pump(
        &mut self,
        mut socket: Socket,
        resuming: bool,
        silence: Duration,
        subscribed: &mut bool,
    ) -> Result<std::convert::Infallible, Ended> {
        let keys: Vec<(String, Option<i64>)> =
            self.keys.iter().filter(|(key, _)| !self.refused.contains(key)).cloned().collect();
        for (key, after) in keys {
            let after = key.strip_prefix("sessions/").and_then(|id| self.delivered.get(id).copied()).or(after);
            let action = AgentAction::Subscribe({
                let mut subscribe = Subscribe::new(key.clone());
                subscribe.after_seq = after;
                subscribe
            });
            let bytes = self.client.sign(&action).await.map_err(Ended::Fatal)?;
            socket.send(Message::Binary(bytes.into())).await.map_err(|error| Ended::Lost(error.to_string()))?;
            // Frames are answered in order: wait for this key's answer before the next one.
            loop {
                let frame = next_frame(&mut socket, silence).await?;
                let answered = match &frame {
                    AgentWsEvent::SubscribedFrame(subscribed) => subscribed.key == key,
                    AgentWsEvent::ErrorFrame(error) => error.key.as_deref().is_none_or(|about| about == key),
                    _ => false,
                };
                if answered && matches!(frame, AgentWsEvent::ErrorFrame(_)) {
                    self.refused.insert(key.clone());
                }
                self.on_frame(frame).await?;
                if answered {
                    break;
                }
            }
        }
        if resuming {
            let refetch = self
                .keys
                .iter()
                .map(|(key, _)| key)
                .filter(|key| {
                    !self.refused.contains(*key) && (key.starts_with("account/") || key.starts_with("agents/"))
                })
                .cloned()
                .collect();
            let partials_lost = !self.open_partials.is_empty();
            self.open_partials.clear();
            self.deliver(Event::Resumed { refetch, partials_lost }).await?;
        }
        *subscribed = true;
        loop {
            let frame = next_frame(&mut socket, silence).await?;
            self.on_frame(frame).await?;
        }
    }

    async fn on_frame(&mut self, frame: AgentWsEvent) -> Result<(), Ended> {
        match frame {
            AgentWsEvent::ConnectedFrame(_) => Ok(()),
            AgentWsEvent::SubscribedFrame(frame) => {
                self.deliver(Event::Subscribed { key: frame.key, account_id: frame.account_id }).await
            }
            AgentWsEvent::AppendFrame(AppendFrame { event: Some(event), key, .. }) => self.append(key, event).await,
            AgentWsEvent::AppendFrame(AppendFrame { key, run_id: Some(run_id), seq: Some(seq), entry, .. }) => {
                let entry = entry.unwrap_or_default().into_iter().map(|(name, value)| (name, value.0)).collect();
                self.deliver(Event::RunAppend { key, run_id, seq, entry: Value(Ipld::Map(entry)) }).await
            }
            AgentWsEvent::AppendFrame(_) => Ok(()),
            AgentWsEvent::AppendPartialFrame(frame) => {
                if frame.patch.done == Some(true) {
                    self.open_partials.remove(&frame.partial_id);
                } else {
                    self.open_partials.insert(frame.partial_id.clone());
                }
                let event = Event::Partial {
                    key: frame.key,
                    partial_id: frame.partial_id,
                    run_id: frame.run_id,
                    patch: Box::new(frame.patch),
                };
                self.deliver(event).await
            }
            AgentWsEvent::ChangeFrame(frame) => {
                self.deliver(Event::Change { key: frame.key, value: frame.value }).await
            }
            AgentWsEvent::ErrorFrame(frame) => {
                if let Some(key) = &frame.key {
                    // A subscription the server ended (its resource is gone, or access was
                    // revoked) is not asked for again either.
                    self.refused.insert(key.clone());
                }
                self.deliver(Event::Error { key: frame.key, message: frame.message, code: frame.code }).await
            }
        }
    }

    /// Delivers a session event once, in order, filling a gap from `GetSession` first.
    async fn append(&mut self, key: String, event: SessionEvent) -> Result<(), Ended> {
        let session = event.session_id.clone();
        let last = self.delivered.get(&session).copied().or_else(|| self.baseline(&session));
        if last.is_some_and(|last| event.seq <= last) {
            return Ok(());
        }
        if let Some(last) = last
            && event.seq > last + 1
        {
            let missing = self
                .client
                .get_session(GetSession::new(session.clone()).after_seq(last).before_seq(event.seq))
                .await
                .map_err(|error| Ended::Lost(format!("filling a gap after seq {last}: {error}")))?;
            for earlier in missing.events {
                self.delivered.insert(session.clone(), earlier.seq);
                self.deliver(Event::Append { key: key.clone(), event: Box::new(earlier) }).await?;
            }
        }
        self.delivered.insert(session, event.seq);
        self.deliver(Event::Append { key, event: Box::new(event) }).await
    }

    /// Where a directly subscribed session starts: its `afterSeq`, or 0.
    fn baseline(&self, session: &str) -> Option<i64> {
        self.keys
            .iter()
            .find(|(key, _)| key.strip_prefix("sessions/") == Some(session))
            .map(|(_, after)| after.unwrap_or(0))
    }
}

/// The next server frame; pings are answered by tungstenite as they are read.
async fn next_frame(socket: &mut Socket, silence: Duration) -> Result<AgentWsEvent, Ended> {
    loop {
        let message = match tokio::time::timeout(silence, socket.next()).await {
            Err(_) => return Err(Ended::Lost(format!("no frame or ping for {} s", silence.as_secs()))),
            Ok(None) => return Err(Ended::Lost("the server closed the connection".to_owned())),
            Ok(Some(Err(error))) => return Err(Ended::Lost(error.to_string())),
            Ok(Some(Ok(message))) => message,
        };
        let text = match message {
            Message::Text(text) => text,
            Message::Close(frame) => {
                let reason =
                    frame.map_or_else(|| "closed".to_owned(), |frame| format!("{} {}", frame.code, frame.reason));
                return Err(Ended::Lost(format!("the server closed the connection: {reason}")));
            }
            _ => continue,
        };
        match serde_json::from_str::<AgentWsEvent>(text.as_str()) {
            Ok(frame) => return Ok(frame),
            // A frame kind this build does not know: a newer server; skip it.
            Err(_) => continue,
        }
    }
}
