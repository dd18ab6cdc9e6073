//! Signed action envelopes: building and signing them (clients), checking them (servers).
//!
//! The signed bytes are the canonical DAG-CBOR encoding of the whole envelope map with `sig` set to
//! 64 zero bytes. A server checks the signature over the *re-encoding of the generic decoded
//! value*, never over a typed re-serialisation, so envelopes carrying fields this build does not
//! know still verify (and an added or dropped key, such as a `null` the signer omitted, does not).
//!
//! Raw bytes become a [`SignedEnvelope`] (decoded, shape checked) and then a [`VerifiedEnvelope`]
//! (timestamp and signature checked), in the upstream order. Whether the signer may act for the
//! account is the server's decision, made after this.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use crate::principal::Principal;
use crate::signer::{Signature, Signer, SignerError};
use crate::version::declared_protocol_version;
use crate::wire::{self, WireError};

/// The `type` of every action envelope.
pub const ENVELOPE_TYPE: &str = "AgentsAction";

/// Length of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// How far an action's `ts` may be from the server clock: five minutes, either way.
pub const TIMESTAMP_WINDOW_MS: i64 = 5 * 60 * 1000;

/// Why an envelope was refused. The messages are the upstream server's, byte for byte: clients
/// match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not a map.
    #[error("Invalid envelope")]
    Envelope,
    /// `type` is not `AgentsAction`.
    #[error("Invalid envelope type")]
    Type,
    /// `signer` is not a 34-byte Ed25519 principal.
    #[error("Invalid signer")]
    Signer,
    /// `account` is not a 34-byte Ed25519 principal.
    #[error("Invalid account")]
    Account,
    /// `sig` is not a 64-byte byte string.
    #[error("Invalid signature bytes")]
    SignatureBytes,
    /// `action` is not a map with a text `_`.
    #[error("Invalid action")]
    Action,
    /// `action.ts` is missing or not a finite number.
    #[error("Invalid action timestamp")]
    Timestamp,
    /// `action.ts` is more than five minutes from the server clock.
    #[error("Action timestamp is outside allowed window")]
    OutsideWindow,
    /// The signature does not verify under `signer`.
    #[error("Invalid signature")]
    Signature,
    /// The signer is neither the account nor authorized for it (decided by the server).
    #[error("Signer is not authorized for account")]
    Unauthorized,
}

/// Bytes that could not be read as an envelope at all.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not canonical DAG-CBOR.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// Decoded, but not an envelope.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
}

/// A decoded envelope whose shape has been checked but whose signature has not.
#[derive(Debug, Clone)]
pub struct SignedEnvelope {
    /// The whole decoded envelope, every key kept, `sig` included.
    map: BTreeMap<String, Ipld>,
    signer: Principal,
    account: Principal,
    sig: Signature,
    /// The received bytes with `sig` zeroed, kept only when they provably equal the canonical
    /// re-encoding (see [`SignedEnvelope::decode`]), so the signed bytes need no second encoding.
    received_signing_bytes: Option<Vec<u8>>,
}

impl SignedEnvelope {
    /// Decodes bytes and checks the envelope shape.
    ///
    /// The decoder is strict (shortest integers and lengths, sorted unique keys, no indefinite
    /// lengths, no NaN), so a decoded value re-encodes to the very bytes received, with one
    /// exception: a whole-valued float, which the JavaScript encoder (and [`wire::ipld_to_vec`])
    /// writes as an integer. When the envelope holds no float and no link, the received bytes are
    /// kept and [`Self::signing_bytes`] zeroes their `sig` instead of re-encoding; otherwise it
    /// re-encodes. Both give the same bytes (a property test checks it).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (mut envelope, reusable) = Self::decode_shape(bytes)?;
        if reusable {
            envelope.received_signing_bytes = Some(zero_sig(bytes.to_vec()));
        }
        Ok(envelope)
    }

    /// [`Self::decode`] taking the bytes, which become the signing bytes in place: a large
    /// envelope (an upload chunk) is then held twice while it is verified (the received bytes
    /// and the decoded field), not three times.
    pub fn decode_owned(bytes: Vec<u8>) -> Result<Self, DecodeError> {
        let (mut envelope, reusable) = Self::decode_shape(&bytes)?;
        if reusable {
            envelope.received_signing_bytes = Some(zero_sig(bytes));
        }
        Ok(envelope)
    }

    /// Decodes and checks the shape; also says whether the received bytes can be signed as they
    /// are (with `sig` zeroed).
    fn decode_shape(bytes: &[u8]) -> Result<(Self, bool), DecodeError> {
        let value = wire::decode_ipld(bytes)?;
        let reusable = !has_float_or_link(&value) && bytes.get(1..SIG_OFFSET) == Some(&SIG_PREFIX[..]);
        Ok((Self::from_ipld(value)?, reusable))
    }

    /// Checks the shape of an already decoded value, in the upstream order: map, `type`, `signer`,
    /// `account`, `sig`, `action`.
    pub fn from_ipld(value: Ipld) -> Result<Self, EnvelopeError> {
        let Ipld::Map(map) = value else {
            return Err(EnvelopeError::Envelope);
        };
        match map.get("type") {
            Some(Ipld::String(kind)) if kind == ENVELOPE_TYPE => {}
            _ => return Err(EnvelopeError::Type),
        }
        let signer = principal_field(&map, "signer").ok_or(EnvelopeError::Signer)?;
        let account = principal_field(&map, "account").ok_or(EnvelopeError::Account)?;
        let sig: Signature = match map.get("sig") {
            Some(Ipld::Bytes(bytes)) => bytes.as_slice().try_into().map_err(|_| EnvelopeError::SignatureBytes)?,
            _ => return Err(EnvelopeError::SignatureBytes),
        };
        match map.get("action") {
            Some(Ipld::Map(action)) if matches!(action.get("_"), Some(Ipld::String(_))) => {}
            _ => return Err(EnvelopeError::Action),
        }
        Ok(SignedEnvelope { map, signer, account, sig, received_signing_bytes: None })
    }

    /// The received signature (not verified until [`Self::verify`]).
    pub fn signature(&self) -> Signature {
        self.sig
    }

    /// The key that signed.
    pub fn signer(&self) -> Principal {
        self.signer
    }

    /// The account the action is performed for.
    pub fn account(&self) -> Principal {
        self.account
    }

    /// The action's name (`action._`).
    pub fn action_name(&self) -> &str {
        match self.action().get("_") {
            Some(Ipld::String(name)) => name,
            _ => "",
        }
    }

    /// The action map, `_` and `ts` included.
    pub fn action(&self) -> &BTreeMap<String, Ipld> {
        static EMPTY: BTreeMap<String, Ipld> = BTreeMap::new();
        match self.map.get("action") {
            Some(Ipld::Map(action)) => action,
            _ => &EMPTY,
        }
    }

    /// The protocol version the client declared (absent or nonsense reads as 1).
    pub fn declared_protocol(&self) -> u32 {
        declared_protocol_version(self.map.get("protocol"))
    }

    /// `action.ts` in Unix milliseconds, when it is a finite number.
    pub fn timestamp_ms(&self) -> Option<f64> {
        match self.action().get("ts") {
            Some(Ipld::Integer(ts)) => Some(*ts as f64),
            Some(Ipld::Float(ts)) if ts.is_finite() => Some(*ts),
            _ => None,
        }
    }

    /// The bytes the signer signed: the canonical re-encoding with `sig` zeroed.
    pub fn signing_bytes(&self) -> Result<Vec<u8>, WireError> {
        match &self.received_signing_bytes {
            Some(bytes) => Ok(bytes.clone()),
            None => self.reencoded_signing_bytes(),
        }
    }

    /// [`Self::signing_bytes`] computed the long way, by re-encoding the decoded map.
    pub fn reencoded_signing_bytes(&self) -> Result<Vec<u8>, WireError> {
        // Encode a borrowed view with the zero signature instead of cloning the whole map.
        let zero = Ipld::Bytes(vec![0; SIGNATURE_LEN]);
        let mut view: Vec<(&str, &Ipld)> =
            self.map.iter().map(|(key, value)| (key.as_str(), if key == "sig" { &zero } else { value })).collect();
        wire::encode::map_to_vec(&mut view)
    }

    /// Checks the timestamp against `now_ms` (within [`TIMESTAMP_WINDOW_MS`] either way), then the
    /// Ed25519 signature (`verify_strict`) over [`Self::signing_bytes`].
    pub fn verify(self, now_ms: i64) -> Result<VerifiedEnvelope, EnvelopeError> {
        self.verify_with(now_ms, TIMESTAMP_WINDOW_MS, None)
    }

    /// [`Self::verify`] with another timestamp window, and optionally a cache of decompressed
    /// public keys (a server sees the same signers again and again; decompressing a key costs
    /// about a tenth of a verification).
    pub fn verify_with(
        self,
        now_ms: i64,
        window_ms: i64,
        keys: Option<&KeyCache>,
    ) -> Result<VerifiedEnvelope, EnvelopeError> {
        let ts = self.timestamp_ms().ok_or(EnvelopeError::Timestamp)?;
        if (now_ms as f64 - ts).abs() > window_ms as f64 {
            return Err(EnvelopeError::OutsideWindow);
        }
        self.verify_signature(keys)?;
        Ok(VerifiedEnvelope { inner: self })
    }

    fn verify_signature(&self, keys: Option<&KeyCache>) -> Result<(), EnvelopeError> {
        let key = match keys {
            Some(cache) => cache.get(&self.signer),
            None => self.signer.verifying_key(),
        }
        .ok_or(EnvelopeError::Signature)?;
        let reencoded;
        let message = match &self.received_signing_bytes {
            Some(bytes) => bytes.as_slice(),
            None => {
                reencoded = self.reencoded_signing_bytes().map_err(|_| EnvelopeError::Signature)?;
                reencoded.as_slice()
            }
        };
        let signature = ed25519_dalek::Signature::from_bytes(&self.sig);
        key.verify_strict(message, &signature).map_err(|_| EnvelopeError::Signature)
    }
}

/// Envelope bytes whose `sig` (at its fixed place, see [`SIG_PREFIX`]) is zeroed.
fn zero_sig(mut bytes: Vec<u8>) -> Vec<u8> {
    if let Some(sig) = bytes.get_mut(SIG_OFFSET..SIG_OFFSET + SIGNATURE_LEN) {
        sig.fill(0);
    }
    bytes
}

/// Whether a value holds a float or a CID link anywhere (the values whose re-encoding may differ
/// from the received bytes).
fn has_float_or_link(value: &Ipld) -> bool {
    match value {
        Ipld::Float(_) | Ipld::Link(_) => true,
        Ipld::List(items) => items.iter().any(has_float_or_link),
        Ipld::Map(entries) => entries.values().any(has_float_or_link),
        _ => false,
    }
}

/// A bounded cache of decompressed Ed25519 public keys, shared by the requests of a server.
///
/// Holds at most [`KeyCache::CAPACITY`] keys; when full it starts over (signers are few and
/// recur, so a simple reset is enough and keeps memory bounded).
#[derive(Debug, Default)]
pub struct KeyCache {
    keys: std::sync::Mutex<std::collections::HashMap<Principal, ed25519_dalek::VerifyingKey>>,
}

impl KeyCache {
    /// The most keys kept at once.
    pub const CAPACITY: usize = 4096;

    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The verifying key of `principal`; `None` when its bytes are not a valid curve point.
    pub fn get(&self, principal: &Principal) -> Option<ed25519_dalek::VerifyingKey> {
        // The lock is never held across anything that can panic or wait.
        let mut keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(key) = keys.get(principal) {
            return Some(*key);
        }
        let key = principal.verifying_key()?;
        if keys.len() >= Self::CAPACITY {
            keys.clear();
        }
        keys.insert(*principal, key);
        Some(key)
    }
}

fn principal_field(map: &BTreeMap<String, Ipld>, key: &str) -> Option<Principal> {
    match map.get(key) {
        Some(Ipld::Bytes(bytes)) => Principal::from_bytes(bytes).ok(),
        _ => None,
    }
}

/// An envelope whose timestamp and signature verified. Built only by [`SignedEnvelope::verify`].
#[derive(Debug, Clone)]
pub struct VerifiedEnvelope {
    inner: SignedEnvelope,
}

impl VerifiedEnvelope {
    /// The key that signed.
    pub fn signer(&self) -> Principal {
        self.inner.signer
    }

    /// The account the action is performed for (authorization is still the server's to check).
    pub fn account(&self) -> Principal {
        self.inner.account
    }

    /// The action's name.
    pub fn action_name(&self) -> &str {
        self.inner.action_name()
    }

    /// The protocol version the client declared.
    pub fn declared_protocol(&self) -> u32 {
        self.inner.declared_protocol()
    }

    /// The action map, `_` and `ts` included.
    pub fn action(&self) -> &BTreeMap<String, Ipld> {
        self.inner.action()
    }

    /// Takes the action map out, `_` and `ts` included.
    pub fn into_action(mut self) -> Ipld {
        self.inner.map.remove("action").unwrap_or(Ipld::Null)
    }
}

/// An envelope ready to be signed: who signs, for which account, in which protocol, what action.
#[derive(Debug, Clone)]
pub struct UnsignedEnvelope {
    /// The key that will sign.
    pub signer: Principal,
    /// The account the action is performed for.
    pub account: Principal,
    /// The protocol the client speaks; `None` leaves the field out (read as 1).
    pub protocol: Option<u32>,
    /// The action map with `_` and `ts`; absent optional fields must be left out, never null.
    pub action: Ipld,
}

/// Signing failed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The envelope could not be encoded.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The signer failed.
    #[error(transparent)]
    Signer(#[from] SignerError),
}

/// Offset of the signature inside canonical envelope bytes: `sig` is the shortest key, so it comes
/// first, right after the one-byte map header, its key (`63 73 69 67`) and byte-string header
/// (`58 40`).
const SIG_OFFSET: usize = 7;
const SIG_PREFIX: [u8; 6] = [0x63, b's', b'i', b'g', 0x58, 0x40];

impl UnsignedEnvelope {
    /// The canonical bytes to sign (the envelope with `sig` = 64 zero bytes).
    pub fn signing_bytes(&self) -> Result<Vec<u8>, WireError> {
        let kind = Ipld::String(ENVELOPE_TYPE.into());
        let signer = Ipld::Bytes(self.signer.to_bytes().to_vec());
        let account = Ipld::Bytes(self.account.to_bytes().to_vec());
        let sig = Ipld::Bytes(vec![0; SIGNATURE_LEN]);
        let protocol = self.protocol.map(|protocol| Ipld::Integer(protocol.into()));
        // A borrowed view: the action is encoded in place, never cloned, into one buffer of the
        // exact size.
        let mut view: Vec<(&str, &Ipld)> = Vec::with_capacity(6);
        view.extend([
            ("type", &kind),
            ("signer", &signer),
            ("account", &account),
            ("sig", &sig),
            ("action", &self.action),
        ]);
        if let Some(protocol) = &protocol {
            view.push(("protocol", protocol));
        }
        wire::encode::map_to_vec(&mut view)
    }

    /// Signs with `signer` and returns the bytes to send.
    pub async fn sign<S: Signer + ?Sized>(&self, signer: &S) -> Result<Vec<u8>, SignError> {
        let mut bytes = self.signing_bytes()?;
        let signature = signer.sign(&bytes).await?;
        insert_signature(&mut bytes, &signature)?;
        Ok(bytes)
    }
}

/// Writes `signature` over the zeroed `sig` of canonical signing bytes, giving the envelope to send.
pub fn insert_signature(signing_bytes: &mut [u8], signature: &Signature) -> Result<(), WireError> {
    let end = SIG_OFFSET + SIGNATURE_LEN;
    if signing_bytes.len() < end || signing_bytes[1..SIG_OFFSET] != SIG_PREFIX {
        return Err(WireError::Encode("envelope bytes do not start with a 64-byte sig".into()));
    }
    signing_bytes[SIG_OFFSET..end].copy_from_slice(signature);
    Ok(())
}
