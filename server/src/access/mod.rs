//! Who may do what to an agent: the one place roles are decided (ARCHITECTURE.md rule 9).
//!
//! Roles, lowest first: reader < chatter < writer < owner. The owner is the agent's account;
//! accepted collaborators are readers or writers; when the agent is public-read every signed
//! account is at least a reader, and a chatter when public chat is on too. A caller with no role
//! sees `404 Agent not found` (invisible looks missing); a role too low gets 403.

mod store;

use crate::db::Connection;
use seed_agents_protocol::generated::AgentAccessRole;

use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};

/// A caller's role on one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Role {
    /// May read every agent-scoped thing.
    Reader,
    /// A reader who may also create, message, stop and retry sessions (public chat).
    Chatter,
    /// May change agent-scoped things, rename and delete sessions, control runs.
    Writer,
    /// The agent's account: everything, including collaborators and deletion.
    Owner,
}

impl Role {
    /// The wire form of `accessRole`.
    pub(crate) fn wire(self) -> AgentAccessRole {
        match self {
            Role::Reader => AgentAccessRole::Reader,
            Role::Chatter => AgentAccessRole::Chatter,
            Role::Writer => AgentAccessRole::Writer,
            Role::Owner => AgentAccessRole::Owner,
        }
    }
}

/// What an action needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// At least reader.
    Read,
    /// At least chatter.
    Chat,
    /// At least writer.
    Write,
    /// The owner.
    Own,
}

impl Need {
    fn role(self) -> Role {
        match self {
            Need::Read => Role::Reader,
            Need::Chat => Role::Chatter,
            Need::Write => Role::Writer,
            Need::Own => Role::Owner,
        }
    }
}

/// A caller's resolved access to an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// The agent.
    pub agent_id: String,
    /// The agent's owner (where agent-scoped rows are stored).
    pub owner_id: String,
    /// The caller's effective role.
    pub role: Role,
    /// Whether the role comes from ownership or accepted membership (not public access).
    pub member: bool,
}

/// The role of `account_id` on `agent_id`, or `None` when it has none (or the agent is missing).
pub(crate) fn resolve(conn: &Connection, agent_id: &str, account_id: &str) -> ApiResult<Option<Access>> {
    Ok(store::standing(conn, agent_id, account_id)?.and_then(|standing| decide(agent_id, standing, account_id)))
}

/// The access `standing` on agent `agent_id` gives `account_id`, if any.
fn decide(agent_id: &str, standing: store::Standing, account_id: &str) -> Option<Access> {
    let store::Standing { owner_id, public_read, public_chat, member_role } = standing;
    let access =
        |role, member| Some(Access { agent_id: agent_id.to_owned(), owner_id: owner_id.clone(), role, member });
    if owner_id == account_id {
        return access(Role::Owner, true);
    }
    let member = match member_role.as_deref() {
        Some("writer") => Some(Role::Writer),
        Some("reader") => Some(Role::Reader),
        _ => None,
    };
    let public = match (public_read, public_chat) {
        (true, true) => Some(Role::Chatter),
        (true, false) => Some(Role::Reader),
        _ => None,
    };
    match (member, public) {
        (Some(member_role), public) => access(public.map_or(member_role, |public| public.max(member_role)), true),
        (None, Some(public)) => access(public, false),
        (None, None) => None,
    }
}

/// The prologue of most agent-scoped actions: a read transaction in which `caller` must have
/// `need` on `agent_id` ([`require`]), then `work` with that access. Queued when called, as
/// [`Db::read`](crate::db::Db::read) is.
pub(crate) fn read<T, F, A>(
    app: &App,
    caller: &Caller,
    agent_id: A,
    need: Need,
    work: F,
) -> impl Future<Output = ApiResult<T>> + Send + use<T, F, A>
where
    T: Send + 'static,
    F: FnOnce(&Connection, Access) -> ApiResult<T> + Send + 'static,
    A: Into<String>,
{
    let (account, agent_id) = (caller.account_id.clone(), agent_id.into());
    app.db.read(move |conn| work(conn, require(conn, &agent_id, &account, need)?))
}

/// [`read`], in a write transaction: the check and the write it guards commit together.
pub(crate) fn write<T, F, A>(
    app: &App,
    caller: &Caller,
    agent_id: A,
    need: Need,
    work: F,
) -> impl Future<Output = ApiResult<T>> + Send + use<T, F, A>
where
    T: Send + 'static,
    F: FnOnce(&Connection, Access) -> ApiResult<T> + Send + 'static,
    A: Into<String>,
{
    let (account, agent_id) = (caller.account_id.clone(), agent_id.into());
    app.db.write(move |conn| work(conn, require(conn, &agent_id, &account, need)?))
}

/// [`resolve`], then require `need`: 404 `Agent not found` without a role, 403 when too low.
pub(crate) fn require(conn: &Connection, agent_id: &str, account_id: &str, need: Need) -> ApiResult<Access> {
    let access = resolve(conn, agent_id, account_id)?.ok_or_else(|| ApiError::not_found("Agent not found"))?;
    check(&access, need)?;
    Ok(access)
}

/// Whether `access` satisfies `need` (403 with the protocol's message when not).
pub(crate) fn check(access: &Access, need: Need) -> ApiResult<()> {
    if access.role >= need.role() {
        return Ok(());
    }
    Err(match need {
        Need::Own => ApiError::forbidden("Only the agent owner can do this"),
        Need::Read | Need::Chat | Need::Write => ApiError::forbidden("Write access is required"),
    })
}

/// The agent of a session, and the caller's access to it; 404 `Session not found` when the
/// session is missing or its agent is invisible to the caller.
pub(crate) fn require_session(conn: &Connection, session_id: &str, account_id: &str, need: Need) -> ApiResult<Access> {
    let missing = || ApiError::not_found("Session not found");
    let (agent_id, standing) = store::session_standing(conn, session_id, account_id)?.ok_or_else(missing)?;
    let access = decide(&agent_id, standing, account_id).ok_or_else(missing)?;
    check(&access, need)?;
    Ok(access)
}

/// The agent of a run, and the caller's access to it; 404 `Run not found` when the run is
/// missing, has no agent any more (runs outlive their agent, and then nobody sees them), or its
/// agent is invisible to the caller.
pub(crate) fn require_run(conn: &Connection, run_id: &str, account_id: &str, need: Need) -> ApiResult<Access> {
    let missing = || ApiError::not_found("Run not found");
    let agent_id = store::agent_of_run(conn, run_id)?.ok_or_else(missing)?;
    let access = resolve(conn, &agent_id, account_id)?.ok_or_else(missing)?;
    check(&access, need)?;
    Ok(access)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE agents (id TEXT PRIMARY KEY, account_id TEXT, public_read INTEGER, public_chat INTEGER);
             CREATE TABLE agent_collaborators (agent_id TEXT, account_id TEXT, role TEXT, status TEXT);
             CREATE TABLE sessions (id TEXT PRIMARY KEY, agent_id TEXT);
             CREATE TABLE runs (id TEXT PRIMARY KEY, agent_id TEXT);
             INSERT INTO runs VALUES ('run', 'a'), ('detached', NULL);
             INSERT INTO agents VALUES ('a', 'owner', 0, 0), ('pub', 'owner', 1, 0), ('chat', 'owner', 1, 1);
             INSERT INTO agent_collaborators VALUES
               ('a', 'w', 'writer', 'accepted'), ('a', 'r', 'reader', 'accepted'), ('a', 'p', 'writer', 'pending'),
               ('chat', 'r', 'reader', 'accepted'), ('chat', 'w', 'writer', 'accepted');
             INSERT INTO sessions VALUES ('s', 'a');",
        )
        .unwrap();
        conn
    }

    fn role(conn: &Connection, agent: &str, account: &str) -> Option<Role> {
        resolve(conn, agent, account).unwrap().map(|access| access.role)
    }

    #[test]
    fn resolves_every_kind_of_role() {
        let conn = db();
        assert_eq!(role(&conn, "a", "owner"), Some(Role::Owner));
        assert_eq!(role(&conn, "a", "w"), Some(Role::Writer));
        assert_eq!(role(&conn, "a", "r"), Some(Role::Reader));
        assert_eq!(role(&conn, "a", "p"), None, "a pending invite grants nothing");
        assert_eq!(role(&conn, "a", "stranger"), None);
        assert_eq!(role(&conn, "pub", "stranger"), Some(Role::Reader));
        assert_eq!(role(&conn, "chat", "stranger"), Some(Role::Chatter));
        assert_eq!(role(&conn, "chat", "r"), Some(Role::Chatter), "public chat lifts a member reader");
        assert_eq!(role(&conn, "chat", "w"), Some(Role::Writer));
        assert_eq!(role(&conn, "missing", "owner"), None);
        assert!(!resolve(&conn, "pub", "stranger").unwrap().unwrap().member);
    }

    #[test]
    fn requirements_answer_404_or_403() {
        let conn = db();
        assert_eq!(require(&conn, "a", "stranger", Need::Read).unwrap_err().kind(), ErrorKind::NotFound);
        let error = require(&conn, "a", "r", Need::Write).unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::Forbidden, "Write access is required"));
        let error = require(&conn, "a", "w", Need::Own).unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::Forbidden, "Only the agent owner can do this"));
        assert!(require(&conn, "chat", "stranger", Need::Chat).is_ok());
        assert!(require(&conn, "pub", "stranger", Need::Chat).is_err());
        let error = require_session(&conn, "s", "stranger", Need::Read).unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::NotFound, "Session not found"));
        assert!(require_session(&conn, "s", "r", Need::Read).is_ok());
        assert!(require_run(&conn, "run", "r", Need::Read).is_ok());
        let run_error = |run, account, need| {
            let error = require_run(&conn, run, account, need).unwrap_err();
            (error.kind(), error.message().to_owned())
        };
        let missing = (ErrorKind::NotFound, "Run not found".to_owned());
        assert_eq!(run_error("run", "stranger", Need::Read), missing);
        assert_eq!(run_error("detached", "owner", Need::Read), missing, "a run without an agent is nobody's");
        assert_eq!(run_error("nope", "owner", Need::Read), missing);
        assert_eq!(run_error("run", "r", Need::Write), (ErrorKind::Forbidden, "Write access is required".to_owned()));
    }
}
