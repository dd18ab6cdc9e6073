//! Every rejection class of the message endpoint, with its status and exact message, replays (of
//! reads, of writes, of keyed writes), and the routes around it (health, version, CORS, the
//! protocol header, 404), and the action name the body limit is chosen by.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{CreateAgent, CreateSession, ListAgents, RegisterSigner};
use seed_agents_protocol::{Action, Bytes, Ed25519Signer, Signer, wire};

use crate::support::{TestServer, User, action_map, api_error, definition, error_body, now_ms};

/// An envelope map signed by `user` for `action`, then edited by `edit` (after signing).
async fn edited(
    user: &User,
    action: BTreeMap<String, Ipld>,
    edit: impl FnOnce(&mut BTreeMap<String, Ipld>),
) -> Vec<u8> {
    let bytes = user.sign_map(action, now_ms(), Some(3)).await;
    let Ipld::Map(mut map) = wire::decode_ipld(&bytes).unwrap() else { panic!("envelope is a map") };
    edit(&mut map);
    wire::ipld_to_vec(&Ipld::Map(map)).unwrap()
}

/// A change made to a signed envelope map.
type Edit = dyn FnOnce(&mut BTreeMap<String, Ipld>);

async fn refused(server: &TestServer, bytes: Vec<u8>) -> (u16, String) {
    let (status, headers, body) = server.post_raw("application/cbor", bytes).await;
    assert_eq!(headers.get("content-type").unwrap(), "application/cbor");
    (status, error_body(&body).0)
}

#[tokio::test]
async fn every_envelope_rejection_has_its_status_and_message() {
    let server = TestServer::start().await;
    let user = server.user();
    let list = || action_map("ListAgents", &[]);

    let (status, _, body) = server.post_raw("application/json", b"{}".to_vec()).await;
    assert_eq!((status, error_body(&body).0.as_str()), (415, "Content-Type must be application/cbor"));
    assert_eq!(refused(&server, vec![0xff, 0x00, 0x01]).await, (400, "Invalid CBOR request".into()));
    assert_eq!(refused(&server, wire::to_vec(&"hello").unwrap()).await, (401, "Invalid envelope".into()));

    let cases: Vec<(&str, Box<Edit>)> = vec![
        ("Invalid envelope type", Box::new(|map| drop(map.insert("type".into(), Ipld::String("Other".into()))))),
        ("Invalid signer", Box::new(|map| drop(map.insert("signer".into(), Ipld::Bytes(vec![0xed, 0x01, 1]))))),
        ("Invalid account", Box::new(|map| drop(map.remove("account")))),
        ("Invalid signature bytes", Box::new(|map| drop(map.insert("sig".into(), Ipld::Bytes(vec![0; 63]))))),
        ("Invalid action", Box::new(|map| drop(map.insert("action".into(), Ipld::List(vec![]))))),
        (
            "Invalid action timestamp",
            Box::new(|map| {
                if let Some(Ipld::Map(action)) = map.get_mut("action") {
                    action.insert("ts".into(), Ipld::String("now".into()));
                }
            }),
        ),
        ("Invalid signature", Box::new(|map| drop(map.insert("sig".into(), Ipld::Bytes(vec![7; 64]))))),
    ];
    for (message, edit) in cases {
        let bytes = edited(&user, list(), edit).await;
        assert_eq!(refused(&server, bytes).await, (401, message.to_owned()), "{message}");
    }
    for skew in [-301_000, 301_000] {
        let bytes = user.sign_map(list(), now_ms() + skew, Some(3)).await;
        assert_eq!(refused(&server, bytes).await, (401, "Action timestamp is outside allowed window".into()));
    }
    // Four minutes off either way is inside the five-minute window.
    for skew in [-240_000, 240_000] {
        let (status, _, _) =
            server.post_raw("application/cbor", user.sign_map(list(), now_ms() + skew, Some(3)).await).await;
        assert_eq!(status, 200);
    }

    // Signed by one key for another account that never authorized it.
    let other = server.user();
    let intruder = User::new(&server.url, Ed25519Signer::generate().unwrap(), Some(other.principal));
    let (status, message) = api_error(intruder.call(ListAgents {}).await);
    assert_eq!((status, message.as_str()), (401, "Signer is not authorized for account"));

    let bytes =
        user.sign_map(action_map("Subscribe", &[("key", Ipld::String("account/x".into()))]), now_ms(), Some(3)).await;
    assert_eq!(refused(&server, bytes).await, (400, "Subscribe is only supported over WebSocket".into()));
    let bytes = user.sign_map(action_map("FlyToTheMoon", &[]), now_ms(), Some(3)).await;
    assert_eq!(refused(&server, bytes).await, (400, "Unsupported action: FlyToTheMoon".into()));
    let connect = [("sessionId", Ipld::String("x".into())), ("connectionId", Ipld::String("c".into()))];
    let bytes = user.sign_map(action_map("ConnectSessionBrowser", &connect), now_ms(), Some(3)).await;
    assert_eq!(
        refused(&server, bytes).await,
        (501, "ConnectSessionBrowser is not supported by this server yet".into())
    );
    let bytes = user.sign_map(action_map("GetAgent", &[("agentId", Ipld::Integer(5))]), now_ms(), Some(3)).await;
    let (status, message) = refused(&server, bytes).await;
    assert_eq!(status, 400);
    assert!(message.starts_with("Invalid GetAgent: "), "{message}");
    let bytes = user.sign_map(action_map("GetAgent", &[]), now_ms(), Some(3)).await;
    assert_eq!(refused(&server, bytes).await, (400, "Agent ID is required".into()));
    let bytes = user.sign_map(action_map("SetSecret", &[("name", Ipld::String("k".into()))]), now_ms(), Some(3)).await;
    assert_eq!(refused(&server, bytes).await, (400, "Secret value is required".into()));
    let invite = action_map(
        "InviteAgentCollaborator",
        &[
            ("agentId", Ipld::String("a".into())),
            ("accountId", Ipld::String(user.id.to_string())),
            ("role", Ipld::String("owner".into())),
        ],
    );
    let bytes = user.sign_map(invite, now_ms(), Some(3)).await;
    assert_eq!(refused(&server, bytes).await, (400, "Collaborator role must be reader or writer".into()));
    server.stop().await;
}

#[tokio::test]
async fn a_replayed_read_is_answered_again() {
    let server = TestServer::start().await;
    let user = server.user();
    user.create_agent("Listed").await;
    let bytes = user.sign_map(action_map("ListAgents", &[]), now_ms(), Some(3)).await;
    let (first_status, _, first) = server.post_raw("application/cbor", bytes.clone()).await;
    let (second_status, _, second) = server.post_raw("application/cbor", bytes).await;
    assert_eq!((first_status, second_status), (200, 200));
    assert_eq!(first, second, "the same read answers the same body");
    server.stop().await;
}

#[tokio::test]
async fn a_replayed_write_is_refused_but_a_keyed_retry_replays_its_answer() {
    let server = TestServer::start().await;
    let user = server.user();
    user.ensure_provider().await;
    let create = CreateAgent { client_request_id: None, definition: definition("Once") };
    let Ipld::Map(create) = wire::to_ipld(&create.into_action()).unwrap() else { panic!("an action is a map") };
    let bytes = user.sign_map(create, now_ms(), Some(3)).await;
    assert_eq!(server.post_raw("application/cbor", bytes.clone()).await.0, 200);
    assert_eq!(refused(&server, bytes).await, (401, "Replayed envelope".into()));
    assert_eq!(user.call(ListAgents {}).await.unwrap().agents.len(), 1, "the replay created nothing");

    let agent_id = user.create_agent("Replay").await;
    let create = action_map(
        "CreateSession",
        &[("agentId", Ipld::String(agent_id.to_string())), ("clientRequestId", Ipld::String("req-1".into()))],
    );
    let bytes = user.sign_map(create.clone(), now_ms(), Some(3)).await;
    let (first_status, _, first) = server.post_raw("application/cbor", bytes.clone()).await;
    let (second_status, _, second) = server.post_raw("application/cbor", bytes).await;
    assert_eq!((first_status, second_status), (200, 200));
    assert_eq!(first, second, "the identical keyed envelope replays the stored answer byte for byte");
    // Re-signed with a new timestamp: still the same session.
    let resigned = user.sign_map(create, now_ms() + 5, Some(3)).await;
    assert_eq!(server.post_raw("application/cbor", resigned).await.2, first);
    server.stop().await;
}

#[tokio::test]
async fn a_registered_delegate_acts_for_its_issuer() {
    let server = TestServer::start().await;
    let issuer = server.user();
    let delegate_key = Ed25519Signer::generate().unwrap();
    let delegate_principal = delegate_key.principal();
    let delegate_self = User::new(&server.url, Ed25519Signer::from_seed(&delegate_key.seed()), None);
    let issuer_key = ed25519_dalek::SigningKey::from_bytes(&issuer.signer.seed());
    let capability =
        seed_agents_server::testing::signers::sign_capability(&issuer_key, &delegate_principal, "AGENT", now_ms());

    // Before registration the delegate cannot act for the issuer.
    let as_issuer = User::new(&server.url, Ed25519Signer::from_seed(&delegate_key.seed()), Some(issuer.principal));
    assert_eq!(api_error(as_issuer.call(ListAgents {}).await).0, 401);

    // Registering someone else's capability (delegate mismatch) is refused.
    let stranger = server.user();
    let (status, message) = api_error(stranger.call(RegisterSigner { capability: Bytes(capability.clone()) }).await);
    assert_eq!((status, message.as_str()), (400, "Capability delegate does not match envelope signer"));

    let registered = delegate_self.call(RegisterSigner { capability: Bytes(capability) }).await.unwrap();
    assert_eq!(registered.account_id, issuer.id);
    assert_eq!(registered.signer_id, delegate_principal.to_string());
    let agent_id = issuer.create_agent("Shared").await;
    let agents = as_issuer.call(ListAgents {}).await.unwrap().agents;
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0].id, agent_id);
    let session = CreateSession {
        agent_id,
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: Some("by delegate".into()),
    };
    as_issuer.call(session).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn routes_headers_and_cors() {
    let server = TestServer::start().await;
    let http = &server.http;
    for path in ["/api/health", "/agents/api/health"] {
        let response = http.get(format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers().get("x-agents-protocol").unwrap(), "3");
        let health: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(health["status"], "ok");
        assert_eq!(health["protocol"], 3);
        assert_eq!(health["minClientProtocol"], 1);
        assert_eq!(health["codeExec"], false);
        assert_eq!(health["hmServerUrl"], TestServer::CLOSED_HM_SERVER);
        assert!(health["uptime"].as_f64().is_some());
    }
    for path in ["/api/version", "/agents/api/version"] {
        let response = http.get(format!("{}{path}", server.url)).send().await.unwrap();
        let version: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(version["protocol"], 3);
        assert_eq!(version["minClientProtocol"], 1);
        assert!(version["version"].is_string() && version["commit"].is_string());
    }
    for path in ["/api/message", "/agents/api/message"] {
        let response = http.request(reqwest::Method::OPTIONS, format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(response.status(), 204);
        let headers = response.headers();
        assert_eq!(headers.get("access-control-allow-origin").unwrap(), "*");
        assert_eq!(headers.get("access-control-allow-methods").unwrap(), "POST, OPTIONS");
        assert_eq!(headers.get("access-control-expose-headers").unwrap(), "X-Agents-Protocol");
        assert_eq!(headers.get("x-agents-protocol").unwrap(), "3");
    }
    let response = http.get(format!("{}/nothing/here", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(response.headers().get("x-agents-protocol").unwrap(), "3");
    assert_eq!(response.text().await.unwrap(), "Not Found");

    // The alias route answers like the main one; media type parameters and case are ignored.
    let user = server.user();
    let bytes = user.sign_map(action_map("ListAgents", &[]), now_ms(), Some(3)).await;
    let response = http
        .post(format!("{}/agents/api/message", server.url))
        .header("content-type", "Application/CBOR; charset=binary")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers().get("x-agents-protocol").unwrap(), "3");
    assert_eq!(response.headers().get("access-control-allow-origin").unwrap(), "*");
    server.stop().await;
}

/// The body limit is chosen from the action name `body::parse_prefix` (server core) finds in the first
/// bytes (512 of them) before the envelope is verified. On real signed envelopes of every action's
/// full example (`snapshots/payloads/v3`), for an account's own key and a delegate, with and
/// without `protocol`, it must find the name there, so each action gets its own limit.
#[test]
fn the_body_prefix_names_the_action_of_every_signed_envelope() {
    use seed_agents_protocol::envelope::{UnsignedEnvelope, insert_signature};
    use seed_agents_server::testing::http::body::{self, BodyLimits, Prefix};

    let limits = BodyLimits {
        max_body_bytes: 128 << 20,
        body_timeout: std::time::Duration::from_secs(10),
        body_min_rate: 16 * 1024,
    };
    let owner = Ed25519Signer::from_seed(&[1; 32]);
    let delegate = Ed25519Signer::from_seed(&[2; 32]);
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots/payloads/v3");
    let mut checked = 0;
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        if !file.starts_with("action-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let Some((_, after)) = text.split_once(" bytes):\n") else { continue };
        let hex: String = after.lines().take_while(|line| !line.is_empty()).collect();
        let action = wire::decode_ipld(&hex::decode(hex).unwrap()).unwrap();
        let Ipld::Map(fields) = &action else { panic!("{file}: an action is a map") };
        let Some(Ipld::String(name)) = fields.get("_") else { panic!("{file}: no `_`") };
        for (signer, protocol) in [(&owner, Some(3)), (&delegate, Some(3)), (&owner, None), (&delegate, Some(1))] {
            let envelope = UnsignedEnvelope {
                signer: signer.principal(),
                account: owner.principal(),
                protocol,
                action: action.clone(),
            };
            let mut bytes = envelope.signing_bytes().unwrap();
            let signature = signer.sign_now(&bytes);
            insert_signature(&mut bytes, &signature).unwrap();
            let first = &bytes[..bytes.len().min(512)];
            assert_eq!(body::parse_prefix(first), Prefix::Action(name), "{file} ({protocol:?})");
            assert_eq!(body::parse_prefix(&bytes), Prefix::Action(name), "{file} ({protocol:?})");
            assert_eq!(body::limit_for(first, &limits), body::action_limit(name, limits.max_body_bytes), "{file}");
        }
        checked += 1;
    }
    assert!(checked > 70, "only {checked} action snapshots in {}", folder.display());
}
