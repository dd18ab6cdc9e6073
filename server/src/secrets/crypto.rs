//! Encryption at rest for account secrets (ARCHITECTURE.md rule 8: secrets never leave).
//!
//! One server-wide [`SecretKey`] seals every secret value with XChaCha20-Poly1305 before it is
//! written to the database, and opens it again only when a run needs it. The key itself lives in
//! exactly one place: the `SEED_AGENTS_SECRET_KEY` environment value, or else the `secret.key`
//! file in the data directory, which is generated (mode 0600) on first start. It is never stored
//! in the database, so a copy of the database alone reveals no secret.
//!
//! Invariants:
//! - a sealed value is `version (1) ‖ nonce (24, random) ‖ ciphertext ‖ tag (16)`;
//! - the associated data binds a sealed value to its `(account_id, name)` row, so ciphertext moved
//!   to another account or another secret name fails to open;
//! - no error message and no `Debug` output contains key bytes or plaintext.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::{Zeroize, Zeroizing};

use crate::durable::{self, TempOptions};

/// The version byte that starts every sealed value this build writes.
const SEALED_VERSION: u8 = 1;
/// Length of the random XChaCha20 nonce.
const NONCE_LEN: usize = 24;
/// Length of the Poly1305 tag appended to the ciphertext.
const TAG_LEN: usize = 16;
/// Length of the key in bytes.
const KEY_LEN: usize = 32;
/// Domain separation for the associated data, so these ciphertexts mean nothing elsewhere.
const AAD_DOMAIN: &[u8] = b"seed-agents/secret";
/// The new key file's temp file: hidden, beside it, owner-only from the start.
pub(crate) const KEY_TEMP: TempOptions = TempOptions { prefix: ".secret.key.tmp-", suffix: "", owner_only: true };

/// A stored sealed value as key rotation and `doctor` see it: where it is stored (`at`), the
/// `(account, name)` its sealing is bound to, and the sealed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sealed<At> {
    /// Where it is stored (a `secrets` row id, a trigger id, …).
    pub(crate) at: At,
    /// The account the sealing is bound to (the first half of the associated data).
    pub(crate) account_id: String,
    /// The name it is bound to (the second half).
    pub(crate) name: String,
    /// The sealed bytes.
    pub(crate) sealed: Vec<u8>,
}

impl<At> Sealed<At> {
    /// The same value, its place said another way.
    pub(crate) fn at<To>(self, to: impl FnOnce(At) -> To) -> Sealed<To> {
        Sealed { at: to(self.at), account_id: self.account_id, name: self.name, sealed: self.sealed }
    }
}

/// The server's secret-encryption key (XChaCha20-Poly1305, 32 bytes).
///
/// The key bytes are held only inside the cipher, which zeroes them when dropped (the
/// `chacha20poly1305` crate zeroizes its key on drop). Intermediate copies made while loading are
/// zeroized (the `zeroize` crate) once the cipher is built or loading fails; that part is
/// best-effort, since the compiler and the OS may have left copies elsewhere (registers, moved
/// stack frames, swap).
pub struct SecretKey {
    cipher: XChaCha20Poly1305,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// Environment variable holding the key as 64 hex characters (takes precedence over the file).
    pub const ENV: &'static str = "SEED_AGENTS_SECRET_KEY";
    /// Name of the key file inside the data directory.
    pub const FILE_NAME: &'static str = "secret.key";

    /// Loads the key: from `env_value` when given (64 hex characters, exactly 32 bytes), else from
    /// `<data_dir>/secret.key`, creating that file with 32 random bytes and mode 0600 on first
    /// start.
    ///
    /// An existing key file that is readable or writable by group or others, is not a regular
    /// file, or is not exactly 32 bytes long is refused with an error naming the path and the
    /// fix; it is never silently replaced, because secrets sealed with it would be lost.
    pub fn load(data_dir: &Path, env_value: Option<&str>) -> Result<Self, SecretKeyError> {
        match env_value {
            Some(value) => Ok(Self::from_bytes(*parse_hex_key(value)?)),
            None => load_or_create_file(&data_dir.join(Self::FILE_NAME)),
        }
    }

    /// Reads the existing key file at `path` (the checks of [`SecretKey::load`]; never creates
    /// one).
    pub(crate) fn read_file(path: &Path) -> Result<Self, SecretKeyError> {
        read_key_file(File::open(path).map_err(io_error("open", path))?, path)
    }

    /// Generates a new random key and writes it to `path` durably with mode 0600, replacing any
    /// file there (key rotation writes the next key this way).
    pub(crate) fn create_file(path: &Path) -> Result<Self, SecretKeyError> {
        create_key_file(path)
    }

    /// Builds a key from raw bytes. The caller's array is a copy; it should drop it promptly.
    #[must_use]
    pub fn from_bytes(mut bytes: [u8; KEY_LEN]) -> Self {
        let cipher = XChaCha20Poly1305::new(&bytes.into());
        bytes.zeroize();
        Self { cipher }
    }

    /// Encrypts `plaintext` as the secret `name` of `account_id`.
    ///
    /// The result is `1 ‖ 24-byte random nonce ‖ ciphertext ‖ tag`; it only opens with the same
    /// key, account id and name.
    pub fn seal(&self, account_id: &str, name: &str, plaintext: &[u8]) -> Result<Vec<u8>, SecretCryptoError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(SecretCryptoError::Random)?;
        let aad = associated_data(SEALED_VERSION, account_id, name);
        let payload = Payload { msg: plaintext, aad: &aad };
        let ciphertext =
            self.cipher.encrypt(XNonce::from_slice(&nonce), payload).map_err(|_| SecretCryptoError::Encrypt)?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + ciphertext.len());
        sealed.push(SEALED_VERSION);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// Decrypts a value made by [`SecretKey::seal`] for the same `account_id` and `name`.
    ///
    /// Fails without detail when the key, account, name or any byte differs: an AEAD cannot
    /// tell those apart, and the caller should not try.
    pub fn open(&self, account_id: &str, name: &str, sealed: &[u8]) -> Result<Vec<u8>, SecretCryptoError> {
        let (&version, rest) = sealed.split_first().ok_or(SecretCryptoError::Truncated)?;
        if version != SEALED_VERSION {
            return Err(SecretCryptoError::UnsupportedVersion(version));
        }
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(SecretCryptoError::Truncated);
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let aad = associated_data(version, account_id, name);
        let payload = Payload { msg: ciphertext, aad: &aad };
        self.cipher.decrypt(XNonce::from_slice(nonce), payload).map_err(|_| SecretCryptoError::Decrypt)
    }
}

/// Why the secret key could not be loaded. Messages name paths and fixes, never key bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretKeyError {
    /// The environment value is not 64 hex characters.
    #[error(
        "{var} must be exactly 64 hex characters (32 bytes), e.g. from `openssl rand -hex 32`: {problem}",
        var = SecretKey::ENV
    )]
    InvalidEnv {
        /// What is wrong with the value (never the value itself).
        problem: &'static str,
    },
    /// The key file exists but group or others may access it.
    #[error(
        "secret key file {} is accessible by group or others (mode {mode:04o}); \
         restrict it with `chmod 600 {}` and restart",
        path.display(), path.display()
    )]
    InsecurePermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file exists but does not hold exactly 32 bytes.
    #[error(
        "secret key file {} is {len} bytes long, expected exactly 32; restore the original file from a backup \
         (delete it only if no secrets were ever stored with it: a new key cannot decrypt them)",
        path.display()
    )]
    WrongLength {
        /// The key file.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
    },
    /// Something other than a regular file is at the key path.
    #[error(
        "secret key path {} is not a regular file; move it away so a key file can be created there",
        path.display()
    )]
    NotAFile {
        /// The key path.
        path: PathBuf,
    },
    /// Reading, creating or renaming the key file failed.
    #[error("could not {action} secret key file {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "read".
        action: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The operating system could not supply random bytes for a new key. (Not a `#[source]`:
    /// `getrandom::Error` implements `std::error::Error` only with its `std` feature.)
    #[error("could not generate a secret key: the system random number generator failed: {0}")]
    Random(getrandom::Error),
}

/// Why a secret could not be sealed or opened. Messages never contain key or plaintext bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretCryptoError {
    /// The sealed value is shorter than version, nonce and tag.
    #[error("sealed secret is truncated")]
    Truncated,
    /// The sealed value starts with a version byte this build does not know.
    #[error("sealed secret has unsupported format version {0}")]
    UnsupportedVersion(u8),
    /// Authentication failed: wrong key, wrong account or name, or altered bytes.
    #[error("sealed secret could not be decrypted (wrong key, wrong owner or name, or corrupted data)")]
    Decrypt,
    /// Encryption failed (only possible for absurdly large plaintexts).
    #[error("secret could not be encrypted")]
    Encrypt,
    /// The operating system could not supply a random nonce.
    #[error("could not generate a nonce: the system random number generator failed: {0}")]
    Random(getrandom::Error),
}

/// Associated data: domain ‖ version ‖ len(account_id) ‖ account_id ‖ len(name) ‖ name, with
/// 8-byte big-endian lengths, so no two distinct (account, name) pairs encode the same.
fn associated_data(version: u8, account_id: &str, name: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_DOMAIN.len() + 1 + 16 + account_id.len() + name.len());
    aad.extend_from_slice(AAD_DOMAIN);
    aad.push(version);
    for part in [account_id.as_bytes(), name.as_bytes()] {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part);
    }
    aad
}

/// Parses 64 hex characters (either case, surrounding whitespace ignored) into a key.
fn parse_hex_key(value: &str) -> Result<Zeroizing<[u8; KEY_LEN]>, SecretKeyError> {
    let digits = value.trim();
    if digits.is_empty() {
        return Err(SecretKeyError::InvalidEnv { problem: "the value is empty" });
    }
    if digits.len() != KEY_LEN * 2 {
        return Err(SecretKeyError::InvalidEnv { problem: "the value has the wrong length" });
    }
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    // With the length checked, a bad character is the only way decoding can fail.
    hex::decode_to_slice(digits, &mut key[..])
        .map_err(|_| SecretKeyError::InvalidEnv { problem: "the value contains a non-hex character" })?;
    Ok(key)
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SecretKeyError {
    let path = path.to_path_buf();
    move |source| SecretKeyError::Io { action, path, source }
}

/// Reads the key file at `path`, or creates it when it does not exist.
fn load_or_create_file(path: &Path) -> Result<SecretKey, SecretKeyError> {
    match File::open(path) {
        Ok(file) => read_key_file(file, path),
        Err(err) if err.kind() == io::ErrorKind::NotFound => create_key_file(path),
        Err(err) => Err(io_error("open", path)(err)),
    }
}

/// Checks the open key file's type, permissions and length, then reads the key.
fn read_key_file(mut file: File, path: &Path) -> Result<SecretKey, SecretKeyError> {
    let metadata = file.metadata().map_err(io_error("inspect", path))?;
    if !metadata.is_file() {
        return Err(SecretKeyError::NotAFile { path: path.to_path_buf() });
    }
    check_permissions(&metadata, path)?;
    if metadata.len() != KEY_LEN as u64 {
        return Err(SecretKeyError::WrongLength { path: path.to_path_buf(), len: metadata.len() });
    }
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    file.read_exact(&mut bytes[..]).map_err(io_error("read", path))?;
    // A file that grew between the length check and the read is not a key we can trust.
    let mut extra = [0u8; 1];
    if file.read(&mut extra).map_err(io_error("read", path))? != 0 {
        let len = file.metadata().map_or(KEY_LEN as u64 + 1, |m| m.len());
        return Err(SecretKeyError::WrongLength { path: path.to_path_buf(), len });
    }
    Ok(SecretKey::from_bytes(*bytes))
}

#[cfg(unix)]
fn check_permissions(metadata: &fs::Metadata, path: &Path) -> Result<(), SecretKeyError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretKeyError::InsecurePermissions { path: path.to_path_buf(), mode });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_permissions(_metadata: &fs::Metadata, _path: &Path) -> Result<(), SecretKeyError> {
    Ok(())
}

/// Generates a new key and publishes it at `path` with [`durable::write`]: a 0600 temp file beside
/// it, fsynced, renamed into place and the directory fsynced, so the key file is never seen
/// half-written.
fn create_key_file(path: &Path) -> Result<SecretKey, SecretKeyError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir).map_err(io_error("create the directory for", path))?;
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    getrandom::fill(&mut bytes[..]).map_err(SecretKeyError::Random)?;
    durable::write(path, &bytes[..], &KEY_TEMP).map_err(io_error("create", path))?;
    tracing::info!(
        path = %path.display(),
        "generated a new secret key file; back it up: stored secrets cannot be decrypted without it"
    );
    Ok(SecretKey::from_bytes(*bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCOUNT: &str = "acct-1";
    const NAME: &str = "OPENAI_API_KEY";
    const PLAINTEXT: &[u8] = b"sk-very-secret-value";

    fn key() -> SecretKey {
        SecretKey::from_bytes([7u8; 32])
    }

    #[test]
    fn round_trip() {
        let key = key();
        let sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        assert_eq!(sealed.len(), 1 + NONCE_LEN + PLAINTEXT.len() + TAG_LEN);
        assert_eq!(sealed[0], SEALED_VERSION);
        assert!(!sealed.windows(PLAINTEXT.len()).any(|w| w == PLAINTEXT));
        assert_eq!(key.open(ACCOUNT, NAME, &sealed).unwrap(), PLAINTEXT);
    }

    #[test]
    fn round_trip_empty_plaintext() {
        let key = key();
        let sealed = key.seal(ACCOUNT, NAME, b"").unwrap();
        assert_eq!(key.open(ACCOUNT, NAME, &sealed).unwrap(), b"");
    }

    #[test]
    fn nonces_differ_between_seals() {
        let key = key();
        let a = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        let b = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn wrong_account_or_name_fails() {
        let key = key();
        let sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        assert!(matches!(key.open("acct-2", NAME, &sealed), Err(SecretCryptoError::Decrypt)));
        assert!(matches!(key.open(ACCOUNT, "OTHER", &sealed), Err(SecretCryptoError::Decrypt)));
        // The length prefixes keep the boundary between account and name unambiguous.
        let sealed = key.seal("ab", "c", PLAINTEXT).unwrap();
        assert!(matches!(key.open("a", "bc", &sealed), Err(SecretCryptoError::Decrypt)));
    }

    #[test]
    fn wrong_key_fails() {
        let sealed = key().seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        let other = SecretKey::from_bytes([8u8; 32]);
        assert!(matches!(other.open(ACCOUNT, NAME, &sealed), Err(SecretCryptoError::Decrypt)));
    }

    #[test]
    fn tampered_byte_fails() {
        let key = key();
        let sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        for i in 1..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[i] ^= 0x01;
            assert!(matches!(key.open(ACCOUNT, NAME, &tampered), Err(SecretCryptoError::Decrypt)), "byte {i}");
        }
    }

    #[test]
    fn wrong_version_byte_fails() {
        let key = key();
        let mut sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        sealed[0] = 2;
        assert!(matches!(key.open(ACCOUNT, NAME, &sealed), Err(SecretCryptoError::UnsupportedVersion(2))));
        sealed[0] = 0;
        assert!(matches!(key.open(ACCOUNT, NAME, &sealed), Err(SecretCryptoError::UnsupportedVersion(0))));
    }

    #[test]
    fn truncated_fails() {
        let key = key();
        let sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        assert!(matches!(key.open(ACCOUNT, NAME, &[]), Err(SecretCryptoError::Truncated)));
        assert!(matches!(
            key.open(ACCOUNT, NAME, &sealed[..1 + NONCE_LEN + TAG_LEN - 1]),
            Err(SecretCryptoError::Truncated)
        ));
        assert!(matches!(key.open(ACCOUNT, NAME, &sealed[..sealed.len() - 1]), Err(SecretCryptoError::Decrypt)));
    }

    #[cfg(unix)]
    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[cfg(unix)]
    #[test]
    fn key_file_created_0600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data"); // does not exist yet
        let first = SecretKey::load(&data_dir, None).unwrap();
        let path = data_dir.join(SecretKey::FILE_NAME);
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(fs::metadata(&path).unwrap().len(), 32);
        // Only the key file is left behind, no temporary file.
        assert_eq!(fs::read_dir(&data_dir).unwrap().count(), 1);

        let sealed = first.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        let second = SecretKey::load(&data_dir, None).unwrap();
        assert_eq!(second.open(ACCOUNT, NAME, &sealed).unwrap(), PLAINTEXT);

        let stored: [u8; 32] = fs::read(&path).unwrap().try_into().unwrap();
        let from_file = SecretKey::from_bytes(stored);
        assert_eq!(from_file.open(ACCOUNT, NAME, &sealed).unwrap(), PLAINTEXT);
    }

    #[cfg(unix)]
    #[test]
    fn group_readable_key_file_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SecretKey::FILE_NAME);
        fs::write(&path, [1u8; 32]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let err = SecretKey::load(dir.path(), None).unwrap_err();
        assert!(matches!(err, SecretKeyError::InsecurePermissions { mode: 0o640, .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("chmod 600"), "{message}");
        // The file is left untouched.
        assert_eq!(fs::read(&path).unwrap(), [1u8; 32]);
        assert_eq!(mode_of(&path), 0o640);

        fs::set_permissions(&path, fs::Permissions::from_mode(0o604)).unwrap();
        assert!(matches!(SecretKey::load(dir.path(), None), Err(SecretKeyError::InsecurePermissions { .. })));
    }

    #[cfg(unix)]
    #[test]
    fn wrong_length_key_file_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SecretKey::FILE_NAME);
        for len in [0usize, 31, 33, 64] {
            fs::write(&path, vec![1u8; len]).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            let err = SecretKey::load(dir.path(), None).unwrap_err();
            assert!(matches!(err, SecretKeyError::WrongLength { len: l, .. } if l == len as u64), "{err:?}");
            assert!(err.to_string().contains(&path.display().to_string()));
            assert_eq!(fs::read(&path).unwrap().len(), len, "file must not be replaced");
        }
    }

    #[test]
    fn directory_at_key_path_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(SecretKey::FILE_NAME)).unwrap();
        assert!(matches!(SecretKey::load(dir.path(), None), Err(SecretKeyError::NotAFile { .. })));
    }

    #[test]
    fn env_key_used_and_no_file_written() {
        let dir = tempfile::tempdir().unwrap();
        let hex = "000102030405060708090a0b0c0d0e0f101112131415161718191A1B1C1D1E1F";
        let key = SecretKey::load(dir.path(), Some(hex)).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);

        let expected: [u8; 32] = std::array::from_fn(|i| i as u8);
        let sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        assert_eq!(SecretKey::from_bytes(expected).open(ACCOUNT, NAME, &sealed).unwrap(), PLAINTEXT);

        // Surrounding whitespace (e.g. a trailing newline from a secrets file) is tolerated.
        let padded = SecretKey::load(dir.path(), Some(&format!("  {hex}\n"))).unwrap();
        assert_eq!(padded.open(ACCOUNT, NAME, &sealed).unwrap(), PLAINTEXT);
    }

    #[test]
    fn env_key_takes_precedence_over_file() {
        let dir = tempfile::tempdir().unwrap();
        let from_file = SecretKey::load(dir.path(), None).unwrap();
        let sealed = from_file.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        let from_env = SecretKey::load(dir.path(), Some(&"ab".repeat(32))).unwrap();
        assert!(from_env.open(ACCOUNT, NAME, &sealed).is_err());
    }

    #[test]
    fn bad_env_value_errors() {
        let dir = tempfile::tempdir().unwrap();
        let secretish = "zz".repeat(32);
        let too_long = "ab".repeat(33);
        for bad in ["", "   ", "abcd", &"a".repeat(63), &too_long, &secretish, &format!("{}+/", "a".repeat(62))] {
            let err = SecretKey::load(dir.path(), Some(bad)).unwrap_err();
            assert!(matches!(err, SecretKeyError::InvalidEnv { .. }), "{err:?}");
            let message = err.to_string();
            assert!(message.contains(SecretKey::ENV), "{message}");
            if !bad.trim().is_empty() {
                assert!(!message.contains(bad.trim()), "error echoes the value: {message}");
            }
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn bad_env_values_name_their_problem() {
        let problem = |value: &str| match parse_hex_key(value) {
            Err(SecretKeyError::InvalidEnv { problem }) => problem,
            other => panic!("{value:?} gave {other:?}"),
        };
        assert_eq!(problem(" \n"), "the value is empty");
        assert_eq!(problem(&"a".repeat(63)), "the value has the wrong length");
        assert_eq!(problem(&"a".repeat(65)), "the value has the wrong length");
        assert_eq!(problem(&"zz".repeat(32)), "the value contains a non-hex character");
        // 64 bytes, but one of the characters takes two of them.
        assert_eq!(problem(&format!("{}\u{e9}", "a".repeat(62))), "the value contains a non-hex character");
        assert_eq!(*parse_hex_key(&"aB".repeat(32)).unwrap(), [0xAB; 32]);
    }

    #[test]
    fn debug_does_not_leak() {
        let key = SecretKey::from_bytes([0xAB; 32]);
        let debug = format!("{key:?} {key:#?}");
        assert_eq!(format!("{key:?}"), "SecretKey(..)");
        assert!(!debug.contains("171") && !debug.to_lowercase().contains("ab"), "{debug}");
    }

    #[test]
    fn crypto_errors_do_not_leak_plaintext() {
        let key = key();
        let sealed = key.seal(ACCOUNT, NAME, PLAINTEXT).unwrap();
        let err = key.open("acct-2", NAME, &sealed).unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(!text.contains("sk-very-secret-value"), "{text}");
    }
}
