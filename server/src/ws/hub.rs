//! The hub: one task that turns bus events into frames and hands each to the sockets that
//! should see it (docs/protocol.md §D.6 fan-out).
//!
//! | event | frame | keys that receive it |
//! |---|---|---|
//! | a session event appended | `append`, key `sessions/<id>` | `sessions/<id>` (sent by [`to_session`] on the committing task); `account/<a>` for the owner and every member |
//! | a partial (never on the bus) | `appendPartial`, key `sessions/<id>` | `sessions/<id>` only, sent by [`to_session`] on the turn's task |
//! | a session changed | `change` (SessionInfo), key `sessions/<id>` | `sessions/<id>`, `agents/<agent>`, the account keys above |
//! | a run changed | `change` (RunInfo), key `runs/<root>` | `runs/<root>`; the account keys of its agent's owner and members |
//! | an agent changed | `change` (AgentInfo, `accessRole` the receiver's own), key `agents/<id>` | `agents/<id>`, the account keys above |
//! | an account change for `a` | `change` (`{reason, agentId?, sessionId?}`), key `account/<a>` | `account/<a>`; `agents/<agent>` sockets of `a` (and public ones when `a` owns the agent) |
//!
//! Agent-scoped account changes (`agent-updated`, `session-event`, …) are also sent to every
//! member under their own `account/<member>` key, as upstream copies them; membership and
//! invitation changes go only to the accounts they name. Public readers see the owner's events
//! for the keys they subscribed to, and agent snapshots with their own `accessRole`.
//!
//! Each frame is encoded once per shape its receivers read (a protocol, and for agent snapshots
//! a role) and shared. A session or agent that no longer exists, or a membership change that
//! leaves a subscriber without access, ends those subscriptions with an `error` frame (upstream
//! keeps sending to them). Session `change` frames are read and sent by a second task
//! (`SessionChanges`), so no frame waits on the database. If the hub falls behind the bus, every bound socket is closed so its
//! client resumes from its cursor instead of silently missing events.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use seed_agents_protocol::generated::{
    AccountChangeHint, AgentInfo, AgentWsEvent, AppendFrame, AppendPartialFrame, ChangeFrame, RunInfo,
    RunJournalEntryInfo, SessionEvent,
};
use seed_agents_protocol::wire;
use tokio::sync::{broadcast, watch};

use super::frames::{self, Dedupe, OutFrame, Part};
use super::live::Live;
use super::registry::{Registry, SocketId, Sub};
use crate::access::{self, Role};
use crate::bus::{ChangeReason, Event, SessionFrame, SessionSink};
use crate::edge::Edge;
use crate::error::{ApiError, ApiResult};

/// Runs the hub until the bus closes or shutdown starts.
pub(crate) async fn run(
    edge: Arc<Edge>,
    mut events: broadcast::Receiver<Arc<Event>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let changes = Arc::new(SessionChanges::default());
    tokio::spawn(session_snapshots(edge.clone(), changes.clone(), shutdown.clone()));
    let mut hub = Hub { edge, audiences: HashMap::new(), changes };
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    if let Err(error) = hub.on_event(&event).await {
                        tracing::warn!(%error, "a live event could not be delivered");
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => hub.fell_behind(missed),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Who shares an agent's account-wide events: its owner and accepted members, with their roles.
#[derive(Debug, Clone)]
struct Audience {
    owner: Arc<str>,
    /// Owner first, then members.
    accounts: Vec<(Arc<str>, Role)>,
}

struct Hub {
    edge: Arc<Edge>,
    /// Per agent, until a membership change or deletion invalidates it.
    audiences: HashMap<Arc<str>, Arc<Audience>>,
    /// Session changes handed to [`session_snapshots`].
    changes: Arc<SessionChanges>,
}

/// Sessions whose `change` frame is owed, coalesced per session: the frame carries the session's
/// state when it is read, so one read answers every change noted before it.
///
/// A session change is the one event whose frame needs a database read. Reading on the hub's own
/// task queued every frame behind it (partials included) and behind the reads of running turns:
/// the turns bench measured 493 turns/s and a provider-first-byte-to-partial p99 of 18.8 ms that
/// way, and 764 turns/s and 4.5 ms with session changes off the hub's task (TURNS=6000, same
/// machine, back to back). A `change` frame may now follow appends sent after the change; its
/// value is never older than the change it announces (read after the change committed, and
/// [`session_snapshots`] reads one batch at a time).
/// An owed session change: the session's agent and who shares its account-wide events.
type Owed = (String, Option<Arc<Audience>>);

#[derive(Default)]
struct SessionChanges {
    /// Session id → its agent and who shares the agent's account-wide events.
    pending: std::sync::Mutex<HashMap<String, Owed>>,
    wake: tokio::sync::Notify,
}

/// Sends the `change` frames [`SessionChanges`] owes, one database read per batch, until
/// shutdown.
async fn session_snapshots(edge: Arc<Edge>, changes: Arc<SessionChanges>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = changes.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
        let batch: Vec<(String, Owed)> = match changes.pending.lock() {
            Ok(mut pending) => pending.drain().collect(),
            Err(poisoned) => poisoned.into_inner().drain().collect(),
        };
        if batch.is_empty() {
            continue;
        }
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        let loaded = edge
            .app
            .db
            .read(move |conn| {
                ids.iter()
                    .map(|id| match crate::sessions::store::load_info(conn, id) {
                        Ok(info) => Ok(Some(info)),
                        Err(error) if error.kind() == crate::error::ErrorKind::NotFound => Ok(None),
                        Err(error) => Err(error),
                    })
                    .collect::<ApiResult<Vec<_>>>()
            })
            .await;
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                tracing::warn!(%error, sessions = batch.len(), "session change frames could not be read");
                continue;
            }
        };
        for ((session_id, (agent, audience)), session) in batch.into_iter().zip(loaded) {
            let key = format!("sessions/{session_id}");
            let Some(session) = session else {
                // Deleted: its subscribers hear so and stop; the account hears `session-deleted`.
                end(&edge.live, &key, &ApiError::not_found("Session not found"));
                continue;
            };
            let value = match wire::to_ipld(&session) {
                Ok(value) => value,
                Err(error) => {
                    tracing::warn!(%error, "a session change frame could not be encoded");
                    continue;
                }
            };
            let mut outgoing = Outgoing::new(AgentWsEvent::ChangeFrame(ChangeFrame {
                extra: Default::default(),
                key: key.clone(),
                value: value.into(),
            }));
            let registry = edge.live.registry();
            let mut targets = Targets::default();
            targets.key(&registry, &key);
            targets.key(&registry, &format!("agents/{agent}"));
            targets.accounts(&registry, audience.as_deref());
            targets.send(&registry, &mut outgoing);
        }
    }
}

/// What a frame is made of.
enum Source {
    /// The same frames for every receiver (several: a session's appends of one commit), each
    /// with the session (or run) and `seq` a replay dedupes it by.
    Frames(Vec<(AgentWsEvent, Dedupe)>),
    /// An agent snapshot under `key`: each receiver sees its own `accessRole`.
    Agent { key: String, info: Box<AgentInfo> },
}

/// The shape a receiver reads: its protocol's, and for agent snapshots its role.
type Shape = (u32, Option<Role>);

/// A frame to deliver and the shapes it is encoded in, built lazily per [`Shape`].
struct Outgoing {
    source: Source,
    /// The shape encoded last: receivers nearly all read the same one, so most skip the map.
    last: Option<(Shape, Arc<OutFrame>)>,
    encoded: HashMap<Shape, Arc<OutFrame>>,
}

impl Outgoing {
    fn new(frame: AgentWsEvent) -> Self {
        Self::frames(vec![(frame, None)])
    }

    fn frames(frames: Vec<(AgentWsEvent, Dedupe)>) -> Self {
        Self { source: Source::Frames(frames), last: None, encoded: HashMap::new() }
    }

    fn agent(key: String, info: AgentInfo) -> Self {
        Self { source: Source::Agent { key, info: Box::new(info) }, last: None, encoded: HashMap::new() }
    }

    /// The `append` frames of a session's events, under `key` (`sessions/<id>`), in one delivery.
    fn appends(key: &str, events: &[SessionEvent]) -> Self {
        let frames = events
            .iter()
            .map(|event| {
                let frame = AgentWsEvent::AppendFrame(AppendFrame {
                    extra: Default::default(),
                    created_at: None,
                    entry: None,
                    event: Some(event.clone()),
                    key: key.to_owned(),
                    run_id: None,
                    seq: None,
                });
                (frame, Some((Arc::from(event.session_id.as_str()), event.seq)))
            })
            .collect();
        Self::frames(frames)
    }

    /// The `append` frame of a workflow journal entry, under `key` (`runs/<root>`); deduplicated
    /// against a replay by the entry's run and `seq`.
    fn journal(key: String, entry: &RunJournalEntryInfo) -> Self {
        let dedupe = Some((Arc::from(entry.run_id.as_str()), entry.seq));
        Self::frames(vec![(AgentWsEvent::AppendFrame(frames::journal(key, entry.clone())), dedupe)])
    }

    /// The frame for a receiver of `protocol` with `role`; `None` when the agent snapshot says the
    /// receiver no longer sees the agent (its subscription ends a moment later).
    fn for_receiver(&mut self, protocol: u32, role: Role, member: bool) -> Option<Arc<OutFrame>> {
        let role = match &self.source {
            Source::Frames(_) => None,
            Source::Agent { info, .. } => Some(current_role(role, member, info)?),
        };
        let shape = (frames::shape(protocol), role);
        if let Some((last, frame)) = &self.last
            && *last == shape
        {
            return Some(frame.clone());
        }
        let source = &self.source;
        let frame = self.encoded.entry(shape).or_insert_with(|| encode(source, protocol, role)).clone();
        self.last = Some((shape, frame.clone()));
        Some(frame)
    }
}

/// `source` as a receiver of `protocol` (with `role`, for an agent snapshot) reads it.
fn encode(source: &Source, protocol: u32, role: Option<Role>) -> Arc<OutFrame> {
    match source {
        Source::Frames(list) => OutFrame::new(
            list.iter()
                .map(|(frame, append)| Part { text: frames::encode(frame, protocol), append: append.clone() })
                .collect(),
        ),
        Source::Agent { key, info } => {
            let mut info = (**info).clone();
            info.access_role = role.map(Role::wire);
            let text = match wire::to_ipld(&info) {
                Ok(value) => frames::encode(
                    &AgentWsEvent::ChangeFrame(ChangeFrame {
                        extra: Default::default(),
                        key: key.clone(),
                        value: value.into(),
                    }),
                    protocol,
                ),
                Err(error) => frames::error(&ApiError::internal(error), None, protocol),
            };
            OutFrame::plain(text)
        }
    }
}

/// A receiver's role as the agent snapshot `info` makes it now. Owners and writers keep theirs;
/// a reader is a chatter exactly while public chat is on; a public receiver sees the agent only
/// while public read is on. (The snapshot is published before the membership change that would
/// refresh the registry's roles.)
fn current_role(role: Role, member: bool, info: &AgentInfo) -> Option<Role> {
    let (public_read, public_chat) = (info.public_read == Some(true), info.public_chat == Some(true));
    match role {
        Role::Owner | Role::Writer if member => Some(role),
        _ if !member && !public_read => None,
        _ if public_read && public_chat => Some(Role::Chatter),
        _ => Some(Role::Reader),
    }
}

impl Hub {
    async fn on_event(&mut self, event: &Event) -> ApiResult<()> {
        match event {
            Event::SessionAppended { agent_id, event, .. } => self.appended(agent_id, event).await,
            Event::SessionChanged { session_id, agent_id } => self.session_changed(session_id, agent_id).await,
            Event::AgentChanged { agent_id } => self.agent_changed(agent_id).await,
            Event::RunChanged { run, .. } => self.run_changed(run).await,
            Event::JournalAppended { root_run_id, entry } => {
                self.journal_appended(root_run_id, entry);
                Ok(())
            }
            Event::AccountChange { account_id, reason, agent_id, session_id } => {
                self.account_change(account_id, *reason, agent_id.as_deref(), session_id.as_deref()).await
            }
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.edge.live.registry()
    }

    /// The owner and members of `agent` when some socket listens account-wide (`None` otherwise,
    /// or when the agent is gone).
    async fn audience(&mut self, agent: &str) -> ApiResult<Option<Arc<Audience>>> {
        if !self.registry().has_account_keys() {
            return Ok(None);
        }
        self.load_audience(agent).await
    }

    /// The owner and members of `agent` (`None` when it is gone), from the cache or the database.
    async fn load_audience(&mut self, agent: &str) -> ApiResult<Option<Arc<Audience>>> {
        if let Some(audience) = self.audiences.get(agent) {
            return Ok(Some(audience.clone()));
        }
        let id = agent.to_owned();
        let loaded = self.edge.app.db.read(move |conn| load_audience(conn, &id)).await?;
        let Some(audience) = loaded.map(Arc::new) else { return Ok(None) };
        if self.audiences.len() >= 16_384 {
            self.audiences.clear();
        }
        self.audiences.insert(Arc::from(agent), audience.clone());
        Ok(Some(audience))
    }

    /// An append's account-wide copies: [`to_session`] already gave `sessions/<id>` subscribers
    /// theirs, so sockets listening to that key are left out here.
    async fn appended(&mut self, agent: &str, event: &Arc<SessionEvent>) -> ApiResult<()> {
        let Some(audience) = self.audience(agent).await? else { return Ok(()) };
        let key = format!("sessions/{}", event.session_id);
        let registry = self.registry();
        let mut targets = Targets::default();
        targets.accounts(&registry, Some(&audience));
        targets.without(&registry, &key);
        if targets.is_empty() {
            return Ok(());
        }
        let mut outgoing = Outgoing::appends(&key, std::slice::from_ref(&**event));
        targets.send(&registry, &mut outgoing);
        Ok(())
    }

    async fn session_changed(&mut self, session_id: &str, agent: &str) -> ApiResult<()> {
        let key = format!("sessions/{session_id}");
        let audience = self.audience(agent).await?;
        let interested = {
            let registry = self.registry();
            registry.has(&key) || registry.has(&format!("agents/{agent}")) || audience.is_some()
        };
        if !interested {
            return Ok(());
        }
        let mut pending = match self.changes.pending.lock() {
            Ok(pending) => pending,
            Err(poisoned) => poisoned.into_inner(),
        };
        pending.insert(session_id.to_owned(), (agent.to_owned(), audience));
        drop(pending);
        self.changes.wake.notify_one();
        Ok(())
    }

    /// A workflow journal entry goes to its tree's key only (upstream sends no account-wide
    /// frame for it).
    fn journal_appended(&mut self, root_run_id: &str, entry: &RunJournalEntryInfo) {
        let key = format!("runs/{root_run_id}");
        let registry = self.registry();
        if !registry.has(&key) {
            return;
        }
        let mut targets = Targets::default();
        targets.key(&registry, &key);
        let mut outgoing = Outgoing::journal(key, entry);
        targets.send(&registry, &mut outgoing);
    }

    /// A run's new state goes to its tree's key and, as upstream's `run-change`, to the
    /// account-wide subscribers of its agent's owner and members.
    async fn run_changed(&mut self, run: &RunInfo) -> ApiResult<()> {
        let Some(agent) = run.agent_id.as_deref() else { return Ok(()) };
        let key = format!("runs/{}", run.root_run_id);
        let audience = self.audience(agent).await?;
        if !self.registry().has(&key) && audience.is_none() {
            return Ok(());
        }
        let value = wire::to_ipld(run).map_err(ApiError::internal)?;
        let mut outgoing = Outgoing::new(AgentWsEvent::ChangeFrame(ChangeFrame {
            extra: Default::default(),
            key: key.clone(),
            value: value.into(),
        }));
        let registry = self.registry();
        let mut targets = Targets::default();
        targets.key(&registry, &key);
        targets.accounts(&registry, audience.as_deref());
        targets.send(&registry, &mut outgoing);
        Ok(())
    }

    async fn agent_changed(&mut self, agent: &str) -> ApiResult<()> {
        let key = format!("agents/{agent}");
        let audience = self.audience(agent).await?;
        if !self.registry().has(&key) && audience.is_none() {
            return Ok(());
        }
        let id = agent.to_owned();
        let info = self
            .edge
            .app
            .db
            .read(move |conn| match crate::agents::store::load_info(conn, &id, Role::Owner) {
                Ok(info) => Ok(Some(info)),
                Err(error) if error.kind() == crate::error::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(error),
            })
            .await?;
        let Some(info) = info else {
            self.audiences.remove(agent);
            self.revoke_agent(agent).await?;
            return Ok(());
        };
        let mut outgoing = Outgoing::agent(key.clone(), info);
        let registry = self.registry();
        let mut targets = Targets::default();
        targets.key(&registry, &key);
        targets.accounts(&registry, audience.as_deref());
        targets.send(&registry, &mut outgoing);
        Ok(())
    }

    async fn account_change(
        &mut self,
        account: &str,
        reason: ChangeReason,
        agent: Option<&str>,
        session: Option<&str>,
    ) -> ApiResult<()> {
        if let Some(agent) = agent
            && matches!(
                reason,
                ChangeReason::AgentCollaboratorsChanged
                    | ChangeReason::AgentInvitesChanged
                    | ChangeReason::AgentDeleted
            )
        {
            self.audiences.remove(agent);
            if reason != ChangeReason::AgentInvitesChanged {
                self.revoke_agent(agent).await?;
            }
        }
        // Agent-scoped changes reach every member under their own key, as upstream copies them;
        // an agent's public subscribers hear the owner's copy, so the owner must be known.
        let audience = match agent {
            Some(agent) if self.registry().has(&format!("agents/{agent}")) => self.load_audience(agent).await?,
            Some(agent) if reason.reaches_members() => self.audience(agent).await?,
            _ => None,
        };
        let mut receivers: Vec<Arc<str>> = vec![Arc::from(account)];
        if let Some(audience) = audience.as_ref().filter(|_| reason.reaches_members()) {
            receivers.extend(audience.accounts.iter().map(|(id, _)| id.clone()).filter(|id| **id != *account));
        }
        let owner = audience.as_ref().map(|audience| audience.owner.clone());
        let registry = self.registry();
        for receiver in receivers {
            let key = format!("account/{receiver}");
            let hint = AccountChangeHint {
                extra: Default::default(),
                agent_id: agent.map(Into::into),
                reason: reason.as_str().to_owned(),
                references: None,
                session_id: session.map(Into::into),
            };
            let Ok(value) = wire::to_ipld(&hint) else { continue };
            let mut outgoing = Outgoing::new(AgentWsEvent::ChangeFrame(ChangeFrame {
                extra: Default::default(),
                key: key.clone(),
                value: value.into(),
            }));
            let mut targets = Targets::default();
            targets.key(&registry, &key);
            if let Some(agent) = agent {
                // An agent's subscribers hear the copy addressed to them; public ones the owner's.
                let is_owner = owner.as_deref() == Some(&*receiver);
                targets.filtered(&registry, &format!("agents/{agent}"), |bound_account, sub| {
                    bound_account == &*receiver || (is_owner && !sub.member)
                });
            }
            targets.send(&registry, &mut outgoing);
        }
        Ok(())
    }

    /// Re-checks every subscription that depends on access to `agent`: a subscriber left without
    /// a role gets an `error` frame and loses the key; one whose role changed keeps it with the
    /// new role.
    async fn revoke_agent(&mut self, agent: &str) -> ApiResult<()> {
        let subscriptions: Vec<(SocketId, Arc<str>, Sub, Arc<str>)> = {
            let registry = self.registry();
            registry
                .of_agent(agent)
                .into_iter()
                .filter_map(|(socket, key, sub)| {
                    let account = registry.socket(socket)?.account_id.clone();
                    Some((socket, key, sub, account))
                })
                .collect()
        };
        if subscriptions.is_empty() {
            return Ok(());
        }
        let accounts: HashSet<Arc<str>> = subscriptions.iter().map(|(_, _, _, account)| account.clone()).collect();
        let id = agent.to_owned();
        let access = self
            .edge
            .app
            .db
            .read(move |conn| {
                accounts
                    .into_iter()
                    .map(|account| Ok((account.clone(), access::resolve(conn, &id, &account)?)))
                    .collect::<ApiResult<HashMap<_, _>>>()
            })
            .await?;
        let mut registry = self.registry();
        for (socket, key, sub, account) in subscriptions {
            match access.get(&account).cloned().flatten() {
                Some(now) => {
                    let refreshed = Sub { agent_id: sub.agent_id.clone(), role: now.role, member: now.member };
                    if refreshed != sub {
                        let _ = registry.subscribe(socket, &key, refreshed, usize::MAX);
                    }
                }
                None => {
                    let error = ApiError::not_found(not_found_message(&key));
                    if let Some(bound) = registry.socket(socket) {
                        bound.send(&OutFrame::plain(frames::error(&error, Some(&key), bound.protocol)));
                    }
                    registry.unsubscribe(socket, &key);
                }
            }
        }
        Ok(())
    }

    /// Ends every subscription to `key` with `error`.
    /// The hub missed `missed` events: every bound socket may have missed some, so each is closed
    /// and its client resumes from its cursor.
    fn fell_behind(&mut self, missed: u64) {
        tracing::warn!(missed, "the WebSocket hub fell behind the event bus; closing bound sockets");
        self.audiences.clear();
        for (_, bound) in self.registry().sockets() {
            bound.outbox.overflow();
        }
    }
}

impl SessionSink for Live {
    /// Sends `frame` to the subscribers of `sessions/<session_id>` now, on the caller's task.
    ///
    /// A session's appends and partials skip the hub: its one task delayed every partial behind
    /// whatever the bus held before it, and a partial and the appends around it must keep their
    /// order, so both go out from the task that publishes them (the runtime's turn or the handler
    /// that committed). The hub still sends appends to account-wide subscribers
    /// (`Hub::appended`), whose order relative to partials nobody sees.
    fn send(&self, session_id: &str, frame: SessionFrame<'_>) {
        to_session(self, session_id, frame);
    }
}

/// Hands `frame` to every subscriber of `sessions/<session_id>`: one key, so each subscriber once,
/// straight from the registry.
fn to_session(live: &Live, session_id: &str, frame: SessionFrame<'_>) {
    let key = format!("sessions/{session_id}");
    let registry = live.registry();
    if !registry.has(&key) {
        return;
    }
    let mut outgoing = match frame {
        SessionFrame::Appends(events) => Outgoing::appends(&key, events),
        SessionFrame::Partial { partial_id, patch } => {
            Outgoing::new(AgentWsEvent::AppendPartialFrame(AppendPartialFrame {
                extra: Default::default(),
                key: key.clone(),
                partial_id: partial_id.to_owned(),
                patch: patch.clone(),
                run_id: None,
            }))
        }
    };
    for (socket, sub) in registry.subscribers(&key) {
        if let Some(bound) = registry.socket(socket)
            && let Some(frame) = outgoing.for_receiver(bound.protocol, sub.role, sub.member)
        {
            bound.send(&frame);
        }
    }
}

/// Ends every subscription to `key` with an `error` frame.
fn end(live: &Live, key: &str, error: &ApiError) {
    let mut registry = live.registry();
    let sockets: Vec<SocketId> = registry.subscribers(key).map(|(socket, _)| socket).collect();
    for socket in sockets {
        if let Some(bound) = registry.socket(socket) {
            bound.send(&OutFrame::plain(frames::error(error, Some(key), bound.protocol)));
        }
        registry.unsubscribe(socket, key);
    }
}

/// The message a fresh `Subscribe` to `key` would now get.
fn not_found_message(key: &str) -> &'static str {
    match key.split_once('/').map(|(kind, _)| kind) {
        Some("sessions") => "Session not found",
        Some("runs") => "Run not found",
        _ => "Agent not found",
    }
}

fn load_audience(conn: &crate::db::Connection, agent: &str) -> ApiResult<Option<Audience>> {
    let Some((owner, public_read, public_chat)) = crate::agents::store::owner_and_flags(conn, agent)? else {
        return Ok(None);
    };
    let owner: Arc<str> = Arc::from(owner);
    let mut accounts = vec![(owner.clone(), Role::Owner)];
    for (account, role) in crate::collaborators::store::accepted(conn, agent)? {
        accounts.push((Arc::from(account), crate::agents::store::member_role(&role, public_read, public_chat)));
    }
    Ok(Some(Audience { owner, accounts }))
}

/// The sockets one frame goes to, each once, with the role it sees and whether it is a member.
#[derive(Default)]
struct Targets {
    sockets: HashMap<SocketId, (Role, bool)>,
}

impl Targets {
    fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    /// Every subscriber of `key`.
    fn key(&mut self, registry: &Registry, key: &str) {
        self.filtered(registry, key, |_, _| true);
    }

    /// The subscribers of `key` that `keep` accepts (given the socket's account and subscription).
    fn filtered(&mut self, registry: &Registry, key: &str, keep: impl Fn(&str, &Sub) -> bool) {
        for (socket, sub) in registry.subscribers(key) {
            let Some(bound) = registry.socket(socket) else { continue };
            if keep(&bound.account_id, sub) {
                self.sockets.entry(socket).or_insert((sub.role, sub.member));
            }
        }
    }

    /// The account-wide subscribers of every account in `audience`.
    fn accounts(&mut self, registry: &Registry, audience: Option<&Audience>) {
        let Some(audience) = audience else { return };
        for (account, role) in &audience.accounts {
            for (socket, _) in registry.subscribers(&format!("account/{account}")) {
                self.sockets.insert(socket, (*role, true));
            }
        }
    }

    /// Leaves out the subscribers of `key`.
    fn without(&mut self, registry: &Registry, key: &str) {
        for (socket, _) in registry.subscribers(key) {
            self.sockets.remove(&socket);
        }
    }

    fn send(self, registry: &Registry, outgoing: &mut Outgoing) {
        for (socket, (role, member)) in self.sockets {
            if let Some(bound) = registry.socket(socket)
                && let Some(frame) = outgoing.for_receiver(bound.protocol, role, member)
            {
                bound.send(&frame);
            }
        }
    }
}
