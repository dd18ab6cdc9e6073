//! `~/triggers` for the agent and its writers (docs/runtime.md §4.2–§4.3, docs/protocol.md §E.1).
//!
//! `read ~/triggers` lists the agent's triggers with the write contract; `read
//! ~/triggers/<name or id>` shows one with its newest firings (an unknown name answers the
//! listing, an ambiguous one 400 naming the ids). `write ~/triggers/<name or id>` creates or
//! replaces a trigger from JSON content `{source, prompt, enabled?, continuation?}` (or
//! `options.trigger`), through the same normalisers as the signed actions; the name in the
//! address wins. Guards meant for explicit requests only: changing an existing trigger's kind of
//! source needs `options.replaceSource: true`, an interval under 5 minutes needs
//! `options.frequentSchedule: true`. `options.dryRun: true` validates and saves nothing.
//! `options.delete: true` deletes. Webhook sources are refused here: their secret would land in
//! the session log, so a person creates them with `CreateAgentTrigger`.

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentScheduleTrigger, AgentTriggerInfo, AgentTriggerInfoPrompt, AgentTriggerInput, AgentTriggerSource,
    IntervalScheduleUnit,
};
use seed_agents_protocol::{Value, wire};
use serde::Serialize;

use super::{Context, Input, plural, record};
use crate::bus::ChangeReason;
use crate::error::{ApiError, ApiResult};
use crate::triggers::{actions, store, validate};

/// The options `write ~/triggers/<name>` understands.
/// The matches a dry run lists (the count covers them all).
const DRY_RUN_SHOWN: usize = 10;

const WRITE_OPTIONS: &[&str] = &["delete", "dryRun", "replaceSource", "frequentSchedule", "trigger"];
/// The shortest interval an agent may set without `frequentSchedule`, in minutes.
pub(super) const MIN_INTERVAL_MINUTES: i64 = 5;
/// Firings `read ~/triggers/<name>` shows.
const RECENT_FIRINGS: usize = 5;

/// What `write ~/triggers/<name>` content must be, and every source shape.
const CONTRACT: &str = "write ~/triggers/<name> with JSON content {source, prompt, enabled?, continuation?} creates \
the trigger or replaces it. prompt: markdown text. enabled: default true. continuation: {kind: 'newThread'} (the \
default), {kind: 'wake', signal, runId?, payload?} to resume a parked run of this agent, {kind: 'script', script, \
input?, onFailure?: 'none'|'thread'} to run a workflow script (it receives {input, activity}), or {kind: 'tool', \
tool, input?, onFailure?} to make one tool call, instead of starting a thread. source, one of:\n\
- {type: 'user-mention', mentionedAccounts: [accountId], resourcePrefix?: 'hm://<account>[/path]'}\n\
- {type: 'comment-reply', repliedToAccounts: [accountId], resourcePrefix?}\n\
- {type: 'document-author-comment', documentAuthors: [accountId], resourcePrefix?}\n\
- {type: 'document-comment', resource: 'hm://<account>[/path]', author?}\n\
- {type: 'site-update', resourcePrefix: 'hm://<account>[/path]', eventTypes?: ['doc-update', 'comment', \
'citation', 'capability', 'contact']}\n\
- {type: 'activity', conditions: [{id?, source: one of the five above}]} (1 to 32)\n\
- {type: 'schedule', schedule: {kind: 'interval', every, unit: 'minutes'|'hours'} | {kind: 'weekly', daysOfWeek: \
[0-6], timeOfDay: 'HH:MM', timezone: 'Area/City'} | {kind: 'once', runAt: epochMs}}\n\
- {type: 'run-completed', agentId?, status?: 'succeeded'|'failed'|'canceled', titleMatch?}\n\
Options: dryRun (validate and, for an activity source, replay recent activity; save nothing), replaceSource (change an existing trigger's kind of source), \
frequentSchedule (an interval under 5 minutes), delete. Use replaceSource and frequentSchedule only when the user \
asked for it. Webhook triggers are created by a person, not here.";

/// `read ~/triggers` (`None`) or `read ~/triggers/<name or id>`.
pub(super) async fn read(context: &Context<'_>, name: Option<&str>) -> ApiResult<Value> {
    let agent = context.agent_id.clone();
    let triggers = context.app.db.read(move |conn| store::list(conn, &agent)).await?;
    let Some(name) = name else { return listing(&triggers, None) };
    let Some(trigger) = find(&triggers, name)? else {
        return listing(&triggers, Some(format!("No trigger named {name}.")));
    };
    let id = trigger.id.clone();
    let firings = context.app.db.read(move |conn| store::firings(conn, &id)).await?;
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Firing {
        firing_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        status: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        fired_at: i64,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Shown<'a> {
        id: &'a str,
        name: &'a str,
        enabled: bool,
        source: &'a AgentTriggerSource,
        prompt: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        continuation: Option<&'a seed_agents_protocol::generated::TriggerContinuation>,
        created_at: i64,
        updated_at: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_fired_at: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_error: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        merged_into: Option<&'a str>,
        recent_firings: Vec<Firing>,
    }
    let recent_firings = firings
        .into_iter()
        .take(RECENT_FIRINGS)
        .map(|firing| Firing {
            firing_id: firing.id.into(),
            session_id: firing.session_id.map(Into::into),
            status: firing.status,
            error: firing.error,
            fired_at: firing.created_at,
        })
        .collect();
    let shown = Shown {
        id: &trigger.id,
        name: &trigger.name,
        enabled: trigger.enabled,
        source: &trigger.source,
        prompt: prompt_markdown(trigger),
        continuation: trigger.continuation.as_ref(),
        created_at: trigger.created_at,
        updated_at: trigger.updated_at,
        last_fired_at: trigger.last_fired_at,
        last_error: trigger.last_error.as_deref(),
        merged_into: trigger.merged_into.as_deref(),
        recent_firings,
    };
    let state = if trigger.enabled { "enabled" } else { "disabled" };
    record(format!("Trigger {} ({}, {state}).", trigger.name, validate::kind(&trigger.source)), &shown)
}

fn prompt_markdown(trigger: &AgentTriggerInfo) -> String {
    match &trigger.prompt {
        AgentTriggerInfoPrompt::String(text) => text.clone(),
        AgentTriggerInfoPrompt::Array(blocks) => crate::agents::prompt::blocks_to_markdown(blocks),
    }
}

/// The trigger named (or with the id) `name`; 400 naming the ids when several share the name.
fn find<'a>(triggers: &'a [AgentTriggerInfo], name: &str) -> ApiResult<Option<&'a AgentTriggerInfo>> {
    if let Some(trigger) = triggers.iter().find(|trigger| trigger.id == name) {
        return Ok(Some(trigger));
    }
    let named: Vec<&AgentTriggerInfo> = triggers.iter().filter(|trigger| trigger.name == name).collect();
    match named.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        several => Err(ApiError::invalid(format!(
            "Several triggers are named {name}; address one by id: {}",
            several.iter().map(|trigger| trigger.id.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn listing(triggers: &[AgentTriggerInfo], summary: Option<String>) -> ApiResult<Value> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Listed<'a> {
        id: &'a str,
        name: &'a str,
        enabled: bool,
        source: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_fired_at: Option<i64>,
    }
    #[derive(Serialize)]
    struct Listing<'a> {
        triggers: Vec<Listed<'a>>,
        contract: &'static str,
    }
    let listed: Vec<Listed<'_>> = triggers
        .iter()
        .map(|trigger| Listed {
            id: &trigger.id,
            name: &trigger.name,
            enabled: trigger.enabled,
            source: validate::kind(&trigger.source),
            last_fired_at: trigger.last_fired_at,
        })
        .collect();
    let active = triggers.iter().filter(|trigger| trigger.enabled).count();
    let summary =
        summary.unwrap_or_else(|| format!("{}, {active} active.", plural(triggers.len(), "trigger", "triggers")));
    record(summary, &Listing { triggers: listed, contract: CONTRACT })
}

/// `write ~/triggers/<name or id>` (see the module docs).
pub(super) async fn write(context: &Context<'_>, name: &str, input: &Input<'_>) -> ApiResult<Value> {
    let options = input.known_options("write ~/triggers/<name>", WRITE_OPTIONS)?;
    let flag = |key: &str| options.and_then(|options| options.get(key)) == Some(&Ipld::Bool(true));
    let agent = context.agent_id.clone();
    let triggers = context.app.db.read(move |conn| store::list(conn, &agent)).await?;
    let existing = find(&triggers, name)?.cloned();
    if flag("delete") {
        return delete(context, name, existing).await;
    }
    let content = match (input.get("content"), options.and_then(|options| options.get("trigger"))) {
        (Some(Ipld::String(content)), _) => serde_json::from_str::<Value>(content)
            .map_err(|_| ApiError::invalid(format!("Trigger content is not JSON. {CONTRACT}")))?,
        (_, Some(trigger)) => Value(trigger.clone()),
        _ => return Err(ApiError::invalid(format!("Trigger content is required. {CONTRACT}"))),
    };
    let mut fields = match content.0 {
        Ipld::Map(fields) => fields,
        _ => return Err(ApiError::invalid(format!("Trigger content must be a JSON object. {CONTRACT}"))),
    };
    let name = existing.as_ref().map_or(name, |trigger| trigger.name.as_str()).to_owned();
    fields.insert("name".to_owned(), Ipld::String(name.clone()));
    let mut fields = Ipld::Map(fields);
    crate::triggers::validate::legacy_mentions(&mut fields);
    let trigger_input: AgentTriggerInput = wire::from_ipld(fields)
        .map_err(|error| ApiError::invalid(format!("Trigger content does not fit: {error}. {CONTRACT}")))?;
    let trigger = actions::normalize_input(&trigger_input)?;
    if let AgentTriggerSource::WebhookSource(_) = trigger.source {
        return Err(ApiError::invalid(
            "Webhook triggers are created by a person with CreateAgentTrigger (their secret must not enter the conversation)",
        ));
    }
    if let Some(existing) = &existing
        && validate::kind(&existing.source) != validate::kind(&trigger.source)
        && !flag("replaceSource")
    {
        return Err(ApiError::invalid(format!(
            "Trigger {} watches a {} source; replacing it with a {} source needs options.replaceSource: true (only when the user asked for it)",
            existing.name,
            validate::kind(&existing.source),
            validate::kind(&trigger.source)
        )));
    }
    if let Some(minutes) = interval_minutes(&trigger.source)
        && minutes < MIN_INTERVAL_MINUTES
        && !flag("frequentSchedule")
    {
        return Err(ApiError::invalid(format!(
            "An interval under {MIN_INTERVAL_MINUTES} minutes needs options.frequentSchedule: true (only when the user asked for it)"
        )));
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Written<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        name: &'a str,
        source: &'a AgentTriggerSource,
        enabled: bool,
        dry_run: bool,
        created: bool,
        /// For a dry run of an activity source: what recent activity would have fired, newest first.
        #[serde(skip_serializing_if = "Option::is_none")]
        would_fire: Option<Vec<WouldFire>>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct WouldFire {
        summary: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        event_at: Option<i64>,
    }
    if flag("dryRun") {
        let mut written = Written {
            id: existing.as_ref().map(|trigger| trigger.id.as_str()),
            name: &name,
            source: &trigger.source,
            enabled: trigger.enabled,
            dry_run: true,
            created: false,
            would_fire: None,
        };
        let mut summary = format!("Trigger {name} is valid; nothing was saved.");
        if crate::triggers::activity::matching::is_activity_source(&trigger.source) {
            use crate::triggers::activity::replay::{REPLAY_EVENTS, replay};
            let hm = crate::hm::HmClient::new(&context.app.http, &context.app.config.hm_server_url);
            let settings = crate::triggers::activity::FeedSettings::default();
            match replay(&hm, &context.owner_id, &trigger.source, REPLAY_EVENTS, &settings).await {
                Ok(matches) => {
                    summary.push_str(&format!(
                        " Of the {REPLAY_EVENTS} most recent activity events, {} would have fired it.",
                        matches.len()
                    ));
                    let shown = matches.into_iter().take(DRY_RUN_SHOWN);
                    let shown = shown.map(|found| WouldFire { summary: found.summary, event_at: found.event_at_ms });
                    written.would_fire = Some(shown.collect());
                }
                // The trigger is still valid; only the replay is missing, and the model hears why.
                Err(error) => summary.push_str(&format!(" Recent activity could not be replayed: {}", error.message())),
            }
        }
        return record(summary, &written);
    }
    let (app, owner, agent, now) =
        (context.app, context.owner_id.clone(), context.agent_id.clone(), context.app.clock.now_ms());
    let saved = trigger.clone();
    let previous = existing.clone();
    let id = app
        .db
        .write(move |conn: &Connection| match &previous {
            Some(previous) => {
                // Re-read on the writer: the trigger may have changed or gone since.
                let current = store::load(conn, &previous.id)?.ok_or_else(|| ApiError::not_found(store::NOT_FOUND))?;
                if current.merged_into.is_some() {
                    return Err(ApiError::invalid(actions::MERGED));
                }
                actions::replace(conn, &current.id, &saved, current.updated_at, now)?;
                Ok(current.id.into_string())
            }
            None => actions::insert_row(conn, &owner, &agent, &saved, now),
        })
        .await?;
    let reason = if existing.is_some() { ChangeReason::TriggerUpdated } else { ChangeReason::TriggerCreated };
    app.bus.account_change(&context.owner_id, reason, Some(&context.agent_id), None);
    let verb = if existing.is_some() { "Updated" } else { "Created" };
    let written = Written {
        id: Some(&id),
        name: &name,
        source: &trigger.source,
        enabled: trigger.enabled,
        dry_run: false,
        created: existing.is_none(),
        would_fire: None,
    };
    record(format!("{verb} trigger {name} ({}).", validate::kind(&trigger.source)), &written)
}

async fn delete(context: &Context<'_>, name: &str, existing: Option<AgentTriggerInfo>) -> ApiResult<Value> {
    #[derive(Serialize)]
    struct Deleted<'a> {
        name: &'a str,
        deleted: bool,
    }
    let Some(existing) = existing else {
        return record(format!("No trigger named {name}."), &Deleted { name, deleted: false });
    };
    let id = existing.id.clone();
    context.app.db.write(move |conn| crate::triggers::store::delete(conn, &id)).await?;
    context.app.bus.account_change(&context.owner_id, ChangeReason::TriggerDeleted, Some(&context.agent_id), None);
    record(format!("Deleted trigger {}.", existing.name), &Deleted { name: &existing.name, deleted: true })
}

/// An interval schedule's length in minutes.
fn interval_minutes(source: &AgentTriggerSource) -> Option<i64> {
    match source {
        AgentTriggerSource::ScheduleSource(schedule) => match &schedule.schedule {
            AgentScheduleTrigger::IntervalSchedule(interval) => Some(match interval.unit {
                IntervalScheduleUnit::Minutes => interval.every,
                IntervalScheduleUnit::Hours => interval.every.saturating_mul(60),
            }),
            _ => None,
        },
        _ => None,
    }
}
