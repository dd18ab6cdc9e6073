//! Account secrets: `SetSecret`, and the helpers other features use to read them, with their SQL.
//!
//! A secret is a byte value sealed with the server's `SecretKey` (bound to its account and
//! name) plus optional plain metadata (canonical CBOR of a map). Rows are keyed by
//! `(account_id, name)`; setting a name again replaces its value and metadata but keeps its id
//! and creation time.
//!
//! Invariant (ARCHITECTURE.md rule 8): a plaintext value is held only long enough to seal it or hand it to
//! its caller. It never reaches a response, a log line, an event or an error message; responses
//! carry [`RedactedSecret`] only, which says `hasValue: true` and nothing more.

pub(crate) mod crypto;
pub(crate) mod store;

use store::StoredRow;

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use seed_agents_protocol::generated::{RedactedSecret, SetSecret, SetSecretResponse};
use seed_agents_protocol::{Value, wire};

use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::validate::{MAX_NAME_BYTES, MAX_OPEN_MAP_CBOR_BYTES, bounded_string, cbor_len};

/// The largest secret value, in bytes.
pub(crate) const MAX_SECRET_BYTES: usize = 64 * 1024;

/// The metadata `kind` of an uploaded Hypermedia account key (a signing identity).
pub(crate) const SIGNING_KEY_KIND: &str = "hm-account-key";

/// Secret metadata: an open map, kept as IPLD (ARCHITECTURE.md rule 4).
pub(crate) type Metadata = BTreeMap<String, Value>;

/// `SetSecret {name, value, metadata?}`: seals `value` and upserts it under the caller's account.
///
/// Checks, in the upstream order: the name (`Secret name is required` / `… is too large`), the
/// value size (`Secret value is too large` above 64 KiB) and the metadata size (`Metadata is too
/// large` above 16 KiB of CBOR). An empty value is a value. Publishes no event (upstream emits none).
pub(crate) async fn set_secret(app: &App, caller: &Caller, action: SetSecret) -> ApiResult<SetSecretResponse> {
    let SetSecret { metadata, name, value } = action;
    let mut value = value.into_vec();
    let checked = check_set_secret(&name, &value, metadata.as_ref());
    let (name, metadata_cbor) = match checked {
        Ok(checked) => checked,
        Err(error) => {
            wipe(&mut value);
            return Err(error);
        }
    };
    let account = caller.account_id.clone();
    let sealed = app.secrets.seal(&account, &name, &value);
    wipe(&mut value);
    let ciphertext = sealed.map_err(ApiError::internal)?;
    let now = app.clock.now_ms();
    let (stored, name) = app
        .db
        .write(move |conn| {
            let stored = store::upsert(conn, &account, &name, &ciphertext, metadata_cbor.as_deref(), now)?;
            Ok((stored, name))
        })
        .await?;
    Ok(SetSecretResponse { extra: Default::default(), secret: redacted(stored, name, metadata) })
}

/// Validates a `SetSecret` request without touching the value's contents: returns the trimmed
/// name and the canonical CBOR of the metadata, when there is metadata.
fn check_set_secret(name: &str, value: &[u8], metadata: Option<&Metadata>) -> ApiResult<(String, Option<Vec<u8>>)> {
    let name = bounded_string(name, "Secret name", MAX_NAME_BYTES)?;
    if value.len() > MAX_SECRET_BYTES {
        return Err(ApiError::invalid("Secret value is too large"));
    }
    let metadata_cbor = match metadata {
        None => None,
        Some(metadata) => {
            if cbor_len(metadata)? > MAX_OPEN_MAP_CBOR_BYTES {
                return Err(ApiError::invalid("Metadata is too large"));
            }
            Some(wire::to_vec(metadata).map_err(ApiError::internal)?)
        }
    };
    Ok((name, metadata_cbor))
}

/// The redacted view of a stored secret: never its value.
fn redacted(stored: StoredRow, name: String, metadata: Option<Metadata>) -> RedactedSecret {
    let StoredRow { id, created_at, updated_at } = stored;
    RedactedSecret { extra: Default::default(), created_at, has_value: true, id, metadata, name, updated_at }
}

/// Overwrites a plaintext buffer we are done with (best-effort: earlier copies, such as the
/// decoded request, are not reached).
fn wipe(value: &mut [u8]) {
    value.fill(0);
    std::hint::black_box(value);
}

/// Whether stored metadata CBOR marks an uploaded Hypermedia account key: a map whose `kind` is
/// the text `hm-account-key`. Bytes that are not a CBOR map are not a signing key.
pub(crate) fn is_signing_key_metadata(bytes: &[u8]) -> bool {
    metadata_kind(bytes).is_some_and(|kind| kind == SIGNING_KEY_KIND)
}

/// The text `kind` of stored metadata CBOR, when it is a map with one.
pub(crate) fn metadata_kind(bytes: &[u8]) -> Option<String> {
    match wire::decode_ipld(bytes).ok()? {
        Ipld::Map(mut map) => match map.remove("kind")? {
            Ipld::String(kind) => Some(kind),
            _ => None,
        },
        _ => None,
    }
}

/// Decodes stored metadata CBOR as a map (`None` for bytes that are not a CBOR map).
pub(crate) fn decode_metadata(bytes: &[u8]) -> Option<BTreeMap<String, Ipld>> {
    match wire::decode_ipld(bytes).ok()? {
        Ipld::Map(map) => Some(map),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::db::Connection;

    use super::store::{delete_secret, load_metadata, load_sealed, upsert};
    use super::*;
    use crate::error::ErrorKind;

    fn cbor(value: Ipld) -> Vec<u8> {
        wire::ipld_to_vec(&value).unwrap()
    }

    fn map(entries: &[(&str, Ipld)]) -> Ipld {
        Ipld::Map(entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect())
    }

    fn memory_db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE accounts (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL) STRICT;
             CREATE TABLE secrets (
               id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL, ciphertext BLOB NOT NULL,
               metadata_cbor BLOB, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
               UNIQUE (account_id, name)) STRICT;",
        )
        .unwrap();
        conn
    }

    fn rejects<T: std::fmt::Debug>(result: ApiResult<T>, message: &str) {
        let error = result.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid);
        assert_eq!(error.message(), message);
    }

    #[test]
    fn signing_key_kind_detection() {
        let key = map(&[("kind", Ipld::String("hm-account-key".into())), ("accountId", Ipld::String("z6Mk".into()))]);
        assert!(is_signing_key_metadata(&cbor(key)));
        assert_eq!(
            metadata_kind(&cbor(map(&[("kind", Ipld::String("provider-oauth".into()))]))).as_deref(),
            Some("provider-oauth")
        );
        for other in [
            map(&[("kind", Ipld::String("provider-oauth".into()))]),
            map(&[("kind", Ipld::String("HM-ACCOUNT-KEY".into()))]),
            map(&[("kind", Ipld::Bytes(b"hm-account-key".to_vec()))]),
            map(&[("type", Ipld::String("hm-account-key".into()))]),
            map(&[]),
            Ipld::List(vec![Ipld::String("hm-account-key".into())]),
            Ipld::String("hm-account-key".into()),
            Ipld::Null,
        ] {
            assert!(!is_signing_key_metadata(&cbor(other.clone())), "{other:?}");
        }
        assert!(!is_signing_key_metadata(b""));
        assert!(!is_signing_key_metadata(&[0xff, 0x00, 0x13]));
    }

    #[test]
    fn request_checks() {
        let (name, metadata) = check_set_secret("  OPENAI_API_KEY \n", b"v", None).unwrap();
        assert_eq!((name.as_str(), metadata), ("OPENAI_API_KEY", None));
        rejects(check_set_secret("  ", b"v", None), "Secret name is required");
        rejects(check_set_secret(&"n".repeat(257), b"v", None), "Secret name is too large");
        // The name is checked before the value.
        rejects(check_set_secret("", &vec![0; MAX_SECRET_BYTES + 1], None), "Secret name is required");
        assert!(check_set_secret("n", &vec![0; MAX_SECRET_BYTES], None).is_ok());
        assert!(check_set_secret("n", b"", None).is_ok());
        rejects(check_set_secret("n", &vec![0; MAX_SECRET_BYTES + 1], None), "Secret value is too large");

        let sized =
            |len: usize| -> Metadata { BTreeMap::from([("k".to_owned(), Value(Ipld::String("x".repeat(len))))]) };
        // {"k": text(n)}: 1 (map) + 2 (key) + 3 (text header for 256..=65535) + n.
        let (_, stored) = check_set_secret("n", b"v", Some(&sized(16 * 1024 - 6))).unwrap();
        assert_eq!(stored.map(|bytes| bytes.len()), Some(16 * 1024));
        rejects(check_set_secret("n", b"v", Some(&sized(16 * 1024 - 5))), "Metadata is too large");
    }

    #[test]
    fn errors_never_echo_the_value() {
        let value = "sk-live-very-secret".repeat(4000).into_bytes();
        let error = check_set_secret("n", &value, None).unwrap_err();
        assert!(!format!("{error} {error:?}").contains("sk-live"));
    }

    #[test]
    fn upsert_keeps_id_and_created_at() {
        let conn = memory_db();
        let first = upsert(&conn, "acct", "KEY", b"c1", None, 10).unwrap();
        assert_eq!((first.created_at, first.updated_at), (10, 10));
        let meta = cbor(map(&[("kind", Ipld::String("hm-account-key".into()))]));
        let second = upsert(&conn, "acct", "KEY", b"c2", Some(&meta), 20).unwrap();
        assert_eq!(second, StoredRow { id: first.id.clone(), created_at: 10, updated_at: 20 });
        let other = upsert(&conn, "acct-2", "KEY", b"c3", None, 30).unwrap();
        assert_ne!(other.id, first.id);
        assert_eq!(load_metadata(&conn, "acct", "KEY").unwrap(), Some(Some(meta)));
        assert_eq!(load_metadata(&conn, "acct-2", "KEY").unwrap(), Some(None));
        assert_eq!(load_metadata(&conn, "acct", "NOPE").unwrap(), None);
        let accounts: i64 = conn.query_row("SELECT COUNT(*) FROM accounts", [], |row| row.get(0)).unwrap();
        assert_eq!(accounts, 2);
    }

    #[test]
    fn open_and_delete() {
        let conn = memory_db();
        let key = crypto::SecretKey::from_bytes([3; 32]);
        let sealed = key.seal("acct", "KEY", b"plain").unwrap();
        upsert(&conn, "acct", "KEY", &sealed, None, 1).unwrap();
        let loaded = load_sealed(&conn, "acct", "KEY").unwrap().unwrap();
        assert_eq!(key.open("acct", "KEY", &loaded).unwrap(), b"plain");
        assert_eq!(load_sealed(&conn, "acct", "OTHER").unwrap(), None);
        // Ciphertext copied to another account does not open.
        upsert(&conn, "acct-2", "KEY", &sealed, None, 1).unwrap();
        let copied = load_sealed(&conn, "acct-2", "KEY").unwrap().unwrap();
        assert!(key.open("acct-2", "KEY", &copied).is_err());
        assert!(delete_secret(&conn, "acct", "KEY").unwrap());
        assert!(!delete_secret(&conn, "acct", "KEY").unwrap());
        assert_eq!(load_sealed(&conn, "acct", "KEY").unwrap(), None);
    }

    #[test]
    fn redaction_has_no_value() {
        let stored = StoredRow { id: "id-1".into(), created_at: 5, updated_at: 6 };
        let metadata: Metadata = BTreeMap::from([("kind".to_owned(), Value(Ipld::String("x".into())))]);
        let secret = redacted(stored, "KEY".into(), Some(metadata.clone()));
        assert_eq!(
            secret,
            RedactedSecret {
                extra: Default::default(),
                created_at: 5,
                has_value: true,
                id: "id-1".into(),
                metadata: Some(metadata),
                name: "KEY".into(),
                updated_at: 6
            }
        );
        let bare = redacted(StoredRow { id: "id-2".into(), created_at: 1, updated_at: 1 }, "K".into(), None);
        let encoded = wire::to_vec(&bare).unwrap();
        let decoded = wire::decode_ipld(&encoded).unwrap();
        let Ipld::Map(fields) = decoded else { panic!("not a map") };
        let keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        assert_eq!(keys, ["createdAt", "hasValue", "id", "name", "updatedAt"]);
    }
}
