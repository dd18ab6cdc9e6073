//! `write hm://<account>/<path>`: publishing to the Hypermedia network with the agent's signing
//! identity, behind the publish grant (docs/runtime.md §4.3, docs/hypermedia.md §2.3–§2.7).
//!
//! The key is `options.signer` (a signing key the definition grants) or the definition's primary
//! key. `options.action` picks what is published, one `PublishBlobs` call each:
//!
//! - `document` (the default): a new document (genesis, content Change, version Ref), named by
//!   `options.name`/`options.metadata`, under an existing parent ([`document`]);
//! - `update`: new content and/or metadata on an existing document ([`document`]);
//! - `comment`: a Comment on the address (or `options.target`), a reply when `options.replyTo`
//!   names a comment ([`comment`]);
//! - `delete` (a tombstone Ref), `redirect` to `options.toUrl` (a redirect Ref), `move` to
//!   `options.toPath` (a version Ref at the new path and a redirect Ref at the old one), `fork`
//!   of `options.fromUrl` to the address (a version Ref of the source's version) ([`refs`]);
//! - raw dotted commands, their fields in `options.input` (upstream's names and messages):
//!   `capability.create` (alias `capability.grant`), a Capability letting
//!   `options.input.delegate` write the signer's documents under the address ([`capability`]);
//!   `profile.update` and `profile.alias`, the signing account's Profile ([`profile`]);
//!   `comment.update` and `comment.delete`, a new version or a tombstone of one of the signer's
//!   comments ([`comment_edit`]); `contact.create` and `contact.delete` ([`contact`]);
//!   `draft.create`, `draft.update`, `draft.get`, `draft.list`, `draft.delete` and
//!   `draft.publish`, drafts the agent keeps here ([`store`]) until it publishes one ([`draft`]).
//!
//! Comments may go on any account's documents. Document writes to another account's paths need
//! a WRITER or AGENT capability that account gave the signer (found with `ListCapabilities`,
//! linked from the Ref); without one the write is refused. Markdown `content` becomes blocks with
//! [`markdown`]; `hm://` links in it must be well formed and, unless `options.skipLinkCheck`,
//! exist on the server ([`links`]). Each action accepts its own options and refuses the others
//! (`Input::known_options`). `dryRun: true` builds and signs the blobs and reports them without
//! publishing. `options.fromPath` (with `signer` only) publishes a markdown file of the agent's
//! memory as the document, creating or updating it ([`from_path`]). `options.input` is read by
//! the raw commands and for `republish` (redirect) only.

mod capability;
mod comment;
mod comment_edit;
mod contact;
mod document;
mod draft;
mod from_path;
mod links;
mod markdown;
mod profile;
mod refs;
mod store;

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Principal, Value};
use serde::Serialize;
use serde_json::Value as Json;
use zeroize::Zeroizing;

use super::hypermedia::{HmAddress, hm_error};
use super::{Context, Input, record};
use crate::agents::definition;
use crate::error::{ApiError, ApiResult};
use crate::hm::{Blob, HmClient, HmError};

/// The options every action understands.
const BASE_OPTIONS: &[&str] = &["action", "signer", "input", "skipLinkCheck"];
/// The options of the `fromPath` form.
const FROM_PATH_OPTIONS: &[&str] = &["fromPath", "signer"];
/// Largest `content`, in bytes.
const MAX_CONTENT: usize = 256 * 1024;
/// The tool names that grant publishing (besides an undefined tool list).
const PUBLISH_GRANTS: &[&str] = &["publish", "write", "memory_publish_document", "ipfs_write", "attachment_to_ipfs"];

/// Whether the definition grants publishing: no tool list, or one naming `publish` or a legacy
/// write-group name.
pub(super) fn publish_granted(definition: &seed_agents_protocol::generated::AgentDefinition) -> bool {
    definition.tools.as_ref().is_none_or(|tools| tools.iter().any(|tool| PUBLISH_GRANTS.contains(&tool.as_str())))
}

/// What `options.action` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Document,
    Update,
    Comment,
    Move,
    Redirect,
    Delete,
    Fork,
    /// `capability.create` or its alias `capability.grant` (raw commands).
    Capability(&'static str),
    /// `profile.update`.
    ProfileUpdate,
    /// `comment.update`.
    CommentUpdate,
    /// `comment.delete`.
    CommentDelete,
    /// `profile.alias`.
    ProfileAlias,
    /// `contact.create`.
    ContactCreate,
    /// `contact.delete`.
    ContactDelete,
    /// `draft.create`, `draft.update`, … (drafts kept here).
    Draft(draft::Command),
}

impl Action {
    fn parse(action: Option<&Ipld>) -> ApiResult<Action> {
        let name = match action {
            None => return Ok(Action::Document),
            Some(Ipld::String(name)) => name.as_str(),
            Some(_) => return Err(ApiError::invalid("options.action must be a string")),
        };
        Ok(match name {
            "document" => Action::Document,
            "update" => Action::Update,
            "comment" => Action::Comment,
            "move" => Action::Move,
            "redirect" => Action::Redirect,
            "delete" => Action::Delete,
            "fork" => Action::Fork,
            "capability.create" => Action::Capability("capability.create"),
            "capability.grant" => Action::Capability("capability.grant"),
            "profile.update" => Action::ProfileUpdate,
            "comment.update" => Action::CommentUpdate,
            "comment.delete" => Action::CommentDelete,
            "profile.alias" => Action::ProfileAlias,
            "contact.create" => Action::ContactCreate,
            "contact.delete" => Action::ContactDelete,
            dotted if let Some(command) = draft::Command::named(dotted) => Action::Draft(command),
            dotted if dotted.contains('.') => {
                return Err(ApiError::not_implemented(format!(
                    "The raw publishing command {dotted} is not supported by this server; it runs capability.create, \
                     profile.update, profile.alias, comment.update, comment.delete, contact.create, \
                     contact.delete and draft.*, and actions document, update, comment, move, redirect, delete and fork"
                )));
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "Unknown write hm:// action \"{other}\". Supported: document (default), update, comment, move, \
                     redirect, delete, fork."
                )));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Action::Document => "document",
            Action::Update => "update",
            Action::Comment => "comment",
            Action::Move => "move",
            Action::Redirect => "redirect",
            Action::Delete => "delete",
            Action::Fork => "fork",
            Action::Capability(name) => name,
            Action::ProfileUpdate => "profile.update",
            Action::CommentUpdate => "comment.update",
            Action::CommentDelete => "comment.delete",
            Action::ProfileAlias => "profile.alias",
            Action::ContactCreate => "contact.create",
            Action::ContactDelete => "contact.delete",
            Action::Draft(command) => command.name(),
        }
    }

    /// The options of this action besides [`BASE_OPTIONS`].
    fn options(self) -> &'static [&'static str] {
        match self {
            Action::Document | Action::Update => &["name", "metadata"],
            Action::Comment => &["target", "replyTo"],
            Action::Move => &["toPath"],
            Action::Redirect => &["toUrl"],
            Action::Delete => &[],
            Action::Fork => &["fromUrl"],
            Action::Capability(_)
            | Action::CommentUpdate
            | Action::CommentDelete
            | Action::ProfileAlias
            | Action::ContactDelete => &[],
            Action::ProfileUpdate | Action::ContactCreate => &["name"],
            Action::Draft(_) => &["name", "metadata"],
        }
    }
}

/// What every action reports; each fills the fields it has.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    contact_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alias: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delegate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    /// What a `profile.update` published.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<profile::Published>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
    /// The draft a `draft.publish` published.
    #[serde(skip_serializing_if = "Option::is_none")]
    draft_id: Option<String>,
    /// The memory file an `options.fromPath` write published.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_path: Option<String>,
    /// The memory images an `options.fromPath` write published first, by memory path, with the
    /// `ipfs://` URLs the document links instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    images: Option<std::collections::BTreeMap<String, String>>,
    cids: Vec<String>,
}

/// One `write hm://…` call: its options, the server, and the time.
struct Publish<'c, 'a> {
    context: &'c Context<'a>,
    hm: HmClient<'c>,
    options: Option<&'c BTreeMap<String, Ipld>>,
    dry_run: bool,
    now: i64,
}

/// `write hm://…`.
pub(super) async fn write(context: &Context<'_>, raw: &str, input: &Input<'_>) -> ApiResult<Value> {
    let dry_run = match input.get("dryRun") {
        None => false,
        Some(Ipld::Bool(value)) => *value,
        Some(_) => return Err(ApiError::invalid("dryRun must be a boolean")),
    };
    if !publish_granted(&context.definition) {
        return Err(ApiError::forbidden(
            "Publishing is not enabled for this agent. Its owner can grant it by adding publish to the agent's tools.",
        ));
    }
    let publish = |options| Publish {
        context,
        hm: HmClient::new(&context.app.http, &context.app.config.hm_server_url),
        options,
        dry_run,
        now: context.app.clock.now_ms(),
    };
    if input.options().is_some_and(|options| options.contains_key("fromPath")) {
        let options = input.known_options("write hm:// (fromPath)", FROM_PATH_OPTIONS)?;
        if input.get("content").is_some() {
            return Err(ApiError::invalid("write hm:// takes content or options.fromPath, not both"));
        }
        return from_path::write(&publish(options), raw).await;
    }
    let action = Action::parse(input.options().and_then(|options| options.get("action")))?;
    let allowed: Vec<&str> = BASE_OPTIONS.iter().chain(action.options()).copied().collect();
    let options = input.known_options(&format!("write hm:// (action \"{}\")", action.name()), &allowed)?;
    let content = match input.get("content") {
        Some(Ipld::String(content)) => Some(content.as_str()),
        _ => None,
    };
    if content.is_some_and(|content| content.len() > MAX_CONTENT) {
        return Err(ApiError::too_large("content is larger than 256 KiB"));
    }
    let publish = publish(options);
    match action {
        Action::Document | Action::Update => document::write(&publish, raw, content, action == Action::Update).await,
        Action::Comment => comment::write(&publish, raw, content).await,
        Action::Delete => refs::delete(&publish, raw).await,
        Action::Redirect => refs::redirect(&publish, raw).await,
        Action::Move => refs::move_to(&publish, raw).await,
        Action::Fork => refs::fork(&publish, raw).await,
        Action::Capability(name) => capability::grant(&publish, raw, name).await,
        Action::ProfileUpdate => profile::update(&publish, raw).await,
        Action::CommentUpdate => comment_edit::update(&publish, content).await,
        Action::CommentDelete => comment_edit::delete(&publish).await,
        Action::ProfileAlias => profile::alias(&publish, raw).await,
        Action::ContactCreate => contact::create(&publish, raw).await,
        Action::ContactDelete => contact::delete(&publish).await,
        Action::Draft(command) => draft::run(&publish, command, raw, content).await,
    }
}

impl Publish<'_, '_> {
    fn option(&self, key: &str) -> Option<&Ipld> {
        self.options.and_then(|options| options.get(key))
    }

    /// A string option, trimmed; `None` when absent or blank, 400 when not a string.
    fn text_option(&self, key: &str) -> ApiResult<Option<&str>> {
        match self.option(key) {
            None => Ok(None),
            Some(Ipld::String(text)) => Ok(Some(text.trim()).filter(|text| !text.is_empty())),
            Some(_) => Err(ApiError::invalid(format!("options.{key} must be a string"))),
        }
    }

    /// `options.skipLinkCheck === true`.
    fn skip_link_check(&self) -> bool {
        matches!(self.option("skipLinkCheck"), Some(Ipld::Bool(true)))
    }

    /// `options.input`: the fields of a raw dotted command.
    fn raw_input(&self) -> ApiResult<RawInput<'_>> {
        match self.option("input") {
            None => Ok(RawInput(None)),
            Some(Ipld::Map(input)) => Ok(RawInput(Some(input))),
            Some(_) => Err(ApiError::invalid("options.input must be an object")),
        }
    }

    /// `options.name`, else `options.input.name` (as [`RawInput::text`] reads it, with `label`
    /// and the `max` bytes for both).
    fn name_option(&self, label: &str, max: usize) -> ApiResult<Option<&str>> {
        match self.text_option("name")? {
            Some(name) if name.len() > max => Err(ApiError::invalid(format!("{label} is too large"))),
            Some(name) => Ok(Some(name)),
            None => self.raw_input()?.text(&["name"], label, max),
        }
    }

    /// The agent's signing key: `options.signer` (a key the definition grants) or its primary key.
    async fn signing_key(&self) -> ApiResult<SigningKey> {
        Ok(self.signing_identity().await?.1)
    }

    /// [`Self::signing_key`] with the name of the key secret it is stored as.
    async fn signing_identity(&self) -> ApiResult<(String, SigningKey)> {
        let context = self.context;
        let name = match self.option("signer") {
            Some(Ipld::String(signer)) => self.granted_signer(signer).await?,
            Some(Ipld::Map(signer)) => match signer.get("publicKey") {
                Some(Ipld::String(public_key)) => self.granted_signer(public_key).await?,
                _ => return Err(ApiError::invalid("options.signer must name a signing key or carry its publicKey")),
            },
            Some(_) => return Err(ApiError::invalid("options.signer must name a signing key or carry its publicKey")),
            None => definition::primary_signing_key(&context.definition).map(str::to_owned).ok_or_else(|| {
                ApiError::invalid("This agent has no signing key; its owner can give it one (signingKeys) to publish")
            })?,
        };
        let (owner, lookup) = (context.owner_id.clone(), name.clone());
        let sealed = context
            .app
            .db
            .read(move |conn| crate::secrets::store::load_sealed(conn, &owner, &lookup))
            .await?
            .ok_or_else(|| ApiError::invalid(format!("Signing key {name} is not on this server")))?;
        let seed =
            Zeroizing::new(context.app.secrets.open(&context.owner_id, &name, &sealed).map_err(ApiError::internal)?);
        let seed: &[u8; crate::identities::SEED_LEN] = seed
            .as_slice()
            .try_into()
            .map_err(|_| ApiError::invalid(format!("Secret {name} is not an account signing key")))?;
        Ok((name, SigningKey::from_bytes(seed)))
    }

    /// The name of the granted key `signer` names: a key's name, the public key id of the account
    /// it signs as, or its profile name (the prompt lists the latter two, docs/runtime.md §1.4).
    /// A key the definition does not grant is refused, whatever the owner holds.
    async fn granted_signer(&self, signer: &str) -> ApiResult<String> {
        let context = self.context;
        let keys = definition::signing_keys_in_order(&context.definition);
        if keys.iter().any(|key| key == signer) {
            return Ok(signer.to_owned());
        }
        let owner = context.owner_id.clone();
        let identities =
            context.app.db.read(move |conn| crate::identities::store::granted(conn, &owner, &keys)).await?;
        if let Some(identity) = identities.iter().find(|identity| identity.account_id == signer) {
            return Ok(identity.key.clone());
        }
        let named: Vec<_> = identities.iter().filter(|identity| identity.label.as_deref() == Some(signer)).collect();
        match named.as_slice() {
            [identity] => Ok(identity.key.clone()),
            [] => Err(ApiError::forbidden(format!("Signing key {signer} is not granted to this agent"))),
            several => Err(ApiError::invalid(format!(
                "Several signing identities are named {signer}; pass the publicKey of one: {}",
                several.iter().map(|identity| identity.account_id.as_str()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// The capability that lets `signer` write `space`'s documents: none when they are the same
    /// account, else the CID of a WRITER or AGENT capability `ListCapabilities` lists for it.
    async fn capability(&self, space: &str, signer: &Principal) -> ApiResult<Option<Cid>> {
        let signer = signer.to_string();
        if signer == space {
            return Ok(None);
        }
        let answer = self.hm.list_capabilities(&format!("hm://{space}")).await.map_err(hm_error)?;
        let capabilities = answer.get("capabilities").and_then(Json::as_array).map(Vec::as_slice).unwrap_or_default();
        let granted = capabilities.iter().find(|capability| {
            capability.get("delegate").and_then(Json::as_str) == Some(signer.as_str())
                && matches!(capability.get("role").and_then(Json::as_str), Some("WRITER" | "AGENT"))
        });
        let Some(granted) = granted else {
            return Err(ApiError::forbidden(format!(
                "This agent signs as {signer}, which holds no WRITER or AGENT capability on hm://{space}; that \
                 account's owner must grant one before the agent can publish there"
            )));
        };
        let cid = granted.get("id").and_then(Json::as_str).and_then(|id| Cid::try_from(id).ok());
        cid.map(Some).ok_or_else(|| ApiError::upstream("Hypermedia server: a capability without a CID"))
    }

    /// Publishes `blobs` in one `PublishBlobs` call; their CIDs.
    async fn send(&self, what: &str, blobs: &[Blob]) -> ApiResult<Vec<String>> {
        self.hm.publish_blobs(blobs).await.map_err(|error| {
            ApiError::upstream(format!(
                "Failed to publish {what} to {}: {error}",
                self.context.app.config.hm_server_url
            ))
        })
    }

    /// What `id` is on the server.
    async fn find(&self, id: &str) -> ApiResult<Found> {
        let answer = match self.hm.resource(id).await {
            Ok(answer) => answer,
            Err(HmError::Status { status: 404, .. }) => return Ok(Found::Missing),
            Err(error) => return Err(hm_error(error)),
        };
        match answer.get("type").and_then(Json::as_str) {
            Some("document") => Ok(Found::Document(answer.get("document").cloned().unwrap_or(Json::Null))),
            Some("not-found" | "tombstone") => Ok(Found::Missing),
            Some(other) => Ok(Found::Other(other.to_owned())),
            None => Err(ApiError::upstream("Hypermedia server: Resource answered without a type")),
        }
    }

    /// The document at `id`, `None` when there is none; another kind of resource is a 400.
    async fn current_document(&self, id: &str) -> ApiResult<Option<Json>> {
        match self.find(id).await? {
            Found::Document(document) => Ok(Some(document)),
            Found::Missing => Ok(None),
            Found::Other(kind) => Err(ApiError::invalid(format!("{id} is a {kind}, not a document"))),
        }
    }

    /// Refuses a document under a parent path that does not exist (top-level documents, whose
    /// parent is the account's home, are always allowed).
    async fn require_parent(&self, address: &HmAddress) -> ApiResult<()> {
        if address.path.len() <= 1 {
            return Ok(());
        }
        let parent = HmAddress { path: address.path[..address.path.len() - 1].to_vec(), ..address.clone() };
        if self.current_document(&parent.canonical()).await?.is_none() {
            return Err(ApiError::invalid(format!(
                "The parent document {} does not exist; create it first",
                parent.canonical()
            )));
        }
        Ok(())
    }

    /// The output of a dry run, or the CIDs of the published blobs.
    async fn finish(&self, what: &str, blobs: Vec<Blob>, mut output: Output, summary: String) -> ApiResult<Value> {
        if self.dry_run {
            output.dry_run = Some(true);
            output.cids = blobs.iter().filter_map(|blob| blob.cid.clone()).collect();
            let summary = format!(
                "Dry run: {} {what} would publish {}; nothing was published.",
                output.action,
                super::plural(blobs.len(), "blob", "blobs")
            );
            return record(summary, &output);
        }
        output.cids = self.send(what, &blobs).await?;
        record(summary, &output)
    }
}

/// The fields of a raw dotted command (`options.input`).
struct RawInput<'i>(Option<&'i BTreeMap<String, Ipld>>);

impl<'i> RawInput<'i> {
    /// The first of `keys` given, trimmed; `None` when absent or blank. `<label> must be a
    /// string` for another type, `<label> is too large` past `max` bytes.
    fn text(&self, keys: &[&str], label: &str, max: usize) -> ApiResult<Option<&'i str>> {
        let Some(value) = keys.iter().find_map(|key| self.0.and_then(|input| input.get(*key))) else {
            return Ok(None);
        };
        let Ipld::String(text) = value else { return Err(ApiError::invalid(format!("{label} must be a string"))) };
        if text.len() > max {
            return Err(ApiError::invalid(format!("{label} is too large")));
        }
        Ok(Some(text.trim()).filter(|text| !text.is_empty()))
    }
}

/// What a `Resource` read found.
enum Found {
    Document(Json),
    /// `not-found`, a tombstone, or a 404.
    Missing,
    /// Another kind (`comment`, `redirect`, …).
    Other(String),
}

/// A plain document address (no view, no version), else 400.
fn plain_address(raw: &str) -> ApiResult<HmAddress> {
    let address = HmAddress::parse(raw)?;
    if address.view.is_some() || address.query.is_some() {
        return Err(ApiError::invalid(format!("write hm:// needs a plain document address, not {raw}")));
    }
    Ok(address)
}

/// An account id a raw command's field gives, `z…` or `hm://z…`; `<label> <raw> is not an
/// account id` otherwise.
fn account_id(raw: &str, label: &str) -> ApiResult<Principal> {
    raw.strip_prefix("hm://")
        .unwrap_or(raw)
        .parse()
        .map_err(|_| ApiError::invalid(format!("{label} {raw} is not an account id")))
}

/// The account principal of an address.
fn space_of(address: &HmAddress) -> ApiResult<Principal> {
    address.uid.parse().map_err(|_| ApiError::invalid(format!("Invalid Hypermedia id: {}", address.canonical())))
}

/// The document path in API format.
fn api_path(address: &HmAddress) -> String {
    address.path.iter().map(|segment| format!("/{segment}")).collect()
}

/// A version string (`cid.cid…`) as its change CIDs.
fn version_cids(version: &str) -> ApiResult<Vec<Cid>> {
    let cids: Option<Vec<Cid>> = version.split('.').map(|cid| Cid::try_from(cid).ok()).collect();
    cids.filter(|cids| !cids.is_empty()).ok_or_else(|| {
        ApiError::upstream(format!("Hypermedia server: document version {version:?} is not a list of CIDs"))
    })
}

/// A string field of a Resource document.
fn field<'j>(document: &'j Json, path: &[&str]) -> Option<&'j str> {
    path.iter().try_fold(document, |value, key| value.get(key))?.as_str()
}

/// A CID field of a Resource document.
fn cid_field(document: &Json, path: &[&str]) -> Option<Cid> {
    field(document, path).and_then(|cid| Cid::try_from(cid).ok())
}

/// `generationInfo.generation` (a number, or a decimal string when it came as a bigint).
fn generation(document: &Json) -> Option<i64> {
    match document.get("generationInfo")?.get("generation")? {
        Json::Number(number) => number.as_i64(),
        Json::String(text) => text.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publish_grant_follows_the_tool_list() {
        use seed_agents_protocol::generated::{AgentDefinition, AgentDefinitionSystemPrompt};
        let mut definition = AgentDefinition::new(
            "gpt-5",
            "main",
            "Scout",
            AgentDefinitionSystemPrompt::String("You are Scout.".into()),
        );
        assert!(publish_granted(&definition));
        definition.tools = Some(vec!["search".into()]);
        assert!(!publish_granted(&definition));
        definition.tools = Some(vec!["search".into(), "memory_publish_document".into()]);
        assert!(publish_granted(&definition));
    }

    #[test]
    fn each_action_has_its_options_and_unknown_raw_commands_are_not_built() {
        assert_eq!(Action::parse(None).unwrap(), Action::Document);
        let parse = |name: &str| Action::parse(Some(&Ipld::String(name.to_owned())));
        assert_eq!(parse("move").unwrap().options(), ["toPath"]);
        assert_eq!(parse("delete").unwrap().options(), [] as [&str; 0]);
        assert_eq!(parse("profile.update").unwrap().options(), ["name"]);
        assert_eq!(parse("comment.delete").unwrap().name(), "comment.delete");
        assert_eq!(parse("draft.create").unwrap().name(), "draft.create");
        assert_eq!(parse("draft.publish").unwrap().options(), ["name", "metadata"]);
        assert_eq!(parse("draft.nope").unwrap_err().kind(), crate::error::ErrorKind::NotImplemented);
        assert_eq!(parse("contact.create").unwrap().options(), ["name"]);
        assert_eq!(parse("capability.grant").unwrap().name(), "capability.grant");
        assert_eq!(parse("publish").unwrap_err().kind(), crate::error::ErrorKind::Invalid);
        assert_eq!(version_cids("bafyreiasesgveuikkpa7pspmqrdwzl5jsfbppvmaeczw2dfz5cc5vh3rou").unwrap().len(), 1);
        assert!(version_cids("bafy.nope").is_err());
        assert_eq!(generation(&serde_json::json!({ "generationInfo": { "generation": "17" } })), Some(17));
        assert_eq!(generation(&serde_json::json!({ "generationInfo": { "generation": 18 } })), Some(18));
    }
}
