//! Runs: the durable queue every agent turn, child and script goes through (ARCHITECTURE.md rule 6).
//!
//! Layout:
//! - [`queue`]: enqueueing (`insert_run`, `enqueue`), claiming under a lease, the boot sweep,
//!   waking parked runs, the session status mirror, and [`Changes`] (what a transaction changed,
//!   published after its commit);
//! - [`finish`]: the one place an executor's outcome is written (retries with backoff, the final
//!   failure's `error` event, usage);
//! - [`cancel`]: a run's tree, a session's or an agent's live runs, a budget pause lifted;
//! - [`signal`]: delivering a signal to a parked run (`SignalRun`, a trigger's `wake`);
//! - [`engine`]: the [`Engine`] in `App` (dispatcher, inline runs, leases, shutdown);
//! - [`executor`]: the [`Executor`](executor::Executor) interface the model loop implements, with
//!   what it is given ([`Claimed`](queue::Claimed), [`StopSignal`](executor::StopSignal)) and
//!   reports ([`Outcome`]);
//! - [`wait`]: what a parked run waits for;
//! - [`store`]: every statement on the `runs` table, and run rows read back as `RunInfo`;
//! - [`children`]: delegated children answering their parents' calls (delivery, wait sets,
//!   plan step settlement, the race closers);
//! - [`actions`]: `GetRun`, `ListRuns`, `CancelRun`, `SignalRun`, `GetRunJournal`.
//!
//! Invariants: a run changes state only inside a write transaction that also recomputes its
//! session's status mirror, and every change is published after that commit; at most one agent
//! run per session is claimed or running; `attempt` counts executions, never resumptions.

pub(crate) mod actions;
pub(crate) mod cancel;
pub(crate) mod children;
pub(crate) mod engine;
pub(crate) mod executor;
pub(crate) mod finish;
pub(crate) mod hooks;
pub(crate) mod queue;
pub(crate) mod signal;
pub(crate) mod store;
pub(crate) mod wait;

#[cfg(test)]
mod engine_tests;

pub(crate) use engine::{Engine, InlineOutcome, Limits, Outcome};
pub(crate) use finish::{Usage, add_usage};
pub(crate) use hooks::RunHooks;
pub(crate) use queue::{Changes, NewRun, Queue, enqueue};

pub(crate) use store::{session_has_active_turn, session_has_live_turn};

#[cfg(test)]
mod tests {
    use crate::db::{Connection, params};

    use super::*;
    use crate::db::migrated_in_memory;

    /// A database with agent `a` holding session `s` (and `other`), owned by `owner`.
    fn db() -> Connection {
        let conn = migrated_in_memory();
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
             INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                 VALUES ('s', 'owner', 'a', 'system', 'idle', 1, 1),
                        ('other', 'owner', 'a', 'system', 'idle', 1, 1);",
        )
        .unwrap();
        conn
    }

    fn insert(conn: &Connection, id: &str, kind: &str, status: &str) -> crate::db::Result<usize> {
        conn.execute(
            "INSERT INTO runs (id, account_id, root_run_id, kind, origin, agent_id, session_id, input_cbor,
                               status, queue, created_at, updated_at)
             VALUES (?1, 'owner', ?1, ?2, 'user', 'a', 's', x'a0', ?3, 'interactive', 1, 1)",
            params![id, kind, status],
        )
    }

    #[test]
    fn only_queued_claimed_or_running_agent_runs_hold_the_session() {
        let conn = db();
        assert!(!session_has_active_turn(&conn, "s").unwrap(), "no runs");
        let cases = [
            ("agent", "queued", true),
            ("agent", "claimed", true),
            ("agent", "running", true),
            ("agent", "waiting", false),
            ("agent", "succeeded", false),
            ("agent", "failed", false),
            ("agent", "canceled", false),
            ("workflow", "running", false),
        ];
        for (index, (kind, status, holds)) in cases.into_iter().enumerate() {
            let id = format!("run-{index}");
            insert(&conn, &id, kind, status).unwrap();
            assert_eq!(session_has_active_turn(&conn, "s").unwrap(), holds, "{kind} {status}");
            assert!(!session_has_active_turn(&conn, "other").unwrap(), "{kind} {status} is not other's");
            conn.execute("DELETE FROM runs WHERE id = ?1", params![id]).unwrap();
        }
    }

    #[test]
    fn the_check_searches_the_session_status_index() {
        let conn = db();
        let plan: Vec<String> = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT 1 FROM runs WHERE session_id = ?1 AND kind = 'agent'
                     AND status IN ('queued', 'claimed', 'running')",
            )
            .unwrap()
            .query_map(params!["s"], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<crate::db::Result<_>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains("USING INDEX runs_by_session_status (session_id=? AND status=?)")),
            "{plan:?}"
        );
    }

    #[test]
    fn constraints_refuse_unknown_statuses_kinds_origins_and_queues() {
        let conn = db();
        assert!(insert(&conn, "bad-status", "agent", "paused").is_err());
        assert!(insert(&conn, "bad-kind", "script", "queued").is_err());
        let insert_with = |origin: &str, queue: &str| {
            conn.execute(
                "INSERT INTO runs (id, account_id, root_run_id, kind, origin, queue, input_cbor, status, created_at,
                                   updated_at)
                 VALUES ('x', 'owner', 'x', 'agent', ?1, ?2, x'a0', 'queued', 1, 1)",
                params![origin, queue],
            )
        };
        assert!(insert_with("cron", "background").is_err());
        assert!(insert_with("trigger", "urgent").is_err());
        assert!(insert_with("trigger", "background").is_ok(), "known values are accepted");
    }

    #[test]
    fn runs_outlive_their_session_and_agent() {
        let conn = db();
        insert(&conn, "r", "agent", "succeeded").unwrap();
        conn.execute("DELETE FROM sessions WHERE id = 's'", []).unwrap();
        let owners = |conn: &Connection| {
            conn.query_row("SELECT agent_id, session_id FROM runs WHERE id = 'r'", [], |row| {
                Ok((row.get::<_, Option<String>>(0)?, row.get::<_, Option<String>>(1)?))
            })
            .unwrap()
        };
        assert_eq!(owners(&conn), (Some("a".to_owned()), None));
        conn.execute("DELETE FROM agents WHERE id = 'a'", []).unwrap();
        assert_eq!(owners(&conn), (None, None));
    }
}
