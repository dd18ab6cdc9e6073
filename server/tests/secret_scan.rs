//! No secret leaks: the real `seed-agents-server` binary, logging at `debug`, runs a whole scripted
//! session, and then everything it produced is searched for the secrets it was given or made.
//!
//! The secrets: an API key (a UTF-8 `sk-…` string, sent to the fake vendor), a 48-byte binary
//! secret, the 32-byte seed of an imported signing identity, the seed the server generated for a
//! created one (read back after the run by decrypting its row), a webhook trigger's secret and
//! the one its rotation made (each may appear only in the one response that hands it over; the
//! webhook calls signed with them carry HMACs, never the secret), the access and refresh tokens
//! of a "Sign in with ChatGPT" (a fake issuer hands out tokens that expire within the refresh
//! margin, so the subscription turn refreshes them first), an MCP server's token (a secret header
//! value, which must reach the test MCP server and nothing else), and the server's own
//! `secret.key`. Each is looked for as raw bytes, lower and upper hex, base64 (standard and
//! URL-safe), base58btc, base32 and Rust's `{:?}` of a byte list; any 16-byte window of a form
//! counts (32 or 40 for the low-entropy `{:?}` forms), so a truncated print is found too
//! (`secret_scan/needles.rs`).
//!
//! Where: every HTTP response (status, headers, body, refusals included), the server's whole
//! stderr at `RUST_LOG=debug`, every file under the data directory (read while the server runs,
//! so the WAL is there, and again after a clean SIGTERM stop; only `secret.key` may hold the
//! server key), and every request the fake Hypermedia server received (public keys may go there,
//! seeds never). The fake vendor must receive the API key in its `Authorization` header, the one
//! place it may go, and no other secret; one of its paths answers 500 with the whole request
//! (key included) echoed in the body, which must not travel on. Its subscription backend must
//! receive the refreshed access token the same way, and the issuer only the first refresh token.

mod needles;
mod recorder;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ipld_core::ipld::Ipld;
use rusqlite::{Connection, OpenFlags, params};
use seed_agents_protocol::generated::{
    AgentDefinition, AgentTriggerPatch, AgentTriggerSource, AppendFileUploadChunk, BeginFileUpload, CommitFileUpload,
    CreateAgent, CreateAgentTrigger, CreateSession, CreateSigningIdentity, FileUploadTarget, GetAgent, GetAgentTrigger,
    GetProviderOAuthStatus, GetSession, ImportSigningIdentity, InvokeSessionTool, InvokeSessionToolVerb,
    ListAgentMemory, ListAgentTriggers, ListAgents, ListMcpServers, ListModelProviders, ListProviderModels,
    ListSessions, ListSigningIdentities, McpServerConfig, McpServerStatusState, MemoryUploadTarget,
    ModelProviderConfig, ModelProviderConfigAuthMode, ReadAgentMemoryFile, ReadSessionAttachment, RefreshMcpServer,
    SessionAttachmentUploadTarget, SetMcpServer, SetModelProvider, SetSecret, StartProviderOAuth,
    SubmitProviderOAuthCode, UpdateAgentTrigger, UpdateSigningIdentity, UploadAgentMemoryFileToIpfs, WebhookSource,
    WriteAgentMemoryFile, WriteAgentMemoryFileContent,
};
use seed_agents_protocol::{
    Action, AgentResponse, Bytes, Ed25519Signer, Principal, Response, Signer as _, Value, wire,
};
use seed_agents_sdk::Client;
use seed_agents_server::testing::secrets::crypto::SecretKey;

use needles::Needles;
use recorder::Fake;

use crate::support::fixtures;
use crate::support::mcp::TestMcpServer;
use crate::support::process::{Launch, ServerProcess};
use crate::support::webhook;

#[tokio::test]
async fn no_secret_reaches_a_response_a_log_line_a_file_or_the_hypermedia_server() {
    let secrets = Secrets::generate();
    let vendor = Fake::start(vendor_answer).await;
    let hm = Fake::start(hm_answer).await;
    let issuer = Fake::start(issuer_answer).await;
    let mcp = TestMcpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let log = dir.path().join("stderr.log");
    // Private networks allowed: the test MCP server is on loopback.
    let launch = Launch::new(crate::SERVER_BIN, &data_dir, &log)
        .arg("--hm-server-url")
        .arg(hm.url.clone())
        .arg("--allow-private-network")
        .arg("--subscription-auth")
        .arg("--oauth-issuer-url")
        .arg(issuer.url.clone())
        .arg("--provider-url")
        .arg(format!("openai-subscription={}/backend-api/codex", vendor.url))
        .log_level("debug");
    let server = ServerProcess::start(&launch).await;
    let mut script = Script::new(&server.url);

    let created = run_session(&mut script, &secrets, &vendor.url, &mcp.http_url()).await;
    subscription_session(&mut script, &secrets).await;

    // The MCP server got the token in the header the secret fills, the one place it may go.
    let token = format!("Bearer {}", secrets.mcp_token);
    assert!(
        mcp.headers().iter().any(|headers| headers.get("authorization").is_some_and(|value| *value == *token)),
        "the MCP server never got its token"
    );
    assert!(mcp.calls().iter().any(|(name, _)| name == "echo"), "the MCP tool was never called");

    // The vendor got the key where it belongs, and the scan can see it there.
    let vendor_requests = vendor.requests();
    let bearer = format!("authorization: Bearer {}", secrets.api_key);
    assert!(
        vendor_requests
            .iter()
            .any(|request| String::from_utf8_lossy(request).to_lowercase().contains(&bearer.to_lowercase())),
        "the vendor never got the key in its Authorization header"
    );
    // The fake Hypermedia server got the created identity's blobs, signed by its public key.
    let created_account = Principal::from_str(created.account_id.as_deref().unwrap()).unwrap();
    let hm_requests = hm.requests();
    assert!(
        hm_requests.iter().any(|request| contains(request, created_account.as_bytes())),
        "the created identity's blobs (with its public key) never reached the Hypermedia server"
    );

    let running = read_tree(&data_dir);
    assert!(
        running.iter().any(|(path, _)| path.to_string_lossy().ends_with("-wal")),
        "no WAL file to scan while the server runs: {:?}",
        running.iter().map(|(path, _)| path).collect::<Vec<_>>()
    );
    let status = server.terminate().await;
    assert!(status.success(), "the server did not stop cleanly: {status}");
    let stopped = read_tree(&data_dir);

    // Secrets the server made or keeps: its key, and the seeds as stored (decrypted here).
    let server_key = std::fs::read(data_dir.join(SecretKey::FILE_NAME)).unwrap();
    let key = SecretKey::load(&data_dir, None).unwrap();
    let stored = |name: &str| {
        let db =
            Connection::open_with_flags(data_dir.join("seed-agents.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let sealed: Vec<u8> = db
            .query_row(
                "SELECT ciphertext FROM secrets WHERE account_id = ?1 AND name = ?2",
                params![script.account, name],
                |row| row.get(0),
            )
            .unwrap();
        key.open(&script.account, name, &sealed).unwrap()
    };
    let created_seed: [u8; 32] = stored(&created.name).try_into().unwrap();
    assert_eq!(
        Ed25519Signer::from_seed(&created_seed).principal(),
        created_account,
        "the decrypted seed is the created identity's"
    );
    assert_eq!(stored(&secrets.imported_name), secrets.imported_seed, "the imported seed is stored sealed");

    let mut all = secrets.needles();
    all.add("the created identity's seed", &created_seed);
    let mut with_server_key = all.clone();
    with_server_key.add("the server's secret key", &server_key);
    for (number, secret) in created.webhook_secrets.iter().enumerate() {
        let key = webhook::key(secret);
        with_server_key.add(&format!("webhook secret {}", number + 1), &key);
        all.add(&format!("webhook secret {}", number + 1), &key);
    }
    let mut found = Vec::new();
    for (label, bytes) in &script.responses {
        // The one response that hands a webhook secret over holds it (and only that one).
        let hands_over = match label.as_str() {
            "CreateAgentTrigger (HTTP 200)" => Some("webhook secret 1"),
            "UpdateAgentTrigger (HTTP 200)" => Some("webhook secret 2"),
            _ => None,
        };
        let mut needles = with_server_key.clone();
        if let Some(secret) = hands_over {
            assert!(!needles.scan(label, bytes).is_empty(), "{label} does not hand over {secret}");
            needles.remove(secret);
        }
        found.extend(needles.scan(&format!("the response to {label}"), bytes));
    }
    let log_text = std::fs::read(&log).unwrap();
    assert!(
        String::from_utf8_lossy(&log_text).contains("DEBUG"),
        "the log has no debug lines; was RUST_LOG=debug honoured?"
    );
    found.extend(with_server_key.scan("the server's stderr", &log_text));
    for (when, files) in [("while running", &running), ("after the stop", &stopped)] {
        for (path, bytes) in files {
            let needles = if path.ends_with(SecretKey::FILE_NAME) { &all } else { &with_server_key };
            found.extend(needles.scan(&format!("{} ({when})", path.display()), bytes));
        }
    }
    for (number, request) in hm_requests.iter().enumerate() {
        found.extend(with_server_key.scan(&format!("Hypermedia request {}", number + 1), request));
    }
    // The vendor gets the API key and the access token in use, each in its Authorization header
    // (checked above and in `subscription_session`); the issuer gets the refresh token it is
    // asked to trade. Nothing else anywhere.
    let mut not_the_key = with_server_key.clone();
    not_the_key.remove("the API key");
    not_the_key.remove("the refreshed access token");
    for (number, request) in vendor_requests.iter().enumerate() {
        found.extend(not_the_key.scan(&format!("vendor request {}", number + 1), request));
    }
    let bearer = format!("authorization: Bearer {}", secrets.tokens().refreshed_access);
    assert!(
        vendor_requests
            .iter()
            .any(|request| String::from_utf8_lossy(request).to_lowercase().contains(&bearer.to_lowercase())),
        "the subscription backend never got the refreshed access token"
    );
    let issuer_requests = issuer.requests();
    assert!(issuer_requests.len() >= 2, "a sign-in and a refresh: {}", issuer_requests.len());
    let mut not_the_refresh_token = with_server_key.clone();
    not_the_refresh_token.remove("the first refresh token");
    for (number, request) in issuer_requests.iter().enumerate() {
        found.extend(not_the_refresh_token.scan(&format!("issuer request {}", number + 1), request));
    }
    // The scan does find a secret where one is.
    assert!(!with_server_key.scan("vendor requests", &vendor_requests.concat()).is_empty());

    println!(
        "scanned {} responses, {} log bytes, {} + {} data files, {} Hypermedia and {} vendor requests",
        script.responses.len(),
        log_text.len(),
        running.len(),
        stopped.len(),
        hm_requests.len(),
        vendor_requests.len()
    );
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}

/// The identity the server created, and the webhook secrets it handed over (created, rotated).
struct Created {
    name: String,
    account_id: Option<String>,
    webhook_secrets: Vec<String>,
}

/// The scripted session: secrets, providers and their models, identities, an agent, memory,
/// chunked uploads, user verbs, and the reads of all of it; refusals on the way are expected.
async fn run_session(script: &mut Script, secrets: &Secrets, vendor_url: &str, mcp_url: &str) -> Created {
    let metadata = |pairs: &[(&str, &str)]| {
        Some(pairs.iter().map(|(key, value)| ((*key).to_owned(), Value(Ipld::String((*value).to_owned())))).collect())
    };
    let api_key = SetSecret {
        name: "vendor-key".into(),
        value: Bytes(secrets.api_key.as_bytes().to_vec()),
        metadata: metadata(&[("kind", "api-key"), ("note", "scanned for")]),
    };
    script.ok(api_key).await;
    let raw = SetSecret {
        name: "raw-secret".into(),
        value: Bytes(secrets.raw.clone()),
        metadata: metadata(&[("purpose", "binary")]),
    };
    script.ok(raw).await;
    let too_large = SetSecret { name: "huge".into(), value: Bytes(secrets.raw.repeat(1400)), metadata: None };
    assert_eq!(script.refused(too_large).await, (400, "Secret value is too large".into()));

    let provider = |base: &str, key: &str| ModelProviderConfig {
        extra: Default::default(),
        auth_mode: None,
        base_url: Some(format!("{vendor_url}{base}")),
        model_defaults: None,
        secret_refs: Some(BTreeMap::from([("apiKey".to_owned(), key.to_owned())])),
        type_: "custom".into(),
    };
    for (name, base, key) in
        [("vendor", "/v1", "vendor-key"), ("echo", "/fail/v1", "vendor-key"), ("binary", "/v1", "raw-secret")]
    {
        script.ok(SetModelProvider { name: name.into(), provider: provider(base, key) }).await;
    }
    script.ok(ListModelProviders { agent_id: None }).await;
    let models = |provider: &str, agent_id: Option<&str>| ListProviderModels {
        provider: provider.into(),
        agent_id: agent_id.map(Into::into),
    };
    assert!(!script.ok(models("vendor", None)).await.models.is_empty());
    let failed = format!("custom provider at {vendor_url}/fail/v1: models request failed: HTTP 500");
    assert_eq!(script.refused(models("echo", None)).await, (502, failed));
    assert_eq!(script.refused(models("binary", None)).await, (400, "custom API key is invalid".into()));

    let import = ImportSigningIdentity {
        client_request_id: Some("import-1".into()),
        label: Some("Imported".into()),
        seed: Bytes(secrets.imported_seed.to_vec()),
    };
    assert_eq!(script.ok(import).await.identity.name, secrets.imported_name);
    let mut long_seed = secrets.imported_seed.to_vec();
    long_seed.push(0);
    let long = ImportSigningIdentity { client_request_id: None, label: None, seed: Bytes(long_seed) };
    assert_eq!(script.refused(long).await, (400, "Key seed must be exactly 32 bytes".into()));
    let create = CreateSigningIdentity { client_request_id: Some("create-1".into()), label: Some("Made here".into()) };
    let created = script.ok(create).await.identity;
    let update = UpdateSigningIdentity { name: created.name.clone(), label: "Renamed".into(), icon: None };
    script.ok(update).await;
    script.ok(ListSigningIdentities { agent_id: None }).await;

    // An MCP server whose Authorization header is a secret: saved, listed, refreshed.
    let token = SetSecret {
        name: "mcp-scan-token".into(),
        value: Bytes(format!("Bearer {}", secrets.mcp_token).into_bytes()),
        metadata: None,
    };
    script.ok(token).await;
    let mut mcp = McpServerConfig::new(mcp_url);
    mcp.secret_refs = Some(BTreeMap::from([("authorization".to_owned(), "mcp-scan-token".to_owned())]));
    let saved = script.ok(SetMcpServer { name: "scan".into(), config: mcp }).await.server;
    assert_eq!(saved.status.state, McpServerStatusState::Ok, "{:?}", saved.status);
    script.ok(ListMcpServers {}).await;
    script.ok(RefreshMcpServer { name: "scan".into() }).await;

    let definition = AgentDefinition {
        model_provider: "vendor".into(),
        model: "gpt-5".into(),
        signing_key: Some(created.name.clone()),
        mcp_servers: Some(vec!["scan".into()]),
        ..fixtures::definition("Scanned")
    };
    let agent_id = script.ok(CreateAgent { client_request_id: None, definition }).await.agent_id;
    script.ok(ListModelProviders { agent_id: Some(agent_id.clone()) }).await;
    script.ok(models("vendor", Some(&agent_id))).await;
    script.ok(ListSigningIdentities { agent_id: Some(agent_id.clone()) }).await;

    // A webhook trigger: its secret, a signed call, a rotation, the old secret refused, reads.
    let trigger = fixtures::webhook_trigger("Hook", "Handle the hook.");
    let made = script.ok(CreateAgentTrigger { agent_id: agent_id.clone(), client_request_id: None, trigger }).await;
    let (trigger_id, first_secret) = (made.trigger.id, made.webhook_secret.unwrap());
    assert_eq!(script.webhook(&trigger_id, &first_secret, "msg_1", r#"{"event":"one"}"#).await, 202);
    let rotate = UpdateAgentTrigger {
        trigger_id: trigger_id.clone(),
        patch: AgentTriggerPatch {
            source: Some(AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() })),
            ..Default::default()
        },
        expected_updated_at: None,
    };
    let rotated = script.ok(rotate).await.webhook_secret.unwrap();
    assert_eq!(script.webhook(&trigger_id, &first_secret, "msg_2", r#"{"event":"two"}"#).await, 401);
    assert_eq!(script.webhook(&trigger_id, &rotated, "msg_3", r#"{"event":"three"}"#).await, 202);
    script.ok(GetAgentTrigger { trigger_id }).await;
    script.ok(ListAgentTriggers { agent_id: agent_id.clone() }).await;

    let note = WriteAgentMemoryFile {
        agent_id: agent_id.clone(),
        path: "notes.md".into(),
        content: WriteAgentMemoryFileContent::String("# Notes\nNothing secret here.".into()),
    };
    script.ok(note).await;
    script.ok(ReadAgentMemoryFile { agent_id: agent_id.clone(), path: "notes.md".into() }).await;
    let session = CreateSession {
        agent_id: agent_id.clone(),
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: Some("Scanned thread".into()),
    };
    let session_id = script.ok(session).await.session_id;

    let into_memory = FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
        extra: Default::default(),
        agent_id: agent_id.clone(),
        path: "uploads/data.bin".into(),
    });
    script.upload(into_memory, &[b"first chunk, ", b"second chunk"]).await;
    let into_session = FileUploadTarget::SessionAttachmentUploadTarget(SessionAttachmentUploadTarget {
        extra: Default::default(),
        session_id: session_id.clone(),
        name: "brief.txt".into(),
        mime_type: Some("text/plain".into()),
    });
    let attachment = script.upload(into_session, &[b"an attached brief"]).await.attachment.unwrap();
    script.ok(ReadSessionAttachment { session_id: session_id.clone(), attachment_id: attachment.id }).await;

    let verb = |verb, fields: &[(&str, &str)]| InvokeSessionTool {
        session_id: session_id.clone(),
        verb,
        input: Value(Ipld::Map(
            fields.iter().map(|(key, value)| ((*key).to_owned(), Ipld::String((*value).to_owned()))).collect(),
        )),
    };
    for call in [
        verb(InvokeSessionToolVerb::Read, &[("address", "~/self")]),
        verb(InvokeSessionToolVerb::Read, &[("address", "~/memory/notes.md")]),
        verb(InvokeSessionToolVerb::Write, &[("address", "~/memory/verb.md"), ("content", "written by a verb")]),
        verb(InvokeSessionToolVerb::Read, &[("address", "~/memory/")]),
    ] {
        assert_eq!(script.ok(call).await.error, None);
    }
    let mcp_call = InvokeSessionTool {
        session_id: session_id.clone(),
        verb: InvokeSessionToolVerb::Call,
        input: Value(wire::json_to_ipld(&serde_json::json!({"tool": "scan__echo", "input": {"text": "hello"}}))),
    };
    assert_eq!(script.ok(mcp_call).await.error, None);
    script.ok(UploadAgentMemoryFileToIpfs { agent_id: agent_id.clone(), path: "notes.md".into() }).await;

    script.ok(GetAgent { agent_id: agent_id.clone() }).await;
    script.ok(ListAgents {}).await;
    script.ok(ListAgentMemory { agent_id: agent_id.clone() }).await;
    let list = ListSessions {
        agent_id: Some(agent_id),
        cursor: None,
        exclude_triggered: None,
        include_children: None,
        limit: None,
        parent_session_id: None,
    };
    script.ok(list).await;
    script.ok(GetSession { session_id, after_seq: None, before_seq: None, limit: None }).await;
    Created {
        name: created.name,
        account_id: created.account_id.map(String::from),
        webhook_secrets: vec![first_secret, rotated],
    }
}

/// "Sign in with ChatGPT" and a turn on it: the issuer hands out tokens that expire within the
/// refresh margin, so the turn refreshes them before it goes to the subscription backend.
async fn subscription_session(script: &mut Script, secrets: &Secrets) {
    let started = script.ok(StartProviderOAuth { provider_type: "openai".into() }).await;
    let auth_url = reqwest::Url::parse(&started.auth_url).unwrap();
    let state = auth_url.query_pairs().find(|(key, _)| key == "state").unwrap().1.into_owned();
    let redirect = format!("http://localhost:1455/auth/callback?code={}&state={state}", secrets.oauth_code);
    script.ok(SubmitProviderOAuthCode { login_id: started.login_id.clone(), code: redirect }).await;
    let status = script.ok(GetProviderOAuthStatus { login_id: started.login_id }).await;
    assert_eq!(status.secret_name.as_deref(), Some("openai-subscription-oauth"), "{status:?}");
    let provider = ModelProviderConfig {
        extra: Default::default(),
        auth_mode: Some(ModelProviderConfigAuthMode::Subscription),
        base_url: None,
        model_defaults: None,
        secret_refs: Some(BTreeMap::from([("oauth".to_owned(), "openai-subscription-oauth".to_owned())])),
        type_: "openai".into(),
    };
    script.ok(SetModelProvider { name: "plan".into(), provider }).await;
    script.ok(ListModelProviders { agent_id: None }).await;
    let definition = AgentDefinition {
        model_provider: "plan".into(),
        model: "gpt-5.1-codex".into(),
        ..fixtures::definition("On the plan")
    };
    let agent_id = script.ok(CreateAgent { client_request_id: None, definition }).await.agent_id;
    let session = CreateSession {
        agent_id,
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: Some("Plan thread".into()),
    };
    let session_id = script.ok(session).await.session_id;
    script.ok(fixtures::say(&session_id, "hello on the plan")).await;
    script.ok(GetSession { session_id, after_seq: None, before_seq: None, limit: None }).await;
}

/// The tokens the fake issuer hands out for a code `C`: for the code, an access token (a JWT
/// naming the ChatGPT account) and `refresh-C`; for `refresh-C`, a second pair.
struct Tokens {
    first_access: String,
    first_refresh: String,
    refreshed_access: String,
    refreshed_refresh: String,
}

fn tokens_for(code: &str) -> Tokens {
    // Each token is a digest of the code and its role: none contains another, or the code.
    let digest = |tag: &str| {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(format!("{tag}:{code}").as_bytes()))
    };
    let jwt = |tag: &str| {
        let claims = serde_json::json!({
            "https://api.openai.com/auth": {"chatgpt_account_id": "acct_scanned"},
            "k": digest(tag),
        });
        format!("eyJhbGciOiJSUzI1NiJ9.{}.c2ln", base64_url(claims.to_string().as_bytes()))
    };
    Tokens {
        first_access: jwt("access"),
        first_refresh: format!("refresh-{}", digest("refresh")),
        refreshed_access: jwt("access2"),
        refreshed_refresh: format!("refresh-{}", digest("refresh2")),
    }
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The code the issuer traded (the fake answers from a plain function, so it remembers here).
static ISSUED_CODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The issuer's token endpoint: a code grant gets the first pair (expiring within the refresh
/// margin), a refresh grant of the first refresh token the second pair.
fn issuer_answer(path: &str, request: &[u8]) -> (u16, String) {
    let body = request.windows(4).position(|window| window == b"\r\n\r\n").map_or(&[][..], |at| &request[at + 4..]);
    let form: BTreeMap<String, String> =
        reqwest::Url::parse(&format!("http://form/?{}", String::from_utf8_lossy(body)))
            .map(|url| url.query_pairs().into_owned().collect())
            .unwrap_or_default();
    if path != "/oauth/token" {
        return (404, r#"{"error":"not_found"}"#.to_owned());
    }
    let answer = |access: String, refresh: String, expires_in: u64| {
        let json = serde_json::json!({"access_token": access, "refresh_token": refresh, "token_type": "Bearer",
            "expires_in": expires_in, "id_token": "x.y.z"});
        (200, json.to_string())
    };
    match (form.get("grant_type").map(String::as_str), form.get("code"), form.get("refresh_token")) {
        (Some("authorization_code"), Some(code), _) => {
            let _ = ISSUED_CODE.set(code.clone());
            let tokens = tokens_for(code);
            answer(tokens.first_access, tokens.first_refresh, 60)
        }
        // The code cannot be read back from its refresh token: the server's first refresh
        // token is the only one it may present, so any other is refused.
        (Some("refresh_token"), _, Some(refresh)) => match ISSUED_CODE.get() {
            Some(code) if *refresh == tokens_for(code).first_refresh => {
                let tokens = tokens_for(code);
                answer(tokens.refreshed_access, tokens.refreshed_refresh, 3600)
            }
            _ => (401, r#"{"error":"invalid_grant"}"#.to_owned()),
        },
        _ => (400, r#"{"error":"invalid_grant"}"#.to_owned()),
    }
}

/// The secrets the test hands the server.
struct Secrets {
    /// A UTF-8 key in the shape vendors use.
    api_key: String,
    /// 48 random bytes, most of them not printable.
    raw: Vec<u8>,
    imported_seed: [u8; 32],
    /// The imported identity's secret name.
    imported_name: String,
    /// The authorization code the "browser" brings back; the fake issuer's tokens derive from it.
    oauth_code: String,
    /// An MCP server's bearer token.
    mcp_token: String,
}

impl Secrets {
    fn generate() -> Self {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let suffix: String =
            random::<48>().iter().map(|byte| ALPHABET[*byte as usize % ALPHABET.len()] as char).collect();
        let imported_seed = random::<32>();
        let account = Ed25519Signer::from_seed(&imported_seed).principal().to_string();
        Self {
            api_key: format!("sk-proj-{suffix}"),
            raw: random::<48>().to_vec(),
            imported_seed,
            imported_name: format!("hm-account-{}", &account[..16]),
            oauth_code: hex::encode(random::<24>()),
            mcp_token: format!(
                "mcp-{}",
                random::<40>().iter().map(|byte| ALPHABET[*byte as usize % ALPHABET.len()] as char).collect::<String>()
            ),
        }
    }

    fn tokens(&self) -> Tokens {
        tokens_for(&self.oauth_code)
    }

    fn needles(&self) -> Needles {
        let mut needles = Needles::default();
        needles.add("the API key", self.api_key.as_bytes());
        needles.add("the binary secret", &self.raw);
        needles.add("the imported seed", &self.imported_seed);
        let tokens = self.tokens();
        needles.add("the first access token", tokens.first_access.as_bytes());
        needles.add("the first refresh token", tokens.first_refresh.as_bytes());
        needles.add("the refreshed access token", tokens.refreshed_access.as_bytes());
        needles.add("the refreshed refresh token", tokens.refreshed_refresh.as_bytes());
        needles.add("the MCP token", self.mcp_token.as_bytes());
        needles
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).unwrap();
    bytes
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

/// Every file under `dir`, with its bytes.
fn read_tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                files.push((path, bytes));
            }
        }
    }
    files
}

/// A client that keeps every response it got, byte for byte.
struct Script {
    client: Client,
    http: reqwest::Client,
    endpoint: String,
    account: String,
    /// What was asked, then the status, headers and body answered.
    responses: Vec<(String, Vec<u8>)>,
}

impl Script {
    fn new(url: &str) -> Self {
        let signer = Ed25519Signer::generate().unwrap();
        let account = signer.principal().to_string();
        let client = Client::builder(url, signer).build().unwrap();
        let http = seed_agents_sdk::default_http_client().unwrap();
        Self { client, http, endpoint: format!("{url}/api/message"), account, responses: Vec::new() }
    }

    /// Calls trigger `trigger_id`'s webhook with `body`, signed with `secret` as Standard Webhooks
    /// does; the status.
    async fn webhook(&mut self, trigger_id: &str, secret: &str, id: &str, body: &str) -> u16 {
        let url = self.endpoint.replace("/api/message", &format!("/api/triggers/{trigger_id}/webhook"));
        let mut request = self.http.post(url).body(body.to_owned());
        for (name, value) in webhook::signed(secret, id, webhook::now_seconds(), body) {
            request = request.header(name, value);
        }
        let answer = request.send().await.unwrap();
        self.record(&format!("webhook {id}"), answer).await.0
    }

    /// Keeps `answer` (status, headers, body) under `label` for the scan; its status and body.
    async fn record(&mut self, label: &str, answer: reqwest::Response) -> (u16, Vec<u8>) {
        let status = answer.status().as_u16();
        let mut raw = format!("HTTP {status}\r\n").into_bytes();
        for (name, value) in answer.headers() {
            raw.extend_from_slice(format!("{name}: ").as_bytes());
            raw.extend_from_slice(value.as_bytes());
            raw.extend_from_slice(b"\r\n");
        }
        let bytes = answer.bytes().await.unwrap().to_vec();
        raw.extend_from_slice(&bytes);
        self.responses.push((format!("{label} (HTTP {status})"), raw));
        (status, bytes)
    }

    /// Sends `action`; its response or the refusal's status and message.
    async fn send<A: Action>(&mut self, action: A) -> Result<A::Response, (u16, String)> {
        let body = self.client.sign(&action.into_action()).await.unwrap();
        let answer =
            self.http.post(&self.endpoint).header("content-type", "application/cbor").body(body).send().await.unwrap();
        let (status, bytes) = self.record(A::NAME, answer).await;
        match wire::from_slice::<AgentResponse>(&bytes).unwrap() {
            AgentResponse::Error(error) => Err((status, error.message)),
            answer => Ok(A::Response::from_response(answer).unwrap()),
        }
    }

    async fn ok<A: Action>(&mut self, action: A) -> A::Response {
        let name = A::NAME;
        self.send(action).await.unwrap_or_else(|refusal| panic!("{name} was refused: {refusal:?}"))
    }

    async fn refused<A: Action>(&mut self, action: A) -> (u16, String) {
        let name = A::NAME;
        match self.send(action).await {
            Ok(answer) => panic!("{name} was allowed: {answer:?}"),
            Err(refusal) => refusal,
        }
    }

    /// Begin, one append per chunk, commit.
    async fn upload(
        &mut self,
        target: FileUploadTarget,
        chunks: &[&[u8]],
    ) -> seed_agents_protocol::generated::CommitFileUploadResponse {
        let size = chunks.iter().map(|chunk| chunk.len() as i64).sum();
        let upload_id = self.ok(BeginFileUpload { size, target }).await.upload_id;
        let mut offset = 0;
        for chunk in chunks {
            let append = AppendFileUploadChunk { upload_id: upload_id.clone(), offset, content: Bytes(chunk.to_vec()) };
            offset = self.ok(append).await.received;
        }
        self.ok(CommitFileUpload { upload_id }).await
    }
}

/// The vendor: an OpenAI-style model list, or under `/fail/` a 500 that echoes the whole
/// request, credentials included.
fn vendor_answer(path: &str, request: &[u8]) -> (u16, String) {
    if path.starts_with("/fail/") {
        let echoed = serde_json::json!({ "error": String::from_utf8_lossy(request) });
        return (500, echoed.to_string());
    }
    if path == "/backend-api/codex/responses" {
        return (200, CODEX_ANSWER.to_owned());
    }
    (200, r#"{"object":"list","data":[{"id":"gpt-5","object":"model"}]}"#.to_owned())
}

/// The subscription backend's streamed answer (Responses API events).
const CODEX_ANSWER: &str = concat!(
    "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
    "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hello from the plan.\"}\n\n",
    "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello from the plan.\"}]}}\n\n",
    "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":4,\"total_tokens\":14}}}\n\n",
);

/// The Hypermedia server: `PublishBlobs` answers one placeholder CID per blob.
fn hm_answer(path: &str, request: &[u8]) -> (u16, String) {
    let body = request.windows(4).position(|window| window == b"\r\n\r\n").map_or(&[][..], |at| &request[at + 4..]);
    let blobs = match wire::decode_ipld(body) {
        Ok(Ipld::Map(fields)) if path == "/api/publishblobs" => match fields.get("blobs") {
            Some(Ipld::List(blobs)) => blobs.len(),
            _ => return (400, r#"{"error":"no blobs"}"#.to_owned()),
        },
        _ => return (400, r#"{"error":"expected PublishBlobs with a CBOR body"}"#.to_owned()),
    };
    let cids: Vec<String> = (0..blobs).map(|n| format!("bafyplaceholder{n}")).collect();
    (200, serde_json::json!({ "json": { "cids": cids } }).to_string())
}
