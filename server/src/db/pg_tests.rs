//! The database layer on PostgreSQL: migration, the SQL interface's values, group commit with
//! savepoints, and the refusal of a newer schema. They need a PostgreSQL server: the URL of one
//! (with the right to create databases) in `SEED_AGENTS_TEST_POSTGRES_URL`; `.ci/run` starts one
//! with `scripts/pg-cluster.sh`. Each test makes a database of its own and drops it after.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::error::ErrorKind;

/// The cluster's URL, or `None` (the test says it was skipped) when none is configured.
fn cluster() -> Option<String> {
    let url = std::env::var("SEED_AGENTS_TEST_POSTGRES_URL").ok().filter(|url| !url.is_empty());
    if url.is_none() {
        eprintln!("skipped: SEED_AGENTS_TEST_POSTGRES_URL is not set (scripts/pg-cluster.sh starts a cluster)");
    }
    url
}

/// A new empty database on the cluster, dropped when this is dropped.
struct Scratch {
    admin: String,
    name: String,
    url: String,
}

impl Scratch {
    fn new(admin: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("seed_db_test_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        admin_sql(admin, &format!("CREATE DATABASE {name}")).expect("the test cluster answers");
        let base = admin.rsplit_once('/').map_or(admin, |(base, _)| base);
        Scratch { admin: admin.to_owned(), url: format!("{base}/{name}"), name }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = admin_sql(&self.admin, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

/// Runs `sql` on the cluster's admin database (the synchronous client cannot run inside the
/// test's runtime: `run_detached` uses a thread of its own).
fn admin_sql(admin: &str, sql: &str) -> Result<()> {
    pg::run_detached(admin, sql)
}

/// The ids of the accounts from `from` on, in order.
async fn account_ids(db: &Db, from: &'static str) -> Vec<String> {
    db.read(move |conn| {
        let mut statement = conn.prepare("SELECT id FROM accounts WHERE id >= ?1 ORDER BY id")?;
        Ok(statement.query_map(params![from], |row| row.get::<_, String>(0))?.collect::<Result<Vec<_>>>()?)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_new_database_is_migrated_and_values_round_trip() {
    let Some(admin) = cluster() else { return };
    let scratch = Scratch::new(&admin);
    let db = Db::open_postgres(&scratch.url, Queues::default()).unwrap();
    let version = db.read(|conn| Ok(migrations::schema_version(conn)?)).await.unwrap();
    assert_eq!(version, migrations::SCHEMA_VERSION);

    db.write(|conn| {
        ensure_account(conn, "acct", 5)?;
        ensure_account(conn, "acct", 6)?;
        conn.execute_batch("CREATE TABLE t (i BIGINT, r DOUBLE PRECISION, s TEXT, b BYTEA, n BIGINT)")?;
        conn.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)",
            params![7_i64, 1.5_f64, "seven", vec![0_u8, 1, 2], None::<i64>],
        )?;
        Ok(())
    })
    .await
    .unwrap();
    let (row, created) = db
        .read(|conn| {
            let row = conn.query_row(sql::SAMPLE_QUERY, [], sql::sample_row)?;
            let created: i64 =
                conn.query_row("SELECT created_at FROM accounts WHERE id = ?1", params!["acct"], |row| row.get(0))?;
            Ok((row, created))
        })
        .await
        .unwrap();
    assert_eq!(row, sql::sample());
    assert_eq!(created, 5, "the second insert did nothing");
    let missing = db
        .read(|conn| Ok(conn.query_row("SELECT i FROM t WHERE s = 'x'", [], |row| row.get::<_, i64>(0)).optional()?));
    assert_eq!(missing.await.unwrap(), None);
    db.close();

    // Opened again: nothing to migrate, the rows are there.
    let db = Db::open_postgres(&scratch.url, Queues::default()).unwrap();
    let count = db.read(|conn| Ok(conn.query_row("SELECT COUNT(*) FROM t", [], |row| row.get::<_, i64>(0))?));
    assert_eq!(count.await.unwrap(), 1);
    db.close();
}

#[tokio::test]
async fn a_failed_write_rolls_back_alone_within_a_batch_even_when_it_swallowed_the_error() {
    let Some(admin) = cluster() else { return };
    let scratch = Scratch::new(&admin);
    let db = Db::open_postgres(&scratch.url, Queues::default()).unwrap();
    // Queued together, so they very likely share a batch; each must stand or fall alone.
    let first = db.write(|conn| Ok(ensure_account(conn, "a", 1)?));
    let failing = db.write(|conn| {
        ensure_account(conn, "b", 1)?;
        conn.execute("INSERT INTO no_such_table VALUES (1)", [])?;
        Ok(())
    });
    let last = db.write(|conn| Ok(ensure_account(conn, "c", 1)?));
    first.await.unwrap();
    assert_eq!(failing.await.unwrap_err().kind(), ErrorKind::Internal);
    last.await.unwrap();
    assert_eq!(account_ids(&db, "").await, ["a", "c"]);

    // A write that swallows an SQL error and answers Ok leaves PostgreSQL's transaction aborted:
    // its savepoint cannot be released. It is rolled back and fails alone; its neighbours commit.
    let before = db.write(|conn| Ok(ensure_account(conn, "d", 1)?));
    let swallowing = db.write(|conn| {
        ensure_account(conn, "e", 1)?;
        let _ = conn.execute("INSERT INTO no_such_table VALUES (1)", []);
        Ok(())
    });
    let after = db.write(|conn| Ok(ensure_account(conn, "f", 1)?));
    before.await.unwrap();
    assert_eq!(swallowing.await.unwrap_err().kind(), ErrorKind::Internal);
    after.await.unwrap();
    assert_eq!(account_ids(&db, "d").await, ["d", "f"]);
    db.close();
}

#[tokio::test]
async fn a_second_process_on_the_database_is_refused_until_the_first_closes() {
    let Some(admin) = cluster() else { return };
    let scratch = Scratch::new(&admin);
    let first = Db::open_postgres(&scratch.url, Queues::default()).unwrap();
    match Db::open_postgres(&scratch.url, Queues::default()) {
        Err(DbError::InUse { url }) => assert_eq!(url, scratch.url),
        other => panic!("expected InUse, got {other:?}"),
    }
    // Another schema of the same database is another deployment.
    let other = pg::with_schema(&scratch.url, "other_deployment").unwrap();
    Db::open_postgres(&other, Queues::default()).expect("another schema opens").close();
    first.close();
    Db::open_postgres(&scratch.url, Queues::default()).expect("free again once the first closed").close();
}

#[tokio::test]
async fn text_holding_nul_is_refused_as_bad_input_and_the_batch_goes_on() {
    let Some(admin) = cluster() else { return };
    let scratch = Scratch::new(&admin);
    let db = Db::open_postgres(&scratch.url, Queues::default()).unwrap();
    let before = db.write(|conn| Ok(ensure_account(conn, "a", 1)?));
    let nul = db.write(|conn| Ok(ensure_account(conn, "b\0c", 1)?));
    let after = db.write(|conn| Ok(ensure_account(conn, "d", 1)?));
    before.await.unwrap();
    let refused = nul.await.unwrap_err();
    assert_eq!((refused.kind(), refused.message()), (ErrorKind::Invalid, "Text must not contain the character U+0000"));
    after.await.unwrap();
    assert_eq!(account_ids(&db, "").await, ["a", "d"]);
    db.close();
}

#[tokio::test]
async fn a_database_of_a_newer_schema_is_refused() {
    let Some(admin) = cluster() else { return };
    let scratch = Scratch::new(&admin);
    let db = Db::open_postgres(&scratch.url, Queues::default()).unwrap();
    db.write(|conn| Ok(conn.execute("UPDATE seed_agents_schema SET version = version + 1", [])?)).await.unwrap();
    db.close();
    match Db::open_postgres(&scratch.url, Queues::default()) {
        Err(DbError::TooNew { found, supported, .. }) => assert_eq!(found, supported + 1),
        other => panic!("expected TooNew, got {other:?}"),
    }
}

#[test]
fn a_url_that_is_not_postgres_is_refused_and_a_password_is_never_shown() {
    let refused = Db::open_postgres("mysql://user:hunter2@localhost/db", Queues::default()).unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("postgres://"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert_eq!(pg::redacted("postgres://me:secret@host:5432/db"), "postgres://me:***@host:5432/db");
    assert_eq!(pg::redacted("postgres://me@host/db"), "postgres://me@host/db");
    assert_eq!(
        pg::redacted("postgres://me:p@ss@host/db?password=x&sslmode=off"),
        "postgres://me:***@host/db?password=***&sslmode=off"
    );
}
