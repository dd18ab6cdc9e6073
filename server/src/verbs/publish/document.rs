//! `write hm://…` with `action` `document` (create) and `update`: content Changes and version
//! Refs (docs/hypermedia.md §2.4, §2.5).

use std::collections::BTreeMap;

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use serde_json::Value as Json;

use super::{HmAddress, Output, Publish, api_path, hm_error, links, markdown, plain_address, space_of};
use crate::error::{ApiError, ApiResult};
use crate::hm::blob;
use crate::hm::document::{self, Op, TextBlock, VersionRef};

/// Creates (`updating` false) or updates the document at `raw`.
pub(super) async fn write(
    publish: &Publish<'_, '_>,
    raw: &str,
    content: Option<&str>,
    updating: bool,
) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let attributes = attributes(publish.option("name"), publish.option("metadata"))?;
    let blocks = content.map(markdown::blocks).transpose()?;
    let built =
        build(publish, &address, blocks, attributes, if updating { Mode::Update } else { Mode::Create }).await?;
    let id = address.canonical();
    let output = Output {
        action: if updating { "update" } else { "document" },
        id: Some(id.clone()),
        version: Some(built.version),
        ..Output::default()
    };
    let summary = format!("Published {id} ({}).", if updating { "updated" } else { "created" });
    publish.finish(&id, built.blobs, output, summary).await
}

/// Whether a write creates the document, updates it, or does whichever fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A new document: 409 when one is there.
    Create,
    /// An existing document: 404 when there is none.
    Update,
    /// Updates the document when there is one, else creates it.
    Either,
}

/// A document write, signed and ready to publish.
pub(super) struct Built {
    /// Genesis (when created), content Change and version Ref.
    pub blobs: Vec<crate::hm::Blob>,
    /// The new version (the content Change's CID).
    pub version: String,
    /// Whether an existing document was updated.
    pub updated: bool,
}

/// Checks the blocks' links, then signs the blobs that set `attributes` and replace the
/// document's content with `blocks` (kept when `None`) at `address`.
pub(super) async fn build(
    publish: &Publish<'_, '_>,
    address: &HmAddress,
    blocks: Option<Vec<TextBlock>>,
    attributes: Vec<(Vec<String>, Ipld)>,
    mode: Mode,
) -> ApiResult<Built> {
    if address.path.is_empty() && mode == Mode::Create {
        return Err(ApiError::invalid("write hm:// creates documents at hm://<account>/<path>; give a path"));
    }
    if let Some(blocks) = &blocks {
        links::check(publish, blocks).await?;
    }
    let key = publish.signing_key().await?;
    let space = space_of(address)?;
    let capability = publish.capability(&address.uid, &blob::principal(&key)).await?;
    let id = address.canonical();
    let path = api_path(address);
    let existing = publish.current_document(&id).await?;
    let now = publish.now;
    match (mode, &existing) {
        (Mode::Update, None) => {
            return Err(ApiError::not_found(format!("No document at {id} to update; use action document")));
        }
        (Mode::Create, Some(_)) => {
            return Err(ApiError::conflict(format!("{id} already exists; use options.action \"update\"")));
        }
        _ => {}
    }
    let updated = existing.is_some();
    let (blobs, version) = if let Some(existing) = existing {
        if blocks.is_none() && attributes.is_empty() {
            return Err(ApiError::invalid("An update needs content, options.name or options.metadata"));
        }
        let (genesis, heads, depth) = history(publish, &id).await?;
        let mut ops = Vec::new();
        if !attributes.is_empty() {
            ops.push(Op::SetAttributes(attributes));
        }
        if let Some(blocks) = blocks {
            let old = top_block_ids(&existing);
            if !old.is_empty() {
                ops.push(Op::DeleteBlocks(old));
            }
            place(&mut ops, blocks);
        }
        let change =
            document::content_change(&key, now, &genesis, &heads, depth + 1, &ops).map_err(ApiError::internal)?;
        let input = VersionRef {
            ts_ms: now,
            space,
            path: &path,
            genesis: &genesis,
            heads: &[change.cid],
            generation: now,
            capability,
        };
        let version_ref = document::version_ref(&key, &input).map_err(ApiError::internal)?;
        (vec![change.blob, version_ref], change.cid.to_string())
    } else {
        if !attributes.iter().any(|(key, _)| key == &["name"]) {
            return Err(ApiError::invalid("Creating a document needs a name (options.name or options.metadata.name)"));
        }
        publish.require_parent(address).await?;
        let mut ops = vec![Op::SetAttributes(attributes)];
        place(&mut ops, blocks.unwrap_or_default());
        let genesis = document::genesis(&key).map_err(ApiError::internal)?;
        let change =
            document::content_change(&key, now, &genesis.cid, &[genesis.cid], 1, &ops).map_err(ApiError::internal)?;
        let input = VersionRef {
            ts_ms: now,
            space,
            path: &path,
            genesis: &genesis.cid,
            heads: &[change.cid],
            generation: now,
            capability,
        };
        let version_ref = document::version_ref(&key, &input).map_err(ApiError::internal)?;
        let version = change.cid.to_string();
        (vec![genesis.blob, change.blob, version_ref], version)
    };
    drop(key);
    Ok(Built { blobs, version, updated })
}

/// `SetAttributes` pairs from `options.metadata` (strings, numbers, booleans) and `options.name`
/// (which wins).
pub(super) fn attributes(name: Option<&Ipld>, metadata: Option<&Ipld>) -> ApiResult<Vec<(Vec<String>, Ipld)>> {
    let mut attributes: BTreeMap<String, Ipld> = BTreeMap::new();
    match metadata {
        None => {}
        Some(Ipld::Map(fields)) => {
            for (key, value) in fields {
                match value {
                    Ipld::String(_) | Ipld::Integer(_) | Ipld::Bool(_) | Ipld::Null => {
                        attributes.insert(key.clone(), value.clone());
                    }
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "options.metadata.{key} must be a string, number, boolean or null"
                        )));
                    }
                }
            }
        }
        Some(_) => return Err(ApiError::invalid("options.metadata must be an object")),
    }
    match name {
        None => {}
        Some(Ipld::String(name)) if !name.trim().is_empty() => {
            attributes.insert("name".to_owned(), Ipld::String(name.trim().to_owned()));
        }
        Some(_) => return Err(ApiError::invalid("options.name must be a non-empty string")),
    }
    Ok(attributes.into_iter().map(|(key, value)| (vec![key], value)).collect())
}

/// From `ListChanges`: the genesis, the heads (changes no other change depends on) and the
/// largest head depth (the genesis has depth 0).
async fn history(publish: &Publish<'_, '_>, id: &str) -> ApiResult<(Cid, Vec<Cid>, u64)> {
    let answer = publish.hm.list_changes(id).await.map_err(hm_error)?;
    let bad = |what: &str| ApiError::upstream(format!("Hypermedia server: ListChanges for {id}: {what}"));
    let mut deps_of: BTreeMap<Cid, Vec<Cid>> = BTreeMap::new();
    for change in answer.get("changes").and_then(Json::as_array).ok_or_else(|| bad("no changes"))? {
        let cid = change.get("id").and_then(Json::as_str).and_then(|id| Cid::try_from(id).ok());
        let cid = cid.ok_or_else(|| bad("a change without a CID"))?;
        let deps = change.get("deps").and_then(Json::as_array).map(Vec::as_slice).unwrap_or_default();
        let deps = deps
            .iter()
            .map(|dep| dep.as_str().and_then(|dep| Cid::try_from(dep).ok()).ok_or_else(|| bad("a dep is not a CID")))
            .collect::<ApiResult<Vec<_>>>()?;
        deps_of.insert(cid, deps);
    }
    let mut genesis = deps_of.iter().filter(|(_, deps)| deps.is_empty()).map(|(cid, _)| *cid);
    let (Some(root), None) = (genesis.next(), genesis.next()) else { return Err(bad("not exactly one genesis")) };
    let mut depths: BTreeMap<Cid, u64> = BTreeMap::new();
    // Depth by repeated passes (a change's depth is one more than its deepest dep's).
    for _ in 0..=deps_of.len() {
        for (cid, deps) in &deps_of {
            if depths.contains_key(cid) {
                continue;
            }
            if deps.is_empty() {
                depths.insert(*cid, 0);
            } else if let Some(known) = deps.iter().map(|dep| depths.get(dep).copied()).collect::<Option<Vec<u64>>>() {
                depths.insert(*cid, known.into_iter().max().unwrap_or(0) + 1);
            }
        }
    }
    if depths.len() != deps_of.len() {
        return Err(bad("changes depend on changes that are not listed"));
    }
    let depended: std::collections::BTreeSet<Cid> = deps_of.values().flatten().copied().collect();
    let heads: Vec<Cid> = deps_of.keys().filter(|cid| !depended.contains(cid)).copied().collect();
    let depth = heads.iter().filter_map(|head| depths.get(head)).copied().max().unwrap_or(0);
    Ok((root, heads, depth))
}

/// The ids of a document's top-level blocks.
fn top_block_ids(document: &Json) -> Vec<String> {
    let nodes = document.get("content").and_then(Json::as_array).map(Vec::as_slice).unwrap_or_default();
    nodes.iter().filter_map(|node| node.get("block")?.get("id")?.as_str().map(str::to_owned)).collect()
}

/// Appends the blocks' `ReplaceBlock`s and one top-level `MoveBlocks`.
fn place(ops: &mut Vec<Op>, blocks: Vec<TextBlock>) {
    let ids: Vec<String> = blocks.iter().map(|block| block.id.clone()).collect();
    ops.extend(blocks.into_iter().map(Op::ReplaceBlock));
    if !ids.is_empty() {
        ops.push(Op::MoveBlocks { blocks: ids, parent: String::new() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_wins_over_metadata_and_values_must_be_scalars() {
        let metadata = Ipld::Map(BTreeMap::from([
            ("name".to_owned(), Ipld::String("Old".into())),
            ("summary".to_owned(), Ipld::String("About".into())),
        ]));
        let attributes = attributes(Some(&Ipld::String(" New ".into())), Some(&metadata)).unwrap();
        assert_eq!(
            attributes,
            [
                (vec!["name".to_owned()], Ipld::String("New".into())),
                (vec!["summary".to_owned()], Ipld::String("About".into()))
            ]
        );
        let nested = Ipld::Map(BTreeMap::from([("x".to_owned(), Ipld::List(Vec::new()))]));
        assert!(super::attributes(None, Some(&nested)).is_err());
    }
}
