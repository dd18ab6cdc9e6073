//! Collaborators: invitations, membership and the public flags of an agent, with their SQL.
//!
//! A row of `agent_collaborators` is `pending` from the owner's invite until the invitee accepts
//! it; only `accepted` rows grant a role, and [`access`] decides what that role allows. Managing
//! members and the public flags is owner-only; listing, accepting and declining invites act on
//! the signed account's own rows. Invariant: public chat is never on while public read is off.

use std::str::FromStr;

use seed_agents_protocol::Principal;
use seed_agents_protocol::generated::{
    AcceptAgentInvite, AcceptAgentInviteResponse, AgentAccessRole, AgentCollaboratorInfo, AgentCollaboratorInfoStatus,
    AgentCollaboratorRole, AgentInfo, DeclineAgentInvite, DeclineAgentInviteResponse, InviteAgentCollaborator,
    InviteAgentCollaboratorResponse, ListAgentCollaborators, ListAgentCollaboratorsResponse, ListAgentInvites,
    ListAgentInvitesResponse, RemoveAgentCollaborator, RemoveAgentCollaboratorResponse, SetAgentPublicChat,
    SetAgentPublicChatResponse, SetAgentPublicRead, SetAgentPublicReadResponse,
};

use crate::access::{self, Need, Role};
use crate::agents;
use crate::app::App;
use crate::bus::{ChangeReason, Event};
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::validate::{MAX_NAME_BYTES, bounded_string};
use store::PublicFlags;

pub(crate) mod store;

/// Trims `value` and requires the canonical string form of a Seed account (`z…`), as upstream's
/// `normalizeAccountId` does: 400 `Collaborator account is required` / `… is too large` /
/// `Collaborator account must be a valid Seed account ID`.
pub(crate) fn collaborator_account(value: &str) -> ApiResult<String> {
    let account = bounded_string(value, "Collaborator account", MAX_NAME_BYTES)?;
    match Principal::from_str(&account) {
        Ok(principal) if principal.to_string() == account => Ok(account),
        _ => Err(ApiError::invalid("Collaborator account must be a valid Seed account ID")),
    }
}

/// A member role as `accessRole` spells it.
fn access_role(role: AgentCollaboratorRole) -> AgentAccessRole {
    match role {
        AgentCollaboratorRole::Reader => AgentAccessRole::Reader,
        AgentCollaboratorRole::Writer => AgentAccessRole::Writer,
    }
}

impl PublicFlags {
    /// After `SetAgentPublicRead`: turning read off turns chat off too.
    fn with_read(self, read: bool) -> Self {
        Self { read, chat: read && self.chat }
    }

    /// After `SetAgentPublicChat`: enabling chat needs read on (400).
    fn with_chat(self, chat: bool) -> ApiResult<Self> {
        if chat && !self.read {
            return Err(ApiError::invalid("Public chat requires public read access"));
        }
        Ok(Self { read: self.read, chat })
    }
}

/// `ListAgentInvites {}`: the signed account's pending invitations, newest update first. An
/// invite shows only the agent's id and name, its owner, the role and the timestamps.
pub(crate) async fn list_agent_invites(
    app: &App,
    caller: &Caller,
    _action: ListAgentInvites,
) -> ApiResult<ListAgentInvitesResponse> {
    let account = caller.account_id.clone();
    let invites = app.db.read(move |conn| store::pending_invites(conn, &account)).await?;
    Ok(ListAgentInvitesResponse { extra: Default::default(), invites })
}

/// `ListAgentCollaborators {agentId}` (reader): the owner, then the members, with the public
/// flags. Only the owner sees pending invitations.
pub(crate) async fn list_agent_collaborators(
    app: &App,
    caller: &Caller,
    action: ListAgentCollaborators,
) -> ApiResult<ListAgentCollaboratorsResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            let access = access::require(conn, &action.agent_id, &account, Need::Read)?;
            let agent = store::agent_summary(conn, &access.agent_id)?;
            let owner = AgentCollaboratorInfo {
                extra: Default::default(),
                account_id: access.owner_id.clone().into(),
                role: AgentAccessRole::Owner,
                status: AgentCollaboratorInfoStatus::Accepted,
                created_at: agent.created_at,
                updated_at: agent.updated_at,
            };
            let mut collaborators = vec![owner];
            collaborators.extend(store::members(conn, &access.agent_id, access.role == Role::Owner)?);
            Ok(ListAgentCollaboratorsResponse {
                extra: Default::default(),
                agent_id: access.agent_id.into(),
                collaborators,
                public_chat: agent.flags.chat,
                public_read: agent.flags.read,
            })
        })
        .await
}

/// `InviteAgentCollaborator {agentId, accountId, role}` (owner): invites an account, or changes
/// an existing member's role (it stays accepted). Re-inviting a pending account updates its role.
pub(crate) async fn invite_agent_collaborator(
    app: &App,
    caller: &Caller,
    action: InviteAgentCollaborator,
) -> ApiResult<InviteAgentCollaboratorResponse> {
    let now = app.clock.now_ms();
    let (collaborator, agent_id, owner) =
        access::write(app, caller, action.agent_id.clone(), Need::Own, move |conn, access| {
            let member = collaborator_account(&action.account_id)?;
            if member == access.owner_id {
                return Err(ApiError::invalid("The agent owner is already a member"));
            }
            let collaborator = store::upsert_invite(conn, &access.agent_id, &member, action.role, now)?;
            Ok((collaborator, access.agent_id, access.owner_id))
        })
        .await?;
    announce(app, &owner, &collaborator.account_id, &agent_id);
    Ok(InviteAgentCollaboratorResponse { extra: Default::default(), collaborator })
}

/// After a membership change: `agent-collaborators-changed` to the owner and
/// `agent-invites-changed` to the member concerned.
fn announce(app: &App, owner: &str, member: &str, agent_id: &str) {
    app.bus.account_change(owner, ChangeReason::AgentCollaboratorsChanged, Some(agent_id), None);
    app.bus.account_change(member, ChangeReason::AgentInvitesChanged, Some(agent_id), None);
}

/// `RemoveAgentCollaborator {agentId, accountId}` (owner): revokes a member or cancels a pending
/// invitation; 404 `Collaborator not found` when there is neither.
pub(crate) async fn remove_agent_collaborator(
    app: &App,
    caller: &Caller,
    action: RemoveAgentCollaborator,
) -> ApiResult<RemoveAgentCollaboratorResponse> {
    let (response, owner) = access::write(app, caller, action.agent_id.clone(), Need::Own, move |conn, access| {
        let member = collaborator_account(&action.account_id)?;
        if !store::remove(conn, &access.agent_id, &member)? {
            return Err(ApiError::not_found("Collaborator not found"));
        }
        Ok((
            RemoveAgentCollaboratorResponse {
                extra: Default::default(),
                account_id: member.into(),
                agent_id: access.agent_id.into(),
            },
            access.owner_id,
        ))
    })
    .await?;
    announce(app, &owner, &response.account_id, &response.agent_id);
    Ok(response)
}

/// `AcceptAgentInvite {agentId}`: accepts the signed account's pending invitation and returns
/// the agent as the new member sees it.
pub(crate) async fn accept_agent_invite(
    app: &App,
    caller: &Caller,
    action: AcceptAgentInvite,
) -> ApiResult<AcceptAgentInviteResponse> {
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (agent, owner) = app
        .db
        .write(move |conn| {
            let owner = store::pending_invite_owner(conn, &action.agent_id, &account)?;
            store::accept(conn, &action.agent_id, &account, now)?;
            let access = access::require(conn, &action.agent_id, &account, Need::Read)?;
            Ok((agents::store::load_info(conn, &access.agent_id, access.role)?, owner))
        })
        .await?;
    announce(app, &owner, &caller.account_id, &agent.id);
    Ok(AcceptAgentInviteResponse { extra: Default::default(), agent })
}

/// `DeclineAgentInvite {agentId}`: deletes the signed account's pending invitation.
pub(crate) async fn decline_agent_invite(
    app: &App,
    caller: &Caller,
    action: DeclineAgentInvite,
) -> ApiResult<DeclineAgentInviteResponse> {
    let account = caller.account_id.clone();
    let (agent_id, owner) = app
        .db
        .write(move |conn| {
            let owner = store::pending_invite_owner(conn, &action.agent_id, &account)?;
            store::decline(conn, &action.agent_id, &account)?;
            Ok((action.agent_id, owner))
        })
        .await?;
    announce(app, &owner, &caller.account_id, &agent_id);
    Ok(DeclineAgentInviteResponse { extra: Default::default(), agent_id })
}

/// `SetAgentPublicRead {agentId, publicRead}` (owner); turning it off also clears public chat.
pub(crate) async fn set_agent_public_read(
    app: &App,
    caller: &Caller,
    action: SetAgentPublicRead,
) -> ApiResult<SetAgentPublicReadResponse> {
    let public_read = action.public_read;
    let agent =
        set_public_flags(app, caller, action.agent_id.into(), move |flags| Ok(flags.with_read(public_read))).await?;
    Ok(SetAgentPublicReadResponse { extra: Default::default(), agent })
}

/// `SetAgentPublicChat {agentId, publicChat}` (owner); enabling needs public read on (400).
pub(crate) async fn set_agent_public_chat(
    app: &App,
    caller: &Caller,
    action: SetAgentPublicChat,
) -> ApiResult<SetAgentPublicChatResponse> {
    let public_chat = action.public_chat;
    let agent =
        set_public_flags(app, caller, action.agent_id.into(), move |flags| flags.with_chat(public_chat)).await?;
    Ok(SetAgentPublicChatResponse { extra: Default::default(), agent })
}

/// Applies `change` to the agent's flags (owner-only), bumps `updated_at`, and announces it: an
/// agent change, and `agent-collaborators-changed` to the owner and each accepted member.
async fn set_public_flags<F>(app: &App, caller: &Caller, agent_id: String, change: F) -> ApiResult<AgentInfo>
where
    F: FnOnce(PublicFlags) -> ApiResult<PublicFlags> + Send + 'static,
{
    let now = app.clock.now_ms();
    let (agent, audience) = access::write(app, caller, agent_id.clone(), Need::Own, move |conn, access| {
        let flags = change(store::agent_summary(conn, &access.agent_id)?.flags)?;
        store::set_public_flags(conn, &access.agent_id, flags, now)?;
        let mut audience = vec![access.owner_id];
        audience.extend(
            store::members(conn, &access.agent_id, false)?.into_iter().map(|member| member.account_id.into_string()),
        );
        Ok((agents::store::load_info(conn, &access.agent_id, Role::Owner)?, audience))
    })
    .await?;
    app.bus.publish(Event::AgentChanged { agent_id: agent.id.to_string() });
    for account in audience {
        app.bus.account_change(account, ChangeReason::AgentCollaboratorsChanged, Some(&agent.id), None);
    }
    Ok(agent)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::db::params;
    use seed_agents_protocol::generated::{AgentDefinition, AgentInviteInfo};
    use seed_agents_protocol::wire;

    use super::*;
    use crate::bus::Event;
    use crate::clock::Clock;
    use crate::config::Config;
    use crate::error::ErrorKind;

    fn account(n: u8) -> Caller {
        let principal = Principal::from_public_key(&[n; 32]);
        Caller { account_id: principal.to_string(), signer: principal, signer_id: principal.to_string(), protocol: 3 }
    }

    #[test]
    fn roles_and_accounts_are_validated() {
        let id = account(7).account_id;
        assert_eq!(collaborator_account(&id).unwrap(), id);
        assert_eq!(collaborator_account(&format!("  {id}\n")).unwrap(), id, "trimmed like upstream");
        let invalid = "Collaborator account must be a valid Seed account ID";
        let short = format!("z{}", "1".repeat(3));
        for bad in [&id[1..], &format!("Z{}", &id[1..]), &format!("{id}0"), "zzzz", short.as_str()] {
            let error = collaborator_account(bad).unwrap_err();
            assert_eq!((error.kind(), error.message()), (ErrorKind::Invalid, invalid), "{bad}");
        }
        assert_eq!(collaborator_account("  ").unwrap_err().message(), "Collaborator account is required");
        assert_eq!(collaborator_account(&"z".repeat(300)).unwrap_err().message(), "Collaborator account is too large");
    }

    #[test]
    fn public_chat_needs_public_read() {
        let off = PublicFlags { read: false, chat: false };
        let open = PublicFlags { read: true, chat: true };
        assert_eq!(open.with_read(false), off, "turning read off clears chat");
        assert_eq!(off.with_read(true), PublicFlags { read: true, chat: false });
        assert_eq!(open.with_read(true), open);
        assert_eq!(off.with_chat(true).unwrap_err().message(), "Public chat requires public read access");
        assert_eq!(off.with_chat(false).unwrap(), off);
        assert_eq!(off.with_read(true).with_chat(true).unwrap(), open);
        assert_eq!(open.with_chat(false).unwrap(), PublicFlags { read: true, chat: false });
    }

    struct Fixture {
        app: Arc<App>,
        _dir: tempfile::TempDir,
        owner: Caller,
        agent_id: String,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(dir.path(), "127.0.0.1:0".parse().unwrap());
        let app = Arc::new(App::open(config, Clock::manual(1_000)).unwrap());
        let owner = account(1);
        let definition: AgentDefinition = serde_json::from_value(serde_json::json!({
            "name": "Shared Agent", "systemPrompt": "Share carefully.", "modelProvider": "openai", "model": "gpt"
        }))
        .unwrap();
        let (bytes, owner_id) = (wire::to_vec(&definition).unwrap(), owner.account_id.clone());
        let insert = "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                      VALUES ('agent', ?1, ?2, '/tmp/agent', 'idle', 500, 500)";
        app.db.write(move |conn| Ok(conn.execute(insert, params![owner_id, bytes])?)).await.unwrap();
        Fixture { app, _dir: dir, owner, agent_id: "agent".into() }
    }

    impl Fixture {
        async fn invite(
            &self,
            by: &Caller,
            member: &str,
            role: AgentCollaboratorRole,
        ) -> ApiResult<AgentCollaboratorInfo> {
            let action =
                InviteAgentCollaborator { account_id: member.into(), agent_id: self.agent_id.clone().into(), role };
            Ok(invite_agent_collaborator(&self.app, by, action).await?.collaborator)
        }

        async fn remove(&self, by: &Caller, member: &str) -> ApiResult<RemoveAgentCollaboratorResponse> {
            let action = RemoveAgentCollaborator { account_id: member.into(), agent_id: self.agent_id.clone().into() };
            remove_agent_collaborator(&self.app, by, action).await
        }

        async fn collaborators(&self, caller: &Caller) -> ApiResult<ListAgentCollaboratorsResponse> {
            list_agent_collaborators(
                &self.app,
                caller,
                ListAgentCollaborators { agent_id: self.agent_id.clone().into() },
            )
            .await
        }

        async fn invites(&self, caller: &Caller) -> Vec<AgentInviteInfo> {
            list_agent_invites(&self.app, caller, ListAgentInvites {}).await.unwrap().invites
        }

        async fn accept(&self, caller: &Caller) -> ApiResult<AgentInfo> {
            Ok(accept_agent_invite(&self.app, caller, AcceptAgentInvite { agent_id: self.agent_id.clone().into() })
                .await?
                .agent)
        }

        async fn decline(&self, caller: &Caller) -> ApiResult<DeclineAgentInviteResponse> {
            decline_agent_invite(&self.app, caller, DeclineAgentInvite { agent_id: self.agent_id.clone().into() }).await
        }

        async fn public_read(&self, caller: &Caller, public_read: bool) -> ApiResult<AgentInfo> {
            let action = SetAgentPublicRead { agent_id: self.agent_id.clone().into(), public_read };
            Ok(set_agent_public_read(&self.app, caller, action).await?.agent)
        }

        async fn public_chat(&self, caller: &Caller, public_chat: bool) -> ApiResult<AgentInfo> {
            let action = SetAgentPublicChat { agent_id: self.agent_id.clone().into(), public_chat };
            Ok(set_agent_public_chat(&self.app, caller, action).await?.agent)
        }
    }

    fn drain(events: &mut tokio::sync::broadcast::Receiver<Arc<Event>>) -> Vec<(String, &'static str)> {
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            match &*event {
                Event::AccountChange { account_id, reason, .. } => seen.push((account_id.clone(), reason.as_str())),
                Event::AgentChanged { agent_id } => seen.push((agent_id.clone(), "agent-changed")),
                Event::SessionChanged { .. }
                | Event::SessionAppended { .. }
                | Event::RunChanged { .. }
                | Event::JournalAppended { .. } => {}
            }
        }
        seen
    }

    /// The kind and message of a failure.
    fn failure<T: std::fmt::Debug>(result: ApiResult<T>) -> (ErrorKind, String) {
        let error = result.unwrap_err();
        (error.kind(), error.message().to_owned())
    }

    const READER: AgentCollaboratorRole = AgentCollaboratorRole::Reader;
    const WRITER: AgentCollaboratorRole = AgentCollaboratorRole::Writer;

    #[tokio::test]
    async fn invite_accept_promote_and_remove() {
        let f = fixture().await;
        let (app, owner, member) = (&f.app, &f.owner, account(2));
        let (owner_id, member_id) = (owner.account_id.clone(), member.account_id.clone());
        let mut events = app.bus.subscribe();
        let announced =
            [(owner_id.clone(), "agent-collaborators-changed"), (member_id.clone(), "agent-invites-changed")];

        let invited = f.invite(owner, &member_id, READER).await.unwrap();
        assert_eq!((invited.status, invited.role), (AgentCollaboratorInfoStatus::Pending, AgentAccessRole::Reader));
        assert_eq!(drain(&mut events), announced);
        let invites = f.invites(&member).await;
        assert_eq!(invites.len(), 1);
        assert_eq!(
            (invites[0].agent_name.as_str(), invites[0].owner_account_id.as_str()),
            ("Shared Agent", &*owner_id)
        );
        assert_eq!(failure(f.collaborators(&member).await), (ErrorKind::NotFound, "Agent not found".into()));
        let listed = f.collaborators(owner).await.unwrap().collaborators;
        assert_eq!(listed.len(), 2, "the owner sees the pending invite");
        assert_eq!((listed[0].role, listed[0].created_at), (AgentAccessRole::Owner, 500));

        app.clock.set(2_000);
        assert_eq!(f.accept(&member).await.unwrap().access_role, Some(AgentAccessRole::Reader));
        assert!(f.invites(&member).await.is_empty());
        assert_eq!(failure(f.accept(&member).await), (ErrorKind::NotFound, "Agent invitation not found".into()));
        let seen = f.collaborators(&member).await.unwrap().collaborators;
        assert_eq!(
            (seen[1].status, seen[1].created_at, seen[1].updated_at),
            (AgentCollaboratorInfoStatus::Accepted, 1_000, 2_000)
        );

        let promoted = f.invite(owner, &member_id, WRITER).await.unwrap();
        assert_eq!((promoted.status, promoted.role), (AgentCollaboratorInfoStatus::Accepted, AgentAccessRole::Writer));
        assert_eq!(failure(f.invite(&member, &account(3).account_id, READER).await).0, ErrorKind::Forbidden);

        assert_eq!(failure(f.remove(&member, &member_id).await).0, ErrorKind::Forbidden);
        drain(&mut events);
        f.remove(owner, &member_id).await.unwrap();
        assert_eq!(drain(&mut events), announced);
        assert_eq!(failure(f.remove(owner, &member_id).await), (ErrorKind::NotFound, "Collaborator not found".into()));
        assert_eq!(failure(f.collaborators(&member).await).0, ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn invitations_are_refused_or_declined() {
        let f = fixture().await;
        let (owner, member, stranger) = (&f.owner, account(2), account(3));
        let owner_error = (ErrorKind::Invalid, "The agent owner is already a member".into());
        assert_eq!(failure(f.invite(owner, &owner.account_id, READER).await), owner_error);
        let invalid = (ErrorKind::Invalid, "Collaborator account must be a valid Seed account ID".into());
        assert_eq!(failure(f.invite(owner, "not-an-account", READER).await), invalid);
        assert_eq!(failure(f.remove(owner, "not-an-account").await), invalid);
        assert_eq!(
            failure(f.invite(&stranger, &member.account_id, READER).await).0,
            ErrorKind::NotFound,
            "invisible looks missing"
        );

        f.invite(owner, &member.account_id, READER).await.unwrap();
        let again = f.invite(owner, &member.account_id, WRITER).await.unwrap();
        assert_eq!((again.status, again.role), (AgentCollaboratorInfoStatus::Pending, AgentAccessRole::Writer));
        assert_eq!(f.invites(&member).await[0].role, WRITER, "a re-invite updates the role");
        assert_eq!(failure(f.decline(&stranger).await), (ErrorKind::NotFound, "Agent invitation not found".into()));
        assert_eq!(f.decline(&member).await.unwrap().agent_id, f.agent_id);
        assert_eq!(failure(f.decline(&member).await).0, ErrorKind::NotFound);
        assert_eq!(f.collaborators(owner).await.unwrap().collaborators.len(), 1);
    }

    #[tokio::test]
    async fn public_flags() {
        let f = fixture().await;
        let (app, owner, member, stranger) = (&f.app, &f.owner, account(2), account(3));
        f.invite(owner, &member.account_id, READER).await.unwrap();
        f.accept(&member).await.unwrap();
        let mut events = app.bus.subscribe();

        assert_eq!(
            failure(f.public_chat(owner, true).await),
            (ErrorKind::Invalid, "Public chat requires public read access".into())
        );
        assert_eq!(failure(f.public_read(&member, true).await).0, ErrorKind::Forbidden);
        assert_eq!(failure(f.public_read(&stranger, true).await).0, ErrorKind::NotFound);
        assert!(drain(&mut events).is_empty(), "refusals change nothing");

        app.clock.set(3_000);
        let agent = f.public_read(owner, true).await.unwrap();
        assert_eq!((agent.public_read, agent.public_chat, agent.updated_at), (Some(true), Some(false), 3_000));
        assert_eq!(agent.access_role, Some(AgentAccessRole::Owner));
        let changed = "agent-collaborators-changed";
        let expected = [
            (f.agent_id.clone(), "agent-changed"),
            (owner.account_id.clone(), changed),
            (member.account_id.clone(), changed),
        ];
        assert_eq!(drain(&mut events), expected);
        let public = f.collaborators(&stranger).await.unwrap();
        assert_eq!((public.public_read, public.public_chat, public.collaborators.len()), (true, false, 2));

        let agent = f.public_chat(owner, true).await.unwrap();
        assert_eq!((agent.public_read, agent.public_chat), (Some(true), Some(true)));
        let agent = f.public_read(owner, false).await.unwrap();
        assert_eq!((agent.public_read, agent.public_chat), (Some(false), Some(false)), "read off clears chat");
        assert_eq!(failure(f.collaborators(&stranger).await).0, ErrorKind::NotFound);

        // A member accepting on a public-chat agent reports the lifted role; the list keeps the invited one.
        let late = account(4);
        f.public_read(owner, true).await.unwrap();
        f.public_chat(owner, true).await.unwrap();
        f.invite(owner, &late.account_id, READER).await.unwrap();
        assert_eq!(f.accept(&late).await.unwrap().access_role, Some(AgentAccessRole::Chatter));
        let listed = f.collaborators(&late).await.unwrap().collaborators;
        assert!(listed.iter().any(|row| row.account_id == late.account_id && row.role == AgentAccessRole::Reader));
    }
}
