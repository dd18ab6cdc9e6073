//! Agent memory: each agent's private filesystem at `<stateDir>/memory`, read by readers and
//! changed by writers through the `*AgentMemory*` actions.
//!
//! [`path`] normalises client paths and walks them without following symlinks; [`store`] does the
//! blocking file work (on the blocking pool, never on the async threads); [`download`] fetches URLs
//! into memory behind the SSRF [`guard`]. Writes, downloads and deletes that removed something
//! publish `agent-memory-changed` to the owner's account after the change is on disk.

pub(crate) mod download;
pub(crate) mod guard;
pub(crate) mod ipfs;
pub(crate) mod mime;
pub(crate) mod path;
pub(crate) mod store;

use std::path::PathBuf;

use seed_agents_protocol::generated::{
    DeleteAgentMemoryFile, DeleteAgentMemoryFileResponse, DownloadAgentMemoryFile, DownloadAgentMemoryFileResponse,
    ListAgentMemory, ListAgentMemoryDir, ListAgentMemoryDirResponse, ListAgentMemoryResponse, ReadAgentMemoryFile,
    ReadAgentMemoryFileResponse, UploadAgentMemoryFileToIpfs, UploadAgentMemoryFileToIpfsResponse,
    WriteAgentMemoryFile, WriteAgentMemoryFileContent, WriteAgentMemoryFileResponse,
};

use crate::access::{self, Need};
use crate::app::App;
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::ApiResult;
use download::blocking;
use path::MemoryPath;

/// The caller's access to the agent (`need`), and its memory root.
struct Memory {
    agent_id: String,
    owner_id: String,
    root: PathBuf,
}

async fn open(app: &App, caller: &Caller, agent_id: &str, need: Need) -> ApiResult<Memory> {
    let (account, agent_id) = (caller.account_id.clone(), agent_id.to_owned());
    app.db
        .read(move |conn| {
            let access = access::require(conn, &agent_id, &account, need)?;
            let state_dir = crate::agents::store::state_dir(conn, &access.agent_id)?;
            let root = PathBuf::from(state_dir).join(path::MEMORY_DIR);
            Ok(Memory { agent_id: access.agent_id, owner_id: access.owner_id, root })
        })
        .await
}

fn changed(app: &App, memory: &Memory) {
    app.bus.account_change(&memory.owner_id, ChangeReason::AgentMemoryChanged, Some(&memory.agent_id), None);
}

/// `ListAgentMemory {agentId}` (reader): every file and directory, sorted by path.
pub(crate) async fn list_agent_memory(
    app: &App,
    caller: &Caller,
    action: ListAgentMemory,
) -> ApiResult<ListAgentMemoryResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Read).await?;
    let root = memory.root.clone();
    let (entries, total_bytes) = blocking(move || store::list_all(&root)).await?;
    Ok(ListAgentMemoryResponse {
        extra: Default::default(),
        agent_id: memory.agent_id.into(),
        entries,
        total_bytes,
        truncated: None,
    })
}

/// `ListAgentMemoryDir {agentId, path?}` (reader): one level; `path` absent, empty or `/` is the
/// root. Directory entries carry `entryCount`.
pub(crate) async fn list_agent_memory_dir(
    app: &App,
    caller: &Caller,
    action: ListAgentMemoryDir,
) -> ApiResult<ListAgentMemoryDirResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Read).await?;
    let path = match action.path.as_deref() {
        None | Some("" | "/") => None,
        Some(raw) => Some(MemoryPath::parse(raw)?),
    };
    let root = memory.root.clone();
    let (path, entries, total_bytes) = blocking(move || store::list_dir(&root, path.as_ref())).await?;
    Ok(ListAgentMemoryDirResponse {
        extra: Default::default(),
        agent_id: memory.agent_id.into(),
        entries,
        path,
        total_bytes,
        totals: None,
    })
}

/// `ReadAgentMemoryFile {agentId, path}` (reader): clean UTF-8 as text, anything else as bytes.
pub(crate) async fn read_agent_memory_file(
    app: &App,
    caller: &Caller,
    action: ReadAgentMemoryFile,
) -> ApiResult<ReadAgentMemoryFileResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Read).await?;
    let path = MemoryPath::parse(&action.path)?;
    let root = memory.root.clone();
    let file = blocking(move || store::read(&root, &path)).await?;
    Ok(ReadAgentMemoryFileResponse { extra: Default::default(), agent_id: memory.agent_id.into(), file })
}

/// `WriteAgentMemoryFile {agentId, path, content}` (writer): the whole file, string as UTF-8 or
/// bytes verbatim, parents created.
pub(crate) async fn write_agent_memory_file(
    app: &App,
    caller: &Caller,
    action: WriteAgentMemoryFile,
) -> ApiResult<WriteAgentMemoryFileResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Write).await?;
    let path = MemoryPath::parse(&action.path)?;
    let content = match action.content {
        WriteAgentMemoryFileContent::String(text) => text.into_bytes(),
        WriteAgentMemoryFileContent::Bytes(bytes) => bytes.0,
    };
    check_quota(app, &memory.owner_id, &memory.root, &path, content.len()).await?;
    let root = memory.root.clone();
    let entry = blocking(move || store::write(&root, &path, &content)).await?;
    changed(app, &memory);
    Ok(WriteAgentMemoryFileResponse { extra: Default::default(), agent_id: memory.agent_id.into(), entry })
}

/// Refuses a write of `bytes` to `path` under the memory `root` that would take `owner` past the
/// storage quota (`crate::quota`); the file it replaces, if any, frees its bytes.
pub(crate) async fn check_quota(
    app: &App,
    owner: &str,
    root: &std::path::Path,
    path: &MemoryPath,
    bytes: usize,
) -> ApiResult<()> {
    if app.config.storage_quota_bytes == 0 {
        return Ok(());
    }
    let target = path.under(root);
    let replaced = blocking(move || {
        Ok(path::lstat(&target).ok().flatten().filter(|meta| meta.is_file()).map_or(0, |meta| meta.len()))
    })
    .await?;
    crate::quota::check(app, owner, bytes as u64, replaced).await
}

/// `DeleteAgentMemoryFile {agentId, path}` (writer): a file, or a directory recursively;
/// `deleted: false` when nothing was there.
pub(crate) async fn delete_agent_memory_file(
    app: &App,
    caller: &Caller,
    action: DeleteAgentMemoryFile,
) -> ApiResult<DeleteAgentMemoryFileResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Write).await?;
    let path = MemoryPath::parse(&action.path)?;
    let (root, target) = (memory.root.clone(), path.clone());
    let deleted = blocking(move || store::delete(&root, &target)).await?;
    if deleted {
        changed(app, &memory);
    }
    Ok(DeleteAgentMemoryFileResponse {
        extra: Default::default(),
        agent_id: memory.agent_id.into(),
        deleted,
        path: path.as_str().to_owned(),
    })
}

/// `UploadAgentMemoryFileToIpfs {agentId, path}` (writer): see [`ipfs`].
pub(crate) async fn upload_agent_memory_file_to_ipfs(
    app: &App,
    caller: &Caller,
    action: UploadAgentMemoryFileToIpfs,
) -> ApiResult<UploadAgentMemoryFileToIpfsResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Write).await?;
    let path = MemoryPath::parse(&action.path)?;
    let client = crate::hm::HmClient::new(&app.http, &app.config.hm_server_url);
    let published = ipfs::publish(&client, memory.root.clone(), path.clone()).await?;
    Ok(UploadAgentMemoryFileToIpfsResponse {
        extra: Default::default(),
        agent_id: memory.agent_id.into(),
        url: format!("ipfs://{}", published.cid),
        cid: published.cid,
        mime_type: mime::infer(path.as_str()),
        path: path.as_str().to_owned(),
        size: published.size,
    })
}

/// `DownloadAgentMemoryFile {agentId, url, path?}` (writer): see [`download`].
pub(crate) async fn download_agent_memory_file(
    app: &App,
    caller: &Caller,
    action: DownloadAgentMemoryFile,
) -> ApiResult<DownloadAgentMemoryFileResponse> {
    let memory = open(app, caller, &action.agent_id, Need::Write).await?;
    let options = download::Options {
        allow_private_network: app.config.allow_private_network,
        idle_timeout: download::IDLE_TIMEOUT,
        now_ms: app.clock.now_ms(),
        room: crate::quota::room(app, &memory.owner_id).await?,
    };
    let done = download::download(memory.root.clone(), &action.url, action.path.as_deref(), options).await?;
    changed(app, &memory);
    Ok(DownloadAgentMemoryFileResponse {
        extra: Default::default(),
        agent_id: memory.agent_id.into(),
        content_type: done.content_type,
        entry: done.entry,
        final_url: done.final_url,
    })
}
