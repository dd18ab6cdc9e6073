//! `ListProviderModels` against a fixture vendor on loopback that speaks the OpenAI, Anthropic and
//! Google model-list formats and records what it was sent.
//!
//! Pinned vendor types (openai, anthropic, google) cannot point at loopback, so the server's path is
//! driven through `custom` and `ollama` providers (OpenAI style); the Anthropic and Google request
//! shapes are exercised over the same loopback fixture through the server's own `fetch_models`
//! with its real outbound client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seed_agents_protocol::Bytes;
use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentCollaboratorRole, InviteAgentCollaborator, ListProviderModels, ModelProviderConfig,
    ModelProviderConfigAuthMode, ProviderModelInfo, SetModelProvider, SetSecret,
};
use seed_agents_server::testing::error::ErrorKind;
use seed_agents_server::testing::model::vendors::ModelListStyle;
use seed_agents_server::testing::providers::models::fetch_models;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{TestServer, User, api_error};

const KEY: &str = "sk-fixture-SECRET-7f3a";

/// One request the fixture received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: Option<String>,
    headers: BTreeMap<String, String>,
}

/// A vendor on 127.0.0.1: `/openai/models`, `/anthropic/v1/models` and `/google/models` answer
/// their vendor's format; anything under `/fail/` answers 500 with the request's credentials
/// echoed in the body, anything under `/garbage/` answers 200 with a body that is not JSON;
/// `/slow/models` never answers.
struct Fixture {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Fixture {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, recorder.clone()));
            }
        });
        Self { base, seen, task }
    }

    fn url(&self, prefix: &str) -> String {
        format!("{}/{prefix}", self.base)
    }

    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buffer.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buffer).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default();
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (target.to_owned(), None),
    };
    let headers: BTreeMap<String, String> = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let request = Seen { method, path: path.clone(), query: query.clone(), headers: headers.clone() };
    seen.lock().unwrap().push(request);

    let (status, body) = match path.as_str() {
        failing if failing.starts_with("/fail/") => {
            (500, format!("upstream broke; auth={:?} query={query:?}", headers.get("authorization")))
        }
        garbage if garbage.starts_with("/garbage/") => (200, "<html>not json".to_owned()),
        "/openai/models" => (200, r#"{"object":"list","data":[{"id":"gpt-5","object":"model"},{"id":"o3"},{"id":9}]}"#.to_owned()),
        "/anthropic/v1/models" => (
            200,
            r#"{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5"},{"id":"claude-bare"}],"has_more":false}"#
                .to_owned(),
        ),
        "/google/models" => (
            200,
            r#"{"models":[
                {"name":"models/gemini-2.5-pro","displayName":"Gemini 2.5 Pro","supportedGenerationMethods":["generateContent","countTokens"]},
                {"name":"models/text-embedding-004","displayName":"Embedding","supportedGenerationMethods":["embedContent"]},
                {"name":"models/gemini-plain"}
            ]}"#
            .to_owned(),
        ),
        "/slow/models" => {
            // A vendor slower than the server's timeout: the behaviour under test.
            tokio::time::sleep(Duration::from_secs(30)).await;
            return;
        }
        _ => (404, r#"{"error":"not found"}"#.to_owned()),
    };
    let reason = if status == 200 { "OK" } else { "Error" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn provider(type_: &str, base_url: Option<String>, api_key_secret: Option<&str>) -> ModelProviderConfig {
    ModelProviderConfig {
        extra: Default::default(),
        auth_mode: None,
        base_url,
        model_defaults: None,
        secret_refs: api_key_secret.map(|name| [("apiKey".to_owned(), name.to_owned())].into()),
        type_: type_.into(),
    }
}

async fn set_provider(user: &User, name: &str, config: ModelProviderConfig) {
    user.call(SetModelProvider { name: name.into(), provider: config }).await.unwrap();
}

async fn set_key(user: &User, name: &str, value: &str) {
    user.call(SetSecret { name: name.into(), value: Bytes(value.as_bytes().to_vec()), metadata: None }).await.unwrap();
}

fn list(provider: &str, agent_id: Option<&str>) -> ListProviderModels {
    ListProviderModels { provider: provider.into(), agent_id: agent_id.map(Into::into) }
}

fn models(list: &[(&str, &str)]) -> Vec<ProviderModelInfo> {
    list.iter()
        .map(|(id, name)| ProviderModelInfo { extra: Default::default(), id: (*id).into(), name: (*name).into() })
        .collect()
}

#[tokio::test]
async fn openai_style_sends_the_bearer_key_and_never_returns_it() {
    let fixture = Fixture::start().await;
    let server = TestServer::start().await;
    let user = server.user();
    set_key(&user, "local-key", KEY).await;
    set_provider(&user, "local", provider("custom", Some(fixture.url("openai/")), Some("local-key"))).await;

    let answer = user.call(list("local", None)).await.unwrap();
    assert_eq!(answer.models, models(&[("gpt-5", "gpt-5"), ("o3", "o3")]));
    assert!(!format!("{answer:?}").contains(KEY));

    let seen = fixture.take();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str(), &seen[0].query), ("GET", "/openai/models", &None));
    assert_eq!(seen[0].headers.get("authorization").map(String::as_str), Some(&*format!("Bearer {KEY}")));
    assert!(!seen[0].headers.contains_key("x-api-key"));
}

#[tokio::test]
async fn providers_without_a_key_send_no_authorization() {
    let fixture = Fixture::start().await;
    let server = TestServer::start().await;
    let user = server.user();
    set_provider(&user, "custom", provider("custom", Some(fixture.url("openai")), None)).await;
    set_provider(&user, "ollama", provider("ollama", Some(fixture.url("openai")), None)).await;

    for name in ["custom", "ollama"] {
        let answer = user.call(list(name, None)).await.unwrap();
        assert_eq!(answer.models, models(&[("gpt-5", "gpt-5"), ("o3", "o3")]), "{name}");
        let seen = fixture.take();
        assert_eq!(seen.len(), 1, "{name}");
        assert_eq!(seen[0].path, "/openai/models");
        assert!(!seen[0].headers.contains_key("authorization"), "{name}: {:?}", seen[0].headers);
    }
}

#[tokio::test]
async fn vendor_failures_are_bad_gateway_without_the_key() {
    let fixture = Fixture::start().await;
    let server = TestServer::start().await;
    let user = server.user();
    set_key(&user, "local-key", KEY).await;
    set_provider(&user, "fail", provider("custom", Some(fixture.url("fail")), Some("local-key"))).await;
    set_provider(&user, "garbage", provider("custom", Some(fixture.url("garbage")), Some("local-key"))).await;
    // A port nothing listens on: bind, note the port, close.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    set_provider(&user, "gone", provider("custom", Some(format!("http://{closed}/v1")), Some("local-key"))).await;

    // Each failure names the provider's type and base URL, never a vendor it is not.
    for (name, message) in [
        ("fail", format!("custom provider at {}: models request failed: HTTP 500", fixture.url("fail"))),
        ("garbage", format!("custom provider at {}: models response is invalid", fixture.url("garbage"))),
        ("gone", format!("custom provider at http://{closed}/v1: models request failed: unreachable")),
    ] {
        let (status, got) = api_error(user.call(list(name, None)).await);
        assert_eq!((status, got.as_str()), (502, message.as_str()), "{name}");
        assert!(!got.contains(KEY));
    }
    // The 500 body echoed the key; none of it reached the client.
    assert_eq!(fixture.take().len(), 2);
}

#[tokio::test]
async fn missing_keys_and_unknown_providers() {
    let server = TestServer::start().await;
    let user = server.user();
    // Pinned vendors: every case below fails before any request leaves the server.
    set_provider(&user, "no-ref", provider("anthropic", None, None)).await;
    set_provider(&user, "no-secret", provider("openai", None, Some("never-set"))).await;
    set_provider(
        &user,
        "custom-no-secret",
        provider("custom", Some("http://127.0.0.1:9/v1".into()), Some("never-set")),
    )
    .await;

    for (name, status, message) in [
        ("no-ref", 400, "anthropic API key is not configured"),
        ("no-secret", 400, "Required secret is not configured"),
        ("custom-no-secret", 400, "Required secret is not configured"),
        ("missing", 404, "Model provider not found"),
        ("  ", 400, "Model provider is required"),
    ] {
        let (got_status, got) = api_error(user.call(list(name, None)).await);
        assert_eq!((got_status, got.as_str()), (status, message), "{name:?}");
    }
    // Another account's provider is not found either.
    let other = server.user();
    let (status, message) = api_error(other.call(list("no-ref", None)).await);
    assert_eq!((status, message.as_str()), (404, "Model provider not found"));
}

#[tokio::test]
async fn agent_id_lists_the_owners_provider_for_readers_only() {
    let fixture = Fixture::start().await;
    let server = TestServer::start().await;
    let owner = server.user();
    let agent_id = owner.create_agent("Helper").await;
    set_key(&owner, "local-key", KEY).await;
    set_provider(&owner, "local", provider("custom", Some(fixture.url("openai")), Some("local-key"))).await;

    let friend = server.user();
    let invite = InviteAgentCollaborator {
        agent_id: agent_id.clone(),
        account_id: friend.id.clone(),
        role: AgentCollaboratorRole::Reader,
    };
    owner.call(invite).await.unwrap();
    friend.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await.unwrap();

    let answer = friend.call(list("local", Some(&agent_id))).await.unwrap();
    assert_eq!(answer.models, models(&[("gpt-5", "gpt-5"), ("o3", "o3")]));
    assert!(!format!("{answer:?}").contains(KEY));
    // The owner's key was used, for the owner's provider.
    let seen = fixture.take();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers.get("authorization").map(String::as_str), Some(&*format!("Bearer {KEY}")));

    // Without agentId the friend's own account has no such provider.
    let (status, message) = api_error(friend.call(list("local", None)).await);
    assert_eq!((status, message.as_str()), (404, "Model provider not found"));
    // A stranger cannot see the agent at all.
    let stranger = server.user();
    let (status, message) = api_error(stranger.call(list("local", Some(&agent_id))).await);
    assert_eq!((status, message.as_str()), (404, "Agent not found"));
    assert!(fixture.take().is_empty());
}

#[tokio::test]
async fn subscription_providers_answer_the_fixed_list() {
    let server = TestServer::start().await;
    let user = server.user();
    let config = ModelProviderConfig {
        extra: Default::default(),
        auth_mode: Some(ModelProviderConfigAuthMode::Subscription),
        base_url: None,
        model_defaults: None,
        secret_refs: Some([("oauth".to_owned(), "openai-subscription-oauth".to_owned())].into()),
        type_: "openai".into(),
    };
    set_provider(&user, "chatgpt", config).await;
    let answer = user.call(list("chatgpt", None)).await.unwrap();
    assert_eq!(
        answer.models,
        models(&[
            ("gpt-5.6-sol", "GPT-5.6 Sol"),
            ("gpt-5.6-terra", "GPT-5.6 Terra"),
            ("gpt-5.6-luna", "GPT-5.6 Luna"),
            ("gpt-5.5", "GPT-5.5"),
            ("gpt-5.4", "GPT-5.4"),
        ])
    );
}

/// The Anthropic and Google shapes, over loopback with the server's real outbound client.
#[tokio::test]
async fn anthropic_and_google_styles_over_loopback() {
    let fixture = Fixture::start().await;
    let server = TestServer::start().await;
    let http = server.server.as_ref().unwrap().app().http.clone();
    let timeout = Duration::from_secs(10);

    let answer =
        fetch_models(&http, ModelListStyle::Anthropic, &fixture.url("anthropic"), Some(KEY), timeout).await.unwrap();
    assert_eq!(answer, models(&[("claude-sonnet-4-5", "Claude Sonnet 4.5"), ("claude-bare", "claude-bare")]));
    let seen = fixture.take();
    assert_eq!(seen[0].path, "/anthropic/v1/models");
    assert_eq!(seen[0].headers.get("x-api-key").map(String::as_str), Some(KEY));
    assert_eq!(seen[0].headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
    assert!(!seen[0].headers.contains_key("authorization"));

    let answer =
        fetch_models(&http, ModelListStyle::Google, &fixture.url("google/"), Some(KEY), timeout).await.unwrap();
    assert_eq!(answer, models(&[("gemini-2.5-pro", "Gemini 2.5 Pro"), ("gemini-plain", "gemini-plain")]));
    let seen = fixture.take();
    assert_eq!(seen[0].path, "/google/models");
    assert_eq!(seen[0].query.as_deref(), Some(&*format!("key={KEY}")));
    assert!(!seen[0].headers.contains_key("authorization") && !seen[0].headers.contains_key("x-api-key"));

    // Failures name the vendor's label, never the key (Google's sits in the URL).
    let error =
        fetch_models(&http, ModelListStyle::Google, &fixture.url("fail"), Some(KEY), timeout).await.unwrap_err();
    assert_eq!((error.kind(), error.message()), (ErrorKind::Upstream, "Google models request failed: HTTP 500"));
    let error =
        fetch_models(&http, ModelListStyle::Anthropic, &fixture.url("garbage"), Some(KEY), timeout).await.unwrap_err();
    assert_eq!((error.kind(), error.message()), (ErrorKind::Upstream, "Anthropic models response is invalid"));
    let error =
        fetch_models(&http, ModelListStyle::Google, &fixture.url("slow"), Some(KEY), Duration::from_millis(300))
            .await
            .unwrap_err();
    assert_eq!((error.kind(), error.message()), (ErrorKind::Upstream, "Google models request failed: timed out"));
    assert!(!format!("{error} {error:?}").contains(KEY));
}
