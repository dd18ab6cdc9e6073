//! The client against loopback servers that stall or speak a newer protocol: timeouts, retries of
//! calls that are safe to repeat (and only those), idempotency keys, and unknown fields kept
//! through get → modify → update.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::{AgentResponse, wire};
use seed_agents_sdk::types::{
    AgentDefinition, AgentDefinitionSystemPrompt, AgentInfo, AgentInfoStatus, CreateSession, DeleteAgent, GetAgent,
    GetAgentResponse, ListAgents, UpdateAgent,
};
use seed_agents_sdk::{Client, Ed25519Signer, Error};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the loopback server does with each request after reading it.
#[derive(Clone)]
enum Behaviour {
    /// Never answers (the connection stays open until the client gives up).
    Stall,
    /// Answers each request with the next body of the script (then stalls).
    Script(Arc<std::sync::Mutex<Vec<Vec<u8>>>>),
}

/// Starts the server; every request's action map (from the posted envelope) comes out of the
/// receiver, in order.
async fn serve(behaviour: Behaviour) -> (String, mpsc::UnboundedReceiver<BTreeMap<String, Ipld>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(connection(stream, behaviour.clone(), sender.clone()));
        }
    });
    (url, receiver)
}

async fn connection(
    mut stream: TcpStream,
    behaviour: Behaviour,
    requests: mpsc::UnboundedSender<BTreeMap<String, Ipld>>,
) {
    loop {
        let Some(body) = read_request(&mut stream).await else { return };
        let Ok(Ipld::Map(envelope)) = wire::decode_ipld(&body) else { return };
        if let Some(Ipld::Map(action)) = envelope.get("action") {
            let _ = requests.send(action.clone());
        }
        let answer = match &behaviour {
            Behaviour::Stall => None,
            Behaviour::Script(script) => {
                let mut script = script.lock().unwrap();
                if script.is_empty() { None } else { Some(script.remove(0)) }
            }
        };
        let Some(answer) = answer else {
            // Hold the connection open without a byte until the client drops it.
            let mut rest = [0u8; 1];
            let _ = stream.read(&mut rest).await;
            return;
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/cbor\r\nx-agents-protocol: 3\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// Reads one HTTP/1.1 request and returns its body (`None` when the peer went away).
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        let n = stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    }
    Some(buffer[header_end..header_end + length].to_vec())
}

fn client(url: &str, retries: usize) -> Client {
    Client::builder(url, Ed25519Signer::from_seed(&[9; 32]))
        .request_timeout(Some(Duration::from_millis(300)))
        .max_retries(retries)
        .build()
        .unwrap()
}

/// Every action map the server received so far.
fn drain(requests: &mut mpsc::UnboundedReceiver<BTreeMap<String, Ipld>>) -> Vec<BTreeMap<String, Ipld>> {
    let mut seen = Vec::new();
    while let Ok(action) = requests.try_recv() {
        seen.push(action);
    }
    seen
}

#[tokio::test]
async fn a_stalled_read_times_out_and_is_retried() {
    let (url, mut requests) = serve(Behaviour::Stall).await;
    let err = client(&url, 2).list_agents(ListAgents::new()).await.expect_err("the server never answers");
    assert!(err.is_timeout(), "a timeout, not a hang: {err:?}");
    let seen = drain(&mut requests);
    assert_eq!(seen.len(), 3, "one send and two retries");
    // Each attempt is signed anew: a later `ts` every time.
    let ts: Vec<&Ipld> = seen.iter().map(|action| &action["ts"]).collect();
    assert!(ts.windows(2).all(|pair| pair[0] != pair[1]), "{ts:?}");
}

#[tokio::test]
async fn a_write_without_an_idempotency_key_is_not_sent_twice() {
    let (url, mut requests) = serve(Behaviour::Stall).await;
    let err = client(&url, 3).delete_agent(DeleteAgent::new("agent-1")).await.expect_err("stalled");
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(drain(&mut requests).len(), 1, "a repeated delete could act twice: no retry");
}

#[tokio::test]
async fn a_keyed_write_gets_a_generated_key_and_every_retry_carries_the_same_one() {
    let (url, mut requests) = serve(Behaviour::Stall).await;
    let err = client(&url, 1).create_session(CreateSession::new("agent-1")).await.expect_err("stalled");
    assert!(err.is_timeout(), "{err:?}");
    let seen = drain(&mut requests);
    assert_eq!(seen.len(), 2, "one send and one retry");
    let keys: Vec<&Ipld> = seen.iter().map(|action| &action["clientRequestId"]).collect();
    assert!(matches!(keys[0], Ipld::String(key) if key.starts_with("sdk-") && key.len() == 36), "{keys:?}");
    assert_eq!(keys[0], keys[1], "the retry is the same request to the server");
}

#[tokio::test]
async fn a_caller_key_is_kept_and_retries_can_be_turned_off_per_call() {
    let (url, mut requests) = serve(Behaviour::Stall).await;
    let client = client(&url, 3);
    let action = CreateSession::new("agent-1").client_request_id("mine-1");
    let err = client.with_max_retries(0).create_session(action).await.expect_err("stalled");
    assert!(err.is_timeout(), "{err:?}");
    let seen = drain(&mut requests);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["clientRequestId"], Ipld::String("mine-1".to_owned()));
}

#[tokio::test]
async fn a_per_call_timeout_overrides_the_clients() {
    let (url, _requests) = serve(Behaviour::Stall).await;
    // The client would wait an hour; the call gives up on its own limit.
    let client = Client::builder(&url, Ed25519Signer::from_seed(&[9; 32]))
        .request_timeout(Some(Duration::from_secs(3600)))
        .max_retries(0)
        .build()
        .unwrap();
    let err = client.with_timeout(Duration::from_millis(200)).get_agent(GetAgent::new("a")).await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)) && err.is_timeout(), "{err:?}");
}

/// A newer server's agent: fields this build does not know, at the top of the agent and inside its
/// definition.
fn newer_agent() -> Vec<u8> {
    let definition = AgentDefinition::new(
        "model-x",
        "provider-1",
        "Helper",
        AgentDefinitionSystemPrompt::String("Be brief.".to_owned()),
    );
    let agent = AgentInfo::new("z6Mk-account", 1, definition, "agent-1", "/state", AgentInfoStatus::Idle, 2);
    let response = AgentResponse::GetAgentResponse(GetAgentResponse::new(agent, 0));
    let mut value = wire::to_ipld(&response).unwrap();
    let Ipld::Map(map) = &mut value else { panic!("a map") };
    let Some(Ipld::Map(agent)) = map.get_mut("agent") else { panic!("agent is a map") };
    agent.insert("badge".to_owned(), Ipld::String("gold".to_owned()));
    let Some(Ipld::Map(definition)) = agent.get_mut("definition") else { panic!("definition is a map") };
    definition.insert(
        "reasoning".to_owned(),
        Ipld::Map(BTreeMap::from([("effort".to_owned(), Ipld::String("high".to_owned()))])),
    );
    wire::ipld_to_vec(&value).unwrap()
}

#[tokio::test]
async fn unknown_fields_survive_get_modify_update() {
    let definition = AgentDefinition::new(
        "model-x",
        "provider-1",
        "Renamed",
        AgentDefinitionSystemPrompt::String("Be brief.".to_owned()),
    );
    let agent = AgentInfo::new("z6Mk-account", 1, definition, "agent-1", "/state", AgentInfoStatus::Idle, 3);
    let updated = wire::to_vec(&AgentResponse::GetAgentResponse(GetAgentResponse::new(agent, 0))).unwrap();
    let script = Arc::new(std::sync::Mutex::new(vec![newer_agent(), updated]));
    let (url, mut requests) = serve(Behaviour::Script(script)).await;
    let client = client(&url, 0);

    let got = client.get_agent(GetAgent::new("agent-1")).await.unwrap();
    assert_eq!(got.agent.extra.get("badge").map(|v| v.0.clone()), Some(Ipld::String("gold".to_owned())));
    let mut definition = got.agent.definition;
    assert!(definition.extra.contains_key("reasoning"), "{:?}", definition.extra);
    definition.name = "Renamed".to_owned();
    client.update_agent(UpdateAgent::new("agent-1", definition)).await.unwrap();

    let seen = drain(&mut requests);
    assert_eq!(seen.len(), 2);
    let Some(Ipld::Map(sent)) = seen[1].get("definition") else { panic!("UpdateAgent carries a definition") };
    assert_eq!(sent.get("name"), Some(&Ipld::String("Renamed".to_owned())));
    assert_eq!(
        sent.get("reasoning"),
        Some(&Ipld::Map(BTreeMap::from([("effort".to_owned(), Ipld::String("high".to_owned()))]))),
        "the field this build does not know went back unchanged"
    );
}
