//! Wake continuations end to end: a webhook trigger whose continuation is `wake` resumes a
//! budget-paused run through SignalRun's delivery, once however often the webhook is replayed,
//! opens no session and starts no run; a wake nobody takes is recorded on the firing and resumes
//! nothing; a run-completed trigger's wake resumes a parked run when another run fails; the
//! continuation's validation messages.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    AgentTriggerInfo, AgentTriggerInput, AgentTriggerInputPrompt, AgentTriggerPatch, AgentTriggerSource,
    CreateAgentTrigger, GetAgentTrigger, GetAgentTriggerResponse, GetRun, ListRuns, ListSessions, RunCompletedSource,
    RunCompletedSourceStatus, RunStatus, TriggerContinuation, UpdateAgentTrigger, WakeContinuation, WebhookSource,
};
use seed_agents_server::testing::runs::engine::Outcome;

use crate::support::runs::{Scripted, Stage, stage};
use crate::support::{TestServer, User, api_error, now_ms};
use crate::support::{wait, webhook};

fn wake(signal: &str, run_id: Option<&str>) -> Option<TriggerContinuation> {
    Some(TriggerContinuation::WakeContinuation(WakeContinuation {
        extra: Default::default(),
        payload: Some(Value::from(Ipld::String("approved by the webhook".into()))),
        run_id: run_id.map(Into::into),
        signal: signal.into(),
    }))
}

fn hook(name: &str, continuation: Option<TriggerContinuation>) -> AgentTriggerInput {
    AgentTriggerInput {
        extra: Default::default(),
        continuation,
        enabled: None,
        name: name.into(),
        prompt: Some(AgentTriggerInputPrompt::String(format!("Handle {name}."))),
        source: AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() }),
    }
}

async fn create(user: &User, agent_id: &str, trigger: AgentTriggerInput) -> (AgentTriggerInfo, String) {
    let created =
        user.call(CreateAgentTrigger { agent_id: agent_id.into(), client_request_id: None, trigger }).await.unwrap();
    (created.trigger, created.webhook_secret.unwrap())
}

async fn get(user: &User, trigger_id: &str) -> GetAgentTriggerResponse {
    user.call(GetAgentTrigger { trigger_id: trigger_id.into() }).await.unwrap()
}

async fn status(user: &User, run_id: &str) -> RunStatus {
    user.call(GetRun { run_id: run_id.into() }).await.unwrap().run.status
}

/// Posts a Standard Webhooks request signed with `secret` (`whsec_…`); status and parsed body.
async fn post(server: &TestServer, trigger_id: &str, secret: &str, id: &str) -> (u16, serde_json::Value) {
    let (timestamp, body) = (now_ms() / 1000, r#"{"approved":true}"#);
    let mut request = server.http.post(format!("{}/api/triggers/{trigger_id}/webhook", server.url)).body(body);
    for (name, value) in webhook::signed(secret, id, timestamp, body) {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap())
}

/// An owner with an agent and a session, on a server whose runs a scripted executor holds.
async fn setup()
-> (TestServer, std::sync::Arc<Scripted>, User, seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let server = TestServer::start().await;
    let scripted = Scripted::install(&server);
    let owner = server.user();
    let agent = owner.create_agent("Waiter").await;
    let session = owner.create_session(&agent, Some("Work")).await;
    (server, scripted, owner, agent, session)
}

/// The agent's sessions and runs, as counts.
async fn footprint(user: &User, agent_id: &str) -> (usize, usize) {
    let sessions = ListSessions {
        agent_id: Some(agent_id.into()),
        cursor: None,
        exclude_triggered: None,
        include_children: None,
        limit: None,
        parent_session_id: None,
    };
    let runs =
        ListRuns { agent_id: Some(agent_id.into()), limit: None, root_run_id: None, session_id: None, status: None };
    (user.call(sessions).await.unwrap().sessions.len(), user.call(runs).await.unwrap().runs.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_webhook_resumes_its_budget_paused_run_exactly_once() {
    let (server, scripted, owner, agent, session) = setup().await;
    let paused = stage(&server, &owner.id, &agent, &session, Stage::Paused).await;
    let (trigger, secret) = create(&owner, &agent, hook("Approval", wake("approved", Some(&paused)))).await;
    assert_eq!(footprint(&owner, &agent).await, (1, 1));

    // The webhook fires the trigger: the paused run takes the signal and runs again.
    let (code, answer) = post(&server, &trigger.id, &secret, "msg_1").await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!((answer["delivered"].as_bool(), answer["runId"].as_str()), (Some(true), Some(&*paused)));
    assert!(answer.get("sessionId").is_none(), "a wake opens no session: {answer}");
    let execution = scripted.next().await;
    assert_eq!((&*execution.run.id, execution.run.attempt), (&*paused, 1), "the same execution resumes");

    // The same delivery again is refused before anything happens.
    let (code, answer) = post(&server, &trigger.id, &secret, "msg_1").await;
    assert_eq!((code, answer["error"].as_str()), (409, Some("This webhook-id was already received")));
    execution.finish(Outcome::Succeeded(Ipld::Null));
    wait::until("the resumed run succeeds", || async { status(&owner, &paused).await == RunStatus::Succeeded }).await;
    assert_eq!(status(&owner, &paused).await, RunStatus::Succeeded);

    // A new delivery finds the run finished: recorded, nothing resumed.
    let (code, answer) = post(&server, &trigger.id, &secret, "msg_2").await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!((answer["delivered"].as_bool(), answer.get("runId")), (Some(false), None));

    let read = get(&owner, &trigger.id).await;
    let firings: Vec<_> = read
        .firings
        .iter()
        .map(|f| (&*f.activity_key, &*f.status, f.run_id.as_deref(), f.error.as_deref(), f.session_id.as_deref()))
        .collect();
    assert_eq!(
        firings,
        [
            ("webhook:msg_2", "no-listener", None, Some("The run is not waiting for this signal"), None),
            ("webhook:msg_1", "delivered", Some(&*paused), None, None),
        ]
    );
    assert!(read.sessions.is_empty(), "no session was opened");
    assert!(read.trigger.last_fired_at.is_some() && read.trigger.last_error.is_none());
    assert_eq!(footprint(&owner, &agent).await, (1, 1), "no session and no run was added");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_nobody_takes_is_recorded_and_resumes_nothing() {
    let (server, _scripted, owner, agent, session) = setup().await;
    let paused = stage(&server, &owner.id, &agent, &session, Stage::Paused).await;
    // A budget-paused run of another agent of the same owner.
    let other_agent = owner.create_agent("Other").await;
    let other_session = owner.create_session(&other_agent, None).await;
    let elsewhere = stage(&server, &owner.id, &other_agent, &other_session, Stage::Paused).await;

    let cases = [
        // Without runId only event waits are searched: a budget pause needs its run named.
        ("Anyone", None, "No parked run of this agent is waiting for this signal"),
        ("Elsewhere", Some(&*elsewhere), "Run not found"),
        ("Nowhere", Some("no-such-run"), "Run not found"),
    ];
    for (name, run_id, why) in cases {
        let (trigger, secret) = create(&owner, &agent, hook(name, wake("go", run_id))).await;
        let (code, answer) = post(&server, &trigger.id, &secret, &format!("msg_{name}")).await;
        assert_eq!((code, answer["delivered"].as_bool()), (202, Some(false)), "{name}: {answer}");
        let read = get(&owner, &trigger.id).await;
        assert_eq!(read.firings.len(), 1, "{name}");
        let firing = &read.firings[0];
        assert_eq!(
            (&*firing.status, firing.error.as_deref(), firing.run_id.as_deref()),
            ("no-listener", Some(why), None)
        );
        assert!(read.trigger.last_fired_at.is_none(), "{name}: lastFiredAt moves only on a delivery");
    }
    for run in [&paused, &elsewhere] {
        assert_eq!(status(&owner, run).await, RunStatus::Waiting, "nothing resumed");
    }
    assert_eq!(footprint(&owner, &agent).await, (1, 1), "no session and no run was added");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_continuations_are_checked_when_written() {
    let (server, _scripted, owner, agent, _session) = setup().await;
    let make = |continuation| CreateAgentTrigger {
        agent_id: agent.clone(),
        client_request_id: None,
        trigger: hook("Bad", continuation),
    };
    let refusals = [
        (wake("  ", None), 400, "Trigger signal is required"),
        (wake(&"s".repeat(257), None), 400, "Trigger signal is too large"),
        (wake("go", Some(" ")), 400, "Trigger run ID is required"),
        (wake("go", Some(&"r".repeat(257))), 400, "Trigger run ID is too large"),
    ];
    for (continuation, code, message) in refusals {
        assert_eq!(api_error(owner.call(make(continuation)).await), (code, message.into()));
    }

    // Stored trimmed, with its payload; an update may switch a trigger to a wake.
    let (created, _) = create(&owner, &agent, hook("Hook", wake(" go ", Some(" run-1 ")))).await;
    let Some(TriggerContinuation::WakeContinuation(stored)) = get(&owner, &created.id).await.trigger.continuation
    else {
        panic!("a wake is stored")
    };
    assert_eq!((&*stored.signal, stored.run_id.as_deref()), ("go", Some("run-1")));
    assert_eq!(stored.payload, Some(Value::from(Ipld::String("approved by the webhook".into()))));
    let (plain, _) = create(&owner, &agent, hook("Plain", None)).await;
    let update = |continuation| UpdateAgentTrigger {
        trigger_id: plain.id.clone(),
        expected_updated_at: None,
        patch: AgentTriggerPatch { continuation, ..AgentTriggerPatch::default() },
    };
    assert_eq!(api_error(owner.call(update(wake("", None))).await), (400, "Trigger signal is required".into()));
    let updated = owner.call(update(wake("later", None))).await.unwrap().trigger;
    assert!(matches!(updated.continuation, Some(TriggerContinuation::WakeContinuation(ref w)) if w.signal == "later"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_wakes_a_parked_one_through_a_run_completed_trigger() {
    let (server, scripted, owner, agent, session) = setup().await;
    let paused = stage(&server, &owner.id, &agent, &session, Stage::Paused).await;
    let source = AgentTriggerSource::RunCompletedSource(RunCompletedSource {
        extra: Default::default(),
        agent_id: Some(agent.clone()),
        status: Some(RunCompletedSourceStatus::Failed),
        title_match: None,
    });
    let trigger = AgentTriggerInput { source, ..hook("On failure", wake("retry", Some(&paused))) };
    let created =
        owner.call(CreateAgentTrigger { agent_id: agent.clone(), client_request_id: None, trigger }).await.unwrap();

    // Another run of the agent fails: the chain monitor fires the trigger, which resumes the pause.
    let other = owner.create_session(&agent, None).await;
    let failed = stage(&server, &owner.id, &agent, &other, Stage::Failed).await;
    let execution = scripted.next().await;
    assert_eq!(execution.run.id, paused, "the parked run resumed");
    let read = get(&owner, &created.trigger.id).await;
    let firing = &read.firings[0];
    assert_eq!(
        (&*firing.activity_key, &*firing.status, firing.run_id.as_deref(), read.firings.len()),
        (&*format!("run-completed:{failed}"), "delivered", Some(&*paused), 1)
    );
    assert!(read.sessions.is_empty(), "no session was opened");
    execution.finish(Outcome::Succeeded(Ipld::Null));
    server.stop().await;
}
