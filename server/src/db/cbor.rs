//! Typed columns: [`Cbor`], a value kept as canonical DAG-CBOR in a BLOB column, and [`Text`], an
//! enum kept as its wire string in a TEXT column.
//!
//! Every `*_cbor` column holds a protocol value (a definition, an event, a wait, a stored
//! failure) encoded with the protocol's own encoder, so a stored value and a wire value are the
//! same bytes. Reading one back decodes strictly: a row that is not canonical DAG-CBOR of the
//! expected shape is a broken invariant, and surfaces as the row's conversion error (logged and
//! answered as an internal error by the caller's `?`).

use crate::db::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, Value, ValueRef};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::wire::{self, WireError};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A value stored as canonical DAG-CBOR: read with `row.get::<_, Cbor<T>>(i)?.0`, written with
/// `Cbor(&value)` as a statement parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Cbor<T>(pub(crate) T);

/// How a value becomes the column's bytes: serde for typed values, the protocol's
/// JavaScript-number encoder for generic IPLD values (what the wire carries).
pub(crate) trait Encode {
    /// The canonical bytes.
    fn encode(&self) -> Result<Vec<u8>, WireError>;
}

/// How the column's bytes become a value again (strictly: canonical DAG-CBOR only).
pub(crate) trait Decode: Sized {
    /// The value of canonical bytes.
    fn decode(bytes: &[u8]) -> Result<Self, WireError>;
}

impl<T: Serialize> Encode for T {
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        wire::to_vec(self)
    }
}

impl<T: DeserializeOwned> Decode for T {
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        wire::from_slice(bytes)
    }
}

/// A generic IPLD value, encoded as the protocol encodes open values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Generic(pub(crate) Ipld);

impl Encode for Generic {
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        wire::ipld_to_vec(&self.0)
    }
}

impl Encode for &Generic {
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        wire::ipld_to_vec(&self.0)
    }
}

impl Decode for Generic {
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        wire::decode_ipld(bytes).map(Generic)
    }
}

impl<T: Decode> FromSql for Cbor<T> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        T::decode(value.as_blob()?).map(Cbor).map_err(|error| FromSqlError::Other(Box::new(error)))
    }
}

impl<T: Encode> ToSql for Cbor<T> {
    fn to_sql(&self) -> crate::db::Result<ToSqlOutput<'_>> {
        self.0.encode().map(|bytes| ToSqlOutput::Owned(Value::Blob(bytes))).map_err(crate::db::Error::parameter)
    }
}

/// An enum stored as its wire string (a run's `status`): read with `row.get::<_, Text<T>>(i)?.0`
/// (an unknown string is the row's conversion error), written with `Text(value)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Text<T>(pub(crate) T);

impl<T: std::str::FromStr> FromSql for Text<T> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        text.parse().map(Text).map_err(|_| FromSqlError::Other(format!("unknown value {text:?}").into()))
    }
}

impl<T: std::fmt::Display> ToSql for Text<T> {
    fn to_sql(&self) -> crate::db::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Owned(Value::Text(self.0.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::db::{Connection, Error, params};
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct RunInfoError {
        code: String,
        message: String,
    }

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)").unwrap();
        conn
    }

    #[test]
    fn typed_and_generic_values_round_trip_as_the_wire_encodes_them() {
        let conn = conn();
        let error = RunInfoError { code: "c".into(), message: "m".into() };
        conn.execute("INSERT INTO t (id, v) VALUES (1, ?1)", params![Cbor(&error)]).unwrap();
        let read: Cbor<RunInfoError> = conn.query_row("SELECT v FROM t WHERE id = 1", [], |row| row.get(0)).unwrap();
        assert_eq!(read.0, error);
        let bytes: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = 1", [], |row| row.get(0)).unwrap();
        assert_eq!(bytes, wire::to_vec(&error).unwrap(), "the column holds the wire bytes");

        // A whole float is written as an integer, as the JavaScript encoder writes numbers.
        let value = Ipld::Map(BTreeMap::from([("n".to_owned(), Ipld::Float(2.0))]));
        conn.execute("INSERT INTO t (id, v) VALUES (2, ?1)", params![Cbor(Generic(value.clone()))]).unwrap();
        let bytes: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = 2", [], |row| row.get(0)).unwrap();
        assert_eq!(bytes, wire::ipld_to_vec(&value).unwrap());
        let read: Cbor<Generic> = conn.query_row("SELECT v FROM t WHERE id = 2", [], |row| row.get(0)).unwrap();
        assert_eq!(read.0.0, Ipld::Map(BTreeMap::from([("n".to_owned(), Ipld::Integer(2))])));
    }

    #[test]
    fn a_column_that_is_not_canonical_cbor_of_the_shape_is_a_conversion_error() {
        let conn = conn();
        conn.execute("INSERT INTO t (id, v) VALUES (1, x'a0'), (2, x'ff'), (3, 'text')", []).unwrap();
        let read =
            |id: i64| conn.query_row("SELECT v FROM t WHERE id = ?1", [id], |row| row.get::<_, Cbor<RunInfoError>>(0));
        let other = |result| matches!(result, Err(Error::Column { source: FromSqlError::Other(_), .. }));
        assert!(other(read(1)), "an empty map lacks the fields");
        assert!(other(read(2)), "not CBOR");
        assert!(
            matches!(read(3), Err(Error::Column { found: "TEXT", source: FromSqlError::InvalidType, .. })),
            "not a BLOB"
        );
    }
}
