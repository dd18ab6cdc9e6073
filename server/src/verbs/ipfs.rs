//! `read ipfs://<cid>` and `write ipfs://` (docs/runtime.md §4.2, §4.3; docs/hypermedia.md §3).
//!
//! `read` downloads `<hm server>/ipfs/<cid>` (the gateway of the configured Hypermedia server:
//! this server has no separate `--ipfs-server-url`) into memory at `options.path`, else
//! `ipfs/<cid>`, with the memory download's streaming and idle timeout. The gateway is the
//! operator's own server, so this fetch is not held to the private-network guard. `write` needs
//! the publish grant and publishes a memory file (`options.fromPath`) or an attachment of the
//! session (`options.fromAttachment`, its id) as UnixFS blocks, as `UploadAgentMemoryFileToIpfs`
//! does; either is streamed from its file, never held whole.

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use serde::Serialize;

use super::publish::publish_granted;
use super::{Context, Input, record};
use crate::error::{ApiError, ApiResult};
use crate::memory::download::{self, blocking};
use crate::memory::path::MemoryPath;
use crate::memory::{ipfs, mime, store};
use seed_agents_protocol::Value;

/// Text read back inline after a download, at most.
const MAX_INLINE: i64 = 256 * 1024;

/// The CID of `ipfs://<cid>[/…]`, `ipfs:<cid>`, a bare CID or any URL holding `/ipfs/<cid>`.
pub(super) fn cid_of(raw: &str) -> ApiResult<String> {
    let rest = raw
        .strip_prefix("ipfs://")
        .or_else(|| raw.strip_prefix("ipfs:"))
        .or_else(|| raw.split_once("/ipfs/").map(|(_, rest)| rest))
        .unwrap_or(raw);
    let cid = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let valid = cid.len() >= 32 && cid.bytes().all(|byte| byte.is_ascii_alphanumeric()) && Cid::try_from(cid).is_ok();
    if !valid {
        return Err(ApiError::invalid(format!("Invalid CID: {raw}")));
    }
    Ok(cid.to_owned())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Downloaded {
    path: String,
    cid: String,
    size: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mime_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
}

/// `read ipfs://<cid>` into memory.
pub(super) async fn read(context: &Context<'_>, raw: &str, input: &Input<'_>) -> ApiResult<Value> {
    let cid = cid_of(raw)?;
    let path = match input.options().and_then(|options| options.get("path")) {
        Some(Ipld::String(path)) if !path.trim().is_empty() => path.trim().to_owned(),
        _ => format!("ipfs/{cid}"),
    };
    let url = format!("{}/ipfs/{cid}", context.app.config.hm_server_url);
    let options = download::Options {
        allow_private_network: true,
        idle_timeout: download::IDLE_TIMEOUT,
        now_ms: context.app.clock.now_ms(),
        room: crate::quota::room(context.app, &context.owner_id).await?,
    };
    let done = download::download(context.memory_root.clone(), &url, Some(&path), options).await?;
    context.memory_changed();
    let entry = done.entry;
    let content = if entry.size <= MAX_INLINE {
        let (root, stored) = (context.memory_root.clone(), MemoryPath::parse(&entry.path)?);
        blocking(move || store::read(&root, &stored)).await?.content
    } else {
        None
    };
    let summary = format!(
        "Saved {cid} to ~/memory/{} ({} bytes){}.",
        entry.path,
        entry.size,
        if content.is_some() { "" } else { "; read it from memory or publish it again with write ipfs://" }
    );
    record(
        summary,
        &Downloaded {
            path: entry.path,
            cid,
            size: entry.size,
            mime_type: entry.mime_type.or(done.content_type),
            content,
        },
    )
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Published {
    cid: String,
    url: String,
    size: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mime_type: Option<String>,
    /// The memory file published (`fromPath`).
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// The attachment published (`fromAttachment`): its id and name.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

/// `write ipfs://` with `options.fromPath` or `options.fromAttachment`.
pub(super) async fn write(context: &Context<'_>, input: &Input<'_>) -> ApiResult<Value> {
    let options = input.options();
    if let Some(unknown) =
        options.and_then(|options| options.keys().find(|key| !["fromPath", "fromAttachment"].contains(&key.as_str())))
    {
        return Err(ApiError::invalid(format!(
            "write ipfs:// does not understand option \"{unknown}\". Supported options: fromPath, fromAttachment."
        )));
    }
    if input.get("dryRun").is_some() {
        return Err(ApiError::invalid("dryRun is only allowed for hm:// writes"));
    }
    if !publish_granted(&context.definition) {
        return Err(ApiError::forbidden(
            "Publishing is not enabled for this agent. Its owner can grant it by adding publish to the agent's tools.",
        ));
    }
    let option = |key: &str| options.and_then(|options| options.get(key));
    let client = crate::hm::HmClient::new(&context.app.http, &context.app.config.hm_server_url);
    match (option("fromPath"), option("fromAttachment")) {
        (Some(Ipld::String(path)), None) => {
            let path = super::memory_file_option(path)?;
            let published = ipfs::publish(&client, context.memory_root.clone(), path.clone()).await?;
            let summary =
                format!("Published ~/memory/{} as ipfs://{} ({} bytes).", path.as_str(), published.cid, published.size);
            record(
                summary,
                &Published {
                    url: format!("ipfs://{}", published.cid),
                    cid: published.cid,
                    size: published.size,
                    mime_type: mime::infer(path.as_str()),
                    path: Some(path.as_str().to_owned()),
                    id: None,
                    name: None,
                },
            )
        }
        (None, Some(Ipld::String(id))) => {
            let root = crate::attachments::root(&context.app.config);
            let dir = crate::attachments::session_dir(&root, context.session()?)?;
            let id = id.trim().to_owned();
            let (info, file) = blocking(move || crate::attachments::store::open(&dir, &id)).await?;
            let published = ipfs::publish_file(&client, file).await?;
            let summary =
                format!("Published attachment {} as ipfs://{} ({} bytes).", info.name, published.cid, published.size);
            record(
                summary,
                &Published {
                    url: format!("ipfs://{}", published.cid),
                    cid: published.cid,
                    size: published.size,
                    mime_type: info.mime_type,
                    path: None,
                    id: Some(info.id.into()),
                    name: Some(info.name),
                },
            )
        }
        (Some(_), Some(_)) => {
            Err(ApiError::invalid("write ipfs:// takes options.fromPath or options.fromAttachment, not both"))
        }
        (Some(_), None) => Err(ApiError::invalid("options.fromPath must be a memory path (text)")),
        (None, Some(_)) => Err(ApiError::invalid("options.fromAttachment must be an attachment id (text)")),
        (None, None) => {
            Err(ApiError::invalid("write ipfs:// needs options.fromPath (a memory file) or options.fromAttachment"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cids_come_from_every_accepted_spelling() {
        let cid = "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e";
        for raw in [
            format!("ipfs://{cid}"),
            format!("ipfs://{cid}/file.txt"),
            format!("ipfs:{cid}"),
            cid.to_owned(),
            format!("https://gateway.example/ipfs/{cid}?download=1"),
        ] {
            assert_eq!(cid_of(&raw).unwrap(), cid, "{raw}");
        }
        for bad in [
            "ipfs://",
            "ipfs://short",
            "ipfs://bafy../../etc/passwd",
            "ipfs://bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5X",
        ] {
            assert!(cid_of(bad).is_err(), "{bad}");
        }
    }
}
