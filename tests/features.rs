//! Happy paths and failure paths of each feature of the server core, through the SDK.

use std::time::Duration;

use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentAccessRole, AgentCollaboratorInfoStatus, AgentCollaboratorRole,
    AgentDefinitionSystemPrompt, CreateAgent, CreateSession, DeclineAgentInvite, DeleteAgent, DeleteModelProvider,
    DeleteSession, GetAgent, GetSession, InviteAgentCollaborator, ListAgentCollaborators, ListAgentInvites, ListAgents,
    ListModelProviders, ListSessions, RemoveAgentCollaborator, SessionModelOverride, SetAgentPublicChat,
    SetAgentPublicRead, SetModelProvider, SetSecret, Thoroughness, UpdateAgent, UpdateSession,
};
use seed_agents_protocol::{Bytes, Nullable};
use seed_agents_server::testing::bus::{ChangeReason, Event};

use crate::support::{TestServer, api_error, definition, provider_config};

fn new_session(agent_id: &str, title: Option<&str>, request: Option<&str>) -> CreateSession {
    CreateSession {
        agent_id: agent_id.into(),
        client_request_id: request.map(str::to_owned),
        model_override: None,
        thoroughness: None,
        title: title.map(str::to_owned),
    }
}

fn get(session_id: &str) -> GetSession {
    GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None }
}

/// Found by the `actions` fuzz target: the server took an integer below -2^63 in an open value
/// (CBOR allows down to -2^64) and stored it, but no response carrying it could be decoded, since
/// serde buffers union members without 128-bit integers. Here the SDK got `Error::Decode` for the
/// very `SetSecret` that saved it; every later read of such metadata failed the same way.
#[tokio::test]
async fn an_integer_no_response_could_carry_is_refused_before_it_is_stored() {
    let server = TestServer::start().await;
    let user = server.user();
    let value = |n: i128| seed_agents_protocol::Value::from(ipld_core::ipld::Ipld::Integer(n));
    let secret = |n: i128| SetSecret {
        name: "k".into(),
        value: Bytes(vec![1]),
        metadata: Some([("n".to_owned(), value(n))].into()),
    };
    let (status, message) = api_error(user.call(secret(i128::from(i64::MIN) - 1)).await);
    assert_eq!((status, message.as_str()), (400, "Invalid SetSecret: integer -9223372036854775809 is below -2^63"));
    let saved = user.call(secret(i64::MIN.into())).await.unwrap();
    assert_eq!(saved.secret.metadata, Some([("n".to_owned(), value(i64::MIN.into()))].into()));
}

#[tokio::test]
async fn secrets_and_providers_are_redacted_and_cleaned_up() {
    let server = TestServer::start().await;
    let user = server.user();
    let secret_value = b"sk-very-secret-value-123".to_vec();
    let saved = user
        .call(SetSecret { name: "openai-key".into(), value: Bytes(secret_value.clone()), metadata: None })
        .await
        .unwrap();
    assert!(saved.secret.has_value);
    assert_eq!(saved.secret.name, "openai-key");
    let (status, message) = api_error(
        user.call(SetSecret { name: "x".into(), value: Bytes(vec![1; 64 * 1024 + 1]), metadata: None }).await,
    );
    assert_eq!((status, message.as_str()), (400, "Secret value is too large"));

    // The secret is encrypted at rest: its bytes are nowhere in the database file.
    let app = server.server.as_ref().unwrap().app().clone();
    let stored: Vec<u8> = app
        .db
        .read(|conn| {
            Ok(conn.query_row("SELECT ciphertext FROM secrets WHERE name = 'openai-key'", [], |row| row.get(0))?)
        })
        .await
        .unwrap();
    assert!(!stored.windows(secret_value.len()).any(|window| window == secret_value.as_slice()));

    let provider = user.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    assert_eq!(provider.provider.type_, "openai");
    assert!(provider.provider.has_secrets);
    let mut bad = provider_config();
    bad.type_ = "telepathy".into();
    let (status, message) = api_error(user.call(SetModelProvider { name: "odd".into(), provider: bad }).await);
    assert_eq!((status, message.as_str()), (400, "Unsupported model provider type: telepathy"));
    let listed = user.call(ListModelProviders { agent_id: None }).await.unwrap().providers;
    assert_eq!(listed.len(), 1);

    let (status, message) = api_error(user.call(DeleteModelProvider { name: "nope".into() }).await);
    assert_eq!((status, message.as_str()), (404, "Model provider not found"));
    user.call(DeleteModelProvider { name: "main".into() }).await.unwrap();
    assert!(user.call(ListModelProviders { agent_id: None }).await.unwrap().providers.is_empty());
    let left: i64 =
        app.db.read(|conn| Ok(conn.query_row("SELECT COUNT(*) FROM secrets", [], |row| row.get(0))?)).await.unwrap();
    assert_eq!(left, 0, "the secret only the deleted provider referenced is gone");
    server.stop().await;
}

#[tokio::test]
async fn agents_are_created_read_updated_and_deleted() {
    let server = TestServer::start().await;
    let owner = server.user();
    let app = server.server.as_ref().unwrap().app().clone();
    let mut events = app.bus.subscribe();

    // No provider yet.
    let (status, message) =
        api_error(owner.call(CreateAgent { client_request_id: None, definition: definition("A") }).await);
    assert_eq!((status, message.as_str()), (400, "Model provider not found"));
    owner.ensure_provider().await;
    let mut blank = definition(" ");
    blank.name = "   ".into();
    let (status, message) = api_error(owner.call(CreateAgent { client_request_id: None, definition: blank }).await);
    assert_eq!((status, message.as_str()), (400, "Agent name is required"));

    let create = CreateAgent { client_request_id: Some("agent-1".into()), definition: definition("Helper") };
    let agent_id = owner.call(create.clone()).await.unwrap().agent_id;
    assert_eq!(owner.call(create).await.unwrap().agent_id, agent_id, "idempotent create");
    let mismatch = CreateAgent { client_request_id: Some("agent-1".into()), definition: definition("Other") };
    let (status, message) = api_error(owner.call(mismatch).await);
    assert_eq!((status, message.as_str()), (409, "Client request ID payload mismatch"));

    let got = owner.call(GetAgent { agent_id: agent_id.clone() }).await.unwrap();
    assert_eq!(got.agent.definition.name, "Helper");
    assert_eq!(got.agent.access_role, Some(AgentAccessRole::Owner));
    assert_eq!(got.session_count, 0);
    assert!(matches!(got.agent.definition.system_prompt, AgentDefinitionSystemPrompt::Array(_)), "stored as blocks");
    assert!(std::path::Path::new(&got.agent.state_dir).is_dir());

    let mut changed = definition("Helper 2");
    changed.system_prompt = AgentDefinitionSystemPrompt::String("# Role\n\nBe brief.".into());
    let updated = owner.call(UpdateAgent { agent_id: agent_id.clone(), definition: changed }).await.unwrap();
    assert_eq!(updated.agent.definition.name, "Helper 2");
    let session = owner.call(new_session(&agent_id, Some("hello"), None)).await.unwrap();
    let read = owner.call(get(&session.session_id)).await.unwrap();
    // Seed blocks nest content under its heading; the markdown shows the nesting.
    assert!(read.system_prompt_markdown.starts_with("# Role\n"), "{:?}", read.system_prompt_markdown);
    assert!(read.system_prompt_markdown.contains("Be brief."));
    assert_eq!(owner.call(GetAgent { agent_id: agent_id.clone() }).await.unwrap().session_count, 1);
    assert_eq!(owner.call(ListAgents {}).await.unwrap().agents.len(), 1);

    let deleted = owner.call(DeleteAgent { agent_id: agent_id.clone() }).await.unwrap();
    assert_eq!(deleted.agent_id, agent_id);
    assert!(!std::path::Path::new(&got.agent.state_dir).exists(), "state dir removed");
    let (status, message) = api_error(owner.call(GetAgent { agent_id: agent_id.clone() }).await);
    assert_eq!((status, message.as_str()), (404, "Agent not found"));
    assert_eq!(api_error(owner.call(get(&session.session_id)).await).0, 404, "sessions go with the agent");

    let mut reasons = Vec::new();
    while let Ok(Ok(event)) = tokio::time::timeout(Duration::from_millis(50), events.recv()).await {
        if let Event::AccountChange { reason, account_id, .. } = event.as_ref() {
            assert_eq!(account_id, &owner.id);
            reasons.push(*reason);
        }
    }
    for expected in [ChangeReason::ModelProviderChanged, ChangeReason::AgentCreated, ChangeReason::AgentUpdated] {
        assert!(reasons.contains(&expected), "{expected:?} in {reasons:?}");
    }
    assert!(reasons.contains(&ChangeReason::SessionCreated) && reasons.contains(&ChangeReason::AgentDeleted));
    assert_eq!(
        reasons.iter().filter(|reason| **reason == ChangeReason::AgentCreated).count(),
        1,
        "replay emits nothing"
    );
    server.stop().await;
}

#[tokio::test]
async fn collaboration_invites_roles_and_public_access() {
    let server = TestServer::start().await;
    let owner = server.user();
    let friend = server.user();
    let agent_id = owner.create_agent("Team").await;

    let invite =
        |account: &str, role| InviteAgentCollaborator { agent_id: agent_id.clone(), account_id: account.into(), role };
    let (status, message) = api_error(owner.call(invite("not-an-account", AgentCollaboratorRole::Reader)).await);
    assert_eq!((status, message.as_str()), (400, "Collaborator account must be a valid Seed account ID"));
    let (status, message) = api_error(owner.call(invite(&owner.id, AgentCollaboratorRole::Reader)).await);
    assert_eq!((status, message.as_str()), (400, "The agent owner is already a member"));

    owner.call(invite(&friend.id, AgentCollaboratorRole::Reader)).await.unwrap();
    let invites = friend.call(ListAgentInvites {}).await.unwrap().invites;
    assert_eq!(invites.len(), 1);
    assert_eq!(invites[0].agent_name, "Team");
    assert_eq!(invites[0].owner_account_id, owner.id);
    assert!(friend.call(ListAgents {}).await.unwrap().agents.is_empty(), "pending invites are not listed");
    assert_eq!(api_error(friend.call(GetAgent { agent_id: agent_id.clone() }).await).0, 404);

    let accepted = friend.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await.unwrap();
    assert_eq!(accepted.agent.access_role, Some(AgentAccessRole::Reader));
    let (status, message) = api_error(friend.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await);
    assert_eq!((status, message.as_str()), (404, "Agent invitation not found"));
    let listed = friend.call(ListAgents {}).await.unwrap().agents;
    assert_eq!(listed[0].access_role, Some(AgentAccessRole::Reader));

    // Upgrading a member keeps it accepted.
    owner.call(invite(&friend.id, AgentCollaboratorRole::Writer)).await.unwrap();
    let members = owner.call(ListAgentCollaborators { agent_id: agent_id.clone() }).await.unwrap();
    let row = members.collaborators.iter().find(|member| member.account_id == friend.id).unwrap();
    assert_eq!((row.role, row.status), (AgentAccessRole::Writer, AgentCollaboratorInfoStatus::Accepted));
    assert!(
        members
            .collaborators
            .iter()
            .any(|member| member.account_id == owner.id && member.role == AgentAccessRole::Owner)
    );
    let session = friend.call(new_session(&agent_id, Some("from a writer"), None)).await.unwrap();
    let read = owner.call(get(&session.session_id)).await.unwrap();
    assert_eq!(read.session.account, owner.id, "agent-scoped rows live under the owner's account");

    let stranger = server.user();
    let (status, message) =
        api_error(owner.call(SetAgentPublicChat { agent_id: agent_id.clone(), public_chat: true }).await);
    assert_eq!(status, 400, "{message}");
    owner.call(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: true }).await.unwrap();
    owner.call(SetAgentPublicChat { agent_id: agent_id.clone(), public_chat: true }).await.unwrap();
    let seen = stranger.call(GetAgent { agent_id: agent_id.clone() }).await.unwrap();
    assert_eq!(seen.agent.access_role, Some(AgentAccessRole::Chatter));
    assert!(stranger.call(ListAgents {}).await.unwrap().agents.is_empty(), "public agents are never listed");
    let all = ListSessions {
        agent_id: None,
        cursor: None,
        exclude_triggered: None,
        include_children: None,
        limit: None,
        parent_session_id: None,
    };
    assert!(stranger.call(all).await.unwrap().sessions.is_empty(), "nor their sessions account-wide");
    let off = owner.call(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: false }).await.unwrap();
    assert_eq!((off.agent.public_read, off.agent.public_chat), (Some(false), Some(false)), "read off clears chat");
    assert_eq!(api_error(stranger.call(GetAgent { agent_id: agent_id.clone() }).await).0, 404);

    let removed =
        owner.call(RemoveAgentCollaborator { agent_id: agent_id.clone(), account_id: friend.id.clone() }).await;
    assert_eq!(removed.unwrap().account_id, friend.id);
    let (status, message) = api_error(
        owner.call(RemoveAgentCollaborator { agent_id: agent_id.clone(), account_id: friend.id.clone() }).await,
    );
    assert_eq!((status, message.as_str()), (404, "Collaborator not found"));
    assert_eq!(api_error(friend.call(GetAgent { agent_id: agent_id.clone() }).await).0, 404);

    owner.call(invite(&stranger.id, AgentCollaboratorRole::Reader)).await.unwrap();
    stranger.call(DeclineAgentInvite { agent_id: agent_id.clone() }).await.unwrap();
    assert!(stranger.call(ListAgentInvites {}).await.unwrap().invites.is_empty());
    assert_eq!(api_error(stranger.call(DeclineAgentInvite { agent_id: agent_id.clone() }).await).0, 404);
    server.stop().await;
}

#[tokio::test]
async fn sessions_titles_overrides_events_and_deletion() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent_id = owner.create_agent("S").await;

    let placeholder = owner.call(new_session(&agent_id, Some("  New Chat "), None)).await.unwrap();
    assert_eq!(owner.call(get(&placeholder.session_id)).await.unwrap().session.title, None);
    let (status, message) = api_error(owner.call(new_session(&agent_id, Some(&"x".repeat(257)), None)).await);
    assert_eq!((status, message.as_str()), (400, "Session title is too large"));
    assert_eq!(api_error(owner.call(new_session("missing", None, None)).await), (404, "Agent not found".into()));

    let first = owner.call(new_session(&agent_id, Some("Plan"), Some("s-1"))).await.unwrap();
    assert_eq!(owner.call(new_session(&agent_id, Some("Plan"), Some("s-1"))).await.unwrap(), first);
    let (status, message) = api_error(owner.call(new_session(&agent_id, Some("Other"), Some("s-1"))).await);
    assert_eq!((status, message.as_str()), (409, "Client request ID payload mismatch"));

    let session_id = first.session_id;
    let nothing = UpdateSession {
        session_id: session_id.clone(),
        title: None,
        model_override: Nullable::Absent,
        thoroughness: Nullable::Absent,
    };
    let (status, message) = api_error(owner.call(nothing.clone()).await);
    assert_eq!((status, message.as_str()), (400, "Nothing to update: provide a title or a model override"));
    let bad_provider = UpdateSession {
        model_override: Nullable::Value(SessionModelOverride {
            extra: Default::default(),
            provider: "ghost".into(),
            model: "m".into(),
            reasoning_level: None,
        }),
        ..nothing.clone()
    };
    assert_eq!(api_error(owner.call(bad_provider).await), (400, "Model provider not found".into()));
    let set = UpdateSession {
        title: Some(" Renamed ".into()),
        model_override: Nullable::Value(SessionModelOverride {
            extra: Default::default(),
            provider: "main".into(),
            model: "gpt-4.1-mini".into(),
            reasoning_level: None,
        }),
        thoroughness: Nullable::Value(Thoroughness::Deep),
        ..nothing.clone()
    };
    let updated = owner.call(set).await.unwrap().session;
    assert_eq!(updated.title.as_deref(), Some("Renamed"));
    assert_eq!(updated.model_override.as_ref().map(|value| value.model.as_str()), Some("gpt-4.1-mini"));
    assert_eq!(updated.thoroughness, Some(Thoroughness::Deep));
    let cleared = UpdateSession { model_override: Nullable::Null, thoroughness: Nullable::Null, ..nothing.clone() };
    let cleared = owner.call(cleared).await.unwrap().session;
    assert_eq!((cleared.model_override, cleared.thoroughness), (None, None));
    assert_eq!(cleared.title.as_deref(), Some("Renamed"), "absent title is left alone");

    let negative = GetSession { after_seq: Some(-1), ..get(&session_id) };
    assert_eq!(api_error(owner.call(negative).await), (400, "afterSeq must be a non-negative integer".into()));
    assert!(owner.call(get(&session_id)).await.unwrap().events.is_empty());

    // A child session (as an agent would start) is promoted when its parent is deleted.
    let child = owner.call(new_session(&agent_id, Some("child"), None)).await.unwrap().session_id;
    let app = server.server.as_ref().unwrap().app().clone();
    let (parent, kid) = (session_id.to_string(), child.to_string());
    app.db
        .write(move |conn| {
            conn.execute("UPDATE sessions SET parent_session_id = ?1 WHERE id = ?2", [&parent, &kid])?;
            Ok(())
        })
        .await
        .unwrap();
    let top_level = ListSessions {
        agent_id: Some(agent_id.clone()),
        cursor: None,
        exclude_triggered: None,
        include_children: Some(false),
        limit: None,
        parent_session_id: None,
    };
    let listed = owner.call(top_level.clone()).await.unwrap().sessions;
    assert!(listed.iter().all(|session| session.id != child));
    let parent_row = listed.iter().find(|session| session.id == session_id).unwrap();
    assert_eq!(parent_row.child_session_count, Some(1));
    let children = ListSessions { parent_session_id: Some(session_id.clone()), ..top_level.clone() };
    assert_eq!(owner.call(children).await.unwrap().sessions.len(), 1);

    let deleted = owner.call(DeleteSession { session_id: session_id.clone() }).await.unwrap();
    assert_eq!((deleted.session_id.as_str(), deleted.agent_id.as_str()), (session_id.as_str(), agent_id.as_str()));
    assert_eq!(api_error(owner.call(get(&session_id)).await), (404, "Session not found".into()));
    assert_eq!(owner.call(get(&child)).await.unwrap().session.parent_session_id, None, "child promoted");
    server.stop().await;
}

#[tokio::test]
async fn data_survives_a_restart_and_a_second_server_is_refused() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent_id = owner.create_agent("Durable").await;
    let dir = tempfile::TempDir::new().unwrap();
    let busy = seed_agents_server::RunningServer::start(
        seed_agents_server::Config::new(server.dir.path(), "127.0.0.1:0".parse().unwrap()),
        seed_agents_server::Clock::system(),
    )
    .await;
    let error = busy.expect_err("the data dir is locked");
    assert!(error.to_string().contains("already using this directory"), "{error}");
    drop(dir);
    let seed = owner.signer.seed();
    let kept = server.stop().await;
    let server = TestServer::start_in(kept).await;
    let owner = crate::support::User::new(&server.url, seed_agents_protocol::Ed25519Signer::from_seed(&seed), None);
    assert_eq!(owner.call(GetAgent { agent_id }).await.unwrap().agent.definition.name, "Durable");
    server.stop().await;
}
