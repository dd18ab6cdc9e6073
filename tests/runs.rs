//! The run engine through the real endpoint and the SDK: RetrySession and StopSession driving a
//! scripted executor, and every run action's answers and errors (GetRun, ListRuns, CancelRun,
//! SignalRun, GetRunJournal, GetSessionEvent).

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CancelRun, GetRun, GetRunJournal, GetSession, GetSessionEvent, ListRuns, RetrySession, RunStatus,
    SessionInfoStatus, SignalRun, StopSession,
};
use seed_agents_protocol::{AgentResponse, wire};
use seed_agents_server::testing::error::ErrorKind;
use seed_agents_server::testing::runs::engine::{Outcome, StopReason};

use crate::support::runs::{Scripted, Stage, failure, stage, turn_output};
use crate::support::wait;
use crate::support::{TestServer, User, action_map, api_error, error_body, now_ms};

fn get(session_id: &str) -> GetSession {
    GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None }
}

fn list(root: Option<&str>, session: Option<&str>, agent: Option<&str>) -> ListRuns {
    ListRuns {
        root_run_id: root.map(Into::into),
        session_id: session.map(Into::into),
        agent_id: agent.map(Into::into),
        limit: None,
        status: None,
    }
}

fn retry(session_id: &str) -> RetrySession {
    RetrySession { session_id: session_id.into() }
}

/// RetrySession on its own task (it answers when the run ends).
fn spawn_retry(
    user: &User,
    session: &str,
) -> tokio::task::JoinHandle<Result<seed_agents_protocol::generated::RetrySessionResponse, seed_agents_sdk::Error>> {
    let (user, session) = (user.clone(), session.to_owned());
    tokio::spawn(async move { user.call(retry(&session)).await })
}

/// An owner with an agent and a session.
async fn setup(server: &TestServer) -> (User, seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let owner = server.user();
    let agent = owner.create_agent("Runner").await;
    let session = owner.create_session(&agent, Some("Work")).await;
    (owner, agent, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_session_reruns_a_failed_turn_inline() {
    let server = TestServer::start().await;
    let scripted = Scripted::install(&server);
    let (owner, agent, session) = setup(&server).await;
    assert_eq!(
        api_error(owner.call(retry(&session)).await),
        (400, "Nothing to retry: the latest run did not fail".into()),
        "no run at all"
    );
    let failed = stage(&server, &owner.id, &agent, &session, Stage::Failed).await;
    let got = owner.call(get(&session)).await.unwrap();
    assert_eq!(got.session.status, SessionInfoStatus::Error);
    assert_eq!(got.events.len(), 1, "the final failure's error event");

    let retrying = spawn_retry(&owner, &session);
    let execution = scripted.next().await;
    let input = wire::to_vec(&execution.run.input).unwrap();
    assert_eq!(
        wire::diagnostic(&input).unwrap(),
        format!(r#"{{"kind": "session-retry", "retryOfRunId": "{failed}"}}"#)
    );
    assert_eq!((execution.run.max_attempts, execution.run.origin.as_str()), (1, "user"));
    // While it runs, the session streams and another retry is refused.
    assert_eq!(owner.call(get(&session)).await.unwrap().session.status, SessionInfoStatus::Streaming);
    assert_eq!(api_error(owner.call(retry(&session)).await), (409, "Session is already streaming".into()));
    execution.finish(Outcome::Succeeded(turn_output("answer-1")));
    let answer = retrying.await.unwrap().unwrap();
    assert_eq!((answer.assistant_event_id.as_str(), answer.session_id.as_str()), ("answer-1", session.as_str()));
    assert_eq!(owner.call(get(&session)).await.unwrap().session.status, SessionInfoStatus::Idle);
    let runs = owner.call(list(None, Some(&session), None)).await.unwrap().runs;
    let summary: Vec<(RunStatus, &str)> = runs.iter().map(|run| (run.status, run.title.as_str())).collect();
    assert_eq!(summary, [(RunStatus::Succeeded, "Staged turn"), (RunStatus::Failed, "Staged turn")], "newest first");
    assert_eq!(
        api_error(owner.call(retry(&session)).await),
        (400, "Nothing to retry: the latest run did not fail".into())
    );

    // A retry that fails answers with the run's message under its status (502 by default).
    stage(&server, &owner.id, &agent, &session, Stage::Failed).await;
    scripted.answer(Some(Outcome::Failed(failure("Rate limited by the provider", ErrorKind::TooMany))));
    assert_eq!(api_error(owner.call(retry(&session)).await), (429, "Rate limited by the provider".into()));
    scripted.answer(Some(Outcome::Failed(failure("Provider unreachable", ErrorKind::Upstream))));
    assert_eq!(api_error(owner.call(retry(&session)).await), (502, "Provider unreachable".into()));
    let events = owner.call(get(&session)).await.unwrap().events;
    assert_eq!(events.len(), 4, "each final failure appended its error event");
    // Parked: the answer is '' and the session does not stream.
    stage(&server, &owner.id, &agent, &session, Stage::Failed).await;
    let park = seed_agents_server::testing::runs::Wait::BudgetPause { note: None };
    scripted.answer(Some(Outcome::Parked(park)));
    assert_eq!(owner.call(retry(&session)).await.unwrap().assistant_event_id, "");
    assert_eq!(owner.call(get(&session)).await.unwrap().session.status, SessionInfoStatus::Idle);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_session_stops_the_turn_and_cancels_what_waits() {
    let server = TestServer::start().await;
    let scripted = Scripted::install(&server);
    let (owner, agent, session) = setup(&server).await;
    let stop = |session: &str| StopSession { session_id: session.into() };
    assert!(!owner.call(stop(&session)).await.unwrap().stopped, "idle: nothing to stop");

    stage(&server, &owner.id, &agent, &session, Stage::Failed).await;
    let retrying = spawn_retry(&owner, &session);
    let execution = scripted.next().await;
    let stopped = owner.call(stop(&session)).await.unwrap();
    assert_eq!((stopped.stopped, stopped.session_id.as_str()), (true, session.as_str()));
    assert_eq!(execution.stop.reason(), Some(StopReason::Stop));
    // The scripted turn answers a Stop with the partial message's id.
    assert_eq!(retrying.await.unwrap().unwrap().assistant_event_id, "stopped");
    assert_eq!(
        owner.call(GetRun { run_id: execution.run.id.clone().into() }).await.unwrap().run.status,
        RunStatus::Canceled
    );
    assert_eq!(owner.call(get(&session)).await.unwrap().session.status, SessionInfoStatus::Idle);

    // Queued and parked runs of the session are canceled at once.
    let queued = stage(&server, &owner.id, &agent, &session, Stage::Queued).await;
    let other = owner.create_session(&agent, None).await;
    let paused = stage(&server, &owner.id, &agent, &other, Stage::Paused).await;
    assert!(owner.call(stop(&session)).await.unwrap().stopped);
    assert!(owner.call(stop(&other)).await.unwrap().stopped, "a parked run is live too");
    for run in [queued, paused] {
        assert_eq!(owner.call(GetRun { run_id: run }).await.unwrap().run.status, RunStatus::Canceled);
    }
    assert!(!owner.call(stop(&session)).await.unwrap().stopped);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_actions_answer_and_refuse_as_upstream() {
    let server = TestServer::start().await;
    let scripted = Scripted::install(&server);
    let (owner, agent, session) = setup(&server).await;
    let paused = stage(&server, &owner.id, &agent, &session, Stage::Paused).await;
    let failed = stage(&server, &owner.id, &agent, &session, Stage::Failed).await;

    // GetRun.
    let run = owner.call(GetRun { run_id: paused.clone() }).await.unwrap().run;
    assert_eq!(
        (run.status, run.root_run_id.as_str(), run.title.as_str()),
        (RunStatus::Waiting, paused.as_str(), "Staged turn")
    );
    let wait = run.wait.unwrap();
    assert_eq!((wait.reason.to_string(), wait.label.as_deref()), ("budget-pause".into(), Some("budget spent")));
    assert_eq!(run.child_run_count, None, "no children: no count");
    assert_eq!(api_error(owner.call(GetRun { run_id: "nope".into() }).await), (404, "Run not found".into()));

    // ListRuns: selectors, status filter, limits.
    assert_eq!(
        api_error(owner.call(list(None, None, None)).await),
        (400, "ListRuns requires rootRunId, sessionId, or agentId".into())
    );
    let ids =
        |runs: Vec<seed_agents_protocol::generated::RunInfo>| runs.into_iter().map(|run| run.id).collect::<Vec<_>>();
    assert_eq!(ids(owner.call(list(None, None, Some(&agent))).await.unwrap().runs), [failed.clone(), paused.clone()]);
    assert_eq!(
        api_error(owner.call(list(Some(&paused), Some(&session), None)).await),
        (400, "ListRuns takes exactly one of rootRunId, sessionId, or agentId".into()),
        "exactly one selector"
    );
    assert_eq!(ids(owner.call(list(Some(&paused), None, None)).await.unwrap().runs), vec![paused.clone()]);
    let failed_only = ListRuns { status: Some(RunStatus::Failed), ..list(None, Some(&session), None) };
    assert_eq!(ids(owner.call(failed_only).await.unwrap().runs), vec![failed.clone()]);
    let one = ListRuns { limit: Some(1), ..list(None, None, Some(&agent)) };
    assert_eq!(ids(owner.call(one).await.unwrap().runs), vec![failed.clone()]);
    // The filter is in the query: one waiting run fills a page of one, though a newer run is not
    // waiting.
    let waiting = ListRuns { status: Some(RunStatus::Waiting), limit: Some(1), ..list(None, None, Some(&agent)) };
    assert_eq!(ids(owner.call(waiting).await.unwrap().runs), vec![paused.clone()]);
    for (limit, expected) in [(Ipld::Float(1.9), 1), (Ipld::String("5".into()), 2), (Ipld::Float(-4.0), 1)] {
        let fields = [("agentId", Ipld::String(agent.to_string())), ("limit", limit)];
        let bytes = owner.sign_map(action_map("ListRuns", &fields), now_ms(), Some(3)).await;
        let (status, _, body) = server.post_raw("application/cbor", bytes).await;
        assert_eq!(status, 200, "{:?}", error_body(&body));
        let AgentResponse::ListRunsResponse(listed) = wire::from_slice(&body).unwrap() else { panic!("not a list") };
        assert_eq!(listed.runs.len(), expected);
    }
    let stranger = server.user();
    assert_eq!(api_error(stranger.call(list(Some(&paused), None, None)).await), (404, "Run not found".into()));
    assert_eq!(api_error(stranger.call(list(None, Some(&session), None)).await), (404, "Session not found".into()));
    assert_eq!(api_error(stranger.call(list(None, None, Some(&agent))).await), (404, "Agent not found".into()));
    // A tree is visible through its own agent: another agent's tree, even the same owner's, is
    // not found for a member of this one.
    let sibling = owner.create_agent("Sibling").await;
    let sibling_session = owner.create_session(&sibling, None).await;
    let sibling_run = stage(&server, &owner.id, &sibling, &sibling_session, Stage::Paused).await;
    let reader = server.user();
    let invite = seed_agents_protocol::generated::InviteAgentCollaborator {
        agent_id: agent.clone(),
        account_id: reader.id.clone(),
        role: seed_agents_protocol::generated::AgentCollaboratorRole::Reader,
    };
    owner.call(invite).await.unwrap();
    reader.call(seed_agents_protocol::generated::AcceptAgentInvite { agent_id: agent.clone() }).await.unwrap();
    assert_eq!(api_error(reader.call(list(Some(&sibling_run), None, None)).await), (404, "Run not found".into()));
    assert_eq!(ids(reader.call(list(Some(&paused), None, None)).await.unwrap().runs), vec![paused.clone()]);

    // A user verb waits for the parked turn as for a running one.
    let verb = seed_agents_protocol::generated::InvokeSessionTool {
        session_id: session.clone(),
        verb: seed_agents_protocol::generated::InvokeSessionToolVerb::Read,
        input: seed_agents_protocol::Value(Ipld::Map([("address".to_owned(), Ipld::String("~/self".into()))].into())),
    };
    assert_eq!(
        api_error(owner.call(verb).await),
        (409, "The agent is working in this thread right now; wait for its turn to finish".into()),
        "a waiting run holds the session"
    );

    // GetRunJournal: agent runs keep none; afterSeq is checked.
    let journal = owner.call(GetRunJournal { run_id: paused.clone(), after_seq: None }).await.unwrap();
    assert_eq!((journal.entries.len(), journal.run_id.as_str()), (0, paused.as_str()));
    let negative = GetRunJournal { run_id: paused.clone(), after_seq: Some(-1) };
    assert_eq!(api_error(owner.call(negative).await), (400, "afterSeq must be a non-negative integer".into()));
    let missing = GetRunJournal { run_id: "nope".into(), after_seq: Some(0) };
    assert_eq!(api_error(owner.call(missing).await), (404, "Run not found".into()));

    // GetSessionEvent: the failure's error event.
    let event = owner.call(GetSessionEvent { session_id: session.clone(), seq: 1 }).await.unwrap().event;
    assert_eq!((event.seq, event.session_id.as_str()), (1, session.as_str()));
    let missing = GetSessionEvent { session_id: session.clone(), seq: 2 };
    assert_eq!(api_error(owner.call(missing).await), (404, "Session event not found".into()));
    let negative = GetSessionEvent { session_id: session.clone(), seq: -1 };
    assert_eq!(api_error(owner.call(negative).await), (400, "seq must be a non-negative integer".into()));

    // SignalRun: a budget pause resumes (and runs); anything else is not delivered.
    let signal = |run: &str, name: &str| SignalRun { run_id: run.into(), signal: name.into(), payload: None };
    assert_eq!(api_error(owner.call(signal(&paused, "  ")).await), (400, "Signal is required".into()));
    assert!(!owner.call(signal(&failed, "go")).await.unwrap().delivered, "not parked");
    let delivered = owner.call(signal(&paused, "go")).await.unwrap();
    assert_eq!((delivered.delivered, delivered.run_id.as_str()), (true, paused.as_str()));
    let execution = scripted.next().await;
    assert_eq!((execution.run.id.as_str(), execution.run.attempt), (paused.as_str(), 1), "the same execution resumes");
    execution.finish(Outcome::Succeeded(Ipld::Null));
    // The resumed run finishes on the executor's task; the next stage needs a quiet session.
    wait::until("the resumed run succeeds", || async {
        owner.call(GetRun { run_id: paused.clone() }).await.unwrap().run.status == RunStatus::Succeeded
    })
    .await;

    // CancelRun: a parked run ends at once; nothing left the second time.
    let parked = stage(&server, &owner.id, &agent, &session, Stage::Paused).await;
    let canceled = owner.call(CancelRun { run_id: parked.clone() }).await.unwrap();
    assert_eq!((canceled.canceled, canceled.run_id.as_str()), (true, parked.as_str()));
    assert!(!owner.call(CancelRun { run_id: parked.clone() }).await.unwrap().canceled);
    assert_eq!(owner.call(GetRun { run_id: parked }).await.unwrap().run.status, RunStatus::Canceled);
    assert_eq!(api_error(owner.call(CancelRun { run_id: "nope".into() }).await), (404, "Run not found".into()));
    server.stop().await;
}
