//! The activity monitor (HM-INTEGRATION.md §4.2): polls the Hypermedia activity feed for every
//! account that has an enabled activity trigger and hands each match to the [`FiringSink`].
//!
//! One poll of one account, under that account's lock (two polls of one account in this process
//! take turns):
//! 1. Read the account's enabled activity triggers (single sources and compound `activity`).
//! 2. Walk up to `max_pages` pages of `ListEvents` (newest observed first), stopping early at the
//!    end of the feed or, once a baseline exists, at a page holding a key already seen.
//! 3. Without a baseline (first poll, or every poll so far failed), every fetched key becomes
//!    seen and only events at or after the earliest trigger's creation are matched: history
//!    from before the triggers existed is never replayed. With one, the events whose key is not
//!    seen are matched, however old their timestamp (observed order surfaces late blobs).
//! 4. Events are handled oldest first; after each, its key is added to the watermark. An event
//!    fires each matching trigger once, under its firing key (a citation collapses onto its
//!    comment's `blob-<cid>`), so a comment and its twin, two racing polls or a restart before
//!    the watermark moved all end in one firing per trigger.
//!
//! A failing sink stops the poll before that event's key is saved: the next poll retries it and
//! the triggers that already fired dedupe. A failing feed records `last_error` only.

pub mod event;
pub mod matching;
pub mod replay;
pub mod watermark;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::AgentTriggerSource;
use seed_agents_protocol::{Value, wire};

use self::event::Event;
use super::sink::{FiringSink, TriggerMatch};
use crate::clock::Clock;
use crate::db::Db;
use crate::error::{ApiError, ApiResult};
use crate::hm::HmClient;
use crate::hm::feed::{FeedQuery, LIST_EVENTS_TIMEOUT};

/// How the feed is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedSettings {
    /// `ListEvents.pageSize` (default 50).
    pub page_size: u32,
    /// Pages read per account per poll at most (default 5).
    pub max_pages: u32,
    /// Keys remembered per account (default 250: five full pages).
    pub seen_keys: usize,
    /// One `ListEvents` request's deadline (default 20 s).
    pub request_timeout: Duration,
}

impl Default for FeedSettings {
    fn default() -> Self {
        Self { page_size: 50, max_pages: 5, seen_keys: 250, request_timeout: LIST_EVENTS_TIMEOUT }
    }
}

/// What one poll of one account did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountPoll {
    /// Events fetched.
    pub fetched: usize,
    /// Events matched against the triggers (new, or after the triggers on a first poll).
    pub handled: usize,
    /// Firings the sink created now.
    pub fired: usize,
    /// Matches the sink had already fired (twins, races, restarts).
    pub repeated: usize,
}

/// One enabled activity trigger of an account.
#[derive(Debug, Clone)]
struct Trigger {
    id: String,
    created_at: i64,
    source: AgentTriggerSource,
}

/// The monitor: the database, the feed's server, the sink, and a lock per account.
#[derive(Debug)]
pub struct ActivityMonitor {
    db: Db,
    clock: Clock,
    http: reqwest::Client,
    server_url: String,
    sink: Arc<dyn FiringSink>,
    settings: FeedSettings,
    accounts: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ActivityMonitor {
    /// A monitor of the feed at `server_url` (an origin without a trailing `/`).
    pub fn new(
        db: Db,
        clock: Clock,
        http: reqwest::Client,
        server_url: String,
        sink: Arc<dyn FiringSink>,
        settings: FeedSettings,
    ) -> Self {
        Self { db, clock, http, server_url, sink, settings, accounts: Mutex::new(HashMap::new()) }
    }

    /// One poll of every account with an enabled activity trigger, in a stable order. An
    /// account's failure is logged and recorded; the others are still polled.
    pub async fn poll(&self) -> ApiResult<BTreeMap<String, ApiResult<AccountPoll>>> {
        let accounts = self.db.read(|conn| Ok(activity_triggers(conn, None)?.into_keys().collect::<Vec<_>>())).await?;
        let mut polls = BTreeMap::new();
        for account in accounts {
            let outcome = self.poll_account(&account).await;
            if let Err(error) = &outcome {
                tracing::warn!(%account, %error, "activity poll failed");
            }
            polls.insert(account, outcome);
        }
        Ok(polls)
    }

    /// One poll of `account` (see the module docs).
    pub async fn poll_account(&self, account: &str) -> ApiResult<AccountPoll> {
        let lock = {
            let mut accounts = self.accounts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            accounts.entry(account.to_owned()).or_default().clone()
        };
        let _turn = lock.lock().await;
        let owner = account.to_owned();
        let triggers = self
            .db
            .read(move |conn| Ok(activity_triggers(conn, Some(&owner))?.remove(&owner).unwrap_or_default()))
            .await?;
        if triggers.is_empty() {
            return Ok(AccountPoll::default());
        }
        let poll_at = self.clock.now_ms();
        let watermark = watermark::load(&self.db, account, &self.server_url).await?;
        let seen: Option<HashSet<String>> = watermark.seen_keys.map(|keys| keys.into_iter().collect());
        let events = match self.fetch(account, seen.as_ref()).await {
            Ok(events) => events,
            Err(error) => {
                watermark::record_error(&self.db, account, &self.server_url, poll_at, error.message().to_owned())
                    .await?;
                return Err(error);
            }
        };
        let mut poll = AccountPoll { fetched: events.len(), ..AccountPoll::default() };
        let cap = self.settings.seen_keys;
        let Some(seen) = seen else {
            // No baseline: everything fetched is seen; only events since the triggers exist count.
            let since = triggers.iter().map(|trigger| trigger.created_at).min().unwrap_or(i64::MAX);
            let recent: Vec<&Event> =
                events.iter().filter(|event| event::event_time_ms(event).is_some_and(|at| at >= since)).collect();
            for event in recent.into_iter().rev() {
                self.handle(&triggers, event, &mut poll).await?;
            }
            let mut keys = unique_keys(&events);
            keys.truncate(cap);
            keys.reverse();
            watermark::mark_seen(&self.db, account, &self.server_url, keys, cap, poll_at, self.clock.now_ms()).await?;
            return Ok(poll);
        };
        let mut fresh: Vec<(&Event, String)> = Vec::new();
        let mut queued = HashSet::new();
        for event in &events {
            if let Some(key) = event::event_key(event)
                && !seen.contains(&key)
                && queued.insert(key.clone())
            {
                fresh.push((event, key));
            }
        }
        if fresh.is_empty() {
            watermark::mark_seen(&self.db, account, &self.server_url, Vec::new(), cap, poll_at, self.clock.now_ms())
                .await?;
        }
        for (event, key) in fresh.into_iter().rev() {
            self.handle(&triggers, event, &mut poll).await?;
            watermark::mark_seen(&self.db, account, &self.server_url, vec![key], cap, poll_at, self.clock.now_ms())
                .await?;
        }
        Ok(poll)
    }

    /// Up to `max_pages` pages, newest first; stops at a page holding a seen key.
    async fn fetch(&self, account: &str, seen: Option<&HashSet<String>>) -> ApiResult<Vec<Event>> {
        let client = HmClient::new(&self.http, &self.server_url);
        let mut events = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..self.settings.max_pages.max(1) {
            let query =
                FeedQuery { page_size: self.settings.page_size, page_token: token.as_deref(), current_account: account };
            let page = client
                .feed_page(&query, self.settings.request_timeout)
                .await
                .map_err(|error| ApiError::upstream(format!("Hypermedia server: {error}")))?;
            let reached_seen = seen.is_some_and(|seen| {
                page.events.iter().any(|event| event::event_key(event).is_some_and(|key| seen.contains(&key)))
            });
            events.extend(page.events);
            token = page.next_page_token;
            if token.is_none() || reached_seen {
                break;
            }
        }
        Ok(events)
    }

    /// Matches one event against every trigger and fires the matches.
    async fn handle(&self, triggers: &[Trigger], event: &Event, poll: &mut AccountPoll) -> ApiResult<()> {
        poll.handled += 1;
        let Some(firing_key) = event::firing_key(event) else { return Ok(()) };
        for trigger in triggers {
            let Some(matched) = matching::match_trigger(&trigger.source, event) else { continue };
            let found = TriggerMatch {
                trigger_id: trigger.id.clone(),
                firing_key: firing_key.clone(),
                activity: activity_value(event)?,
                summary: event::summary(event),
                matched_conditions: matched.into_conditions(),
                fired_at_ms: self.clock.now_ms(),
            };
            if self.sink.fire(found).await? {
                poll.fired += 1;
            } else {
                poll.repeated += 1;
            }
        }
        Ok(())
    }
}

/// The feed event as the IPLD map a firing records.
pub fn activity_value(event: &Event) -> ApiResult<BTreeMap<String, Value>> {
    match wire::to_ipld(event).map_err(ApiError::internal)? {
        Ipld::Map(fields) => Ok(fields.into_iter().map(|(key, value)| (key, Value::from(value))).collect()),
        _ => Err(ApiError::internal("a feed event did not convert to a map")),
    }
}

/// The distinct keys of `events`, in feed order.
fn unique_keys(events: &[Event]) -> Vec<String> {
    let mut seen = HashSet::new();
    events.iter().filter_map(event::event_key).filter(|key| seen.insert(key.clone())).collect()
}

/// Enabled activity triggers by account (one account's, when given), oldest first.
fn activity_triggers(
    conn: &rusqlite::Connection,
    account: Option<&str>,
) -> ApiResult<BTreeMap<String, Vec<Trigger>>> {
    let mut statement = conn.prepare_cached(
        "SELECT account_id, id, created_at, source_cbor FROM agent_triggers
         WHERE enabled = 1 AND (?1 IS NULL OR account_id = ?1) ORDER BY created_at, id",
    )?;
    let rows = statement.query_map([account], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, i64>(2)?, row.get::<_, Vec<u8>>(3)?))
    })?;
    let mut triggers: BTreeMap<String, Vec<Trigger>> = BTreeMap::new();
    for row in rows {
        let (account, id, created_at, source) = row?;
        // Sources this build cannot decode are not activity sources it could match.
        let Ok(source) = wire::from_slice::<AgentTriggerSource>(&source) else { continue };
        if matching::is_activity_source(&source) {
            triggers.entry(account).or_default().push(Trigger { id, created_at, source });
        }
    }
    Ok(triggers)
}
