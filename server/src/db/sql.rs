//! The SQL interface every store uses, over either backend: SQLite (the embedded default) or
//! PostgreSQL (`--database-url postgres://…`, docs/postgres.md).
//!
//! It is the small part of rusqlite's interface the stores need (`prepare_cached`, `query_row`,
//! `query_map`, `execute`, `optional`, `params!`, `row.get`), so a store reads the same
//! whichever backend runs it. Values cross it as SQLite's five storage classes ([`ValueRef`]);
//! the PostgreSQL side converts them to and from the column's type (`BIGINT`, `TEXT`, `BYTEA`,
//! `DOUBLE PRECISION`; a boolean result reads as 0 or 1), and rewrites `?N` placeholders to
//! `$N`. SQL that the two dialects spell differently asks [`Connection::dialect`].

use std::fmt;

use crate::error::ApiError;

use super::pg;

/// Which SQL dialect a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// SQLite 3 (bundled).
    Sqlite,
    /// PostgreSQL 13 or newer.
    Postgres,
}

/// A value as a statement reads it, borrowed from the row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// SQL `NULL`.
    Null,
    /// A 64-bit integer (booleans are 0 and 1).
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

/// An owned value, for parameters built at run time ([`params_from_iter`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// A 64-bit integer.
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl Value {
    fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(value) => ValueRef::Integer(*value),
            Value::Real(value) => ValueRef::Real(*value),
            Value::Text(value) => ValueRef::Text(value),
            Value::Blob(value) => ValueRef::Blob(value),
        }
    }
}

impl ValueRef<'_> {
    /// The text, or [`FromSqlError::InvalidType`].
    pub fn as_str(&self) -> FromSqlResult<&str> {
        match self {
            ValueRef::Text(text) => Ok(text),
            _ => Err(FromSqlError::InvalidType),
        }
    }

    /// The bytes, or [`FromSqlError::InvalidType`].
    pub fn as_blob(&self) -> FromSqlResult<&[u8]> {
        match self {
            ValueRef::Blob(bytes) => Ok(bytes),
            _ => Err(FromSqlError::InvalidType),
        }
    }

    /// The integer, or [`FromSqlError::InvalidType`].
    pub fn as_i64(&self) -> FromSqlResult<i64> {
        match self {
            ValueRef::Integer(value) => Ok(*value),
            _ => Err(FromSqlError::InvalidType),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            ValueRef::Null => "NULL",
            ValueRef::Integer(_) => "INTEGER",
            ValueRef::Real(_) => "REAL",
            ValueRef::Text(_) => "TEXT",
            ValueRef::Blob(_) => "BLOB",
        }
    }
}

/// A parameter's value: borrowed from the caller, or made for the statement.
#[derive(Debug)]
pub enum ToSqlOutput<'a> {
    /// Borrowed from the parameter.
    Borrowed(ValueRef<'a>),
    /// Made by the conversion (an encoded CBOR value, a formatted enum).
    Owned(Value),
}

impl ToSqlOutput<'_> {
    pub(super) fn value(&self) -> ValueRef<'_> {
        match self {
            ToSqlOutput::Borrowed(value) => *value,
            ToSqlOutput::Owned(value) => value.as_ref(),
        }
    }
}

/// A type a statement takes as a parameter.
pub trait ToSql {
    /// The value bound.
    fn to_sql(&self) -> Result<ToSqlOutput<'_>>;
}

/// Why a column could not become the type asked for.
#[derive(Debug, thiserror::Error)]
pub enum FromSqlError {
    /// The column holds another storage class.
    #[error("invalid column type")]
    InvalidType,
    /// The integer does not fit the type.
    #[error("integer {0} out of range")]
    OutOfRange(i64),
    /// The type's own check refused it (an unknown enum string, bytes that are not CBOR).
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// The result of a column conversion.
pub(crate) type FromSqlResult<T> = std::result::Result<T, FromSqlError>;

/// A type a column can be read as.
pub trait FromSql: Sized {
    /// The value of the column.
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self>;
}

/// A database failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite refused.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused, or the connection to it failed.
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
    /// `query_row` found no row.
    #[error("query returned no rows")]
    NoRows,
    /// A column could not be read as the type asked for.
    #[error("column {index} ({found}): {source}")]
    Column {
        /// The column's index.
        index: usize,
        /// The storage class found.
        found: &'static str,
        /// Why.
        source: FromSqlError,
    },
    /// A parameter could not be converted.
    #[error("parameter {index}: {source}")]
    Parameter {
        /// The parameter's index (from 1).
        index: usize,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// Text holding U+0000, which PostgreSQL cannot store.
    #[error("text holds the character U+0000, which PostgreSQL cannot store")]
    NulInText,
    /// A savepoint of a write batch could not be released or rolled back: the batch was rolled
    /// back whole.
    #[error("a write's savepoint failed; the batch was rolled back")]
    Aborted,
    /// What this backend does not do (named).
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    /// The statement takes another number of parameters.
    #[error("the statement takes {expected} parameters, {given} were given")]
    ParameterCount {
        /// What the statement takes.
        expected: usize,
        /// What was given.
        given: usize,
    },
}

impl Error {
    /// A parameter's conversion failure (a value that cannot be encoded).
    pub(crate) fn parameter(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::Parameter { index: 0, source: error.into() }
    }

    /// A column's conversion failure, raised by a row mapping's own check.
    pub(crate) fn column(index: usize, error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::Column { index, found: "BLOB", source: FromSqlError::Other(error.into()) }
    }
}

/// A database failure is an internal error: logged, answered with the generic message. Text
/// the database cannot store is the caller's bad input.
impl From<Error> for ApiError {
    #[track_caller]
    fn from(error: Error) -> Self {
        match error {
            Error::NulInText => ApiError::invalid("Text must not contain the character U+0000"),
            error => ApiError::internal(error),
        }
    }
}

/// The result of a statement.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `query_row`'s "no row" as `None`.
pub trait OptionalExtension<T> {
    /// `Ok(None)` for [`Error::NoRows`].
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(Error::NoRows) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// A statement's parameters: `params![a, b]`, `[]`, or [`params_from_iter`].
pub trait Params {
    /// Calls `bind` with each parameter in order.
    fn each(self, bind: &mut dyn FnMut(&dyn ToSql) -> Result<()>) -> Result<()>;
}

impl Params for &[&dyn ToSql] {
    fn each(self, bind: &mut dyn FnMut(&dyn ToSql) -> Result<()>) -> Result<()> {
        self.iter().try_for_each(|value| bind(*value))
    }
}

impl Params for [&dyn ToSql; 0] {
    fn each(self, _: &mut dyn FnMut(&dyn ToSql) -> Result<()>) -> Result<()> {
        Ok(())
    }
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn each(self, bind: &mut dyn FnMut(&dyn ToSql) -> Result<()>) -> Result<()> {
                self.iter().try_for_each(|value| bind(value))
            }
        }
    )*};
}

array_params!(1 2 3 4 5 6 7 8);

macro_rules! tuple_params {
    ($(($($name:ident),+))*) => {$(
        impl<$($name: ToSql),+> Params for ($($name,)+) {
            #[allow(non_snake_case)]
            fn each(self, bind: &mut dyn FnMut(&dyn ToSql) -> Result<()>) -> Result<()> {
                let ($($name,)+) = self;
                $(bind(&$name)?;)+
                Ok(())
            }
        }
    )*};
}

tuple_params!((A)(A, B)(A, B, C)(A, B, C, D)(A, B, C, D, E)(A, B, C, D, E, F)(A, B, C, D, E, F, G));

/// Parameters from an iterator (a statement built at run time).
pub(crate) struct ParamsFromIter<I>(I);

/// The items of `values` as a statement's parameters.
pub(crate) fn params_from_iter<I>(values: I) -> ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    ParamsFromIter(values)
}

impl<I> Params for ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    fn each(self, bind: &mut dyn FnMut(&dyn ToSql) -> Result<()>) -> Result<()> {
        self.0.into_iter().try_for_each(|value| bind(&value))
    }
}

/// A statement's parameters, in order: `params![id, now_ms]`.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::db::ToSql]
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::db::ToSql),+] as &[&dyn $crate::db::ToSql]
    };
}
pub(crate) use params;

/// A connection to the database, owned by one database thread (`db`'s writer or a reader).
pub struct Connection(Backend);

enum Backend {
    Sqlite(rusqlite::Connection),
    // Boxed: the synchronous client (with its runtime) is several times a SQLite handle's size.
    Postgres(Box<pg::Client>),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Connection").field(&self.dialect()).finish()
    }
}

impl Connection {
    /// A SQLite connection.
    pub(crate) fn sqlite(conn: rusqlite::Connection) -> Self {
        Connection(Backend::Sqlite(conn))
    }

    /// A PostgreSQL connection.
    pub(super) fn postgres(client: pg::Client) -> Self {
        Connection(Backend::Postgres(Box::new(client)))
    }

    /// An empty in-memory SQLite database, for unit tests.
    #[cfg(test)]
    pub(crate) fn open_in_memory() -> Result<Self> {
        Ok(Connection::sqlite(rusqlite::Connection::open_in_memory()?))
    }

    /// The dialect this connection speaks.
    pub(crate) fn dialect(&self) -> Dialect {
        match &self.0 {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, backups, `db/`'s own set-up).
    pub(crate) fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.0 {
            Backend::Sqlite(conn) => Some(conn),
            Backend::Postgres(_) => None,
        }
    }

    /// The PostgreSQL client.
    pub(super) fn as_postgres(&self) -> Option<&pg::Client> {
        match &self.0 {
            Backend::Sqlite(_) => None,
            Backend::Postgres(client) => Some(client),
        }
    }

    /// Closes the connection, reporting a failure to close.
    pub(crate) fn close(self) -> Result<()> {
        match self.0 {
            Backend::Sqlite(conn) => conn.close().map_err(|(_, error)| Error::Sqlite(error)),
            Backend::Postgres(client) => client.close(),
        }
    }

    /// A statement from the connection's cache (prepared on first use).
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement(match &self.0 {
            Backend::Sqlite(conn) => StatementInner::SqliteCached(conn.prepare_cached(sql)?),
            Backend::Postgres(client) => StatementInner::Postgres(client, client.prepare(sql)?),
        }))
    }

    /// A statement prepared for this use only (SQL built at run time).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement(match &self.0 {
            Backend::Sqlite(conn) => StatementInner::Sqlite(conn.prepare(sql)?),
            Backend::Postgres(client) => StatementInner::Postgres(client, client.prepare_once(sql)?),
        }))
    }

    /// Runs one statement; answers the rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// The first row of one statement, mapped; [`Error::NoRows`] when there is none.
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, map: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare(sql)?.query_row(params, map)
    }

    /// Runs statements without parameters, separated by `;`.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.0 {
            Backend::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Backend::Postgres(client) => client.batch_execute(sql),
        }
    }
}

/// A prepared statement.
#[allow(missing_debug_implementations)] // it wraps the backends' statements
pub struct Statement<'c>(StatementInner<'c>);

enum StatementInner<'c> {
    SqliteCached(rusqlite::CachedStatement<'c>),
    Sqlite(rusqlite::Statement<'c>),
    Postgres(&'c pg::Client, postgres::Statement),
}

impl Statement<'_> {
    /// Runs the statement; answers the rows it changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        match &mut self.0 {
            StatementInner::SqliteCached(statement) => sqlite_execute(statement, params),
            StatementInner::Sqlite(statement) => sqlite_execute(statement, params),
            StatementInner::Postgres(client, statement) => client.execute(statement, params),
        }
    }

    /// The statement's rows.
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        Ok(Rows(match &mut self.0 {
            StatementInner::SqliteCached(statement) => RowsInner::Sqlite(sqlite_query(statement, params)?),
            StatementInner::Sqlite(statement) => RowsInner::Sqlite(sqlite_query(statement, params)?),
            StatementInner::Postgres(client, statement) => {
                RowsInner::Postgres { rows: client.query(statement, params)?.into_iter(), current: None }
            }
        }))
    }

    /// The first row, mapped; [`Error::NoRows`] when there is none.
    pub fn query_row<T, P, F>(&mut self, params: P, map: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut rows = self.query(params)?;
        match rows.next()? {
            Some(row) => map(&row),
            None => Err(Error::NoRows),
        }
    }

    /// Every row, mapped, as an iterator.
    pub fn query_map<T, P, F>(&mut self, params: P, map: F) -> Result<MappedRows<'_, F>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        Ok(MappedRows { rows: self.query(params)?, map })
    }
}

fn sqlite_execute<P: Params>(statement: &mut rusqlite::Statement<'_>, params: P) -> Result<usize> {
    bind_sqlite(statement, params)?;
    Ok(statement.raw_execute()?)
}

fn sqlite_query<'s, P: Params>(statement: &'s mut rusqlite::Statement<'_>, params: P) -> Result<rusqlite::Rows<'s>> {
    bind_sqlite(statement, params)?;
    Ok(statement.raw_query())
}

/// Binds every parameter of a SQLite statement (1-based), checking their number.
fn bind_sqlite<P: Params>(statement: &mut rusqlite::Statement<'_>, params: P) -> Result<()> {
    let expected = statement.parameter_count();
    let mut given = 0;
    params.each(&mut |value| {
        given += 1;
        if given > expected {
            return Ok(());
        }
        let output = value.to_sql().map_err(|error| match error {
            Error::Parameter { source, .. } => Error::Parameter { index: given, source },
            other => other,
        })?;
        statement.raw_bind_parameter(given, SqliteValue(output.value()))?;
        Ok(())
    })?;
    if given != expected {
        return Err(Error::ParameterCount { expected, given });
    }
    Ok(())
}

/// A value bound to a SQLite statement.
struct SqliteValue<'a>(ValueRef<'a>);

impl rusqlite::ToSql for SqliteValue<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ValueRef as Sqlite;
        Ok(rusqlite::types::ToSqlOutput::Borrowed(match self.0 {
            ValueRef::Null => Sqlite::Null,
            ValueRef::Integer(value) => Sqlite::Integer(value),
            ValueRef::Real(value) => Sqlite::Real(value),
            ValueRef::Text(text) => Sqlite::Text(text.as_bytes()),
            ValueRef::Blob(bytes) => Sqlite::Blob(bytes),
        }))
    }
}

/// A statement's rows, read one at a time.
#[allow(missing_debug_implementations)] // it wraps the backends' row cursors
pub struct Rows<'s>(RowsInner<'s>);

enum RowsInner<'s> {
    Sqlite(rusqlite::Rows<'s>),
    Postgres { rows: std::vec::IntoIter<postgres::Row>, current: Option<postgres::Row> },
}

impl Rows<'_> {
    /// The next row, or `None` after the last.
    #[allow(clippy::should_implement_trait)] // it lends the row: not an `Iterator`
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        match &mut self.0 {
            RowsInner::Sqlite(rows) => Ok(rows.next()?.map(|row| Row(RowRef::Sqlite(row)))),
            RowsInner::Postgres { rows, current } => {
                Ok(rows.next().map(|row| Row(RowRef::Postgres(current.insert(row)))))
            }
        }
    }
}

/// A statement's rows, each mapped by a function.
#[allow(missing_debug_implementations)] // it holds the mapping function
pub struct MappedRows<'s, F> {
    rows: Rows<'s>,
    map: F,
}

impl<T, F> Iterator for MappedRows<'_, F>
where
    F: FnMut(&Row<'_>) -> Result<T>,
{
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        match self.rows.next() {
            Ok(Some(row)) => Some((self.map)(&row)),
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        }
    }
}

/// One row of a statement's result.
#[allow(missing_debug_implementations)] // it wraps the backends' rows
pub struct Row<'a>(RowRef<'a>);

enum RowRef<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a postgres::Row),
}

impl Row<'_> {
    /// Column `index` (from 0) as a `T`.
    pub fn get<I: RowIndex, T: FromSql>(&self, index: I) -> Result<T> {
        let index = index.index();
        let value = match &self.0 {
            RowRef::Sqlite(row) => sqlite_value(row.get_ref(index)?),
            RowRef::Postgres(row) => pg::column(row, index)?,
        };
        T::column_result(value).map_err(|source| Error::Column { index, found: value.type_name(), source })
    }
}

/// How a column is named: by its index from 0.
pub trait RowIndex {
    /// The index.
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

fn sqlite_value(value: rusqlite::types::ValueRef<'_>) -> ValueRef<'_> {
    use rusqlite::types::ValueRef as Sqlite;
    match value {
        Sqlite::Null => ValueRef::Null,
        Sqlite::Integer(value) => ValueRef::Integer(value),
        Sqlite::Real(value) => ValueRef::Real(value),
        // SQLite text is UTF-8 unless a client wrote invalid bytes; such text reads as a blob,
        // which a `String` refuses with a type error.
        Sqlite::Text(bytes) => std::str::from_utf8(bytes).map_or(ValueRef::Blob(bytes), ValueRef::Text),
        Sqlite::Blob(bytes) => ValueRef::Blob(bytes),
    }
}

// ---- conversions ---------------------------------------------------------------------------

macro_rules! integer {
    ($($ty:ty),*) => {$(
        impl ToSql for $ty {
            fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
                i64::try_from(*self)
                    .map(|value| ToSqlOutput::Borrowed(ValueRef::Integer(value)))
                    .map_err(Error::parameter)
            }
        }

        impl FromSql for $ty {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let value = value.as_i64()?;
                <$ty>::try_from(value).map_err(|_| FromSqlError::OutOfRange(value))
            }
        }
    )*};
}

integer!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

impl ToSql for bool {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(*self))))
    }
}

impl FromSql for bool {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_i64().map(|value| value != 0)
    }
}

impl ToSql for f64 {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Real(*self)))
    }
}

impl FromSql for f64 {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Real(value) => Ok(value),
            ValueRef::Integer(value) => Ok(value as f64),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl ToSql for str {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self)))
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self)))
    }
}

impl FromSql for String {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_str().map(str::to_owned)
    }
}

impl ToSql for [u8] {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self)))
    }
}

impl ToSql for Vec<u8> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self)))
    }
}

impl<const N: usize> ToSql for [u8; N] {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self)))
    }
}

impl FromSql for Vec<u8> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_blob().map(<[u8]>::to_vec)
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        match self {
            Some(value) => value.to_sql(),
            None => Ok(ToSqlOutput::Borrowed(ValueRef::Null)),
        }
    }
}

impl<T: FromSql> FromSql for Option<T> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Null => Ok(None),
            value => T::column_result(value).map(Some),
        }
    }
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        (**self).to_sql()
    }
}

impl<T: ToSql + ?Sized> ToSql for Box<T> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        (**self).to_sql()
    }
}

impl<T: ToSql + ?Sized> ToSql for std::sync::Arc<T> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        (**self).to_sql()
    }
}

impl ToSql for std::borrow::Cow<'_, str> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self)))
    }
}

impl ToSql for Value {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(self.as_ref()))
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Integer(value)
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Text(value)
    }
}

impl From<Vec<u8>> for Value {
    fn from(value: Vec<u8>) -> Self {
        Value::Blob(value)
    }
}

impl FromSql for Value {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        Ok(match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(value) => Value::Integer(value),
            ValueRef::Real(value) => Value::Real(value),
            ValueRef::Text(text) => Value::Text(text.to_owned()),
            ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
        })
    }
}

/// A row of every storage class and a comparison, as the value tests of both databases read it
/// back from table `t` (`i, r, s, b, n`) after inserting `7, 1.5, 'seven', [0, 1, 2], NULL`.
#[cfg(test)]
pub(super) type Sample = (u32, f64, String, Vec<u8>, Option<i64>, bool);

/// The query [`sample_row`] reads.
#[cfg(test)]
pub(super) const SAMPLE_QUERY: &str = "SELECT i, r, s, b, n, i = 7 FROM t WHERE s = 'seven'";

/// The columns of [`SAMPLE_QUERY`] as their Rust types.
#[cfg(test)]
pub(super) fn sample_row(row: &Row<'_>) -> Result<Sample> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
}

/// What [`sample_row`] reads back.
#[cfg(test)]
pub(super) fn sample() -> Sample {
    (7, 1.5, "seven".to_owned(), vec![0, 1, 2], None, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        Connection::open_in_memory().expect("in-memory database")
    }

    #[test]
    fn values_round_trip_through_sqlite() {
        let conn = conn();
        conn.execute_batch("CREATE TABLE t (i INTEGER, r REAL, s TEXT, b BLOB, n INTEGER)").unwrap();
        let blob = vec![0_u8, 1, 2];
        let changed = conn
            .execute("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)", params![7_i64, 1.5_f64, "seven", blob, None::<i64>])
            .unwrap();
        assert_eq!(changed, 1);
        let row = conn.query_row(SAMPLE_QUERY, [], sample_row).unwrap();
        assert_eq!(row, sample());
    }

    #[test]
    fn a_missing_row_is_none_and_a_wrong_type_names_its_column() {
        let conn = conn();
        conn.execute_batch("CREATE TABLE t (s TEXT)").unwrap();
        let none = conn.query_row("SELECT s FROM t", [], |row| row.get::<_, String>(0)).optional().unwrap();
        assert_eq!(none, None);
        conn.execute("INSERT INTO t VALUES (?1)", params!["x"]).unwrap();
        let error = conn.query_row("SELECT s FROM t", [], |row| row.get::<_, i64>(0)).unwrap_err();
        assert!(matches!(error, Error::Column { index: 0, found: "TEXT", source: FromSqlError::InvalidType }));
        let error = conn.query_row("SELECT -1", [], |row| row.get::<_, u32>(0)).unwrap_err();
        assert!(matches!(error, Error::Column { source: FromSqlError::OutOfRange(-1), .. }));
    }

    #[test]
    fn the_number_of_parameters_is_checked() {
        let conn = conn();
        let error = conn.query_row("SELECT ?1, ?2", params![1], |row| row.get::<_, i64>(0)).unwrap_err();
        assert!(matches!(error, Error::ParameterCount { expected: 2, given: 1 }));
        let error = conn.query_row("SELECT ?1", params![1, 2], |row| row.get::<_, i64>(0)).unwrap_err();
        assert!(matches!(error, Error::ParameterCount { expected: 1, given: 2 }));
    }

    #[test]
    fn rows_are_mapped_in_order() {
        let conn = conn();
        conn.execute_batch("CREATE TABLE t (i INTEGER); INSERT INTO t VALUES (1), (2), (3)").unwrap();
        let mut statement = conn.prepare_cached("SELECT i FROM t WHERE i >= ?1 ORDER BY i").unwrap();
        let all: Vec<i64> =
            statement.query_map(params_from_iter([2_i64]), |row| row.get(0)).unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(all, [2, 3]);
    }
}
