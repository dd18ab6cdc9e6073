//! Signing identities: Seed (Hypermedia) account keys the server holds for an account, with
//! their SQL. Each is a secret named `hm-account-<first 16 chars of the account id>` whose value
//! is the raw 32-byte Ed25519 seed (sealed like every secret) and whose metadata says
//! `{kind: 'hm-account-key', accountId, label?, icon?, serverUrl, …}`.
//!
//! Create publishes, in one `PublishBlobs` call to the configured Hypermedia server
//! ([`crate::hm`]), the new account's signed `Profile` and its home document (genesis Change,
//! content Change, version Ref); Update republishes the Profile; Import publishes nothing (the
//! account usually exists already). Responses carry [`SigningIdentity`], built from metadata
//! only: the seed never leaves (ARCHITECTURE.md rule 8).

use std::collections::BTreeMap;

use crate::db::Connection;
use ed25519_dalek::SigningKey;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CreateSigningIdentity, CreateSigningIdentityResponse, DeleteSigningIdentity, DeleteSigningIdentityResponse,
    ImportSigningIdentity, ImportSigningIdentityResponse, ListSigningIdentities, ListSigningIdentitiesResponse,
    SigningIdentity, UpdateSigningIdentity, UpdateSigningIdentityResponse,
};
use seed_agents_protocol::wire;
use serde::Serialize;
use zeroize::Zeroizing;

use crate::access::{self, Need, Role};
use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::hm::blob::BlobError;
use crate::hm::document::TextBlock;
use crate::hm::{self, Blob, HmClient};
use crate::idempotency::{self, Key};
use crate::secrets::{self, SIGNING_KEY_KIND};
use crate::validate::{MAX_NAME_BYTES, bounded_string};

pub(crate) mod store;

use store::{identity_metadata, store_metadata, stored_metadata};

/// The length of an Ed25519 seed.
pub(crate) const SEED_LEN: usize = 32;

/// The one paragraph of a created identity's home document.
pub(crate) const HOME_TEXT: &str = "This is an agentic account.";

/// The idempotency request of Create and Import: only the label (the seed is never stored).
#[derive(Serialize)]
struct LabelRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'a str>,
}

/// The secret name of the identity whose account id is `account_id`.
pub(crate) fn secret_name(account_id: &str) -> String {
    format!("hm-account-{}", account_id.chars().take(16).collect::<String>())
}

fn label_of(raw: Option<&str>) -> ApiResult<Option<String>> {
    raw.map(|label| bounded_string(label, "Signing identity label", MAX_NAME_BYTES)).transpose()
}

fn text(value: &str) -> Ipld {
    Ipld::String(value.to_owned())
}

fn publish_error(app: &App, what: &str, error: impl std::fmt::Display) -> ApiError {
    ApiError::upstream(format!("Failed to publish {what} to {}: {error}", app.config.hm_server_url))
}

/// `CreateSigningIdentity {label?, clientRequestId?}`: a new key, its Profile and home document
/// published with the label as name (502 when the Hypermedia server fails), then its seed stored.
pub(crate) async fn create_signing_identity(
    app: &App,
    caller: &Caller,
    action: CreateSigningIdentity,
) -> ApiResult<CreateSigningIdentityResponse> {
    let key = Key::request(
        &caller.account_id,
        "CreateSigningIdentity",
        action.client_request_id.as_deref(),
        &LabelRequest { label: action.label.as_deref() },
    )?;
    if let Some(key) = key.clone() {
        let replayed = app.db.read(move |conn| key.replay::<CreateSigningIdentityResponse>(conn)).await?;
        if let Some(response) = replayed {
            return Ok(response);
        }
    }
    let label = label_of(action.label.as_deref())?;
    let mut seed = Zeroizing::new([0u8; SEED_LEN]);
    getrandom::fill(seed.as_mut()).map_err(ApiError::internal)?;
    let signing_key = SigningKey::from_bytes(&seed);
    let identity_account = hm::blob::principal(&signing_key).to_string();
    let name = secret_name(&identity_account);
    let display_name =
        label.unwrap_or_else(|| format!("Agent account {}", identity_account.chars().take(10).collect::<String>()));
    let mut random_id = [0u8; 8];
    getrandom::fill(&mut random_id).map_err(ApiError::internal)?;
    let blobs = account_blobs(&signing_key, app.clock.now_ms(), &display_name, hm::document::block_id(random_id))
        .map_err(ApiError::internal)?;
    HmClient::new(&app.http, &app.config.hm_server_url)
        .publish_blobs(&blobs)
        .await
        .map_err(|error| publish_error(app, "agent account", error))?;
    drop(signing_key);
    let server_url = app.config.hm_server_url.clone();
    let metadata = BTreeMap::from([
        ("kind".to_owned(), text(SIGNING_KEY_KIND)),
        ("accountId".to_owned(), text(&identity_account)),
        ("label".to_owned(), text(&display_name)),
        ("serverUrl".to_owned(), text(&server_url)),
        ("generatedBy".to_owned(), text("seed-agents-server")),
    ]);
    let ciphertext = app.secrets.seal(&caller.account_id, &name, seed.as_ref()).map_err(ApiError::internal)?;
    drop(seed);
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (response, _) = app
        .db
        .write(move |conn| {
            idempotency::once(conn, key.as_ref(), now, || {
                let metadata_cbor = wire::ipld_to_vec(&Ipld::Map(metadata.clone())).map_err(ApiError::internal)?;
                let id = secrets::store::insert(conn, &account, &name, &ciphertext, &metadata_cbor, now)?;
                Ok(CreateSigningIdentityResponse {
                    extra: Default::default(),
                    identity: identity(id, name, &metadata, now, now),
                })
            })
        })
        .await?;
    Ok(response)
}

/// What creating an account publishes, in order: its `Profile {name}`, then its home document
/// (genesis, a content Change that sets `name` and writes [`HOME_TEXT`] in block `block_id`, and
/// the version Ref), all signed by `key` at `now_ms`.
fn account_blobs(key: &SigningKey, now_ms: i64, name: &str, block_id: String) -> Result<Vec<Blob>, BlobError> {
    let profile = hm::blob::profile(key, now_ms, name, None, None)?;
    let paragraph = TextBlock { kind: "Paragraph".to_owned(), id: block_id, text: HOME_TEXT.to_owned(), link: None };
    let ops = hm::document::new_document_ops(name, vec![paragraph]);
    let home = hm::document::new_document(key, now_ms, hm::blob::principal(key), "", &ops)?;
    let mut blobs = vec![profile];
    blobs.extend(home.into_blobs());
    Ok(blobs)
}

/// `ImportSigningIdentity {seed, label?, clientRequestId?}`: stores an existing key (exactly 32
/// bytes); 409 when the same account is already here. Publishes nothing.
pub(crate) async fn import_signing_identity(
    app: &App,
    caller: &Caller,
    action: ImportSigningIdentity,
) -> ApiResult<ImportSigningIdentityResponse> {
    let key = Key::request(
        &caller.account_id,
        "ImportSigningIdentity",
        action.client_request_id.as_deref(),
        &LabelRequest { label: action.label.as_deref() },
    )?;
    let seed = Zeroizing::new(action.seed.into_vec());
    // Everything that needs the seed happens here; the write only sees ciphertext.
    let prepared = (|| -> ApiResult<_> {
        let seed: &[u8; SEED_LEN] =
            seed.as_slice().try_into().map_err(|_| ApiError::invalid("Key seed must be exactly 32 bytes"))?;
        let label = label_of(action.label.as_deref())?;
        let identity_account = hm::blob::principal(&SigningKey::from_bytes(seed)).to_string();
        let name = secret_name(&identity_account);
        let ciphertext = app.secrets.seal(&caller.account_id, &name, seed).map_err(ApiError::internal)?;
        let mut metadata = BTreeMap::from([
            ("kind".to_owned(), text(SIGNING_KEY_KIND)),
            ("accountId".to_owned(), text(&identity_account)),
            ("serverUrl".to_owned(), text(&app.config.hm_server_url)),
            ("importedBy".to_owned(), text("user")),
        ]);
        if let Some(label) = label {
            metadata.insert("label".to_owned(), Ipld::String(label));
        }
        Ok((identity_account, name, ciphertext, metadata))
    })();
    drop(seed);
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (response, _) = app
        .db
        .write(move |conn| {
            idempotency::once(conn, key.as_ref(), now, || {
                let (identity_account, name, ciphertext, metadata) = prepared?;
                if secrets::store::load_metadata(conn, &account, &name)?.is_some() {
                    return Err(ApiError::conflict(format!(
                        "This account key is already on the server ({identity_account})"
                    )));
                }
                let metadata_cbor = wire::ipld_to_vec(&Ipld::Map(metadata.clone())).map_err(ApiError::internal)?;
                let id = secrets::store::insert(conn, &account, &name, &ciphertext, &metadata_cbor, now)?;
                Ok(ImportSigningIdentityResponse {
                    extra: Default::default(),
                    identity: identity(id, name, &metadata, now, now),
                })
            })
        })
        .await?;
    Ok(response)
}

/// `UpdateSigningIdentity {name, label, icon?}`: publishes the icon (UnixFS blocks) when
/// given, republishes the Profile `{name: label, avatar?, description?}` (the description a
/// `profile.update` stored), then updates the metadata.
pub(crate) async fn update_signing_identity(
    app: &App,
    caller: &Caller,
    action: UpdateSigningIdentity,
) -> ApiResult<UpdateSigningIdentityResponse> {
    let name = bounded_string(&action.name, "Signing key", MAX_NAME_BYTES)?;
    let label = bounded_string(&action.label, "Signing identity label", MAX_NAME_BYTES)?;
    let icon = action.icon;
    let account = caller.account_id.clone();
    let lookup = name.clone();
    let (id, sealed, mut metadata, created_at) = app
        .db
        .read(move |conn| {
            let key = store::identity_key(conn, &account, &lookup)?.ok_or_else(not_found)?;
            Ok((key.id, key.sealed, key.metadata, key.created_at))
        })
        .await?;
    let seed = Zeroizing::new(app.secrets.open(&caller.account_id, &name, &sealed).map_err(ApiError::internal)?);
    let seed: &[u8; SEED_LEN] =
        seed.as_slice().try_into().map_err(|_| ApiError::internal("a stored account key is not 32 bytes"))?;
    let signing_key = SigningKey::from_bytes(seed);
    let client = HmClient::new(&app.http, &app.config.hm_server_url);
    let mut icon_url = string_field(&metadata, "icon").map(str::to_owned);
    if let Some(icon) = icon {
        let file = hm::unixfs::file(&icon.data.into_vec());
        client.publish_blobs(&file.blocks).await.map_err(|error| publish_error(app, "agent account icon", error))?;
        icon_url = Some(format!("ipfs://{}", file.root));
    }
    // A description set with the write tool's profile.update stays.
    let description = string_field(&metadata, "description");
    let profile: Blob = hm::blob::profile(&signing_key, app.clock.now_ms(), &label, icon_url.as_deref(), description)
        .map_err(ApiError::internal)?;
    client.publish_blobs(&[profile]).await.map_err(|error| publish_error(app, "agent account profile", error))?;
    let identity_account = hm::blob::principal(&signing_key).to_string();
    drop(signing_key);
    metadata.insert("accountId".to_owned(), text(&identity_account));
    metadata.insert("label".to_owned(), text(&label));
    metadata.insert("serverUrl".to_owned(), text(&app.config.hm_server_url));
    if let Some(icon_url) = &icon_url {
        metadata.insert("icon".to_owned(), text(icon_url));
    }
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let (stored_name, stored) = (name.clone(), metadata.clone());
    app.db
        .write(move |conn| {
            if !store_metadata(conn, &account, &stored_name, stored, now)? {
                return Err(not_found());
            }
            Ok(())
        })
        .await?;
    Ok(UpdateSigningIdentityResponse {
        extra: Default::default(),
        identity: identity(id, name, &metadata, created_at, now),
    })
}

/// `DeleteSigningIdentity {name}`: deletes the key secret (published blobs stay on the network).
pub(crate) async fn delete_signing_identity(
    app: &App,
    caller: &Caller,
    action: DeleteSigningIdentity,
) -> ApiResult<DeleteSigningIdentityResponse> {
    let name = bounded_string(&action.name, "Signing key", MAX_NAME_BYTES)?;
    let account = caller.account_id.clone();
    app.db
        .write(move |conn| {
            let metadata = secrets::store::load_metadata(conn, &account, &name)?.flatten();
            if identity_metadata(metadata.as_deref()).is_none() {
                return Err(not_found());
            }
            secrets::store::delete_secret(conn, &account, &name)?;
            Ok(DeleteSigningIdentityResponse { extra: Default::default(), name })
        })
        .await
}

/// `ListSigningIdentities {agentId?}`: the caller's identities, newest first. With `agentId`,
/// those of the agent's owner: all of them for the owner, only the keys the agent's definition
/// grants (`signingKey`, `signingKeys`) for anyone else with access.
pub(crate) async fn list_signing_identities(
    app: &App,
    caller: &Caller,
    action: ListSigningIdentities,
) -> ApiResult<ListSigningIdentitiesResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            let (owner, granted) = match &action.agent_id {
                None => (account, None),
                Some(agent_id) => {
                    let access = access::require(conn, agent_id, &account, Need::Read)?;
                    let granted = match access.role {
                        Role::Owner => None,
                        role => {
                            let definition = crate::agents::store::load_info(conn, &access.agent_id, role)?.definition;
                            Some(crate::agents::definition::signing_key_set(&definition))
                        }
                    };
                    (access.owner_id, granted)
                }
            };
            let identities = list(conn, &owner)?
                .into_iter()
                .filter(|identity| granted.as_ref().is_none_or(|granted| granted.contains(&identity.name)))
                .collect();
            Ok(ListSigningIdentitiesResponse { extra: Default::default(), identities })
        })
        .await
}

/// Every signing identity of `account_id`, newest first.
pub(crate) fn list(conn: &Connection, account_id: &str) -> ApiResult<Vec<SigningIdentity>> {
    Ok(store::identities(conn, account_id)?
        .into_iter()
        .map(|listed| identity(listed.id, listed.name, &listed.metadata, listed.created_at, listed.updated_at))
        .collect())
}

fn not_found() -> ApiError {
    ApiError::not_found("Signing identity not found")
}

/// What an identity's Profile says, as its metadata keeps it (`label`, `icon`, `description`):
/// every Profile the server publishes starts from these, so a field left out keeps its value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProfileFields {
    /// The profile's name (the identity's label).
    pub name: Option<String>,
    /// Its `ipfs://` avatar.
    pub icon: Option<String>,
    /// Its description.
    pub description: Option<String>,
}

/// The profile fields of `account_id`'s identity stored as key secret `name`; `None` when that
/// secret is not a signing identity.
pub(crate) fn profile_fields(conn: &Connection, account_id: &str, name: &str) -> ApiResult<Option<ProfileFields>> {
    let Some(metadata) = stored_metadata(conn, account_id, name)? else { return Ok(None) };
    let string = |key: &str| string_field(&metadata, key).map(str::to_owned);
    Ok(Some(ProfileFields { name: string("label"), icon: string("icon"), description: string("description") }))
}

/// Records a published Profile in the metadata of `account_id`'s identity `name` (a signing
/// identity: anything else is left alone).
pub(crate) fn record_profile(
    conn: &Connection,
    account_id: &str,
    name: &str,
    profile: &ProfileFields,
    now_ms: i64,
) -> ApiResult<()> {
    let Some(mut metadata) = stored_metadata(conn, account_id, name)? else { return Ok(()) };
    for (key, value) in [("label", &profile.name), ("icon", &profile.icon), ("description", &profile.description)] {
        match value {
            Some(value) => metadata.insert(key.to_owned(), text(value)),
            None => metadata.remove(key),
        };
    }
    store_metadata(conn, account_id, name, metadata, now_ms)?;
    Ok(())
}

/// A string field of identity metadata.
fn string_field<'m>(metadata: &'m BTreeMap<String, Ipld>, key: &str) -> Option<&'m str> {
    match metadata.get(key) {
        Some(Ipld::String(value)) => Some(value),
        _ => None,
    }
}

/// The redacted view of an identity: metadata fields of the right type, never the value.
fn identity(
    id: String,
    name: String,
    metadata: &BTreeMap<String, Ipld>,
    created_at: i64,
    updated_at: i64,
) -> SigningIdentity {
    let string = |key: &str| string_field(metadata, key).map(str::to_owned);
    SigningIdentity {
        extra: Default::default(),
        account_id: string("accountId").map(Into::into),
        created_at,
        dev: match metadata.get("dev") {
            Some(Ipld::Bool(dev)) => Some(*dev),
            _ => None,
        },
        icon: string("icon"),
        id,
        label: string("label"),
        name,
        server_url: string("serverUrl"),
        updated_at,
    }
}
