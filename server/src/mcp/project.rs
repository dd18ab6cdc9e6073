//! Projection: the tools of the MCP servers an agent is granted become `kind: 'mcp'` tool
//! documents in its `~/tools` (docs/runtime.md §4.6), kept in step with the servers' last
//! discoveries and the agent's `mcpServers` by [`sync_agent`].

use std::collections::BTreeMap;

use crate::db::Connection;
use seed_agents_protocol::generated::AgentDefinition;
use serde_json::Value as Json;
use sha2::{Digest as _, Sha256};

use super::store;
use crate::agents::store as agent_rows;
use crate::error::{ApiError, ApiResult};
use crate::tools::document::{Kind, McpInput, ToolDocument};
use crate::tools::store as documents;

/// The longest projected name: what model providers accept for a tool name.
pub(crate) const MAX_TOOL_NAME: usize = 64;

/// The name agents call a server's tool by: `<server>__<remote>`, each character a provider
/// refuses in a tool name replaced by `_`; when that changed the name or it is longer than
/// [`MAX_TOOL_NAME`], it is cut and followed by `_` and 8 hex digits of the remote name's
/// SHA-256, so two tools of one server never share a name. Server names are slugs of at most 32
/// characters, so the server's part is never cut.
pub(crate) fn tool_name(server: &str, remote: &str) -> String {
    let clean: String =
        remote.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let plain = format!("{server}__{clean}");
    if clean == remote && plain.len() <= MAX_TOOL_NAME {
        return plain;
    }
    let digest = Sha256::digest(remote.as_bytes());
    let suffix = hex::encode(&digest[..4]);
    // `plain` is ASCII: bytes and characters agree.
    let head = &plain[..plain.len().min(MAX_TOOL_NAME - 1 - suffix.len())];
    format!("{head}_{suffix}")
}

/// The documents of server `server`'s tools, by projected name (the first tool keeps a name two
/// would share).
fn server_documents(server: &store::ServerRow, into: &mut BTreeMap<String, ToolDocument>) -> ApiResult<()> {
    for tool in &server.tools {
        let input = serde_json::to_value(&tool.input).map_err(ApiError::internal)?;
        let document = ToolDocument::mcp(McpInput {
            name: tool_name(&server.name, &tool.name),
            server: &server.name,
            remote_name: &tool.name,
            description: tool.description.as_deref(),
            input: if input.is_object() { input } else { Json::Null },
        });
        into.entry(document.name.clone()).or_insert(document);
    }
    Ok(())
}

/// Brings agent `agent_id`'s MCP documents in line with its definition's `mcpServers` and those
/// servers' tools: stale ones deleted, new or changed ones written (a name a builtin or lambda
/// already holds is skipped). Whether anything changed.
pub(crate) fn sync_agent(
    conn: &Connection,
    owner: &str,
    agent_id: &str,
    definition: &AgentDefinition,
    now: i64,
) -> ApiResult<bool> {
    let mut wanted = BTreeMap::new();
    for name in definition.mcp_servers.iter().flatten() {
        if let Some(server) = store::load(conn, owner, name)? {
            server_documents(&server, &mut wanted)?;
        }
    }
    let existing = documents::list_mcp(conn, owner, agent_id)?;
    let mut changed = false;
    for stored in &existing {
        if !wanted.contains_key(&stored.document.name) {
            documents::delete(conn, owner, agent_id, &stored.document.name)?;
            changed = true;
        }
    }
    for (name, document) in wanted {
        let (cid, _) = document.encode()?;
        if existing.iter().any(|stored| stored.document.name == name && stored.cid == cid) {
            continue;
        }
        if documents::get(conn, owner, agent_id, &name)?.is_some_and(|stored| stored.document.kind != Kind::Mcp) {
            tracing::warn!(agent = agent_id, tool = %name, "MCP tool not projected: a builtin or lambda has its name");
            continue;
        }
        documents::put_mcp(conn, owner, agent_id, &document, now)?;
        changed = true;
    }
    Ok(changed)
}

/// [`sync_agent`] for every agent of `owner` whose `mcpServers` names `server`: the agents whose
/// documents changed.
pub(crate) fn sync_granted(conn: &Connection, owner: &str, server: &str, now: i64) -> ApiResult<Vec<String>> {
    let mut changed = Vec::new();
    for (agent_id, definition) in agent_rows::owned_definitions(conn, owner)? {
        let grants = definition.mcp_servers.as_ref().is_some_and(|names| names.iter().any(|name| name == server));
        if grants && sync_agent(conn, owner, &agent_id, &definition, now)? {
            changed.push(agent_id);
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_prefixed_cleaned_and_stable() {
        assert_eq!(tool_name("github", "create_issue"), "github__create_issue");
        let dotted = tool_name("fs", "read.file");
        assert!(dotted.starts_with("fs__read_file_") && dotted.len() == "fs__read_file_".len() + 8, "{dotted}");
        assert_ne!(dotted, tool_name("fs", "read file"), "different remote names never collide");
        assert_eq!(dotted, tool_name("fs", "read.file"), "stable");
        let long = tool_name(&"s".repeat(32), &"t".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert!(long.starts_with(&format!("{}__t", "s".repeat(32))));
        assert_ne!(long, tool_name(&"s".repeat(32), &"t".repeat(101)));
        let unicode = tool_name("x", "résumé");
        assert!(unicode.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'));
    }
}
