//! The server in this process: on an ephemeral loopback port with a temporary data directory,
//! users with their own keys and SDK clients, and raw HTTP for what the SDK would never send.

use std::collections::BTreeMap;
use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{CreateAgent, CreateSession, SetModelProvider};
use seed_agents_protocol::{
    AccountId, Action, AgentId, AgentResponse, Ed25519Signer, Principal, SessionId, Signer, UnsignedEnvelope, wire,
};
use seed_agents_sdk::{Client, Error};
use seed_agents_server::{Clock, Config, ExecBackend, RunningServer};

use crate::fixtures::{definition, provider_config};

/// Sends a provider type's requests where a `--provider-url` value says (`google=http://…`,
/// `openai-subscription=http://…`): the scripted provider on loopback.
pub fn route_provider(config: &mut Config, provider_url: &str) {
    let parsed = seed_agents_server::testing::model::vendors::parse_provider_url(provider_url);
    config.provider_urls.push(parsed.unwrap_or_else(|error| panic!("--provider-url {provider_url}: {error}")));
}

/// A server on 127.0.0.1:0 with its own data directory (removed on drop).
pub struct TestServer {
    pub server: Option<RunningServer>,
    pub url: String,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

impl TestServer {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_in(dir).await
    }

    pub async fn start_in(dir: tempfile::TempDir) -> Self {
        Self::start_with(dir, |_| {}).await
    }

    /// The configuration a test server in `dir` starts with (before a test's own changes).
    pub fn config(dir: &std::path::Path) -> Config {
        let mut config = Config::new(dir, "127.0.0.1:0".parse().expect("address"));
        // Nothing leaves loopback: a test that talks to a Hypermedia server sets its fake here;
        // the others (the activity monitor included) reach a closed loopback port.
        config.hm_server_url = Self::CLOSED_HM_SERVER.to_owned();
        // No code sandbox unless a test asks for one (`ExecBackend::Namespaces`): the other tests'
        // tool listings and grants stay the same on hosts with and without bubblewrap.
        config.exec_backend = ExecBackend::Off;
        config.database_url = postgres_for(dir);
        config
    }

    /// A Hypermedia server address nothing listens on (the discard port on loopback).
    pub const CLOSED_HM_SERVER: &'static str = "http://127.0.0.1:9";

    /// A server whose configuration `adjust` changed first.
    pub async fn start_with(dir: tempfile::TempDir, adjust: impl FnOnce(&mut Config)) -> Self {
        Self::start_with_clock(dir, Clock::system(), adjust).await
    }

    /// [`Self::start_with`] on `clock` (a manual clock moves the server's time; sign with the
    /// same clock, or the envelopes fall outside its window).
    pub async fn start_with_clock(dir: tempfile::TempDir, clock: Clock, adjust: impl FnOnce(&mut Config)) -> Self {
        let mut config = Self::config(dir.path());
        adjust(&mut config);
        let server = RunningServer::start(config, clock).await.expect("server starts");
        let url = format!("http://{}", server.addr());
        Self { server: Some(server), url, dir, http: seed_agents_sdk::default_http_client().expect("http client") }
    }

    pub fn endpoint(&self) -> String {
        format!("{}/api/message", self.url)
    }

    /// A new user with a fresh key.
    pub fn user(&self) -> User {
        let signer = Ed25519Signer::generate().expect("key");
        User::new(&self.url, signer, None)
    }

    /// A new user with a fresh key that signs with `clock` (the server's manual clock, so its
    /// envelopes stay inside the server's window as the clock moves).
    pub fn user_on(&self, clock: &Clock) -> User {
        let signer = Ed25519Signer::generate().expect("key");
        let principal = signer.principal();
        let clock = clock.clone();
        let client = Client::builder(&self.url, Ed25519Signer::from_seed(&signer.seed()))
            .clock(Arc::new(move || clock.now_ms()))
            .build()
            .expect("client");
        User { signer: Arc::new(signer), id: AccountId::from(principal), principal, client: Arc::new(client) }
    }

    /// Posts raw bytes with a content type; returns status, headers and body.
    pub async fn post_raw(&self, content_type: &str, body: Vec<u8>) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
        let response = self
            .http
            .post(self.endpoint())
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body").to_vec();
        (status, headers, bytes)
    }

    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(server) = self.server.take() {
            server.shutdown().await.expect("clean shutdown");
        }
        self.dir
    }
}

/// One account: a key, its principal string, and an SDK client acting for it.
#[derive(Clone)]
pub struct User {
    pub signer: Arc<Ed25519Signer>,
    pub id: AccountId,
    pub principal: Principal,
    pub client: Arc<Client>,
}

impl User {
    pub fn new(url: &str, signer: Ed25519Signer, account: Option<Principal>) -> Self {
        let principal = signer.principal();
        let seed = signer.seed();
        let mut builder = Client::builder(url, Ed25519Signer::from_seed(&seed));
        if let Some(account) = account {
            builder = builder.account(account);
        }
        let client = builder.build().expect("client");
        let acting = account.unwrap_or(principal);
        Self { signer: Arc::new(signer), id: AccountId::from(acting), principal: acting, client: Arc::new(client) }
    }

    pub async fn call<A: Action>(&self, action: A) -> Result<A::Response, Error> {
        self.client.call(action).await
    }

    /// Signs an arbitrary action map (`_` included; `ts` added when missing) as this user.
    pub async fn sign_map(&self, mut action: BTreeMap<String, Ipld>, ts: i64, protocol: Option<u32>) -> Vec<u8> {
        action.entry("ts".to_owned()).or_insert(Ipld::Integer(ts.into()));
        let envelope = UnsignedEnvelope {
            signer: self.signer.principal(),
            account: self.principal,
            protocol,
            action: Ipld::Map(action),
        };
        envelope.sign(self.signer.as_ref()).await.expect("sign")
    }

    /// Creates a provider `main` (type openai) and an agent using it; returns the agent id.
    pub async fn create_agent(&self, name: &str) -> AgentId {
        self.ensure_provider().await;
        self.call(CreateAgent { client_request_id: None, definition: definition(name) })
            .await
            .expect("create agent")
            .agent_id
    }

    /// Creates a session of `agent_id` (no model override); returns the session id.
    pub async fn create_session(&self, agent_id: &str, title: Option<&str>) -> SessionId {
        let create = CreateSession {
            agent_id: agent_id.into(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: title.map(str::to_owned),
        };
        self.call(create).await.expect("create session").session_id
    }

    pub async fn ensure_provider(&self) {
        self.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.expect("provider");
    }
}

/// The status and message of an API error (panics on anything else).
pub fn api_error<T: std::fmt::Debug>(result: Result<T, Error>) -> (u16, String) {
    match result {
        Err(Error::Api { status, message, .. }) => (status, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Decodes an error body.
pub fn error_body(bytes: &[u8]) -> (String, Option<String>) {
    match wire::from_slice::<AgentResponse>(bytes).expect("CBOR error body") {
        AgentResponse::Error(error) => (error.message, error.code),
        other => panic!("expected an error body, got {other:?}"),
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// An action map with `_`.
pub fn action_map(name: &str, fields: &[(&str, Ipld)]) -> BTreeMap<String, Ipld> {
    let mut map = BTreeMap::new();
    map.insert("_".to_owned(), Ipld::String(name.to_owned()));
    for (key, value) in fields {
        map.insert((*key).to_owned(), value.clone());
    }
    map
}

/// The PostgreSQL cluster the black-box tests run against instead of SQLite: the one at
/// `SEED_AGENTS_TEST_POSTGRES_URL`, when `SEED_AGENTS_TEST_DATABASE=postgres` (docs/postgres.md;
/// `.ci/run` runs the suite both ways, with the URL set for the database layer's own tests in the
/// SQLite run too).
pub fn postgres_url() -> Option<String> {
    match std::env::var("SEED_AGENTS_TEST_DATABASE").as_deref() {
        Ok("postgres") => {}
        Ok("sqlite" | "") | Err(std::env::VarError::NotPresent) => return None,
        Ok(other) => panic!("SEED_AGENTS_TEST_DATABASE={other}: expected postgres or sqlite"),
        Err(error) => panic!("SEED_AGENTS_TEST_DATABASE: {error}"),
    }
    let url = std::env::var("SEED_AGENTS_TEST_POSTGRES_URL").ok().filter(|url| !url.is_empty());
    Some(url.expect("SEED_AGENTS_TEST_DATABASE=postgres needs SEED_AGENTS_TEST_POSTGRES_URL (scripts/pg-cluster.sh)"))
}

/// The database URL of a server whose data directory is `dir`: a schema of its own, named
/// after the directory (a server restarted in the same directory finds its rows again).
pub(crate) fn postgres_for(dir: &std::path::Path) -> Option<String> {
    use std::hash::{Hash, Hasher};
    let url = postgres_url()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    let schema = format!("t_{:016x}", hasher.finish());
    Some(seed_agents_server::testing::db::postgres_schema(&url, &schema).expect("the test PostgreSQL cluster answers"))
}
