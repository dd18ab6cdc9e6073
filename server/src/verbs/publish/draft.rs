//! The `draft.*` raw commands of `write hm://` (docs/runtime.md §4.3): drafts of Hypermedia
//! documents the agent keeps on this server, per agent, until it publishes them.
//!
//! - `draft.create`: markdown `content`, a name (`options.name`, `options.input.name` or
//!   `metadata.name`) and metadata (`options.metadata` or `options.input.metadata`), to be
//!   published at the address; `options.input.edit` (`true`, or another `hm://` address) makes
//!   publishing update that existing document instead of creating one.
//! - `draft.update` (`options.input.draft` or `draftId`): new content replaces the draft's, new
//!   metadata keys are merged in, the name replaced; the draft is `idle` again.
//! - `draft.get`, `draft.list` (`options.input.limit`, 1–100, 50 by default, newest change first)
//!   and `draft.delete`.
//! - `draft.publish`: signs and publishes the draft as `document` or `update` would, then marks it
//!   `published` with the id and version; from then on it edits that document.
//!
//! Content is parsed as it will be published, so a draft that cannot be published is refused
//! when written. `dryRun` writes nothing (and publishes nothing). The address of commands other
//! than `draft.create` is not used.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Value, wire};
use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::document::{self, Mode};
use super::{Output, Publish, RawInput, markdown, plain_address, store};
use crate::error::{ApiError, ApiResult};
use crate::verbs::record;

/// The most drafts one agent keeps.
pub(super) const MAX_DRAFTS: u32 = 200;
/// Longest draft name, in bytes.
const MAX_NAME: usize = 1024;

/// A `draft.*` command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Command {
    Create,
    Update,
    Get,
    List,
    Delete,
    Publish,
}

impl Command {
    pub(super) fn named(name: &str) -> Option<Command> {
        Some(match name {
            "draft.create" => Command::Create,
            "draft.update" => Command::Update,
            "draft.get" => Command::Get,
            "draft.list" => Command::List,
            "draft.delete" => Command::Delete,
            "draft.publish" => Command::Publish,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Command::Create => "draft.create",
            Command::Update => "draft.update",
            Command::Get => "draft.get",
            Command::List => "draft.list",
            Command::Delete => "draft.delete",
            Command::Publish => "draft.publish",
        }
    }
}

/// What a draft command reports about one draft.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Shown {
    action: &'static str,
    draft_id: String,
    name: String,
    #[serde(serialize_with = "crate::verbs::json_field")]
    metadata: Json,
    target: String,
    edit: bool,
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    markdown: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    published_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    published_version: Option<String>,
    created_at: i64,
    updated_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
}

impl Shown {
    fn of(command: Command, draft: &store::Draft, markdown: bool) -> Shown {
        Shown {
            action: command.name(),
            draft_id: draft.id.clone(),
            name: draft.name.clone(),
            metadata: serde_json::from_str(&draft.metadata_json).unwrap_or_else(|_| Json::Object(Map::new())),
            target: draft.target.clone(),
            edit: draft.edit,
            status: draft.status.clone(),
            markdown: markdown.then(|| draft.content.clone()),
            published_id: draft.published_id.clone(),
            published_version: draft.published_version.clone(),
            created_at: draft.created_at,
            updated_at: draft.updated_at,
            dry_run: None,
        }
    }
}

/// Runs `command` for the write at `raw` with `content`.
pub(super) async fn run(
    publish: &Publish<'_, '_>,
    command: Command,
    raw: &str,
    content: Option<&str>,
) -> ApiResult<Value> {
    match command {
        Command::Create => create(publish, raw, content).await,
        Command::Update => update(publish, content).await,
        Command::Get => {
            let draft = load(publish).await?;
            record(format!("Draft {} ({}).", draft.id, draft.name), &Shown::of(command, &draft, true))
        }
        Command::List => list(publish).await,
        Command::Delete => delete(publish).await,
        Command::Publish => publish_draft(publish).await,
    }
}

async fn create(publish: &Publish<'_, '_>, raw: &str, content: Option<&str>) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let input = publish.raw_input()?;
    let content = content.unwrap_or_default();
    markdown::blocks(content)?;
    let metadata = metadata(publish, &input, Map::new())?;
    let Some(name) = metadata.get("name").and_then(Json::as_str).map(str::to_owned) else {
        return Err(ApiError::invalid(
            "draft.create requires a name: pass options.name (or options.metadata.name, or options.input.name)",
        ));
    };
    let (target, edit) = match input.0.and_then(|input| input.get("edit")) {
        None | Some(Ipld::Bool(false)) => (address.canonical(), false),
        Some(Ipld::Bool(true)) => (address.canonical(), true),
        Some(Ipld::String(other)) => (plain_address(other.trim())?.canonical(), true),
        Some(_) => return Err(ApiError::invalid("options.input.edit must be true or an hm:// document address")),
    };
    if !edit && address.path.is_empty() {
        return Err(ApiError::invalid("draft.create drafts a document at hm://<account>/<path>; give a path"));
    }
    let now = publish.now;
    let draft = store::Draft {
        id: uuid::Uuid::now_v7().to_string(),
        name,
        content: content.to_owned(),
        metadata_json: Json::Object(metadata).to_string(),
        target,
        edit,
        status: "idle".to_owned(),
        published_id: None,
        published_version: None,
        created_at: now,
        updated_at: now,
    };
    let mut shown = Shown::of(Command::Create, &draft, false);
    if publish.dry_run {
        shown.dry_run = Some(true);
        return record(format!("Dry run: draft {} would be saved; nothing was saved.", draft.name), &shown);
    }
    let context = publish.context;
    let (owner, agent, row) = (context.owner_id.clone(), context.agent_id.clone(), draft.clone());
    context
        .app
        .db
        .write(move |conn| {
            if store::count(conn, &owner, &agent)? >= MAX_DRAFTS {
                return Err(ApiError::conflict(format!(
                    "This agent keeps {MAX_DRAFTS} drafts, the most allowed; publish or delete one first"
                )));
            }
            store::insert(conn, &owner, &agent, &row)
        })
        .await?;
    record(format!("Saved draft {} ({}) for {}.", draft.name, draft.id, draft.target), &shown)
}

async fn update(publish: &Publish<'_, '_>, content: Option<&str>) -> ApiResult<Value> {
    let mut draft = load(publish).await?;
    let input = publish.raw_input()?;
    if let Some(content) = content {
        markdown::blocks(content)?;
        draft.content = content.to_owned();
    }
    let previous: Map<String, Json> = serde_json::from_str(&draft.metadata_json).unwrap_or_default();
    let metadata = metadata(publish, &input, previous)?;
    if let Some(name) = metadata.get("name").and_then(Json::as_str) {
        draft.name = name.to_owned();
    }
    draft.metadata_json = Json::Object(metadata).to_string();
    match input.0.and_then(|input| input.get("edit")) {
        None => {}
        Some(Ipld::Bool(edit)) => draft.edit = *edit,
        Some(Ipld::String(other)) => {
            draft.target = plain_address(other.trim())?.canonical();
            draft.edit = true;
        }
        Some(_) => return Err(ApiError::invalid("options.input.edit must be true or an hm:// document address")),
    }
    draft.status = "idle".to_owned();
    draft.updated_at = publish.now;
    let mut shown = Shown::of(Command::Update, &draft, false);
    if publish.dry_run {
        shown.dry_run = Some(true);
        return record(format!("Dry run: draft {} would be revised; nothing was saved.", draft.id), &shown);
    }
    save(publish, draft.clone()).await?;
    record(format!("Revised draft {} ({}).", draft.name, draft.id), &shown)
}

async fn list(publish: &Publish<'_, '_>) -> ApiResult<Value> {
    let limit = match publish.raw_input()?.0.and_then(|input| input.get("limit")) {
        None => 50,
        Some(Ipld::Integer(limit)) if (1..=100).contains(limit) => u32::try_from(*limit).unwrap_or(50),
        Some(_) => return Err(ApiError::invalid("options.input.limit must be an integer from 1 to 100")),
    };
    let context = publish.context;
    let (owner, agent) = (context.owner_id.clone(), context.agent_id.clone());
    let drafts = context.app.db.read(move |conn| store::list(conn, &owner, &agent, limit)).await?;
    #[derive(Serialize)]
    struct Listing {
        action: &'static str,
        drafts: Vec<Shown>,
    }
    let shown: Vec<Shown> = drafts.iter().map(|draft| Shown::of(Command::List, draft, false)).collect();
    let summary = format!("{}.", crate::verbs::plural(shown.len(), "draft", "drafts"));
    record(summary, &Listing { action: Command::List.name(), drafts: shown })
}

async fn delete(publish: &Publish<'_, '_>) -> ApiResult<Value> {
    let draft = load(publish).await?;
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Deleted {
        action: &'static str,
        draft_id: String,
        deleted: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        dry_run: Option<bool>,
    }
    if publish.dry_run {
        let output =
            Deleted { action: Command::Delete.name(), draft_id: draft.id, deleted: false, dry_run: Some(true) };
        return record("Dry run: the draft would be deleted; nothing was deleted.".to_owned(), &output);
    }
    let context = publish.context;
    let (owner, agent, id) = (context.owner_id.clone(), context.agent_id.clone(), draft.id.clone());
    let deleted = context.app.db.write(move |conn| store::delete(conn, &owner, &agent, &id)).await?;
    let output = Deleted { action: Command::Delete.name(), draft_id: draft.id.clone(), deleted, dry_run: None };
    record(format!("Deleted draft {} ({}).", draft.name, draft.id), &output)
}

async fn publish_draft(publish: &Publish<'_, '_>) -> ApiResult<Value> {
    let mut draft = load(publish).await?;
    let address = plain_address(&draft.target)?;
    let blocks = markdown::blocks(&draft.content)?;
    let metadata: Json = serde_json::from_str(&draft.metadata_json).unwrap_or_else(|_| Json::Object(Map::new()));
    let attributes = document::attributes(None, Some(&wire::json_to_ipld(&metadata)))?;
    let mode = if draft.edit { Mode::Update } else { Mode::Create };
    let built = document::build(publish, &address, Some(blocks), attributes, mode).await?;
    let id = address.canonical();
    let output = Output {
        action: Command::Publish.name(),
        id: Some(id.clone()),
        version: Some(built.version.clone()),
        draft_id: Some(draft.id.clone()),
        ..Output::default()
    };
    let what = if built.updated { "updated" } else { "created" };
    let published =
        publish.finish(&id, built.blobs, output, format!("Published draft {} to {id} ({what}).", draft.id)).await?;
    if !publish.dry_run {
        draft.status = "published".to_owned();
        draft.published_id = Some(id);
        draft.published_version = Some(built.version);
        draft.edit = true;
        draft.updated_at = publish.now;
        save(publish, draft).await?;
    }
    Ok(published)
}

/// The draft `options.input.draft` (or `draftId`) names; 404 when the agent has none such.
async fn load(publish: &Publish<'_, '_>) -> ApiResult<store::Draft> {
    let id = publish
        .raw_input()?
        .text(&["draft", "draftId"], "Draft ID", MAX_NAME)?
        .ok_or_else(|| ApiError::invalid("Draft ID is required: pass options.input.draft"))?
        .to_owned();
    let context = publish.context;
    let (owner, agent, lookup) = (context.owner_id.clone(), context.agent_id.clone(), id.clone());
    context
        .app
        .db
        .read(move |conn| store::get(conn, &owner, &agent, &lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Draft {id} not found")))
}

async fn save(publish: &Publish<'_, '_>, draft: store::Draft) -> ApiResult<()> {
    let context = publish.context;
    let (owner, agent, id) = (context.owner_id.clone(), context.agent_id.clone(), draft.id.clone());
    let saved = context.app.db.write(move |conn| store::update(conn, &owner, &agent, &draft)).await?;
    if saved { Ok(()) } else { Err(ApiError::not_found(format!("Draft {id} not found"))) }
}

/// `previous` with the given metadata (`options.metadata`, else `options.input.metadata`) merged
/// in and the name (`options.name`, else `options.input.name`) set; values must be scalars.
fn metadata(
    publish: &Publish<'_, '_>,
    input: &RawInput<'_>,
    previous: Map<String, Json>,
) -> ApiResult<Map<String, Json>> {
    let given = publish.option("metadata").or_else(|| input.0.and_then(|input| input.get("metadata")));
    let name = publish.name_option("Draft name", MAX_NAME)?.map(|name| Ipld::String(name.to_owned()));
    let mut merged = previous;
    for (key, value) in document::attributes(name.as_ref(), given)? {
        let value = serde_json::to_value(Value(value)).map_err(ApiError::internal)?;
        merged.insert(key.join("."), value);
    }
    Ok(merged)
}
