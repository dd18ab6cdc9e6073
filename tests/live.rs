//! `/agents/ws` over real loopback WebSockets: every key kind × role, the account switch, replay
//! then live with no gap or duplicate under concurrent appends, revocation, limits, downgraded
//! frames for old clients, text frames, pings and shutdown (raw sockets, signed like the SDK
//! signs, where the SDK would never send such frames).

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentCollaboratorRole, DeleteSession, InviteAgentCollaborator, InvokeSessionTool,
    InvokeSessionToolVerb, RemoveAgentCollaborator, SetAgentPublicChat, SetAgentPublicRead,
};
use seed_agents_server::testing::db::ToSql;
use serde_json::{Value as Json, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::db::{EMPTY_MAP, write_db};
use crate::support::{TestServer, User, action_map, now_ms};

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A raw socket to the server, past its `connected` frame.
struct Socket {
    ws: Ws,
}

impl Socket {
    async fn open(server: &TestServer) -> Self {
        let url = format!("{}/agents/ws", server.url.replacen("http", "ws", 1));
        let (ws, _) = tokio_tungstenite::connect_async(url).await.expect("connect");
        let mut socket = Self { ws };
        let connected = socket.next().await;
        assert_eq!(connected["_"], "connected", "{connected}");
        assert!(connected["connectedAt"].as_i64().is_some_and(|at| at > 0), "{connected}");
        socket
    }

    /// Signs a `Subscribe` as `user` (declaring `protocol`) and sends it as a binary frame.
    async fn send_subscribe(&mut self, user: &User, key: &str, after_seq: Option<i64>, protocol: Option<u32>) {
        let bytes = subscribe_bytes(user, key, after_seq, protocol).await;
        self.ws.send(Message::Binary(bytes.into())).await.expect("send");
    }

    /// Subscribes and returns the answer (`subscribed` or `error`), skipping live frames of
    /// earlier subscriptions that arrive first.
    async fn subscribe(&mut self, user: &User, key: &str) -> Json {
        self.send_subscribe(user, key, None, Some(3)).await;
        loop {
            let frame = self.next().await;
            if matches!(frame["_"].as_str(), Some("subscribed" | "error" | "closed")) {
                return frame;
            }
        }
    }

    /// Frames until `done` holds for what was collected (10 s per frame at most).
    async fn until(&mut self, done: impl Fn(&[Json]) -> bool) -> Vec<Json> {
        let mut frames = Vec::new();
        while !done(&frames) {
            frames.push(self.next().await);
        }
        frames
    }

    /// The next frame (10 s at most), as JSON.
    async fn next(&mut self) -> Json {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(10), self.ws.next())
                .await
                .expect("a frame within 10 s")
                .expect("the socket is open")
                .expect("a frame");
            match message {
                Message::Text(text) => return serde_json::from_str(text.as_str()).expect("JSON frame"),
                Message::Close(frame) => return json!({"_": "closed", "code": frame.map(|f| u16::from(f.code))}),
                _ => {}
            }
        }
    }

    /// Nothing arrives for `wait`.
    async fn quiet(&mut self, wait: Duration) {
        if let Ok(Some(Ok(Message::Text(text)))) = tokio::time::timeout(wait, self.ws.next()).await {
            panic!("expected no frame, got {text}");
        }
    }
}

/// A `Subscribe` signed by `user`, with a `ts` never used before (the socket's replay guard
/// refuses a byte-identical envelope).
async fn subscribe_bytes(user: &User, key: &str, after_seq: Option<i64>, protocol: Option<u32>) -> Vec<u8> {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let ts = now_ms();
    let ts = ts.max(LAST.fetch_max(ts, std::sync::atomic::Ordering::Relaxed) + 1);
    LAST.fetch_max(ts, std::sync::atomic::Ordering::Relaxed);
    let mut fields = vec![("key", Ipld::String(key.to_owned()))];
    if let Some(after) = after_seq {
        fields.push(("afterSeq", Ipld::Integer(after.into())));
    }
    user.sign_map(action_map("Subscribe", &fields), ts, protocol).await
}

fn write(session_id: &str, path: &str, content: &str) -> InvokeSessionTool {
    let input = Ipld::Map(
        [
            ("address".to_owned(), Ipld::String(format!("~/memory/{path}"))),
            ("content".to_owned(), Ipld::String(content.to_owned())),
        ]
        .into_iter()
        .collect(),
    );
    InvokeSessionTool { input: Value(input), session_id: session_id.into(), verb: InvokeSessionToolVerb::Write }
}

/// A root run and a child of it, for `runs/` keys.
async fn insert_runs(server: &TestServer, owner: &User, agent_id: &str, session_id: &str) -> (String, String) {
    let (root, child) = (format!("root-{agent_id}"), format!("child-{agent_id}"));
    let (owner, agent_id, session_id) = (owner.id.to_string(), agent_id.to_owned(), session_id.to_owned());
    let rows = [(root.clone(), None, 1_i64), (child.clone(), Some(root.clone()), 2)];
    let root_run = root.clone();
    write_db(server, move |conn| {
        for (id, parent, created) in rows {
            conn.execute(
                "INSERT INTO runs (id, account_id, root_run_id, parent_run_id, kind, origin, agent_id, session_id,
                                   title, input_cbor, status, queue, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, 'agent', 'user', ?5, ?6, 'Turn', ?8, 'succeeded', 'interactive', ?7, ?7)",
                &[&id as &dyn ToSql, &owner, &root_run, &parent, &agent_id, &session_id, &created, &EMPTY_MAP][..],
            )?;
        }
        Ok(())
    })
    .await;
    (root, child)
}

async fn member(owner: &User, user: &User, agent_id: &str, role: AgentCollaboratorRole, accept: bool) {
    let invite = InviteAgentCollaborator { agent_id: agent_id.into(), account_id: user.id.clone(), role };
    owner.call(invite).await.unwrap();
    if accept {
        user.call(AcceptAgentInvite { agent_id: agent_id.into() }).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_kind_for_every_role() {
    let server = TestServer::start().await;
    let owner = server.user();
    // One private agent, one public-read agent, one public-chat agent.
    let mut agents = Vec::new();
    for (name, public_read, public_chat) in [("private", false, false), ("public", true, false), ("chat", true, true)] {
        let agent = owner.create_agent(name).await;
        let session = owner.create_session(&agent, None).await;
        let (root, child) = insert_runs(&server, &owner, &agent, &session).await;
        if public_read {
            owner.call(SetAgentPublicRead { agent_id: agent.clone(), public_read: true }).await.unwrap();
        }
        if public_chat {
            owner.call(SetAgentPublicChat { agent_id: agent.clone(), public_chat: true }).await.unwrap();
        }
        agents.push((name, agent, session, root, child));
    }
    let (writer, reader, invitee, stranger) = (server.user(), server.user(), server.user(), server.user());
    for (_, agent, ..) in &agents {
        member(&owner, &writer, agent, AgentCollaboratorRole::Writer, true).await;
        member(&owner, &reader, agent, AgentCollaboratorRole::Reader, true).await;
        member(&owner, &invitee, agent, AgentCollaboratorRole::Reader, false).await;
    }
    let roles =
        [("owner", &owner), ("writer", &writer), ("reader", &reader), ("invitee", &invitee), ("stranger", &stranger)];
    let mut failures = Vec::new();
    let mut cells = 0;
    for (name, agent, session, root, child) in &agents {
        for (role, user) in roles {
            // Members and owners see everything; others only public agents (as readers or chatters).
            let sees = matches!(role, "owner" | "writer" | "reader") || *name != "private";
            let keys = [
                (format!("agents/{agent}"), "Agent not found", format!("agents/{agent}")),
                (format!("sessions/{session}"), "Session not found", format!("sessions/{session}")),
                (format!("runs/{root}"), "Run not found", format!("runs/{root}")),
                (format!("runs/{child}"), "Run not found", format!("runs/{root}")),
            ];
            let mut socket = Socket::open(&server).await;
            for (key, refusal, _) in &keys {
                cells += 1;
                let answer = socket.subscribe(user, key).await;
                let expected = if sees {
                    json!({"_": "subscribed", "key": key, "accountId": user.id})
                } else {
                    json!({"_": "error", "key": key, "message": refusal})
                };
                if answer != expected {
                    failures.push(format!("{name} {role} {key}: expected {expected}, got {answer}"));
                }
                // Drain the replay: a session replays its change, a run tree one change per run.
                if sees && key.starts_with("sessions/") {
                    let change = socket.next().await;
                    assert_eq!((change["_"].as_str(), change["key"].as_str()), (Some("change"), Some(key.as_str())));
                    assert_eq!(change["value"]["id"], session.as_str());
                }
                if sees && key.starts_with("runs/") {
                    for expected_id in [root, child] {
                        let change = socket.next().await;
                        assert_eq!(change["_"], "change", "{change}");
                        assert_eq!(change["key"], format!("runs/{root}"), "a child id subscribes to its root's tree");
                        assert_eq!(change["value"]["id"], **expected_id);
                    }
                }
            }
            cells += 1;
            let own = socket.subscribe(user, &format!("account/{}", user.id)).await;
            if own["_"] != "subscribed" {
                failures.push(format!("{name} {role} own account: {own}"));
            }
            cells += 1;
            let other = socket
                .subscribe(user, &format!("account/{}", if role == "owner" { &reader.id } else { &owner.id }))
                .await;
            if other["message"] != "Subscription key is not authorized" {
                failures.push(format!("{name} {role} another account: {other}"));
            }
        }
    }
    let mut socket = Socket::open(&server).await;
    for bad in ["foo/x", "sessions/", "sessions/a/b", "agents", "account/"] {
        cells += 1;
        let answer = socket.subscribe(&owner, bad).await;
        if answer != json!({"_": "error", "key": bad, "message": "Subscription key is not authorized"}) {
            failures.push(format!("{bad}: {answer}"));
        }
    }
    println!("{cells} subscriptions checked (3 agents × 5 roles × 6 keys + 5 malformed keys)");
    assert!(failures.is_empty(), "{} of {cells} cells differ:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_is_bound_to_its_first_account() {
    let server = TestServer::start().await;
    let (alice, bob) = (server.user(), server.user());
    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&alice, &format!("account/{}", alice.id)).await["_"], "subscribed");
    let refused = socket.subscribe(&bob, &format!("account/{}", bob.id)).await;
    assert_eq!(
        refused,
        json!({"_": "error", "key": format!("account/{}", bob.id), "message": "WebSocket account switch is not allowed"})
    );
    // The socket stays open and bound to alice.
    assert_eq!(socket.subscribe(&alice, &format!("account/{}", alice.id)).await["_"], "subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_then_live_has_no_gap_and_no_duplicate_under_concurrent_appends() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("busy").await;
    let session = owner.create_session(&agent, None).await;
    let writes = 60;
    let (started, mut some_written) = tokio::sync::watch::channel(0);
    let appender = {
        let owner = owner.clone();
        let session = session.clone();
        tokio::spawn(async move {
            for index in 0..writes {
                owner.call(write(&session, &format!("notes/{index}.md"), "x")).await.unwrap();
                started.send_replace(index + 1);
            }
        })
    };
    // Subscribe while the appender runs: part of the log is replayed, the rest arrives live.
    some_written.wait_for(|written| *written >= 5).await.unwrap();
    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&owner, &format!("sessions/{session}")).await["_"], "subscribed");
    assert_eq!(socket.next().await["_"], "change");
    let total = writes * 2; // a tool_call and a tool_result per write
    let mut seqs = Vec::new();
    while seqs.len() < total as usize {
        let frame = socket.next().await;
        match frame["_"].as_str() {
            Some("append") => seqs.push(frame["event"]["seq"].as_i64().unwrap()),
            Some("change") => {}
            other => panic!("unexpected {other:?}: {frame}"),
        }
    }
    appender.await.unwrap();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>(), "every seq once, in order");
    // Nothing more: no duplicate arrives late.
    let mut extra = Vec::new();
    while let Ok(Some(Ok(Message::Text(text)))) =
        tokio::time::timeout(Duration::from_millis(300), socket.ws.next()).await
    {
        let frame: Json = serde_json::from_str(text.as_str()).unwrap();
        if frame["_"] == "append" {
            extra.push(frame);
        }
    }
    assert!(extra.is_empty(), "late duplicates: {extra:?}");

    // afterSeq replays only what follows it.
    let mut socket = Socket::open(&server).await;
    socket.send_subscribe(&owner, &format!("sessions/{session}"), Some(total - 3), Some(3)).await;
    assert_eq!(socket.next().await["_"], "subscribed");
    assert_eq!(socket.next().await["_"], "change");
    for seq in total - 2..=total {
        assert_eq!(socket.next().await["event"]["seq"], seq);
    }
    socket.send_subscribe(&owner, &format!("sessions/{session}"), Some(-1), Some(3)).await;
    assert_eq!(
        socket.next().await,
        json!({"_": "error", "key": format!("sessions/{session}"), "message": "afterSeq must be a non-negative integer"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_frames_reach_agent_and_account_subscribers_with_their_own_role() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("shared").await;
    let session = owner.create_session(&agent, None).await;
    let (reader, public) = (server.user(), server.user());
    member(&owner, &reader, &agent, AgentCollaboratorRole::Reader, true).await;
    owner.call(SetAgentPublicRead { agent_id: agent.clone(), public_read: true }).await.unwrap();

    let mut owner_account = Socket::open(&server).await;
    assert_eq!(owner_account.subscribe(&owner, &format!("account/{}", owner.id)).await["_"], "subscribed");
    let mut reader_account = Socket::open(&server).await;
    assert_eq!(reader_account.subscribe(&reader, &format!("account/{}", reader.id)).await["_"], "subscribed");
    let mut public_agent = Socket::open(&server).await;
    assert_eq!(public_agent.subscribe(&public, &format!("agents/{agent}")).await["_"], "subscribed");

    owner.call(write(&session, "a.md", "hello")).await.unwrap();
    // A write verb makes: the memory hint, then two appends with a session-event hint each. The
    // owner's account stream carries all five.
    let hints_of = |account: &str| {
        let key = format!("account/{account}");
        move |frames: &[Json]| {
            frames.iter().filter(|f| f["key"] == key && f["value"]["reason"] == "session-event").count() == 2
        }
    };
    let owner_frames = owner_account.until(hints_of(&owner.id)).await;
    let appends: Vec<_> =
        owner_frames.iter().filter(|f| f["_"] == "append").map(|f| f["event"]["seq"].clone()).collect();
    assert_eq!(appends, [json!(1), json!(2)], "{owner_frames:?}");
    // (Hints of the setup above may still be on their way when a socket subscribes: only the
    // write's own hints are counted.)
    let write_hints = |frames: &[Json], account: &str| -> Vec<Json> {
        frames
            .iter()
            .filter(|f| f["key"] == format!("account/{account}"))
            .filter(|f| matches!(f["value"]["reason"].as_str(), Some("agent-memory-changed" | "session-event")))
            .map(|f| f["value"].clone())
            .collect()
    };
    let hints = write_hints(&owner_frames, &owner.id);
    let reasons: Vec<_> = hints.iter().map(|hint| hint["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["agent-memory-changed", "session-event", "session-event"], "{owner_frames:?}");
    assert_eq!(hints[1], json!({"reason": "session-event", "agentId": agent, "sessionId": session}));
    // The member hears the same, with its hints under its own key.
    let reader_frames = reader_account.until(hints_of(&reader.id)).await;
    assert_eq!(reader_frames.iter().filter(|f| f["_"] == "append").count(), 2, "{reader_frames:?}");
    assert_eq!(write_hints(&reader_frames, &reader.id).len(), 3, "{reader_frames:?}");
    // A public agent subscriber: the owner's hints, no transcript.
    let public_frames = public_agent.until(hints_of(&owner.id)).await;
    assert!(public_frames.iter().all(|f| f["_"] == "change"), "{public_frames:?}");
    assert_eq!(write_hints(&public_frames, &owner.id).len(), 3, "{public_frames:?}");
    public_agent.quiet(Duration::from_millis(200)).await;

    // An agent change: each subscriber sees its own accessRole.
    let mut owner_agent = Socket::open(&server).await;
    assert_eq!(owner_agent.subscribe(&owner, &format!("agents/{agent}")).await["_"], "subscribed");
    owner.call(SetAgentPublicChat { agent_id: agent.clone(), public_chat: true }).await.unwrap();
    let role_of = |frames: &[Json]| {
        frames
            .iter()
            .find(|f| f["key"] == format!("agents/{agent}"))
            .map(|f| f["value"]["accessRole"].clone())
            .unwrap_or_else(|| panic!("no agent change in {frames:?}"))
    };
    let agent_key = format!("agents/{agent}");
    let agent_changed = |frames: &[Json]| frames.iter().any(|f| f["key"] == agent_key);
    assert_eq!(role_of(&owner_agent.until(agent_changed).await), "owner");
    assert_eq!(
        role_of(&public_agent.until(agent_changed).await),
        "chatter",
        "public chat makes public readers chatters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_access_ends_live_subscriptions() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("revoked").await;
    let session = owner.create_session(&agent, None).await;
    let (reader, public) = (server.user(), server.user());
    member(&owner, &reader, &agent, AgentCollaboratorRole::Reader, true).await;

    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&reader, &format!("agents/{agent}")).await["_"], "subscribed");
    assert_eq!(socket.subscribe(&reader, &format!("sessions/{session}")).await["_"], "subscribed");
    assert_eq!(socket.next().await["_"], "change");
    owner.call(RemoveAgentCollaborator { agent_id: agent.clone(), account_id: reader.id.clone() }).await.unwrap();
    // (The member's own `agent-invites-changed` hint may come first, on its agent key.)
    let errors = |frames: &[Json]| frames.iter().filter(|f| f["_"] == "error").count() == 2;
    let mut ended: Vec<Json> = socket.until(errors).await.into_iter().filter(|f| f["_"] == "error").collect();
    ended.sort_by_key(|frame| frame["key"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        ended,
        [
            json!({"_": "error", "key": format!("agents/{agent}"), "message": "Agent not found"}),
            json!({"_": "error", "key": format!("sessions/{session}"), "message": "Session not found"}),
        ]
    );
    owner.call(write(&session, "after.md", "x")).await.unwrap();
    socket.quiet(Duration::from_millis(300)).await;

    // Public read turned off ends a public reader's subscription the same way.
    owner.call(SetAgentPublicRead { agent_id: agent.clone(), public_read: true }).await.unwrap();
    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&public, &format!("sessions/{session}")).await["_"], "subscribed");
    assert_eq!(socket.next().await["_"], "change");
    for _ in 0..2 {
        assert_eq!(socket.next().await["_"], "append", "the replay");
    }
    owner.call(SetAgentPublicRead { agent_id: agent.clone(), public_read: false }).await.unwrap();
    let ended = socket.next().await;
    assert_eq!(ended, json!({"_": "error", "key": format!("sessions/{session}"), "message": "Session not found"}));

    // A deleted session ends its subscribers' keys too.
    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&owner, &format!("sessions/{session}")).await["_"], "subscribed");
    for _ in 0..3 {
        socket.next().await;
    }
    owner.call(DeleteSession { session_id: session.clone() }).await.unwrap();
    assert_eq!(
        socket.next().await,
        json!({"_": "error", "key": format!("sessions/{session}"), "message": "Session not found"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_refuse_with_codes_and_old_clients_get_their_shape() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| {
        config.ws_subscriptions = 2;
        config.ws_per_account = 1;
    })
    .await;
    let owner = server.user();
    let agent = owner.create_agent("limits").await;
    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&owner, &format!("account/{}", owner.id)).await["_"], "subscribed");
    assert_eq!(socket.subscribe(&owner, &format!("agents/{agent}")).await["_"], "subscribed");
    let third = format!("sessions/{}", owner.create_session(&agent, None).await);
    assert_eq!(
        socket.subscribe(&owner, &third).await,
        json!({"_": "error", "key": third, "code": "subscription_limit",
               "message": "Too many subscriptions on this connection (limit 2)"})
    );
    // The same key again is not a new subscription.
    assert_eq!(socket.subscribe(&owner, &format!("agents/{agent}")).await["_"], "subscribed");

    // A protocol 1 client hears the same refusal without the code it does not know.
    let mut second = Socket::open(&server).await;
    second.send_subscribe(&owner, &format!("agents/{agent}"), None, None).await;
    assert_eq!(second.next().await, json!({"_": "error", "message": "Too many live connections for this account"}));
    let closed = second.next().await;
    assert_eq!(closed, json!({"_": "closed", "code": 1013}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_are_checked_before_anything_else() {
    let server = TestServer::start().await;
    let owner = server.user();
    let mut socket = Socket::open(&server).await;
    // A text frame as a JSON array of bytes is accepted, as upstream accepts it.
    let bytes = subscribe_bytes(&owner, &format!("account/{}", owner.id), None, Some(3)).await;
    socket.ws.send(Message::Text(serde_json::to_string(&bytes).unwrap().into())).await.unwrap();
    assert_eq!(socket.next().await["_"], "subscribed");
    // The same envelope again is a replay.
    socket.ws.send(Message::Binary(bytes.into())).await.unwrap();
    assert_eq!(socket.next().await, json!({"_": "error", "message": "Replayed envelope"}));
    socket.ws.send(Message::Text("hello".into())).await.unwrap();
    let refused = socket.next().await;
    assert_eq!(refused["_"], "error");
    assert!(refused["message"].as_str().unwrap().starts_with("Subscribe frames are DAG-CBOR"), "{refused}");
    socket.ws.send(Message::Binary(vec![0xff, 0x00].into())).await.unwrap();
    assert_eq!(socket.next().await, json!({"_": "error", "message": "Invalid CBOR request"}));
    let other = owner.sign_map(action_map("ListAgents", &[]), now_ms(), Some(3)).await;
    socket.ws.send(Message::Binary(other.into())).await.unwrap();
    assert_eq!(socket.next().await, json!({"_": "error", "message": "Expected Subscribe action"}));
    let stale = owner.sign_map(
        action_map("Subscribe", &[("key", Ipld::String("account/x".into()))]),
        now_ms() - 600_000,
        Some(3),
    );
    socket.ws.send(Message::Binary(stale.await.into())).await.unwrap();
    assert_eq!(socket.next().await, json!({"_": "error", "message": "Action timestamp is outside allowed window"}));

    // Not an upgrade: 400 in plain text, as upstream answers.
    let response = server.http.get(format!("{}/agents/ws", server.url)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(response.text().await.unwrap(), "WebSocket upgrade failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_old_client_is_refused_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| config.min_client_protocol = 2).await;
    let owner = server.user();
    let mut socket = Socket::open(&server).await;
    socket.send_subscribe(&owner, &format!("account/{}", owner.id), None, None).await;
    let refused = socket.next().await;
    assert_eq!(refused["code"], "protocol_too_old", "{refused}");
    assert_eq!(refused["_"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peers_are_dropped_and_shutdown_closes_with_1001() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| config.ws_ping_interval = Duration::from_millis(200)).await;
    // A peer that completes the handshake and then never reads or answers.
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut raw = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET /agents/ws HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut raw, request.as_bytes()).await.unwrap();
    // Everything the server sent (the upgrade, `connected`, pings, the close) then end of stream:
    // the read ends when the server gives up on the peer (reading answers no ping).
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(30), tokio::io::AsyncReadExt::read_to_end(&mut raw, &mut received));
    assert!(read.await.is_ok(), "the server closed the silent socket");
    // A close frame (0x88) with code 1001 and the reason, before the end of the stream.
    let reason = b"No answer to ping";
    let close = [[0x88, 2 + reason.len() as u8, 0x03, 0xe9].as_slice(), reason].concat();
    assert!(received.windows(close.len()).any(|window| window == close), "{:?}", String::from_utf8_lossy(&received));

    // A live client keeps its socket across pings, then hears 1001 at shutdown.
    let owner = server.user();
    let mut socket = Socket::open(&server).await;
    assert_eq!(socket.subscribe(&owner, &format!("account/{}", owner.id)).await["_"], "subscribed");
    socket.quiet(Duration::from_millis(800)).await;
    let stop = tokio::spawn(server.stop());
    assert_eq!(socket.next().await, json!({"_": "closed", "code": 1001}));
    stop.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_session_status_changes_reach_their_subscribers_live() {
    use crate::support::runs::{Scripted, Stage, stage};
    use seed_agents_protocol::generated::SignalRun;
    use seed_agents_server::testing::runs::engine::Outcome;

    let server = TestServer::start().await;
    let scripted = Scripted::install(&server);
    let owner = server.user();
    let agent = owner.create_agent("Live runs").await;
    let session = owner.create_session(&agent, None).await;
    let paused = stage(&server, &owner.id, &agent, &session, Stage::Paused).await;
    let key = format!("runs/{paused}");
    let mut tree = Socket::open(&server).await;
    assert_eq!(tree.subscribe(&owner, &key).await["_"], "subscribed");
    let replay = tree.next().await;
    assert_eq!((replay["key"].as_str(), replay["value"]["status"].as_str()), (Some(key.as_str()), Some("waiting")));
    let mut watcher = Socket::open(&server).await;
    assert_eq!(watcher.subscribe(&owner, &format!("sessions/{session}")).await["_"], "subscribed");
    let mut account = Socket::open(&server).await;
    assert_eq!(account.subscribe(&owner, &format!("account/{}", owner.id)).await["_"], "subscribed");
    watcher.until(|frames| frames.iter().any(|frame| frame["_"] == "change")).await;

    let signal = SignalRun { run_id: paused.clone(), signal: "resume".into(), payload: None };
    assert!(owner.call(signal).await.unwrap().delivered);
    let execution = scripted.next().await;
    execution.finish(Outcome::Succeeded(Ipld::Null));
    let statuses = |frames: &[Json], key: &str| -> Vec<String> {
        frames
            .iter()
            .filter(|frame| frame["_"] == "change" && frame["key"] == key)
            .map(|frame| frame["value"]["status"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let expected = ["queued", "claimed", "running", "succeeded"];
    let frames = tree.until(|frames| statuses(frames, &key).len() == expected.len()).await;
    assert_eq!(statuses(&frames, &key), expected);
    let frames = account.until(|frames| statuses(frames, &key).len() == expected.len()).await;
    assert_eq!(statuses(&frames, &key), expected, "account-wide subscribers hear run changes too");
    // The session streamed while its resumed run was queued and running, then went idle.
    let session_key = format!("sessions/{session}");
    let frames = watcher.until(|frames| statuses(frames, &session_key).len() == 2).await;
    assert_eq!(statuses(&frames, &session_key), ["streaming", "idle"]);
    server.stop().await;
}

/// A session's appends go to its own subscribers from the committing task and to account-wide
/// subscribers from the hub: a socket listening both ways gets each append once, one listening
/// account-wide only still gets every one, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_on_both_a_session_and_its_account_gets_each_append_once() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("twice").await;
    let session = owner.create_session(&agent, None).await;
    let mut both = Socket::open(&server).await;
    assert_eq!(both.subscribe(&owner, &format!("sessions/{session}")).await["_"], "subscribed");
    assert_eq!(both.subscribe(&owner, &format!("account/{}", owner.id)).await["_"], "subscribed");
    let mut account_only = Socket::open(&server).await;
    assert_eq!(account_only.subscribe(&owner, &format!("account/{}", owner.id)).await["_"], "subscribed");

    let writes = 5;
    for index in 0..writes {
        owner.call(write(&session, &format!("n{index}.md"), "x")).await.unwrap();
    }
    let total = (writes * 2) as usize; // a tool_call and a tool_result per write
    let appends = |frames: &[Json]| -> Vec<i64> {
        frames.iter().filter(|f| f["_"] == "append").map(|f| f["event"]["seq"].as_i64().unwrap()).collect()
    };
    let expected: Vec<i64> = (1..=total as i64).collect();
    let frames = account_only.until(|frames| appends(frames).len() == total).await;
    assert_eq!(appends(&frames), expected);
    let frames = both.until(|frames| appends(frames).len() == total).await;
    assert_eq!(appends(&frames), expected);
    assert!(frames.iter().filter(|f| f["_"] == "append").all(|f| f["key"] == format!("sessions/{session}")));
    // No second copy follows.
    let mut late = Vec::new();
    while let Ok(Some(Ok(Message::Text(text)))) = tokio::time::timeout(Duration::from_millis(300), both.ws.next()).await
    {
        let frame: Json = serde_json::from_str(text.as_str()).unwrap();
        if frame["_"] == "append" {
            late.push(frame);
        }
    }
    assert!(late.is_empty(), "duplicates: {late:?}");
    server.stop().await;
}

/// A workflow's journal reaches `runs/<root>` subscribers: a subscription replays the tree's
/// changes and then each workflow run's entries after `afterSeq`, and new entries arrive live,
/// each once, in `seq` order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_journal_entries_replay_then_stream_to_the_runs_subscribers() {
    use crate::support::provider::{Provider, Script};
    use crate::support::{custom_provider_config, definition, say};
    use seed_agents_protocol::generated::{CreateAgent, ListRuns, RunInfoKind, RunStatus, SetModelProvider, SignalRun};

    let provider = Provider::start().await;
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
    })
    .await;
    let owner = server.user();
    owner
        .call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent = owner.call(CreateAgent { client_request_id: None, definition: definition("Lead") }).await.unwrap();
    let session = owner.create_session(&agent.agent_id, None).await;
    let script = "export default async function (input, ctx) {\n  await ctx.log('info', 'before');\n  \
                  const got = await ctx.waitForEvent({signal: 'go'});\n  await ctx.log('info', 'after');\n  \
                  return got.payload;\n}";
    provider.push(Script::tool_call("d1", "delegate", &json!({"script": script}).to_string()));
    provider.push(Script::text("Done."));
    owner.call(say(&session, "run it")).await.unwrap();
    let list =
        |status| ListRuns { agent_id: None, limit: None, root_run_id: None, session_id: Some(session.clone()), status };
    let root = owner.call(list(None)).await.unwrap().runs[0].id.clone();
    let tree =
        || ListRuns { agent_id: None, limit: None, root_run_id: Some(root.clone()), session_id: None, status: None };
    let workflow = crate::support::wait::until_ok("the workflow parks", || async {
        let runs = owner.call(tree()).await.unwrap().runs;
        runs.into_iter().find(|run| run.kind == RunInfoKind::Workflow && run.status == RunStatus::Waiting).ok_or(())
    })
    .await;

    let key = format!("runs/{root}");
    let appends = |frames: &[Json]| -> Vec<(i64, String)> {
        frames
            .iter()
            .filter(|frame| frame["_"] == "append" && frame["key"] == key.as_str())
            .map(|frame| {
                assert_eq!(frame["runId"], workflow.id.as_str(), "{frame}");
                (frame["seq"].as_i64().unwrap(), frame["entry"]["kind"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    // Replay: the tree's changes, then the entries so far (after afterSeq 1).
    let mut socket = Socket::open(&server).await;
    socket.send_subscribe(&owner, &key, Some(1), Some(3)).await;
    let frames = socket.until(|frames| appends(frames).len() == 1).await;
    assert_eq!(frames.iter().filter(|frame| frame["_"] == "change").count(), 2, "parent and workflow");
    assert_eq!(appends(&frames), [(2, "wait".to_owned())]);

    // Live: the delivery and what the script did after it.
    let payload = Value(Ipld::String("onward".into()));
    let signal = SignalRun { run_id: workflow.id.clone(), signal: "go".into(), payload: Some(payload) };
    assert!(owner.call(signal).await.unwrap().delivered);
    let frames = socket.until(|frames| appends(frames).len() == 2).await;
    assert_eq!(appends(&frames), [(3, "event".to_owned()), (4, "log".to_owned())]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_is_cut_off_by_the_bytes_its_frames_would_pin() {
    // The frame bound is out of reach: only the byte bound can cut the reader off.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| {
        config.ws_queue = 100_000;
        config.ws_queue_bytes = 512 * 1024;
    })
    .await;
    let owner = server.user();
    let agent = owner.create_agent("bytes").await;
    let session = owner.create_session(&agent, None).await;
    let mut stalled = Socket::open(&server).await;
    assert_eq!(stalled.subscribe(&owner, &format!("sessions/{session}")).await["_"], "subscribed");
    let mut watching = Socket::open(&server).await;
    assert_eq!(watching.subscribe(&owner, &format!("sessions/{session}")).await["_"], "subscribed");

    // The stalled reader reads nothing more while 64 KiB writes append (each a `tool_call` with
    // the content, then its `tool_result`): far more than the kernel's socket buffers and the
    // 512 KiB bound together, far fewer frames than the frame bound.
    let content = "x".repeat(64 * 1024);
    let writes = 200;
    for index in 0..writes {
        owner.call(write(&session, &format!("f{index}.txt"), &content)).await.unwrap();
        // A reader that keeps up is never cut off.
        watching.until(|frames| frames.iter().filter(|frame| frame["_"] == "append").count() == 2).await;
    }

    // The stalled reader finds what the kernel held, then the end of the socket; never all of it.
    let mut appends = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ended = loop {
        match tokio::time::timeout_at(deadline, stalled.ws.next()).await.expect("the socket ends") {
            Some(Ok(Message::Text(text))) => {
                let frame: Json = serde_json::from_str(text.as_str()).unwrap();
                if frame["_"] == "append" {
                    appends += 1;
                }
            }
            Some(Ok(Message::Close(frame))) => break frame.map(|frame| u16::from(frame.code)),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break None,
        }
    };
    assert!(appends < 2 * writes, "cut off after {appends} of {} appends", 2 * writes);
    assert!(matches!(ended, Some(1013) | None), "closed as too slow or dropped: {ended:?}");
    // Its client resumes from the last `seq` it saw, and the socket that kept up is still there.
    let mut resumed = Socket::open(&server).await;
    resumed.send_subscribe(&owner, &format!("sessions/{session}"), Some(appends), Some(3)).await;
    let frames = resumed
        .until(|frames| frames.iter().filter(|frame| frame["_"] == "append").count() as i64 == 2 * writes - appends)
        .await;
    assert!(frames.iter().any(|frame| frame["_"] == "subscribed"), "{frames:?}");
    owner.call(write(&session, "last.txt", "done")).await.unwrap();
    watching.until(|frames| frames.iter().filter(|frame| frame["_"] == "append").count() == 2).await;
}
