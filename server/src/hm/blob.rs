//! Seed blobs the server signs itself: canonical DAG-CBOR, the zero-signature rule, and CIDs.
//!
//! A blob is signed by encoding it with `sig` = 64 zero bytes, signing those bytes (Ed25519,
//! RFC 8032), putting the signature in `sig` and encoding again. Client-computed CIDs are CIDv1
//! over the final bytes with multihash sha2-256 (the `cid` crate); the string form is multibase
//! base32 lower (`b…`), `Cid`'s `Display`.

use std::collections::BTreeMap;

use cid::Cid;
use cid::multihash::Multihash;
use ed25519_dalek::{Signer as _, SigningKey};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Principal, wire};
use sha2::{Digest, Sha256};

/// Multicodec of DAG-CBOR.
pub(crate) const DAG_CBOR: u64 = 0x71;
/// Multicodec of raw bytes (UnixFS raw leaves).
pub(crate) const RAW: u64 = 0x55;
/// Multicodec of dag-pb (UnixFS interior nodes).
pub(crate) const DAG_PB: u64 = 0x70;
/// Multihash code of sha2-256.
const SHA2_256: u64 = 0x12;

/// One blob ready for `PublishBlobs`: its bytes and, when the client computes it, its CID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// The CID string (`b…`), absent for blobs the server names.
    pub cid: Option<String>,
    /// The encoded bytes.
    pub data: Vec<u8>,
}

/// Why a blob could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode blob: {0}")]
pub struct BlobError(String);

/// The CIDv1 of `data` under `codec`, hashed with sha2-256. `to_bytes` is the binary form,
/// `to_string` the `b…` string.
pub(crate) fn cid_v1_sha256(codec: u64, data: &[u8]) -> Cid {
    let digest = Sha256::digest(data);
    // A sha2-256 digest is 32 bytes; a `Cid`'s multihash holds up to 64.
    let hash = Multihash::wrap(SHA2_256, &digest).expect("a 32-byte digest fits a 64-byte multihash");
    Cid::new_v1(codec, hash)
}

/// The principal (`ed01` + public key) of a signing key.
pub fn principal(key: &SigningKey) -> Principal {
    Principal::from_public_key(&key.verifying_key().to_bytes())
}

/// Signs `fields` (without `signer` and `sig`, which this adds) by the zero-signature rule and
/// returns the final canonical DAG-CBOR bytes.
pub fn sign(key: &SigningKey, mut fields: BTreeMap<String, Ipld>) -> Result<Vec<u8>, BlobError> {
    fields.insert("signer".to_owned(), Ipld::Bytes(principal(key).to_bytes().to_vec()));
    fields.insert("sig".to_owned(), Ipld::Bytes(vec![0; 64]));
    let mut value = Ipld::Map(fields);
    let unsigned = wire::ipld_to_vec(&value).map_err(|error| BlobError(error.to_string()))?;
    let signature = key.sign(&unsigned).to_bytes().to_vec();
    if let Ipld::Map(fields) = &mut value {
        fields.insert("sig".to_owned(), Ipld::Bytes(signature));
    }
    wire::ipld_to_vec(&value).map_err(|error| BlobError(error.to_string()))
}

/// Signs `fields` like [`sign`] and names the bytes with their sha2-256 DAG-CBOR CID, returned
/// both in the blob (as a string) and as a [`Cid`] that later blobs can link to.
pub(crate) fn sign_named(key: &SigningKey, fields: BTreeMap<String, Ipld>) -> Result<(Blob, Cid), BlobError> {
    let data = sign(key, fields)?;
    let cid = cid_v1_sha256(DAG_CBOR, &data);
    Ok((Blob { cid: Some(cid.to_string()), data }, cid))
}

/// A signed `Profile` blob with its sha2-256 CID: `{type, signer, sig, ts, name, avatar?,
/// description?}`.
pub(crate) fn profile(
    key: &SigningKey,
    ts_ms: i64,
    name: &str,
    avatar: Option<&str>,
    description: Option<&str>,
) -> Result<Blob, BlobError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), Ipld::String("Profile".to_owned())),
        ("ts".to_owned(), Ipld::Integer(i128::from(ts_ms))),
        ("name".to_owned(), Ipld::String(name.to_owned())),
    ]);
    if let Some(avatar) = avatar {
        fields.insert("avatar".to_owned(), Ipld::String(avatar.to_owned()));
    }
    if let Some(description) = description {
        fields.insert("description".to_owned(), Ipld::String(description.to_owned()));
    }
    sign_named(key, fields).map(|(blob, _)| blob)
}

/// A signed alias `Profile` with its sha2-256 CID: `{type, signer, sig, ts, alias}`, saying the
/// signer's identity is `alias`'s (no name).
pub(crate) fn profile_alias(key: &SigningKey, ts_ms: i64, alias: &Principal) -> Result<Blob, BlobError> {
    let fields = BTreeMap::from([
        ("type".to_owned(), Ipld::String("Profile".to_owned())),
        ("ts".to_owned(), Ipld::Integer(i128::from(ts_ms))),
        ("alias".to_owned(), Ipld::Bytes(alias.to_bytes().to_vec())),
    ]);
    sign_named(key, fields).map(|(blob, _)| blob)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden Profile vector of docs/hypermedia.md §2.2 (made with the upstream JS libraries).
    #[test]
    fn profile_matches_the_upstream_vector() {
        let key = SigningKey::from_bytes(&[7; 32]);
        assert_eq!(principal(&key).to_string(), "z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z");
        let blob = profile(&key, 1_700_000_000_000, "Test Agent", None, None).unwrap();
        assert_eq!(
            hex::encode(&blob.data),
            "a56274731b0000018bcfe568006373696758409851742dfb4d4fd58fa719c666b264d8427bef4c0b53a3301ff1424636267e8b15b613e6a6fe26d81e5f48fd4c1f373ed8ad0f4dc8abd7661b7d406ae465c20e646e616d656a54657374204167656e7464747970656750726f66696c65667369676e65725822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c"
        );
        assert_eq!(blob.cid.as_deref(), Some("bafyreierjjrmllcumbks77hhj4niubp5vqr3wsledzclfxrxdbuz2itdwu"));
    }

    #[test]
    fn cid_strings() {
        // CIDv1 raw sha2-256 strings start `bafkrei`, dag-cbor ones `bafyrei`.
        assert!(cid_v1_sha256(RAW, b"icon").to_string().starts_with("bafkrei"));
        assert!(cid_v1_sha256(DAG_CBOR, b"x").to_string().starts_with("bafyrei"));
        // The binary form: version 1, codec, sha2-256, 32 bytes, the digest.
        let cid = cid_v1_sha256(DAG_PB, b"x");
        let mut expected = vec![0x01, 0x70, 0x12, 0x20];
        expected.extend_from_slice(&Sha256::digest(b"x"));
        assert_eq!(cid.to_bytes(), expected);
    }

    #[test]
    fn a_named_blob_links_to_its_own_cid() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let fields = BTreeMap::from([("type".to_owned(), Ipld::String("Change".to_owned()))]);
        let (blob, cid) = sign_named(&key, fields).unwrap();
        assert_eq!(blob.cid, Some(cid.to_string()));
        assert_eq!((cid.version(), cid.codec()), (ipld_core::cid::Version::V1, DAG_CBOR));
    }
}
