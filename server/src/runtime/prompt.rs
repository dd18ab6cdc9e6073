//! The system prompt of a pass (docs/runtime.md §1.4) and its `<space>` index (§1.5), in our own
//! words.
//!
//! In order: the agent's own prompt (its blocks as markdown), how to work on the Seed network,
//! how memory works, what the user's own tool actions mean, who takes part (only when the agent
//! has collaborators), and the `<space>` index of tools, memory and triggers. Never a server
//! path: the model addresses its memory as `~/memory/`, and where the server keeps it is none of
//! its business (upstream leaks its data directory through a `cwd` line; we do not).

use std::collections::BTreeMap;
use std::path::Path;

use crate::db::Connection;
use seed_agents_protocol::generated::{AgentDefinition, AgentDefinitionSystemPrompt, AgentMemoryEntryType};

use crate::agents;
use crate::error::ApiResult;
use crate::identities;
use crate::memory;

/// The most characters the `<space>` block may take before it collapses to counts.
pub(crate) const SPACE_BUDGET_CHARS: usize = 2048;
/// Top-level memory entries named in the `<space>` block.
const MEMORY_ENTRIES_SHOWN: usize = 12;
/// Triggers named in the `<space>` block.
const TRIGGERS_SHOWN: usize = 16;

const SEED_INSTRUCTIONS: &str = "\
You work on Seed Hypermedia, a peer-to-peer network of signed documents, comments and profiles.
- Be concise and specific; answer in the language the person writes in.
- Seed resources are documents, comments, profiles (accounts) and their versions, addressed as hm://<account id>/<path>, optionally with ?v=<version> and #<block id>.
- Whenever you mention a resource, link it as a markdown link to its hm:// address.
- Cite a block only with an id you saw in a <!-- id:… --> marker of a document you read; read a document again after it changed before you cite it.
- When a link has a label and a destination, trust the destination.
- Append /:attributes to an address to read only its metadata, and /:directory to list what is below it.
- Read activity: for what happened recently on the network.
- In GFM tables of Seed documents, keep the <!-- id:… --> and <!-- col:… --> comments, escape | as \\| and break lines inside cells with <br>.";

const MEMORY_PARAGRAPH: &str = "\
Your private memory is the folder ~/memory/. It persists across every conversation of this agent and the people you \
work for can browse it. Look at it when a task starts, keep it to small, well-named text files, and change a file by \
reading it and writing it back whole. write ~/memory/<path> with options.fromUrl saves a download; files attached \
to a conversation belong to that conversation only: read attachment:<id>, and keep one with options.fromAttachment.";

const USER_ACTIONS_PARAGRAPH: &str = "\
The people in a conversation can use the same read and write tools you have. Their actions appear as \
<user_action> and <user_action_result> entries: treat them as things that already happened and do not repeat them.";

const MEMBERS_PARAGRAPH: &str = "\
Several people take part in this agent's conversations. Every signed message starts with a <message_sender> block \
naming the account that sent it: that account id is authoritative, a name inside a message is not. Keep people \
apart, address each by their name when you know it, and remember that what one person asks may not be what another \
wants.";

const SIGNING_PARAGRAPH: &str = "\
These are the identities you publish and sign as. People may call one by its name; on the network it is its \
publicKey, the account it signs as. To publish as one, give write hm://… the option signer with that publicKey \
(options.signer); without it you sign as the first identity listed. A document's title is options.name: a # \
heading in the content is only content.";

/// What the prompt is built from.
#[derive(Debug)]
pub(crate) struct Inputs<'a> {
    /// The agent's definition.
    pub definition: &'a AgentDefinition,
    /// The agent's owner.
    pub owner_id: &'a str,
    /// The agent.
    pub agent_id: &'a str,
    /// `<stateDir>/memory`.
    pub memory_root: &'a Path,
    /// Now, in milliseconds since the epoch.
    pub now_ms: i64,
    /// The callables the agent may run here.
    pub callables: &'a [crate::tools::registry::Callable],
}

/// The agent's own prompt as markdown.
pub(crate) fn agent_prompt(definition: &AgentDefinition) -> String {
    match &definition.system_prompt {
        AgentDefinitionSystemPrompt::Array(blocks) => agents::prompt::blocks_to_markdown(blocks),
        AgentDefinitionSystemPrompt::String(text) => text.clone(),
    }
}

/// The whole system prompt (reads the members and triggers, and lists the memory folder).
pub(crate) fn system(conn: &Connection, inputs: &Inputs<'_>) -> ApiResult<String> {
    let mut prompt = agent_prompt(inputs.definition);
    prompt.push_str("\n\n");
    prompt.push_str(SEED_INSTRUCTIONS);
    prompt.push_str(&format!("\nThe current time is: {}", iso_time(inputs.now_ms)));
    prompt.push_str("\n\n");
    prompt.push_str(MEMORY_PARAGRAPH);
    prompt.push_str("\n\n");
    prompt.push_str(USER_ACTIONS_PARAGRAPH);
    let members = members(conn, inputs.owner_id, inputs.agent_id)?;
    if members.len() > 1 {
        prompt.push_str("\n\n");
        prompt.push_str(MEMBERS_PARAGRAPH);
        let list: Vec<serde_json::Value> =
            members.iter().map(|(account, role)| serde_json::json!({"accountId": account, "role": role})).collect();
        let list = serde_json::to_string_pretty(&list).unwrap_or_default();
        prompt.push_str(&format!("\n<conversation_members>\n{list}\n</conversation_members>"));
    }
    prompt.push_str("\n\n");
    prompt.push_str(&space(conn, inputs)?);
    let keys = agents::definition::signing_keys_in_order(inputs.definition);
    let identities = identities::store::granted(conn, inputs.owner_id, &keys)?;
    if !identities.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(&signing_identities(&identities));
    }
    Ok(prompt)
}

/// The `<available_signing_identities>` block (docs/runtime.md §1.4, item 7): each identity the
/// agent may sign with, by profile name and public key id, so the model can map a name someone
/// uses to the key to sign with; then how `write hm://…` takes one.
fn signing_identities(identities: &[identities::store::Granted]) -> String {
    let list: Vec<serde_json::Value> = identities
        .iter()
        .map(|identity| {
            serde_json::json!({
                "name": identity.label.as_deref().unwrap_or(&identity.key),
                "publicKey": identity.account_id,
            })
        })
        .collect();
    let list = serde_json::to_string_pretty(&list).unwrap_or_default();
    format!("<available_signing_identities>\n{list}\n</available_signing_identities>\n{SIGNING_PARAGRAPH}")
}

/// The owner, then accepted collaborators by when they joined: `(account, role)`.
fn members(conn: &Connection, owner_id: &str, agent_id: &str) -> ApiResult<Vec<(String, String)>> {
    let mut members = vec![(owner_id.to_owned(), "owner".to_owned())];
    members.extend(crate::collaborators::store::accepted_by_joining(conn, agent_id)?);
    Ok(members)
}

/// The `<space>` block: the callable tools, the memory folder at a glance, the triggers;
/// collapsed to counts when over [`SPACE_BUDGET_CHARS`].
pub(crate) fn space(conn: &Connection, inputs: &Inputs<'_>) -> ApiResult<String> {
    let memory = memory_line(inputs.memory_root)?;
    let triggers = crate::triggers::store::names(conn, inputs.agent_id)?;
    let active: Vec<&str> =
        triggers.iter().take(TRIGGERS_SHOWN).filter(|(_, on)| *on).map(|(name, _)| name.as_str()).collect();
    let mut trigger_line =
        "triggers/ (read ~/triggers/ to see the automations that start conversations of this agent)".to_owned();
    if !active.is_empty() {
        trigger_line.push_str(&format!(" — active: {}", active.join(" · ")));
    }
    let names: Vec<&str> = inputs.callables.iter().map(|callable| callable.name()).collect();
    let tools_line = if names.is_empty() {
        "tools/ — no callable tools are granted to you".to_owned()
    } else {
        format!("tools/ — callable with call: {} (read ~/tools/<name> for one's input)", names.join(" · "))
    };
    let full = format!("<space>\n{tools_line}\n{memory}\n{trigger_line}\n</space>");
    if full.chars().count() <= SPACE_BUDGET_CHARS {
        return Ok(full);
    }
    let active_count = triggers.iter().filter(|(_, on)| *on).count();
    Ok(format!(
        "<space>\ntools/ — {} callable (read ~/tools/ to list them)\n{}\ntriggers/ — {active_count} active (read \
         ~/triggers/)\n</space>",
        inputs.callables.len(),
        short_memory_line(inputs.memory_root)?
    ))
}

/// `memory/ — N files: a · b/(3) · …` or `memory/ — empty`.
fn memory_line(root: &Path) -> ApiResult<String> {
    let (entries, _) = memory::store::list_all(root)?;
    let files = entries.iter().filter(|entry| entry.type_ == AgentMemoryEntryType::File).count();
    if entries.is_empty() {
        return Ok("memory/ — empty".to_owned());
    }
    // Top-level entries with, for folders, the files below them.
    let mut top: BTreeMap<&str, Option<usize>> = BTreeMap::new();
    for entry in &entries {
        match entry.path.split_once('/') {
            None if entry.type_ == AgentMemoryEntryType::Dir => {
                top.entry(&entry.path).or_insert(Some(0));
            }
            None => {
                top.insert(&entry.path, None);
            }
            Some((folder, _)) => {
                let count = top.entry(folder).or_insert(Some(0));
                if entry.type_ == AgentMemoryEntryType::File {
                    *count = Some(count.unwrap_or(0) + 1);
                }
            }
        }
    }
    let mut shown: Vec<String> = top
        .iter()
        .take(MEMORY_ENTRIES_SHOWN)
        .map(|(name, count)| match count {
            Some(count) => format!("{name}/({count})"),
            None => (*name).to_owned(),
        })
        .collect();
    if top.len() > MEMORY_ENTRIES_SHOWN {
        shown.push("…".to_owned());
    }
    Ok(format!("memory/ — {} {}: {}", files, if files == 1 { "file" } else { "files" }, shown.join(" · ")))
}

fn short_memory_line(root: &Path) -> ApiResult<String> {
    let (entries, _) = memory::store::list_all(root)?;
    let files = entries.iter().filter(|entry| entry.type_ == AgentMemoryEntryType::File).count();
    Ok(if entries.is_empty() {
        "memory/ — empty".to_owned()
    } else {
        format!("memory/ — {files} {} (read ~/memory/)", if files == 1 { "file" } else { "files" })
    })
}

/// `2026-12-03T10:37:06.000Z` for milliseconds since the epoch.
pub(crate) fn iso_time(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// Howard Hinnant's days-to-civil conversion (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_time_matches_known_instants() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_796_294_226_123), "2026-12-03T10:37:06.123Z");
        assert_eq!(iso_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_memory_line_names_top_level_entries_and_counts_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(memory_line(dir.path()).unwrap(), "memory/ — empty");
        std::fs::create_dir_all(dir.path().join("notes/deep")).unwrap();
        std::fs::write(dir.path().join("notes/a.md"), "a").unwrap();
        std::fs::write(dir.path().join("notes/deep/b.md"), "b").unwrap();
        std::fs::write(dir.path().join("todo.md"), "t").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        assert_eq!(memory_line(dir.path()).unwrap(), "memory/ — 3 files: empty/(0) · notes/(2) · todo.md");
        for index in 0..13 {
            std::fs::write(dir.path().join(format!("f{index:02}.md")), "x").unwrap();
        }
        let line = memory_line(dir.path()).unwrap();
        assert!(line.starts_with("memory/ — 16 files: empty/(0) · f00.md"), "{line}");
        assert!(line.ends_with(" · …"), "{line}");
    }
}
