//! From a verified action to response bytes: typed decoding, then the feature handler.
//!
//! Each action named in [`dispatch`] decodes into its generated type (400 when its fields do not
//! fit; the rules are `seed_agents_server_core::action`'s) and runs its handler; the response is
//! encoded as canonical DAG-CBOR with its `_`.
//! Actions of the protocol this build does not implement yet answer 501 and say so; names the
//! protocol does not know answer 400 `Unsupported action: <name>`.

use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use seed_agents_protocol::{self as protocol, AgentResponse, Response, wire};
use seed_agents_server_core::action::{decode, unrouted};

use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::{agents, collaborators, memory, providers, runs, secrets, sessions, signers};

/// The actions this server routes, each with its handler: the one list. `$then` names a local
/// macro taking `Action => handler,` lines.
macro_rules! routes {
    ($then:ident) => {
        $then! {
            RegisterSigner => signers::register_signer,
            SetSecret => secrets::set_secret,
            SetModelProvider => providers::set_model_provider,
            ListModelProviders => providers::list_model_providers,
            DeleteModelProvider => providers::delete_model_provider,
            ListProviderModels => providers::models::list_provider_models,
            StartProviderOAuth => providers::oauth::start_provider_oauth,
            SubmitProviderOAuthCode => providers::oauth::submit_provider_oauth_code,
            GetProviderOAuthStatus => providers::oauth::get_provider_oauth_status,
            CancelProviderOAuth => providers::oauth::cancel_provider_oauth,
            ListMcpServers => crate::mcp::list_mcp_servers,
            SetMcpServer => crate::mcp::set_mcp_server,
            RefreshMcpServer => crate::mcp::refresh_mcp_server,
            DeleteMcpServer => crate::mcp::delete_mcp_server,
            ListSigningIdentities => crate::identities::list_signing_identities,
            CreateSigningIdentity => crate::identities::create_signing_identity,
            ImportSigningIdentity => crate::identities::import_signing_identity,
            UpdateSigningIdentity => crate::identities::update_signing_identity,
            DeleteSigningIdentity => crate::identities::delete_signing_identity,
            ListAgents => agents::list_agents,
            GetAgent => agents::get_agent,
            CreateAgent => agents::create_agent,
            UpdateAgent => agents::update_agent,
            DeleteAgent => agents::delete_agent,
            ListAgentInvites => collaborators::list_agent_invites,
            ListAgentCollaborators => collaborators::list_agent_collaborators,
            InviteAgentCollaborator => collaborators::invite_agent_collaborator,
            RemoveAgentCollaborator => collaborators::remove_agent_collaborator,
            AcceptAgentInvite => collaborators::accept_agent_invite,
            DeclineAgentInvite => collaborators::decline_agent_invite,
            SetAgentPublicRead => collaborators::set_agent_public_read,
            SetAgentPublicChat => collaborators::set_agent_public_chat,
            CreateSession => sessions::create_session,
            ListSessions => sessions::list_sessions,
            GetSession => sessions::get_session,
            UpdateSession => sessions::update_session,
            DeleteSession => sessions::delete_session,
            InvokeSessionTool => crate::verbs::invoke_session_tool,
            MessageSession => crate::runtime::message::message_session,
            ListAgentMemory => memory::list_agent_memory,
            ListAgentMemoryDir => memory::list_agent_memory_dir,
            ReadAgentMemoryFile => memory::read_agent_memory_file,
            WriteAgentMemoryFile => memory::write_agent_memory_file,
            DeleteAgentMemoryFile => memory::delete_agent_memory_file,
            DownloadAgentMemoryFile => memory::download_agent_memory_file,
            UploadAgentMemoryFileToIpfs => memory::upload_agent_memory_file_to_ipfs,
            ListAgentTools => crate::tools::list_agent_tools,
            SaveAgentTool => crate::tools::save_agent_tool,
            DeleteAgentTool => crate::tools::delete_agent_tool,
            UploadSessionAttachment => crate::attachments::upload_session_attachment,
            ReadSessionAttachment => crate::attachments::read_session_attachment,
            BeginFileUpload => crate::uploads::begin_file_upload,
            AppendFileUploadChunk => crate::uploads::append_file_upload_chunk,
            CommitFileUpload => crate::uploads::commit_file_upload,
            AbortFileUpload => crate::uploads::abort_file_upload,
            GetSessionEvent => sessions::get_session_event,
            StopSession => sessions::control::stop_session,
            RetrySession => sessions::control::retry_session,
            GetRun => runs::actions::get_run,
            ListRuns => runs::actions::list_runs,
            CancelRun => runs::actions::cancel_run,
            SignalRun => runs::actions::signal_run,
            GetRunJournal => runs::actions::get_run_journal,
            ListAgentTriggers => crate::triggers::list_agent_triggers,
            GetAgentTrigger => crate::triggers::get_agent_trigger,
            CreateAgentTrigger => crate::triggers::create_agent_trigger,
            UpdateAgentTrigger => crate::triggers::update_agent_trigger,
            DeleteAgentTrigger => crate::triggers::delete_agent_trigger,
            CombineAgentTriggers => crate::triggers::combine_agent_triggers,
        }
    };
}

/// Decodes `action` as the action named `name` and runs its handler. (Handlers take `&App`; the
/// few that start tasks outliving the request, such as an inline run, take `&Arc<App>`.)
pub(crate) async fn dispatch(app: &Arc<App>, caller: &Caller, name: &str, action: Ipld) -> ApiResult<Vec<u8>> {
    let action = seed_agents_compat::upgrade_action(caller.protocol, name, action)?;
    macro_rules! route {
        ($($action:ident => $handler:path,)*) => {
            match name {
                $(stringify!($action) => {
                    let action: protocol::generated::$action = decode(name, action)?;
                    // Boxed, so this future is small: unboxed it would hold the largest
                    // handler's state, and be copied whole into each future wrapping it (the
                    // request's timeout and span, axum's handler future) on every request.
                    let response = Box::pin($handler(app, caller, action)).await?;
                    encode(app, caller, response).await
                })*
                other => Err(unrouted(other)),
            }
        };
    }
    routes!(route)
}

/// Encodes a response in the shape the caller's protocol reads.
async fn encode<R: Response>(app: &App, caller: &Caller, response: R) -> ApiResult<Vec<u8>> {
    let response = response.into_response();
    if caller.protocol >= AGENTS_PROTOCOL_VERSION {
        return wire::to_vec(&response).map_err(ApiError::internal);
    }
    let needs = seed_agents_compat::needs(caller.protocol, response.name());
    let mut legacy = seed_agents_compat::Legacy::default();
    if needs.agent_sessions
        && let AgentResponse::GetAgentResponse(get) = &response
    {
        let sessions = match get.session_count {
            0 => Vec::new(),
            _ => sessions::newest_top_level(app, &get.agent.id, seed_agents_compat::LEGACY_AGENT_SESSIONS).await?,
        };
        legacy.agent_sessions = Some(sessions);
    }
    let value = wire::to_ipld(&response).map_err(ApiError::internal)?;
    let value = seed_agents_compat::downgrade_response(caller.protocol, value, &legacy)?;
    wire::ipld_to_vec(&value).map_err(ApiError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// The browser actions are in the protocol but not routed: `dispatch` answers 501 for them
    /// after the compat upgrade, and 400 for a name the protocol does not know.
    #[test]
    fn only_the_protocol_s_unrouted_actions_are_not_implemented() {
        macro_rules! names {
            ($($action:ident => $handler:path,)*) => {
                [$(stringify!($action)),*]
            };
        }
        let routed = routes!(names);
        let unrouted_names: Vec<&str> =
            protocol::generated::ACTIONS.iter().map(|info| info.name).filter(|name| !routed.contains(name)).collect();
        assert_eq!(
            unrouted_names,
            [
                "ConnectSessionBrowser",
                "DisconnectSessionBrowser",
                "PollSessionBrowser",
                "ResolveSessionBrowser",
                "Subscribe"
            ]
        );
        for name in unrouted_names {
            assert_eq!(unrouted(name).kind(), ErrorKind::NotImplemented, "{name}");
        }
        assert_eq!(unrouted("Nope").kind(), ErrorKind::Invalid);
    }
}
