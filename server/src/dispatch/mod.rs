//! From a verified action to response bytes: typed decoding, then the feature handler.
//!
//! Each action named in [`dispatch`] decodes into its generated type (400 when its fields do not
//! fit) and runs its handler; the response is encoded as canonical DAG-CBOR with its `_`.
//! Actions of the protocol this build does not implement yet answer 501 and say so; names the
//! protocol does not know answer 400 `Unsupported action: <name>`.

use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::version::AGENTS_PROTOCOL_VERSION;
use seed_agents_protocol::{self as protocol, ActionInfo, AgentResponse, Response, wire};

use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::{agents, collaborators, memory, providers, runs, secrets, sessions, signers};

mod shape;

/// The actions this server routes, each with its handler: the one list [`dispatch`] and
/// [`decode_for_fuzzing`] are both built from. `$then` names a local macro taking
/// `Action => handler,` lines.
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
                    encode(app, caller, $handler(app, caller, action).await?).await
                })*
                other => Err(unrouted(other)),
            }
        };
    }
    routes!(route)
}

/// Everything [`dispatch`] does to an action before its handler runs (the compat upgrade for
/// `protocol`, the shape checks, typed decoding, the answer for an unrouted name), without
/// running it.
///
/// Exists for the fuzzer (`fuzz/fuzz_targets/actions.rs`), which must reach this path without
/// an `App`; not part of the server's API.
#[doc(hidden)]
pub fn decode_for_fuzzing(protocol: u32, name: &str, action: Ipld) -> ApiResult<()> {
    let action = seed_agents_compat::upgrade_action(protocol, name, action)?;
    macro_rules! decode_only {
        ($($action:ident => $handler:path,)*) => {
            match name {
                $(stringify!($action) => decode::<protocol::generated::$action>(name, action).map(drop),)*
                other => Err(unrouted(other)),
            }
        };
    }
    routes!(decode_only)
}

/// What [`dispatch`] does to a few fields before typed decoding, as upstream reads them leniently
/// (`ListRuns.limit`: a fraction is floored, a non-number ignored; see `shape::lenient`).
///
/// Exists for the fuzzer, which compares what the server accepts with what the protocol's
/// `AgentAction` union decodes; not part of the server's API.
#[doc(hidden)]
pub fn lenient_for_fuzzing(name: &str, action: &mut Ipld) {
    if let Ipld::Map(fields) = action {
        shape::lenient(name, fields);
    }
}

/// Decodes a verified action map as `A`, with the shape checks and messages of [`shape`].
pub(crate) fn decode<A: serde::de::DeserializeOwned>(name: &str, mut action: Ipld) -> ApiResult<A> {
    if let Ipld::Map(fields) = &mut action {
        shape::lenient(name, fields);
        shape::check(name, fields)?;
    }
    shape::integers_fit(name, &action)?;
    wire::from_ipld(action).map_err(|error| match error {
        wire::WireError::Decode(reason) | wire::WireError::Encode(reason) => shape::decode_error(name, &reason),
    })
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

fn unrouted(name: &str) -> ApiError {
    match ActionInfo::find(name) {
        Some(_) => ApiError::not_implemented(format!("{name} is not supported by this server yet")),
        None => ApiError::invalid(format!("Unsupported action: {name}")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::error::ErrorKind;

    fn action(name: &str, fields: &[(&str, Ipld)]) -> Ipld {
        let mut map: BTreeMap<String, Ipld> =
            fields.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect();
        map.insert("_".into(), Ipld::String(name.into()));
        map.insert("ts".into(), Ipld::Integer(1));
        Ipld::Map(map)
    }

    #[test]
    fn a_legacy_singular_mentioned_account_is_normalised() {
        use protocol::generated::{AgentTriggerSource, CreateAgentTrigger};
        let text = |value: &str| Ipld::String(value.into());
        let map = |pairs: &[(&str, Ipld)]| Ipld::Map(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect());
        let source = map(&[("type", text("user-mention")), ("mentionedAccount", text("z6MkAlice"))]);
        let trigger = map(&[("name", text("m")), ("prompt", text("p")), ("source", source)]);
        let create = action("CreateAgentTrigger", &[("agentId", text("a")), ("trigger", trigger)]);
        let decoded: CreateAgentTrigger = decode("CreateAgentTrigger", create).unwrap();
        let AgentTriggerSource::UserMentionSource(source) = decoded.trigger.source else { panic!("not a mention") };
        assert_eq!(source.mentioned_accounts, ["z6MkAlice"]);
        assert!(source.extra.is_empty(), "the singular key is gone: {:?}", source.extra);
        // A source with both keeps its list.
        let both = map(&[
            ("type", text("user-mention")),
            ("mentionedAccount", text("z6MkAlice")),
            ("mentionedAccounts", Ipld::List(vec![text("z6MkBob")])),
        ]);
        let trigger = map(&[("name", text("m")), ("source", both)]);
        let create = action("CreateAgentTrigger", &[("agentId", text("a")), ("trigger", trigger)]);
        let decoded: CreateAgentTrigger = decode("CreateAgentTrigger", create).unwrap();
        let AgentTriggerSource::UserMentionSource(source) = decoded.trigger.source else { panic!("not a mention") };
        assert_eq!(source.mentioned_accounts, ["z6MkBob"]);
    }

    #[test]
    fn decoding_without_a_handler_answers_as_dispatch_would() {
        let kind = |protocol, name, value| decode_for_fuzzing(protocol, name, value).unwrap_err().kind();
        assert!(decode_for_fuzzing(3, "ListAgents", action("ListAgents", &[])).is_ok());
        let missing = decode_for_fuzzing(3, "GetAgent", action("GetAgent", &[])).unwrap_err();
        assert_eq!((missing.kind(), missing.message()), (ErrorKind::Invalid, "Agent ID is required"));
        let flag = [("agentId", Ipld::String("a".into())), ("publicRead", Ipld::Integer(1))];
        assert_eq!(kind(3, "SetAgentPublicRead", action("SetAgentPublicRead", &flag)), ErrorKind::Invalid);
        // Known to the protocol but not routed yet: 501, as `dispatch` answers.
        let browser = action("ConnectSessionBrowser", &[]);
        assert_eq!(kind(3, "ConnectSessionBrowser", browser), ErrorKind::NotImplemented);
        assert_eq!(kind(3, "Nope", action("Nope", &[])), ErrorKind::Invalid);
        // An integer no union can read back, deep in an open value.
        let metadata = Ipld::Map(BTreeMap::from([("n".to_owned(), Ipld::Integer(i128::from(i64::MIN) - 1))]));
        let secret = [("name", Ipld::String("k".into())), ("value", Ipld::Bytes(vec![1])), ("metadata", metadata)];
        assert_eq!(kind(3, "SetSecret", action("SetSecret", &secret)), ErrorKind::Invalid);
        // The compat upgrade runs first.
        let combine = action("CombineAgentTriggers", &[]);
        assert_eq!(kind(2, "CombineAgentTriggers", combine), ErrorKind::UpdateRequired);
    }
}
