//! Normalising what a client sends as a trigger (docs/protocol.md §E.1): the name, the prompt, the
//! continuation and every kind of source, with the protocol's limits. Everything here is pure, so
//! the CRUD actions and the agent's `write ~/triggers/<name>` share it; it runs before any write.

use std::collections::BTreeSet;

use seed_agents_protocol::generated::{
    ActivitySource, AgentActivityCondition, AgentActivitySource, AgentDefinitionSystemPrompt, AgentPromptBlock,
    AgentScheduleTrigger, AgentTriggerSource, CommentReplySource, DocumentAuthorCommentSource, DocumentCommentSource,
    IntervalSchedule, NewThreadContinuation, OnceSchedule, RunCompletedSource, ScheduleSource, ScriptContinuation,
    SiteUpdateSource, ToolContinuation, TriggerContinuation, UserMentionSource, WakeContinuation, WeeklySchedule,
};

use crate::agents::prompt;
use crate::error::{ApiError, ApiResult};
use crate::validate::{MAX_NAME_BYTES, bounded_string, js_trim};

/// The longest document address or prefix, in UTF-8 bytes.
pub(crate) const MAX_RESOURCE_BYTES: usize = 2048;
/// The most accounts a source watches, and the most event types of a `site-update` source.
pub(crate) const MAX_LIST: usize = 32;
/// The most conditions of a compound (`activity`) source.
pub(crate) const MAX_CONDITIONS: usize = 32;
/// The largest `once` time: JavaScript's largest safe integer.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;
/// `site-update` event types, with the legacy aliases upstream still accepts.
const EVENT_TYPES: &[&str] =
    &["doc-update", "comment", "citation", "capability", "contact", "document-update", "change", "ref"];

/// A `user-mention` source's legacy singular `mentionedAccount`, rewritten (docs/protocol.md §E.1);
/// typed decoding of the trigger actions does it too.
pub(crate) use seed_agents_server_core::action::legacy_mentions;

/// A trigger checked and ready to store.
#[derive(Debug, Clone)]
pub(crate) struct Normalized {
    /// The name.
    pub name: String,
    /// Whether it fires.
    pub enabled: bool,
    /// The source.
    pub source: AgentTriggerSource,
    /// The prompt.
    pub prompt: Prompt,
    /// The continuation.
    pub continuation: Option<TriggerContinuation>,
}

/// A trigger's prompt, normalised: what is stored and what the model is told.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prompt {
    /// The rendered markdown (for text prompts: the trimmed text as sent).
    pub markdown: String,
    /// The Seed blocks, when the prompt was sent as blocks.
    pub blocks: Option<Vec<AgentPromptBlock>>,
}

/// The name: trimmed, required, at most 256 bytes.
pub(crate) fn name(name: &str) -> ApiResult<String> {
    bounded_string(name, "Trigger name", MAX_NAME_BYTES)
}

/// The prompt, given as text or blocks (the generated prompt unions share this shape).
pub(crate) fn prompt(input: Option<AgentDefinitionSystemPrompt>) -> ApiResult<Prompt> {
    let input = input.ok_or_else(|| ApiError::invalid("Trigger prompt is required"))?;
    let blocks = prompt::normalize_prompt(&input, "Trigger prompt")?;
    Ok(match input {
        AgentDefinitionSystemPrompt::String(text) => Prompt { markdown: js_trim(&text).to_owned(), blocks: None },
        AgentDefinitionSystemPrompt::Array(_) => {
            Prompt { markdown: prompt::blocks_to_markdown(&blocks), blocks: Some(blocks) }
        }
    })
}

/// The most tool names a new-thread continuation narrows to.
pub(crate) const MAX_THREAD_TOOLS: usize = 64;
/// The largest `input` of a `tool` or `script` continuation (canonical CBOR), like the activity
/// a firing stores beside it.
pub(crate) const MAX_INPUT_BYTES: usize = 256 * 1024;

/// The continuation: a new thread, a `wake` (signal and run id trimmed, each required when
/// present and at most 256 bytes; the payload is kept as sent, like upstream, within the
/// envelope's own size cap), a `script` (linted as `delegate {script}` is: 400 `Workflow source
/// rejected:`) or a `tool` (its name trimmed, required, at most 256 bytes: a verb or a callable,
/// checked against the agent's grants when it fires, since grants change). A `script` or `tool`
/// input is kept as sent, at most [`MAX_INPUT_BYTES`]; `onFailure` is `none` (the default) or
/// `thread`.
///
/// A new thread's `systemPrompt` is trimmed and checked like a trigger prompt (required when
/// present, at most 64 KiB); its `tools` are trimmed, non-empty names (at most
/// [`MAX_THREAD_TOOLS`], duplicates dropped, order kept).
pub(crate) fn continuation(continuation: Option<TriggerContinuation>) -> ApiResult<Option<TriggerContinuation>> {
    match continuation {
        None => Ok(None),
        Some(TriggerContinuation::NewThreadContinuation(new_thread)) => {
            let system_prompt = match &new_thread.system_prompt {
                Some(text) => {
                    let input = AgentDefinitionSystemPrompt::String(text.clone());
                    prompt::normalize_prompt(&input, "Trigger system prompt")?;
                    Some(js_trim(text).to_owned())
                }
                None => None,
            };
            let tools = new_thread.tools.as_ref().map(|tools| thread_tools(tools)).transpose()?;
            Ok(Some(TriggerContinuation::NewThreadContinuation(NewThreadContinuation {
                system_prompt,
                tools,
                ..new_thread
            })))
        }
        Some(TriggerContinuation::WakeContinuation(wake)) => {
            Ok(Some(TriggerContinuation::WakeContinuation(WakeContinuation {
                extra: Default::default(),
                signal: bounded_string(&wake.signal, "Trigger signal", MAX_NAME_BYTES)?,
                run_id: wake
                    .run_id
                    .map(|run| bounded_string(&run, "Trigger run ID", MAX_NAME_BYTES).map(Into::into))
                    .transpose()?,
                payload: wake.payload,
            })))
        }
        Some(TriggerContinuation::ScriptContinuation(script)) => {
            crate::workflows::source::check(&script.script)?;
            continuation_input(script.input.as_ref())?;
            Ok(Some(TriggerContinuation::ScriptContinuation(ScriptContinuation {
                extra: Default::default(),
                ..script
            })))
        }
        Some(TriggerContinuation::ToolContinuation(tool)) => {
            continuation_input(tool.input.as_ref())?;
            Ok(Some(TriggerContinuation::ToolContinuation(ToolContinuation {
                extra: Default::default(),
                tool: bounded_string(&tool.tool, "Trigger tool", MAX_NAME_BYTES)?,
                ..tool
            })))
        }
    }
}

/// A `tool` or `script` continuation's input: any value up to [`MAX_INPUT_BYTES`].
fn continuation_input(input: Option<&seed_agents_protocol::Value>) -> ApiResult<()> {
    let Some(input) = input else { return Ok(()) };
    let bytes = seed_agents_protocol::wire::to_vec(input).map_err(ApiError::internal)?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(ApiError::invalid(format!("Trigger input is too large (at most {MAX_INPUT_BYTES} bytes)")));
    }
    Ok(())
}

/// A new thread's tool names: trimmed, non-empty, deduplicated, at most [`MAX_THREAD_TOOLS`].
fn thread_tools(tools: &[String]) -> ApiResult<Vec<String>> {
    if tools.len() > MAX_THREAD_TOOLS {
        return Err(ApiError::invalid(format!("Trigger tools may name at most {MAX_THREAD_TOOLS} tools")));
    }
    let mut names: Vec<String> = Vec::with_capacity(tools.len());
    for tool in tools {
        let name = bounded_string(tool, "Trigger tool name", MAX_NAME_BYTES)?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// A source, checked and canonicalised. `new_id` mints ids for conditions sent without one.
pub(crate) fn source(source: AgentTriggerSource, new_id: &mut dyn FnMut() -> String) -> ApiResult<AgentTriggerSource> {
    Ok(match source {
        AgentTriggerSource::ActivitySource(activity) => AgentTriggerSource::ActivitySource(compound(activity, new_id)?),
        AgentTriggerSource::CommentReplySource(source) => {
            AgentTriggerSource::CommentReplySource(comment_reply(source)?)
        }
        AgentTriggerSource::DocumentAuthorCommentSource(source) => {
            AgentTriggerSource::DocumentAuthorCommentSource(document_author(source)?)
        }
        AgentTriggerSource::DocumentCommentSource(source) => {
            AgentTriggerSource::DocumentCommentSource(document_comment(source)?)
        }
        AgentTriggerSource::SiteUpdateSource(source) => AgentTriggerSource::SiteUpdateSource(site_update(source)?),
        AgentTriggerSource::UserMentionSource(source) => AgentTriggerSource::UserMentionSource(user_mention(source)?),
        AgentTriggerSource::RunCompletedSource(source) => {
            AgentTriggerSource::RunCompletedSource(run_completed(source)?)
        }
        AgentTriggerSource::ScheduleSource(source) => AgentTriggerSource::ScheduleSource(schedule(source)?),
        AgentTriggerSource::WebhookSource(mut webhook) => {
            webhook.extra.clear();
            AgentTriggerSource::WebhookSource(webhook)
        }
    })
}

/// The kind of a source, as its `type` tag (what `replaceSource` guards).
pub(crate) fn kind(source: &AgentTriggerSource) -> &'static str {
    match source {
        AgentTriggerSource::ActivitySource(_) => "activity",
        AgentTriggerSource::CommentReplySource(_) => "comment-reply",
        AgentTriggerSource::DocumentAuthorCommentSource(_) => "document-author-comment",
        AgentTriggerSource::DocumentCommentSource(_) => "document-comment",
        AgentTriggerSource::SiteUpdateSource(_) => "site-update",
        AgentTriggerSource::UserMentionSource(_) => "user-mention",
        AgentTriggerSource::RunCompletedSource(_) => "run-completed",
        AgentTriggerSource::ScheduleSource(_) => "schedule",
        AgentTriggerSource::WebhookSource(_) => "webhook",
    }
}

fn compound(activity: ActivitySource, new_id: &mut dyn FnMut() -> String) -> ApiResult<ActivitySource> {
    if activity.conditions.is_empty() {
        return Err(ApiError::invalid("Trigger conditions are required"));
    }
    if activity.conditions.len() > MAX_CONDITIONS {
        return Err(ApiError::invalid(format!("A trigger can have at most {MAX_CONDITIONS} conditions")));
    }
    let mut seen = BTreeSet::new();
    let mut conditions = Vec::with_capacity(activity.conditions.len());
    for condition in activity.conditions {
        let id = match js_trim(&condition.id) {
            "" => new_id(),
            id => bounded_string(id, "Trigger condition ID", MAX_NAME_BYTES)?,
        };
        if !seen.insert(id.clone()) {
            return Err(ApiError::invalid(format!("Trigger condition ID \"{id}\" is used twice")));
        }
        conditions.push(AgentActivityCondition { extra: Default::default(), id, source: simple(condition.source)? });
    }
    Ok(ActivitySource { extra: Default::default(), conditions })
}

/// One simple activity source (a condition of a compound source).
pub(crate) fn simple(source: AgentActivitySource) -> ApiResult<AgentActivitySource> {
    Ok(match source {
        AgentActivitySource::CommentReplySource(source) => {
            AgentActivitySource::CommentReplySource(comment_reply(source)?)
        }
        AgentActivitySource::DocumentAuthorCommentSource(source) => {
            AgentActivitySource::DocumentAuthorCommentSource(document_author(source)?)
        }
        AgentActivitySource::DocumentCommentSource(source) => {
            AgentActivitySource::DocumentCommentSource(document_comment(source)?)
        }
        AgentActivitySource::SiteUpdateSource(source) => AgentActivitySource::SiteUpdateSource(site_update(source)?),
        AgentActivitySource::UserMentionSource(source) => AgentActivitySource::UserMentionSource(user_mention(source)?),
    })
}

fn user_mention(source: UserMentionSource) -> ApiResult<UserMentionSource> {
    Ok(UserMentionSource {
        extra: Default::default(),
        mentioned_accounts: accounts(&source.mentioned_accounts, "Trigger mentioned account")?,
        resource_prefix: optional_address(source.resource_prefix.as_deref(), "Trigger resource prefix")?,
    })
}

fn comment_reply(source: CommentReplySource) -> ApiResult<CommentReplySource> {
    Ok(CommentReplySource {
        extra: Default::default(),
        replied_to_accounts: accounts(&source.replied_to_accounts, "Trigger replied-to account")?,
        resource_prefix: optional_address(source.resource_prefix.as_deref(), "Trigger resource prefix")?,
    })
}

fn document_author(source: DocumentAuthorCommentSource) -> ApiResult<DocumentAuthorCommentSource> {
    Ok(DocumentAuthorCommentSource {
        extra: Default::default(),
        document_authors: accounts(&source.document_authors, "Trigger document author")?,
        resource_prefix: optional_address(source.resource_prefix.as_deref(), "Trigger resource prefix")?,
    })
}

fn document_comment(source: DocumentCommentSource) -> ApiResult<DocumentCommentSource> {
    let author = match source.author.as_deref().map(js_trim) {
        None | Some("") => None,
        Some(author) => Some(bounded_string(author, "Trigger author", MAX_NAME_BYTES)?),
    };
    Ok(DocumentCommentSource {
        extra: Default::default(),
        author,
        resource: address(&source.resource, "Trigger resource")?,
    })
}

fn site_update(source: SiteUpdateSource) -> ApiResult<SiteUpdateSource> {
    let event_types = match source.event_types {
        None => None,
        Some(types) => {
            if types.len() > MAX_LIST {
                return Err(ApiError::invalid(format!("A trigger can watch at most {MAX_LIST} event types")));
            }
            let mut kept: Vec<String> = Vec::with_capacity(types.len());
            for event_type in &types {
                let event_type = js_trim(event_type);
                if !EVENT_TYPES.contains(&event_type) {
                    return Err(ApiError::invalid(format!(
                        "Trigger event type must be one of doc-update, comment, citation, capability, contact (got \"{}\")",
                        event_type.chars().take(64).collect::<String>()
                    )));
                }
                if !kept.iter().any(|known| known == event_type) {
                    kept.push(event_type.to_owned());
                }
            }
            Some(kept)
        }
    };
    Ok(SiteUpdateSource {
        extra: Default::default(),
        event_types,
        resource_prefix: address(&source.resource_prefix, "Trigger resource prefix")?,
    })
}

fn run_completed(source: RunCompletedSource) -> ApiResult<RunCompletedSource> {
    let optional = |value: Option<&str>, label: &str| -> ApiResult<Option<String>> {
        match value.map(js_trim) {
            None | Some("") => Ok(None),
            Some(value) => bounded_string(value, label, MAX_NAME_BYTES).map(Some),
        }
    };
    Ok(RunCompletedSource {
        extra: Default::default(),
        agent_id: optional(source.agent_id.as_deref(), "Trigger agent ID")?.map(Into::into),
        status: source.status,
        title_match: optional(source.title_match.as_deref(), "Trigger title match")?,
    })
}

fn schedule(source: ScheduleSource) -> ApiResult<ScheduleSource> {
    let schedule = match source.schedule {
        AgentScheduleTrigger::IntervalSchedule(interval) => {
            if interval.every < 1 {
                return Err(ApiError::invalid("Schedule interval must be a positive integer"));
            }
            AgentScheduleTrigger::IntervalSchedule(IntervalSchedule { extra: Default::default(), ..interval })
        }
        AgentScheduleTrigger::WeeklySchedule(weekly) => AgentScheduleTrigger::WeeklySchedule(weekly_schedule(weekly)?),
        AgentScheduleTrigger::OnceSchedule(once) => {
            if !(1..=MAX_SAFE_INTEGER).contains(&once.run_at) {
                return Err(ApiError::invalid("Schedule runAt must be a positive time in milliseconds"));
            }
            let timezone = match once.timezone.as_deref().map(js_trim) {
                None | Some("") => None,
                Some(zone) => Some(timezone(zone)?),
            };
            AgentScheduleTrigger::OnceSchedule(OnceSchedule {
                extra: Default::default(),
                run_at: once.run_at,
                timezone,
            })
        }
    };
    Ok(ScheduleSource { extra: Default::default(), schedule })
}

fn weekly_schedule(weekly: WeeklySchedule) -> ApiResult<WeeklySchedule> {
    if weekly.days_of_week.is_empty() {
        return Err(ApiError::invalid("Schedule days of week are required"));
    }
    let mut days: Vec<i64> = Vec::with_capacity(weekly.days_of_week.len());
    for day in weekly.days_of_week {
        if !(0..=6).contains(&day) {
            return Err(ApiError::invalid("Schedule days of week must be 0 (Sunday) to 6 (Saturday)"));
        }
        if !days.contains(&day) {
            days.push(day);
        }
    }
    days.sort_unstable();
    let time = js_trim(&weekly.time_of_day);
    let valid_time = match time.split_once(':') {
        Some((hours, minutes)) if hours.len() == 2 && minutes.len() == 2 => {
            matches!((hours.parse::<u8>(), minutes.parse::<u8>()), (Ok(h), Ok(m)) if h < 24 && m < 60)
                && time.bytes().filter(u8::is_ascii_digit).count() == 4
        }
        _ => false,
    };
    if !valid_time {
        return Err(ApiError::invalid("Schedule timeOfDay must be HH:MM (00:00 to 23:59)"));
    }
    Ok(WeeklySchedule {
        extra: Default::default(),
        days_of_week: days,
        time_of_day: time.to_owned(),
        timezone: timezone(&weekly.timezone)?,
    })
}

/// An IANA time zone name: its shape only (`Area/Location`, `UTC`, letters, digits, `_+-/`). The
/// schedule monitor resolves it against the time zone database when it computes due times.
fn timezone(zone: &str) -> ApiResult<String> {
    let zone = bounded_string(zone, "Schedule timezone", MAX_NAME_BYTES)?;
    let shaped = zone.split('/').all(|part| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'+'))
    });
    if !shaped {
        return Err(ApiError::invalid("Schedule timezone must be an IANA time zone name such as Europe/Berlin"));
    }
    Ok(zone)
}

/// A list of account ids: trimmed, blanks dropped, duplicates removed, 1 to 32 of at most 256
/// bytes each. `label` is singular (`<label> is required`).
fn accounts(values: &[String], label: &str) -> ApiResult<Vec<String>> {
    let mut kept: Vec<String> = Vec::with_capacity(values.len());
    for value in values {
        let value = js_trim(value);
        if value.is_empty() {
            continue;
        }
        if value.len() > MAX_NAME_BYTES {
            return Err(ApiError::invalid(format!("{label} is too large")));
        }
        if !kept.iter().any(|known| known == value) {
            kept.push(value.to_owned());
        }
    }
    if kept.is_empty() {
        return Err(ApiError::invalid(format!("{label} is required")));
    }
    if kept.len() > MAX_LIST {
        return Err(ApiError::invalid(format!("A trigger can watch at most {MAX_LIST} accounts")));
    }
    Ok(kept)
}

fn optional_address(value: Option<&str>, label: &str) -> ApiResult<Option<String>> {
    match value.map(js_trim) {
        None | Some("") => Ok(None),
        Some(value) => address(value, label).map(Some),
    }
}

/// A document field: `hm://<account uid>[/path]`, canonicalised (no trailing slash, no query or
/// fragment); a bare `hm://` or a wildcard is refused rather than read as "everything".
pub(crate) fn address(value: &str, label: &str) -> ApiResult<String> {
    let value = js_trim(value);
    if value.is_empty() {
        return Err(ApiError::invalid(format!("{label} is required")));
    }
    if value.len() > MAX_RESOURCE_BYTES {
        return Err(ApiError::invalid(format!("{label} is too large")));
    }
    let invalid = || ApiError::invalid(format!("{label} must be an hm://<account>[/path] address"));
    let rest = value.strip_prefix("hm://").ok_or_else(invalid)?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default().trim_end_matches('/');
    let (uid, path) = rest.split_once('/').unwrap_or((rest, ""));
    let uid_ok = !uid.is_empty() && uid.bytes().all(|byte| byte.is_ascii_alphanumeric());
    let path_ok = path
        .split('/')
        .all(|segment| !segment.is_empty() && !segment.contains('*') && !segment.chars().any(char::is_whitespace))
        || path.is_empty();
    if !uid_ok || !path_ok {
        return Err(invalid());
    }
    Ok(if path.is_empty() { format!("hm://{uid}") } else { format!("hm://{uid}/{path}") })
}

#[cfg(test)]
mod tests {
    use seed_agents_protocol::generated::{IntervalScheduleUnit, WebhookSource};

    use super::*;

    fn message(result: ApiResult<impl std::fmt::Debug>) -> String {
        result.unwrap_err().message().to_owned()
    }

    fn ids() -> impl FnMut() -> String {
        let mut next = 0;
        move || {
            next += 1;
            format!("c{next}")
        }
    }

    fn mention(accounts: &[&str]) -> UserMentionSource {
        UserMentionSource {
            extra: Default::default(),
            mentioned_accounts: accounts.iter().map(|account| (*account).to_owned()).collect(),
            resource_prefix: None,
        }
    }

    #[test]
    fn addresses_are_canonical_and_never_everything() {
        assert_eq!(address(" hm://z6Mk/docs/a/ ", "R").unwrap(), "hm://z6Mk/docs/a");
        assert_eq!(address("hm://z6Mk?v=1#x", "R").unwrap(), "hm://z6Mk");
        for bad in ["hm://", "hm:///x", "hm://*", "hm://z6Mk/*", "https://x", "hm://a b", "hm://z6Mk//a"] {
            assert_eq!(
                message(address(bad, "Trigger resource")),
                "Trigger resource must be an hm://<account>[/path] address"
            );
        }
        assert_eq!(message(address("  ", "Trigger resource")), "Trigger resource is required");
        let long = format!("hm://z6Mk/{}", "a".repeat(MAX_RESOURCE_BYTES));
        assert_eq!(message(address(&long, "Trigger resource")), "Trigger resource is too large");
    }

    #[test]
    fn account_lists_are_trimmed_deduplicated_and_bounded() {
        let source = user_mention(mention(&[" a ", "a", "", "b"])).unwrap();
        assert_eq!(source.mentioned_accounts, ["a", "b"]);
        assert_eq!(message(user_mention(mention(&[]))), "Trigger mentioned account is required");
        assert_eq!(message(user_mention(mention(&[" "]))), "Trigger mentioned account is required");
        let many: Vec<String> = (0..33).map(|n| format!("a{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(message(user_mention(mention(&many))), "A trigger can watch at most 32 accounts");
        let long = "x".repeat(257);
        assert_eq!(message(user_mention(mention(&[&long]))), "Trigger mentioned account is too large");
        let reply =
            CommentReplySource { extra: Default::default(), replied_to_accounts: vec![], resource_prefix: None };
        assert_eq!(message(comment_reply(reply)), "Trigger replied-to account is required");
        let authors =
            DocumentAuthorCommentSource { extra: Default::default(), document_authors: vec![], resource_prefix: None };
        assert_eq!(message(document_author(authors)), "Trigger document author is required");
    }

    #[test]
    fn compound_sources_get_ids_and_refuse_duplicates_and_sizes() {
        let condition = |id: &str| AgentActivityCondition {
            extra: Default::default(),
            id: id.to_owned(),
            source: AgentActivitySource::UserMentionSource(mention(&["a"])),
        };
        let activity = |conditions| ActivitySource { extra: Default::default(), conditions };
        let made = compound(activity(vec![condition(""), condition("keep")]), &mut ids()).unwrap();
        assert_eq!(made.conditions.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c1", "keep"]);
        assert_eq!(message(compound(activity(vec![]), &mut ids())), "Trigger conditions are required");
        assert_eq!(
            message(compound(activity(vec![condition("x"), condition("x")]), &mut ids())),
            "Trigger condition ID \"x\" is used twice"
        );
        let many = (0..33).map(|n| condition(&format!("c{n}"))).collect();
        assert_eq!(message(compound(activity(many), &mut ids())), "A trigger can have at most 32 conditions");
    }

    #[test]
    fn schedules_are_checked() {
        let interval = |every| {
            AgentTriggerSource::ScheduleSource(ScheduleSource {
                extra: Default::default(),
                schedule: AgentScheduleTrigger::IntervalSchedule(IntervalSchedule {
                    extra: Default::default(),
                    every,
                    unit: IntervalScheduleUnit::Minutes,
                }),
            })
        };
        assert!(source(interval(1), &mut ids()).is_ok());
        assert_eq!(message(source(interval(0), &mut ids())), "Schedule interval must be a positive integer");
        let weekly = |days: Vec<i64>, time: &str, zone: &str| WeeklySchedule {
            extra: Default::default(),
            days_of_week: days,
            time_of_day: time.into(),
            timezone: zone.into(),
        };
        let made = weekly_schedule(weekly(vec![5, 1, 5], "09:30", "Europe/Berlin")).unwrap();
        assert_eq!(made.days_of_week, [1, 5]);
        assert_eq!(message(weekly_schedule(weekly(vec![], "09:30", "UTC"))), "Schedule days of week are required");
        assert!(weekly_schedule(weekly(vec![7], "09:30", "UTC")).is_err());
        for time in ["24:00", "9:30", "09:60", "0a:00", "09-30"] {
            assert_eq!(
                message(weekly_schedule(weekly(vec![1], time, "UTC"))),
                "Schedule timeOfDay must be HH:MM (00:00 to 23:59)",
                "{time}"
            );
        }
        assert!(weekly_schedule(weekly(vec![1], "09:30", "../etc")).is_err());
        assert_eq!(message(weekly_schedule(weekly(vec![1], "09:30", " "))), "Schedule timezone is required");
        let once = |run_at| {
            AgentTriggerSource::ScheduleSource(ScheduleSource {
                extra: Default::default(),
                schedule: AgentScheduleTrigger::OnceSchedule(OnceSchedule {
                    extra: Default::default(),
                    run_at,
                    timezone: None,
                }),
            })
        };
        assert!(source(once(1), &mut ids()).is_ok());
        assert!(source(once(0), &mut ids()).is_err());
        assert!(source(once(1 << 53), &mut ids()).is_err());
    }

    #[test]
    fn event_types_names_and_continuations() {
        let site = |types: Option<Vec<&str>>| SiteUpdateSource {
            extra: Default::default(),
            event_types: types.map(|types| types.into_iter().map(str::to_owned).collect()),
            resource_prefix: "hm://z6Mk".into(),
        };
        assert_eq!(
            site_update(site(Some(vec!["comment", "ref", "comment"]))).unwrap().event_types.unwrap(),
            ["comment", "ref"]
        );
        assert!(site_update(site(Some(vec!["everything"]))).is_err());
        assert!(site_update(site(None)).unwrap().event_types.is_none());
        assert_eq!(message(name("  ")), "Trigger name is required");
        assert_eq!(message(name(&"n".repeat(257))), "Trigger name is too large");
        assert_eq!(message(prompt(None)), "Trigger prompt is required");
        assert_eq!(
            message(prompt(Some(AgentDefinitionSystemPrompt::String(" ".into())))),
            "Trigger prompt is required"
        );
        assert_eq!(prompt(Some(AgentDefinitionSystemPrompt::String(" Hi ".into()))).unwrap().markdown, "Hi");
        let webhook = AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() });
        assert_eq!(kind(&source(webhook, &mut ids()).unwrap()), "webhook");
        let wake = |signal: &str, run_id: Option<&str>| {
            Some(TriggerContinuation::WakeContinuation(WakeContinuation {
                extra: [("unknown".to_owned(), seed_agents_protocol::Value::from(ipld_core::ipld::Ipld::Integer(1)))]
                    .into(),
                payload: Some(seed_agents_protocol::Value::from(ipld_core::ipld::Ipld::String("data".into()))),
                run_id: run_id.map(Into::into),
                signal: signal.into(),
            }))
        };
        let Some(TriggerContinuation::WakeContinuation(woken)) = continuation(wake(" go ", Some(" r1 "))).unwrap()
        else {
            panic!("a wake stays a wake")
        };
        assert_eq!((&*woken.signal, woken.run_id.as_deref()), ("go", Some("r1")));
        assert_eq!(
            (woken.payload, woken.extra.len()),
            (Some(seed_agents_protocol::Value::from(ipld_core::ipld::Ipld::String("data".into()))), 0)
        );
        assert_eq!(message(continuation(wake(" ", None))), "Trigger signal is required");
        assert_eq!(message(continuation(wake(&"s".repeat(257), None))), "Trigger signal is too large");
        assert!(continuation(wake(&"s".repeat(256), None)).is_ok(), "256 bytes is the limit");
        assert_eq!(message(continuation(wake("go", Some("")))), "Trigger run ID is required");
        assert_eq!(message(continuation(wake("go", Some(&"r".repeat(257))))), "Trigger run ID is too large");
    }

    #[test]
    fn script_and_tool_continuations_are_checked() {
        use seed_agents_protocol::Value;
        use seed_agents_protocol::generated::TriggerFailurePolicy;
        let script = |source: &str, input: Option<Value>| {
            Some(TriggerContinuation::ScriptContinuation(ScriptContinuation {
                extra: [("unknown".to_owned(), Value::from(ipld_core::ipld::Ipld::Integer(1)))].into(),
                input,
                on_failure: Some(TriggerFailurePolicy::Thread),
                script: source.into(),
            }))
        };
        let good = "export default async function (input, ctx) { return input; }";
        let Some(TriggerContinuation::ScriptContinuation(kept)) = continuation(script(good, None)).unwrap() else {
            panic!("a script stays a script")
        };
        assert_eq!((&*kept.script, kept.on_failure, kept.extra.len()), (good, Some(TriggerFailurePolicy::Thread), 0));
        let refused = message(continuation(script("export default async function () { return Date.now(); }", None)));
        assert!(refused.starts_with("Workflow source rejected:\n- Date is not available"), "{refused}");
        assert!(message(continuation(script("", None))).contains("exactly one `export default"));
        let huge = Value::from(ipld_core::ipld::Ipld::String("x".repeat(MAX_INPUT_BYTES)));
        assert_eq!(
            message(continuation(script(good, Some(huge.clone())))),
            format!("Trigger input is too large (at most {MAX_INPUT_BYTES} bytes)")
        );

        let tool = |name: &str, input: Option<Value>| {
            Some(TriggerContinuation::ToolContinuation(ToolContinuation {
                extra: Default::default(),
                input,
                on_failure: None,
                tool: name.into(),
            }))
        };
        let Some(TriggerContinuation::ToolContinuation(kept)) = continuation(tool(" write ", None)).unwrap() else {
            panic!("a tool stays a tool")
        };
        assert_eq!((&*kept.tool, kept.on_failure), ("write", None));
        assert_eq!(message(continuation(tool("  ", None))), "Trigger tool is required");
        assert_eq!(message(continuation(tool(&"t".repeat(257), None))), "Trigger tool is too large");
        assert!(continuation(tool("no_such_tool_yet", None)).is_ok(), "grants are checked when it fires");
        assert!(message(continuation(tool("write", Some(huge)))).starts_with("Trigger input is too large"));
    }
}
