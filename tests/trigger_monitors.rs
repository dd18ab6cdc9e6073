//! The trigger monitors against a real database (the suite's: SQLite, or PostgreSQL) and the fake
//! Hypermedia feed on loopback: schedules stepped through virtual time with a manual clock, and
//! the activity monitor scripted through mentions, replies, author comments, citation twins,
//! pagination and racing polls. A counting in-memory sink stands in for the firing table; it
//! records each (trigger, key) once, as the unique index downstream does.

mod activity;
mod schedule;

use std::sync::Arc;

use seed_agents_protocol::generated::AgentTriggerSource;
use seed_agents_protocol::wire;
use seed_agents_server::Clock;
use seed_agents_server::testing::db::Db;
use seed_agents_server::testing::triggers::activity::{ActivityMonitor, FeedSettings};
use seed_agents_server::testing::triggers::sink::MemorySink;

use crate::support::db::{EMPTY_MAP, open_db_at};
use crate::support::hm::FakeHm;

/// A database in a temporary directory, a manual clock, the fake feed and a counting sink.
struct Harness {
    dir: tempfile::TempDir,
    db: Db,
    clock: Clock,
    hm: FakeHm,
    sink: MemorySink,
}

impl Harness {
    async fn new(now_ms: i64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db_at(dir.path());
        Self { dir, db, clock: Clock::manual(now_ms), hm: FakeHm::start().await, sink: MemorySink::new() }
    }

    /// Closes the database and opens it again, as a restarted server would.
    async fn restart(&mut self) {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.close()).await.unwrap();
        self.db = open_db_at(self.dir.path());
    }

    /// An agent of `account`; returns its id.
    async fn agent(&self, account: &str) -> String {
        let (id, account) = (format!("agent-{account}"), account.to_owned());
        let agent = id.clone();
        self.db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                     VALUES (?1, ?2, ?3, '/tmp/agent', 'active', 1, 1) ON CONFLICT DO NOTHING",
                    (agent, account, EMPTY_MAP),
                )?;
                Ok(())
            })
            .await
            .unwrap();
        id
    }

    /// An enabled trigger `id` of `account`'s agent, created at `created_at`.
    async fn trigger(&self, account: &str, id: &str, source: &AgentTriggerSource, created_at: i64) {
        let agent = self.agent(account).await;
        let (id, account, source) = (id.to_owned(), account.to_owned(), wire::to_vec(source).unwrap());
        self.db
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt,
                                                 created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?1, 1, ?4, 'Respond.', ?5, ?5)",
                    (id, account, agent, source, created_at),
                )?;
                Ok(())
            })
            .await
            .unwrap();
    }

    /// `(enabled, last_fired_at, last_error)` of a trigger.
    async fn trigger_state(&self, id: &str) -> (bool, Option<i64>, Option<String>) {
        let id = id.to_owned();
        self.db
            .read(move |conn| {
                Ok(conn.query_row(
                    "SELECT enabled, last_fired_at, last_error FROM agent_triggers WHERE id = ?1",
                    [id],
                    |row| Ok((row.get::<_, i64>(0)? == 1, row.get(1)?, row.get(2)?)),
                )?)
            })
            .await
            .unwrap()
    }

    /// An activity monitor of the fake feed.
    fn monitor(&self, settings: FeedSettings) -> ActivityMonitor {
        ActivityMonitor::new(
            self.db.clone(),
            self.clock.clone(),
            seed_agents_sdk::default_http_client().unwrap(),
            self.hm.url.clone(),
            Arc::new(self.sink.clone()),
            settings,
        )
    }

    /// The firings recorded, as `(trigger, key)` pairs, sorted.
    fn fired(&self) -> Vec<(String, String)> {
        let mut keys = self.sink.keys();
        keys.sort();
        keys
    }
}

/// `(trigger, key)` pairs, sorted, from string slices.
fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> =
        list.iter().map(|(trigger, key)| ((*trigger).to_owned(), (*key).to_owned())).collect();
    pairs.sort();
    pairs
}
