//! The table: one row per action (or per variant of one), with its builder and, per caller,
//! the outcome docs/protocol.md §C states. Allowed cells may also name what the answer must show
//! this caller, and account-scoped writes what must still hold for the owner afterwards.

use std::fmt;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AbortFileUpload, AcceptAgentInvite, AcceptAgentInviteResponse, AgentAccessRole, AgentCollaboratorInfoStatus,
    AgentCollaboratorRole, AgentDefinition, AppendFileUploadChunk, AppendFileUploadChunkResponse, BeginFileUpload,
    CommitFileUpload, CommitFileUploadResponse, CreateSession, DeclineAgentInvite, DeleteAgent, DeleteAgentMemoryFile,
    DeleteAgentMemoryFileResponse, DeleteModelProvider, DeleteSession, DeleteSigningIdentity, DownloadAgentMemoryFile,
    DownloadAgentMemoryFileResponse, FileUploadTarget, GetAgent, GetAgentResponse, GetSession, GetSessionResponse,
    InviteAgentCollaborator, InvokeSessionTool, InvokeSessionToolResponse, InvokeSessionToolVerb,
    ListAgentCollaborators, ListAgentCollaboratorsResponse, ListAgentInvites, ListAgentInvitesResponse,
    ListAgentMemory, ListAgentMemoryDir, ListAgentMemoryDirResponse, ListAgentMemoryResponse, ListAgents,
    ListAgentsResponse, ListModelProviders, ListModelProvidersResponse, ListProviderModels, ListProviderModelsResponse,
    ListSessions, ListSessionsResponse, ListSigningIdentities, ListSigningIdentitiesResponse, MemoryUploadTarget,
    ModelProviderConfig, ReadAgentMemoryFile, ReadAgentMemoryFileResponse, ReadSessionAttachment,
    ReadSessionAttachmentResponse, RemoveAgentCollaborator, SessionAttachmentUploadTarget, SetAgentPublicChat,
    SetAgentPublicRead, SetAgentPublicReadResponse, SetModelProvider, SetSecret, UpdateAgent, UpdateSession,
    UpdateSessionResponse, UpdateSigningIdentity, UploadAgentMemoryFileToIpfs, UploadAgentMemoryFileToIpfsResponse,
    UploadSessionAttachment, WriteAgentMemoryFile, WriteAgentMemoryFileContent,
};
use seed_agents_protocol::generated::{
    AgentTriggerInput, AgentTriggerInputPrompt, AgentTriggerPatch, AgentTriggerSource, CombineAgentTriggers,
    CreateAgentTrigger, CreateAgentTriggerResponse, DeleteAgentTrigger, DeleteAgentTriggerResponse, GetAgentTrigger,
    GetAgentTriggerResponse, ListAgentTriggers, ListAgentTriggersResponse, UpdateAgentTrigger,
    UpdateAgentTriggerResponse, WebhookSource,
};
use seed_agents_protocol::generated::{CancelProviderOAuth, GetProviderOAuthStatus, SubmitProviderOAuthCode};
use seed_agents_protocol::generated::{
    CancelRun, CancelRunResponse, GetRun, GetRunJournal, GetRunJournalResponse, GetRunResponse, GetSessionEvent,
    GetSessionEventResponse, ListRuns, ListRunsResponse, MessageSession, MessageSessionContentPart,
    MessageSessionResponse, RetrySession, RetrySessionResponse, SignalRun, SignalRunResponse, StopSession,
    StopSessionResponse, TextContentPart,
};
use seed_agents_protocol::generated::{
    DeleteAgentTool, DeleteAgentToolResponse, ListAgentTools, ListAgentToolsResponse, SaveAgentTool,
    SaveAgentToolResponse,
};
use seed_agents_protocol::generated::{
    DeleteMcpServer, ListMcpServers, ListMcpServersResponse, McpServerConfig, RefreshMcpServer, SetMcpServer,
};
use seed_agents_protocol::{
    Action, AgentAction, AgentResponse, Bytes, Ed25519Signer, Nullable, Response, Signer as _, Value,
};

use super::Caller;
use super::fixture::{self, Cell, Staged};
use crate::support::runs::Stage;

/// What a cell must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Allowed,
    Refused(u16, &'static str),
}

pub const OK: Expect = Expect::Allowed;
pub const NO_AGENT: Expect = Expect::Refused(404, "Agent not found");
pub const NO_SESSION: Expect = Expect::Refused(404, "Session not found");
pub const NO_UPLOAD: Expect = Expect::Refused(404, "Upload not found");
pub const NO_RUN: Expect = Expect::Refused(404, "Run not found");
pub const NO_TRIGGER: Expect = Expect::Refused(404, "Agent trigger not found");
pub const NO_INVITE: Expect = Expect::Refused(404, "Agent invitation not found");
pub const NO_PROVIDER: Expect = Expect::Refused(404, "Model provider not found");
pub const NO_IDENTITY: Expect = Expect::Refused(404, "Signing identity not found");
pub const NO_SIGN_IN: Expect = Expect::Refused(404, "Sign-in not found");
pub const NO_MCP: Expect = Expect::Refused(404, "MCP server not found");
pub const WRITE: Expect = Expect::Refused(403, "Write access is required");
pub const OWNER: Expect = Expect::Refused(403, "Only the agent owner can do this");
pub const SIGNING: Expect = Expect::Refused(403, "Only the agent owner can change signing accounts");

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Allowed => f.write_str("allowed"),
            Expect::Refused(status, message) => write!(f, "{status} {message:?}"),
        }
    }
}

/// What an allowed answer must show this caller.
pub type Shape = fn(&Cell, Caller, &AgentResponse) -> Result<(), String>;

/// What the owner must still have, untouched, after a non-owner's call.
#[derive(Debug, Clone, Copy)]
pub enum OwnerKeeps {
    /// Its provider `main`, still the OpenAI provider the fixture set.
    MainProvider,
    /// Its subscription provider.
    SubscriptionProvider,
    /// Its granted signing identity, with its label.
    GrantedIdentity,
    /// Its MCP server, at the URL the fixture set.
    McpServer,
}

/// One row of the table.
pub struct Row {
    /// The action's wire name, then the variant when the action has several rows.
    pub label: &'static str,
    pub build: fn(&Cell) -> AgentAction,
    /// Per caller, in [`CALLERS`] order.
    pub expect: [Expect; 7],
    pub shape: Option<Shape>,
    pub staged: Option<Staged>,
    pub owner_keeps: Option<OwnerKeeps>,
    /// A run staged in the cell's session (as the owner's), for the run rows.
    pub run: Option<Stage>,
}

fn row(label: &'static str, build: fn(&Cell) -> AgentAction, expect: [Expect; 7]) -> Row {
    Row { label, build, expect, shape: None, staged: None, owner_keeps: None, run: None }
}

impl Row {
    fn shape(self, shape: Shape) -> Self {
        Self { shape: Some(shape), ..self }
    }

    fn staged(self, into_session: bool, full: bool) -> Self {
        Self { staged: Some(Staged { into_session, full }), ..self }
    }

    fn owner_keeps(self, kept: OwnerKeeps) -> Self {
        Self { owner_keeps: Some(kept), ..self }
    }

    fn with_run(self, stage: Stage) -> Self {
        Self { run: Some(stage), ..self }
    }

    /// The action's wire name.
    pub fn action(&self) -> &'static str {
        self.label.split(' ').next().unwrap_or(self.label)
    }
}

/// Routed actions deliberately not in the table: each acts only on the signed account and names
/// nothing of another account, so no role on an agent bears on it.
pub const UNRELATED: &[&str] = &[
    // Authorizes a delegated signer for the caller's own account.
    "RegisterSigner",
    // The caller becomes the owner of a new agent.
    "CreateAgent",
    // A new key in the caller's own account.
    "CreateSigningIdentity",
    "ImportSigningIdentity",
    // A new sign-in of the caller's own account.
    "StartProviderOAuth",
];

/// The table. Columns: owner, writer, reader, chatter, public reader, pending invitee, stranger.
pub fn table() -> Vec<Row> {
    vec![
        // Agents.
        row(
            "GetAgent",
            |c| GetAgent { agent_id: c.agent_id.clone() }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, caller, answer| {
            let got = response::<GetAgentResponse>(answer)?;
            same("accessRole", got.agent.access_role, caller.access_role())
        }),
        row(
            "UpdateAgent (same signing keys)",
            |c| update_agent(c, c.definition.clone()),
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            same("name", response::<GetAgentResponse>(answer)?.agent.definition.name, "Renamed".into())
        }),
        row(
            "UpdateAgent (granting another signing key)",
            |c| {
                let definition = AgentDefinition {
                    signing_keys: Some(vec![c.granted.clone(), c.ungranted.clone()]),
                    ..c.definition.clone()
                };
                update_agent(c, definition)
            },
            [OK, SIGNING, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        ),
        row(
            "DeleteAgent",
            |c| DeleteAgent { agent_id: c.agent_id.clone() }.into_action(),
            [OK, OWNER, OWNER, OWNER, OWNER, NO_AGENT, NO_AGENT],
        ),
        row(
            "ListAgents (account-wide: owned and accepted only)",
            |_| ListAgents {}.into_action(),
            [OK, OK, OK, OK, OK, OK, OK],
        )
        .shape(|cell, caller, answer| {
            let got = response::<ListAgentsResponse>(answer)?;
            let listed = got.agents.iter().find(|agent| agent.id == cell.agent_id).map(|agent| agent.access_role);
            same("listed as", listed, caller.is_member().then(|| caller.access_role()))
        }),
        // Collaborators and public access.
        row(
            "ListAgentCollaborators",
            |c| ListAgentCollaborators { agent_id: c.agent_id.clone() }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, caller, answer| {
            let got = response::<ListAgentCollaboratorsResponse>(answer)?;
            let pending = got.collaborators.iter().any(|row| row.status == AgentCollaboratorInfoStatus::Pending);
            same("pending invitations shown", pending, caller == Caller::Owner)
        }),
        row(
            "InviteAgentCollaborator",
            |c| {
                let account_id = Ed25519Signer::generate().unwrap().principal().to_string();
                InviteAgentCollaborator {
                    agent_id: c.agent_id.clone(),
                    account_id: account_id.into(),
                    role: AgentCollaboratorRole::Reader,
                }
                .into_action()
            },
            [OK, OWNER, OWNER, OWNER, OWNER, NO_AGENT, NO_AGENT],
        ),
        row(
            "RemoveAgentCollaborator",
            |c| RemoveAgentCollaborator { agent_id: c.agent_id.clone(), account_id: c.bystander.clone() }.into_action(),
            [OK, OWNER, OWNER, OWNER, OWNER, NO_AGENT, NO_AGENT],
        ),
        row(
            "AcceptAgentInvite",
            |c| AcceptAgentInvite { agent_id: c.agent_id.clone() }.into_action(),
            [NO_INVITE, NO_INVITE, NO_INVITE, NO_INVITE, NO_INVITE, OK, NO_INVITE],
        )
        .shape(|_, _, answer| {
            same(
                "accessRole",
                response::<AcceptAgentInviteResponse>(answer)?.agent.access_role,
                Some(AgentAccessRole::Writer),
            )
        }),
        row(
            "DeclineAgentInvite",
            |c| DeclineAgentInvite { agent_id: c.agent_id.clone() }.into_action(),
            [NO_INVITE, NO_INVITE, NO_INVITE, NO_INVITE, NO_INVITE, OK, NO_INVITE],
        ),
        row(
            "ListAgentInvites (account-wide: own pending invitations)",
            |_| ListAgentInvites {}.into_action(),
            [OK, OK, OK, OK, OK, OK, OK],
        )
        .shape(|cell, caller, answer| {
            let got = response::<ListAgentInvitesResponse>(answer)?;
            same(
                "invited",
                got.invites.iter().any(|invite| invite.agent_id == cell.agent_id),
                caller == Caller::Invitee,
            )
        }),
        row(
            "SetAgentPublicRead",
            |c| SetAgentPublicRead { agent_id: c.agent_id.clone(), public_read: true }.into_action(),
            [OK, OWNER, OWNER, OWNER, OWNER, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            same("publicRead", response::<SetAgentPublicReadResponse>(answer)?.agent.public_read, Some(true))
        }),
        row(
            "SetAgentPublicChat",
            |c| SetAgentPublicChat { agent_id: c.agent_id.clone(), public_chat: false }.into_action(),
            [OK, OWNER, OWNER, OWNER, OWNER, NO_AGENT, NO_AGENT],
        ),
        // Sessions.
        row(
            "CreateSession",
            |c| {
                CreateSession {
                    agent_id: c.agent_id.clone(),
                    client_request_id: None,
                    model_override: None,
                    thoroughness: None,
                    title: None,
                }
                .into_action()
            },
            [OK, OK, WRITE, OK, WRITE, NO_AGENT, NO_AGENT],
        ),
        row(
            "ListSessions (one agent)",
            |c| list_sessions(Some(c.agent_id.clone())),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|cell, _, answer| {
            let got = response::<ListSessionsResponse>(answer)?;
            same("session listed", got.sessions.iter().any(|session| session.id == cell.session_id), true)
        }),
        row(
            "ListSessions (account-wide: owned and accepted agents only)",
            |_| list_sessions(None),
            [OK, OK, OK, OK, OK, OK, OK],
        )
        .shape(|cell, caller, answer| {
            let got = response::<ListSessionsResponse>(answer)?;
            same("session listed", got.sessions.iter().any(|session| session.id == cell.session_id), caller.is_member())
        }),
        row(
            "GetSession",
            |c| {
                GetSession { session_id: c.session_id.clone(), after_seq: None, before_seq: None, limit: None }
                    .into_action()
            },
            [OK, OK, OK, OK, OK, NO_SESSION, NO_SESSION],
        )
        .shape(|cell, _, answer| {
            same("session", response::<GetSessionResponse>(answer)?.session.id, cell.session_id.clone())
        }),
        row(
            "UpdateSession",
            |c| {
                UpdateSession {
                    session_id: c.session_id.clone(),
                    title: Some("Renamed".into()),
                    model_override: Nullable::Absent,
                    thoroughness: Nullable::Absent,
                }
                .into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_SESSION, NO_SESSION],
        )
        .shape(|_, _, answer| {
            same("title", response::<UpdateSessionResponse>(answer)?.session.title, Some("Renamed".into()))
        }),
        row(
            "DeleteSession",
            |c| DeleteSession { session_id: c.session_id.clone() }.into_action(),
            [OK, OK, WRITE, WRITE, WRITE, NO_SESSION, NO_SESSION],
        ),
        row(
            "InvokeSessionTool (read ~/memory)",
            |c| verb(c, InvokeSessionToolVerb::Read, &[("address", "~/memory/notes.md")]),
            [OK, OK, WRITE, WRITE, WRITE, NO_SESSION, NO_SESSION],
        )
        .shape(|_, _, answer| same("error", response::<InvokeSessionToolResponse>(answer)?.error, None)),
        row(
            "InvokeSessionTool (write ~/memory)",
            |c| verb(c, InvokeSessionToolVerb::Write, &[("address", "~/memory/verb.md"), ("content", "x")]),
            [OK, OK, WRITE, WRITE, WRITE, NO_SESSION, NO_SESSION],
        )
        .shape(|_, _, answer| same("error", response::<InvokeSessionToolResponse>(answer)?.error, None)),
        row(
            "UploadSessionAttachment",
            |c| {
                UploadSessionAttachment {
                    session_id: c.session_id.clone(),
                    name: "more.txt".into(),
                    mime_type: None,
                    content: Bytes(b"more".to_vec()),
                }
                .into_action()
            },
            [OK, OK, WRITE, OK, WRITE, NO_SESSION, NO_SESSION],
        ),
        row(
            "ReadSessionAttachment",
            |c| {
                ReadSessionAttachment { session_id: c.session_id.clone(), attachment_id: c.attachment_id.clone() }
                    .into_action()
            },
            [OK, OK, OK, OK, OK, NO_SESSION, NO_SESSION],
        )
        .shape(|_, _, answer| {
            same("data", response::<ReadSessionAttachmentResponse>(answer)?.data.0, fixture::ATTACHMENT_TEXT.to_vec())
        }),
        // Turn control and runs (a run staged in the session: parked on a budget pause, or failed).
        row(
            "GetSessionEvent",
            |c| GetSessionEvent { session_id: c.session_id.clone(), seq: 1 }.into_action(),
            [OK, OK, OK, OK, OK, NO_SESSION, NO_SESSION],
        )
        .with_run(Stage::Failed)
        .shape(|_, _, answer| same("seq", response::<GetSessionEventResponse>(answer)?.event.seq, 1)),
        row(
            "MessageSession",
            |c| {
                MessageSession {
                    client_message_id: None,
                    content: vec![MessageSessionContentPart::TextContentPart(TextContentPart {
                        extra: Default::default(),
                        blocks: None,
                        client_message_id: None,
                        text: "hello".into(),
                    })],
                    session_id: c.session_id.clone(),
                }
                .into_action()
            },
            [OK, OK, WRITE, OK, WRITE, NO_SESSION, NO_SESSION],
        )
        .shape(|_, _, answer| {
            same("assistantEventId", response::<MessageSessionResponse>(answer)?.assistant_event_id, "retried".into())
        }),
        row(
            "StopSession",
            |c| StopSession { session_id: c.session_id.clone() }.into_action(),
            [OK, OK, WRITE, OK, WRITE, NO_SESSION, NO_SESSION],
        )
        .with_run(Stage::Paused)
        .shape(|_, _, answer| same("stopped", response::<StopSessionResponse>(answer)?.stopped, true)),
        row(
            "RetrySession",
            |c| RetrySession { session_id: c.session_id.clone() }.into_action(),
            [OK, OK, WRITE, OK, WRITE, NO_SESSION, NO_SESSION],
        )
        .with_run(Stage::Failed)
        .shape(|_, _, answer| {
            same("assistantEventId", response::<RetrySessionResponse>(answer)?.assistant_event_id, "retried".into())
        }),
        row("GetRun", |c| GetRun { run_id: c.run_id.clone() }.into_action(), [OK, OK, OK, OK, OK, NO_RUN, NO_RUN])
            .with_run(Stage::Paused)
            .shape(|cell, _, answer| same("run", response::<GetRunResponse>(answer)?.run.id, cell.run_id.clone())),
        row("ListRuns (agentId)", |c| list_runs(None, None, Some(c)), [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT])
            .with_run(Stage::Paused)
            .shape(listed_run),
        row("ListRuns (sessionId)", |c| list_runs(None, Some(c), None), [OK, OK, OK, OK, OK, NO_SESSION, NO_SESSION])
            .with_run(Stage::Paused)
            .shape(listed_run),
        row("ListRuns (rootRunId)", |c| list_runs(Some(c), None, None), [OK, OK, OK, OK, OK, NO_RUN, NO_RUN])
            .with_run(Stage::Paused)
            .shape(listed_run),
        row(
            "CancelRun",
            |c| CancelRun { run_id: c.run_id.clone() }.into_action(),
            [OK, OK, WRITE, WRITE, WRITE, NO_RUN, NO_RUN],
        )
        .with_run(Stage::Paused)
        .shape(|_, _, answer| same("canceled", response::<CancelRunResponse>(answer)?.canceled, true)),
        row(
            "SignalRun",
            |c| SignalRun { run_id: c.run_id.clone(), signal: "resume".into(), payload: None }.into_action(),
            [OK, OK, WRITE, WRITE, WRITE, NO_RUN, NO_RUN],
        )
        .with_run(Stage::Paused)
        .shape(|_, _, answer| same("delivered", response::<SignalRunResponse>(answer)?.delivered, true)),
        row(
            "GetRunJournal",
            |c| GetRunJournal { run_id: c.run_id.clone(), after_seq: None }.into_action(),
            [OK, OK, OK, OK, OK, NO_RUN, NO_RUN],
        )
        .with_run(Stage::Paused)
        .shape(|_, _, answer| same("entries", response::<GetRunJournalResponse>(answer)?.entries.len(), 0)),
        // Memory.
        row(
            "ListAgentMemory",
            |c| ListAgentMemory { agent_id: c.agent_id.clone() }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            let got = response::<ListAgentMemoryResponse>(answer)?;
            same("notes.md listed", got.entries.iter().any(|entry| entry.path == fixture::MEMORY_FILE), true)
        }),
        row(
            "ListAgentMemoryDir",
            |c| ListAgentMemoryDir { agent_id: c.agent_id.clone(), path: None }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            let got = response::<ListAgentMemoryDirResponse>(answer)?;
            same("notes.md listed", got.entries.iter().any(|entry| entry.path == fixture::MEMORY_FILE), true)
        }),
        row(
            "ReadAgentMemoryFile",
            |c| ReadAgentMemoryFile { agent_id: c.agent_id.clone(), path: fixture::MEMORY_FILE.into() }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            same(
                "content",
                response::<ReadAgentMemoryFileResponse>(answer)?.file.content,
                Some(fixture::MEMORY_TEXT.into()),
            )
        }),
        row(
            "WriteAgentMemoryFile",
            |c| {
                WriteAgentMemoryFile {
                    agent_id: c.agent_id.clone(),
                    path: "new.md".into(),
                    content: WriteAgentMemoryFileContent::String("x".into()),
                }
                .into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        ),
        row(
            "DeleteAgentMemoryFile",
            |c| DeleteAgentMemoryFile { agent_id: c.agent_id.clone(), path: fixture::MEMORY_FILE.into() }.into_action(),
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| same("deleted", response::<DeleteAgentMemoryFileResponse>(answer)?.deleted, true)),
        row(
            "DownloadAgentMemoryFile",
            |c| {
                DownloadAgentMemoryFile {
                    agent_id: c.agent_id.clone(),
                    url: c.download_url.clone(),
                    path: Some("fetched.txt".into()),
                }
                .into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            same("path", response::<DownloadAgentMemoryFileResponse>(answer)?.entry.path, "fetched.txt".into())
        }),
        row(
            "UploadAgentMemoryFileToIpfs",
            |c| {
                UploadAgentMemoryFileToIpfs { agent_id: c.agent_id.clone(), path: fixture::MEMORY_FILE.into() }
                    .into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            let got = response::<UploadAgentMemoryFileToIpfsResponse>(answer)?;
            same("url", got.url, format!("ipfs://{}", got.cid))
        }),
        // Tools.
        row(
            "ListAgentTools",
            |c| ListAgentTools { agent_id: c.agent_id.clone() }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            let names: Vec<String> =
                response::<ListAgentToolsResponse>(answer)?.tools.into_iter().map(|t| t.name).collect();
            same(
                "tools",
                names,
                vec![
                    "attributes".into(),
                    "execute".into(),
                    "query".into(),
                    "search".into(),
                    "web_search".into(),
                    fixture::TOOL_NAME.into(),
                ],
            )
        }),
        row(
            "SaveAgentTool",
            |c| {
                SaveAgentTool { agent_id: c.agent_id.clone(), previous_name: None, tool: fixture::lambda("new_tool") }
                    .into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| same("name", response::<SaveAgentToolResponse>(answer)?.tool.name, "new_tool".into())),
        row(
            "DeleteAgentTool",
            |c| DeleteAgentTool { agent_id: c.agent_id.clone(), name: fixture::TOOL_NAME.into() }.into_action(),
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| same("deleted", response::<DeleteAgentToolResponse>(answer)?.deleted, true)),
        // Triggers.
        row(
            "ListAgentTriggers",
            |c| ListAgentTriggers { agent_id: c.agent_id.clone() }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|cell, _, answer| {
            let listed = response::<ListAgentTriggersResponse>(answer)?.triggers.len();
            same("triggers listed", listed, 2).and(same("cell", cell.trigger.agent_id == cell.agent_id, true))
        }),
        row(
            "GetAgentTrigger",
            |c| GetAgentTrigger { trigger_id: c.trigger.id.clone() }.into_action(),
            [OK, OK, OK, OK, OK, NO_TRIGGER, NO_TRIGGER],
        )
        .shape(|cell, _, answer| {
            same("trigger", response::<GetAgentTriggerResponse>(answer)?.trigger, cell.trigger.clone())
        }),
        row(
            "CreateAgentTrigger",
            |c| {
                let trigger = AgentTriggerInput {
                    extra: Default::default(),
                    continuation: None,
                    enabled: None,
                    name: "Hook".into(),
                    prompt: Some(AgentTriggerInputPrompt::String("Handle the call.".into())),
                    source: AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() }),
                };
                CreateAgentTrigger { agent_id: c.agent_id.clone(), client_request_id: None, trigger }.into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            let secret = response::<CreateAgentTriggerResponse>(answer)?.webhook_secret;
            same("secret minted", secret.is_some_and(|secret| secret.starts_with("whsec_")), true)
        }),
        row(
            "UpdateAgentTrigger",
            |c| {
                let patch = AgentTriggerPatch { name: Some("Renamed".into()), ..Default::default() };
                UpdateAgentTrigger { trigger_id: c.trigger.id.clone(), patch, expected_updated_at: None }.into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_TRIGGER, NO_TRIGGER],
        )
        .shape(|_, _, answer| {
            same("name", response::<UpdateAgentTriggerResponse>(answer)?.trigger.name, "Renamed".into())
        }),
        row(
            "DeleteAgentTrigger",
            |c| DeleteAgentTrigger { trigger_id: c.trigger.id.clone() }.into_action(),
            [OK, OK, WRITE, WRITE, WRITE, NO_TRIGGER, NO_TRIGGER],
        )
        .shape(|cell, _, answer| {
            same("deleted", response::<DeleteAgentTriggerResponse>(answer)?.trigger_id, cell.trigger.id.clone())
        }),
        row(
            "CombineAgentTriggers",
            |c| {
                CombineAgentTriggers {
                    trigger_id: c.trigger.id.clone(),
                    other_trigger_id: c.other_trigger.id.clone(),
                    expected_updated_at: c.trigger.updated_at,
                    other_expected_updated_at: c.other_trigger.updated_at,
                    use_other_action: None,
                }
                .into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_TRIGGER, NO_TRIGGER],
        )
        .shape(|cell, _, answer| {
            let AgentTriggerSource::ActivitySource(source) =
                response::<UpdateAgentTriggerResponse>(answer)?.trigger.source
            else {
                return Err("the survivor is not an activity trigger".into());
            };
            same("conditions", source.conditions.len(), 4).and(same("cell", cell.trigger.id.is_empty(), false))
        }),
        // Chunked uploads. Begin checks the target; the others act on an upload the actor began
        // as a writer, and check the actor's role now.
        row(
            "BeginFileUpload (into memory)",
            |c| {
                let target = FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
                    extra: Default::default(),
                    agent_id: c.agent_id.clone(),
                    path: "up.bin".into(),
                });
                BeginFileUpload { size: 4, target }.into_action()
            },
            [OK, OK, WRITE, WRITE, WRITE, NO_AGENT, NO_AGENT],
        ),
        row(
            "BeginFileUpload (into a session)",
            |c| {
                let target = FileUploadTarget::SessionAttachmentUploadTarget(SessionAttachmentUploadTarget {
                    extra: Default::default(),
                    session_id: c.session_id.clone(),
                    name: "up.txt".into(),
                    mime_type: None,
                });
                BeginFileUpload { size: 4, target }.into_action()
            },
            [OK, OK, WRITE, OK, WRITE, NO_SESSION, NO_SESSION],
        ),
        row("AppendFileUploadChunk (into memory)", append, [OK, OK, WRITE, WRITE, WRITE, NO_UPLOAD, NO_UPLOAD])
            .staged(false, false)
            .shape(|_, _, answer| same("received", response::<AppendFileUploadChunkResponse>(answer)?.received, 4)),
        row("AppendFileUploadChunk (into a session)", append, [OK, OK, WRITE, OK, WRITE, NO_UPLOAD, NO_UPLOAD])
            .staged(true, false)
            .shape(|_, _, answer| same("received", response::<AppendFileUploadChunkResponse>(answer)?.received, 4)),
        row("CommitFileUpload (into memory)", commit, [OK, OK, WRITE, WRITE, WRITE, NO_UPLOAD, NO_UPLOAD])
            .staged(false, true)
            .shape(|_, _, answer| {
                same(
                    "entry",
                    response::<CommitFileUploadResponse>(answer)?.entry.map(|entry| entry.path),
                    Some("staged/file.bin".into()),
                )
            }),
        row("CommitFileUpload (into a session)", commit, [OK, OK, WRITE, OK, WRITE, NO_UPLOAD, NO_UPLOAD])
            .staged(true, true)
            .shape(|_, _, answer| {
                same(
                    "attachment",
                    response::<CommitFileUploadResponse>(answer)?.attachment.map(|a| a.name),
                    Some("staged.txt".into()),
                )
            }),
        row("AbortFileUpload (into memory)", abort, [OK, OK, WRITE, WRITE, WRITE, NO_UPLOAD, NO_UPLOAD])
            .staged(false, false),
        row("AbortFileUpload (into a session)", abort, [OK, OK, WRITE, OK, WRITE, NO_UPLOAD, NO_UPLOAD])
            .staged(true, false),
        // Account-scoped reads with `agentId`: the owner's providers and the identities the agent is granted.
        row(
            "ListModelProviders (agentId)",
            |c| ListModelProviders { agent_id: Some(c.agent_id.clone()) }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            let got = response::<ListModelProvidersResponse>(answer)?;
            let mut names: Vec<String> = got.providers.into_iter().map(|provider| provider.name).collect();
            names.sort();
            same("providers", names, vec!["chatgpt".to_owned(), "main".to_owned()])
        }),
        row(
            "ListProviderModels (agentId)",
            |c| {
                ListProviderModels {
                    provider: fixture::SUBSCRIPTION_PROVIDER.into(),
                    agent_id: Some(c.agent_id.clone()),
                }
                .into_action()
            },
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|_, _, answer| {
            same("models listed", !response::<ListProviderModelsResponse>(answer)?.models.is_empty(), true)
        }),
        row(
            "ListSigningIdentities (agentId)",
            |c| ListSigningIdentities { agent_id: Some(c.agent_id.clone()) }.into_action(),
            [OK, OK, OK, OK, OK, NO_AGENT, NO_AGENT],
        )
        .shape(|cell, caller, answer| {
            let got = response::<ListSigningIdentitiesResponse>(answer)?;
            let mut names: Vec<String> = got.identities.into_iter().map(|identity| identity.name).collect();
            names.sort();
            let mut expected = vec![cell.granted.clone()];
            if caller == Caller::Owner {
                expected.push(cell.ungranted.clone());
            }
            expected.sort();
            same("identities", names, expected)
        }),
        // Account-scoped writes naming the owner's things: they act on the caller's own account.
        row(
            "SetModelProvider (the owner's provider name)",
            |_| {
                let provider = ModelProviderConfig {
                    extra: Default::default(),
                    auth_mode: None,
                    base_url: None,
                    model_defaults: None,
                    secret_refs: None,
                    type_: "anthropic".into(),
                };
                SetModelProvider { name: "main".into(), provider }.into_action()
            },
            [OK, OK, OK, OK, OK, OK, OK],
        )
        .owner_keeps(OwnerKeeps::MainProvider),
        row(
            "DeleteModelProvider (the owner's provider name)",
            |_| DeleteModelProvider { name: fixture::SUBSCRIPTION_PROVIDER.into() }.into_action(),
            [OK, NO_PROVIDER, NO_PROVIDER, NO_PROVIDER, NO_PROVIDER, NO_PROVIDER, NO_PROVIDER],
        )
        .owner_keeps(OwnerKeeps::SubscriptionProvider),
        // The owner's sign-in in progress: nobody else's to see, finish or cancel.
        row(
            "GetProviderOAuthStatus (the owner's sign-in)",
            |c| GetProviderOAuthStatus { login_id: c.login_id.clone() }.into_action(),
            [OK, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN],
        ),
        row(
            "SubmitProviderOAuthCode (the owner's sign-in, a foreign state)",
            |c| SubmitProviderOAuthCode { login_id: c.login_id.clone(), code: "code#forged".into() }.into_action(),
            [
                Expect::Refused(
                    400,
                    "State mismatch: this redirect belongs to another sign-in; the sign-in failed, start a new one",
                ),
                NO_SIGN_IN,
                NO_SIGN_IN,
                NO_SIGN_IN,
                NO_SIGN_IN,
                NO_SIGN_IN,
                NO_SIGN_IN,
            ],
        ),
        row(
            "CancelProviderOAuth (the owner's sign-in)",
            |c| CancelProviderOAuth { login_id: c.login_id.clone() }.into_action(),
            [OK, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN, NO_SIGN_IN],
        ),
        row("ListMcpServers", |_| ListMcpServers {}.into_action(), [OK, OK, OK, OK, OK, OK, OK]).shape(
            |_, caller, answer| {
                let got = response::<ListMcpServersResponse>(answer)?;
                let names: Vec<String> = got.servers.into_iter().map(|server| server.name).collect();
                let expected = if caller == Caller::Owner { vec![fixture::MCP_SERVER.to_owned()] } else { Vec::new() };
                same("servers", names, expected)
            },
        ),
        row(
            "SetMcpServer (the owner's server name)",
            |c| {
                let config = McpServerConfig::new(format!("{}?set-by-actor", c.download_url));
                SetMcpServer { name: fixture::MCP_SERVER.into(), config }.into_action()
            },
            [OK, OK, OK, OK, OK, OK, OK],
        )
        .owner_keeps(OwnerKeeps::McpServer),
        row(
            "RefreshMcpServer (the owner's server name)",
            |_| RefreshMcpServer { name: fixture::MCP_SERVER.into() }.into_action(),
            [OK, NO_MCP, NO_MCP, NO_MCP, NO_MCP, NO_MCP, NO_MCP],
        ),
        row(
            "DeleteMcpServer (the owner's server name)",
            |_| DeleteMcpServer { name: fixture::MCP_SERVER.into() }.into_action(),
            [OK, NO_MCP, NO_MCP, NO_MCP, NO_MCP, NO_MCP, NO_MCP],
        )
        .owner_keeps(OwnerKeeps::McpServer),
        row(
            "SetSecret (the owner's identity name)",
            |c| {
                SetSecret { name: c.granted.clone(), value: Bytes(b"overwritten".to_vec()), metadata: None }
                    .into_action()
            },
            [OK, OK, OK, OK, OK, OK, OK],
        )
        .owner_keeps(OwnerKeeps::GrantedIdentity),
        row(
            "UpdateSigningIdentity (the owner's identity)",
            |c| UpdateSigningIdentity { name: c.granted.clone(), label: "Renamed".into(), icon: None }.into_action(),
            [OK, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY],
        )
        .owner_keeps(OwnerKeeps::GrantedIdentity),
        row(
            "DeleteSigningIdentity (the owner's identity)",
            |c| DeleteSigningIdentity { name: c.granted.clone() }.into_action(),
            [OK, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY, NO_IDENTITY],
        )
        .owner_keeps(OwnerKeeps::GrantedIdentity),
    ]
}

/// `ListRuns` by the cell's staged run's tree, its session or its agent.
fn list_runs(root: Option<&Cell>, session: Option<&Cell>, agent: Option<&Cell>) -> AgentAction {
    ListRuns {
        root_run_id: root.map(|c| c.run_id.clone()),
        session_id: session.map(|c| c.session_id.clone()),
        agent_id: agent.map(|c| c.agent_id.clone()),
        limit: None,
        status: None,
    }
    .into_action()
}

/// The staged run is listed.
fn listed_run(cell: &Cell, _: Caller, answer: &AgentResponse) -> Result<(), String> {
    let runs = response::<ListRunsResponse>(answer)?.runs;
    same("staged run listed", runs.iter().any(|run| run.id == cell.run_id), true)
}

fn update_agent(cell: &Cell, definition: AgentDefinition) -> AgentAction {
    let definition = AgentDefinition { name: "Renamed".into(), ..definition };
    UpdateAgent { agent_id: cell.agent_id.clone(), definition }.into_action()
}

fn list_sessions(agent_id: Option<seed_agents_protocol::AgentId>) -> AgentAction {
    ListSessions {
        agent_id,
        cursor: None,
        exclude_triggered: None,
        include_children: None,
        limit: None,
        parent_session_id: None,
    }
    .into_action()
}

fn verb(cell: &Cell, verb: InvokeSessionToolVerb, fields: &[(&str, &str)]) -> AgentAction {
    let input = fields.iter().map(|(key, value)| ((*key).to_owned(), Ipld::String((*value).to_owned()))).collect();
    InvokeSessionTool { session_id: cell.session_id.clone(), verb, input: Value(Ipld::Map(input)) }.into_action()
}

fn append(cell: &Cell) -> AgentAction {
    AppendFileUploadChunk { upload_id: cell.upload(), offset: 0, content: Bytes(fixture::UPLOAD_BYTES.to_vec()) }
        .into_action()
}

fn commit(cell: &Cell) -> AgentAction {
    CommitFileUpload { upload_id: cell.upload() }.into_action()
}

fn abort(cell: &Cell) -> AgentAction {
    AbortFileUpload { upload_id: cell.upload() }.into_action()
}

/// An allowed answer as the response type a shape expects.
fn response<R: Response>(answer: &AgentResponse) -> Result<R, String> {
    R::from_response(answer.clone()).ok_or_else(|| format!("answered {}, not {}", answer.name(), R::NAME))
}

pub fn same<T: PartialEq + fmt::Debug>(what: &str, got: T, expected: T) -> Result<(), String> {
    if got == expected { Ok(()) } else { Err(format!("{what}: expected {expected:?}, got {got:?}")) }
}
