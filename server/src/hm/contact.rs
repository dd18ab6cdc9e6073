//! Contacts the server writes itself: the `Contact` blob, its tombstone and its record id
//! (docs/hypermedia.md §2.6).
//!
//! A contact is the signer's name for another account (`subject`). It is published without a
//! CID (the Hypermedia server names it) and named by the record id `<authority>/<tsid>`: the
//! authority is the signer (`account` is set only when signing for another account, which this
//! server does not), the tsid computed from the signed bytes as a comment's is
//! ([`super::comment::record_id`]). A tombstone is a Contact with that tsid as `id`, the
//! authority as `account`, and no subject or name.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Principal;

use super::blob::{self, Blob, BlobError};

/// A signed `Contact` blob `{type, signer, sig, ts, subject, name?}` and its record id.
pub(crate) fn contact(
    key: &SigningKey,
    ts_ms: i64,
    subject: &Principal,
    name: Option<&str>,
) -> Result<(Blob, String), BlobError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), Ipld::String("Contact".to_owned())),
        ("ts".to_owned(), Ipld::Integer(i128::from(ts_ms))),
        ("subject".to_owned(), Ipld::Bytes(subject.to_bytes().to_vec())),
    ]);
    if let Some(name) = name {
        fields.insert("name".to_owned(), Ipld::String(name.to_owned()));
    }
    let data = blob::sign(key, fields)?;
    let id = super::comment::record_id(&blob::principal(key), ts_ms, &data);
    Ok((Blob { cid: None, data }, id))
}

/// A signed tombstone `{type, signer, sig, ts, id, account}` of the contact `<authority>/<tsid>`.
pub(crate) fn tombstone(key: &SigningKey, ts_ms: i64, authority: &Principal, tsid: &str) -> Result<Blob, BlobError> {
    let fields = BTreeMap::from([
        ("type".to_owned(), Ipld::String("Contact".to_owned())),
        ("ts".to_owned(), Ipld::Integer(i128::from(ts_ms))),
        ("id".to_owned(), Ipld::String(tsid.to_owned())),
        ("account".to_owned(), Ipld::Bytes(authority.to_bytes().to_vec())),
    ]);
    Ok(Blob { cid: None, data: blob::sign(key, fields)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use seed_agents_protocol::wire;

    #[test]
    fn a_contact_names_its_subject_and_its_tombstone_names_the_record() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let subject = blob::principal(&SigningKey::from_bytes(&[9; 32]));
        let (blob, id) = contact(&key, 1_700_000_000_000, &subject, Some("Bea")).unwrap();
        assert_eq!(blob.cid, None);
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&blob.data) else { panic!("not a map") };
        let keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        assert_eq!(keys, ["name", "sig", "signer", "subject", "ts", "type"]);
        assert_eq!(fields["subject"], Ipld::Bytes(subject.to_bytes().to_vec()));
        let me = blob::principal(&key);
        assert_eq!(id, super::super::comment::record_id(&me, 1_700_000_000_000, &blob.data));
        assert!(id.starts_with(&format!("{me}/z")));

        let (_, tsid) = id.split_once('/').unwrap();
        let gone = tombstone(&key, 1_700_000_000_001, &me, tsid).unwrap();
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&gone.data) else { panic!("not a map") };
        let keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        assert_eq!(keys, ["account", "id", "sig", "signer", "ts", "type"]);
        assert_eq!(fields["id"], Ipld::String(tsid.to_owned()));
        assert_eq!(fields["account"], Ipld::Bytes(me.to_bytes().to_vec()));
    }
}
