//! `~/self`: what the agent may know about its own configuration, as far as this server keeps it
//! (its triggers in brief; `~/triggers` has them in full).

use std::collections::BTreeMap;

use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{AgentDefinitionSystemPrompt, AgentMemoryEntryType, ReasoningLevel};
use serde::Serialize;

use super::{Context, plural, record};
use crate::agents;
use crate::error::ApiResult;
use crate::memory::download::blocking;
use crate::memory::store;

#[derive(Serialize)]
#[serde(untagged)]
enum Provider {
    Known { id: String, name: String, r#type: String },
    Missing(String),
}

#[derive(Serialize)]
struct Grants {
    #[serde(rename = "callableTools")]
    callable_tools: Vec<String>,
    publish: bool,
}

#[derive(Serialize)]
struct Memory {
    #[serde(rename = "totalFiles")]
    total_files: usize,
    #[serde(rename = "topLevel")]
    top_level: Vec<String>,
}

#[derive(Serialize)]
struct TriggerBrief {
    id: String,
    name: String,
    enabled: bool,
    source: &'static str,
}

#[derive(Serialize)]
struct SelfSummary<'a> {
    #[serde(rename = "agentId")]
    agent_id: &'a str,
    name: &'a str,
    model: &'a str,
    #[serde(rename = "modelProvider")]
    model_provider: Provider,
    #[serde(rename = "reasoningLevel", skip_serializing_if = "Option::is_none")]
    reasoning_level: Option<ReasoningLevel>,
    #[serde(rename = "systemPrompt")]
    system_prompt: String,
    grants: Grants,
    #[serde(rename = "signingKeys", skip_serializing_if = "Vec::is_empty")]
    signing_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a BTreeMap<String, Value>>,
    triggers: Vec<TriggerBrief>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<Memory>,
    #[serde(rename = "sessionCount")]
    session_count: i64,
    guidance: &'static str,
}

const GUIDANCE: &str = "Memory lives under ~/memory/: read and write it freely.\n\
Read another conversation of this agent with thread:<id>.\n\
The definition (name, model, system prompt, grants, signing keys) is edited by the user; the agent cannot change it.";

pub(super) async fn read(context: &Context<'_>) -> ApiResult<Value> {
    let definition = &context.definition;
    let (owner, provider_name, agent_id) =
        (context.owner_id.clone(), definition.model_provider.clone(), context.agent_id.clone());
    let (provider, session_count, triggers) =
        context
            .app
            .db
            .read(move |conn| {
                // `definition.modelProvider` names the provider (as CreateAgent checked it).
                let provider = crate::providers::store::brief(conn, &owner, &provider_name)?
                    .map(|brief| Provider::Known { id: brief.id, name: brief.name, r#type: brief.type_ });
                let sessions = crate::agents::store::session_count(conn, &agent_id)?;
                let triggers = crate::triggers::store::list(conn, &agent_id)?
                    .into_iter()
                    .map(|trigger| TriggerBrief {
                        source: crate::triggers::validate::kind(&trigger.source),
                        id: trigger.id.into(),
                        name: trigger.name,
                        enabled: trigger.enabled,
                    })
                    .collect::<Vec<_>>();
                Ok((provider, sessions, triggers))
            })
            .await?;
    let root = context.memory_root.clone();
    // A memory that cannot be listed leaves the field out rather than failing the read.
    let memory = blocking(move || store::list_all(&root)).await.ok().map(|(entries, _)| {
        let files: Vec<&str> = entries
            .iter()
            .filter(|entry| entry.type_ == AgentMemoryEntryType::File)
            .map(|entry| entry.path.as_str())
            .collect();
        let top_level = entries
            .iter()
            .filter(|entry| !entry.path.contains('/'))
            .map(|entry| match entry.type_ {
                AgentMemoryEntryType::Dir => {
                    let prefix = format!("{}/", entry.path);
                    let count = files.iter().filter(|file| file.starts_with(&prefix)).count();
                    format!("{}/ ({count} files)", entry.path)
                }
                _ => entry.path.clone(),
            })
            .collect();
        Memory { total_files: files.len(), top_level }
    });
    let system_prompt = match &definition.system_prompt {
        AgentDefinitionSystemPrompt::String(text) => text.clone(),
        AgentDefinitionSystemPrompt::Array(blocks) => agents::prompt::blocks_to_markdown(blocks),
    };
    let signing_keys = match (&definition.signing_keys, &definition.signing_key) {
        (Some(keys), _) => keys.clone(),
        (None, Some(key)) => vec![key.clone()],
        (None, None) => Vec::new(),
    };
    let summary = format!(
        "You are \"{}\" ({}) with {} and {}.",
        definition.name,
        definition.model,
        plural(triggers.len(), "trigger", "triggers"),
        plural(usize::try_from(session_count).unwrap_or(0), "conversation", "conversations")
    );
    let output = SelfSummary {
        agent_id: &context.agent_id,
        name: &definition.name,
        model: &definition.model,
        model_provider: provider.unwrap_or_else(|| Provider::Missing(definition.model_provider.clone())),
        reasoning_level: definition.reasoning_level,
        system_prompt,
        grants: Grants { callable_tools: Vec::new(), publish: super::publish::publish_granted(definition) },
        signing_keys,
        metadata: definition.metadata.as_ref(),
        triggers,
        memory,
        session_count,
        guidance: GUIDANCE,
    };
    record(summary, &output)
}
