//! The state one matrix cell runs against, built fresh for every cell: an owner with two signing
//! identities and two providers, an agent granted one of the identities, a session, a memory file,
//! an attachment, a pending invitation of a bystander, and the actor related to the agent as its
//! column says. A row may also ask for a chunked upload the actor began while it could.

use std::collections::BTreeMap;

use seed_agents_protocol::generated::{
    AcceptAgentInvite, ActivitySource, AgentActivityCondition, AgentActivitySource, AgentCollaboratorRole,
    AgentDefinition, AgentTriggerInfo, AgentTriggerInput, AgentTriggerInputPrompt, AgentTriggerSource,
    AppendFileUploadChunk, BeginFileUpload, CreateAgent, CreateAgentTrigger, FileUploadTarget, ImportSigningIdentity,
    InviteAgentCollaborator, ListAgentTriggers, McpServerConfig, MemoryUploadTarget, ModelProviderConfig,
    ModelProviderConfigAuthMode, RemoveAgentCollaborator, SaveAgentTool, SessionAttachmentUploadTarget,
    SetAgentPublicChat, SetAgentPublicRead, SetMcpServer, SetModelProvider, StartProviderOAuth,
    UploadSessionAttachment, UserMentionSource, WriteAgentMemoryFile, WriteAgentMemoryFileContent,
};
use seed_agents_protocol::{
    AccountId, AgentId, AttachmentId, Bytes, Ed25519Signer, LoginId, RunId, SessionId, UploadId,
};
use seed_agents_server::testing::runs::engine::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Caller;
use crate::support::hm::FakeHm;
use crate::support::runs::{self, Stage};
use crate::support::{TestServer, User, definition};

/// The memory file every agent starts with, and its content.
pub const MEMORY_FILE: &str = "notes.md";
pub const MEMORY_TEXT: &str = "remember this";
/// The authored (lambda) tool every agent starts with.
pub const TOOL_NAME: &str = "word_count";
/// The attachment every session starts with.
pub const ATTACHMENT_TEXT: &[u8] = b"attached words";
/// A staged upload's size and content (one chunk).
pub const UPLOAD_BYTES: &[u8] = b"four";
/// The subscription provider every owner has (its model list needs no vendor).
pub const SUBSCRIPTION_PROVIDER: &str = "chatgpt";
/// The owner's MCP server (on the origin below, which is no MCP server: it is saved in error).
pub const MCP_SERVER: &str = "owner-mcp";
/// The labels of the owner's two signing identities.
pub const GRANTED_LABEL: &str = "Granted";
pub const UNGRANTED_LABEL: &str = "Ungranted";

/// One server for the whole matrix, with a fake Hypermedia server (identity updates, IPFS
/// uploads) and a loopback origin for downloads (private networks allowed for it).
pub struct Env {
    pub server: TestServer,
    /// Kept alive for the cells that publish (identity updates, IPFS uploads).
    _hm: FakeHm,
    /// A URL the origin answers with a small text file.
    pub download_url: String,
    origin: tokio::task::JoinHandle<()>,
}

impl Env {
    pub async fn start() -> Self {
        let hm = FakeHm::start().await;
        let hm_url = hm.url.clone();
        let server = TestServer::start_with(tempfile::tempdir().expect("temp dir"), move |config| {
            config.hm_server_url = hm_url;
            config.allow_private_network = true;
            // Sign-ins start without the issuer; nothing reaches this closed port.
            config.subscription_auth = true;
            config.oauth_issuer_url = TestServer::CLOSED_HM_SERVER.to_owned();
        })
        .await;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let download_url = format!("http://{}/files/report.txt", listener.local_addr().expect("origin address"));
        let origin = tokio::spawn(serve_origin(listener));
        // Retried turns end at once with this answer.
        let executor = runs::Scripted::install(&server);
        executor.answer(Some(Outcome::Succeeded(runs::turn_output("retried"))));
        Self { server, _hm: hm, download_url, origin }
    }

    pub async fn stop(self) {
        self.origin.abort();
        self.server.stop().await;
    }
}

/// Answers every request with `200 text/plain` and a short body, one request per connection.
async fn serve_origin(listener: TcpListener) {
    while let Ok((mut socket, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buffer = [0u8; 2048];
            while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                match socket.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let body = "downloaded";
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

/// A chunked upload the actor began (as a writer, before its role was set) for the row to go on
/// with: into memory or into the session, with none or all of its bytes received.
#[derive(Debug, Clone, Copy)]
pub struct Staged {
    pub into_session: bool,
    pub full: bool,
}

/// The fresh state of one cell.
pub struct Cell {
    pub owner: User,
    /// Who performs the cell's action (the owner in the owner column).
    pub actor: User,
    pub agent_id: AgentId,
    /// The agent's definition as created (it grants [`Cell::granted`]).
    pub definition: AgentDefinition,
    pub session_id: SessionId,
    pub attachment_id: AttachmentId,
    /// An account with a pending reader invitation (someone every cell can remove).
    pub bystander: AccountId,
    /// The owner's signing identity the agent's definition grants (its secret name).
    pub granted: String,
    /// The owner's other signing identity, granted to no agent.
    pub ungranted: String,
    /// The staged upload's id, when the row asked for one.
    pub upload_id: Option<UploadId>,
    /// The staged run's id, when the row asked for one (else empty).
    pub run_id: RunId,
    /// The agent's default (activity) trigger, as created.
    pub trigger: AgentTriggerInfo,
    /// A second activity trigger of the agent (for `CombineAgentTriggers`), as created.
    pub other_trigger: AgentTriggerInfo,
    pub download_url: String,
    /// A subscription sign-in the owner started.
    pub login_id: LoginId,
}

impl Cell {
    /// The staged upload's id (a row that uses it asks for one).
    pub fn upload(&self) -> UploadId {
        self.upload_id.clone().expect("the row stages an upload")
    }
}

/// Builds a cell's state for `caller`, with the upload and the run the row asks for.
pub async fn cell(env: &Env, caller: Caller, staged: Option<Staged>, run: Option<Stage>) -> Cell {
    let server = &env.server;
    let owner = server.user();
    owner.ensure_provider().await;
    ok(owner.call(SetModelProvider { name: SUBSCRIPTION_PROVIDER.into(), provider: subscription() }).await, "provider");
    let mcp = SetMcpServer { name: MCP_SERVER.into(), config: McpServerConfig::new(env.download_url.clone()) };
    ok(owner.call(mcp).await, "mcp server");
    let granted = import_identity(&owner, GRANTED_LABEL).await;
    let ungranted = import_identity(&owner, UNGRANTED_LABEL).await;
    let definition = AgentDefinition { signing_key: Some(granted.clone()), ..definition("Matrix") };
    let create = CreateAgent { client_request_id: None, definition: definition.clone() };
    let agent_id = ok(owner.call(create).await, "create agent").agent_id;
    let session_id = owner.create_session(&agent_id, Some("Shared thread")).await;
    let write = WriteAgentMemoryFile {
        agent_id: agent_id.clone(),
        path: MEMORY_FILE.into(),
        content: WriteAgentMemoryFileContent::String(MEMORY_TEXT.into()),
    };
    ok(owner.call(write).await, "memory file");
    let tool = SaveAgentTool { agent_id: agent_id.clone(), previous_name: None, tool: lambda(TOOL_NAME) };
    ok(owner.call(tool).await, "lambda tool");
    let (trigger, other_trigger) = triggers(&owner, &agent_id).await;
    let attach = UploadSessionAttachment {
        session_id: session_id.clone(),
        name: "brief.txt".into(),
        mime_type: Some("text/plain".into()),
        content: Bytes(ATTACHMENT_TEXT.to_vec()),
    };
    let attachment_id = ok(owner.call(attach).await, "attachment").attachment.id;
    let bystander = server.user().id;
    invite(&owner, &agent_id, &bystander, AgentCollaboratorRole::Reader).await;
    let login_id = ok(owner.call(StartProviderOAuth { provider_type: "openai".into() }).await, "sign-in").login_id;

    let actor = match caller {
        Caller::Owner => owner.clone(),
        _ => server.user(),
    };
    let mut cell = Cell {
        owner,
        actor,
        agent_id,
        definition,
        session_id,
        attachment_id,
        bystander,
        granted,
        ungranted,
        upload_id: None,
        run_id: RunId::from(""),
        trigger,
        other_trigger,
        download_url: env.download_url.clone(),
        login_id,
    };
    match staged {
        None => relate(&cell, caller).await,
        Some(staged) => {
            // The actor begins the upload while it may (as a writer), then gets its column's role.
            if caller != Caller::Owner {
                invite(&cell.owner, &cell.agent_id, &cell.actor.id, AgentCollaboratorRole::Writer).await;
                ok(cell.actor.call(AcceptAgentInvite { agent_id: cell.agent_id.clone() }).await, "accept");
            }
            cell.upload_id = Some(stage(&cell, staged).await);
            if caller != Caller::Owner && caller != Caller::Writer {
                let remove =
                    RemoveAgentCollaborator { agent_id: cell.agent_id.clone(), account_id: cell.actor.id.clone() };
                ok(cell.owner.call(remove).await, "remove the actor");
                relate(&cell, caller).await;
            }
        }
    }
    if let Some(stage) = run {
        cell.run_id = runs::stage(server, &cell.owner.id, &cell.agent_id, &cell.session_id, stage).await;
    }
    cell
}

/// Relates the actor (no relation yet) to the agent as `caller` says.
async fn relate(cell: &Cell, caller: Caller) {
    let (owner, agent_id, actor) = (&cell.owner, &cell.agent_id, &cell.actor);
    match caller {
        Caller::Owner | Caller::Stranger => {}
        Caller::Writer | Caller::Reader => {
            let role =
                if caller == Caller::Writer { AgentCollaboratorRole::Writer } else { AgentCollaboratorRole::Reader };
            invite(owner, agent_id, &actor.id, role).await;
            ok(actor.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await, "accept");
        }
        Caller::Invitee => invite(owner, agent_id, &actor.id, AgentCollaboratorRole::Writer).await,
        Caller::Chatter | Caller::PublicReader => {
            ok(owner.call(SetAgentPublicRead { agent_id: agent_id.clone(), public_read: true }).await, "public read");
            if caller == Caller::Chatter {
                let chat = SetAgentPublicChat { agent_id: agent_id.clone(), public_chat: true };
                ok(owner.call(chat).await, "public chat");
            }
        }
    }
}

/// Begins (and fills, when asked) an upload as the actor; returns its id.
async fn stage(cell: &Cell, staged: Staged) -> UploadId {
    let target = if staged.into_session {
        FileUploadTarget::SessionAttachmentUploadTarget(SessionAttachmentUploadTarget {
            extra: Default::default(),
            session_id: cell.session_id.clone(),
            name: "staged.txt".into(),
            mime_type: Some("text/plain".into()),
        })
    } else {
        FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
            extra: Default::default(),
            agent_id: cell.agent_id.clone(),
            path: "staged/file.bin".into(),
        })
    };
    let begin = BeginFileUpload { size: UPLOAD_BYTES.len() as i64, target };
    let upload_id = ok(cell.actor.call(begin).await, "begin upload").upload_id;
    if staged.full {
        let chunk =
            AppendFileUploadChunk { upload_id: upload_id.clone(), offset: 0, content: Bytes(UPLOAD_BYTES.to_vec()) };
        ok(cell.actor.call(chunk).await, "fill upload");
    }
    upload_id
}

pub async fn invite(owner: &User, agent_id: &str, account: &str, role: AgentCollaboratorRole) {
    let invite = InviteAgentCollaborator { agent_id: agent_id.into(), account_id: account.into(), role };
    ok(owner.call(invite).await, "invite");
}

/// Imports a fresh key as a signing identity of `owner`; returns its secret name.
async fn import_identity(owner: &User, label: &str) -> String {
    let seed = Ed25519Signer::generate().expect("key").seed();
    let import =
        ImportSigningIdentity { client_request_id: None, label: Some(label.into()), seed: Bytes(seed.to_vec()) };
    ok(owner.call(import).await, "import identity").identity.name
}

/// An OpenAI subscription provider: its model list is fixed, so listing it calls no vendor.
pub fn subscription() -> ModelProviderConfig {
    ModelProviderConfig {
        extra: Default::default(),
        auth_mode: Some(ModelProviderConfigAuthMode::Subscription),
        base_url: None,
        model_defaults: None,
        secret_refs: Some(BTreeMap::from([("oauth".to_owned(), "openai-subscription-oauth".to_owned())])),
        type_: "openai".into(),
    }
}

/// A fixture step's answer (a failing step is a broken fixture, not a matrix finding).
fn ok<T, E: std::fmt::Debug>(result: Result<T, E>, step: &str) -> T {
    result.unwrap_or_else(|error| panic!("matrix fixture, {step}: {error:?}"))
}

/// A small lambda tool called `name`.
pub fn lambda(name: &str) -> seed_agents_protocol::generated::AgentToolInput {
    let input = [("type".to_owned(), seed_agents_protocol::Value(ipld_core::ipld::Ipld::String("object".into())))];
    seed_agents_protocol::generated::AgentToolInput {
        extra: Default::default(),
        description: "Counts words.".into(),
        input: input.into_iter().collect(),
        name: name.into(),
        output: None,
        runtime: seed_agents_protocol::generated::AgentToolInputRuntime::Typescript,
        source: "export default (input) => ({count: 0})".into(),
        summary: None,
    }
}

/// The agent's default trigger (its signing identity gets one) and a second activity trigger.
async fn triggers(owner: &User, agent_id: &str) -> (AgentTriggerInfo, AgentTriggerInfo) {
    let listed = ok(owner.call(ListAgentTriggers { agent_id: agent_id.into() }).await, "list triggers");
    let default = listed.triggers.into_iter().next().expect("the default trigger");
    let source = AgentTriggerSource::ActivitySource(ActivitySource {
        extra: Default::default(),
        conditions: vec![AgentActivityCondition {
            extra: Default::default(),
            id: "mention".into(),
            source: AgentActivitySource::UserMentionSource(UserMentionSource {
                extra: Default::default(),
                mentioned_accounts: vec![owner.id.to_string()],
                resource_prefix: None,
            }),
        }],
    });
    let trigger = AgentTriggerInput {
        extra: Default::default(),
        continuation: None,
        enabled: None,
        name: "Owner mentions".into(),
        prompt: Some(AgentTriggerInputPrompt::String("Answer the mention.".into())),
        source,
    };
    let create = CreateAgentTrigger { agent_id: agent_id.into(), client_request_id: None, trigger };
    let other = ok(owner.call(create).await, "create trigger").trigger;
    (default, other)
}
