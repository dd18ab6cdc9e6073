//! Capabilities the server signs itself (docs/hypermedia.md §2.6): the signer lets another
//! account (the `delegate`) write its documents, all of them or those under `path`.
//!
//! `{type: "Capability", signer, sig, ts, delegate, role, path?, label?}`, published without a
//! CID (the Hypermedia server names it, BLAKE2b-256). A Ref the delegate signs for the issuer's
//! space links this capability by that CID.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Principal;

use super::blob::{self, Blob, BlobError};

/// What a capability lets its delegate do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Write the issuer's documents.
    Writer,
    /// Write them as an agent acting for the issuer.
    Agent,
}

impl Role {
    /// The wire spelling: `WRITER` or `AGENT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Writer => "WRITER",
            Role::Agent => "AGENT",
        }
    }
}

/// A new capability.
#[derive(Debug, Clone, Copy)]
pub struct NewCapability<'a> {
    /// Its timestamp (Unix ms).
    pub ts_ms: i64,
    /// The account it is granted to.
    pub delegate: Principal,
    /// What the delegate may do.
    pub role: Role,
    /// The path it is limited to (API format), if any.
    pub path: Option<&'a str>,
    /// A label for people.
    pub label: Option<&'a str>,
}

/// A signed Capability blob, without a CID.
pub fn capability(key: &SigningKey, input: &NewCapability<'_>) -> Result<Blob, BlobError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), Ipld::String("Capability".to_owned())),
        ("ts".to_owned(), Ipld::Integer(i128::from(input.ts_ms))),
        ("delegate".to_owned(), Ipld::Bytes(input.delegate.to_bytes().to_vec())),
        ("role".to_owned(), Ipld::String(input.role.as_str().to_owned())),
    ]);
    if let Some(path) = input.path {
        fields.insert("path".to_owned(), Ipld::String(path.to_owned()));
    }
    if let Some(label) = input.label {
        fields.insert("label".to_owned(), Ipld::String(label.to_owned()));
    }
    Ok(Blob { cid: None, data: blob::sign(key, fields)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use seed_agents_protocol::wire;

    #[test]
    fn a_capability_names_its_delegate_and_role_and_omits_what_is_unset() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let delegate = blob::principal(&SigningKey::from_bytes(&[8; 32]));
        let input = NewCapability { ts_ms: 5, delegate, role: Role::Agent, path: None, label: None };
        let signed = capability(&key, &input).unwrap();
        assert_eq!(signed.cid, None);
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&signed.data) else { panic!("not a map") };
        let mut keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["delegate", "role", "sig", "signer", "ts", "type"]);
        assert_eq!(fields["delegate"], Ipld::Bytes(delegate.to_bytes().to_vec()));
        assert_eq!(fields["role"], Ipld::String("AGENT".to_owned()));
        let scoped = NewCapability { path: Some("/notes"), label: Some("Bea"), role: Role::Writer, ..input };
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&capability(&key, &scoped).unwrap().data) else { panic!() };
        assert_eq!(fields["path"], Ipld::String("/notes".to_owned()));
        assert_eq!(fields["label"], Ipld::String("Bea".to_owned()));
    }
}
