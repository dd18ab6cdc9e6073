//! `run:<id>`: one run of the agent, as `RunInfo` with a one-line summary.

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
            if !runs::store::of_agent(conn, &id, &agent_id)? {
                return Ok(None);
            }
            Ok(runs::store::load_info(conn, &id)?)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No run {run_id}")))?;
    let title = if run.title.is_empty() { run.id.to_string() } else { run.title.clone() };
    let summary = format!("Run \"{title}\" is {}.", run.status);
    record(summary, &run)
}
