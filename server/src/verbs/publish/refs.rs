//! `write hm://…` with `action` `delete`, `redirect`, `move` and `fork`: Ref blobs only, no new
//! Changes (docs/hypermedia.md §2.5, §2.7).
//!
//! - `delete`: a tombstone Ref (no heads) of the document's genesis and generation.
//! - `redirect` (`options.toUrl`): a redirect Ref sending readers of the address to another
//!   document; `options.input.republish: true` asks readers to show the target's content here.
//!   The target must exist unless `options.skipLinkCheck`.
//! - `move` (`options.toPath`, `"/"` for the account's home): in one call, a version Ref that
//!   puts the document's current version at the new path of the same account, and a redirect Ref
//!   from the old path to it. A destination that already holds this version only gets the
//!   redirect; one that holds another document is refused.
//! - `fork` (`options.fromUrl`, a `?v=` version allowed): a version Ref that puts the source's
//!   version (its genesis and generation) at the address, which must hold no document.
//!
//! A new path needs an existing parent, as a new document does. Writing another account's
//! paths needs its capability (see [`Publish::capability`]).

use ipld_core::cid::Cid;
use seed_agents_protocol::Value;
use serde_json::Value as Json;

use super::{Found, Output, Publish, api_path, cid_field, field, generation, plain_address, space_of, version_cids};
use crate::error::{ApiError, ApiResult};
use crate::hm::blob;
use crate::hm::document::{self, RefTarget, VersionRef};
use crate::verbs::hypermedia::HmAddress;

/// A document as Refs need it.
struct Source {
    genesis: Cid,
    generation: Option<i64>,
    version: String,
}

impl Source {
    /// From a Resource document: `genesis` (else `generationInfo.genesis`), the generation and
    /// the version.
    fn of(id: &str, document: &Json) -> ApiResult<Source> {
        let genesis = cid_field(document, &["genesis"]).or_else(|| cid_field(document, &["generationInfo", "genesis"]));
        let genesis = genesis.ok_or_else(|| ApiError::upstream(format!("Hypermedia server: {id} has no genesis")))?;
        let version = field(document, &["version"]).unwrap_or_default().to_owned();
        Ok(Source { genesis, generation: generation(document), version })
    }
}

/// The document at `id`: 404 when there is none, 400 when it is something else.
async fn require_document(publish: &Publish<'_, '_>, id: &str, verb: &str) -> ApiResult<Source> {
    match publish.find(id).await? {
        Found::Document(document) => Source::of(id, &document),
        Found::Missing => Err(ApiError::not_found(format!("No document at {id} to {verb}"))),
        Found::Other(kind) => Err(ApiError::invalid(format!("Cannot {verb} {id}: it is a {kind}, not a document"))),
    }
}

/// A signed Ref of `address` pointing at `target`.
fn sign_ref(
    key: &ed25519_dalek::SigningKey,
    publish: &Publish<'_, '_>,
    address: &HmAddress,
    source: &Source,
    generation: i64,
    capability: Option<Cid>,
    target: RefTarget<'_>,
) -> ApiResult<crate::hm::Blob> {
    let path = api_path(address);
    let input = VersionRef {
        ts_ms: publish.now,
        space: space_of(address)?,
        path: &path,
        genesis: &source.genesis,
        heads: &[],
        generation,
        capability,
    };
    document::reference(key, &input, target).map_err(ApiError::internal)
}

/// `action: "delete"`: a tombstone Ref.
pub(super) async fn delete(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let id = address.canonical();
    let key = publish.signing_key().await?;
    let capability = publish.capability(&address.uid, &blob::principal(&key)).await?;
    let source = require_document(publish, &id, "delete").await?;
    let generation = source.generation.unwrap_or(0);
    let tombstone = sign_ref(&key, publish, &address, &source, generation, capability, RefTarget::Tombstone)?;
    drop(key);
    let output = Output { action: "delete", id: Some(id.clone()), ..Output::default() };
    publish.finish(&id, vec![tombstone], output, format!("Deleted {id}.")).await
}

/// `action: "redirect"`: a redirect Ref to `options.toUrl`.
pub(super) async fn redirect(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let id = address.canonical();
    let to = publish.text_option("toUrl")?.ok_or_else(|| {
        ApiError::invalid(
            "write hm:// with action redirect needs options.toUrl (the hm:// document to send readers to)",
        )
    })?;
    let target = HmAddress::parse(to)
        .ok()
        .filter(|target| target.view.is_none())
        .ok_or_else(|| ApiError::invalid(format!("options.toUrl must be an hm:// document address, not {to}")))?;
    let target_id = target.canonical();
    if target_id == id {
        return Err(ApiError::invalid(format!("{id} cannot redirect to itself")));
    }
    let target_space = space_of(&target)?;
    let republish = match publish.option("input") {
        Some(ipld_core::ipld::Ipld::Map(input)) => input.get("republish") == Some(&ipld_core::ipld::Ipld::Bool(true)),
        _ => false,
    };
    let key = publish.signing_key().await?;
    let capability = publish.capability(&address.uid, &blob::principal(&key)).await?;
    let source = require_document(publish, &id, "redirect").await?;
    if !publish.skip_link_check() && matches!(publish.find(&target_id).await?, Found::Missing) {
        return Err(ApiError::invalid(format!(
            "The redirect target {target_id} does not exist on the server; pass options.skipLinkCheck: true only if \
             it is about to be created"
        )));
    }
    let target_path = api_path(&target);
    let redirect = RefTarget::Redirect { space: target_space, path: &target_path, republish };
    let blob = sign_ref(&key, publish, &address, &source, source.generation.unwrap_or(1), capability, redirect)?;
    drop(key);
    let output =
        Output { action: "redirect", id: Some(id.clone()), target: Some(target_id.clone()), ..Output::default() };
    publish.finish(&id, vec![blob], output, format!("{id} now redirects to {target_id}.")).await
}

/// `action: "move"`: the version at `options.toPath`, and a redirect from the address to it.
pub(super) async fn move_to(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let id = address.canonical();
    let to_path = publish.text_option("toPath")?.ok_or_else(|| {
        ApiError::invalid(
            "write hm:// with action move needs options.toPath (the new path, \"/\" for the account home)",
        )
    })?;
    let destination = HmAddress::parse(&format!("hm://{}/{}", address.uid, to_path.trim_start_matches('/')))
        .ok()
        .filter(|destination| destination.view.is_none() && destination.query.is_none())
        .ok_or_else(|| {
            ApiError::invalid(format!("options.toPath must be a document path such as /notes, not {to_path}"))
        })?;
    let destination_id = destination.canonical();
    if destination_id == id {
        return Err(ApiError::invalid(format!("The document is already at {id}")));
    }
    let key = publish.signing_key().await?;
    let capability = publish.capability(&address.uid, &blob::principal(&key)).await?;
    let source = require_document(publish, &id, "move").await?;
    let generation = source.generation.ok_or_else(|| {
        ApiError::upstream(format!("Hypermedia server: {id} has no generation info, so it cannot be moved"))
    })?;
    let heads = version_cids(&source.version)?;
    let mut blobs = Vec::new();
    if !holds(publish, &destination_id, &source).await? {
        publish.require_parent(&destination).await?;
        let version = RefTarget::Version(&heads);
        blobs.push(sign_ref(&key, publish, &destination, &source, generation, capability, version)?);
    }
    let destination_path = api_path(&destination);
    let redirect = RefTarget::Redirect { space: space_of(&destination)?, path: &destination_path, republish: false };
    blobs.push(sign_ref(&key, publish, &address, &source, generation, capability, redirect)?);
    drop(key);
    let output = Output {
        action: "move",
        id: Some(destination_id.clone()),
        source: Some(id.clone()),
        version: Some(source.version.clone()),
        ..Output::default()
    };
    let summary = format!("Moved {id} to {destination_id}; the old address redirects there.");
    publish.finish(&id, blobs, output, summary).await
}

/// `action: "fork"`: the version of `options.fromUrl` at the address.
pub(super) async fn fork(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let id = address.canonical();
    let from = publish.text_option("fromUrl")?.ok_or_else(|| {
        ApiError::invalid("write hm:// with action fork needs options.fromUrl (the hm:// document to copy)")
    })?;
    let from_address = HmAddress::parse(from)
        .ok()
        .filter(|source| source.view.is_none())
        .ok_or_else(|| ApiError::invalid(format!("options.fromUrl must be an hm:// document address, not {from}")))?;
    if from_address.canonical() == id {
        return Err(ApiError::invalid(format!("{id} cannot be forked onto itself")));
    }
    let from_id = match &from_address.query {
        Some(query) => format!("{}?{query}", from_address.canonical()),
        None => from_address.canonical(),
    };
    let key = publish.signing_key().await?;
    let capability = publish.capability(&address.uid, &blob::principal(&key)).await?;
    let source = require_document(publish, &from_id, "fork").await?;
    let generation = source.generation.ok_or_else(|| {
        ApiError::upstream(format!("Hypermedia server: {from_id} has no generation info, so it cannot be forked"))
    })?;
    let heads = version_cids(&source.version)?;
    if let Found::Document(_) = publish.find(&id).await? {
        return Err(ApiError::conflict(format!("{id} already exists; fork to a free path")));
    }
    publish.require_parent(&address).await?;
    let blob = sign_ref(&key, publish, &address, &source, generation, capability, RefTarget::Version(&heads))?;
    drop(key);
    let output = Output {
        action: "fork",
        id: Some(id.clone()),
        source: Some(from_address.canonical()),
        version: Some(source.version.clone()),
        ..Output::default()
    };
    let summary = format!("Forked {} to {id}.", from_address.canonical());
    publish.finish(&id, vec![blob], output, summary).await
}

/// Whether `id` already holds `source`'s version (same genesis); 409 when it holds another
/// document.
async fn holds(publish: &Publish<'_, '_>, id: &str, source: &Source) -> ApiResult<bool> {
    match publish.find(id).await? {
        Found::Missing | Found::Other(_) => Ok(false),
        Found::Document(document) => {
            let same = Source::of(id, &document)
                .is_ok_and(|there| there.genesis == source.genesis && there.version == source.version);
            if same { Ok(true) } else { Err(ApiError::conflict(format!("{id} already exists; move to a free path"))) }
        }
    }
}
