//! PostgreSQL under the SQL interface (`db/sql.rs`): the client one database thread owns, its
//! statement cache, the rewriting of SQLite's `?N` placeholders to `$N`, and the conversion of
//! values to and from PostgreSQL's types (docs/postgres.md).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql as PgToSql, Type, to_sql_checked};

use super::DbError;
use super::migrations::SCHEMA_VERSION;
use super::sql::{Connection, Error, FromSqlError, Params, Result, Value, ValueRef};

/// The schema version `postgres/schema.sql` creates: the SQLite migrations it stands for.
const BASE_VERSION: i64 = 14;

/// The PostgreSQL forms of the SQLite migrations after [`BASE_VERSION`], in order.
const MIGRATIONS: &[&str] = &[];

const _: () = assert!(
    BASE_VERSION + MIGRATIONS.len() as i64 == SCHEMA_VERSION,
    "every SQLite migration needs its PostgreSQL form in db/pg.rs"
);

/// Takes the advisory lock held while migrating: servers started together migrate one at a time.
/// Locks are named after the schema, so deployments in different schemas of one database (each
/// its own `search_path`, docs/postgres.md) do not wait for each other.
const LOCK_MIGRATIONS: &str =
    "SELECT pg_advisory_lock(hashtextextended('seed-agents migrations ' || current_schema(), 0))";
const UNLOCK_MIGRATIONS: &str =
    "SELECT pg_advisory_unlock(hashtextextended('seed-agents migrations ' || current_schema(), 0))";

/// Begins a write batch: a transaction whose first statement takes the schema's write lock
/// (released at its end), so as with SQLite one batch writes at a time, now across every
/// process on the database (docs/postgres.md).
pub(super) const BEGIN_WRITE: &str =
    "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended('seed-agents writes ' || current_schema(), 0))";

/// Takes, for the life of the connection, the lock that says a server process uses the
/// schema; answers whether it was free. Several processes on one database are not supported
/// yet (docs/postgres.md): a second one is refused at start instead of stealing the first
/// one's runs at its boot sweep.
pub(super) fn take_process_lock(conn: &Connection) -> Result<bool> {
    conn.query_row(
        "SELECT pg_try_advisory_lock(hashtextextended('seed-agents server ' || current_schema(), 0))",
        [],
        |row| row.get(0),
    )
}

/// `url` with its password (if any) replaced, for messages and logs.
pub(crate) fn redacted(url: &str) -> String {
    let (address, query) = match url.split_once('?') {
        Some((address, query)) => (address, Some(query)),
        None => (url, None),
    };
    let address = match address.split_once("://") {
        // The credentials end at the last `@` (a password may hold an unencoded one).
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((credentials, host)) if credentials.contains(':') => {
                let user = credentials.split(':').next().unwrap_or_default();
                format!("{scheme}://{user}:***@{host}")
            }
            _ => address.to_owned(),
        },
        None => address.to_owned(),
    };
    match query {
        None => address,
        Some(query) => {
            let parameters: Vec<String> = query
                .split('&')
                .map(|parameter| match parameter.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
                    _ => parameter.to_owned(),
                })
                .collect();
            format!("{address}?{}", parameters.join("&"))
        }
    }
}

/// A connection to `url`; a failure names the URL without its password.
pub(super) fn connect(url: &str) -> std::result::Result<Connection, DbError> {
    Client::connect(url).map(Connection::postgres).map_err(|source| DbError::Postgres { url: redacted(url), source })
}

/// Runs `sql` (statements without parameters) on a new connection to `url`, from a thread of its
/// own: the synchronous client must not start inside the caller's async runtime.
pub(super) fn run_detached(url: &str, sql: &str) -> Result<()> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || Connection::postgres(Client::connect(&url)?).execute_batch(&sql))
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `url` with its connections using schema `schema` (created when missing): the form tests and
/// benches use to give each server a schema of its own in one database.
pub(crate) fn with_schema(url: &str, schema: &str) -> std::result::Result<String, String> {
    if !schema.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(format!("schema name {schema:?}: use a-z, 0-9 and _"));
    }
    run_detached(url, &format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .map_err(|error| format!("creating schema {schema} in {}: {error}", redacted(url)))?;
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

/// The schema version recorded in the database.
pub(super) fn schema_version(conn: &Connection) -> Result<i64> {
    conn.query_row("SELECT version FROM seed_agents_schema", [], |row| row.get(0))
}

/// Connects to `url` and brings its schema to [`SCHEMA_VERSION`], or refuses a database written
/// by a newer server. Several servers starting together take turns.
pub(super) fn open(url: &str) -> std::result::Result<Connection, DbError> {
    let failed = |source: Error| DbError::Postgres { url: redacted(url), source };
    let conn = connect(url)?;
    // The search path must name an existing schema, or the locks below (named after it) would
    // lock nothing.
    let schema: Option<String> = conn.query_row("SELECT current_schema()", [], |row| row.get(0)).map_err(failed)?;
    if schema.is_none() {
        return Err(failed(Error::Unsupported("a search_path that names no existing schema")));
    }
    // The process lock before migrating: a newer build must not migrate the schema under a
    // server that still runs on it.
    if !take_process_lock(&conn).map_err(failed)? {
        return Err(DbError::InUse { url: redacted(url) });
    }
    conn.execute_batch(LOCK_MIGRATIONS).map_err(failed)?;
    let migrated = migrate(&conn, url);
    let unlocked = conn.execute_batch(UNLOCK_MIGRATIONS).map_err(failed);
    migrated?;
    unlocked?;
    Ok(conn)
}

fn migrate(conn: &Connection, url: &str) -> std::result::Result<(), DbError> {
    let failed = |source: Error| DbError::Postgres { url: redacted(url), source };
    // Created only when missing, so a role that may only read and write rows starts a migrated
    // database.
    let exists: bool =
        conn.query_row("SELECT to_regclass('seed_agents_schema') IS NOT NULL", [], |row| row.get(0)).map_err(failed)?;
    if !exists {
        conn.execute_batch("CREATE TABLE seed_agents_schema (version BIGINT NOT NULL)").map_err(failed)?;
    }
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM seed_agents_schema")
        .and_then(|mut statement| statement.query_map([], |row| row.get(0))?.collect())
        .map_err(failed)?;
    let found = match versions[..] {
        [] => None,
        [version] => Some(version),
        _ => return Err(failed(Error::Unsupported("a seed_agents_schema table with more than one row"))),
    };
    if let Some(found) = found
        && found > SCHEMA_VERSION
    {
        return Err(DbError::TooNew { path: redacted(url), found, supported: SCHEMA_VERSION });
    }
    let in_transaction = |sql: &str, version: i64, first: bool| -> Result<()> {
        conn.execute_batch("BEGIN")?;
        let outcome = (|| {
            conn.execute_batch(sql)?;
            if first {
                conn.execute("INSERT INTO seed_agents_schema (version) VALUES (?1)", crate::db::params![version])?;
            } else {
                conn.execute("UPDATE seed_agents_schema SET version = ?1", crate::db::params![version])?;
            }
            conn.execute_batch("COMMIT")
        })();
        if outcome.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        outcome
    };
    let mut version = match found {
        Some(version) => version,
        None => {
            in_transaction(include_str!("postgres/schema.sql"), BASE_VERSION, true).map_err(failed)?;
            tracing::info!(version = BASE_VERSION, "created the PostgreSQL schema");
            BASE_VERSION
        }
    };
    while version < SCHEMA_VERSION {
        let Some(sql) = usize::try_from(version - BASE_VERSION).ok().and_then(|index| MIGRATIONS.get(index)) else {
            return Err(failed(Error::Unsupported("a PostgreSQL schema older than this build's baseline")));
        };
        version += 1;
        in_transaction(sql, version, false).map_err(failed)?;
        tracing::info!(version, "applied database migration");
    }
    Ok(())
}

/// Statements kept prepared per connection. The stores' statements are fixed strings (a few
/// hundred in all); past this the cache starts over rather than grow.
const CACHED_STATEMENTS: usize = 512;

/// A PostgreSQL connection, owned by one database thread.
pub(crate) struct Client {
    client: RefCell<postgres::Client>,
    statements: RefCell<HashMap<Box<str>, postgres::Statement>>,
    /// When a statement last ran.
    used: std::cell::Cell<Instant>,
}

/// How long a connection may sit unused before it is checked before the next job.
const IDLE_CHECK: Duration = Duration::from_secs(10);

impl Client {
    /// Connects to `url` (`postgres://user@host:port/database`), without TLS: the database is
    /// expected on loopback or a private network (docs/postgres.md).
    ///
    /// Unless the URL says otherwise, a connection attempt gives up after 10 s and a peer silent
    /// for 30 s (keepalives, unacknowledged writes) counts as gone. The session ends a
    /// transaction left idle for 60 s, so a writer cut off mid-batch cannot hold the write lock
    /// until TCP notices.
    pub(crate) fn connect(url: &str) -> Result<Self> {
        let mut config: postgres::Config = url.parse()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if !url.contains("keepalives_idle") {
            config.keepalives_idle(Duration::from_secs(30));
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        let mut client = config.connect(postgres::NoTls)?;
        client.batch_execute("SET idle_in_transaction_session_timeout = '60s'")?;
        Ok(Client {
            client: RefCell::new(client),
            statements: RefCell::new(HashMap::new()),
            used: std::cell::Cell::new(Instant::now()),
        })
    }

    /// Whether the connection answers: checked before a job when it sat unused for a while,
    /// since a peer or proxy that closed it is noticed only by the next statement.
    pub(crate) fn is_usable(&self) -> bool {
        if self.is_closed() {
            return false;
        }
        if self.used.get().elapsed() < IDLE_CHECK {
            return true;
        }
        self.touch().simple_query("").is_ok()
    }

    /// The client, noting that it is used now.
    fn touch(&self) -> std::cell::RefMut<'_, postgres::Client> {
        self.used.set(Instant::now());
        self.client.borrow_mut()
    }

    /// Whether the connection to the server is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.borrow().is_closed()
    }

    /// Closes the connection.
    pub(super) fn close(self) -> Result<()> {
        Ok(self.client.into_inner().close()?)
    }

    /// The prepared statement for `sql` (SQLite placeholders), from the cache.
    pub(super) fn prepare(&self, sql: &str) -> Result<postgres::Statement> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.prepare_once(sql)?;
        let mut statements = self.statements.borrow_mut();
        if statements.len() >= CACHED_STATEMENTS {
            statements.clear();
        }
        statements.insert(sql.into(), statement.clone());
        Ok(statement)
    }

    /// `sql` prepared without caching it.
    pub(super) fn prepare_once(&self, sql: &str) -> Result<postgres::Statement> {
        Ok(self.touch().prepare(&translate(sql))?)
    }

    /// Runs a statement; answers the rows it changed.
    pub(super) fn execute<P: Params>(&self, statement: &postgres::Statement, params: P) -> Result<usize> {
        let values = values(params)?;
        let refs: Vec<&(dyn PgToSql + Sync)> = values.iter().map(|value| value as &(dyn PgToSql + Sync)).collect();
        let changed = self.touch().execute(statement, &refs)?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    /// A statement's rows.
    pub(super) fn query<P: Params>(&self, statement: &postgres::Statement, params: P) -> Result<Vec<postgres::Row>> {
        let values = values(params)?;
        let refs: Vec<&(dyn PgToSql + Sync)> = values.iter().map(|value| value as &(dyn PgToSql + Sync)).collect();
        Ok(self.touch().query(statement, &refs)?)
    }

    /// Runs statements without parameters.
    pub(super) fn batch_execute(&self, sql: &str) -> Result<()> {
        Ok(self.touch().batch_execute(sql)?)
    }
}

/// The parameters as owned values (a PostgreSQL statement takes them all at once).
fn values<P: Params>(params: P) -> Result<Vec<Param>> {
    let mut values = Vec::new();
    params.each(&mut |value| {
        let output = value.to_sql()?;
        values.push(Param(match output.value() {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(value) => Value::Integer(value),
            ValueRef::Real(value) => Value::Real(value),
            // PostgreSQL's text cannot hold U+0000; refused here, before the statement runs, so
            // the transaction goes on and the caller hears a bad-input error.
            ValueRef::Text(text) if text.contains('\0') => return Err(Error::NulInText),
            ValueRef::Text(text) => Value::Text(text.to_owned()),
            ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
        }));
        Ok(())
    })?;
    Ok(values)
}

/// A store's SQL as PostgreSQL takes it: [`placeholders`] rewritten, and the two SQLite-only
/// spellings the stores use for SQLite's planner dropped: the `+` of `LIMIT +?N` (it keeps
/// SQLite from recompiling a cached statement per limit; PostgreSQL would type the parameter as
/// a double) and `INDEXED BY index` (PostgreSQL's planner finds the partial index itself). Neither
/// appears inside a string literal of a store.
pub(super) fn translate(sql: &str) -> String {
    let mut out = placeholders(sql).replace("LIMIT +$", "LIMIT $");
    while let Some(start) = out.find("INDEXED BY ") {
        let name_end = out[start + "INDEXED BY ".len()..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(out.len(), |end| start + "INDEXED BY ".len() + end);
        out.replace_range(start..name_end, "");
    }
    out
}

/// SQLite's placeholders (`?N`, and `?` numbered after the highest so far) as PostgreSQL's `$N`,
/// outside string literals, quoted identifiers and comments.
pub(super) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut highest = 0_u32;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // Until the closing quote; a doubled quote is an escaped one and stays inside.
                while let Some(inner) = chars.next() {
                    out.push(inner);
                    if inner == c {
                        if chars.peek() == Some(&c) {
                            out.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(digit) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(digit);
                    chars.next();
                }
                let number = match digits.parse::<u32>() {
                    Ok(number) => number,
                    Err(_) => highest + 1,
                };
                highest = highest.max(number);
                out.push('$');
                out.push_str(&number.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// Column `index` of a PostgreSQL row as one of SQLite's storage classes.
pub(super) fn column(row: &postgres::Row, index: usize) -> Result<ValueRef<'_>> {
    let Some(column) = row.columns().get(index) else {
        return Err(Error::Column { index, found: "no column", source: FromSqlError::InvalidType });
    };
    let ty = column.type_();
    let value = if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(index)?.map_or(ValueRef::Null, ValueRef::Integer)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(index)?.map_or(ValueRef::Null, |value| ValueRef::Integer(value.into()))
    } else if *ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(index)?.map_or(ValueRef::Null, |value| ValueRef::Integer(value.into()))
    } else if *ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(index)?.map_or(ValueRef::Null, |value| ValueRef::Integer(value.into()))
    } else if *ty == Type::FLOAT8 {
        row.try_get::<_, Option<f64>>(index)?.map_or(ValueRef::Null, ValueRef::Real)
    } else if *ty == Type::FLOAT4 {
        row.try_get::<_, Option<f32>>(index)?.map_or(ValueRef::Null, |value| ValueRef::Real(value.into()))
    } else if *ty == Type::BYTEA {
        row.try_get::<_, Option<&[u8]>>(index)?.map_or(ValueRef::Null, ValueRef::Blob)
    } else if <&str as postgres::types::FromSql>::accepts(ty) {
        row.try_get::<_, Option<&str>>(index)?.map_or(ValueRef::Null, ValueRef::Text)
    } else {
        return Err(Error::Column {
            index,
            found: "an unsupported PostgreSQL type",
            source: FromSqlError::Other(format!("column {:?} has type {ty}", column.name()).into()),
        });
    };
    Ok(value)
}

/// A parameter bound to a PostgreSQL statement, converted to the type the statement expects.
#[derive(Debug)]
struct Param(Value);

impl PgToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(value) => {
                if *ty == Type::INT8 {
                    value.to_sql(ty, out)
                } else if *ty == Type::INT4 {
                    i32::try_from(*value)?.to_sql(ty, out)
                } else if *ty == Type::INT2 {
                    i16::try_from(*value)?.to_sql(ty, out)
                } else if *ty == Type::BOOL {
                    (*value != 0).to_sql(ty, out)
                } else {
                    Err(format!("an integer cannot be bound to a parameter of type {ty}").into())
                }
            }
            Value::Real(value) => {
                if *ty == Type::FLOAT8 {
                    value.to_sql(ty, out)
                } else if *ty == Type::FLOAT4 {
                    (*value as f32).to_sql(ty, out)
                } else {
                    Err(format!("a real cannot be bound to a parameter of type {ty}").into())
                }
            }
            Value::Text(text) => {
                if <&str as PgToSql>::accepts(ty) {
                    text.as_str().to_sql(ty, out)
                } else {
                    Err(format!("text cannot be bound to a parameter of type {ty}").into())
                }
            }
            Value::Blob(bytes) => {
                if *ty == Type::BYTEA {
                    bytes.as_slice().to_sql(ty, out)
                } else {
                    Err(format!("bytes cannot be bound to a parameter of type {ty}").into())
                }
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::{placeholders, translate};

    #[test]
    fn sqlite_planner_hints_are_dropped() {
        assert_eq!(
            translate("SELECT 1 FROM runs INDEXED BY runs_completion_pending WHERE a = ?1 LIMIT +?2"),
            "SELECT 1 FROM runs  WHERE a = $1 LIMIT $2"
        );
    }

    #[test]
    fn placeholders_are_numbered_outside_quotes_and_comments() {
        assert_eq!(
            placeholders("SELECT a FROM t WHERE a = ?1 AND b = ?12"),
            "SELECT a FROM t WHERE a = $1 AND b = $12"
        );
        assert_eq!(placeholders("VALUES (?, ?, ?5, ?)"), "VALUES ($1, $2, $5, $6)");
        assert_eq!(
            placeholders("SELECT '?1', \"a?\", 'it''s ?' -- ?3\n, ?2"),
            "SELECT '?1', \"a?\", 'it''s ?' -- ?3\n, $2"
        );
    }
}
