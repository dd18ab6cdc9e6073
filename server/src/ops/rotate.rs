//! `rotate-secret-key` (server/README.md "Rotating the secret key"): every sealed value re-sealed
//! under a new key in one transaction, safe to interrupt at any point.
//!
//! The steps, with the server stopped (the data directory's lock is held throughout):
//!
//! 1. finish or undo an earlier rotation that was interrupted ([`finish_interrupted`]);
//! 2. check every sealed value opens with the current key (else refuse: nothing is changed);
//! 3. write the new key to `secret.key.next` durably (0600);
//! 4. in one write transaction, open every sealed value with the current key and seal it with
//!    the new one (the `secrets` table and the triggers' webhook secrets), then commit;
//! 5. rename `secret.key.next` over `secret.key` and fsync the directory.
//!
//! The commit in step 4 is the moment the rotation happens. Until then `secret.key` opens every
//! value; after it `secret.key.next` does, until step 5 makes it `secret.key`. When
//! `secret.key.next` exists, [`finish_interrupted`] (run by the server at start, under the lock,
//! before it loads the key, and by this command) decides by trying the keys: when the next key
//! opens every stored value the commit happened, and it finishes step 5; when the current key
//! does, it removes `secret.key.next`. So a SIGKILL at any point leaves every secret readable.
//!
//! A key from `SEED_AGENTS_SECRET_KEY` is refused: the environment cannot be switched atomically
//! with the database, so the rotation could not be made crash-safe.
//!
//! Test builds only (`debug_assertions`): `SEED_AGENTS_TEST_PAUSE_AT=<point>` makes the command
//! print `paused at <point>` to stderr and wait forever at `next-written` (after step 3),
//! `resealed` (in step 4, before the commit) or `committed` (after it), so a test can SIGKILL it
//! there (`server/tests/ops.rs`). Release builds ignore it.

use std::path::{Path, PathBuf};

use crate::db::Connection;
use zeroize::Zeroizing;

use crate::app::DataDirLock;
use crate::config::Config;
use crate::db::maintenance;
use crate::durable;
use crate::error::{ApiError, ApiResult};
use crate::secrets::crypto::{Sealed, SecretKey};

/// The next key's file while a rotation is under way.
pub(crate) const NEXT_KEY_FILE: &str = "secret.key.next";

/// Where a sealed value is stored.
#[derive(Debug, Clone)]
enum Slot {
    /// A `secrets` row, by id.
    Secret(String),
    /// A trigger's webhook secret, by trigger id.
    Webhook(String),
}

/// One sealed value, by its slot.
type SealedValue = Sealed<Slot>;

/// Every sealed value the database holds: the secrets (API keys, signing identities, MCP
/// headers, subscription tokens) and the triggers' webhook secrets.
fn sealed_values(conn: &Connection) -> ApiResult<Vec<SealedValue>> {
    let secrets = crate::secrets::store::all_sealed(conn)?.into_iter().map(|row| row.at(Slot::Secret));
    let webhooks = crate::triggers::webhook::all_sealed(conn)?.into_iter().map(|row| row.at(Slot::Webhook));
    Ok(secrets.chain(webhooks).collect())
}

fn write_back(conn: &Connection, slot: &Slot, sealed: &[u8]) -> ApiResult<()> {
    match slot {
        Slot::Secret(id) => crate::secrets::store::set_sealed(conn, id, sealed),
        Slot::Webhook(trigger_id) => crate::triggers::store::set_webhook_secret(conn, trigger_id, Some(sealed)),
    }
}

fn opens(key: &SecretKey, value: &SealedValue) -> bool {
    key.open(&value.account_id, &value.name, &value.sealed).map(Zeroizing::new).is_ok()
}

/// How many sealed values the database holds, and how many of them do not open with `key`.
pub(crate) fn unopened(conn: &Connection, key: &SecretKey) -> ApiResult<(usize, usize)> {
    let values = sealed_values(conn)?;
    Ok((values.len(), values.iter().filter(|value| !opens(key, value)).count()))
}

/// What [`finish_interrupted`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupted {
    /// No rotation was under way.
    None,
    /// The rotation had committed: the next key became `secret.key`.
    Finished,
    /// It had not: `secret.key.next` was removed.
    Undone,
}

/// The database of `config`, migrated: the SQLite file, or PostgreSQL when `--database-url` is
/// set. Rotation runs before the server starts or as a command, outside the async runtime.
fn open(config: &Config) -> Result<Connection, String> {
    match &config.database_url {
        Some(url) => maintenance::open_writable_postgres(url),
        None => maintenance::open_writable(&config.database_path()),
    }
    .map_err(|error| error.to_string())
}

/// Finishes or undoes a rotation interrupted in the data directory of `config` (see the module
/// docs). The caller holds the data directory's lock. Nothing to do when the key comes from the
/// environment or `secret.key.next` does not exist.
pub(crate) fn finish_interrupted(config: &Config) -> Result<Interrupted, String> {
    let next_path = config.data_dir.join(NEXT_KEY_FILE);
    if std::env::var_os(SecretKey::ENV).is_some() || !next_path.exists() {
        return Ok(Interrupted::None);
    }
    let key_path = config.data_dir.join(SecretKey::FILE_NAME);
    let conn = open(config)?;
    let values = sealed_values(&conn).map_err(|error| error.to_string())?;
    drop(conn);
    let next = SecretKey::read_file(&next_path).map_err(|error| error.to_string());
    if let Ok(next) = &next
        && values.iter().all(|value| opens(next, value))
    {
        std::fs::rename(&next_path, &key_path).map_err(|error| format!("cannot rename {NEXT_KEY_FILE}: {error}"))?;
        durable::sync_dir(&config.data_dir).map_err(|error| error.to_string())?;
        tracing::warn!("finished an interrupted secret key rotation: the new key is in secret.key");
        return Ok(Interrupted::Finished);
    }
    let current = SecretKey::read_file(&key_path).map_err(|error| error.to_string())?;
    if values.iter().all(|value| opens(&current, value)) {
        std::fs::remove_file(&next_path).map_err(|error| format!("cannot remove {NEXT_KEY_FILE}: {error}"))?;
        durable::sync_dir(&config.data_dir).map_err(|error| error.to_string())?;
        tracing::warn!("undid an interrupted secret key rotation: it had not committed; secret.key is unchanged");
        return Ok(Interrupted::Undone);
    }
    Err(format!(
        "some stored secrets open with neither secret.key nor {NEXT_KEY_FILE}; both files are left as they are. \
         Restore the data directory from a backup ({})",
        next.err().unwrap_or_else(|| "the next key reads fine".to_owned())
    ))
}

/// What a rotation did.
#[derive(Debug)]
pub(crate) struct Rotated {
    /// What an interrupted earlier rotation needed first.
    pub(crate) earlier: Interrupted,
    /// Sealed values re-sealed.
    pub(crate) resealed: usize,
}

/// Rotates the secret key of the data directory of `config` (see the module docs).
pub(crate) fn rotate(config: &Config) -> Result<Rotated, String> {
    if std::env::var_os(SecretKey::ENV).is_some() {
        return Err(format!(
            "the key comes from {}: rotating it cannot be made crash-safe (the environment cannot change \
             together with the database). Move it into {}/{} (mode 0600), unset the variable, and run \
             rotate-secret-key again",
            SecretKey::ENV,
            config.data_dir.display(),
            SecretKey::FILE_NAME
        ));
    }
    let dir = &config.data_dir;
    let key_path = dir.join(SecretKey::FILE_NAME);
    if !key_path.is_file() || (config.database_url.is_none() && !config.database_path().is_file()) {
        return Err(format!("{} holds no secret.key and database to rotate; is --data-dir right?", dir.display()));
    }
    let _lock = DataDirLock::try_take(dir)
        .map_err(|error| format!("cannot lock {}: {error}", dir.display()))?
        .ok_or_else(|| {
            "a server is running on this data directory; stop it first (it holds the old key in memory, and \
             secrets it wrote after the rotation would be sealed with it)"
                .to_owned()
        })?;
    let earlier = finish_interrupted(config)?;
    let current = SecretKey::read_file(&key_path).map_err(|error| error.to_string())?;
    let mut conn = open(config)?;
    let (total, unopened) = unopened(&conn, &current).map_err(|error| error.to_string())?;
    if unopened > 0 {
        return Err(format!(
            "{unopened} of {total} stored secrets do not open with secret.key; nothing was changed \
             (run `seed-agents-server doctor`)"
        ));
    }
    let next_path: PathBuf = dir.join(NEXT_KEY_FILE);
    let next = SecretKey::create_file(&next_path).map_err(|error| error.to_string())?;
    pause_at("next-written");
    let resealed = maintenance::in_transaction(&mut conn, |conn| reseal(conn, &current, &next))
        .map_err(|error| format!("re-sealing failed, nothing was changed: {error}"))?;
    drop(conn);
    pause_at("committed");
    std::fs::rename(&next_path, &key_path).map_err(|error| format!("cannot rename {NEXT_KEY_FILE}: {error}"))?;
    durable::sync_dir(dir).map_err(|error| error.to_string())?;
    Ok(Rotated { earlier, resealed })
}

/// Step 4's work inside its transaction: every value opened with `current`, sealed with `next`.
fn reseal(conn: &Connection, current: &SecretKey, next: &SecretKey) -> ApiResult<usize> {
    let values = sealed_values(conn)?;
    for value in &values {
        let plaintext =
            Zeroizing::new(current.open(&value.account_id, &value.name, &value.sealed).map_err(ApiError::internal)?);
        let sealed = next.seal(&value.account_id, &value.name, &plaintext).map_err(ApiError::internal)?;
        write_back(conn, &value.at, &sealed)?;
    }
    pause_at("resealed");
    Ok(values.len())
}

/// The test builds' pause points (see the module docs).
fn pause_at(point: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("SEED_AGENTS_TEST_PAUSE_AT").is_ok_and(|wanted| wanted == point) {
        eprintln!("paused at {point}");
        loop {
            std::thread::park();
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}

/// Whether a rotation left `secret.key.next` in `dir` (`doctor` reports it).
pub(crate) fn interrupted_in(dir: &Path) -> bool {
    dir.join(NEXT_KEY_FILE).exists()
}
