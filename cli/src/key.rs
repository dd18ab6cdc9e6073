//! The key file: an Ed25519 seed as 64 hex digits and a newline, readable by its owner only.
//!
//! `--key-file` (or `SEED_AGENTS_KEY_FILE`) names it; the default is `seed-agents/key` in the
//! platform's config directory (`$XDG_CONFIG_HOME` or `~/.config` on Linux,
//! `~/Library/Application Support` on macOS, `%APPDATA%` on Windows).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use seed_agents_sdk::Ed25519Signer;

use crate::failure::{Class, Failure};

/// The key file to use: the one named, or the default.
pub fn path(named: Option<&Path>) -> Result<PathBuf, Failure> {
    match named {
        Some(path) => Ok(path.to_owned()),
        None => default_path().ok_or_else(|| {
            Failure::new(
                Class::Key,
                "no config directory on this platform: pass --key-file or set SEED_AGENTS_KEY_FILE",
            )
        }),
    }
}

/// `seed-agents/key` in the platform's config directory.
pub fn default_path() -> Option<PathBuf> {
    dirs::config_dir().map(|dir| dir.join("seed-agents").join("key"))
}

/// Reads the signer from the key file at `path`.
pub fn load(path: &Path) -> Result<Ed25519Signer, Failure> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        let hint = if error.kind() == std::io::ErrorKind::NotFound { "; run `seed-agents keygen` first" } else { "" };
        Failure::new(Class::Key, format!("cannot read the key file {}: {error}{hint}", path.display()))
    })?;
    warn_if_shared(path);
    parse(&text).map_err(|reason| Failure::new(Class::Key, format!("the key file {} {reason}", path.display())))
}

/// The seed in a key file's text.
pub fn parse(text: &str) -> Result<Ed25519Signer, &'static str> {
    let mut seed = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut seed).map_err(|_| "must hold 64 hex digits (a 32-byte Ed25519 seed)")?;
    Ok(Ed25519Signer::from_seed(&seed))
}

/// Writes a new key to `path` (mode 0600, its directory created 0700 if missing); refuses to
/// replace an existing file unless `force`.
pub fn write(path: &Path, signer: &Ed25519Signer, force: bool) -> Result<(), Failure> {
    let fail = |what: &str, error: std::io::Error| Failure::local(format!("cannot {what} {}: {error}", path.display()));
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(|error| fail("create the directory of", error))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            Failure::local(format!(
                "{} already exists; pass --force to replace it (the old key is lost)",
                path.display()
            ))
        } else {
            fail("create", error)
        }
    })?;
    // An existing file keeps its mode when truncated: tighten it as well.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|error| fail("restrict", error))?;
    }
    let mut line = hex::encode(signer.seed());
    line.push('\n');
    file.write_all(line.as_bytes()).and_then(|()| file.sync_all()).map_err(|error| fail("write", error))
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Warns (once, on stderr) when others may read the key file.
fn warn_if_shared(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            eprintln!(
                "seed-agents: warning: {} is readable by others (mode {:o}); run `chmod 600` on it",
                path.display(),
                meta.permissions().mode() & 0o777
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;
    use seed_agents_sdk::Signer as _;

    #[test]
    fn a_written_key_reads_back_private_and_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("key");
        let signer = Ed25519Signer::from_seed(&[9; 32]);
        write(&path, &signer, false).unwrap();
        assert_eq!(load(&path).unwrap().principal(), signer.principal());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let other = Ed25519Signer::from_seed(&[3; 32]);
        let refused = write(&path, &other, false).unwrap_err();
        assert_eq!(refused.class, Class::Local);
        assert_eq!(load(&path).unwrap().principal(), signer.principal());
        write(&path, &other, true).unwrap();
        assert_eq!(load(&path).unwrap().principal(), other.principal());
    }

    #[test]
    fn malformed_and_missing_keys_are_key_failures() {
        assert!(parse("abc").is_err());
        assert!(parse(&"0".repeat(66)).is_err());
        assert!(parse(&format!("{}\n", "ab".repeat(32))).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let missing = load(&dir.path().join("none")).unwrap_err();
        assert_eq!(missing.class, Class::Key);
        assert!(missing.message.contains("keygen"), "{}", missing.message);
    }
}
