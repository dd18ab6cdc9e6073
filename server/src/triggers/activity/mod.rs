//! The activity monitor (docs/hypermedia.md §4.2): polls the Hypermedia activity feed for every
//! account that has an enabled activity trigger and hands each match to the [`FiringSink`].
//!
//! One poll of one account, under that account's lock (two polls of one account in this process
//! take turns):
//! 1. Read the account's enabled activity triggers (single sources and compound `activity`).
//! 2. Walk up to `max_pages` pages of `ListEvents` (newest observed first), stopping early at the
//!    end of the feed or, once a baseline exists, after a page holding a key already handled.
//! 3. Without a baseline (first poll, or every poll so far failed), every fetched key becomes
//!    seen and only events at or after the earliest trigger's creation are matched: history
//!    from before the triggers existed is never replayed. With one, the events whose key is not
//!    seen are matched, however old their timestamp (observed order surfaces late blobs).
//! 4. A walk from the top that runs out of pages before meeting a handled event leaves a
//!    backlog (its next page token, and the keys where it ends). The following polls walk the
//!    backlog first, page budget by page budget, until they meet those keys; then the top again.
//!    A burst larger than one poll's pages is handled across polls and nothing in it is skipped.
//! 5. Events are handled oldest first within a walk. An event fires each matching trigger once,
//!    under its firing key (a citation collapses onto its comment's `blob-<cid>`), so a comment
//!    and its twin, two racing polls or a restart before the watermark moved all end in one
//!    firing per trigger.
//! 6. The watermark is saved once the poll handled everything it read. A failing sink or feed
//!    saves nothing but `last_error`: the next poll reads the same events again, and the
//!    triggers that already fired for them dedupe.

pub(crate) mod event;
pub(crate) mod matching;
pub(crate) mod replay;
pub mod watermark;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seed_agents_protocol::generated::AgentTriggerSource;
use seed_agents_protocol::{Value, wire};

use self::event::Event;
use self::watermark::{Backlog, Cursor};
use super::sink::{FiringSink, TriggerMatch};
use super::store;
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

/// The pages one walk read.
#[derive(Debug)]
struct Walk {
    /// The events, newest first.
    events: Vec<Event>,
    /// Where to go on: set when the walk ran out of pages before its end.
    rest: Option<String>,
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
        // Forget the locks of accounts that no longer have activity triggers (and are not polled now).
        self.accounts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|account, lock| accounts.contains(account) || Arc::strong_count(lock) > 1);
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
        let outcome = match watermark.cursor {
            None => self.first_poll(account, &triggers).await,
            Some(cursor) => self.next_poll(account, &triggers, cursor).await,
        };
        match outcome {
            Ok((poll, cursor)) => {
                watermark::save(&self.db, account, &self.server_url, &cursor, poll_at, self.clock.now_ms()).await?;
                let ids: Vec<String> = triggers.into_iter().map(|trigger| trigger.id).collect();
                self.db.write(move |conn| store::mark_checked(conn, &ids, poll_at)).await?;
                Ok(poll)
            }
            Err(error) => {
                let message = error.message().to_owned();
                watermark::record_error(&self.db, account, &self.server_url, poll_at, message).await?;
                Err(error)
            }
        }
    }

    /// No baseline yet: everything fetched becomes seen, and only the events since the earliest
    /// trigger exists are handled.
    async fn first_poll(&self, account: &str, triggers: &[Trigger]) -> ApiResult<(AccountPoll, Cursor)> {
        let walk = self.walk(account, None, |_| false).await?;
        let since = triggers.iter().map(|trigger| trigger.created_at).min().unwrap_or(i64::MAX);
        let recent: Vec<&Event> =
            walk.events.iter().filter(|event| event::event_time_ms(event).is_some_and(|at| at >= since)).collect();
        let mut poll = AccountPoll { fetched: walk.events.len(), ..AccountPoll::default() };
        for event in recent.into_iter().rev() {
            self.handle(triggers, event, &mut poll).await?;
        }
        let mut seen_keys = unique_keys(&walk.events);
        seen_keys.truncate(self.settings.seen_keys);
        Ok((poll, Cursor { seen_keys, backlog: None }))
    }

    /// With a baseline: the top of the feed down to the first handled event, or the backlog a
    /// previous poll could not finish (which then goes first, and ends at the events that were
    /// handled before it arrived).
    async fn next_poll(
        &self,
        account: &str,
        triggers: &[Trigger],
        mut cursor: Cursor,
    ) -> ApiResult<(AccountPoll, Cursor)> {
        let seen: HashSet<String> = cursor.seen_keys.iter().cloned().collect();
        let from_top = cursor.backlog.is_none();
        let (walk, known) = match cursor.backlog.take() {
            None => (self.walk(account, None, |key| seen.contains(key)).await?, HashSet::new()),
            Some(backlog) => {
                let until: HashSet<String> = backlog.until.iter().cloned().collect();
                let walk = self
                    .walk(account, Some(backlog.page_token.clone()), |key| seen.contains(key) || until.contains(key))
                    .await?;
                if let Some(page_token) = &walk.rest {
                    cursor.backlog = Some(Backlog { page_token: page_token.clone(), until: backlog.until });
                }
                (walk, until)
            }
        };
        let mut poll = AccountPoll { fetched: walk.events.len(), ..AccountPoll::default() };
        let mut queued = HashSet::new();
        let fresh: Vec<(&Event, String)> = walk
            .events
            .iter()
            .filter_map(|event| event::event_key(event).map(|key| (event, key)))
            .filter(|(_, key)| !seen.contains(key) && !known.contains(key) && queued.insert(key.clone()))
            .collect();
        for (event, _) in fresh.iter().rev() {
            self.handle(triggers, event, &mut poll).await?;
        }
        if from_top {
            // A walk from the top: its new keys go first; one that ran out of pages leaves a backlog.
            if let Some(page_token) = walk.rest {
                // Every key handled before: one that the feed since dropped cannot make the walk
                // miss its end.
                cursor.backlog = Some(Backlog { page_token, until: cursor.seen_keys.clone() });
            }
            let mut keys: Vec<String> = fresh.into_iter().map(|(_, key)| key).collect();
            keys.extend(cursor.seen_keys.into_iter().filter(|key| !queued.contains(key)));
            keys.truncate(self.settings.seen_keys);
            cursor.seen_keys = keys;
        }
        Ok((poll, cursor))
    }

    /// Up to `max_pages` pages from `page_token` (the top when `None`), newest first; stops at
    /// the end of the feed or after a page holding a key for which `stop` holds. `rest` is the
    /// token to go on from when the pages ran out first.
    async fn walk(&self, account: &str, page_token: Option<String>, stop: impl Fn(&str) -> bool) -> ApiResult<Walk> {
        let client = HmClient::new(&self.http, &self.server_url);
        let mut events = Vec::new();
        let mut token = page_token;
        for _ in 0..self.settings.max_pages.max(1) {
            let query = FeedQuery {
                page_size: self.settings.page_size,
                page_token: token.as_deref(),
                current_account: account,
            };
            let page = client
                .feed_page(&query, self.settings.request_timeout)
                .await
                .map_err(|error| ApiError::upstream(format!("Hypermedia server: {error}")))?;
            let reached = page.events.iter().any(|event| event::event_key(event).is_some_and(|key| stop(&key)));
            events.extend(page.events);
            token = page.next_page_token;
            if token.is_none() || reached {
                return Ok(Walk { events, rest: None });
            }
        }
        Ok(Walk { events, rest: token })
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
                activity: activity_value(event),
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
pub(crate) fn activity_value(event: &Event) -> BTreeMap<String, Value> {
    event.iter().map(|(key, value)| (key.clone(), Value::from(wire::json_to_ipld(value)))).collect()
}

/// The distinct keys of `events`, in feed order.
fn unique_keys(events: &[Event]) -> Vec<String> {
    let mut seen = HashSet::new();
    events.iter().filter_map(event::event_key).filter(|key| seen.insert(key.clone())).collect()
}

/// Enabled activity triggers by account (one account's, when given), oldest first.
fn activity_triggers(conn: &crate::db::Connection, account: Option<&str>) -> ApiResult<BTreeMap<String, Vec<Trigger>>> {
    let mut triggers: BTreeMap<String, Vec<Trigger>> = BTreeMap::new();
    for store::Enabled { id, account_id, created_at, source } in store::enabled_triggers(conn, account)? {
        if matching::is_activity_source(&source) {
            triggers.entry(account_id).or_default().push(Trigger { id, created_at, source });
        }
    }
    Ok(triggers)
}

#[cfg(test)]
mod tests {
    use ipld_core::ipld::Ipld;

    use super::*;

    #[test]
    fn a_feed_event_becomes_an_ipld_map() {
        let serde_json::Value::Object(event) = serde_json::json!({"a": 1, "b": [true, null, "x"], "c": {"d": 1.5}})
        else {
            unreachable!()
        };
        let value = activity_value(&event);
        assert_eq!(value["a"].clone().into_ipld(), Ipld::Integer(1));
        assert_eq!(
            value["b"].clone().into_ipld(),
            Ipld::List(vec![Ipld::Bool(true), Ipld::Null, Ipld::String("x".into())])
        );
        let Ipld::Map(nested) = value["c"].clone().into_ipld() else { panic!("not a map") };
        assert_eq!(nested["d"], Ipld::Float(1.5));
        let serde_json::Value::Object(whole) = serde_json::json!({"n": 2.0}) else { unreachable!() };
        assert_eq!(activity_value(&whole)["n"].clone().into_ipld(), Ipld::Integer(2), "a whole float is an integer");
    }
}
