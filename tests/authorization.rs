//! The authorization matrix: every agent-scoped action of the server core × every kind of
//! caller, with the expected outcome. One fresh agent (and session) per cell, so destructive
//! actions do not disturb the others.

use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentCollaboratorRole, CreateSession, DeleteAgent, DeleteSession, GetAgent, GetSession,
    InviteAgentCollaborator, ListAgentCollaborators, ListModelProviders, ListSessions, RemoveAgentCollaborator,
    SetAgentPublicChat, SetAgentPublicRead, UpdateAgent, UpdateSession,
};
use seed_agents_protocol::{Action, Nullable};
use seed_agents_sdk::Error;

use crate::support::{TestServer, User, definition};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Owner,
    Writer,
    Reader,
    /// A stranger on an agent with public read and public chat.
    Chatter,
    /// A stranger on an agent with public read only.
    PublicReader,
    /// Invited, not yet accepted.
    Invitee,
    Stranger,
}

const CALLERS: [Caller; 7] = [
    Caller::Owner,
    Caller::Writer,
    Caller::Reader,
    Caller::Chatter,
    Caller::PublicReader,
    Caller::Invitee,
    Caller::Stranger,
];

/// Expected outcome: allowed, or the HTTP status of the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Forbidden,
    NotFound,
}
use Outcome::{Forbidden as F, NotFound as N, Ok as A};

/// The matrix. Columns: owner, writer, reader, chatter, public reader, pending invitee, stranger.
const MATRIX: &[(&str, [Outcome; 7])] = &[
    ("GetAgent", [A, A, A, A, A, N, N]),
    ("ListSessions", [A, A, A, A, A, N, N]),
    ("GetSession", [A, A, A, A, A, N, N]),
    ("ListAgentCollaborators", [A, A, A, A, A, N, N]),
    ("ListModelProviders", [A, A, A, A, A, N, N]),
    ("CreateSession", [A, A, F, A, F, N, N]),
    ("UpdateAgent", [A, A, F, F, F, N, N]),
    ("UpdateSession", [A, A, F, F, F, N, N]),
    ("DeleteSession", [A, A, F, F, F, N, N]),
    ("InviteAgentCollaborator", [A, F, F, F, F, N, N]),
    ("RemoveAgentCollaborator", [A, F, F, F, F, N, N]),
    ("SetAgentPublicRead", [A, F, F, F, F, N, N]),
    ("SetAgentPublicChat", [A, F, F, F, F, N, N]),
    ("DeleteAgent", [A, F, F, F, F, N, N]),
];

struct Cell {
    agent_id: String,
    session_id: String,
    bystander: String,
}

async fn setup(server: &TestServer, owner: &User, caller: Caller) -> (Cell, User) {
    let agent_id = owner.create_agent("Matrix").await;
    let session = CreateSession {
        agent_id: agent_id.clone(),
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: Some("t".into()),
    };
    let session_id = owner.call(session).await.unwrap().session_id;
    // A member every cell can remove; also keeps the collaborator list non-trivial.
    let bystander = server.user();
    invite(owner, &agent_id, &bystander.id, AgentCollaboratorRole::Reader).await;
    let actor = match caller {
        Caller::Owner => owner.clone(),
        _ => server.user(),
    };
    match caller {
        Caller::Writer | Caller::Reader => {
            let role =
                if caller == Caller::Writer { AgentCollaboratorRole::Writer } else { AgentCollaboratorRole::Reader };
            invite(owner, &agent_id, &actor.id, role).await;
            actor.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await.unwrap();
        }
        Caller::Invitee => invite(owner, &agent_id, &actor.id, AgentCollaboratorRole::Writer).await,
        Caller::Chatter | Caller::PublicReader => {
            owner.call(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: true }).await.unwrap();
            if caller == Caller::Chatter {
                owner.call(SetAgentPublicChat { agent_id: agent_id.clone(), public_chat: true }).await.unwrap();
            }
        }
        Caller::Owner | Caller::Stranger => {}
    }
    (Cell { agent_id, session_id, bystander: bystander.id }, actor)
}

async fn invite(owner: &User, agent_id: &str, account: &str, role: AgentCollaboratorRole) {
    let invite = InviteAgentCollaborator { agent_id: agent_id.into(), account_id: account.into(), role };
    owner.call(invite).await.unwrap();
}

fn outcome<T>(result: Result<T, Error>, context: &str) -> Outcome {
    match result {
        Ok(_) => A,
        Err(Error::Api { status: 403, .. }) => F,
        Err(Error::Api { status: 404, .. }) => N,
        Err(other) => panic!("{context}: unexpected {other:?}"),
    }
}

async fn run<A: Action>(actor: &User, action: A, context: &str) -> Outcome {
    outcome(actor.call(action).await, context)
}

async fn perform(name: &str, actor: &User, cell: &Cell, context: &str) -> Outcome {
    let agent_id = cell.agent_id.clone();
    let session_id = cell.session_id.clone();
    match name {
        "GetAgent" => run(actor, GetAgent { agent_id }, context).await,
        "ListSessions" => {
            let list = ListSessions {
                agent_id: Some(agent_id),
                cursor: None,
                exclude_triggered: None,
                include_children: None,
                limit: None,
                parent_session_id: None,
            };
            run(actor, list, context).await
        }
        "GetSession" => {
            run(actor, GetSession { session_id, after_seq: None, before_seq: None, limit: None }, context).await
        }
        "ListAgentCollaborators" => run(actor, ListAgentCollaborators { agent_id }, context).await,
        "ListModelProviders" => run(actor, ListModelProviders { agent_id: Some(agent_id) }, context).await,
        "CreateSession" => {
            let create = CreateSession {
                agent_id,
                client_request_id: None,
                model_override: None,
                thoroughness: None,
                title: None,
            };
            run(actor, create, context).await
        }
        "UpdateAgent" => run(actor, UpdateAgent { agent_id, definition: definition("Renamed") }, context).await,
        "UpdateSession" => {
            let update = UpdateSession {
                session_id,
                title: Some("renamed".into()),
                model_override: Nullable::Absent,
                thoroughness: Nullable::Absent,
            };
            run(actor, update, context).await
        }
        "DeleteSession" => run(actor, DeleteSession { session_id }, context).await,
        "InviteAgentCollaborator" => {
            let other = User::new(&actor_url(actor), seed_agents_protocol::Ed25519Signer::generate().unwrap(), None);
            let invite =
                InviteAgentCollaborator { agent_id, account_id: other.id, role: AgentCollaboratorRole::Reader };
            run(actor, invite, context).await
        }
        "RemoveAgentCollaborator" => {
            run(actor, RemoveAgentCollaborator { agent_id, account_id: cell.bystander.clone() }, context).await
        }
        "SetAgentPublicRead" => run(actor, SetAgentPublicRead { agent_id, public_read: true }, context).await,
        "SetAgentPublicChat" => {
            // Owner cells need public read first for this to be allowed.
            run(actor, SetAgentPublicChat { agent_id, public_chat: false }, context).await
        }
        "DeleteAgent" => run(actor, DeleteAgent { agent_id }, context).await,
        other => panic!("no builder for {other}"),
    }
}

fn actor_url(actor: &User) -> String {
    actor.client.endpoint().trim_end_matches("/api/message").to_owned()
}

#[tokio::test]
async fn authorization_matrix() {
    let server = TestServer::start().await;
    let owner = server.user();
    let mut failures = Vec::new();
    for (action, expected) in MATRIX {
        for (caller, want) in CALLERS.iter().zip(expected) {
            let (cell, actor) = setup(&server, &owner, *caller).await;
            let context = format!("{action} as {caller:?}");
            let got = perform(action, &actor, &cell, &context).await;
            if got != *want {
                failures.push(format!("{context}: expected {want:?}, got {got:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "authorization matrix mismatches:\n{}", failures.join("\n"));
    server.stop().await;
}
