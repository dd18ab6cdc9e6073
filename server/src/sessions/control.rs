//! Turn control: `StopSession` and `RetrySession` (chatters may use both, as the seed says).
//!
//! Both go through the run engine: Stop cancels the session's live runs with their descendants
//! and asks the executing turn to stop; Retry enqueues a fresh interactive run that replays the
//! failed turn from the durable log (no new user message) and runs it inline.

use std::collections::BTreeMap;
use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    RetrySession, RetrySessionResponse, RunStatus, StopSession, StopSessionResponse,
};

use crate::access::{self, Need};
use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::runs::{self, Changes, InlineOutcome, NewRun, Outcome, Queue};

/// RetrySession while a turn holds the session (upstream's words, matched by clients).
pub(crate) const ALREADY_STREAMING: &str = "Session is already streaming";
/// RetrySession when the latest run did not fail.
pub(crate) const NOTHING_TO_RETRY: &str = "Nothing to retry: the latest run did not fail";

/// `StopSession {sessionId}` (chatter): `stopped` is false when nothing was live.
pub(crate) async fn stop_session(app: &App, caller: &Caller, action: StopSession) -> ApiResult<StopSessionResponse> {
    let (account, session_id) = (caller.account_id.clone(), action.session_id.clone());
    app.db.read(move |conn| access::require_session(conn, &session_id, &account, Need::Chat)).await?;
    let stopped = app.runs.stop_session(&action.session_id).await?;
    Ok(StopSessionResponse { extra: Default::default(), session_id: action.session_id, stopped })
}

/// `RetrySession {sessionId}` (chatter): 409 [`ALREADY_STREAMING`] while a turn holds the session,
/// 400 [`NOTHING_TO_RETRY`] unless its latest run failed; otherwise an interactive run
/// `{kind: 'session-retry', retryOfRunId}` (one execution, the failed run's title) executes
/// inline. The answer maps its outcome as MessageSession does: the output's `assistantEventId`
/// (or '') when it succeeded or was stopped, the run's failure under its HTTP status, '' when it
/// parked or went back to the queue. Losing the claim to another turn cancels the retry: 409.
pub(crate) async fn retry_session(
    app: &Arc<App>,
    caller: &Caller,
    action: RetrySession,
) -> ApiResult<RetrySessionResponse> {
    let (account, now) = (caller.account_id.clone(), app.clock.now_ms());
    let session_id = action.session_id.clone();
    let (run_id, changes) = app
        .db
        .write(move |conn| {
            let access = access::require_session(conn, &session_id, &account, Need::Chat)?;
            if runs::session_has_active_turn(conn, &session_id)? {
                return Err(ApiError::conflict(ALREADY_STREAMING));
            }
            let latest = runs::store::latest(conn, &session_id)?;
            let Some(runs::store::Latest { id: failed_run, title, .. }) =
                latest.filter(|latest| latest.status == RunStatus::Failed)
            else {
                return Err(ApiError::invalid(NOTHING_TO_RETRY));
            };
            let input = Ipld::Map(BTreeMap::from([
                ("kind".to_owned(), Ipld::String("session-retry".into())),
                ("retryOfRunId".to_owned(), Ipld::String(failed_run)),
            ]));
            let run = NewRun {
                account_id: access.owner_id,
                agent_id: access.agent_id,
                session_id: session_id.to_string(),
                origin: "user",
                title,
                input,
                queue: Queue::Interactive,
                max_attempts: 1,
                parent_run_id: None,
            };
            let mut changes = Changes::default();
            let run_id = runs::enqueue(conn, &run, now, &mut changes)?;
            Ok((run_id, changes))
        })
        .await?;
    app.runs.publish(changes);
    let assistant_event_id = match app.runs.run_inline(&run_id).await? {
        InlineOutcome::NotClaimed => {
            app.runs.cancel_tree(&run_id).await?;
            return Err(ApiError::conflict(ALREADY_STREAMING));
        }
        InlineOutcome::Finished(Outcome::Succeeded(output) | Outcome::Canceled(output)) => assistant_event_id(&output),
        InlineOutcome::Finished(Outcome::Failed(failure)) => return Err(failure.to_api_error()),
        InlineOutcome::Finished(Outcome::Parked(_)) | InlineOutcome::Requeued => String::new(),
    };
    Ok(RetrySessionResponse {
        extra: Default::default(),
        assistant_event_id: assistant_event_id.into(),
        session_id: action.session_id,
    })
}

/// `output.assistantEventId` when the output is a map holding a string there, else ''.
pub(crate) fn assistant_event_id(output: &Ipld) -> String {
    match output {
        Ipld::Map(fields) => match fields.get("assistantEventId") {
            Some(Ipld::String(id)) => id.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}
