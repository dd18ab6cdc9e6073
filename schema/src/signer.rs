//! Signers: anything that can produce an Ed25519 signature for a principal.
//!
//! The [`Signer`] trait is object safe and runtime-agnostic (it returns a boxed future), so an app
//! can back it with a key in memory ([`Ed25519Signer`]), a hardware token or a daemon over IPC.

use std::future::Future;
use std::pin::Pin;

use ed25519_dalek::{Signer as _, SigningKey};

use crate::principal::Principal;

/// A 64-byte Ed25519 signature.
pub type Signature = [u8; 64];

/// The future a [`Signer`] returns.
pub type SignFuture<'a> = Pin<Box<dyn Future<Output = Result<Signature, SignerError>> + Send + 'a>>;

/// A signer could not produce a signature.
#[derive(Debug, thiserror::Error)]
#[error("signer failed: {message}")]
pub struct SignerError {
    /// What went wrong, for people.
    pub message: String,
    /// The underlying error, when there is one.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// A key could not be loaded (from hex, a key file or an environment variable).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text is not 64 hex digits (a 32-byte Ed25519 seed).
    #[error("a key must be 64 hex digits (a 32-byte Ed25519 seed)")]
    NotHex(#[source] hex::FromHexError),
    /// The key file could not be read.
    #[error("cannot read the key file {path}: {source}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The environment variable is not set (or not Unicode).
    #[error("the environment variable {name} is not set")]
    Env {
        /// The variable.
        name: String,
        /// Why.
        #[source]
        source: std::env::VarError,
    },
}

/// Produces Ed25519 signatures (RFC 8032, pure, no context) for one principal.
pub trait Signer: Send + Sync {
    /// The principal whose key signs.
    fn principal(&self) -> Principal;

    /// Signs `message` (the canonical envelope bytes with a zeroed signature).
    fn sign<'a>(&'a self, message: &'a [u8]) -> SignFuture<'a>;
}

/// A signer holding an Ed25519 key in memory.
///
/// ```
/// use seed_agents_protocol::{Ed25519Signer, Signer};
/// let signer = Ed25519Signer::from_seed(&[7; 32]);
/// assert!(signer.principal().to_string().starts_with("z6Mk"));
/// ```
#[derive(Clone)]
pub struct Ed25519Signer {
    key: SigningKey,
    principal: Principal,
}

impl std::fmt::Debug for Ed25519Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("Ed25519Signer").field("principal", &self.principal).finish_non_exhaustive()
    }
}

impl Ed25519Signer {
    /// A signer from a 32-byte Ed25519 seed (the private key).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let key = SigningKey::from_bytes(seed);
        let principal = Principal::from_public_key(key.verifying_key().as_bytes());
        Ed25519Signer { key, principal }
    }

    /// A signer with a fresh random key from the operating system.
    pub fn generate() -> Result<Self, SignerError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|err| SignerError { message: format!("no randomness for a new key: {err}"), source: None })?;
        Ok(Self::from_seed(&seed))
    }

    /// A signer from its seed as 64 hex digits (surrounding whitespace ignored).
    ///
    /// ```
    /// use seed_agents_protocol::Ed25519Signer;
    /// let signer = Ed25519Signer::from_hex(&"07".repeat(32)).unwrap();
    /// assert_eq!(signer.seed(), [7; 32]);
    /// assert_eq!(signer.to_hex(), "07".repeat(32));
    /// assert!(Ed25519Signer::from_hex("07").is_err());
    /// ```
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut seed).map_err(KeyError::NotHex)?;
        Ok(Self::from_seed(&seed))
    }

    /// A signer from a key file: the seed as 64 hex digits (and a newline), as
    /// `seed-agents keygen` writes it.
    pub fn from_key_file(path: impl AsRef<std::path::Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::File { path: path.to_owned(), source })?;
        Self::from_hex(&text)
    }

    /// A signer from an environment variable holding the seed as 64 hex digits.
    pub fn from_env(name: &str) -> Result<Self, KeyError> {
        let text = std::env::var(name).map_err(|source| KeyError::Env { name: name.to_owned(), source })?;
        Self::from_hex(&text)
    }

    /// The seed as 64 hex digits (what a key file holds).
    pub fn to_hex(&self) -> String {
        hex::encode(self.seed())
    }

    /// The 32-byte seed, for storing the key.
    pub fn seed(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// Signs synchronously (the in-memory key never waits).
    pub fn sign_now(&self, message: &[u8]) -> Signature {
        self.key.sign(message).to_bytes()
    }
}

impl Signer for Ed25519Signer {
    fn principal(&self) -> Principal {
        self.principal
    }

    fn sign<'a>(&'a self, message: &'a [u8]) -> SignFuture<'a> {
        let signature = self.sign_now(message);
        Box::pin(std::future::ready(Ok(signature)))
    }
}
