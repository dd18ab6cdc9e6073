//! `write hm://<account>/<path>`: publishing a document with the agent's signing identity,
//! behind the publish grant (RUNTIME-NOTES §4.3, HM-INTEGRATION.md §2.4, §2.5, §2.7).
//!
//! Built here: `options.action` `document` (the default: create a new document) and `update`
//! (new content and/or metadata on an existing one), signed with the agent's signing key
//! (`options.signer`, else the definition's primary key) and only on documents of that key's own
//! account. The markdown `content` becomes blocks line by line: `#`…`######` headings, fenced
//! code blocks and paragraphs (split on blank lines); inline markdown stays literal text (no
//! annotations are built). Not built: comments, move, redirect, delete, fork, raw dotted commands
//! and writing another account's documents through a capability — they answer 501 naming what
//! is missing. `dryRun: true` builds and signs the blobs and reports them without publishing.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use serde::Serialize;
use serde_json::Value as Json;
use zeroize::Zeroizing;

use super::hypermedia::{HmAddress, hm_error};
use super::{Context, Input, record};
use crate::agents::definition;
use crate::error::{ApiError, ApiResult};
use crate::hm::document::{self, Op, TextBlock};
use crate::hm::{HmClient, blob};
use seed_agents_protocol::Value;

/// The options `write hm://…` understands (upstream's set; the unbuilt actions' options are
/// accepted so the answer can name the action instead).
const OPTIONS: &[&str] = &[
    "action",
    "signer",
    "input",
    "skipLinkCheck",
    "name",
    "metadata",
    "target",
    "replyTo",
    "toPath",
    "toUrl",
    "fromUrl",
    "fromPath",
];
/// Largest `content`, in bytes.
const MAX_CONTENT: usize = 256 * 1024;
/// The tool names that grant publishing (besides an undefined tool list).
const PUBLISH_GRANTS: &[&str] = &["publish", "write", "memory_publish_document", "ipfs_write", "attachment_to_ipfs"];

/// Whether the definition grants publishing: no tool list, or one naming `publish` or a legacy
/// write-group name.
pub(super) fn publish_granted(definition: &seed_agents_protocol::generated::AgentDefinition) -> bool {
    definition.tools.as_ref().is_none_or(|tools| tools.iter().any(|tool| PUBLISH_GRANTS.contains(&tool.as_str())))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    action: &'static str,
    id: String,
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
    cids: Vec<String>,
}

/// `write hm://…`.
pub async fn write(context: &Context<'_>, raw: &str, input: &Input<'_>) -> ApiResult<Value> {
    let options = input.known_options("write hm://", OPTIONS)?;
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
    let option = |key: &str| options.and_then(|options| options.get(key));
    let action = match option("action") {
        None => "document",
        Some(Ipld::String(action)) => action.as_str(),
        Some(_) => return Err(ApiError::invalid("options.action must be a string")),
    };
    let updating = match action {
        "document" => false,
        "update" => true,
        "comment" | "move" | "redirect" | "delete" | "fork" => {
            return Err(ApiError::not_implemented(format!(
                "write hm:// with action \"{action}\" is not supported by this server yet; supported: document, update"
            )));
        }
        dotted if dotted.contains('.') => {
            return Err(ApiError::not_implemented(format!(
                "Raw publishing commands ({dotted}) are not supported by this server; use action document or update"
            )));
        }
        other => {
            return Err(ApiError::invalid(format!(
                "Unknown write hm:// action \"{other}\". Supported: document, update, comment, move, redirect, \
                 delete, fork."
            )));
        }
    };
    let address = HmAddress::parse(raw)?;
    if address.view.is_some() || address.query.is_some() {
        return Err(ApiError::invalid(format!("write hm:// needs a plain document address, not {raw}")));
    }
    if address.path.is_empty() && !updating {
        return Err(ApiError::invalid("write hm:// creates documents at hm://<account>/<path>; give a path"));
    }
    let content = match input.get("content") {
        Some(Ipld::String(content)) => Some(content.as_str()),
        _ => None,
    };
    if content.is_some_and(|content| content.len() > MAX_CONTENT) {
        return Err(ApiError::too_large("content is larger than 256 KiB"));
    }
    let attributes = attributes(option("name"), option("metadata"))?;
    let key = signing_key(context, option("signer")).await?;
    let principal = blob::principal(&key);
    if principal.to_string() != address.uid {
        return Err(ApiError::not_implemented(format!(
            "This agent signs as {principal}; publishing to another account's documents ({}) needs a capability, \
             which this server does not support yet",
            address.uid
        )));
    }
    let hm = HmClient::new(&context.app.http, &context.app.config.hm_server_url);
    let id = address.canonical();
    let existing = current_document(&hm, &id).await?;
    let now = context.app.clock.now_ms();
    let blocks = content.map(markdown_blocks).transpose()?;
    let (blobs, version) = if updating {
        let Some(existing) = existing else {
            return Err(ApiError::not_found(format!("No document at {id} to update; use action document")));
        };
        if blocks.is_none() && attributes.is_empty() {
            return Err(ApiError::invalid("An update needs content, options.name or options.metadata"));
        }
        let (genesis, heads, depth) = history(&hm, &id).await?;
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
        let input = document::VersionRef {
            ts_ms: now,
            space: principal,
            path: &api_path(&address),
            genesis: &genesis,
            heads: &[change.cid],
            generation: now,
        };
        let version_ref = document::version_ref(&key, &input).map_err(ApiError::internal)?;
        let version = change.cid.to_string();
        (vec![change.blob, version_ref], version)
    } else {
        if existing.is_some() {
            return Err(ApiError::conflict(format!("{id} already exists; use options.action \"update\"")));
        }
        if !attributes.iter().any(|(key, _)| key == &["name"]) {
            return Err(ApiError::invalid("Creating a document needs a name (options.name or options.metadata.name)"));
        }
        let parent = HmAddress { path: address.path[..address.path.len() - 1].to_vec(), ..address.clone() };
        if current_document(&hm, &parent.canonical()).await?.is_none() {
            return Err(ApiError::invalid(format!(
                "The parent document {} does not exist; create it first",
                parent.canonical()
            )));
        }
        let mut ops = vec![Op::SetAttributes(attributes)];
        place(&mut ops, blocks.unwrap_or_default());
        let new =
            document::new_document(&key, now, principal, &api_path(&address), &ops).map_err(ApiError::internal)?;
        let version = new.change.cid.to_string();
        (new.into_blobs().to_vec(), version)
    };
    drop(key);
    let action = if updating { "update" } else { "document" };
    if dry_run {
        let cids = blobs.iter().filter_map(|blob| blob.cid.clone()).collect();
        let summary = format!("Dry run: {action} {id} would publish {} blobs; nothing was published.", blobs.len());
        return record(summary, &Output { action, id, version, dry_run: Some(true), cids });
    }
    let cids = hm.publish_blobs(&blobs).await.map_err(|error| {
        ApiError::upstream(format!("Failed to publish {id} to {}: {error}", context.app.config.hm_server_url))
    })?;
    let summary = format!("Published {id} ({}).", if updating { "updated" } else { "created" });
    record(summary, &Output { action, id, version, dry_run: None, cids })
}

/// `SetAttributes` pairs from `options.metadata` (strings, numbers, booleans) and `options.name`
/// (which wins).
fn attributes(name: Option<&Ipld>, metadata: Option<&Ipld>) -> ApiResult<Vec<(Vec<String>, Ipld)>> {
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

/// The agent's signing key: `options.signer` (a key the definition grants) or its primary key.
async fn signing_key(context: &Context<'_>, signer: Option<&Ipld>) -> ApiResult<SigningKey> {
    let granted = definition::signing_key_set(&context.definition);
    let name = match signer {
        Some(Ipld::String(name)) => {
            if !granted.contains(name) {
                return Err(ApiError::forbidden(format!("Signing key {name} is not granted to this agent")));
            }
            name.clone()
        }
        Some(_) => return Err(ApiError::invalid("options.signer must be a signing key name")),
        None => definition::primary_signing_key(&context.definition).map(str::to_owned).ok_or_else(|| {
            ApiError::invalid("This agent has no signing key; its owner can give it one (signingKeys) to publish")
        })?,
    };
    let (owner, lookup) = (context.owner_id.clone(), name.clone());
    let sealed = context
        .app
        .db
        .read(move |conn| crate::secrets::load_sealed(conn, &owner, &lookup))
        .await?
        .ok_or_else(|| ApiError::invalid(format!("Signing key {name} is not on this server")))?;
    let seed = Zeroizing::new(context.app.secrets.open(&context.owner_id, &name, &sealed).map_err(ApiError::internal)?);
    let seed: &[u8; crate::identities::SEED_LEN] = seed
        .as_slice()
        .try_into()
        .map_err(|_| ApiError::invalid(format!("Secret {name} is not an account signing key")))?;
    Ok(SigningKey::from_bytes(seed))
}

/// The document at `id` (its Resource `document`), or `None` when there is none.
async fn current_document(hm: &HmClient<'_>, id: &str) -> ApiResult<Option<Json>> {
    let answer = match hm.resource(id).await {
        Ok(answer) => answer,
        Err(crate::hm::HmError::Status { status: 404, .. }) => return Ok(None),
        Err(error) => return Err(hm_error(error)),
    };
    match answer.get("type").and_then(Json::as_str) {
        Some("document") => Ok(answer.get("document").cloned()),
        Some("not-found" | "tombstone") => Ok(None),
        Some(other) => Err(ApiError::invalid(format!("{id} is a {other}, not a document"))),
        None => Err(ApiError::upstream("Hypermedia server: Resource answered without a type")),
    }
}

/// From `ListChanges`: the genesis, the heads (changes no other change depends on) and the
/// largest head depth (the genesis has depth 0).
async fn history(hm: &HmClient<'_>, id: &str) -> ApiResult<(Cid, Vec<Cid>, u64)> {
    let answer = hm.list_changes(id).await.map_err(hm_error)?;
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

/// The document path in API format.
fn api_path(address: &HmAddress) -> String {
    address.path.iter().map(|segment| format!("/{segment}")).collect()
}

/// Markdown as Heading, Code and Paragraph blocks with random ids.
fn markdown_blocks(markdown: &str) -> ApiResult<Vec<TextBlock>> {
    let mut parts: Vec<(&'static str, String)> = Vec::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut lines = markdown.lines();
    let flush = |paragraph: &mut Vec<&str>, parts: &mut Vec<(&'static str, String)>| {
        if !paragraph.is_empty() {
            parts.push(("Paragraph", paragraph.join("\n")));
            paragraph.clear();
        }
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence) = ["```", "~~~"].into_iter().find(|fence| trimmed.starts_with(fence)) {
            flush(&mut paragraph, &mut parts);
            let code: Vec<&str> = lines.by_ref().take_while(|line| !line.trim_start().starts_with(fence)).collect();
            parts.push(("Code", code.join("\n")));
        } else if trimmed.is_empty() {
            flush(&mut paragraph, &mut parts);
        } else if let Some(heading) = heading_text(trimmed) {
            flush(&mut paragraph, &mut parts);
            parts.push(("Heading", heading.to_owned()));
        } else {
            paragraph.push(line);
        }
    }
    flush(&mut paragraph, &mut parts);
    parts
        .into_iter()
        .map(|(kind, text)| {
            let mut random = [0u8; 8];
            getrandom::fill(&mut random).map_err(ApiError::internal)?;
            Ok(TextBlock { kind: kind.to_owned(), id: document::block_id(random), text })
        })
        .collect()
}

/// The text of an ATX heading line (`#` to `######` then a space).
fn heading_text(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|byte| *byte == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.trim())
}

/// Each block's kind and text.
#[cfg(test)]
fn kinds(blocks: &[TextBlock]) -> Vec<(&str, &str)> {
    blocks.iter().map(|block| (block.kind.as_str(), block.text.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_headings_code_and_paragraphs() {
        let blocks =
            markdown_blocks("# Title\n\nFirst line\nsecond **line**\n\n```rust\nlet a = 1;\n\nlet b = 2;\n```\n## End")
                .unwrap();
        assert_eq!(
            kinds(&blocks),
            [
                ("Heading", "Title"),
                ("Paragraph", "First line\nsecond **line**"),
                ("Code", "let a = 1;\n\nlet b = 2;"),
                ("Heading", "End"),
            ]
        );
        assert!(blocks.iter().all(|block| block.id.len() == 8));
        assert_eq!(heading_text("#hashtag"), None);
        assert_eq!(heading_text("####### seven"), None);
    }

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
}
