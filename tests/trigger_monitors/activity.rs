//! The activity monitor against the fake feed: each event fires each matching trigger once.

use std::time::Duration;

use seed_agents_protocol::generated::{AgentTriggerSource, DocumentCommentSource, UserMentionSource};
use seed_agents_server::testing::agents::default_trigger;
use seed_agents_server::testing::hm::HmClient;
use seed_agents_server::testing::triggers::activity::replay::replay;
use seed_agents_server::testing::triggers::activity::{AccountPoll, FeedSettings, watermark};
use serde_json::{Value as Json, json};

use super::{Harness, pairs};

/// The account that owns the agent and its triggers (the feed is read for it).
const OWNER: &str = "z6MkOwnerAccount";
/// The agent's own Seed identity, which the triggers watch.
const AGENT: &str = "z6MkAgentIdentity";
const ALICE: &str = "z6MkAliceAccount";
const BOB: &str = "z6MkBobAccount";
/// When the triggers were created.
const T0: i64 = 1_780_000_000_000;

/// A resolved comment event as `ListEvents` answers it: `author` comments on `doc` (owned and
/// authored by `doc_owner`), embedding a mention of `mention`, replying to a comment of
/// `parent`.
fn comment(cid: &str, author: &str, doc_owner: &str, mention: Option<&str>, parent: Option<&str>, at: i64) -> Json {
    let annotations: Vec<Json> = mention
        .map(|uid| json!({"type": "Embed", "starts": [0], "ends": [1], "link": format!("hm://{uid}/:profile?v=bafyP&l")}))
        .into_iter()
        .collect();
    json!({
        "id": cid, "type": "comment", "feedEventId": format!("blob-{cid}"), "eventAtMs": at,
        "time": "2026-05-04T07:00:00Z",
        "author": {"id": {"uid": author, "id": format!("hm://{author}"), "path": []}, "metadata": {"name": author}},
        "comment": {
            "id": format!("{author}/z6tsid{cid}"), "version": cid, "author": author,
            "targetAccount": doc_owner, "targetPath": "/notes", "targetVersion": "bafyDoc",
            "replyParent": parent.map(|_| "z6parent/tsid"),
            "content": [{"block": {"type": "Paragraph", "id": "b1", "text": "\u{fffc} hello", "annotations": annotations},
                         "children": []}],
            "visibility": "PUBLIC",
        },
        "commentId": {"id": format!("hm://{author}/z6tsid{cid}"), "uid": author},
        "replyParentAuthor": parent.map(|uid| json!({"id": {"uid": uid, "id": format!("hm://{uid}"), "path": []}})),
        "target": {"id": {"uid": doc_owner, "id": format!("hm://{doc_owner}/notes?v=bafyDoc"), "path": ["notes"]},
                   "metadata": {"name": "Notes"}},
        "targetAuthorUids": [doc_owner],
        "replyCount": 0,
    })
}

/// The citation twin of a comment by `author` that mentions `mentioned`.
fn citation(cid: &str, author: &str, mentioned: &str, at: i64) -> Json {
    json!({
        "id": cid, "type": "citation", "citationType": "c", "eventAtMs": at,
        "feedEventId": format!("mention-{cid}--hm://{mentioned}/:profile"),
        "source": {"id": {"uid": author, "id": format!("hm://{author}"), "path": []}},
        "target": {"id": {"uid": mentioned, "id": format!("hm://{mentioned}/:profile"), "path": [":profile"]}},
    })
}

fn mentions(account: &str) -> AgentTriggerSource {
    AgentTriggerSource::UserMentionSource(UserMentionSource {
        extra: Default::default(),
        mentioned_accounts: vec![account.to_owned()],
        resource_prefix: None,
    })
}

fn settings(page_size: u32, max_pages: u32) -> FeedSettings {
    FeedSettings { page_size, max_pages, ..FeedSettings::default() }
}

/// The firings' matched condition ids of one trigger, by firing key.
fn conditions(harness: &Harness, trigger: &str) -> Vec<(String, Vec<String>)> {
    let mut found: Vec<(String, Vec<String>)> = harness
        .sink
        .fired()
        .into_iter()
        .filter(|found| found.trigger_id == trigger)
        .map(|found| {
            let ids = found.matched_conditions.unwrap_or_default().into_iter().map(|condition| condition.id).collect();
            (found.firing_key, ids)
        })
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn mentions_replies_and_author_comments_fire_once_per_event_and_trigger() {
    let harness = Harness::new(T0).await;
    harness.trigger(OWNER, "default", &default_trigger::source(AGENT), T0).await;
    harness.trigger(OWNER, "mentions", &mentions(AGENT), T0).await;
    let notes = AgentTriggerSource::DocumentCommentSource(DocumentCommentSource {
        extra: Default::default(),
        resource: format!("hm://{AGENT}/notes"),
        author: None,
    });
    harness.trigger(OWNER, "notes", &notes, T0).await;
    let monitor = harness.monitor(settings(50, 5));
    // History from before the triggers existed is the baseline, never fired.
    harness.hm.push_events([comment("bafyOld", ALICE, BOB, Some(AGENT), None, T0 - 60_000)]);
    assert_eq!(monitor.poll_account(OWNER).await.unwrap().fired, 0);

    harness.hm.push_events([
        comment("bafyMention", ALICE, BOB, Some(AGENT), None, T0 + 1),
        comment("bafyReply", ALICE, BOB, None, Some(AGENT), T0 + 2),
        comment("bafySelfReply", AGENT, BOB, None, Some(AGENT), T0 + 3),
        comment("bafyOnAgentDoc", ALICE, AGENT, None, None, T0 + 4),
        comment("bafyOwnDoc", AGENT, AGENT, None, None, T0 + 5),
        comment("bafyUnrelated", BOB, BOB, None, None, T0 + 6),
    ]);
    let poll = monitor.poll_account(OWNER).await.unwrap();
    assert_eq!(poll, AccountPoll { fetched: 7, handled: 6, fired: 6, repeated: 0 });
    // The citation twin of the mention arrives in a later poll: nothing new fires.
    harness.hm.push_events([citation("bafyMention", ALICE, AGENT, T0 + 1)]);
    let poll = monitor.poll_account(OWNER).await.unwrap();
    assert_eq!((poll.handled, poll.fired, poll.repeated), (1, 0, 2));
    // A twin that arrives before its comment fires; the comment, a poll later, does not.
    harness.hm.push_events([citation("bafyEarly", BOB, AGENT, T0 + 7)]);
    assert_eq!(monitor.poll_account(OWNER).await.unwrap().fired, 2);
    harness.hm.push_events([comment("bafyEarly", BOB, BOB, Some(AGENT), None, T0 + 7)]);
    let poll = monitor.poll_account(OWNER).await.unwrap();
    assert_eq!((poll.fired, poll.repeated), (0, 2));

    assert_eq!(
        harness.fired(),
        pairs(&[
            ("default", "blob-bafyEarly"),
            ("default", "blob-bafyMention"),
            ("default", "blob-bafyOnAgentDoc"),
            ("default", "blob-bafyReply"),
            ("mentions", "blob-bafyEarly"),
            ("mentions", "blob-bafyMention"),
            ("notes", "blob-bafyOnAgentDoc"),
            ("notes", "blob-bafyOwnDoc"),
        ])
    );
    let by_condition = |key: &str, ids: &[&str]| (key.to_owned(), ids.iter().map(|id| (*id).to_owned()).collect());
    assert_eq!(
        conditions(&harness, "default"),
        [
            by_condition("blob-bafyEarly", &["user-mention"]),
            by_condition("blob-bafyMention", &["user-mention"]),
            by_condition("blob-bafyOnAgentDoc", &["document-author-comment"]),
            by_condition("blob-bafyReply", &["comment-reply"]),
        ]
    );
    let mention = harness.sink.fired().into_iter().find(|found| found.firing_key == "blob-bafyMention").unwrap();
    assert_eq!(mention.matched_conditions.is_some(), mention.trigger_id == "default");
    assert_eq!(mention.summary, "comment on Notes");
    assert!(mention.activity.contains_key("comment"), "the run sees the event as the feed sent it");
}

#[tokio::test]
async fn a_burst_larger_than_one_poll_is_paged_across_polls() {
    let harness = Harness::new(T0).await;
    harness.trigger(OWNER, "mentions", &mentions(AGENT), T0).await;
    let monitor = harness.monitor(settings(2, 2));
    harness.hm.push_events([comment("bafyOld", ALICE, BOB, None, None, T0 - 1)]);
    monitor.poll_account(OWNER).await.unwrap();

    let burst: Vec<String> = (1..=9).map(|n| format!("bafyM{n}")).collect();
    harness.hm.push_events(burst.iter().map(|cid| comment(cid, ALICE, BOB, Some(AGENT), None, T0 + 1)));
    let first = monitor.poll_account(OWNER).await.unwrap();
    // A new event arrives while the backlog is walked; it waits for the backlog to end.
    harness.hm.push_events([comment("bafyLate", ALICE, BOB, Some(AGENT), None, T0 + 2)]);
    let mut fired = vec![first.fired];
    for _ in 0..4 {
        fired.push(monitor.poll_account(OWNER).await.unwrap().fired);
    }
    assert_eq!(fired, [4, 4, 1, 1, 0], "two pages of two per poll, then the backlog's end, then the top");

    let mut expected: Vec<(&str, String)> = burst.iter().map(|cid| ("mentions", format!("blob-{cid}"))).collect();
    expected.push(("mentions", "blob-bafyLate".to_owned()));
    let expected: Vec<(&str, &str)> = expected.iter().map(|(trigger, key)| (*trigger, key.as_str())).collect();
    assert_eq!(harness.fired(), pairs(&expected));
    assert_eq!(harness.sink.calls(), 10, "no event was handed over twice");
    let tokens: Vec<Option<String>> =
        harness.hm.feed_requests().into_iter().map(|params| params.get("pageToken").cloned()).collect();
    assert_eq!(
        tokens[1..5],
        [None, Some("before:9".to_owned()), Some("before:7".to_owned()), Some("before:5".to_owned())]
    );
    let mark = watermark::load(&harness.db, OWNER, &harness.hm.url).await.unwrap();
    assert_eq!(mark.cursor.unwrap().backlog, None);
}

#[tokio::test]
async fn racing_polls_fire_each_event_once() {
    let harness = Harness::new(T0).await;
    harness.trigger(OWNER, "default", &default_trigger::source(AGENT), T0).await;
    harness.trigger(OWNER, "mentions", &mentions(AGENT), T0).await;
    let (first, second) = (harness.monitor(settings(50, 5)), harness.monitor(settings(50, 5)));
    harness.hm.push_events([comment("bafyOld", BOB, BOB, None, None, T0 - 1)]);
    first.poll_account(OWNER).await.unwrap();

    // Two monitors (as two processes would) read the same page and both hand the matches over.
    harness.hm.delay_feed(Some(Duration::from_millis(100)));
    harness.hm.push_events([
        comment("bafyA", ALICE, BOB, Some(AGENT), None, T0 + 1),
        citation("bafyA", ALICE, AGENT, T0 + 1),
        comment("bafyB", ALICE, BOB, None, Some(AGENT), T0 + 2),
    ]);
    let (left, right) = tokio::join!(first.poll_account(OWNER), second.poll_account(OWNER));
    assert_eq!(left.unwrap().fired + right.unwrap().fired, 3);
    // Both loaded the same watermark before either saved: each handed all five matches over.
    assert_eq!(harness.sink.calls(), 10);
    assert_eq!(
        harness.fired(),
        pairs(&[("default", "blob-bafyA"), ("default", "blob-bafyB"), ("mentions", "blob-bafyA")])
    );

    // Two polls of one monitor take turns: the second finds nothing new to hand over.
    let calls = harness.sink.calls();
    harness
        .hm
        .push_events([comment("bafyC", BOB, AGENT, Some(AGENT), None, T0 + 3), citation("bafyC", BOB, AGENT, T0 + 3)]);
    let (left, right) = tokio::join!(first.poll_account(OWNER), first.poll_account(OWNER));
    let (left, right) = (left.unwrap(), right.unwrap());
    assert_eq!((left.fired + right.fired, left.handled + right.handled), (2, 2));
    assert_eq!(harness.sink.calls(), calls + 4, "the comment and its twin, to both triggers, by one poll only");
    assert_eq!(harness.fired().len(), 5);
}

#[tokio::test]
async fn a_first_poll_that_fails_starts_fresh_and_a_restart_resumes() {
    let mut harness = Harness::new(T0 + 10_000).await;
    harness.trigger(OWNER, "mentions", &mentions(AGENT), T0).await;
    harness.hm.push_events([
        comment("bafyHistory", ALICE, BOB, Some(AGENT), None, T0 - 3_600_000),
        comment("bafyRecent", ALICE, BOB, Some(AGENT), None, T0 + 5_000),
    ]);
    let monitor = harness.monitor(settings(50, 5));
    harness.hm.fail_feed(Some((500, "reindexing")));
    assert!(monitor.poll_account(OWNER).await.is_err());
    let mark = watermark::load(&harness.db, OWNER, &harness.hm.url).await.unwrap();
    assert_eq!(mark.cursor, None, "no baseline from a failed poll");
    assert!(mark.last_error.unwrap().contains("reindexing"));

    harness.hm.fail_feed(None);
    let poll = monitor.poll_account(OWNER).await.unwrap();
    assert_eq!((poll.fetched, poll.handled, poll.fired), (2, 1, 1), "history before the trigger is not replayed");
    assert_eq!(harness.fired(), pairs(&[("mentions", "blob-bafyRecent")]));
    let mark = watermark::load(&harness.db, OWNER, &harness.hm.url).await.unwrap();
    assert_eq!(mark.last_error, None);
    let checked: Option<i64> = harness
        .db
        .read(|conn| {
            Ok(conn
                .query_row("SELECT last_checked_at FROM agent_triggers WHERE id = 'mentions'", [], |row| row.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(checked, Some(T0 + 10_000), "a successful poll checked the trigger");
    assert_eq!(mark.cursor.unwrap().seen_keys, ["blob-bafyRecent", "blob-bafyHistory"]);

    // A restart resumes from the watermark: nothing is handed over again, and new events fire.
    harness.restart().await;
    let monitor = harness.monitor(settings(50, 5));
    let calls = harness.sink.calls();
    assert_eq!(monitor.poll_account(OWNER).await.unwrap().handled, 0);
    assert_eq!(harness.sink.calls(), calls);
    harness.hm.push_events([comment("bafyAfter", BOB, BOB, Some(AGENT), None, T0 + 20_000)]);
    assert_eq!(monitor.poll_account(OWNER).await.unwrap().fired, 1);
}

#[tokio::test]
async fn a_failing_sink_keeps_the_event_for_the_next_poll() {
    let harness = Harness::new(T0).await;
    harness.trigger(OWNER, "default", &default_trigger::source(AGENT), T0).await;
    let monitor = harness.monitor(settings(50, 5));
    harness.hm.push_events([comment("bafyOld", BOB, BOB, None, None, T0 - 1)]);
    monitor.poll_account(OWNER).await.unwrap();
    harness.hm.push_events([comment("bafyX", ALICE, BOB, Some(AGENT), None, T0 + 1)]);
    harness.sink.set_failing(true);
    assert!(monitor.poll_account(OWNER).await.is_err());
    assert!(harness.fired().is_empty());
    harness.sink.set_failing(false);
    assert_eq!(monitor.poll_account(OWNER).await.unwrap().fired, 1);
    assert_eq!(harness.fired(), pairs(&[("default", "blob-bafyX")]));
}

#[tokio::test]
async fn monitor_poll_reads_only_accounts_with_activity_triggers() {
    let harness = Harness::new(T0).await;
    harness.trigger(OWNER, "mentions", &mentions(AGENT), T0).await;
    harness.hm.push_events([comment("bafyOld", BOB, BOB, None, None, T0 - 1)]);
    let monitor = harness.monitor(settings(50, 5));
    let polls = monitor.poll().await.unwrap();
    assert_eq!(polls.keys().collect::<Vec<_>>(), [OWNER]);
    let accounts: Vec<String> =
        harness.hm.feed_requests().into_iter().filter_map(|params| params.get("currentAccount").cloned()).collect();
    assert_eq!(accounts, [OWNER]);
    assert_eq!(harness.hm.feed_requests()[0].get("order").map(String::as_str), Some("observed"));
}

#[tokio::test]
async fn replay_reports_what_recent_activity_would_fire_without_firing() {
    let harness = Harness::new(T0).await;
    harness.hm.push_events([
        comment("bafyOld", ALICE, BOB, Some(AGENT), None, T0 - 5),
        citation("bafyOld", ALICE, AGENT, T0 - 5),
        comment("bafyReply", ALICE, BOB, None, Some(AGENT), T0 - 4),
        comment("bafySelf", AGENT, BOB, None, Some(AGENT), T0 - 3),
    ]);
    let http = seed_agents_sdk::default_http_client().unwrap();
    let hm = HmClient::new(&http, &harness.hm.url);
    let found = replay(&hm, OWNER, &default_trigger::source(AGENT), 100, &settings(2, 5)).await.unwrap();
    let keys: Vec<(&str, Vec<String>)> = found
        .iter()
        .map(|found| {
            let ids = found.matched_conditions.clone().unwrap_or_default().into_iter().map(|c| c.id).collect();
            (found.firing_key.as_str(), ids)
        })
        .collect();
    assert_eq!(
        keys,
        [("blob-bafyReply", vec!["comment-reply".to_owned()]), ("blob-bafyOld", vec!["user-mention".to_owned()])],
        "newest first; the comment and its twin are one match"
    );
    assert_eq!(harness.sink.calls(), 0);
    let pages = harness.hm.feed_requests().len();
    assert_eq!(pages, 2, "pages of two until the feed ended");
    let limited = replay(&hm, OWNER, &mentions(AGENT), 1, &settings(50, 5)).await.unwrap();
    assert!(limited.is_empty(), "the newest event alone is a self-reply, no mention");
    let webhook = seed_agents_protocol::wire::from_slice::<AgentTriggerSource>(
        &seed_agents_protocol::wire::to_vec(&json!({"type": "webhook"})).unwrap(),
    )
    .unwrap();
    assert!(replay(&hm, OWNER, &webhook, 100, &settings(50, 5)).await.unwrap().is_empty());
}
