//! Live updates against the real binary:
//!
//! - an SDK subscription delivers every `seq` of a session exactly once, in order, while the
//!   server is SIGKILLed and restarted (on the same port) three times under a stream of appended
//!   events;
//! - a client that stops reading is disconnected instead of buffered, and the server's memory
//!   stays flat while it happens.
//!
//! Run with `cargo test -p seed-agents-server --test tests live_restart -- --nocapture` to see the
//! figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetSession, InvokeSessionTool, InvokeSessionToolVerb, SetModelProvider, Subscribe,
};
use seed_agents_protocol::{AgentAction, SessionId, Value};
use seed_agents_sdk::subscription::Reconnect;
use seed_agents_sdk::{Client, Event};

use crate::support::crash::{self, Lcg};
use crate::support::fixtures::{definition, provider_config};
use crate::support::process::{Launch, ServerProcess, free_port, rss_kib};
use crate::support::wait;

const SEED: [u8; 32] = [9; 32];

fn client(url: &str) -> Client {
    crash::client(url, &SEED)
}

/// An agent and a session of it; returns the session id.
async fn session(client: &Client) -> SessionId {
    client.set_model_provider(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent =
        client.create_agent(CreateAgent { client_request_id: None, definition: definition("live") }).await.unwrap();
    let create = CreateSession {
        agent_id: agent.agent_id,
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: None,
    };
    client.create_session(create).await.unwrap().session_id
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

/// Appends through `InvokeSessionTool` (two events per call) until `stop`, riding out restarts;
/// counts the acknowledged calls in `acknowledged`.
fn appender(
    url: String,
    session_id: String,
    content: String,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = client(&url);
        let mut index = 0u64;
        while !stop.load(Ordering::Relaxed) {
            index += 1;
            match client.invoke_session_tool(write(&session_id, &format!("n/{index}.md"), &content)).await {
                Ok(_) => {
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                }
                // The server is down (killed, not yet restarted): a pause before the next try, so
                // the retries do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_survives_three_sigkills_with_every_seq_once_in_order() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let launch = |round: u32| {
        Launch::new(crate::SERVER_BIN, data.path(), &logs.path().join(format!("round-{round}.log"))).port(port)
    };
    let mut server = ServerProcess::start(&launch(0)).await;
    let url = server.url.clone();
    let session_id = session(&client(&url)).await;

    let subscriber = client(&url);
    let fast = Reconnect {
        min_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        ..Reconnect::default()
    };
    let mut events = subscriber.subscribe(format!("sessions/{session_id}")).reconnect(fast).start();
    let delivered = Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let resumed = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let collector = {
        let (delivered, resumed) = (delivered.clone(), resumed.clone());
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event.unwrap() {
                    Event::Append { event, .. } => delivered.lock().unwrap().push(event.seq),
                    Event::Resumed { .. } => {
                        resumed.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let writes = appender(url.clone(), session_id.to_string(), "x".into(), stop.clone(), acknowledged.clone());

    let mut random = Lcg(u64::from(std::process::id()));
    for round in 1..=3 {
        // The kill lands at a random moment of the writes, after a random downtime the server
        // comes back: both pauses are the scenario, not waits for something.
        tokio::time::sleep(Duration::from_millis(random.next_in(300, 900))).await;
        let before = delivered.lock().unwrap().len();
        server.kill();
        tokio::time::sleep(Duration::from_millis(random.next_in(50, 400))).await;
        server = ServerProcess::start(&launch(round)).await;
        println!("round {round}: killed after {before} events delivered; restarted");
        // The subscription is back (while the writes go on) before the next kill: on a loaded
        // machine two kills could otherwise fall within one reconnect, and the round would test
        // nothing of the resume.
        wait::until_true("the subscription resumes after the restart", || resumed.load(Ordering::Relaxed) >= round)
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    writes.await.unwrap();
    let acknowledged = acknowledged.load(Ordering::Relaxed);

    // Everything the database holds, every event once, in order.
    let log = client(&url)
        .get_session(GetSession { after_seq: None, before_seq: None, limit: None, session_id: session_id.clone() })
        .await
        .unwrap();
    let stored: Vec<i64> = log.events.iter().map(|event| event.seq).collect();
    let last = *stored.last().unwrap();
    assert_eq!(stored, (1..=last).collect::<Vec<_>>(), "the log itself is gap-free");
    assert!(last >= acknowledged as i64 * 2, "every acknowledged write is in the log");
    wait::until_true(&format!("the subscription catches up with seq {last}"), || {
        delivered.lock().unwrap().last() == Some(&last)
    })
    .await;
    // A quiet moment after the last event: a late duplicate would show up in it. Waiting for
    // nothing to happen has no signal to wait on.
    tokio::time::sleep(Duration::from_millis(200)).await;
    collector.abort();
    let delivered = delivered.lock().unwrap().clone();
    println!(
        "{acknowledged} writes acknowledged, {last} events stored, {} delivered, {} resumptions",
        delivered.len(),
        resumed.load(Ordering::Relaxed)
    );
    assert_eq!(delivered, stored, "every seq delivered exactly once, in order");
    assert_eq!(resumed.load(Ordering::Relaxed), 3, "one resumption per restart");
    server.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_disconnected_and_memory_stays_flat() {
    // The frame bound alone (64 deliveries of two 32 KiB frames each): 64 MiB of frames due.
    let stalled = stall(&["--ws-queue", "64", "--body-timeout", "2"], 32, 64).await;
    assert!(stalled.growth_kib < 64 * 1024, "memory stayed flat: grew {} KiB", stalled.growth_kib);
}

/// The byte bound alone: frames large enough that the default frame bound (1,024 deliveries,
/// here 128 MiB) would pin far more than the byte bound lets the socket hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_is_cut_off_at_its_byte_bound_and_rss_stays_within_it() {
    const BOUND_KIB: u64 = 2 * 1024;
    let bound = (BOUND_KIB * 1024).to_string();
    // A long write timeout (it is the body timeout), so the bounds and not a timed-out write
    // are what end the socket.
    let stalled = stall(&["--ws-queue-bytes", &bound, "--body-timeout", "60"], 64, 96).await;
    // What the bound lets the queue hold, plus a constant for everything else the writes cost the
    // server (request bodies in flight, SQLite's page cache, the allocator's arenas).
    let constant_kib = 16 * 1024;
    assert!(
        stalled.growth_kib < BOUND_KIB + constant_kib,
        "RSS grew {} KiB: more than the {BOUND_KIB} KiB bound plus {constant_kib} KiB",
        stalled.growth_kib
    );
}

/// What a stalled reader cost the server.
struct Stalled {
    growth_kib: u64,
}

/// Starts a server with `args`, subscribes a socket that then stops reading, and appends writes
/// of `content_kib` KiB (two frames each) until more than `due_mib` MiB of frames were due to it.
/// Checks that the server cut the socket off (it got far fewer frames than were due, then a
/// close) and returns how much the server's RSS grew meanwhile.
async fn stall(args: &[&str], content_kib: usize, due_mib: u64) -> Stalled {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut launch = Launch::new(crate::SERVER_BIN, data.path(), &logs.path().join("server.log"));
    for arg in args {
        launch = launch.arg(*arg);
    }
    let server = ServerProcess::start(&launch).await;
    let owner = client(&server.url);
    let session_id = session(&owner).await;

    // A raw socket that subscribes and then never reads again.
    let socket_url = format!("{}/agents/ws", server.url.replacen("http", "ws", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(socket_url).await.unwrap();
    let subscribe = AgentAction::Subscribe(Subscribe { after_seq: None, key: format!("sessions/{session_id}") });
    socket
        .send(tokio_tungstenite::tungstenite::Message::Binary(owner.sign(&subscribe).await.unwrap().into()))
        .await
        .unwrap();
    // Read up to the server's answer (the subscription is in place), then never again.
    loop {
        match tokio::time::timeout(Duration::from_secs(20), socket.next()).await.unwrap() {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text))) if text.contains("\"subscribed\"") => break,
            Some(Ok(_)) => {}
            other => panic!("no `subscribed` frame: {other:?}"),
        }
    }
    let idle = rss_kib(server.pid());

    // Each write's tool_call frame carries the content: two frames per write.
    let frame_bytes = content_kib as u64 * 1024;
    let content = "y".repeat(content_kib * 1024);
    let enough = (due_mib << 20) / (2 * frame_bytes) + 1;
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            appender(server.url.clone(), session_id.to_string(), content.clone(), stop.clone(), acknowledged.clone())
        })
        .collect();
    let mut peak = idle;
    let deadline = Instant::now() + Duration::from_secs(120);
    while acknowledged.load(Ordering::Relaxed) < enough {
        peak = peak.max(rss_kib(server.pid()));
        let writes = acknowledged.load(Ordering::Relaxed);
        assert!(Instant::now() < deadline, "only {writes} of {enough} writes acknowledged in 120 s");
        // How often the server's memory is sampled while the writes go on.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    peak = peak.max(rss_kib(server.pid()));
    let writes = acknowledged.load(Ordering::Relaxed);
    let stream_bytes = writes * 2 * frame_bytes;
    println!(
        "{writes} writes (~{} MiB of frames for the stalled socket); server RSS idle {} MiB, peak {} MiB, growth {} KiB",
        stream_bytes >> 20,
        idle / 1024,
        peak / 1024,
        peak - idle
    );
    assert!(stream_bytes > due_mib << 20, "enough was sent to overflow the bound ({writes} writes)");

    // Reading again: what the kernel held, then the close (the server gave up on this client).
    let mut frames = 0;
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(20), socket.next()).await.unwrap() {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => frames += 1,
            Some(Err(_)) | None => break None,
        }
    };
    println!("the stalled socket got {frames} frames, then {closed:?}");
    assert!((frames as u64) < writes * 2, "it was cut off, not served everything");
    server.terminate().await;
    Stalled { growth_kib: peak - idle }
}
