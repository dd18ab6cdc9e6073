//! The database of a server under test, through the server's own SQL interface, so a test reads
//! and writes rows the same way on SQLite and on PostgreSQL: through the running server's
//! connections ([`read_db`], [`write_db`]), or, while the server is stopped, through a database
//! handle opened on its data directory ([`write_db_at`]).

use std::path::Path;

use seed_agents_server::Config;
use seed_agents_server::testing::db::{Connection, Db, Result};

use crate::TestServer;
use crate::server::postgres_for;

/// An empty DAG-CBOR map (`{}`), for a row's CBOR column; bound as a parameter, since the two
/// databases write blob literals differently.
pub const EMPTY_MAP: [u8; 1] = [0xa0];

/// Runs `work` on one of the running server's read connections (a snapshot of the database).
pub async fn read_db<T, F>(server: &TestServer, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    crate::runs::app(server).db.read(move |conn| Ok(work(conn)?)).await.expect("read the database")
}

/// Runs `work` in a write transaction of the running server, committed before this answers.
pub async fn write_db<T, F>(server: &TestServer, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    crate::runs::app(server).db.write(move |conn| Ok(work(conn)?)).await.expect("write the database")
}

/// The database a server with data directory `dir` uses (its SQLite file, or the PostgreSQL
/// schema [`TestServer`] names after `dir`), opened and migrated, for a test that drives a part
/// of the server (a trigger monitor, say) without the whole server.
pub fn open_db_at(dir: &Path) -> Db {
    let config = Config::new(dir, "127.0.0.1:0".parse().expect("address"));
    match postgres_for(dir) {
        Some(url) => Db::open_postgres(&url, config.db_queues),
        None => Db::open_with(&config.database_path(), config.db_queues),
    }
    .expect("open the database")
}

/// Runs `work` in a write transaction on the database of a stopped server whose data directory is
/// `dir` (its SQLite file, or the PostgreSQL schema [`TestServer`] names after `dir`), then closes
/// that database again, so a server restarted in `dir` finds the rows.
pub async fn write_db_at<T, F>(dir: &Path, work: F) -> T
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    let db = open_db_at(dir);
    let answer = db.write(move |conn| Ok(work(conn)?)).await.expect("write the database");
    // Closing joins the database threads: off the async workers.
    tokio::task::spawn_blocking(move || db.close()).await.expect("close the database");
    answer
}
