//! A dry run of a trigger source against recent activity (the agent's `write ~/triggers/<name>`
//! with `dryRun`): read about 100 recent events of the account's feed and say which would fire,
//! firing nothing and saving nothing.

use std::collections::{BTreeMap, HashSet};

use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{AgentActivityCondition, AgentTriggerSource};

use super::{FeedSettings, activity_value, event, matching};
use crate::error::{ApiError, ApiResult};
use crate::hm::HmClient;
use crate::hm::feed::FeedQuery;

/// How many recent events a dry run reads by default.
pub(crate) const REPLAY_EVENTS: usize = 100;

/// One firing a source would have produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayMatch {
    /// The key the firing would dedupe on (one entry per key: a comment and its citation twin
    /// are one match).
    pub firing_key: String,
    /// The event, as a firing would record it.
    pub activity: BTreeMap<String, Value>,
    /// Its summary.
    pub summary: String,
    /// For a compound source, the conditions it matched.
    pub matched_conditions: Option<Vec<AgentActivityCondition>>,
    /// When it happened (Unix ms), if the feed said.
    pub event_at_ms: Option<i64>,
}

/// The matches the `limit` most recent events of `account`'s feed give `source`, newest first.
/// Sources that do not read the feed (schedule, webhook, run-completed) match nothing. Feed
/// failures are `Upstream` errors.
pub async fn replay(
    hm: &HmClient<'_>,
    account: &str,
    source: &AgentTriggerSource,
    limit: usize,
    settings: &FeedSettings,
) -> ApiResult<Vec<ReplayMatch>> {
    if !matching::is_activity_source(source) {
        return Ok(Vec::new());
    }
    let mut events = Vec::new();
    let mut token: Option<String> = None;
    while events.len() < limit {
        let page_size = u32::try_from(limit - events.len()).unwrap_or(u32::MAX).min(settings.page_size.max(1));
        let query = FeedQuery { page_size, page_token: token.as_deref(), current_account: account };
        let page = hm
            .feed_page(&query, settings.request_timeout)
            .await
            .map_err(|error| ApiError::upstream(format!("Hypermedia server: {error}")))?;
        let empty = page.events.is_empty();
        events.extend(page.events);
        token = page.next_page_token;
        if token.is_none() || empty {
            break;
        }
    }
    events.truncate(limit);
    let mut keys = HashSet::new();
    let mut matches = Vec::new();
    for event in &events {
        let Some(firing_key) = event::firing_key(event) else { continue };
        let Some(matched) = matching::match_trigger(source, event) else { continue };
        if !keys.insert(firing_key.clone()) {
            continue;
        }
        matches.push(ReplayMatch {
            firing_key,
            activity: activity_value(event),
            summary: event::summary(event),
            matched_conditions: matched.into_conditions(),
            event_at_ms: event::event_time_ms(event),
        });
    }
    Ok(matches)
}
