//! The SDK client against a scripted loopback HTTP/1.1 responder: byte-identical envelopes for the
//! JS client's signing vectors, the mapping of every kind of answer onto `Error`, and the envelope
//! fields the builder controls (protocol, account, ts, omitted optional fields).

use std::collections::BTreeMap;
use std::sync::Arc;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{Error as ErrorResponse, GetAgent, GetSession, ListAgents, ListAgentsResponse};
use seed_agents_protocol::{AgentAction, AgentResponse, SignedEnvelope, wire};
use seed_agents_sdk::{Client, DecodeError, Ed25519Signer, Error, ErrorCode, Principal, Signer};
use serde_json::Value as Json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use seed_agents_test_support::vectors::{cases, hex_field, ipld};

/// A fixed `ts` for the tests that do not come from the vectors.
const TS: i64 = 1_767_225_600_000;

// ---------------------------------------------------------------------------------------------
// The loopback responder
// ---------------------------------------------------------------------------------------------

/// One scripted answer.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    content_type: &'static str,
    /// The `X-Agents-Protocol` header; `None` leaves it out.
    protocol: Option<String>,
    body: Vec<u8>,
}

impl Reply {
    /// A CBOR answer carrying `response`.
    fn cbor(status: u16, response: &AgentResponse) -> Reply {
        let body = wire::to_vec(response).expect("encode scripted response");
        Reply::raw(status, "application/cbor", body)
    }

    /// An answer with any body.
    fn raw(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Reply {
        Reply { status, content_type, protocol: Some("3".to_owned()), body: body.into() }
    }

    /// The same answer with another (or no) `X-Agents-Protocol` header.
    fn protocol(mut self, protocol: Option<&str>) -> Reply {
        self.protocol = protocol.map(str::to_owned);
        self
    }
}

/// One request as the responder read it.
#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    /// Header names lowercased, in the order sent.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// Listens on 127.0.0.1 and answers one connection per scripted reply, in order (each answer says
/// `Connection: close`). Returns the base URL and the requests as they arrive.
async fn start_responder(replies: Vec<Reply>) -> (String, mpsc::UnboundedReceiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for reply in replies {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let Some(request) = read_request(&mut stream).await else {
                return;
            };
            let _ = sender.send(request);
            let _ = write_reply(&mut stream, &reply).await;
        }
    });
    (url, receiver)
}

/// Reads the head up to `\r\n\r\n`, then `Content-Length` bytes of body.
async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[head_end..head_end + length].to_vec();
    Some(Request { method, path, headers, body })
}

async fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    if let Some(protocol) = &reply.protocol {
        head.push_str(&format!("X-Agents-Protocol: {protocol}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&reply.body).await?;
    stream.shutdown().await
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn signer(byte: u8) -> Ed25519Signer {
    Ed25519Signer::from_seed(&[byte; 32])
}

fn client_at(url: &str, signer: Ed25519Signer) -> Client {
    Client::builder(url, signer).clock(Arc::new(|| TS)).build().expect("client")
}

fn ok_reply() -> Reply {
    Reply::cbor(200, &AgentResponse::ListAgentsResponse(ListAgentsResponse::new(vec![])))
}

fn error_reply(status: u16, message: &str, code: Option<&str>) -> Reply {
    let error = {
        let mut error = ErrorResponse::new(message);
        error.code = code.map(str::to_owned);
        error
    };
    Reply::cbor(status, &AgentResponse::Error(error))
}

async fn next_request(requests: &mut mpsc::UnboundedReceiver<Request>) -> Request {
    requests.recv().await.expect("the responder saw a request")
}

/// The posted envelope as a map (it must decode as canonical DAG-CBOR).
fn envelope_map(body: &[u8]) -> BTreeMap<String, Ipld> {
    match wire::decode_ipld(body).expect("posted body is DAG-CBOR") {
        Ipld::Map(map) => map,
        other => panic!("posted envelope is not a map: {other:?}"),
    }
}

fn action_map(envelope: &BTreeMap<String, Ipld>) -> &BTreeMap<String, Ipld> {
    match envelope.get("action") {
        Some(Ipld::Map(action)) => action,
        other => panic!("envelope action is not a map: {other:?}"),
    }
}

fn get_agent() -> GetAgent {
    GetAgent::new("agent-1")
}

// ---------------------------------------------------------------------------------------------
// Signing vectors: byte-identical envelopes
// ---------------------------------------------------------------------------------------------

/// The vector's action as a typed `AgentAction`, or why it cannot be reproduced through one.
fn typed_action(case: &Json) -> Result<(AgentAction, &'static str), String> {
    let unsigned = ipld(&case["unsignedAction"]).ok_or("unsignedAction holds undefined")?;
    let original = wire::ipld_to_vec(&unsigned).map_err(|err| format!("vector action does not encode: {err}"))?;
    let action = wire::from_ipld::<AgentAction>(unsigned)
        .map_err(|err| format!("does not decode as a typed AgentAction: {err}"))?;
    let path = "from_ipld";
    // The typed value must serialise back to the same action, or the envelope cannot match.
    let typed = wire::to_vec(&action).map_err(|err| format!("typed action does not encode: {err}"))?;
    if typed != original {
        return Err(format!(
            "the typed round trip changes the action: {} became {}",
            wire::diagnostic(&original).unwrap_or_default(),
            wire::diagnostic(&typed).unwrap_or_default()
        ));
    }
    Ok((action, path))
}

#[tokio::test]
async fn send_posts_the_js_clients_envelope_byte_for_byte() {
    let cases = cases();
    let mut checked = Vec::new();
    let mut skipped = Vec::new();
    for case in cases.iter().filter(|case| case["valid"] == Json::Bool(true)) {
        let id = case["id"].as_str().expect("id").to_owned();
        let (action, path) = match typed_action(case) {
            Ok(typed) => typed,
            Err(reason) => {
                skipped.push((id, reason));
                continue;
            }
        };
        let seed: [u8; 32] = hex_field(case, &["signer", "seedHex"]).try_into().expect("32-byte seed");
        let account = Principal::from_bytes(&hex_field(case, &["account", "principalHex"])).expect("account");
        let protocol = case
            .get("protocol")
            .map(|p| u32::try_from(p.as_u64().expect("protocol is an integer")).expect("protocol fits u32"));
        let ts = case["ts"].as_i64().expect("ts is an integer");
        let expected = hex_field(case, &["envelopeHex"]);

        let (url, mut requests) = start_responder(vec![ok_reply()]).await;
        // A fresh client per signature: a client never signs the same `ts` twice.
        let client = || {
            Client::builder(&url, Ed25519Signer::from_seed(&seed))
                .clock(Arc::new(move || ts))
                .protocol(protocol)
                .account(account)
                .build()
                .expect("client")
        };
        assert_eq!(client().sign(&action).await.expect("sign"), expected, "{id}: sign() bytes");
        let response = client().send(&action).await.unwrap_or_else(|err| panic!("{id}: send failed: {err}"));
        assert!(matches!(response, AgentResponse::ListAgentsResponse(_)), "{id}: {response:?}");

        let request = next_request(&mut requests).await;
        assert_eq!(request.method, "POST", "{id}");
        assert_eq!(request.path, "/api/message", "{id}");
        assert_eq!(request.header("content-type"), Some("application/cbor"), "{id}");
        assert_eq!(
            hex::encode(&request.body),
            hex::encode(&expected),
            "{id}: the posted envelope differs from the JS client's"
        );
        checked.push((id, path));
    }
    println!("checked {} vector cases:", checked.len());
    for (id, path) in &checked {
        println!("  checked {id} (typed via {path})");
    }
    for (id, reason) in &skipped {
        println!("  skipped {id}: {reason}");
    }
    assert!(checked.len() >= 15, "only {} vector cases checked; skipped: {skipped:#?}", checked.len());
}

// ---------------------------------------------------------------------------------------------
// Error mapping
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn typed_call_decodes_its_typed_response() {
    let text = |s: &str| Ipld::String(s.to_owned());
    let map = |entries: Vec<(&str, Ipld)>| Ipld::Map(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    let definition = map(vec![
        ("name", text("Helper")),
        ("systemPrompt", text("Be brief.")),
        ("modelProvider", text("p")),
        ("model", text("m")),
    ]);
    let agent = map(vec![
        ("id", text("agent-1")),
        ("account", text("z6MkAccount")),
        ("createdAt", Ipld::Integer(1_767_225_600_123)),
        ("updatedAt", Ipld::Integer(1_767_225_700_456)),
        ("definition", definition),
        ("stateDir", text("/agents/agent-1")),
        ("status", text("idle")),
    ]);
    let response = map(vec![("_", text("GetAgentResponse")), ("agent", agent), ("sessionCount", Ipld::Integer(7))]);
    let body = wire::ipld_to_vec(&response).expect("encode response");
    let (url, mut requests) = start_responder(vec![Reply::raw(200, "application/cbor", body)]).await;
    let answer = client_at(&url, signer(1)).get_agent(get_agent()).await.expect("get agent");
    assert_eq!(answer.session_count, 7);
    assert_eq!(answer.agent.id, "agent-1");
    assert_eq!((answer.agent.created_at, answer.agent.updated_at), (1_767_225_600_123, 1_767_225_700_456));

    let request = next_request(&mut requests).await;
    assert_eq!(request.header("accept"), Some("application/cbor"));
    let envelope = envelope_map(&request.body);
    assert_eq!(action_map(&envelope).get("agentId"), Some(&text("agent-1")));
}

#[tokio::test]
async fn not_found_is_an_api_error_without_code() {
    let (url, _requests) = start_responder(vec![error_reply(404, "Agent not found", None)]).await;
    let err = client_at(&url, signer(1)).get_agent(get_agent()).await.expect_err("404 must fail");
    let Error::Api { status, message, code, .. } = &err else { panic!("expected Error::Api, got {err:?}") };
    assert_eq!((*status, message.as_str(), code), (404, "Agent not found", &None));
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.code(), None);
}

#[tokio::test]
async fn conflict_keeps_the_servers_code() {
    let (url, _requests) = start_responder(vec![error_reply(409, "Already exists", Some("conflict"))]).await;
    let err = client_at(&url, signer(1)).get_agent(get_agent()).await.expect_err("409 must fail");
    let Error::Api { status, message, code, .. } = &err else { panic!("expected Error::Api, got {err:?}") };
    assert_eq!((*status, message.as_str()), (409, "Already exists"));
    assert_eq!(code, &Some(ErrorCode::Other("conflict".to_owned())));
    assert_eq!(err.code(), Some(ErrorCode::Other("conflict".to_owned())));
}

#[tokio::test]
async fn upgrade_required_is_protocol_too_old_with_both_versions() {
    let reply = error_reply(426, "Client protocol 2 is too old", Some("protocol_too_old")).protocol(Some("4"));
    let (url, _requests) = start_responder(vec![reply]).await;
    let client = Client::builder(&url, signer(1)).clock(Arc::new(|| TS)).protocol(Some(2)).build().expect("client");
    let err = client.list_agents(ListAgents::new()).await.expect_err("426 must fail");
    let Error::ProtocolTooOld { client_protocol, server_protocol, message, .. } = &err else {
        panic!("expected Error::ProtocolTooOld, got {err:?}")
    };
    assert_eq!(*client_protocol, 2);
    assert_eq!(*server_protocol, Some(4));
    assert_eq!(message, "Client protocol 2 is too old");
    assert_eq!(err.status(), Some(426));
    assert_eq!(err.code(), Some(ErrorCode::ProtocolTooOld));
    assert_eq!(client.server_protocol(), Some(4));
}

#[tokio::test]
async fn success_status_with_garbage_is_decode_with_the_raw_bytes() {
    let garbage: &[u8] = b"\xff\x00 this is not CBOR \xfe";
    let (url, _requests) = start_responder(vec![Reply::raw(200, "application/cbor", garbage)]).await;
    let err = client_at(&url, signer(1)).list_agents(ListAgents::new()).await.expect_err("garbage must fail");
    let Error::Decode { status, bytes, .. } = &err else { panic!("expected Error::Decode, got {err:?}") };
    assert_eq!(*status, 200);
    assert_eq!(bytes.as_ref(), garbage);
}

#[tokio::test]
async fn server_error_with_text_body_is_decode_with_status_and_raw_bytes() {
    let text: &[u8] = b"Internal Server Error";
    let (url, _requests) = start_responder(vec![Reply::raw(500, "text/plain", text)]).await;
    let err = client_at(&url, signer(1)).get_agent(get_agent()).await.expect_err("500 must fail");
    let Error::Decode { status, bytes, .. } = &err else { panic!("expected Error::Decode, got {err:?}") };
    assert_eq!(*status, 500);
    assert_eq!(bytes.as_ref(), text);
    assert_eq!(err.status(), Some(500));
}

#[tokio::test]
async fn typed_call_answered_with_another_response_is_decode() {
    let (url, _requests) = start_responder(vec![ok_reply()]).await;
    let err = client_at(&url, signer(1)).get_agent(get_agent()).await.expect_err("wrong type must fail");
    let Error::Decode { status, source, .. } = &err else { panic!("expected Error::Decode, got {err:?}") };
    assert_eq!(*status, 200);
    assert!(
        matches!(source, DecodeError::UnexpectedResponse { expected: "GetAgentResponse", got: "ListAgentsResponse" }),
        "the source names both responses: {source:?}"
    );
}

#[tokio::test]
async fn refused_connection_is_transport() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    let client = client_at(&format!("http://{addr}"), signer(1));
    let err = client.list_agents(ListAgents::new()).await.expect_err("nobody listens");
    assert!(matches!(err, Error::Transport(_)), "expected Error::Transport, got {err:?}");
    assert_eq!(client.server_protocol(), None);
}

#[tokio::test]
async fn invalid_urls_are_refused_when_building() {
    for url in ["ftp://x", "not a url"] {
        let err = Client::new(url, signer(1)).expect_err("invalid URL must be refused");
        let Error::InvalidUrl { url: given, .. } = &err else { panic!("{url}: expected InvalidUrl, got {err:?}") };
        assert_eq!(given, url);
        assert_eq!(err.status(), None);
    }
}

// ---------------------------------------------------------------------------------------------
// Envelope fields the builder controls
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn server_protocol_is_known_only_after_an_answer() {
    let (url, _requests) = start_responder(vec![ok_reply()]).await;
    let client = client_at(&url, signer(1));
    assert_eq!(client.server_protocol(), None);
    client.list_agents(ListAgents::new()).await.expect("list agents");
    assert_eq!(client.server_protocol(), Some(3));
}

#[tokio::test]
async fn default_envelope_declares_protocol_3_and_verifies() {
    let (url, mut requests) = start_responder(vec![ok_reply()]).await;
    let signer = signer(2);
    let client = client_at(&url, signer.clone());
    assert_eq!(client.account(), signer.principal());
    client.list_agents(ListAgents::new()).await.expect("list agents");
    let request = next_request(&mut requests).await;
    let envelope = envelope_map(&request.body);
    assert_eq!(envelope.get("protocol"), Some(&Ipld::Integer(3)));
    assert_eq!(envelope.get("type"), Some(&Ipld::String("AgentsAction".to_owned())));
    let verified = SignedEnvelope::decode(&request.body).expect("decode").verify(TS).expect("signature verifies");
    assert_eq!(verified.action_name(), "ListAgents");
    assert_eq!(verified.declared_protocol(), 3);
    assert_eq!(verified.signer(), signer.principal());
    assert_eq!(verified.account(), signer.principal());
}

#[tokio::test]
async fn protocol_none_omits_the_key() {
    let (url, mut requests) = start_responder(vec![ok_reply()]).await;
    let client = Client::builder(&url, signer(3)).clock(Arc::new(|| TS)).protocol(None).build().expect("client");
    client.list_agents(ListAgents::new()).await.expect("list agents");
    let request = next_request(&mut requests).await;
    let envelope = envelope_map(&request.body);
    assert!(!envelope.contains_key("protocol"), "protocol must be absent: {:?}", envelope.keys());
    let mut keys: Vec<&str> = envelope.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["account", "action", "sig", "signer", "type"]);
}

#[tokio::test]
async fn optional_none_fields_are_absent_and_ts_is_the_clock() {
    let (url, mut requests) = start_responder(vec![
        Reply::cbor(200, &AgentResponse::Error(ErrorResponse::new("Session not found"))).protocol(None),
    ])
    .await;
    let client = client_at(&url, signer(4));
    let action = GetSession::new("sess-1");
    // The answer does not matter here (a 200 `Error` body is still an API error).
    let err = client.get_session(action).await.expect_err("error body");
    assert!(matches!(&err, Error::Api { status: 200, .. }), "{err:?}");
    // No `X-Agents-Protocol` header: nothing learned about the server.
    assert_eq!(client.server_protocol(), None);

    let request = next_request(&mut requests).await;
    let envelope = envelope_map(&request.body);
    let action = action_map(&envelope);
    let expected: BTreeMap<String, Ipld> = [
        ("_".to_owned(), Ipld::String("GetSession".to_owned())),
        ("sessionId".to_owned(), Ipld::String("sess-1".to_owned())),
        ("ts".to_owned(), Ipld::Integer(TS.into())),
    ]
    .into_iter()
    .collect();
    assert_eq!(action, &expected, "afterSeq, beforeSeq and limit must be left out, not null");
    assert!(!action.contains_key("afterSeq"));
}

#[tokio::test]
async fn delegated_account_is_posted_with_the_signers_principal() {
    let (url, mut requests) = start_responder(vec![ok_reply()]).await;
    let key = signer(5);
    let account = signer(6).principal();
    let client = Client::builder(&url, key.clone()).clock(Arc::new(|| TS)).account(account).build().expect("client");
    assert_eq!(client.account(), account);
    client.list_agents(ListAgents::new()).await.expect("list agents");
    let request = next_request(&mut requests).await;
    let envelope = envelope_map(&request.body);
    assert_eq!(envelope.get("account"), Some(&Ipld::Bytes(account.to_bytes().to_vec())));
    assert_eq!(envelope.get("signer"), Some(&Ipld::Bytes(key.principal().to_bytes().to_vec())));
    let verified = SignedEnvelope::decode(&request.body).expect("decode").verify(TS).expect("signature verifies");
    assert_eq!((verified.signer(), verified.account()), (key.principal(), account));
}

#[tokio::test]
async fn two_identical_actions_in_one_millisecond_sign_different_envelopes() {
    let client = Client::builder("http://127.0.0.1:9", Ed25519Signer::from_seed(&[9; 32]))
        .clock(Arc::new(|| 1_000))
        .build()
        .expect("client");
    let action = AgentAction::ListAgents(seed_agents_protocol::generated::ListAgents::new());
    let first = client.sign(&action).await.expect("sign");
    let second = client.sign(&action).await.expect("sign");
    assert_ne!(first, second, "the second envelope carries ts 1001");
    let ts = |bytes: &[u8]| {
        let envelope = seed_agents_protocol::SignedEnvelope::decode(bytes).expect("decode");
        envelope.timestamp_ms()
    };
    assert_eq!((ts(&first), ts(&second)), (Some(1000.0), Some(1001.0)));
}
