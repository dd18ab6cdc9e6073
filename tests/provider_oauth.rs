//! "Sign in with ChatGPT" end to end (docs/runtime.md §1.3): a real server with
//! `--subscription-auth`, a fake OAuth issuer and the scripted provider's subscription backend on
//! loopback. Sign-ins by redirect URL and by pasted code, every way one can fail, then turns on
//! the subscription: the token sent, refreshed ahead of expiry, after a 401, once for two turns,
//! and a refused refresh that asks the owner to sign in again.

use std::time::Duration;

use seed_agents_protocol::generated::{
    CancelProviderOAuth, CreateAgent, GetProviderOAuthStatus, ListModelProviders, ListRuns, ModelProviderConfig,
    ModelProviderConfigAuthMode, ProviderOAuthStatusResponseStatus, RedactedModelProviderAuthStatus, SetModelProvider,
    StartProviderOAuth, SubmitProviderOAuthCode,
};
use seed_agents_protocol::{LoginId, SessionId};
use seed_agents_sdk::ErrorCode;
use serde_json::Value;

use crate::support::oauth::{ACCOUNT_ID, Issuer};
use crate::support::provider::{Gate, Provider, Script};
use crate::support::wait;
use crate::support::{TestServer, User, api_error, definition, say};

const SECRET: &str = "openai-subscription-oauth";
const MODEL: &str = "gpt-5.1-codex";

/// A server offering sign-in against `issuer`, its subscription turns going to `provider`.
async fn server(issuer: &Issuer, provider: &Provider) -> TestServer {
    let (issuer_url, codex) = (issuer.url(), provider.codex_base());
    TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.subscription_auth = true;
        config.oauth_issuer_url = issuer_url;
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
        crate::support::route_provider(config, &format!("openai-subscription={codex}"));
    })
    .await
}

async fn start(user: &User) -> (LoginId, String) {
    let started = user.call(StartProviderOAuth { provider_type: "openai".into() }).await.unwrap();
    (started.login_id, started.auth_url)
}

async fn status(
    user: &User,
    login_id: &LoginId,
) -> (ProviderOAuthStatusResponseStatus, Option<String>, Option<String>) {
    let got = user.call(GetProviderOAuthStatus { login_id: login_id.clone() }).await.unwrap();
    assert_eq!(&got.login_id, login_id);
    (got.status, got.secret_name, got.error)
}

async fn submit(user: &User, login_id: &LoginId, code: &str) -> Result<(), (u16, String)> {
    let submitted = user.call(SubmitProviderOAuthCode { login_id: login_id.clone(), code: code.into() }).await;
    submitted.map(|_| ()).map_err(|error| api_error::<()>(Err(error)))
}

/// Signs `user` in by redirect URL, as the desktop client does.
async fn sign_in(user: &User, issuer: &Issuer) {
    let (login_id, auth_url) = start(user).await;
    submit(user, &login_id, &issuer.authorize(&auth_url)).await.unwrap();
    assert_eq!(
        status(user, &login_id).await,
        (ProviderOAuthStatusResponseStatus::Completed, Some(SECRET.into()), None)
    );
}

/// Signs `user` in with a token that expires within the refresh margin; the tokens a refresh
/// hands out afterwards live an hour.
async fn sign_in_expiring_soon(user: &User, issuer: &Issuer) {
    issuer.set_expires_in(60);
    sign_in(user, issuer).await;
    issuer.set_expires_in(3600);
}

fn subscription() -> ModelProviderConfig {
    ModelProviderConfig {
        extra: Default::default(),
        auth_mode: Some(ModelProviderConfigAuthMode::Subscription),
        base_url: None,
        model_defaults: None,
        secret_refs: Some([("oauth".to_owned(), SECRET.to_owned())].into()),
        type_: "openai".into(),
    }
}

/// The subscription provider `main` and an agent on it; a session of it.
async fn agent(user: &User) -> SessionId {
    user.call(SetModelProvider { name: "main".into(), provider: subscription() }).await.unwrap();
    let definition = seed_agents_protocol::generated::AgentDefinition { model: MODEL.into(), ..definition("Codex") };
    let agent_id = user.call(CreateAgent { client_request_id: None, definition }).await.unwrap().agent_id;
    user.create_session(&agent_id, None).await
}

async fn auth_status(user: &User) -> Option<RedactedModelProviderAuthStatus> {
    let listed = user.call(ListModelProviders { agent_id: None }).await.unwrap();
    listed.providers.into_iter().find(|provider| provider.name == "main").and_then(|provider| provider.auth_status)
}

fn bearer(request: &crate::support::provider::Recorded) -> String {
    request.header("authorization").strip_prefix("Bearer ").unwrap_or_default().to_owned()
}

async fn last_run_error(user: &User, session_id: &SessionId) -> (String, String) {
    let runs = user
        .call(ListRuns {
            root_run_id: None,
            session_id: Some(session_id.clone()),
            agent_id: None,
            limit: None,
            status: None,
        })
        .await
        .unwrap()
        .runs;
    let error = runs.into_iter().find_map(|run| run.error).expect("a failed run");
    (error.code, error.message)
}

#[tokio::test]
async fn sign_in_is_offered_only_when_the_server_allows_it() {
    let server = TestServer::start().await;
    let user = server.user();
    let (status, message) = api_error(user.call(StartProviderOAuth { provider_type: "openai".into() }).await);
    assert_eq!((status, message.as_str()), (403, "Subscription sign-in is not enabled on this server"));
    let health = server.http.get(format!("{}/api/health", server.url)).send().await.unwrap().bytes().await.unwrap();
    let health: Value = serde_json::from_slice(&health).unwrap();
    assert_eq!(health["subscriptionAuth"], false);
    // Without a sign-in there is nothing to look at.
    let unknown = LoginId::from("no-such-login");
    let (status, message) = api_error(user.call(GetProviderOAuthStatus { login_id: unknown.clone() }).await);
    assert_eq!((status, message.as_str()), (404, "Sign-in not found"));

    let (issuer, provider) = (Issuer::start().await, Provider::start().await);
    let offered = self::server(&issuer, &provider).await;
    let health = offered.http.get(format!("{}/api/health", offered.url)).send().await.unwrap().bytes().await.unwrap();
    let health: Value = serde_json::from_slice(&health).unwrap();
    assert_eq!(health["subscriptionAuth"], true);
    let user = offered.user();
    let (status, message) = api_error(user.call(StartProviderOAuth { provider_type: "anthropic".into() }).await);
    assert_eq!((status, message.as_str()), (400, "Provider type does not support subscription sign-in: anthropic"));
}

/// The redirect URL and the bare code both complete a sign-in; the credentials become the
/// account's secret, the provider reads `ok`, and a turn goes to the subscription backend with
/// the access token and the ChatGPT account.
#[tokio::test]
async fn a_sign_in_by_redirect_or_by_pasted_code_runs_turns_on_the_subscription() {
    let (issuer, provider) = (Issuer::start().await, Provider::start().await);
    let server = server(&issuer, &provider).await;
    let user = server.user();
    let session_id = agent(&user).await;
    assert_eq!(auth_status(&user).await, Some(RedactedModelProviderAuthStatus::NeedsLogin));
    // Not signed in: the turn asks for a sign-in.
    let refused = user.call(say(&session_id, "hello")).await;
    let Err(seed_agents_sdk::Error::Api { status: 400, code: Some(ErrorCode::SignInRequired), .. }) = refused else {
        panic!("a sign-in is asked for: {refused:?}")
    };
    assert_eq!(last_run_error(&user, &session_id).await.0, "sign-in-required");
    assert_eq!(provider.request_count(), 0);

    let (login_id, auth_url) = start(&user).await;
    assert_eq!(status_of(&user, &login_id).await, ProviderOAuthStatusResponseStatus::Pending);
    let redirect = issuer.authorize(&auth_url);
    // The user pastes just the code.
    submit(&user, &login_id, &Issuer::code_of(&redirect)).await.unwrap();
    assert_eq!(
        status(&user, &login_id).await,
        (ProviderOAuthStatusResponseStatus::Completed, Some(SECRET.into()), None)
    );
    let exchange = &issuer.requests()[0];
    assert_eq!(exchange["grant_type"], "authorization_code");
    assert_eq!(auth_status(&user).await, Some(RedactedModelProviderAuthStatus::Ok));

    provider.push(Script::text("Hi from the plan."));
    user.call(say(&session_id, "hello")).await.unwrap();
    let request = provider.requests().pop().unwrap();
    assert_eq!(request.path, "/backend-api/codex/responses");
    assert_eq!(bearer(&request), Issuer::access_token(0));
    assert_eq!(request.header("chatgpt-account-id"), ACCOUNT_ID);
    assert_eq!(request.header("originator"), "seed-agents");
    assert_eq!(request.body["model"], MODEL);
    assert_eq!(request.body["store"], false);
    assert!(request.body.get("max_output_tokens").is_none(), "{}", request.body);
    assert_eq!(request.body["include"], serde_json::json!(["reasoning.encrypted_content"]));
    assert_eq!(issuer.refreshes(), 0, "a fresh token is not refreshed");

    // A second sign-in by redirect overwrites the secret in place.
    sign_in(&user, &issuer).await;
    provider.push(Script::text("Again."));
    user.call(say(&session_id, "again")).await.unwrap();
    assert_eq!(bearer(&provider.requests().pop().unwrap()), Issuer::access_token(1));
}

async fn status_of(user: &User, login_id: &LoginId) -> ProviderOAuthStatusResponseStatus {
    status(user, login_id).await.0
}

#[tokio::test]
async fn sign_ins_that_fail() {
    let (issuer, provider) = (Issuer::start().await, Provider::start().await);
    let server = server(&issuer, &provider).await;
    let (user, other) = (server.user(), server.user());

    // A redirect of another sign-in (a foreign `state`) fails this one.
    let (login_id, auth_url) = start(&user).await;
    let redirect = issuer.authorize(&auth_url);
    let forged = redirect.replace("state=", "state=forged");
    let (code, message) = submit(&user, &login_id, &forged).await.unwrap_err();
    assert_eq!(code, 400, "{message}");
    assert!(message.starts_with("State mismatch"), "{message}");
    assert_eq!(
        status(&user, &login_id).await,
        (ProviderOAuthStatusResponseStatus::Failed, None, Some("State mismatch".into()))
    );
    let (code, message) = submit(&user, &login_id, &redirect).await.unwrap_err();
    assert_eq!(code, 400);
    assert!(message.starts_with("Sign-in is no longer pending"), "{message}");

    // Another account sees nothing of it.
    let (login_id, auth_url) = start(&user).await;
    let (status_code, message) = api_error(other.call(GetProviderOAuthStatus { login_id: login_id.clone() }).await);
    assert_eq!((status_code, message.as_str()), (404, "Sign-in not found"));
    let (status_code, _) = submit(&other, &login_id, &issuer.authorize(&auth_url)).await.unwrap_err();
    assert_eq!(status_code, 404);
    let (status_code, _) = api_error(other.call(CancelProviderOAuth { login_id: login_id.clone() }).await);
    assert_eq!(status_code, 404);
    // An empty paste leaves it waiting.
    let (status_code, message) = submit(&user, &login_id, "  ").await.unwrap_err();
    assert_eq!((status_code, message.as_str()), (400, "Authorization code is required"));
    assert_eq!(status_of(&user, &login_id).await, ProviderOAuthStatusResponseStatus::Pending);

    // A new sign-in replaces the pending one.
    let (second, auth_url) = start(&user).await;
    assert_eq!(
        status(&user, &login_id).await,
        (ProviderOAuthStatusResponseStatus::Failed, None, Some("Replaced by a new sign-in".into()))
    );
    // A code the issuer does not know is refused, and the sign-in fails.
    let (status_code, message) = submit(&user, &second, "made-up-code").await.unwrap_err();
    assert_eq!(status_code, 400);
    assert!(message.starts_with("Token exchange failed: Unknown or used code"), "{message}");
    assert_eq!(status_of(&user, &second).await, ProviderOAuthStatusResponseStatus::Failed);
    let _ = auth_url;

    // Cancel: the sign-in fails, and its redirect arriving later is refused.
    let (third, auth_url) = start(&user).await;
    let canceled = user.call(CancelProviderOAuth { login_id: third.clone() }).await.unwrap();
    assert_eq!(canceled.login_id, third);
    assert_eq!(
        status(&user, &third).await,
        (ProviderOAuthStatusResponseStatus::Failed, None, Some("Sign-in canceled".into()))
    );
    assert_eq!(submit(&user, &third, &issuer.authorize(&auth_url)).await.unwrap_err().0, 400);
    // None of it stored credentials.
    assert!(issuer.requests().iter().all(|form| form["grant_type"] == "authorization_code"));
    let session_id = agent(&user).await;
    assert_eq!(auth_status(&user).await, Some(RedactedModelProviderAuthStatus::NeedsLogin));
    let _ = api_error(user.call(say(&session_id, "hello")).await);
    assert_eq!(provider.request_count(), 0);
}

/// A token about to expire is refreshed before the turn; a token the backend refuses is
/// refreshed once and the step sent again.
#[tokio::test]
async fn tokens_are_refreshed_ahead_of_expiry_and_after_a_401() {
    let (issuer, provider) = (Issuer::start().await, Provider::start().await);
    let server = server(&issuer, &provider).await;
    let user = server.user();
    let session_id = agent(&user).await;
    sign_in_expiring_soon(&user, &issuer).await;
    provider.push(Script::text("Fresh."));
    user.call(say(&session_id, "one")).await.unwrap();
    assert_eq!(issuer.refreshes(), 1);
    let refresh = issuer.requests().pop().unwrap();
    assert_eq!(refresh["grant_type"], "refresh_token");
    assert_eq!(refresh["refresh_token"], Issuer::refresh_token(0));
    assert_eq!(bearer(&provider.requests().pop().unwrap()), Issuer::access_token(1));
    // The refreshed credentials were stored: the next turn uses them as they are.
    provider.push(Script::text("Still fresh."));
    user.call(say(&session_id, "two")).await.unwrap();
    assert_eq!(issuer.refreshes(), 1);
    assert_eq!(bearer(&provider.requests().pop().unwrap()), Issuer::access_token(1));

    // The backend refuses the token: one refresh, the step again with the new token.
    provider.push(Script::status(401).message("token revoked"));
    provider.push(Script::text("After the refresh."));
    user.call(say(&session_id, "three")).await.unwrap();
    assert_eq!(issuer.refreshes(), 2);
    let requests = provider.requests();
    let [.., refused, retried] = requests.as_slice() else { panic!("two requests") };
    assert_eq!((bearer(refused), bearer(retried)), (Issuer::access_token(1), Issuer::access_token(2)));
    // Refused twice in a row: the owner must sign in again.
    provider.push(Script::status(401).message("no plan"));
    provider.push(Script::status(401).message("no plan"));
    let (status, message) = api_error(user.call(say(&session_id, "four")).await);
    assert_eq!(status, 400, "{message}");
    assert_eq!(last_run_error(&user, &session_id).await.0, "sign-in-required");
}

/// A refresh token the issuer refuses ends the sign-in: the turn fails with `sign-in-required`,
/// the provider lists `needs-login`, no further refresh is tried, and a new sign-in mends it.
#[tokio::test]
async fn a_refused_refresh_asks_the_owner_to_sign_in_again() {
    let (issuer, provider) = (Issuer::start().await, Provider::start().await);
    let server = server(&issuer, &provider).await;
    let user = server.user();
    let session_id = agent(&user).await;
    sign_in_expiring_soon(&user, &issuer).await;
    issuer.refuse_refresh(true);
    let (status, message) = api_error(user.call(say(&session_id, "one")).await);
    assert_eq!(status, 400);
    assert!(message.contains("sign in with ChatGPT again"), "{message}");
    assert_eq!(last_run_error(&user, &session_id).await.0, "sign-in-required");
    assert_eq!(auth_status(&user).await, Some(RedactedModelProviderAuthStatus::NeedsLogin));
    assert_eq!(provider.request_count(), 0);
    let _ = api_error(user.call(say(&session_id, "two")).await);
    assert_eq!(issuer.refreshes(), 1, "a sign-in known to have ended is not refreshed again");

    issuer.refuse_refresh(false);
    issuer.set_expires_in(3600);
    sign_in(&user, &issuer).await;
    assert_eq!(auth_status(&user).await, Some(RedactedModelProviderAuthStatus::Ok));
    provider.push(Script::text("Back."));
    user.call(say(&session_id, "three")).await.unwrap();
}

/// Two turns that both find the token about to expire share one refresh.
#[tokio::test]
async fn two_turns_share_one_refresh() {
    let (issuer, provider) = (Issuer::start().await, Provider::start().await);
    let server = server(&issuer, &provider).await;
    let user = server.user();
    let first = agent(&user).await;
    let got = user
        .call(seed_agents_protocol::generated::GetSession {
            session_id: first.clone(),
            after_seq: None,
            before_seq: None,
            limit: None,
        })
        .await
        .unwrap();
    let agent_id = got.session.agent_id;
    let second = user.create_session(&agent_id, None).await;
    sign_in_expiring_soon(&user, &issuer).await;
    let gate = Gate::new();
    issuer.hold_refreshes(&gate);
    provider.set_fallback(crate::support::provider::Fallback::Text("Done.".into()));
    let one = tokio::spawn({
        let (user, first) = (user.clone(), first.clone());
        async move { user.call(say(&first, "one")).await }
    });
    let two = tokio::spawn({
        let (user, second) = (user.clone(), second.clone());
        async move { user.call(say(&second, "two")).await }
    });
    // Both turns run while the first refresh is held.
    wait::until_true("a refresh in flight", || issuer.refreshes() == 1).await;
    wait::until("both runs started", || {
        let (user, agent_id) = (user.clone(), agent_id.clone());
        async move {
            let runs = user
                .call(ListRuns {
                    root_run_id: None,
                    session_id: None,
                    agent_id: Some(agent_id.clone()),
                    limit: None,
                    status: None,
                })
                .await;
            runs.is_ok_and(|runs| runs.runs.len() == 2)
        }
    })
    .await;
    gate.open();
    one.await.unwrap().unwrap();
    two.await.unwrap().unwrap();
    assert_eq!(issuer.refreshes(), 1);
    let tokens: Vec<String> = provider.requests().iter().map(bearer).collect();
    assert_eq!(tokens, vec![Issuer::access_token(1); 2]);
}

/// A sign-in nobody finished in 10 minutes times out: its status says so, and its code arriving
/// later is refused. (The server and the client share a manual clock.)
#[tokio::test]
async fn an_unfinished_sign_in_times_out_after_ten_minutes() {
    let issuer = Issuer::start().await;
    let clock = seed_agents_server::Clock::manual(crate::support::now_ms());
    let issuer_url = issuer.url();
    let server = TestServer::start_with_clock(tempfile::tempdir().unwrap(), clock.clone(), |config| {
        config.subscription_auth = true;
        config.oauth_issuer_url = issuer_url;
    })
    .await;
    let signer = seed_agents_protocol::Ed25519Signer::generate().unwrap();
    let client = seed_agents_sdk::Client::builder(&server.url, signer)
        .clock(std::sync::Arc::new({
            let clock = clock.clone();
            move || clock.now_ms()
        }))
        .build()
        .unwrap();
    let started = client.start_provider_oauth(StartProviderOAuth { provider_type: "openai".into() }).await.unwrap();
    assert_eq!(started.expires_at, clock.now_ms() + 10 * 60 * 1000);
    let login_id = started.login_id;
    let read = || client.get_provider_oauth_status(GetProviderOAuthStatus { login_id: login_id.clone() });
    clock.advance(10 * 60 * 1000 - 1);
    assert_eq!(read().await.unwrap().status, ProviderOAuthStatusResponseStatus::Pending);
    clock.advance(1);
    let timed_out = read().await.unwrap();
    assert_eq!(
        (timed_out.status, timed_out.error.as_deref()),
        (ProviderOAuthStatusResponseStatus::Failed, Some("Sign-in timed out"))
    );
    let redirect = issuer.authorize(&started.auth_url);
    let late =
        client.submit_provider_oauth_code(SubmitProviderOAuthCode { login_id: login_id.clone(), code: redirect });
    let Err(seed_agents_sdk::Error::Api { status: 400, code: Some(code), .. }) = late.await else {
        panic!("a late code is refused")
    };
    assert_eq!(code.as_str(), "sign_in_ended");
    assert!(issuer.requests().is_empty(), "nothing was exchanged");
    // Ten more minutes after it ended, it is forgotten (at the account's next sign-in).
    clock.advance(10 * 60 * 1000 + 1);
    client.start_provider_oauth(StartProviderOAuth { provider_type: "openai".into() }).await.unwrap();
    let forgotten = read().await;
    assert!(matches!(forgotten, Err(seed_agents_sdk::Error::Api { status: 404, .. })), "{forgotten:?}");
}
