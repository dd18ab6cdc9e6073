//! The background sweep: expired uploads (idle longer than the TTL) lose their row and staging
//! file; staging files without a row and attachment directories of deleted sessions (both left
//! by a crash at the wrong moment) are removed too.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{TTL_MS, staging, store};
use crate::app::App;
use crate::attachments::{self, blocking};
use crate::error::ApiResult;

/// How often the sweep runs (it also runs once at start).
pub(super) const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Starts the sweep; it stops when the app is dropped or the handle aborted.
pub(crate) fn spawn_sweeper(app: &Arc<App>) -> JoinHandle<()> {
    let app: Weak<App> = Arc::downgrade(app);
    tokio::spawn(async move {
        loop {
            {
                let Some(app) = app.upgrade() else { return };
                if let Err(error) = sweep(&app).await {
                    tracing::warn!(%error, "upload sweep failed");
                }
            }
            tokio::time::sleep(SWEEP_INTERVAL).await;
        }
    })
}

/// One sweep; answers how many expired uploads it removed.
pub(crate) async fn sweep(app: &App) -> ApiResult<usize> {
    let cutoff = app.clock.now_ms() - TTL_MS;
    let (expired, known) = app
        .db
        .read(move |conn| {
            let rows = store::all(conn, cutoff)?;
            let expired = rows.iter().filter(|(_, expired)| *expired).map(|(id, _)| id.clone()).collect::<Vec<_>>();
            let known = rows.into_iter().map(|(id, _)| id).collect::<HashSet<_>>();
            Ok((expired, known))
        })
        .await?;
    let mut removed = 0;
    for id in expired {
        let part = staging::part_path(&app.config, &id);
        let held = part.clone();
        // Skip an upload someone holds right now: it is being used, so it will not stay expired.
        let Some(lock) =
            blocking(move || staging::try_open_locked(&held).map_err(crate::error::ApiError::internal)).await?
        else {
            if !part.exists() {
                removed += delete_expired(app, &id, cutoff).await?;
            }
            continue;
        };
        removed += delete_expired(app, &id, cutoff).await?;
        blocking(move || {
            staging::remove(&part);
            drop(lock);
            Ok(())
        })
        .await?;
    }
    remove_orphans(app, known).await?;
    Ok(removed)
}

async fn delete_expired(app: &App, id: &str, cutoff: i64) -> ApiResult<usize> {
    let id = id.to_owned();
    app.db.write(move |conn| store::delete_expired(conn, &id, cutoff)).await
}

/// Staging files older than the TTL without a row, and attachment directories whose session
/// is gone.
async fn remove_orphans(app: &App, known: HashSet<String>) -> ApiResult<()> {
    // A directory touched after this instant may belong to a session created after the read.
    let started = std::time::SystemTime::now();
    let sessions: HashSet<String> = app.db.read(crate::sessions::store::all_ids).await?;
    let staging_dir = staging::dir(&app.config);
    let attachments_dir = attachments::root(&app.config);
    blocking(move || {
        let old = std::time::SystemTime::now() - Duration::from_millis(TTL_MS as u64);
        for entry in std::fs::read_dir(&staging_dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".part") else { continue };
            let stale = entry.metadata().and_then(|meta| meta.modified()).is_ok_and(|modified| modified < old);
            if !known.contains(id) && stale {
                staging::remove(&entry.path());
            }
        }
        let mut gone = Vec::new();
        for entry in std::fs::read_dir(&attachments_dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let settled = entry.metadata().and_then(|meta| meta.modified()).is_ok_and(|modified| modified < started);
            if !sessions.contains(&name) && settled {
                gone.push(entry.path());
            }
        }
        for dir in gone {
            if let Err(error) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(%error, dir = %dir.display(), "could not remove a deleted session's attachments");
            }
        }
        Ok(())
    })
    .await
}
