//! The TypeScript client library against the real server's `/agents/ws`: `interop/ws/subscribe.mjs`
//! signs `Subscribe` with `@seed-hypermedia/client` the way the desktop app's `signAgentAction`
//! does (the library's `NobleKeyPair` standing in for the desktop's daemon signer), sends it with
//! the `ws` package and `JSON.parse`s every frame, as the desktop does (the library itself has no
//! WebSocket client and no frame decoder); this test starts the server binary, prepares an agent
//! and a session through the Rust SDK with the same seed, appends events, runs the script and
//! checks every JSON line it printed:
//!
//! - `connected`, then `subscribed` with the key and the account the script's key is (the
//!   library's principal string equals the SDK's);
//! - the session's `change`, then every `append` exactly once, in `seq` order, each equal to the
//!   event `GetSession` returns; events appended after the replay arrive live; only session
//!   `change`s may come in between, and the script reads on for [`LINGER`] after the last
//!   expected append, so a late duplicate fails too;
//! - for protocol absent (read as 1) and 3, with and without `afterSeq`, with binary frames and
//!   once with a text frame holding a JSON array of the bytes (while events are being appended);
//! - a key the account cannot see is refused with an `error` frame and the same socket then
//!   subscribes normally.
//!
//! Needs Node.js and the package's modules, so its tests are `#[ignore]`d in `cargo test --workspace`
//! (which reports them as ignored) and run on request; asked to run, they fail (do not skip) when
//! either is missing (`--workspace` builds with the features of the workspace's test build, so it
//! reuses it):
//!
//! ```sh
//! npm ci --prefix interop/ws
//! cargo test --workspace --test tests interop_ws -- --ignored --nocapture
//! ```
//!
//! `NODE` overrides the node binary.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetSession, InvokeSessionTool, InvokeSessionToolVerb, SessionEvent, SetModelProvider,
};
use seed_agents_protocol::{AgentId, SessionId, Value};
use seed_agents_sdk::{Client, Ed25519Signer};
use serde_json::{Value as Json, json};
use tokio::sync::mpsc;

use crate::support::fixtures::{definition, provider_config};
use crate::support::process::{Launch, ServerProcess};

/// The seed both sides use: the SDK for the setup, the script (as hex) for the subscription.
const SEED: [u8; 32] = [0x5e; 32];
/// Another account, owning the agent the first one cannot see.
const STRANGER: [u8; 32] = [0x71; 32];
/// How long one line of the script may take.
const LINE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the script keeps reading after the last expected append, so that a late duplicate
/// (or anything else the server sends after it) is printed and fails the test.
const LINGER: Duration = Duration::from_millis(300);
/// The package's pinned versions (package.json); an older install fails the preflight.
const PACKAGES: [(&str, &str); 2] = [("@seed-hypermedia/client", "0.0.83"), ("ws", "8.23.1")];

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/ws")
}

fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".to_owned())
}

/// Node.js and the package's modules are there (or the test fails saying how to get them).
fn preflight() {
    const HOW: &str = "install Node.js (18 or newer) and run `npm ci --prefix interop/ws` from the repository root";
    match Command::new(node()).arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!("`{} --version` failed ({}): {HOW}", node(), output.status),
        Err(error) => panic!("cannot run `{}` ({error}): {HOW}", node()),
    }
    for (name, version) in PACKAGES {
        let manifest = package_dir().join("node_modules").join(name).join("package.json");
        let text = std::fs::read_to_string(&manifest).unwrap_or_else(|error| {
            panic!("{name} is not installed ({}: {error}): run `npm ci --prefix interop/ws`", manifest.display())
        });
        let installed: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(
            installed["version"], version,
            "{name} {} is installed, package.json pins {version}: run `npm ci --prefix interop/ws`",
            installed["version"]
        );
    }
}

fn client(url: &str, seed: &[u8; 32]) -> Client {
    Client::builder(url, Ed25519Signer::from_seed(seed)).build().unwrap()
}

/// The server, and a session of an agent of the `SEED` account.
struct World {
    server: ServerProcess,
    client: Client,
    agent_id: AgentId,
    account_id: String,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl World {
    async fn start() -> Self {
        preflight();
        let (data, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let server =
            ServerProcess::start(&Launch::new(crate::SERVER_BIN, data.path(), &logs.path().join("server.log"))).await;
        let client = client(&server.url, &SEED);
        let agent_id = create_agent(&client, "interop").await;
        let account_id = client.account().to_string();
        Self { server, client, agent_id, account_id, _dirs: (data, logs) }
    }

    fn ws_url(&self) -> String {
        format!("{}/agents/ws", self.server.url.replacen("http", "ws", 1))
    }

    async fn session(&self) -> SessionId {
        let create = CreateSession {
            agent_id: self.agent_id.clone(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: Some("interop".into()),
        };
        self.client.create_session(create).await.unwrap().session_id
    }

    /// `writes` write-tool calls (two events each: the call and its result).
    async fn append(&self, session_id: &str, writes: usize) {
        for _ in 0..writes {
            let index = uuid::Uuid::new_v4();
            self.client.invoke_session_tool(write(session_id, &format!("notes/{index}.md"), "hello")).await.unwrap();
        }
    }

    /// Every event of the session, as `GetSession` returns it.
    async fn stored(&self, session_id: &str) -> Vec<SessionEvent> {
        let get = GetSession { after_seq: None, before_seq: None, limit: None, session_id: session_id.into() };
        self.client.get_session(get).await.unwrap().events
    }
}

async fn create_agent(client: &Client, name: &str) -> AgentId {
    client.set_model_provider(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    client.create_agent(CreateAgent { client_request_id: None, definition: definition(name) }).await.unwrap().agent_id
}

fn write(session_id: &str, path: &str, content: &str) -> InvokeSessionTool {
    let input = [("address", format!("~/memory/{path}")), ("content", content.to_owned())]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), Ipld::String(value)))
        .collect();
    InvokeSessionTool {
        input: Value(Ipld::Map(input)),
        session_id: session_id.into(),
        verb: InvokeSessionToolVerb::Write,
    }
}

/// How one run of the script subscribes.
#[derive(Debug, Clone, Default)]
struct Run {
    keys: Vec<String>,
    after_seq: Option<i64>,
    protocol: Option<u32>,
    text: bool,
    appends: usize,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "protocol {}, afterSeq {}, {} frame",
            self.protocol.map_or("absent".to_owned(), |p| p.to_string()),
            self.after_seq.map_or("absent".to_owned(), |s| s.to_string()),
            if self.text { "text (JSON byte array)" } else { "binary" },
        )
    }
}

/// `subscribe.mjs` running: its stdout lines as they arrive, its stderr in a file.
struct Script {
    child: Option<Child>,
    lines: mpsc::UnboundedReceiver<String>,
    stderr: PathBuf,
    _stderr_dir: tempfile::TempDir,
    started: Instant,
    seen: Vec<Json>,
}

impl Script {
    fn spawn(url: &str, run: &Run) -> Self {
        let mut command = Command::new(node());
        command
            .current_dir(package_dir())
            .arg("subscribe.mjs")
            .arg("--url")
            .arg(url)
            .arg("--seed")
            .arg(hex::encode(SEED))
            .arg("--appends")
            .arg(run.appends.to_string())
            .arg("--linger")
            .arg(LINGER.as_millis().to_string())
            .arg("--timeout")
            .arg(LINE_TIMEOUT.as_millis().to_string());
        for key in &run.keys {
            command.arg("--key").arg(key);
        }
        if let Some(after) = run.after_seq {
            command.arg("--after-seq").arg(after.to_string());
        }
        if let Some(protocol) = run.protocol {
            command.arg("--protocol").arg(protocol.to_string());
        }
        if run.text {
            command.arg("--text");
        }
        let stderr_dir = tempfile::tempdir().unwrap();
        let stderr = stderr_dir.path().join("stderr");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {} subscribe.mjs: {error}", node()));
        let (sender, lines) = mpsc::unbounded_channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child: Some(child), lines, stderr, _stderr_dir: stderr_dir, started: Instant::now(), seen: Vec::new() }
    }

    fn report(&self) -> String {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<String> = self.seen.iter().map(Json::to_string).collect();
        format!("\nlines so far:\n{}\nstderr:\n{stderr}", lines.join("\n"))
    }

    /// The next line, parsed; fails when the script ends or is silent too long.
    async fn next(&mut self) -> Json {
        let line = match tokio::time::timeout(LINE_TIMEOUT, self.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("subscribe.mjs ended before the expected line{}", self.report()),
            Err(_) => panic!("no line from subscribe.mjs within {LINE_TIMEOUT:?}{}", self.report()),
        };
        let frame: Json = serde_json::from_str(&line)
            .unwrap_or_else(|error| panic!("not a JSON line ({error}): {line}{}", self.report()));
        self.seen.push(frame.clone());
        frame
    }

    /// Waits for the script to exit (it must succeed), returning any lines it printed after those read.
    async fn finish(mut self) -> (Vec<Json>, Duration) {
        let mut rest = Vec::new();
        loop {
            match tokio::time::timeout(LINE_TIMEOUT, self.lines.recv()).await {
                Ok(Some(line)) => rest.push(serde_json::from_str(&line).unwrap_or(Json::String(line))),
                Ok(None) => break,
                Err(_) => panic!("subscribe.mjs did not exit{}", self.report()),
            }
        }
        let status = self.wait().await;
        assert!(
            status.success(),
            "subscribe.mjs exited with {status}; after the lines read it printed {rest:?}{}",
            self.report()
        );
        (rest, self.started.elapsed())
    }

    async fn wait(&mut self) -> ExitStatus {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "subscribe.mjs closed its stdout but did not exit{}", self.report());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Checks one append frame against what the server stores for its `seq`.
fn check_append(frame: &Json, session_id: &str, stored: &[SessionEvent]) -> i64 {
    assert_eq!(frame["_"], "append", "{frame}");
    assert_eq!(frame["key"], format!("sessions/{session_id}"), "{frame}");
    let event = &frame["event"];
    assert_eq!(event["sessionId"], session_id, "{frame}");
    let seq = event["seq"].as_i64().unwrap_or_else(|| panic!("no seq in {frame}"));
    let expected = stored.iter().find(|stored| stored.seq == seq).unwrap_or_else(|| panic!("seq {seq} is not stored"));
    assert_eq!(*event, serde_json::to_value(expected).unwrap(), "the frame's event is the stored one");
    seq
}

/// The script's first lines: `connected`, then `subscribed` to `key` as the SDK's account.
async fn expect_subscribed(script: &mut Script, world: &World, key: &str) {
    let connected = script.next().await;
    assert_eq!(connected["_"], "connected", "{connected}");
    assert!(connected["connectedAt"].as_i64().is_some_and(|at| at > 0), "{connected}");
    assert_eq!(connected.as_object().unwrap().len(), 2, "{connected}");
    let subscribed = script.next().await;
    assert_eq!(subscribed, json!({"_": "subscribed", "key": key, "accountId": world.account_id}));
}

/// The session's `change` frame (its replay's first frame).
async fn expect_session_change(script: &mut Script, world: &World, session_id: &str) {
    let change = script.next().await;
    assert_eq!(change["_"], "change", "{change}");
    assert_eq!(change["key"], format!("sessions/{session_id}"), "{change}");
    let value = &change["value"];
    assert_eq!(
        (&value["id"], &value["agentId"], &value["account"], &value["title"]),
        (&json!(session_id), &json!(world.agent_id), &json!(world.account_id), &json!("interop")),
        "{change}"
    );
}

/// Append frames until `count` of them arrived (session `change`s, which may come with any
/// update, are allowed in between; anything else fails); returns their seqs in arrival order.
async fn appends(script: &mut Script, session_id: &str, count: usize, stored: &[SessionEvent]) -> Vec<i64> {
    let mut seqs = Vec::new();
    while seqs.len() < count {
        let frame = script.next().await;
        if frame["_"] == "change" && frame["key"] == format!("sessions/{session_id}") {
            continue;
        }
        seqs.push(check_append(&frame, session_id, stored));
    }
    seqs
}

/// One subscription: `before` writes, then the script subscribes (replay), then `live` writes
/// once the replay was read; every event arrives once, in order, and the live ones after it.
async fn replay_then_live(world: &World, protocol: Option<u32>, after_seq: Option<i64>) -> String {
    let (before, live) = (3, 2);
    let session_id = world.session().await;
    world.append(&session_id, before).await;
    let existing = 2 * before as i64;
    let replayed = existing - after_seq.unwrap_or(0);
    let key = format!("sessions/{session_id}");
    let run = Run {
        keys: vec![key.clone()],
        after_seq,
        protocol,
        text: false,
        appends: (replayed + 2 * live as i64) as usize,
    };
    let mut script = Script::spawn(&world.ws_url(), &run);
    expect_subscribed(&mut script, world, &key).await;
    expect_session_change(&mut script, world, &session_id).await;
    let stored = world.stored(&session_id).await;
    let replay = appends(&mut script, &session_id, replayed as usize, &stored).await;
    let first = after_seq.unwrap_or(0) + 1;
    assert_eq!(replay, (first..=existing).collect::<Vec<_>>(), "the replay: every seq after afterSeq, once, in order");

    // Written only now: these can only arrive live.
    world.append(&session_id, live).await;
    let stored = world.stored(&session_id).await;
    let total = stored.last().unwrap().seq;
    assert_eq!(total, existing + 2 * live as i64);
    let streamed = appends(&mut script, &session_id, 2 * live, &stored).await;
    assert_eq!(streamed, (existing + 1..=total).collect::<Vec<_>>(), "the live appends, once, in order");
    let (rest, took) = script.finish().await;
    assert!(rest.iter().all(|frame| frame["_"] == "change"), "nothing but changes after the last append: {rest:?}");
    format!(
        "{}: connected, subscribed as {}, session change, replayed seq {first}..={existing}, live {}..={total}; \
         node exited 0 after {} ms",
        run.describe(),
        world.account_id,
        existing + 1,
        took.as_millis()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and `npm ci --prefix interop/ws`; run with --ignored"]
async fn the_desktop_client_replays_then_streams_live_for_each_protocol_and_cursor() {
    let world = World::start().await;

    // The library derives the same account from the seed as the SDK.
    let whoami = Command::new(node())
        .current_dir(package_dir())
        .args(["subscribe.mjs", "--whoami", "--seed", &hex::encode(SEED)])
        .output()
        .unwrap();
    assert!(whoami.status.success(), "{}", String::from_utf8_lossy(&whoami.stderr));
    let whoami: Json = serde_json::from_slice(&whoami.stdout).unwrap();
    assert_eq!(whoami, json!({"accountId": world.account_id}), "the library's principal string is the SDK's");

    for (protocol, after_seq) in [(None, None), (Some(3), None), (None, Some(4)), (Some(3), Some(4))] {
        println!("{}", replay_then_live(&world, protocol, after_seq).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and `npm ci --prefix interop/ws`; run with --ignored"]
async fn a_text_frame_of_byte_values_subscribes_while_events_are_appended() {
    let world = World::start().await;
    let session_id = world.session().await;
    let key = format!("sessions/{session_id}");
    world.append(&session_id, 2).await;
    // Written from the moment the socket is open: the first `early` race the Subscribe and its
    // replay (each lands in the replay or arrives live, never both, never neither); the rest wait
    // until `subscribed` was read, so they can only arrive live.
    let (writes, early) = (20, 5);
    let (open_sender, open) = tokio::sync::oneshot::channel::<()>();
    let (subscribed_sender, subscribed) = tokio::sync::oneshot::channel::<()>();
    let appender = {
        let (url, session_id) = (world.server.url.clone(), session_id.clone());
        tokio::spawn(async move {
            let client = client(&url, &SEED);
            open.await.unwrap();
            let mut subscribed = Some(subscribed);
            for index in 0..writes {
                if index == early {
                    subscribed.take().unwrap().await.unwrap();
                }
                // Appends spread over the subscription, as a busy session's are: the scenario.
                tokio::time::sleep(Duration::from_millis(5)).await;
                client.invoke_session_tool(write(&session_id, &format!("busy/{index}.md"), "x")).await.unwrap();
            }
        })
    };
    let total = 2 * (2 + writes);
    let run = Run { keys: vec![key.clone()], protocol: None, text: true, appends: total, ..Run::default() };
    let mut script = Script::spawn(&world.ws_url(), &run);
    let connected = script.next().await;
    assert_eq!(connected["_"], "connected", "{connected}");
    open_sender.send(()).unwrap();
    let answer = script.next().await;
    assert_eq!(answer, json!({"_": "subscribed", "key": key, "accountId": world.account_id}));
    subscribed_sender.send(()).unwrap();
    expect_session_change(&mut script, &world, &session_id).await;
    appender.await.unwrap();
    let stored = world.stored(&session_id).await;
    let seqs = appends(&mut script, &session_id, total, &stored).await;
    assert_eq!(seqs, (1..=total as i64).collect::<Vec<_>>(), "every seq once, in order");
    let (rest, took) = script.finish().await;
    assert!(rest.iter().all(|frame| frame["_"] == "change"), "nothing but changes after the last append: {rest:?}");
    println!(
        "{}: subscribed as {} while {early} writes raced it and {} more followed; seq 1..={total} each once in order; \
         node exited 0 after {} ms",
        run.describe(),
        world.account_id,
        writes - early,
        took.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and `npm ci --prefix interop/ws`; run with --ignored"]
async fn a_refused_key_gets_an_error_frame_and_the_socket_subscribes_again() {
    let world = World::start().await;
    let hidden = create_agent(&client(&world.server.url, &STRANGER), "hidden").await;
    let refused = format!("agents/{hidden}");
    for protocol in [None, Some(3)] {
        let session_id = world.session().await;
        world.append(&session_id, 1).await;
        let key = format!("sessions/{session_id}");
        let run = Run { keys: vec![refused.clone(), key.clone()], protocol, appends: 4, ..Run::default() };
        let mut script = Script::spawn(&world.ws_url(), &run);
        assert_eq!(script.next().await["_"], "connected");
        let error = script.next().await;
        assert_eq!(error, json!({"_": "error", "key": refused, "message": "Agent not found"}));
        // The same socket (the script never reconnects): the next Subscribe is answered.
        let subscribed = script.next().await;
        assert_eq!(subscribed, json!({"_": "subscribed", "key": key, "accountId": world.account_id}));
        expect_session_change(&mut script, &world, &session_id).await;
        let stored = world.stored(&session_id).await;
        let replayed = stored.len();
        assert_eq!(
            appends(&mut script, &session_id, replayed, &stored).await,
            (1..=replayed as i64).collect::<Vec<_>>()
        );
        world.append(&session_id, 1).await;
        let stored = world.stored(&session_id).await;
        let live = appends(&mut script, &session_id, 4 - replayed, &stored).await;
        assert_eq!(live, (replayed as i64 + 1..=4).collect::<Vec<_>>());
        let (rest, took) = script.finish().await;
        assert!(rest.iter().all(|frame| frame["_"] == "change"), "nothing but changes after the last append: {rest:?}");
        println!(
            "{}: {refused} refused with `Agent not found`, then on the same socket {key} subscribed, \
             replayed 1..={replayed} and streamed {:?} live; node exited 0 after {} ms",
            run.describe(),
            live,
            took.as_millis()
        );
    }
}
