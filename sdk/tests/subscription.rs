//! SDK subscriptions against a scripted loopback server (a WebSocket route and a message route):
//! duplicates dropped, a gap filled from `GetSession` before the event that revealed it, a
//! reconnect that re-signs `Subscribe` with `afterSeq` = the last delivered `seq`, `Resumed`
//! with what was not replayed, refused keys not asked for again, several keys on one socket,
//! and the socket closed when the stream is dropped.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    GetSessionResponse, SessionEvent, SessionEventPayload, SessionInfo, SessionInfoStatus, ToolCallEvent,
    ToolCallEventType,
};
use seed_agents_protocol::{AgentResponse, SignedEnvelope, Value, wire};
use seed_agents_sdk::subscription::Reconnect;
use seed_agents_sdk::{Client, Ed25519Signer, Event};
use serde_json::json;
use tokio::sync::{Mutex, mpsc, watch};

const SESSION: &str = "s1";

/// What the scripted server saw.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// A `Subscribe` on connection `n`: its key and `afterSeq`.
    Subscribe(usize, String, Option<i64>),
    /// A `GetSession` with its `afterSeq` and `beforeSeq`.
    GetSession(Option<i64>, Option<i64>),
    /// Connection `n` closed by the client.
    Closed(usize),
}

struct Script {
    connections: Mutex<usize>,
    seen: mpsc::UnboundedSender<Seen>,
    /// The last `seq` the test took from the stream: a connection is dropped only once the
    /// client has delivered everything sent on it.
    delivered: watch::Sender<i64>,
}

fn event(seq: i64) -> SessionEvent {
    SessionEvent::new(
        seq,
        SessionEventPayload::ToolCallEvent(ToolCallEvent::new(
            format!("call-{seq}"),
            Value(Ipld::Null),
            "read",
            ToolCallEventType::ToolCall,
        )),
        format!("event-{seq}"),
        seq,
        SESSION,
    )
}

fn append(seq: i64) -> String {
    json!({"_": "append", "key": format!("sessions/{SESSION}"), "event": event(seq)}).to_string()
}

/// The action of a signed envelope (checked to verify, as a server would).
fn action(bytes: &[u8]) -> std::collections::BTreeMap<String, Ipld> {
    let envelope = SignedEnvelope::decode(bytes).unwrap();
    let now = envelope.timestamp_ms().unwrap() as i64;
    let verified = envelope.verify_with(now, 300_000, None).unwrap();
    verified.action().clone()
}

async fn socket(State(script): State<Arc<Script>>, upgrade: WebSocketUpgrade) -> axum::response::Response {
    upgrade.on_upgrade(move |socket| serve(script, socket))
}

/// Connection 1: a subscription, `1 2 2 5` (a duplicate and a gap), then the server drops it.
/// Connection 2: both keys again (`agents/x` refused), `6`, then the server drops it again.
/// Connection 3: only the session key; `7`; stays open until the client goes.
async fn serve(script: Arc<Script>, mut socket: WebSocket) {
    let number = {
        let mut connections = script.connections.lock().await;
        *connections += 1;
        *connections
    };
    let send = |text: String| Message::Text(text.into());
    socket.send(send(json!({"_": "connected", "connectedAt": 1}).to_string())).await.unwrap();
    let mut subscribed = 0;
    while let Some(Ok(message)) = socket.recv().await {
        let Message::Binary(bytes) = message else { continue };
        let action = action(&bytes);
        let Some(Ipld::String(key)) = action.get("key") else { panic!("a key") };
        let after = match action.get("afterSeq") {
            Some(Ipld::Integer(after)) => Some(*after as i64),
            _ => None,
        };
        script.seen.send(Seen::Subscribe(number, key.clone(), after)).unwrap();
        if key == "agents/x" {
            let refused = json!({"_": "error", "key": key, "message": "Agent not found"});
            socket.send(send(refused.to_string())).await.unwrap();
        } else {
            let subscribed_frame = json!({"_": "subscribed", "key": key, "accountId": "z"});
            socket.send(send(subscribed_frame.to_string())).await.unwrap();
        }
        subscribed += 1;
        // The refused key is asked for on the first connection only.
        let expected = if number == 1 { 2 } else { 1 };
        if subscribed < expected {
            continue;
        }
        let appends: &[i64] = match number {
            1 => &[1, 2, 2, 5],
            2 => &[4, 6],
            _ => &[7],
        };
        for seq in appends {
            socket.send(send(append(*seq))).await.unwrap();
        }
        if number < 3 {
            // Once the client has delivered what this connection sent, drop it as a restart would.
            let last = appends.last().copied().unwrap_or_default();
            let _ = script.delivered.subscribe().wait_for(|delivered| *delivered >= last).await;
            return;
        }
    }
    script.seen.send(Seen::Closed(number)).unwrap();
}

async fn message(State(script): State<Arc<Script>>, body: axum::body::Bytes) -> axum::response::Response {
    let action = action(&body);
    let seq = |name: &str| match action.get(name) {
        Some(Ipld::Integer(value)) => Some(*value as i64),
        _ => None,
    };
    let (after, before) = (seq("afterSeq"), seq("beforeSeq"));
    script.seen.send(Seen::GetSession(after, before)).unwrap();
    let events: Vec<SessionEvent> = (after.unwrap_or(0) + 1..before.unwrap_or(i64::MAX).min(100)).map(event).collect();
    let session = SessionInfo::new("z", "a", 1, SESSION, SessionInfoStatus::Idle, 1);
    let response = AgentResponse::GetSessionResponse(GetSessionResponse::new(events, session, String::new()));
    ([("content-type", "application/cbor")], wire::to_vec(&response).unwrap()).into_response()
}

use axum::response::IntoResponse as _;

#[tokio::test]
async fn a_subscription_delivers_each_seq_once_across_gaps_duplicates_and_reconnects() {
    let (seen, mut sightings) = mpsc::unbounded_channel();
    let script = Arc::new(Script { connections: Mutex::new(0), seen, delivered: watch::channel(0).0 });
    let app = axum::Router::new()
        .route("/agents/ws", get(socket))
        .route("/api/message", post(message))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = Client::new(&url, Ed25519Signer::from_seed(&[3; 32])).unwrap();
    let fast = Reconnect {
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        ..Reconnect::default()
    };
    let mut events = client.subscribe(format!("sessions/{SESSION}")).key("agents/x").reconnect(fast).start();

    let mut seqs = Vec::new();
    let mut log = Vec::new();
    while seqs.last() != Some(&7) {
        let next = tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap().unwrap();
        match &next {
            Event::Append { event, .. } => {
                seqs.push(event.seq);
                script.delivered.send_replace(event.seq);
            }
            Event::Subscribed { key, .. } => log.push(format!("subscribed {key}")),
            Event::Error { key, message, .. } => log.push(format!("error {key:?} {message}")),
            Event::Disconnected { .. } => log.push("disconnected".into()),
            Event::Resumed { refetch, partials_lost } => log.push(format!("resumed {refetch:?} {partials_lost}")),
            other => log.push(format!("{other:?}")),
        }
    }
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6, 7], "each once, in order; 3 and 4 from GetSession");
    assert_eq!(
        log,
        [
            "subscribed sessions/s1",
            "error Some(\"agents/x\") Agent not found",
            "disconnected",
            "subscribed sessions/s1",
            "resumed [] false",
            "disconnected",
            "subscribed sessions/s1",
            "resumed [] false",
        ]
    );
    drop(events);
    let mut all = Vec::new();
    while let Ok(Some(sighting)) = tokio::time::timeout(Duration::from_secs(5), sightings.recv()).await {
        let closed = matches!(sighting, Seen::Closed(_));
        all.push(sighting);
        if closed {
            break;
        }
    }
    assert_eq!(
        all,
        [
            Seen::Subscribe(1, "sessions/s1".into(), None),
            Seen::Subscribe(1, "agents/x".into(), None),
            Seen::GetSession(Some(2), Some(5)),
            // Resumed from the last seq delivered; the refused key is not asked for again.
            Seen::Subscribe(2, "sessions/s1".into(), Some(5)),
            Seen::Subscribe(3, "sessions/s1".into(), Some(6)),
            Seen::Closed(3),
        ],
        "dropping the stream closed the socket"
    );
}

/// A server that is not there: the first failure is `Disconnected`, each later one `Retrying`
/// with the delay before the next attempt, and none ends the stream.
#[tokio::test]
async fn every_failed_attempt_to_connect_is_reported() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let client = Client::new(&format!("http://{closed}"), Ed25519Signer::from_seed(&[4; 32])).unwrap();
    let fast =
        Reconnect { min_delay: Duration::from_millis(5), max_delay: Duration::from_millis(20), ..Reconnect::default() };
    let mut events = client.subscribe(format!("sessions/{SESSION}")).reconnect(fast).start();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap().unwrap());
    }
    assert!(matches!(&seen[0], Event::Disconnected { .. }), "{seen:?}");
    for event in &seen[1..] {
        match event {
            Event::Retrying { reason, retry_in } => {
                assert!(!reason.is_empty());
                // The back-off with its jitter (up to the delay again).
                assert!(*retry_in <= Duration::from_millis(40), "{retry_in:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}
