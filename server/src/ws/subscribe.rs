//! One `Subscribe`: from the frame's bytes to a verified caller, an authorized key and what to
//! replay (docs/protocol.md §D.6).
//!
//! The envelope goes through `auth::verify` exactly as an HTTP action does (window, signature,
//! delegated signer, replay guard, protocol floor), with the same messages. Then the key:
//!
//! | key | who may | replay |
//! |---|---|---|
//! | `account/<id>` | that account only | nothing |
//! | `agents/<id>` | any role on the agent (owner, member, public reader or chatter) | nothing |
//! | `sessions/<id>` | any role on the session's agent | the session (`change`), then its events with `seq > afterSeq` |
//! | `runs/<id>` | any role on the run's agent | one `change` per run of the tree, oldest first |
//!
//! A run id that is not a root subscribes to its root's tree (live run events are published
//! under the root). Anything else is `Subscription key is not authorized`.

use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    RunInfo, RunInfoKind, RunJournalEntryInfo, SessionEvent, SessionInfo, Subscribe,
};

use tokio_tungstenite::tungstenite::Message;

use super::registry::Sub;
use crate::access::{self, Need, Role};
use crate::app::App;
use crate::auth::{self, Transport};
use crate::caller::Caller;
use crate::edge::Edge;
use crate::error::{ApiError, ApiResult};
use crate::{runs, sessions};

/// The refusal of a key this socket may not have.
pub(crate) const NOT_AUTHORIZED: &str = "Subscription key is not authorized";
/// A text frame that is not a JSON array of bytes.
pub(crate) const BAD_TEXT: &str = "Subscribe frames are DAG-CBOR: send a binary frame (or a JSON array of byte values)";

/// Session events replayed per database read.
pub(crate) const REPLAY_PAGE: i64 = 500;

/// A verified, authorized subscription and what it replays first.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// Who subscribed.
    pub caller: Caller,
    /// The key as the client sent it (echoed in `subscribed`).
    pub key: String,
    /// The key frames are published under (the root for a `runs/` key).
    pub registered: String,
    /// The subscriber's access.
    pub sub: Sub,
    /// What to replay after `subscribed`: read by [`load`] only once the subscription is
    /// registered, so whatever commits after that read also arrives live.
    pub plan: Plan,
}

/// What a subscription will replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// `account/` and `agents/` keys replay nothing.
    Nothing,
    /// The session, then its events with `seq > after`.
    Session {
        /// The session.
        id: String,
        /// The client's `afterSeq` (0 when absent).
        after: i64,
    },
    /// Every run of the tree rooted at `root`, then each workflow run's journal entries with
    /// `seq > after`.
    Runs {
        /// The root run.
        root: String,
        /// The client's `afterSeq` (0 when absent), applied per run.
        after: i64,
    },
}

/// What a subscription replays before live frames.
#[derive(Debug)]
pub(crate) enum Replay {
    /// Nothing to replay.
    Nothing,
    /// The session, then its first page of events (more are read by [`more_events`]).
    Session {
        /// The session as it is now.
        session: Box<SessionInfo>,
        /// Events with `seq > afterSeq`, oldest first, at most [`REPLAY_PAGE`].
        events: Vec<SessionEvent>,
    },
    /// Every run of the tree, oldest first, then the journal entries of its workflow runs (per
    /// run, in `seq` order).
    Runs(Vec<RunInfo>, Vec<RunJournalEntryInfo>),
}

/// Reads what `plan` replays (its first page, for a session).
pub(crate) async fn load(app: &App, plan: Plan) -> ApiResult<Replay> {
    match plan {
        Plan::Nothing => Ok(Replay::Nothing),
        Plan::Session { id, after } => {
            app.db
                .read(move |conn| {
                    let session = Box::new(sessions::store::load_info(conn, &id)?);
                    let events = sessions::events::after(conn, &id, after, i64::MAX, Some(REPLAY_PAGE))?;
                    Ok(Replay::Session { session, events })
                })
                .await
        }
        Plan::Runs { root, after } => {
            app.db
                .read(move |conn| {
                    let tree = runs::store::tree(conn, &root)?;
                    let mut entries = Vec::new();
                    for run in tree.iter().filter(|run| run.kind == RunInfoKind::Workflow) {
                        entries.extend(runs::store::journal_after(conn, &run.id, after, None)?);
                    }
                    Ok(Replay::Runs(tree, entries))
                })
                .await
        }
    }
}

/// The bytes of a `Subscribe` frame: a binary frame as it is, a text frame only as a JSON array
/// of byte values (upstream accepts that form; anything looser is refused).
pub(crate) fn frame_bytes(message: Message) -> Option<Result<Vec<u8>, ApiError>> {
    match message {
        Message::Binary(bytes) => Some(Ok(bytes.into())),
        Message::Text(text) => {
            Some(serde_json::from_str::<Vec<u8>>(text.as_str()).map_err(|_| ApiError::invalid(BAD_TEXT)))
        }
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_) => None,
    }
}

/// A refused `Subscribe`: the failure, and the key it named once that could be read.
#[derive(Debug)]
pub(crate) struct Refused {
    /// What went wrong.
    pub error: ApiError,
    /// The key, when the action got that far.
    pub key: Option<String>,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Self { error, key: None }
    }
}

/// Verifies a `Subscribe` envelope and authorizes its key.
pub(crate) async fn accept(edge: &Edge, bytes: Vec<u8>) -> Result<Accepted, Refused> {
    let verified = auth::verify(edge, bytes, Transport::WebSocket).await?;
    if verified.action_name != "Subscribe" {
        return Err(ApiError::invalid(auth::NOT_SUBSCRIBE).into());
    }
    let action = seed_agents_compat::upgrade_action(verified.caller.protocol, "Subscribe", verified.action)
        .map_err(ApiError::from)?;
    let key = match &action {
        Ipld::Map(fields) => match fields.get("key") {
            Some(Ipld::String(key)) => key.clone(),
            _ => return Err(ApiError::invalid(NOT_AUTHORIZED).into()),
        },
        _ => return Err(ApiError::invalid(NOT_AUTHORIZED).into()),
    };
    authorize(&edge.app, verified.caller, action).await.map_err(|error| Refused { error, key: Some(key) })
}

/// Decodes a verified `Subscribe` action and authorizes its key for `caller`.
async fn authorize(app: &App, caller: Caller, action: Ipld) -> ApiResult<Accepted> {
    let action: Subscribe = seed_agents_server_core::action::decode("Subscribe", action)?;
    let after = action.after_seq.unwrap_or(0);
    let Some((kind, id)) = action.key.split_once('/').filter(|(_, id)| !id.is_empty() && !id.contains('/')) else {
        return Err(ApiError::invalid(NOT_AUTHORIZED));
    };
    let (id, account) = (id.to_owned(), caller.account_id.clone());
    let (registered, sub, plan) = match kind {
        "account" if id == caller.account_id => {
            (action.key.clone(), Sub { agent_id: None, role: Role::Owner, member: true }, Plan::Nothing)
        }
        "agents" => {
            app.db
                .read(move |conn| {
                    let access = access::require(conn, &id, &account, Need::Read)?;
                    Ok((format!("agents/{id}"), sub_of(&access), Plan::Nothing))
                })
                .await?
        }
        "sessions" => {
            app.db
                .read(move |conn| {
                    let access = access::require_session(conn, &id, &account, Need::Read)?;
                    Ok((format!("sessions/{id}"), sub_of(&access), Plan::Session { id, after }))
                })
                .await?
        }
        "runs" => {
            app.db
                .read(move |conn| {
                    let missing = || ApiError::not_found("Run not found");
                    let (root, agent) = runs::store::root_and_agent(conn, &id)?.ok_or_else(missing)?;
                    let access = access::resolve(conn, &agent, &account)?.ok_or_else(missing)?;
                    Ok((format!("runs/{root}"), sub_of(&access), Plan::Runs { root, after }))
                })
                .await?
        }
        _ => return Err(ApiError::invalid(NOT_AUTHORIZED)),
    };
    Ok(Accepted { caller, key: action.key, registered, sub, plan })
}

/// The next page of a session's events after `after`.
pub(crate) async fn more_events(app: &App, session_id: &str, after: i64) -> ApiResult<Vec<SessionEvent>> {
    let session_id = session_id.to_owned();
    app.db.read(move |conn| sessions::events::after(conn, &session_id, after, i64::MAX, Some(REPLAY_PAGE))).await
}

fn sub_of(access: &access::Access) -> Sub {
    Sub { agent_id: Some(Arc::from(access.agent_id.as_str())), role: access.role, member: access.member }
}
