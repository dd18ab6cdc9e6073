//! From a verified action to response bytes: typed decoding, then the feature handler.
//!
//! Each action named in [`dispatch`] decodes into its generated type (400 when its fields do not
//! fit) and runs its handler; the response is encoded as canonical DAG-CBOR with its `_`.
//! Actions of the protocol this build does not implement yet answer 501 and say so; names the
//! protocol does not know answer 400 `Unsupported action: <name>`.

use axum::http::StatusCode;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::{self as protocol, ActionInfo, Response, wire};

use crate::app::App;
use crate::auth::Caller;
use crate::http::error::{ApiError, ApiResult};
use crate::{agents, auth, collaborators, providers, secrets, sessions};

mod shape;

/// Decodes `action` as the action named `name` and runs its handler.
pub async fn dispatch(app: &App, caller: &Caller, name: &str, action: Ipld) -> ApiResult<Vec<u8>> {
    macro_rules! route {
        ($($action:ident => $handler:path,)*) => {
            match name {
                $(stringify!($action) => {
                    let action: protocol::generated::$action = decode(name, action)?;
                    encode($handler(app, caller, action).await?)
                })*
                other => Err(unrouted(other)),
            }
        };
    }
    route! {
        RegisterSigner => auth::signers::register_signer,
        SetSecret => secrets::set_secret,
        SetModelProvider => providers::set_model_provider,
        ListModelProviders => providers::list_model_providers,
        DeleteModelProvider => providers::delete_model_provider,
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
    }
}

fn decode<A: protocol::Action>(name: &str, action: Ipld) -> ApiResult<A> {
    if let Ipld::Map(fields) = &action {
        shape::check(name, fields)?;
    }
    wire::from_ipld(action).map_err(|error| match error {
        wire::WireError::Decode(reason) | wire::WireError::Encode(reason) => shape::decode_error(name, &reason),
    })
}

fn encode<R: Response>(response: R) -> ApiResult<Vec<u8>> {
    wire::to_vec(&response.into_response()).map_err(ApiError::internal)
}

fn unrouted(name: &str) -> ApiError {
    match ActionInfo::find(name) {
        Some(_) => ApiError::new(StatusCode::NOT_IMPLEMENTED, format!("{name} is not supported by this server yet")),
        None => ApiError::bad_request(format!("Unsupported action: {name}")),
    }
}
