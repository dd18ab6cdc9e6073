//! Versioned schema migrations, tracked in SQLite's `user_version`.
//!
//! Each entry of [`MIGRATIONS`] moves the schema one version up and runs in its own transaction.
//! Never edit a released migration: add a new one. A database whose version is newer than this
//! build is refused (an older server must not write a schema it does not understand).

use rusqlite::Connection;

use super::DbError;

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const MIGRATIONS: &[&str] = &[
    // 1: accounts, signers, secrets, providers, agents, collaborators, sessions, events,
    // idempotency.
    r#"
    CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE account_authorizations (
        account_id TEXT NOT NULL,
        signer TEXT NOT NULL,
        role TEXT NOT NULL,
        capability BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (account_id, signer)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE secrets (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        name TEXT NOT NULL,
        ciphertext BLOB NOT NULL,
        metadata_cbor BLOB,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (account_id, name)
    ) STRICT;

    CREATE TABLE model_providers (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        name TEXT NOT NULL,
        type TEXT NOT NULL,
        config_cbor BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (account_id, name)
    ) STRICT;

    CREATE TABLE agents (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        definition_cbor BLOB NOT NULL,
        state_dir TEXT NOT NULL,
        status TEXT NOT NULL,
        public_read INTEGER NOT NULL DEFAULT 0,
        public_chat INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX agents_by_account ON agents (account_id, updated_at DESC, id DESC);

    CREATE TABLE agent_collaborators (
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        account_id TEXT NOT NULL,
        role TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        accepted_at INTEGER,
        PRIMARY KEY (agent_id, account_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX agent_collaborators_by_account
        ON agent_collaborators (account_id, status, updated_at DESC);

    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        title TEXT,
        title_source TEXT NOT NULL,
        status TEXT NOT NULL,
        parent_session_id TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        run_id TEXT,
        model_override_cbor BLOB,
        thoroughness TEXT,
        description TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX sessions_by_agent ON sessions (agent_id, updated_at DESC, id DESC);
    CREATE INDEX sessions_by_account ON sessions (account_id, updated_at DESC, id DESC);
    CREATE INDEX sessions_by_parent ON sessions (parent_session_id, created_at);

    CREATE TABLE session_events (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        event_cbor BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (session_id, seq)
    ) STRICT;

    CREATE TABLE action_idempotency (
        account_id TEXT NOT NULL,
        action TEXT NOT NULL,
        client_request_id TEXT NOT NULL,
        request_cbor BLOB NOT NULL,
        response_cbor BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (account_id, action, client_request_id)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 2: chunked uploads, durable across restarts. `target_cbor` is the `FileUploadTarget`;
    // `received` moves only after the staged bytes are on disk; `updated_at` drives idle expiry.
    r#"
    CREATE TABLE uploads (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        target_cbor BLOB NOT NULL,
        size INTEGER NOT NULL,
        received INTEGER NOT NULL DEFAULT 0,
        staging_path TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX uploads_by_account ON uploads (account_id, updated_at);
    CREATE INDEX uploads_by_updated ON uploads (updated_at);
    "#,
    // 3: agent triggers (rows only; the engine that fires them comes later). `source_cbor` is the
    // `AgentTriggerSource`, `prompt` JSON prompt blocks or legacy text, `continuation_cbor` the
    // optional continuation.
    r#"
    CREATE TABLE agent_triggers (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        enabled INTEGER NOT NULL,
        source_cbor BLOB NOT NULL,
        prompt TEXT NOT NULL,
        continuation_cbor BLOB,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        last_checked_at INTEGER,
        last_fired_at INTEGER,
        last_error TEXT
    ) STRICT;
    CREATE INDEX agent_triggers_by_agent ON agent_triggers (agent_id, updated_at DESC, id DESC);
    CREATE INDEX agent_triggers_by_account ON agent_triggers (account_id, enabled);
    "#,
    // 4: runs, the durable queue (rows only; the engine that claims and executes them comes later).
    // A run outlives its agent and session: deleting either nulls `agent_id` / `session_id`.
    // `trigger_firing_id` has no foreign key yet because `trigger_firings` does not exist; the
    // migration that creates it must rebuild this table to add one (SQLite cannot add it in place).
    // Runs are never deleted, so `parent_run_id` keeps the default (refuse) delete action.
    r#"
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        root_run_id TEXT NOT NULL,
        parent_run_id TEXT REFERENCES runs (id),
        parent_tool_call_id TEXT,
        continued_from_run_id TEXT,
        depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
        kind TEXT NOT NULL CHECK (kind IN ('agent', 'workflow')),
        origin TEXT NOT NULL CHECK (origin IN ('user', 'trigger', 'agent', 'workflow', 'system')),
        agent_id TEXT REFERENCES agents (id) ON DELETE SET NULL,
        session_id TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        trigger_firing_id TEXT,
        title TEXT,
        model TEXT,
        source_cid TEXT,
        source_text TEXT,
        input_cbor BLOB NOT NULL,
        output_cbor BLOB,
        error_cbor BLOB,
        wait_cbor BLOB,
        budget_cbor BLOB,
        usage_cbor BLOB,
        plan_cbor BLOB,
        status TEXT NOT NULL CHECK (
            status IN ('queued', 'claimed', 'running', 'waiting', 'succeeded', 'failed', 'canceled')
        ),
        queue TEXT NOT NULL DEFAULT 'background' CHECK (queue IN ('interactive', 'background')),
        attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
        max_attempts INTEGER NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
        not_before INTEGER,
        lease_owner TEXT,
        lease_expires_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        started_at INTEGER,
        finished_at INTEGER
    ) STRICT;
    CREATE INDEX runs_dispatch ON runs (status, queue, not_before, created_at);
    CREATE INDEX runs_by_root ON runs (root_run_id, created_at);
    CREATE INDEX runs_by_parent ON runs (parent_run_id);
    CREATE INDEX runs_by_session ON runs (session_id, created_at DESC);
    CREATE INDEX runs_by_session_status ON runs (session_id, status);
    CREATE INDEX runs_by_agent ON runs (agent_id, created_at DESC);
    CREATE INDEX runs_by_account ON runs (account_id, created_at DESC);
    "#,
    // 5: the session checklist the `plan` verb keeps (a `RunPlan`, canonical CBOR; NULL = none).
    r#"
    ALTER TABLE sessions ADD COLUMN plan_cbor BLOB;
    "#,
    // 6: an agent's tool documents (docs/runtime.md §4.6): builtin callables' contracts and the
    // lambdas it or its writers authored. `doc_cbor` is the document's canonical DAG-CBOR and
    // `cid` its CIDv1 (dag-cbor, sha2-256). Rows are stored under the owner's account.
    r#"
    CREATE TABLE tool_documents (
        account_id TEXT NOT NULL,
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('builtin', 'lambda')),
        cid TEXT NOT NULL,
        doc_cbor BLOB NOT NULL,
        enabled INTEGER NOT NULL DEFAULT 1,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (account_id, agent_id, name)
    ) STRICT, WITHOUT ROWID;
    "#,
    // The trigger monitors' progress. `trigger_schedule_state` holds the last occurrence a
    // schedule trigger fired for (its due rules start there). `activity_watermarks` holds, per
    // account and Hypermedia server, the keys of the feed events already handled: `cursor_cbor`
    // is `{seenKeys: [..]}` newest first, NULL until a poll succeeded (a first poll that fails
    // leaves no baseline, so the next success starts fresh instead of replaying history).
    r#"
    CREATE TABLE trigger_schedule_state (
        trigger_id TEXT PRIMARY KEY REFERENCES agent_triggers (id) ON DELETE CASCADE,
        last_scheduled_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE activity_watermarks (
        account_id TEXT NOT NULL,
        server_url TEXT NOT NULL,
        cursor_cbor BLOB,
        last_poll_at INTEGER,
        last_success_at INTEGER,
        last_error TEXT,
        PRIMARY KEY (account_id, server_url)
    ) STRICT, WITHOUT ROWID;
    "#,
    // Trigger firings (docs/protocol.md §E.3): one row per (trigger, activity key), so an event
    // fires a trigger at most once; `parent_firing_id` is the firing whose run's completion caused
    // this one (run-completed chains). Triggers gain `merged_into` (CombineAgentTriggers) and a
    // sealed webhook secret, and `prompt_cbor` (the prompt's Seed blocks when it was sent as
    // blocks). `runs` is rebuilt so `trigger_firing_id` becomes a real foreign key (SQLite cannot
    // add one in place; `apply` runs migrations with foreign keys off and checks them before each
    // commit), and gains an index on it. Its `completion_pending` is 1 until the run-completed
    // monitor has handled the run's end (or the run's own end found nothing watching it); runs
    // that ended before this migration have nothing to fire. The partial index holds only
    // finished agent runs still pending, so the monitor's scan costs what is left to do, never
    // the history.
    r#"
    ALTER TABLE agent_triggers ADD COLUMN merged_into TEXT;
    ALTER TABLE agent_triggers ADD COLUMN webhook_secret BLOB;
    ALTER TABLE agent_triggers ADD COLUMN prompt_cbor BLOB;

    CREATE TABLE trigger_firings (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        trigger_id TEXT NOT NULL REFERENCES agent_triggers (id) ON DELETE CASCADE,
        activity_key TEXT NOT NULL,
        activity_summary TEXT NOT NULL,
        activity_cbor BLOB NOT NULL,
        source_cbor BLOB NOT NULL,
        matched_cbor BLOB,
        parent_firing_id TEXT REFERENCES trigger_firings (id) ON DELETE SET NULL,
        session_id TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        run_id TEXT,
        status TEXT NOT NULL,
        error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (trigger_id, activity_key)
    ) STRICT;
    CREATE INDEX trigger_firings_by_trigger ON trigger_firings (trigger_id, created_at DESC, id DESC);
    CREATE INDEX trigger_firings_by_session ON trigger_firings (session_id);
    CREATE INDEX trigger_firings_by_parent ON trigger_firings (parent_firing_id);

    CREATE TABLE runs_rebuilt (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        root_run_id TEXT NOT NULL,
        parent_run_id TEXT REFERENCES runs (id),
        parent_tool_call_id TEXT,
        continued_from_run_id TEXT,
        depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
        kind TEXT NOT NULL CHECK (kind IN ('agent', 'workflow')),
        origin TEXT NOT NULL CHECK (origin IN ('user', 'trigger', 'agent', 'workflow', 'system')),
        agent_id TEXT REFERENCES agents (id) ON DELETE SET NULL,
        session_id TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        trigger_firing_id TEXT REFERENCES trigger_firings (id) ON DELETE SET NULL,
        title TEXT,
        model TEXT,
        source_cid TEXT,
        source_text TEXT,
        input_cbor BLOB NOT NULL,
        output_cbor BLOB,
        error_cbor BLOB,
        wait_cbor BLOB,
        budget_cbor BLOB,
        usage_cbor BLOB,
        plan_cbor BLOB,
        status TEXT NOT NULL CHECK (
            status IN ('queued', 'claimed', 'running', 'waiting', 'succeeded', 'failed', 'canceled')
        ),
        queue TEXT NOT NULL DEFAULT 'background' CHECK (queue IN ('interactive', 'background')),
        attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
        max_attempts INTEGER NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
        not_before INTEGER,
        lease_owner TEXT,
        lease_expires_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        started_at INTEGER,
        finished_at INTEGER
    ) STRICT;
    INSERT INTO runs_rebuilt SELECT * FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_rebuilt RENAME TO runs;
    CREATE INDEX runs_dispatch ON runs (status, queue, not_before, created_at);
    CREATE INDEX runs_by_root ON runs (root_run_id, created_at);
    CREATE INDEX runs_by_parent ON runs (parent_run_id);
    CREATE INDEX runs_by_session ON runs (session_id, created_at DESC);
    CREATE INDEX runs_by_session_status ON runs (session_id, status);
    CREATE INDEX runs_by_agent ON runs (agent_id, created_at DESC);
    CREATE INDEX runs_by_account ON runs (account_id, created_at DESC);
    CREATE INDEX runs_by_firing ON runs (trigger_firing_id);
    ALTER TABLE runs ADD COLUMN completion_pending INTEGER NOT NULL DEFAULT 1;
    UPDATE runs SET completion_pending = 0 WHERE finished_at IS NOT NULL;
    CREATE INDEX runs_completion_pending ON runs (finished_at, id)
        WHERE completion_pending = 1 AND finished_at IS NOT NULL AND kind = 'agent';
    "#,
    // MCP servers (docs/protocol.md §G.5): an account's servers by name, their configuration
    // (canonical CBOR of `McpServerConfig`; secret headers are secret names, never values), the
    // transport discovery settled on, the tools of the last successful discovery and the last
    // status. `tool_documents` is rebuilt so its `kind` may be `mcp` (tools projected from a
    // granted server; SQLite cannot change a CHECK in place).
    r#"
    CREATE TABLE mcp_servers (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        name TEXT NOT NULL,
        config_cbor BLOB NOT NULL,
        transport TEXT CHECK (transport IN ('http', 'sse')),
        tools_cbor BLOB NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('ok', 'error', 'unknown')),
        error TEXT,
        checked_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (account_id, name)
    ) STRICT;

    CREATE TABLE tool_documents_rebuilt (
        account_id TEXT NOT NULL,
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('builtin', 'lambda', 'mcp')),
        cid TEXT NOT NULL,
        doc_cbor BLOB NOT NULL,
        enabled INTEGER NOT NULL DEFAULT 1,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (account_id, agent_id, name)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO tool_documents_rebuilt SELECT * FROM tool_documents;
    DROP TABLE tool_documents;
    ALTER TABLE tool_documents_rebuilt RENAME TO tool_documents;
    "#,
    // Drafts of Hypermedia documents an agent keeps with `write hm://` `draft.*` (docs/runtime.md
    // §4.3): markdown content and metadata (JSON text of scalar attributes), the address it will
    // be published at and whether publishing updates a document there; removed with the agent.
    r#"
    CREATE TABLE agent_drafts (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        content TEXT NOT NULL,
        metadata_json TEXT NOT NULL,
        target TEXT NOT NULL,
        edit INTEGER NOT NULL CHECK (edit IN (0, 1)),
        status TEXT NOT NULL CHECK (status IN ('idle', 'published')),
        published_id TEXT,
        published_version TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX agent_drafts_agent_updated ON agent_drafts (account_id, agent_id, updated_at DESC);
    "#,
    // Continuations (`continue_session`, docs/runtime.md §5.10): the session a conversation moved
    // to, from which session, why, and the run that moved it. A session is continued from at most
    // once (`to_session_id` is unique); one may be continued several times, the newest link
    // showing as its `continuedTo`. Removed with either session.
    r#"
    CREATE TABLE session_continuations (
        id TEXT PRIMARY KEY,
        from_session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        to_session_id TEXT NOT NULL UNIQUE REFERENCES sessions (id) ON DELETE CASCADE,
        run_id TEXT NOT NULL,
        reason TEXT NOT NULL CHECK (reason IN ('context_pressure', 'other', 'phase_change', 'refocus',
                                                'topic_change', 'user_request')),
        created_at INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX session_continuations_from ON session_continuations (from_session_id, created_at DESC);
    "#,
    // Workflow journals (docs/workflows.md): every effect a script run asked for and what came of
    // it, in order, as DAG-CBOR maps (`{kind, callSeq, key?, …}`); removed with the run.
    r#"
    CREATE TABLE run_journal (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        entry_cbor BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) STRICT, WITHOUT ROWID;
    "#,
    // Trigger-started workflow runs (a `script` or `tool` continuation, docs/workflows.md §4):
    // the run-completed monitor records their end on their firing, so the partial index of ends
    // it has not handled holds them too (agent runs, and runs answering a firing). Workflow runs
    // that ended before have nothing left to watch.
    r#"
    UPDATE runs SET completion_pending = 0 WHERE kind = 'workflow' AND finished_at IS NOT NULL;
    DROP INDEX runs_completion_pending;
    CREATE INDEX runs_completion_pending ON runs (finished_at, id)
        WHERE completion_pending = 1 AND finished_at IS NOT NULL AND (kind = 'agent' OR trigger_firing_id IS NOT NULL);
    "#,
    // The answer an agent run's last pass gave (docs/runtime.md §6.3): set in the transaction
    // that appends a pass's final assistant message, cleared by a continuation notice. An
    // execution that finds it set (the server died between the answer and the run's end) ends
    // from it instead of asking the model to answer again.
    r#"
    ALTER TABLE runs ADD COLUMN answered_event_id TEXT;
    "#,
];

/// The schema version stored in the database: the migrations applied.
pub(crate) fn schema_version(conn: &super::Connection) -> super::Result<i64> {
    match conn.as_sqlite() {
        Some(sqlite) => Ok(sqlite_schema_version(sqlite)?),
        None => super::pg::schema_version(conn),
    }
}

/// SQLite's `user_version`.
pub(crate) fn sqlite_schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the database at `conn` to [`SCHEMA_VERSION`], or refuses one that is newer.
pub(super) fn apply(conn: &mut Connection, path: &str) -> Result<(), DbError> {
    let sqlite = |source| DbError::Sqlite { path: path.to_owned(), source };
    let found = sqlite_schema_version(conn).map_err(sqlite)?;
    if found > SCHEMA_VERSION {
        return Err(DbError::TooNew { path: path.to_owned(), found, supported: SCHEMA_VERSION });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    // Foreign keys are off while migrating (a migration may rebuild a referenced table, which
    // SQLite allows only so) and checked before each commit; the setting is restored after.
    let enforced: bool = conn.pragma_query_value(None, "foreign_keys", |row| row.get(0)).map_err(sqlite)?;
    conn.pragma_update(None, "foreign_keys", "OFF").map_err(sqlite)?;
    let migrated = (|| {
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            let version = index as i64 + 1;
            let tx = conn.transaction().map_err(sqlite)?;
            tx.execute_batch(sql).map_err(sqlite)?;
            let violations: i64 =
                tx.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |row| row.get(0)).map_err(sqlite)?;
            if violations > 0 {
                return Err(DbError::Sqlite {
                    path: path.to_owned(),
                    source: rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY),
                        Some(format!("migration {version} leaves {violations} foreign key violations")),
                    ),
                });
            }
            tx.pragma_update(None, "user_version", version).map_err(sqlite)?;
            tx.commit().map_err(sqlite)?;
            tracing::info!(version, "applied database migration");
        }
        Ok(())
    })();
    conn.pragma_update(None, "foreign_keys", if enforced { "ON" } else { "OFF" }).map_err(sqlite)?;
    migrated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_a_new_database_and_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        apply(&mut conn, ":memory:").unwrap();
        apply(&mut conn, ":memory:").unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[test]
    fn upgrades_a_version_3_database_with_data_to_runs() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        for (index, sql) in MIGRATIONS[..3].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", index as i64 + 1).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
             INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                 VALUES ('s', 'owner', 'a', 'system', 'idle', 1, 1);",
        )
        .unwrap();
        apply(&mut conn, ":memory:").unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.execute_batch(
            "INSERT INTO runs (id, account_id, root_run_id, kind, origin, agent_id, session_id, input_cbor,
                               status, created_at, updated_at)
                 VALUES ('r', 'owner', 'r', 'agent', 'user', 'a', 's', x'a0', 'queued', 2, 2);",
        )
        .unwrap();
    }

    #[test]
    fn the_firings_migration_rebuilds_runs_with_their_rows_and_a_real_foreign_key() {
        let firings = MIGRATIONS.iter().position(|sql| sql.contains("CREATE TABLE trigger_firings")).unwrap();
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        for (index, sql) in MIGRATIONS[..firings].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", index as i64 + 1).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'idle', 1, 1);
             INSERT INTO runs (id, account_id, root_run_id, kind, origin, agent_id, input_cbor, status, created_at,
                               updated_at)
                 VALUES ('parent', 'owner', 'parent', 'agent', 'user', 'a', x'a0', 'succeeded', 1, 1);
             INSERT INTO runs (id, account_id, root_run_id, parent_run_id, depth, kind, origin, agent_id, input_cbor,
                               status, created_at, updated_at)
                 VALUES ('child', 'owner', 'parent', 'parent', 1, 'agent', 'agent', 'a', x'a0', 'queued', 2, 2);",
        )
        .unwrap();
        apply(&mut conn, ":memory:").unwrap();
        let enforced: bool = conn.pragma_query_value(None, "foreign_keys", |row| row.get(0)).unwrap();
        assert!(enforced, "foreign keys are on again after migrating");
        let parent: String =
            conn.query_row("SELECT parent_run_id FROM runs WHERE id = 'child'", [], |row| row.get(0)).unwrap();
        assert_eq!(parent, "parent", "rows survive the rebuild");
        let dangling = conn.execute("UPDATE runs SET trigger_firing_id = 'no-such-firing' WHERE id = 'child'", []);
        assert!(dangling.is_err(), "trigger_firing_id is a foreign key now");
        conn.execute_batch(
            "INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt, created_at,
                                         updated_at)
                 VALUES ('t', 'owner', 'a', 'T', 1, x'a0', 'p', 1, 1);
             INSERT INTO trigger_firings (id, account_id, trigger_id, activity_key, activity_summary, activity_cbor,
                                          source_cbor, status, created_at, updated_at)
                 VALUES ('f', 'owner', 't', 'k', 's', x'a0', x'a0', 'started', 1, 1);
             UPDATE runs SET trigger_firing_id = 'f' WHERE id = 'child';
             DELETE FROM agents WHERE id = 'a';",
        )
        .unwrap();
        let detached: (Option<String>, Option<String>) = conn
            .query_row("SELECT agent_id, trigger_firing_id FROM runs WHERE id = 'child'", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .unwrap();
        assert_eq!(detached, (None, None), "deleting the agent detaches its runs from firings too");
        let indexes: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'runs'", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert!(indexes >= 9, "the runs indexes were recreated ({indexes})");
    }

    #[test]
    fn refuses_a_newer_database() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        let error = apply(&mut conn, "x.db").unwrap_err();
        assert!(matches!(error, DbError::TooNew { .. }), "{error}");
        assert!(error.to_string().contains("newer than this server"));
    }
}
