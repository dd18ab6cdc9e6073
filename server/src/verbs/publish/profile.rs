//! `write hm://<account> {action: "profile.update"}`: a new Profile blob for the signing account
//! (a raw dotted command; docs/hypermedia.md §2.2).
//!
//! Fields, from `options.input` as upstream names and bounds them: `name` (also
//! `options.name`; 256 bytes), `description` (64 KiB) and `icon` or `avatar` (an `ipfs://` URL,
//! 2,048 bytes; publish an image with `write ipfs://` first). A Profile replaces the whole
//! profile, so a field left out keeps the value the signing identity's metadata holds (upstream
//! drops it); at least one must be given. The address must be the signer's own account: upstream
//! ignores it and updates whichever account signs. Once published, the identity's metadata
//! (`label`, `icon`, `description`) follows, as `UpdateSigningIdentity` does.

use seed_agents_protocol::Value;
use serde::Serialize;

use super::{Output, Publish, account_id, plain_address};
use crate::error::{ApiError, ApiResult};
use crate::hm::blob;
use crate::identities::{self, ProfileFields};

/// What `profile.update` published, in its output.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Published {
    name: String,
    account: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
}

/// Publishes the signer's new Profile.
pub(super) async fn update(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let input = publish.raw_input()?;
    let name = publish.name_option("Profile name", 256)?;
    let description = input.text(&["description"], "Profile description", 64 * 1024)?;
    let icon = input.text(&["icon", "avatar"], "Profile icon", 2048)?;
    if let Some(icon) = icon
        && !icon.starts_with("ipfs://")
    {
        return Err(ApiError::invalid(format!(
            "Profile icon must be an ipfs:// URL, not {icon}; publish the image with write ipfs:// \
             (options.fromPath) and use the URL it answers"
        )));
    }
    if name.is_none() && description.is_none() && icon.is_none() {
        return Err(ApiError::invalid(
            "profile.update needs a name (options.name or options.input.name), options.input.description or \
             options.input.icon",
        ));
    }
    let (key_name, key) = publish.signing_identity().await?;
    let account = blob::principal(&key).to_string();
    if address.uid != account || !address.path.is_empty() {
        drop(key);
        return Err(ApiError::forbidden(format!(
            "profile.update changes the profile of the account this agent signs as; write it to hm://{account}, \
             not {raw}"
        )));
    }
    let owner = publish.context.owner_id.clone();
    let lookup = key_name.clone();
    let current = publish
        .context
        .app
        .db
        .read(move |conn| identities::profile_fields(conn, &owner, &lookup))
        .await?
        .unwrap_or_default();
    let profile = ProfileFields {
        name: name.map(str::to_owned).or(current.name),
        icon: icon.map(str::to_owned).or(current.icon),
        description: description.map(str::to_owned).or(current.description),
    };
    let Some(profile_name) = profile.name.clone() else {
        drop(key);
        return Err(ApiError::invalid("Profile name is required: this signing key has no label to keep"));
    };
    let blob = blob::profile(&key, publish.now, &profile_name, profile.icon.as_deref(), profile.description.as_deref())
        .map_err(ApiError::internal)?;
    drop(key);
    let id = format!("hm://{account}");
    let output = Output {
        action: "profile.update",
        id: Some(id.clone()),
        profile: Some(Published {
            name: profile_name.clone(),
            account: account.clone(),
            icon: profile.icon.clone(),
            description: profile.description.clone(),
        }),
        ..Output::default()
    };
    let summary = format!("Updated the profile of {id} ({profile_name}).");
    let answer = publish.finish(&format!("the profile of {id}"), vec![blob], output, summary).await?;
    if !publish.dry_run {
        let (owner, now) = (publish.context.owner_id.clone(), publish.context.app.clock.now_ms());
        publish
            .context
            .app
            .db
            .write(move |conn| identities::record_profile(conn, &owner, &key_name, &profile, now))
            .await?;
    }
    Ok(answer)
}

/// `profile.alias`: an alias Profile saying the signing account's identity is
/// `options.input.alias`'s (an account id, `z…` or `hm://z…`), at the signer's own address. The
/// latest Profile stands: a later `profile.update` or `UpdateSigningIdentity` replaces it.
pub(super) async fn alias(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let given = publish
        .raw_input()?
        .text(&["alias"], "Profile alias", crate::validate::MAX_NAME_BYTES)?
        .ok_or_else(|| ApiError::invalid("Profile alias is required (options.input.alias, an account id)"))?;
    let alias = account_id(given, "Profile alias")?;
    let key = publish.signing_key().await?;
    let account = blob::principal(&key);
    if address.uid != account.to_string() || !address.path.is_empty() {
        drop(key);
        return Err(ApiError::forbidden(format!(
            "profile.alias changes the profile of the account this agent signs as; write it to hm://{account}, \
             not {raw}"
        )));
    }
    if alias == account {
        return Err(ApiError::invalid("An alias names another account, not the signer"));
    }
    let blob = blob::profile_alias(&key, publish.now, &alias).map_err(ApiError::internal)?;
    drop(key);
    let id = format!("hm://{account}");
    let output =
        Output { action: "profile.alias", id: Some(id.clone()), alias: Some(alias.to_string()), ..Output::default() };
    let summary = format!("{id} is now an alias of hm://{alias}.");
    publish.finish(&format!("the profile of {id}"), vec![blob], output, summary).await
}
