//! `run:<id>`: one run of the agent, as `RunInfo` with a one-line summary.

use rusqlite::params;
use seed_agents_protocol::Value;

use super::{Context, record};
use crate::error::{ApiError, ApiResult};
use crate::runs;

pub(super) async fn read(context: &Context<'_>, run_id: String) -> ApiResult<Value> {
    let agent_id = context.agent_id.clone();
    let id = run_id.clone();
    let run = context
        .app
        .db
        .read(move |conn| {
            // Only runs of the same agent: the caller's access covers exactly those (as with
            // `thread:`). A run that outlived its agent belongs to nobody.
            let same_agent: bool = conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND agent_id = ?2)")?
                .query_row(params![id, agent_id], |row| row.get(0))?;
            if !same_agent {
                return Ok(None);
            }
            Ok(runs::info::load(conn, &id)?)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No run {run_id}")))?;
    let title = if run.title.is_empty() { run.id.to_string() } else { run.title.clone() };
    let summary = format!("Run \"{title}\" is {}.", run.status);
    record(summary, &run)
}
