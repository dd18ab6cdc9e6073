//! The run actions: `GetRun`, `ListRuns`, `CancelRun`, `SignalRun`, `GetRunJournal`.
//!
//! A run is visible through its agent: a caller who may read the agent may read its runs, a
//! writer may cancel and signal them; a run whose agent is gone (or invisible) is `404 Run not
//! found`. `RunInfo.childRunCount` is present when the run has children.

use seed_agents_protocol::generated::{
    CancelRun, CancelRunResponse, GetRun, GetRunJournal, GetRunJournalResponse, GetRunResponse, ListRuns,
    ListRunsResponse, SignalRun, SignalRunResponse,
};

use super::queue::Changes;
use super::signal::{Signal, Source};
use super::store;
use crate::access::{self, Need};
use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::validate::{MAX_NAME_BYTES, bounded_string};

/// Runs per `ListRuns` page when the client does not say.
pub(crate) const DEFAULT_PAGE: i64 = 50;
/// The most runs per `ListRuns` page.
pub(crate) const MAX_PAGE: i64 = 200;

/// `ListRuns` without a selector (upstream's words).
const NO_SELECTOR: &str = "ListRuns requires rootRunId, sessionId, or agentId";

/// The refusal of a `ListRuns` naming more than one selector.
const MANY_SELECTORS: &str = "ListRuns takes exactly one of rootRunId, sessionId, or agentId";

/// `GetRun {runId}` (reader of the run's agent).
pub(crate) async fn get_run(app: &App, caller: &Caller, action: GetRun) -> ApiResult<GetRunResponse> {
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            access::require_run(conn, &action.run_id, &account, Need::Read)?;
            let run = store::load_info(conn, &action.run_id)?.ok_or_else(|| ApiError::not_found("Run not found"))?;
            Ok(GetRunResponse { extra: Default::default(), run })
        })
        .await
}

/// `ListRuns {rootRunId? | sessionId? | agentId?, status?, limit?}` (reader).
///
/// The first selector present of rootRunId, sessionId, agentId chooses the runs: a whole tree
/// oldest first (not limited by the query), a session's root runs newest first, or an agent's
/// runs newest first. `status` filters what was fetched and the page is cut to `limit` (default
/// 50, clamped to 1..=200; a non-integer number is floored and anything else means the default,
/// see `seed_agents_server_core::action`), as upstream does.
///
/// Access is checked as upstream checks it, on the first selector present of agentId, sessionId,
/// rootRunId (its 404 or 403). When that is not the selector that chooses the runs, the chosen
/// one must be visible too, else the list is empty: upstream answers that way for another
/// owner's runs, and would list another agent of the same owner, which we do not.
pub(crate) async fn list_runs(app: &App, caller: &Caller, action: ListRuns) -> ApiResult<ListRunsResponse> {
    let limit = action.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let account = caller.account_id.clone();
    app.db
        .read(move |conn| {
            // Exactly one selector (the seed's rule; upstream took the first by precedence).
            let selector = match (&action.root_run_id, &action.session_id, &action.agent_id) {
                (Some(root), None, None) => Selector::Root(root),
                (None, Some(session), None) => Selector::Session(session),
                (None, None, Some(agent)) => Selector::Agent(agent),
                (None, None, None) => return Err(ApiError::invalid(NO_SELECTOR)),
                _ => return Err(ApiError::invalid(MANY_SELECTORS)),
            };
            selector.require(conn, &account)?;
            // The status filter is part of the query, so a page is full whenever enough runs match.
            let status = action.status;
            let runs = match selector {
                Selector::Root(root) => store::tree_in(conn, root, status, limit)?,
                Selector::Session(session) => store::session_roots(conn, session, status, limit)?,
                Selector::Agent(agent) => store::agent_runs(conn, agent, status, limit)?,
            };
            Ok(ListRunsResponse { extra: Default::default(), runs })
        })
        .await
}

/// One of `ListRuns`'s selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selector<'a> {
    Root(&'a str),
    Session(&'a str),
    Agent(&'a str),
}

impl Selector<'_> {
    /// Reader access to what the selector names, with the protocol's 404/403.
    fn require(self, conn: &crate::db::Connection, account: &str) -> ApiResult<access::Access> {
        match self {
            Selector::Root(root) => access::require_run(conn, root, account, Need::Read),
            Selector::Session(session) => access::require_session(conn, session, account, Need::Read),
            Selector::Agent(agent) => access::require(conn, agent, account, Need::Read),
        }
    }
}

/// `CancelRun {runId}` (writer): cancels the run's tree; `canceled` says whether anything was
/// canceled or asked to stop.
pub(crate) async fn cancel_run(app: &App, caller: &Caller, action: CancelRun) -> ApiResult<CancelRunResponse> {
    let (account, now, ending) = (caller.account_id.clone(), app.clock.now_ms(), app.runs.ending());
    let run_id = action.run_id.clone();
    let (canceled, changes) = app
        .db
        .write(move |conn| {
            access::require_run(conn, &run_id, &account, Need::Write)?;
            let mut changes = Changes::default();
            let canceled = super::cancel::cancel_tree(conn, &run_id, now, &ending, &mut changes)?;
            Ok((canceled, changes))
        })
        .await?;
    let canceled = app.runs.after_cancel(canceled, changes, None);
    Ok(CancelRunResponse { extra: Default::default(), canceled, run_id: action.run_id })
}

/// `SignalRun {runId, signal, payload?}` (writer), delivered by [`super::signal::deliver`]: a run
/// parked on a budget pause resumes (any signal is the permission it waits for); a workflow run
/// parked on an event wait that takes the signal gets the payload journaled and wakes. Anything
/// else answers `delivered: false`, as upstream does when no wait matches.
pub(crate) async fn signal_run(app: &App, caller: &Caller, action: SignalRun) -> ApiResult<SignalRunResponse> {
    let (account, now) = (caller.account_id.clone(), app.clock.now_ms());
    let run_id = action.run_id.clone();
    let (delivered, changes) = app
        .db
        .write(move |conn| {
            access::require_run(conn, &run_id, &account, Need::Write)?;
            bounded_string(&action.signal, "Signal", MAX_NAME_BYTES)?;
            let mut changes = Changes::default();
            let signal = Signal {
                name: &action.signal,
                payload: action.payload.as_ref().map(|payload| &payload.0),
                source: Source::Signal,
            };
            let delivered = super::signal::deliver(conn, &run_id, &signal, now, &mut changes)?;
            Ok((delivered, changes))
        })
        .await?;
    app.runs.publish(changes);
    Ok(SignalRunResponse { extra: Default::default(), delivered, run_id: action.run_id })
}

/// `GetRunJournal {runId, afterSeq?}` (reader): a workflow run's journal entries after
/// `afterSeq` (checked while decoding: 400 `afterSeq must be a non-negative integer`), in order,
/// all of them (a journal is capped, docs/workflows.md); an agent run keeps none.
pub(crate) async fn get_run_journal(
    app: &App,
    caller: &Caller,
    action: GetRunJournal,
) -> ApiResult<GetRunJournalResponse> {
    let account = caller.account_id.clone();
    let run_id = action.run_id.clone();
    let after = action.after_seq.unwrap_or(0);
    let entries = app
        .db
        .read(move |conn| {
            access::require_run(conn, &run_id, &account, Need::Read)?;
            Ok(store::journal_after(conn, &run_id, after, None)?)
        })
        .await?;
    Ok(GetRunJournalResponse { extra: Default::default(), entries, run_id: action.run_id })
}
