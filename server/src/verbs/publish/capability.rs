//! `write hm://<account>[/<path>] {action: "capability.create"}` (alias `capability.grant`): a
//! Capability blob by which the signer lets another account write its documents
//! (docs/hypermedia.md §2.6).
//!
//! The fields come from `options.input`, as upstream's raw commands take them: `delegate` (or
//! `delegateUid`; an account id, `z…` or `hm://z…`), `role` (`WRITER` or `AGENT`, any case) and an optional
//! `label`. The address names the signer's own account and, with a path, limits the capability
//! to the documents under it.

use seed_agents_protocol::Value;

use super::{Output, Publish, account_id, api_path, plain_address};
use crate::error::{ApiError, ApiResult};
use crate::hm::blob;
use crate::hm::capability::{self, NewCapability, Role};

/// The longest field, in bytes (upstream's bound on ids and labels).
const MAX_FIELD: usize = 2048;

/// Grants `options.input.delegate` the capability.
pub(super) async fn grant(publish: &Publish<'_, '_>, raw: &str, action: &'static str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let input = publish.raw_input()?;
    let text = |keys: &[&str], label: &str| input.text(keys, label, MAX_FIELD);
    let delegate = text(&["delegate", "delegateUid"], "Capability delegate")?
        .ok_or_else(|| ApiError::invalid("Capability delegate is required (options.input.delegate, an account id)"))?;
    let delegate = account_id(delegate, "Capability delegate")?;
    let role = match text(&["role"], "Capability role")?.map(str::to_ascii_uppercase).as_deref() {
        Some("WRITER") => Role::Writer,
        Some("AGENT") => Role::Agent,
        Some(_) => return Err(ApiError::invalid("Capability role must be WRITER or AGENT")),
        None => return Err(ApiError::invalid("Capability role is required (options.input.role: WRITER or AGENT)")),
    };
    let label = text(&["label"], "Capability label")?;
    let key = publish.signing_key().await?;
    let issuer = blob::principal(&key);
    if issuer.to_string() != address.uid {
        return Err(ApiError::forbidden(format!(
            "This agent signs as {issuer}, so it can only grant capabilities on hm://{issuer}, not on {raw}"
        )));
    }
    if delegate == issuer {
        return Err(ApiError::invalid("A capability is granted to another account, not to the signer"));
    }
    let path = api_path(&address);
    let input = NewCapability {
        ts_ms: publish.now,
        delegate,
        role,
        path: Some(path.as_str()).filter(|path| !path.is_empty()),
        label,
    };
    let blob = capability::capability(&key, &input).map_err(ApiError::internal)?;
    drop(key);
    let id = address.canonical();
    let output = Output {
        action,
        id: Some(id.clone()),
        delegate: Some(delegate.to_string()),
        role: Some(role.as_str()),
        ..Output::default()
    };
    let summary = format!("Granted {delegate} {} on {id}.", role.as_str());
    publish.finish(&id, vec![blob], output, summary).await
}
