//! Triggers end to end: the CRUD actions and their validation, combining, the protocol 2
//! refusals, webhooks (Standard Webhooks signatures) firing real background runs against the
//! scripted provider, and run-completed chains stopping at the loop guard.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::StreamExt as _;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    ActivitySource, AgentActivityCondition, AgentActivitySource, AgentTriggerInfo, AgentTriggerInput,
    AgentTriggerInputPrompt, AgentTriggerPatch, AgentTriggerSource, CombineAgentTriggers, CreateAgent,
    CreateAgentTrigger, DeleteAgent, DeleteAgentTrigger, DeleteSession, DocumentCommentSource, GetAgentTrigger,
    GetAgentTriggerResponse, GetSession, InvokeSessionTool, InvokeSessionToolResponse, InvokeSessionToolVerb,
    ListAgentTriggers, ListSessions, NewThreadContinuation, RunCompletedSource, SessionActor, SessionEventPayload,
    SetModelProvider, TriggerContinuation, UpdateAgentTrigger, UserMentionSource, WebhookSource,
};
use seed_agents_sdk::subscription::Event as Live;

use crate::support::db::read_db;
use crate::support::provider::{Fallback, Provider};
use crate::support::runs;
use crate::support::wait::until;
use crate::support::webhook::{now_seconds, signed};
use crate::support::{TestServer, User, api_error, custom_provider_config, definition, say};

/// A server whose agent turns all answer `done` from the scripted provider; a user with an agent.
async fn setup(provider: &Provider) -> (TestServer, User, seed_agents_protocol::AgentId) {
    provider.set_fallback(Fallback::Text("done".into()));
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
    })
    .await;
    let user = server.user();
    let custom = custom_provider_config(provider.openai_base());
    user.call(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Watcher") }).await.unwrap().agent_id;
    (server, user, agent_id)
}

fn input(name: &str, source: AgentTriggerSource) -> AgentTriggerInput {
    AgentTriggerInput {
        extra: Default::default(),
        continuation: None,
        enabled: None,
        name: name.into(),
        prompt: Some(AgentTriggerInputPrompt::String(format!("Handle {name}."))),
        source,
    }
}

fn mention(accounts: &[&str]) -> AgentTriggerSource {
    AgentTriggerSource::UserMentionSource(UserMentionSource {
        extra: Default::default(),
        mentioned_accounts: accounts.iter().map(|account| (*account).to_owned()).collect(),
        resource_prefix: None,
    })
}

fn compound(conditions: &[(&str, &str)]) -> AgentTriggerSource {
    AgentTriggerSource::ActivitySource(ActivitySource {
        extra: Default::default(),
        conditions: conditions
            .iter()
            .map(|(id, account)| AgentActivityCondition {
                extra: Default::default(),
                id: (*id).into(),
                source: AgentActivitySource::UserMentionSource(UserMentionSource {
                    extra: Default::default(),
                    mentioned_accounts: vec![(*account).into()],
                    resource_prefix: None,
                }),
            })
            .collect(),
    })
}

fn webhook() -> AgentTriggerSource {
    AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() })
}

async fn create(user: &User, agent_id: &str, trigger: AgentTriggerInput) -> (AgentTriggerInfo, Option<String>) {
    let created =
        user.call(CreateAgentTrigger { agent_id: agent_id.into(), client_request_id: None, trigger }).await.unwrap();
    (created.trigger, created.webhook_secret)
}

async fn get(user: &User, trigger_id: &str) -> GetAgentTriggerResponse {
    user.call(GetAgentTrigger { trigger_id: trigger_id.into() }).await.unwrap()
}

fn patch() -> AgentTriggerPatch {
    AgentTriggerPatch::default()
}

#[tokio::test]
async fn triggers_are_created_listed_read_updated_and_deleted_with_the_protocols_checks() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let make = |trigger| CreateAgentTrigger { agent_id: agent_id.clone(), client_request_id: None, trigger };

    // Validation, with the notes' messages, before anything is written.
    let refused = |source| user.call(make(input("Bad", source)));
    assert_eq!(api_error(refused(mention(&[" "])).await), (400, "Trigger mentioned account is required".into()));
    let document = |resource: &str| {
        AgentTriggerSource::DocumentCommentSource(DocumentCommentSource {
            extra: Default::default(),
            author: None,
            resource: resource.into(),
        })
    };
    for resource in ["hm://", "hm://*", "https://example.com"] {
        assert_eq!(
            api_error(refused(document(resource)).await),
            (400, "Trigger resource must be an hm://<account>[/path] address".into()),
            "{resource}"
        );
    }
    let nameless = AgentTriggerInput { name: "  ".into(), ..input("x", mention(&["a"])) };
    assert_eq!(api_error(user.call(make(nameless)).await), (400, "Trigger name is required".into()));
    let promptless = AgentTriggerInput { prompt: None, ..input("x", mention(&["a"])) };
    assert_eq!(api_error(user.call(make(promptless)).await), (400, "Trigger prompt is required".into()));
    let listed = user.call(ListAgentTriggers { agent_id: agent_id.clone() }).await.unwrap().triggers;
    assert!(listed.is_empty(), "refused creates wrote nothing: {listed:?}");

    // Create: canonical values stored; idempotent by clientRequestId.
    let trigger = input("Mentions", mention(&[" zAlice ", "zAlice", "zBob"]));
    let keyed = CreateAgentTrigger {
        agent_id: agent_id.clone(),
        client_request_id: Some("req-1".into()),
        trigger: trigger.clone(),
    };
    let first = user.call(keyed.clone()).await.unwrap().trigger;
    assert_eq!(first.source, mention(&["zAlice", "zBob"]));
    assert!(first.enabled && first.merged_into.is_none() && first.last_fired_at.is_none());
    let again = user.call(keyed.clone()).await.unwrap().trigger;
    assert_eq!(again, first, "the retry answers the first create");
    let other = CreateAgentTrigger { trigger: input("Other", mention(&["zAlice"])), ..keyed };
    assert_eq!(api_error(user.call(other).await), (409, "Client request ID payload mismatch".into()));
    let (second, secret) = create(&user, &agent_id, input("Hook", webhook())).await;
    assert!(secret.is_some_and(|secret| secret.starts_with("whsec_")));
    let listed = user.call(ListAgentTriggers { agent_id: agent_id.clone() }).await.unwrap().triggers;
    assert_eq!(listed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [&*second.id, &*first.id], "newest first");
    let read = get(&user, &first.id).await;
    assert_eq!(
        (read.trigger, read.firings.len(), read.sessions.len(), read.webhook_secret),
        (first.clone(), 0, 0, None)
    );
    assert!(get(&user, &second.id).await.webhook_secret.is_none(), "the secret is shown once");

    // Update: a non-empty patch; expectedUpdatedAt guards; updatedAt always moves.
    let update =
        |patch, expected| UpdateAgentTrigger { trigger_id: first.id.clone(), patch, expected_updated_at: expected };
    assert_eq!(api_error(user.call(update(patch(), None)).await), (400, "Agent trigger patch is empty".into()));
    let renamed = AgentTriggerPatch { name: Some(" Renamed ".into()), enabled: Some(false), ..patch() };
    let updated = user.call(update(renamed.clone(), Some(first.updated_at))).await.unwrap().trigger;
    assert_eq!((updated.name.as_str(), updated.enabled), ("Renamed", false));
    assert!(updated.updated_at > first.updated_at);
    let stale = user.call(update(renamed, Some(first.updated_at))).await;
    assert_eq!(api_error(stale).0, 409);
    let bad = AgentTriggerPatch { source: Some(mention(&[])), ..patch() };
    assert_eq!(api_error(user.call(update(bad, None)).await), (400, "Trigger mentioned account is required".into()));

    // Strangers see nothing; delete removes it.
    let stranger = server.user();
    let hidden = stranger.call(GetAgentTrigger { trigger_id: first.id.clone() }).await;
    assert_eq!(api_error(hidden), (404, "Agent trigger not found".into()));
    user.call(DeleteAgentTrigger { trigger_id: first.id.clone() }).await.unwrap();
    let gone = user.call(GetAgentTrigger { trigger_id: first.id.clone() }).await;
    assert_eq!(api_error(gone), (404, "Agent trigger not found".into()));
    server.stop().await;
}

#[tokio::test]
async fn combining_two_activity_triggers_unites_their_conditions_and_freezes_the_other() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let (survivor, _) = create(&user, &agent_id, input("First", compound(&[("a", "zAlice"), ("b", "zBob")]))).await;
    let (other, _) = create(&user, &agent_id, input("Second", compound(&[("a", "zCarol"), ("x", "zAlice")]))).await;
    let (plain, _) = create(&user, &agent_id, input("Plain", mention(&["zAlice"]))).await;
    let combine = |other: &AgentTriggerInfo, expected: i64| CombineAgentTriggers {
        trigger_id: survivor.id.clone(),
        other_trigger_id: other.id.clone(),
        expected_updated_at: expected,
        other_expected_updated_at: other.updated_at,
        use_other_action: Some(true),
    };
    assert_eq!(api_error(user.call(combine(&other, survivor.updated_at - 1)).await).0, 409, "stale survivor");
    let refused = user.call(combine(&plain, survivor.updated_at)).await;
    assert_eq!(api_error(refused), (400, "Only activity triggers can be combined".into()));

    let combined = user.call(combine(&other, survivor.updated_at)).await.unwrap().trigger;
    let AgentTriggerSource::ActivitySource(source) = &combined.source else { panic!("{combined:?}") };
    let conditions: Vec<(&str, &str)> = source
        .conditions
        .iter()
        .map(|condition| match &condition.source {
            AgentActivitySource::UserMentionSource(mention) => {
                (condition.id.as_str(), mention.mentioned_accounts[0].as_str())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    // zAlice is already watched; zCarol's clashing id "a" is renamed.
    assert_eq!(conditions.len(), 3, "{conditions:?}");
    assert_eq!(&conditions[..2], [("a", "zAlice"), ("b", "zBob")]);
    assert_eq!(conditions[2].1, "zCarol");
    assert_ne!(conditions[2].0, "a");
    assert_eq!((combined.name.as_str(), combined.enabled), ("First", true), "the survivor keeps name and state");
    assert_eq!(combined.prompt, other.prompt, "useOtherAction takes the other's prompt");

    let frozen = get(&user, &other.id).await.trigger;
    assert_eq!((frozen.enabled, frozen.merged_into.as_deref()), (false, Some(&*survivor.id)));
    let enable = UpdateAgentTrigger {
        trigger_id: other.id.clone(),
        patch: AgentTriggerPatch { enabled: Some(true), ..patch() },
        expected_updated_at: None,
    };
    assert_eq!(
        api_error(user.call(enable).await),
        (400, "This trigger was combined into another and cannot be edited or enabled".into())
    );
    server.stop().await;
}

#[tokio::test]
async fn protocol_2_clients_are_refused_compound_triggers_before_any_write() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let (compound_trigger, _) = create(&user, &agent_id, input("Compound", compound(&[("a", "zAlice")]))).await;
    let (simple, _) = create(&user, &agent_id, input("Simple", mention(&["zAlice"]))).await;
    let old = seed_agents_sdk::Client::builder(
        &server.url,
        seed_agents_protocol::Ed25519Signer::from_seed(&user.signer.seed()),
    )
    .protocol(Some(2))
    .build()
    .unwrap();
    let rename = |trigger: &AgentTriggerInfo| UpdateAgentTrigger {
        trigger_id: trigger.id.clone(),
        patch: AgentTriggerPatch { name: Some("Renamed by an old app".into()), ..patch() },
        expected_updated_at: None,
    };
    let error = old.call(rename(&compound_trigger)).await.unwrap_err();
    assert!(
        matches!(&error, seed_agents_sdk::Error::ProtocolTooOld { message, .. } if message.contains("several conditions")),
        "426 update_required: {error:?}"
    );
    assert_eq!(get(&user, &compound_trigger.id).await.trigger, compound_trigger, "nothing was written");
    assert_eq!(old.call(rename(&simple)).await.unwrap().trigger.name, "Renamed by an old app");
    let listed = old.call(ListAgentTriggers { agent_id: agent_id.clone() }).await.unwrap().triggers;
    assert_eq!(listed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [&*simple.id]);
    server.stop().await;
}

async fn post_hook(server: &TestServer, trigger_id: &str, headers: &[(&str, String)], body: &str) -> (u16, String) {
    let mut request =
        server.http.post(format!("{}/api/triggers/{trigger_id}/webhook", server.url)).body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_signed_webhook_fires_once_and_the_firing_shows_everywhere() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let (trigger, secret) = create(&user, &agent_id, input("Deploys", webhook())).await;
    let secret = secret.unwrap();
    let mut live = user.client.subscribe(format!("account/{}", user.id)).start();
    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));

    let body = r#"{"event":"deploy","ok":true}"#;
    let (status, answer) = post_hook(&server, &trigger.id, &signed(&secret, "msg_1", now_seconds(), body), body).await;
    assert_eq!(status, 202, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let session_id = answer["sessionId"].as_str().unwrap().to_owned();

    // The run answers in the background; the firing records how it ended.
    until("the triggered run succeeded", || async {
        get(&user, &trigger.id).await.firings.first().is_some_and(|firing| firing.status == "succeeded")
    })
    .await;
    let read = get(&user, &trigger.id).await;
    assert_eq!(read.firings.len(), 1);
    let firing = &read.firings[0];
    assert_eq!(firing.activity_key, "webhook:msg_1");
    assert_eq!(firing.session_id.as_deref(), Some(&*session_id));
    assert_eq!(firing.run_id.as_deref(), answer["runId"].as_str());
    assert_eq!(read.sessions.len(), 1);
    let attribution = read.sessions[0].started_by_trigger.as_ref().unwrap();
    assert_eq!((&*attribution.trigger_id, &*attribution.firing_id), (&*trigger.id, &*firing.id));
    assert!(read.trigger.last_fired_at.is_some());

    // The session it opened: titled after the trigger, the prompt with the activity, the answer.
    let session = user
        .call(GetSession { session_id: session_id.clone().into(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap();
    let context = session.trigger_context.unwrap();
    assert_eq!((&*context.firing_id, &*context.prompt), (&*firing.id, "Handle Deploys."));
    assert_eq!(
        context.activity["body"].0,
        Ipld::Map([("event".to_owned(), Ipld::String("deploy".into())), ("ok".to_owned(), Ipld::Bool(true))].into())
    );
    assert_eq!(session.session.title.as_deref(), Some("Deploys"));
    let SessionEventPayload::MessageEvent(prompt) = &session.events[0].event else { panic!() };
    assert_eq!(prompt.actor, Some(SessionActor::Trigger));
    assert!(
        prompt.content.starts_with("Handle Deploys.") && prompt.content.contains("\"deploy\""),
        "{}",
        prompt.content
    );
    let SessionEventPayload::MessageEvent(reply) = &session.events[1].event else { panic!() };
    assert_eq!(reply.content, "done");
    let sent = provider.requests()[0].body["messages"][1]["content"].as_str().unwrap().to_owned();
    assert!(sent.contains("<trigger_activity"), "the model is shown the activity: {sent}");

    // Over the WebSocket: the new session and the trigger's change.
    let mut reasons = Vec::new();
    while !(reasons.contains(&"session-created".to_owned()) && reasons.contains(&"trigger-updated".to_owned())) {
        let event = tokio::time::timeout(Duration::from_secs(30), live.next()).await.unwrap().unwrap().unwrap();
        if let Live::Change { value, .. } = event
            && let Ipld::Map(hint) = value.0
            && let Some(Ipld::String(reason)) = hint.get("reason")
        {
            reasons.push(reason.clone());
        }
    }
    // Triggered sessions can be left out of lists.
    let list = |exclude| ListSessions {
        agent_id: Some(agent_id.clone()),
        cursor: None,
        exclude_triggered: exclude,
        include_children: None,
        limit: None,
        parent_session_id: None,
    };
    assert_eq!(user.call(list(None)).await.unwrap().sessions.len(), 1);
    assert!(user.call(list(Some(true))).await.unwrap().sessions.is_empty());

    // Deleting the session keeps the firing, detached; deleting the agent takes trigger and
    // firings with it while the run survives.
    user.call(DeleteSession { session_id: session_id.clone().into() }).await.unwrap();
    let read = get(&user, &trigger.id).await;
    assert_eq!((read.firings.len(), read.firings[0].session_id.as_deref(), read.sessions.len()), (1, None, 0));
    user.call(DeleteAgent { agent_id: agent_id.clone() }).await.unwrap();
    let gone = user.call(GetAgentTrigger { trigger_id: trigger.id.clone() }).await;
    assert_eq!(api_error(gone), (404, "Agent trigger not found".into()));
    let run: (Option<String>, Option<String>, String) = read_db(&server, |conn| {
        conn.query_row("SELECT agent_id, trigger_firing_id, origin FROM runs", [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
    })
    .await;
    assert_eq!(run, (None, None, "trigger".to_owned()));
    server.stop().await;
}

fn new_thread(prompt: Option<&str>, include_agent_prompt: Option<bool>, tools: Option<&[&str]>) -> TriggerContinuation {
    TriggerContinuation::NewThreadContinuation(NewThreadContinuation {
        system_prompt: prompt.map(str::to_owned),
        include_agent_system_prompt: include_agent_prompt,
        tools: tools.map(|tools| tools.iter().map(|tool| (*tool).to_owned()).collect()),
        ..Default::default()
    })
}

/// The system message of the provider's request `index`.
fn system_of(provider: &Provider, index: usize) -> String {
    provider.requests()[index].body["messages"][0]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_new_thread_runs_with_the_triggers_own_instructions_and_tools_for_its_whole_session() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    // Checked like a trigger prompt, before anything is written.
    let blank = input("Blank", webhook()).continuation(new_thread(Some("  "), None, None));
    let refused = api_error(
        user.call(CreateAgentTrigger { agent_id: agent_id.clone(), client_request_id: None, trigger: blank }).await,
    );
    assert_eq!(refused, (400, "Trigger system prompt is required".into()));
    assert!(user.call(ListAgentTriggers { agent_id: agent_id.clone() }).await.unwrap().triggers.is_empty());

    // Added to the agent's prompt, with the grants narrowed to none (web_search has no backend).
    let added =
        input("Added", webhook()).continuation(new_thread(Some(" Answer in French. "), None, Some(&["web_search"])));
    let (added, secret) = create(&user, &agent_id, added).await;
    let body = r#"{"n":1}"#;
    let (status, answer) =
        post_hook(&server, &added.id, &signed(&secret.unwrap(), "m1", now_seconds(), body), body).await;
    assert_eq!(status, 202, "{answer}");
    let session_id =
        serde_json::from_str::<serde_json::Value>(&answer).unwrap()["sessionId"].as_str().unwrap().to_owned();
    until("the thread answered", || async {
        get(&user, &added.id).await.firings.first().is_some_and(|firing| firing.status == "succeeded")
    })
    .await;
    let system = system_of(&provider, 0);
    assert!(system.contains("You are helpful.\n\nAnswer in French."), "{system}");
    assert!(system.contains("tools/ — no callable tools are granted to you"), "{system}");
    // A user answering in the thread gets the same agent; GetSession shows what it is told.
    user.call(say(&session_id, "encore")).await.unwrap();
    let system = system_of(&provider, 1);
    assert!(system.contains("Answer in French.") && system.contains("no callable tools"), "{system}");
    let session = user
        .call(GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap();
    assert!(session.system_prompt_markdown.contains("You are helpful.\n\nAnswer in French."));

    // Instead of the agent's prompt; a later edit of the trigger leaves a fired thread alone.
    let replaced = input("Replaced", webhook()).continuation(new_thread(Some("Only this."), Some(false), None));
    let (replaced, secret) = create(&user, &agent_id, replaced).await;
    let (status, _) =
        post_hook(&server, &replaced.id, &signed(&secret.unwrap(), "m2", now_seconds(), body), body).await;
    assert_eq!(status, 202);
    until("the second thread answered", || async {
        get(&user, &replaced.id).await.firings.first().is_some_and(|firing| firing.status == "succeeded")
    })
    .await;
    let system = system_of(&provider, 2);
    assert!(system.contains("Only this.") && !system.contains("You are helpful."), "{system}");
    assert!(system.contains("tools/ — callable with call: search"), "no tools field: the agent's grants: {system}");

    // A plain session of the agent is unchanged.
    let plain = user.create_session(&agent_id, None).await;
    user.call(say(&plain, "hello")).await.unwrap();
    let system = system_of(&provider, 3);
    assert!(system.contains("You are helpful.") && !system.contains("French") && !system.contains("Only this."));
    server.stop().await;
}

#[tokio::test]
async fn webhook_refusals_fire_nothing_and_rotation_retires_the_old_secret() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let (trigger, secret) = create(&user, &agent_id, input("Hook", webhook())).await;
    let secret = secret.unwrap();
    let body = r#"{"n":1}"#;
    let now = now_seconds();
    let first = signed(&secret, "msg_a", now, body);
    assert_eq!(post_hook(&server, &trigger.id, &first, body).await.0, 202);

    // A replay, byte for byte, and the same id signed again: already received.
    assert_eq!(post_hook(&server, &trigger.id, &first, body).await.0, 409);
    assert_eq!(post_hook(&server, &trigger.id, &signed(&secret, "msg_a", now + 1, body), body).await.0, 409);
    // A wrong secret, a tampered body, and an unknown trigger: the same 401, telling nothing.
    let wrong = format!("whsec_{}", STANDARD.encode([7u8; 32]));
    let (status, wrong_answer) = post_hook(&server, &trigger.id, &signed(&wrong, "msg_b", now, body), body).await;
    assert_eq!(status, 401);
    let tampered = post_hook(&server, &trigger.id, &signed(&secret, "msg_c", now, body), r#"{"n":2}"#).await;
    assert_eq!(tampered, (401, wrong_answer.clone()));
    let unknown = post_hook(&server, "no-such-trigger", &signed(&secret, "msg_d", now, body), body).await;
    assert_eq!(unknown, (401, wrong_answer.clone()));
    let (_, plain) = create(&user, &agent_id, input("Plain", mention(&["zAlice"]))).await;
    assert!(plain.is_none());
    // A timestamp outside the five-minute window, and headers missing.
    let old = post_hook(&server, &trigger.id, &signed(&secret, "msg_e", now - 301, body), body).await;
    assert_eq!(old.0, 401);
    assert!(old.1.contains("outside the allowed window"), "{}", old.1);
    assert_eq!(post_hook(&server, &trigger.id, &[], body).await.0, 400);
    // An oversized body (256 KiB + 1), announced and streamed.
    let big = format!("\"{}\"", "x".repeat(256 * 1024 - 1));
    assert_eq!(post_hook(&server, &trigger.id, &signed(&secret, "msg_f", now, &big), &big).await.0, 413);
    let streamed = post_chunked(&server, &trigger.id, &signed(&secret, "msg_g", now, ""), 5, 64 * 1024).await;
    assert!(streamed.starts_with("HTTP/1.1 413"), "{streamed}");
    assert_eq!(get(&user, &trigger.id).await.firings.len(), 1, "only the first call fired");

    // Rotation: setting the webhook source again mints a new secret; the old one stops working.
    let rotate = UpdateAgentTrigger {
        trigger_id: trigger.id.clone(),
        patch: AgentTriggerPatch { source: Some(webhook()), ..patch() },
        expected_updated_at: None,
    };
    let rotated = user.call(rotate).await.unwrap().webhook_secret.unwrap();
    assert_ne!(rotated, secret);
    let now = now_seconds();
    assert_eq!(post_hook(&server, &trigger.id, &signed(&secret, "msg_h", now, body), body).await, (401, wrong_answer));
    assert_eq!(post_hook(&server, &trigger.id, &signed(&rotated, "msg_h", now, body), body).await.0, 202);
    assert_eq!(get(&user, &trigger.id).await.firings.len(), 2);
    server.stop().await;
}

/// Posts `chunks` chunks of `size` bytes with chunked transfer encoding (no length announced);
/// returns the raw answer's status line and headers.
async fn post_chunked(
    server: &TestServer,
    trigger_id: &str,
    headers: &[(&str, String)],
    chunks: usize,
    size: usize,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.url.strip_prefix("http://").unwrap();
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut head = format!(
        "POST /api/triggers/{trigger_id}/webhook HTTP/1.1\r\nHost: {address}\r\nTransfer-Encoding: chunked\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("{size:x}\r\n{}\r\n", "y".repeat(size));
    for _ in 0..chunks {
        // The server may stop reading once it has refused the body.
        if socket.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = vec![0u8; 4096];
    let read = socket.read(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

fn run_completed() -> AgentTriggerSource {
    AgentTriggerSource::RunCompletedSource(RunCompletedSource {
        extra: Default::default(),
        agent_id: None,
        status: None,
        title_match: None,
    })
}

#[tokio::test]
async fn a_run_completed_chain_stops_at_the_loop_guard() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let (first, _) = create(&user, &agent_id, input("First", run_completed())).await;
    let (second, _) = create(&user, &agent_id, input("Second", run_completed())).await;
    let session_id = user.create_session(&agent_id, None).await;
    user.call(say(&session_id, "start the chain")).await.unwrap();

    // The user's run fires both; First's run fires Second (Second's run fires First); the runs of
    // those see their own trigger in their ancestry and stop. Four firings, then quiet.
    let settled = || {
        read_db(&server, |conn| {
            let firings: i64 = conn.query_row("SELECT COUNT(*) FROM trigger_firings", [], |row| row.get(0))?;
            let open: i64 = conn.query_row(
                "SELECT COUNT(*) FROM runs r WHERE r.status NOT IN ('succeeded', 'failed', 'canceled')
                    OR r.completion_pending = 1",
                [],
                |row| row.get(0),
            )?;
            Ok(firings == 4 && open == 0)
        })
    };
    until("four firings and every run handled", settled).await;
    let (a, b) = (get(&user, &first.id).await, get(&user, &second.id).await);
    assert_eq!((a.firings.len(), b.firings.len()), (2, 2));
    assert!(a.firings.iter().chain(&b.firings).all(|firing| firing.status == "succeeded"));
    // One more scan finds nothing new (run here rather than waited for on the monitor's timer).
    seed_agents_server::testing::triggers::chain::scan(runs::app(&server)).await.unwrap();
    assert_eq!(get(&user, &first.id).await.firings.len() + get(&user, &second.id).await.firings.len(), 4);
    assert_eq!(provider.request_count(), 5, "the user's turn and four triggered turns");
    server.stop().await;
}

/// `InvokeSessionTool` with `verb` on `address`, `content` and `options` (as JSON).
async fn verb(
    user: &User,
    session_id: &str,
    verb: InvokeSessionToolVerb,
    address: &str,
    content: Option<&str>,
    options: Option<serde_json::Value>,
) -> InvokeSessionToolResponse {
    let mut input = std::collections::BTreeMap::from([("address".to_owned(), Ipld::String(address.into()))]);
    if let Some(content) = content {
        input.insert("content".into(), Ipld::String(content.into()));
    }
    if let Some(options) = options {
        let options: Value = serde_json::from_value(options).unwrap();
        input.insert("options".into(), options.0);
    }
    let action = InvokeSessionTool { input: Value(Ipld::Map(input)), session_id: session_id.into(), verb };
    user.call(action).await.unwrap()
}

fn summary(response: &InvokeSessionToolResponse) -> String {
    let Some(Ipld::Map(fields)) = response.output.as_ref().map(Value::as_ipld) else {
        panic!("no output: {response:?}")
    };
    match fields.get("summary") {
        Some(Ipld::String(summary)) => summary.clone(),
        other => panic!("summary: {other:?}"),
    }
}

#[tokio::test]
async fn triggers_are_read_and_written_through_the_verbs_with_their_guards() {
    let provider = Provider::start().await;
    let (server, user, agent_id) = setup(&provider).await;
    let session_id = user.create_session(&agent_id, None).await;
    let (read, write) = (InvokeSessionToolVerb::Read, InvokeSessionToolVerb::Write);
    let listing = verb(&user, &session_id, read, "~/triggers/", None, None).await;
    assert_eq!(summary(&listing), "0 triggers, 0 active.");

    let every = |minutes: u32| {
        format!(
            r#"{{"source": {{"type": "schedule", "schedule": {{"kind": "interval", "every": {minutes}, "unit": "minutes"}}}}, "prompt": "Write the digest."}}"#
        )
    };
    let address = "~/triggers/Digest";
    let refused = verb(&user, &session_id, write, address, Some(&every(2)), None).await;
    assert!(refused.error.as_deref().unwrap().contains("frequentSchedule"), "{refused:?}");
    let dry =
        verb(&user, &session_id, write, address, Some(&every(10)), Some(serde_json::json!({"dryRun": true}))).await;
    assert!(summary(&dry).starts_with("Trigger Digest is valid; nothing was saved."), "{dry:?}");
    let listed = || user.call(ListAgentTriggers { agent_id: agent_id.clone() });
    assert!(listed().await.unwrap().triggers.is_empty(), "a dry run saves nothing");
    let frequent = Some(serde_json::json!({"frequentSchedule": true}));
    let created = verb(&user, &session_id, write, address, Some(&every(2)), frequent).await;
    assert_eq!(summary(&created), "Created trigger Digest (schedule).", "{created:?}");
    let triggers = listed().await.unwrap().triggers;
    assert_eq!((triggers.len(), triggers[0].name.as_str()), (1, "Digest"));

    // Changing the kind of source needs replaceSource; the name in the address wins.
    let mention = r#"{"source": {"type": "user-mention", "mentionedAccounts": ["zAlice"]}, "prompt": "Answer.", "name": "Ignored"}"#;
    let kept = verb(&user, &session_id, write, address, Some(mention), None).await;
    assert!(kept.error.as_deref().unwrap().contains("replaceSource"), "{kept:?}");
    let replace = Some(serde_json::json!({"replaceSource": true}));
    let replaced = verb(&user, &session_id, write, address, Some(mention), replace).await;
    assert_eq!(summary(&replaced), "Updated trigger Digest (user-mention).", "{replaced:?}");
    let triggers = listed().await.unwrap().triggers;
    assert_eq!((triggers.len(), triggers[0].name.as_str(), &triggers[0].source), (1, "Digest", &mention_of("zAlice")));

    // Read one; invalid sources get the protocol's messages; webhooks stay with people.
    let one = verb(&user, &session_id, read, address, None, None).await;
    assert_eq!(summary(&one), "Trigger Digest (user-mention, enabled).");
    let bad = r#"{"source": {"type": "user-mention", "mentionedAccounts": []}, "prompt": "x"}"#;
    let bad = verb(&user, &session_id, write, "~/triggers/Other", Some(bad), None).await;
    assert_eq!(bad.error.as_deref(), Some("Trigger mentioned account is required"));
    let hook = r#"{"source": {"type": "webhook"}, "prompt": "x"}"#;
    let hook = verb(&user, &session_id, write, "~/triggers/Hook", Some(hook), None).await;
    assert!(hook.error.as_deref().unwrap().starts_with("Webhook triggers are created by a person"), "{hook:?}");
    let missing = verb(&user, &session_id, read, "~/triggers/Nope", None, None).await;
    assert_eq!(summary(&missing), "No trigger named Nope.");

    let deleted = verb(&user, &session_id, write, address, None, Some(serde_json::json!({"delete": true}))).await;
    assert_eq!(summary(&deleted), "Deleted trigger Digest.");
    assert!(listed().await.unwrap().triggers.is_empty());
    server.stop().await;
}

fn mention_of(account: &str) -> AgentTriggerSource {
    mention(&[account])
}

/// A resolved `ListEvents` comment by `author` on a document of `owner` that mentions `mentioned`.
fn mention_event(cid: &str, author: &str, owner: &str, mentioned: &str, at: i64) -> serde_json::Value {
    let link = format!("hm://{mentioned}/:profile?v=bafyP&l");
    serde_json::json!({
        "id": cid, "type": "comment", "feedEventId": format!("blob-{cid}"), "eventAtMs": at,
        "author": {"id": {"uid": author, "id": format!("hm://{author}"), "path": []}, "metadata": {"name": author}},
        "comment": {
            "id": format!("{author}/z6tsid{cid}"), "version": cid, "author": author,
            "targetAccount": owner, "targetPath": "/notes", "targetVersion": "bafyDoc",
            "content": [{"block": {"type": "Paragraph", "id": "b1", "text": "\u{fffc} hi",
                "annotations": [{"type": "Embed", "starts": [0], "ends": [1], "link": link}]}, "children": []}],
            "visibility": "PUBLIC",
        },
        "commentId": {"id": format!("hm://{author}/z6tsid{cid}"), "uid": author},
        "target": {"id": {"uid": owner, "id": format!("hm://{owner}/notes?v=bafyDoc"), "path": ["notes"]},
                   "metadata": {"name": "Notes"}},
        "targetAuthorUids": [owner],
        "replyCount": 0,
    })
}

/// The server's own monitors: a mention on the Hypermedia feed fires the trigger once through
/// the firing table (session, prompt, background run answered by the scripted provider), later
/// polls fire nothing more, and a dry run of the same source counts what recent activity would
/// have fired without firing it.
#[tokio::test]
async fn the_activity_monitor_fires_a_mention_once_and_a_dry_run_replays_it() {
    const AGENT_ACCOUNT: &str = "z6MkAgentIdentity";
    const ALICE: &str = "z6MkAliceAccount";
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Text("done".into()));
    let hm = crate::support::hm::FakeHm::start().await;
    let hm_url = hm.url.clone();
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.hm_server_url = hm_url;
        config.trigger_poll_interval = Duration::from_millis(50);
    })
    .await;
    let user = server.user();
    let custom = custom_provider_config(provider.openai_base());
    user.call(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Watcher") }).await.unwrap().agent_id;
    // History from before the trigger is the baseline, never fired.
    let now = crate::support::now_ms();
    hm.push_events([mention_event("bafyOld", ALICE, ALICE, AGENT_ACCOUNT, now - 60_000)]);
    let (trigger, _) = create(&user, &agent_id, input("Mentions", mention(&[AGENT_ACCOUNT]))).await;
    until("a first poll succeeded", || async { get(&user, &trigger.id).await.trigger.last_checked_at.is_some() }).await;

    hm.push_events([mention_event("bafyNew", ALICE, ALICE, AGENT_ACCOUNT, now + 1)]);
    until("the mention's run succeeded", || async {
        get(&user, &trigger.id).await.firings.first().is_some_and(|firing| firing.status == "succeeded")
    })
    .await;
    let read = get(&user, &trigger.id).await;
    assert_eq!(read.firings.len(), 1, "{:?}", read.firings);
    assert_eq!(read.firings[0].activity_key, "blob-bafyNew");
    let session_id = read.firings[0].session_id.clone().unwrap();
    let session = user.call(GetSession { session_id, after_seq: None, before_seq: None, limit: None }).await.unwrap();
    let SessionEventPayload::MessageEvent(prompt) = &session.events[0].event else { panic!() };
    assert!(prompt.content.starts_with("Handle Mentions."), "{}", prompt.content);
    // More polls, nothing new: still one firing.
    let polls = hm.feed_requests().len();
    until("two more polls", || async { hm.feed_requests().len() >= polls + 2 }).await;
    assert_eq!(get(&user, &trigger.id).await.firings.len(), 1);

    // A dry run replays recent activity through a source without saving or firing.
    let session_id = user.create_session(&agent_id, None).await;
    let content = format!(
        r#"{{"source": {{"type": "user-mention", "mentionedAccounts": ["{AGENT_ACCOUNT}"]}}, "prompt": "Answer."}}"#
    );
    let dry = verb(
        &user,
        &session_id,
        InvokeSessionToolVerb::Write,
        "~/triggers/Probe",
        Some(&content),
        Some(serde_json::json!({"dryRun": true})),
    )
    .await;
    assert_eq!(
        summary(&dry),
        "Trigger Probe is valid; nothing was saved. Of the 100 most recent activity events, 2 would have fired it.",
        "{dry:?}"
    );
    assert_eq!(user.call(ListAgentTriggers { agent_id: agent_id.clone() }).await.unwrap().triggers.len(), 1);
    assert_eq!(get(&user, &trigger.id).await.firings.len(), 1);
    server.stop().await;
}
