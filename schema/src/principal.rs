//! Principals: the 34-byte identity of an Ed25519 key (`ED 01` + public key) and its `z…` string.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The multicodec prefix of an Ed25519 public key (unsigned varint 0xed).
pub const ED25519_PREFIX: [u8; 2] = [0xed, 0x01];

/// Length of a binary principal: the prefix plus a 32-byte key.
pub const PRINCIPAL_LEN: usize = 34;

/// Why a principal was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    /// Not 34 bytes, or not starting with `ED 01`.
    #[error("principal must be 0xed 0x01 followed by a 32-byte Ed25519 key")]
    Shape,
    /// The string form is not `z` + base58btc.
    #[error("principal string must be base58btc multibase (z...)")]
    Encoding,
    /// The string decodes, but is not the canonical spelling of those bytes.
    #[error("principal string is not canonical")]
    NotCanonical,
}

/// The identity of an Ed25519 key, as accounts and signers are named on the wire.
///
/// Binary form (in envelopes): `0xED 0x01` followed by the 32-byte public key. String form (in
/// every id field): multibase base58btc, i.e. `z` + base58 of the 34 bytes. Equality is bytewise.
///
/// ```
/// use seed_agents_protocol::Principal;
/// let id = "z6MkjEhszFcezhdTNdoerRrPrFHsnJ7412AXcz31jZStySWD";
/// let principal: Principal = id.parse().unwrap();
/// assert_eq!(principal.to_string(), id);
/// assert_eq!(principal.to_bytes()[..2], [0xed, 0x01]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal([u8; PRINCIPAL_LEN]);

impl Principal {
    /// Parses the binary form.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, PrincipalError> {
        let array: [u8; PRINCIPAL_LEN] = bytes.try_into().map_err(|_| PrincipalError::Shape)?;
        if array[..2] != ED25519_PREFIX {
            return Err(PrincipalError::Shape);
        }
        Ok(Principal(array))
    }

    /// The principal of a raw 32-byte Ed25519 public key.
    pub fn from_public_key(key: &[u8; 32]) -> Self {
        let mut bytes = [0u8; PRINCIPAL_LEN];
        bytes[..2].copy_from_slice(&ED25519_PREFIX);
        bytes[2..].copy_from_slice(key);
        Principal(bytes)
    }

    /// The binary form.
    pub fn to_bytes(&self) -> [u8; PRINCIPAL_LEN] {
        self.0
    }

    /// The binary form, borrowed.
    pub fn as_bytes(&self) -> &[u8; PRINCIPAL_LEN] {
        &self.0
    }

    /// The raw 32-byte public key.
    pub fn public_key(&self) -> &[u8; 32] {
        self.0[2..].try_into().unwrap_or(&[0; 32])
    }

    /// The key as an Ed25519 verifying key; `None` when the bytes are not a valid curve point.
    pub fn verifying_key(&self) -> Option<VerifyingKey> {
        VerifyingKey::from_bytes(self.public_key()).ok()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("z")?;
        f.write_str(&bs58::encode(&self.0).into_string())
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Principal({self})")
    }
}

impl FromStr for Principal {
    type Err = PrincipalError;

    /// Parses the string form; only the canonical spelling is accepted.
    fn from_str(text: &str) -> Result<Self, PrincipalError> {
        let body = text.strip_prefix('z').ok_or(PrincipalError::Encoding)?;
        let bytes = bs58::decode(body).into_vec().map_err(|_| PrincipalError::Encoding)?;
        let principal = Principal::from_bytes(&bytes)?;
        if principal.to_string() != text {
            return Err(PrincipalError::NotCanonical);
        }
        Ok(principal)
    }
}

impl Serialize for Principal {
    /// Principals are byte strings on the wire.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(deserializer)?;
        Principal::from_bytes(&bytes).map_err(serde::de::Error::custom)
    }
}
