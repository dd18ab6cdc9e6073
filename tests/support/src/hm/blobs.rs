//! What the fake Hypermedia server checks of a `PublishBlobs` body before it stores anything
//! (see [`FakeHm`](super::FakeHm)), the CIDs it names blobs with, and how it answers `Comment`
//! reads from the Comments it stored. Public for the fake's own tests (`tests/fake_hm.rs`).

use std::collections::BTreeMap;

use blake2::Blake2b;
use blake2::digest::consts::U32;
use ipld_core::cid::Cid;
use ipld_core::cid::multihash::Multihash;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Principal, wire};
use sha2::{Digest, Sha256};

use super::Published;

/// Checks every blob of a `PublishBlobs` body, in order, against those `stored` before; all or
/// nothing.
pub fn publish(body: &[u8], stored: &[Published]) -> Result<Vec<Published>, String> {
    let Ok(Ipld::Map(mut input)) = wire::decode_ipld(body) else { return Err("body is not a CBOR map".into()) };
    let Some(Ipld::List(blobs)) = input.remove("blobs") else { return Err("blobs must be a list".into()) };
    let mut accepted: Vec<Published> = Vec::new();
    for blob in blobs {
        let blob = check_blob(blob)?;
        let known = |cid: &Cid| {
            let cid = cid.to_string();
            stored.iter().chain(&accepted).find(|blob| blob.cid == cid).cloned()
        };
        match blob.text("type") {
            Some("Change") => check_change(&blob, known)?,
            Some("Ref") => check_ref(&blob, known)?,
            Some("Comment") => check_comment(&blob, known)?,
            Some("Capability") => check_capability(&blob)?,
            _ => {}
        }
        accepted.push(blob);
    }
    Ok(accepted)
}

fn check_blob(blob: Ipld) -> Result<Published, String> {
    let Ipld::Map(mut blob) = blob else { return Err("blob is not a map".into()) };
    let Some(Ipld::Bytes(data)) = blob.remove("data") else { return Err("blob data must be bytes".into()) };
    let (cid, codec) = match blob.remove("cid") {
        Some(Ipld::String(cid)) => {
            let codec = check_cid(&cid, &data)?;
            (cid, codec)
        }
        None => (blake2b_cid(&data), 0x71),
        Some(_) => return Err("cid must be a string".into()),
    };
    let value = match codec {
        0x71 => Some(check_signed(&data)?),
        _ => None,
    };
    Ok(Published { cid, codec, data, value })
}

/// The CID the real server gives a blob sent without one: CIDv1, dag-cbor, BLAKE2b-256
/// (multihash code 0xb220), so the string starts `bafy2bza`.
pub fn blake2b_cid(data: &[u8]) -> String {
    let digest = Blake2b::<U32>::digest(data);
    let hash = Multihash::<64>::wrap(0xb220, &digest).expect("a 32-byte digest fits");
    Cid::new_v1(0x71, hash).to_string()
}

/// A `Change`: the genesis is `{type, signer, sig, ts: 0}`; any other links a genesis Change
/// (no `genesis` of its own) and `deps` Changes of that genesis, has `depth` = max dep depth + 1
/// (the genesis has depth 0) and a body whose `opCount` counts its `ops`.
fn check_change(blob: &Published, known: impl Fn(&Cid) -> Option<Published>) -> Result<(), String> {
    let Some(genesis) = blob.field("genesis") else {
        let mut keys: Vec<&str> = blob.value.iter().flat_map(|fields| fields.keys()).map(String::as_str).collect();
        keys.sort_unstable();
        if keys != ["sig", "signer", "ts", "type"] || blob.integer("ts") != Some(0) {
            return Err(format!("a genesis Change must be {{type, signer, sig, ts: 0}}, got {keys:?}"));
        }
        return Ok(());
    };
    let Ipld::Link(genesis) = genesis else { return Err("Change genesis must be a link".into()) };
    let genesis_blob = known_change(&known, genesis, "genesis")?;
    if genesis_blob.field("genesis").is_some() {
        return Err(format!("Change genesis {genesis} is not a genesis Change"));
    }
    let deps = blob.field("deps").and_then(link_list).ok_or("Change deps must be a list of links")?;
    if deps.is_empty() {
        return Err("a content Change needs deps".into());
    }
    let mut max_dep_depth = 0;
    for dep in &deps {
        let dep_blob = known_change(&known, dep, "dep")?;
        let dep_depth = match dep_blob.link("genesis") {
            None if dep == genesis => 0,
            Some(dep_genesis) if dep_genesis == genesis.to_string() => {
                dep_blob.integer("depth").ok_or("a dep has no depth")?
            }
            _ => return Err(format!("Change dep {dep} belongs to another document")),
        };
        max_dep_depth = max_dep_depth.max(dep_depth);
    }
    if blob.integer("depth") != Some(max_dep_depth + 1) {
        return Err(format!("Change depth must be {}", max_dep_depth + 1));
    }
    let Some(Ipld::Map(body)) = blob.field("body") else { return Err("Change body must be a map".into()) };
    let Some(Ipld::List(ops)) = body.get("ops") else { return Err("Change body.ops must be a list".into()) };
    if body.get("opCount") != Some(&Ipld::Integer(ops.len() as i128)) {
        return Err("Change body.opCount must count the ops".into());
    }
    if blob.integer("ts").is_none_or(|ts| ts <= 0) {
        return Err("a content Change needs a positive ts".into());
    }
    Ok(())
}

/// A `Ref`: `genesisBlob` links a genesis Change and every head a Change of that genesis; a
/// redirect has no heads; `space` (omitted when it is the signer) other than the signer needs a
/// `capability` that space issued to the signer.
fn check_ref(blob: &Published, known: impl Fn(&Cid) -> Option<Published>) -> Result<(), String> {
    only_keys(
        blob,
        &[
            "type",
            "signer",
            "sig",
            "ts",
            "genesisBlob",
            "heads",
            "generation",
            "space",
            "path",
            "capability",
            "visibility",
            "redirect",
        ],
    )?;
    let Some(Ipld::Link(genesis)) = blob.field("genesisBlob") else {
        return Err("Ref genesisBlob must be a link".into());
    };
    if known_change(&known, genesis, "genesisBlob")?.field("genesis").is_some() {
        return Err(format!("Ref genesisBlob {genesis} is not a genesis Change"));
    }
    let heads = blob.field("heads").and_then(link_list).ok_or("Ref heads must be a list of links")?;
    for head in &heads {
        if known_change(&known, head, "head")?.link("genesis") != Some(genesis.to_string()) {
            return Err(format!("Ref head {head} is not a Change of genesis {genesis}"));
        }
    }
    if blob.integer("generation") == Some(0) {
        return Err("Ref generation 0 must be omitted".into());
    }
    if blob.integer("ts").is_none_or(|ts| ts <= 0) {
        return Err("a Ref needs a positive ts".into());
    }
    let signer = blob.signer().ok_or("Ref signer is not a principal")?;
    let space = match blob.field("space") {
        None => signer.clone(),
        Some(space) => principal_field(space, "Ref space")?,
    };
    if blob.field("space").is_some() && space == signer {
        return Err("Ref space must be omitted when it is the signer".into());
    }
    match blob.field("path") {
        None => {}
        Some(Ipld::String(path)) if path.starts_with('/') && path.len() > 1 => {}
        Some(_) => return Err("Ref path must be \"/…\" (omitted for the home document)".into()),
    }
    if let Some(redirect) = blob.field("redirect") {
        if !heads.is_empty() {
            return Err("a redirect Ref must have no heads".into());
        }
        let Ipld::Map(redirect) = redirect else { return Err("Ref redirect must be a map".into()) };
        let mut keys = redirect.keys().map(String::as_str);
        if let Some(key) = keys.find(|key| !["path", "space", "republish"].contains(key)) {
            return Err(format!("unexpected redirect field {key}"));
        }
        if !matches!(redirect.get("path"), Some(Ipld::String(_))) {
            return Err("Ref redirect.path must be a string".into());
        }
        if let Some(target) = redirect.get("space")
            && principal_field(target, "redirect space")? == space
        {
            return Err("Ref redirect.space must be omitted when it is the Ref's space".into());
        }
        if redirect.get("republish").is_some_and(|republish| republish != &Ipld::Bool(true)) {
            return Err("Ref redirect.republish is true or omitted".into());
        }
    }
    match (blob.field("capability"), space == signer) {
        (None, true) => Ok(()),
        (Some(_), true) => Err("a Ref of the signer's own space carries no capability".into()),
        (None, false) => Err(format!("{signer} writes {space}'s path without a capability")),
        (Some(Ipld::Link(cid)), false) => {
            let capability = known(cid).ok_or_else(|| format!("capability {cid} was not published before"))?;
            let delegate = capability.field("delegate").map(|delegate| principal_field(delegate, "delegate"));
            if capability.text("type") != Some("Capability")
                || capability.signer().as_deref() != Some(space.as_str())
                || delegate != Some(Ok(signer.clone()))
                || !matches!(capability.text("role"), Some("WRITER" | "AGENT"))
            {
                return Err(format!("capability {cid} does not let {signer} write {space}'s documents"));
            }
            let path = blob.text("path").unwrap_or_default();
            match capability.text("path") {
                Some(scope) if path != scope && !path.starts_with(&format!("{scope}/")) => {
                    Err(format!("capability {cid} covers {scope}, not {path}"))
                }
                _ => Ok(()),
            }
        }
        (Some(_), false) => Err("Ref capability must be a link".into()),
    }
}

/// A `Comment`: `space` (a principal), `path`, `version` (links to known Changes), `body`
/// (blocks with ids, types and nested children); a reply links the parent and thread-root
/// Comments, which must be on the same document.
fn check_comment(blob: &Published, known: impl Fn(&Cid) -> Option<Published>) -> Result<(), String> {
    only_keys(
        blob,
        &[
            "type",
            "signer",
            "sig",
            "ts",
            "space",
            "path",
            "version",
            "body",
            "replyParent",
            "threadRoot",
            "visibility",
            "id",
            "capability",
        ],
    )?;
    if blob.integer("ts").is_none_or(|ts| ts <= 0) {
        return Err("a Comment needs a positive ts".into());
    }
    let space = principal_field(blob.field("space").ok_or("Comment space is missing")?, "Comment space")?;
    let path = blob.text("path").ok_or("Comment path must be a string")?;
    if !(path.is_empty() || path.starts_with('/')) {
        return Err("Comment path must be \"\" or \"/…\"".into());
    }
    let version = blob.field("version").and_then(link_list).ok_or("Comment version must be a list of links")?;
    if version.is_empty() {
        return Err("Comment version must name at least one change".into());
    }
    for change in &version {
        known_change(&known, change, "Comment version")?;
    }
    let Some(Ipld::List(body)) = blob.field("body") else { return Err("Comment body must be a list".into()) };
    body.iter().try_for_each(check_block)?;
    for key in ["replyParent", "threadRoot"] {
        let Some(link) = blob.field(key) else { continue };
        let Ipld::Link(cid) = link else { return Err(format!("Comment {key} must be a link")) };
        let other = known(cid).ok_or_else(|| format!("Comment {key} {cid} was not published before"))?;
        if other.text("type") != Some("Comment")
            || other.field("space") != blob.field("space")
            || other.text("path") != Some(path)
        {
            return Err(format!("Comment {key} {cid} is not a comment on {space}{path}"));
        }
    }
    if blob.field("replyParent").is_some() != blob.field("threadRoot").is_some() {
        return Err("a reply links both replyParent and threadRoot".into());
    }
    if blob.field("visibility").is_some_and(|visibility| visibility != &Ipld::String("Private".into())) {
        return Err("Comment visibility is \"Private\" or omitted".into());
    }
    if blob.field("id").is_some_and(|id| !matches!(id, Ipld::String(tsid) if tsid.len() > 1 && tsid.starts_with('z'))) {
        return Err("Comment id must be the tsid (z…) of the comment it edits".into());
    }
    Ok(())
}

fn check_block(block: &Ipld) -> Result<(), String> {
    let Ipld::Map(block) = block else { return Err("a comment block must be a map".into()) };
    for key in ["id", "type"] {
        if !matches!(block.get(key), Some(Ipld::String(text)) if !text.is_empty()) {
            return Err(format!("a comment block needs a {key}"));
        }
    }
    if block.get("text").is_some_and(|text| !matches!(text, Ipld::String(_))) {
        return Err("a comment block's text must be a string".into());
    }
    if block.get("annotations").is_some_and(|annotations| !matches!(annotations, Ipld::List(_))) {
        return Err("a comment block's annotations must be a list".into());
    }
    match block.get("children") {
        None => Ok(()),
        Some(Ipld::List(children)) => children.iter().try_for_each(check_block),
        Some(_) => Err("a comment block's children must be a list".into()),
    }
}

/// A `Capability`: a principal `delegate` and a WRITER or AGENT `role`.
fn check_capability(blob: &Published) -> Result<(), String> {
    only_keys(blob, &["type", "signer", "sig", "ts", "delegate", "role", "path", "label", "audience"])?;
    principal_field(blob.field("delegate").ok_or("Capability delegate is missing")?, "delegate")?;
    if !matches!(blob.text("role"), Some("WRITER" | "AGENT")) {
        return Err("Capability role must be WRITER or AGENT".into());
    }
    Ok(())
}

fn only_keys(blob: &Published, allowed: &[&str]) -> Result<(), String> {
    let mut keys = blob.value.iter().flat_map(BTreeMap::keys);
    match keys.find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(format!("unexpected {} field {key}", blob.text("type").unwrap_or("blob"))),
        None => Ok(()),
    }
}

/// A principal byte string as its account id.
fn principal_field(value: &Ipld, what: &str) -> Result<String, String> {
    match value {
        Ipld::Bytes(bytes) => Principal::from_bytes(bytes).map(|principal| principal.to_string()),
        _ => return Err(format!("{what} must be principal bytes")),
    }
    .map_err(|_| format!("{what} is not a principal"))
}

/// A published Comment's record id `<author>/<tsid>` (docs/hypermedia.md §2.3), computed here
/// independently of the server; an edit or deletion names its comment's tsid in `id`.
pub fn comment_record_id(blob: &Published) -> Option<String> {
    if let Some(tsid) = blob.text("id") {
        return Some(format!("{}/{tsid}", blob.signer()?));
    }
    let ts = u64::try_from(blob.integer("ts")?).ok()?;
    let mut tsid = ts.to_be_bytes()[2..].to_vec();
    tsid.extend_from_slice(&Sha256::digest(&blob.data)[..4]);
    Some(format!("{}/z{}", blob.signer()?, bs58::encode(tsid).into_string()))
}

/// The HMComment the real server answers for `id`, from the published Comments: the latest
/// blob of that record (by `ts`), none once that one deleted it (an empty body).
pub fn comment_answer(blobs: &[Published], id: &str) -> Option<serde_json::Value> {
    let blob = blobs
        .iter()
        .filter(|blob| blob.text("type") == Some("Comment"))
        .filter(|blob| comment_record_id(blob).as_deref() == Some(id))
        .max_by_key(|blob| blob.integer("ts"))?;
    if matches!(blob.field("body"), Some(Ipld::List(body)) if body.is_empty()) {
        return None;
    }
    let space = principal_field(blob.field("space")?, "space").ok()?;
    let version: Vec<String> = blob.links("version")?;
    let mut comment = serde_json::json!({
        "id": id,
        "version": blob.cid,
        "author": blob.signer()?,
        "targetAccount": space,
        "targetPath": blob.text("path")?,
        "targetVersion": version.join("."),
        "content": [],
        "visibility": if blob.text("visibility") == Some("Private") { "PRIVATE" } else { "PUBLIC" },
    });
    if let (Some(parent), Some(root)) = (blob.link("replyParent"), blob.link("threadRoot")) {
        comment["replyParentVersion"] = serde_json::json!(parent);
        comment["threadRootVersion"] = serde_json::json!(root);
    }
    Some(comment)
}

fn known_change(known: &impl Fn(&Cid) -> Option<Published>, cid: &Cid, what: &str) -> Result<Published, String> {
    let blob = known(cid).ok_or_else(|| format!("{what} {cid} was not published before"))?;
    if blob.text("type") != Some("Change") {
        return Err(format!("{what} {cid} is not a Change"));
    }
    Ok(blob)
}

pub(super) fn link_list(value: &Ipld) -> Option<Vec<Cid>> {
    let Ipld::List(items) = value else { return None };
    items.iter().map(|item| if let Ipld::Link(cid) = item { Some(*cid) } else { None }).collect()
}

/// Recomputes a CIDv1 sha2-256 from the data; returns its codec.
fn check_cid(cid: &str, data: &[u8]) -> Result<u8, String> {
    let parsed = Cid::try_from(cid).map_err(|error| format!("cid {cid} does not parse: {error}"))?;
    if parsed.version() != ipld_core::cid::Version::V1 || parsed.hash().code() != 0x12 {
        return Err(format!("cid {cid} is not CIDv1 sha2-256"));
    }
    let codec = u8::try_from(parsed.codec()).ok().filter(|codec| [0x71, 0x55, 0x70].contains(codec));
    let codec = codec.ok_or_else(|| format!("unexpected codec {:#x}", parsed.codec()))?;
    if parsed.hash().digest() != Sha256::digest(data).as_slice() {
        return Err(format!("cid {cid} does not match the data"));
    }
    Ok(codec)
}

/// Decodes, checks canonical encoding, and verifies the zero-sig Ed25519 signature.
fn check_signed(data: &[u8]) -> Result<BTreeMap<String, Ipld>, String> {
    let value = wire::decode_ipld(data).map_err(|error| format!("not DAG-CBOR: {error}"))?;
    if wire::ipld_to_vec(&value).map_err(|error| error.to_string())? != data {
        return Err("blob is not canonical DAG-CBOR".into());
    }
    let Ipld::Map(fields) = value else { return Err("blob is not a map".into()) };
    let Some(Ipld::Bytes(signer)) = fields.get("signer") else { return Err("signer must be bytes".into()) };
    let Some(Ipld::Bytes(sig)) = fields.get("sig") else { return Err("sig must be bytes".into()) };
    let principal = Principal::from_bytes(signer).map_err(|error| error.to_string())?;
    let key = principal.verifying_key().ok_or("signer is not an Ed25519 key")?;
    let signature = ed25519_dalek::Signature::from_slice(sig).map_err(|error| error.to_string())?;
    let mut unsigned = fields.clone();
    unsigned.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
    let unsigned = wire::ipld_to_vec(&Ipld::Map(unsigned)).map_err(|error| error.to_string())?;
    key.verify_strict(&unsigned, &signature).map_err(|_| "invalid blob signature".to_owned())?;
    Ok(fields)
}
