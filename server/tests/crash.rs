//! Crash safety of session creates: the real `seed-agents-server` binary is killed with SIGKILL,
//! round after round, while several clients create sessions through the SDK.
//!
//! What it proves:
//! - **Acknowledged means durable.** Every `CreateSession` that got an answer before the kill is
//!   there after a restart, with its title (`GetSession`), and listed exactly once
//!   (`ListSessions` pages, followed to the end, hold no duplicates).
//! - **Nothing is half-written.** A session row and its idempotency row are committed together or
//!   not at all: every `CreateSession` idempotency row names an existing session whose title is
//!   the one in the stored request, every session has exactly one such row, and re-sending an
//!   acknowledged create (same `clientRequestId`, same title) replays the same `sessionId`.
//! - **The file is sound.** After a clean SIGTERM stop, `PRAGMA integrity_check` says `ok` and
//!   `PRAGMA foreign_key_check` finds nothing.
//!
//! Creates that were in flight when the server died may or may not have committed; both are fine,
//! as long as the two rows agree. The test prints how many creates were acknowledged and how many
//! were cut off in each round (`cargo test -p seed-agents-server --test tests crash:: -- --nocapture`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, CreateSessionResponse, GetSession, ListSessions, SetModelProvider,
};
use seed_agents_protocol::{AgentResponse, Ed25519Signer, Response as _, Signer as _, wire};
use seed_agents_sdk::{Client, Error};

use crate::support::crash;
use crate::support::fixtures::{definition, provider_config};
use crate::support::process::ServerProcess;

/// The one user's key; fixed so the account survives restarts.
const SEED: [u8; 32] = [7; 32];
/// Kill-and-restart rounds.
const ROUNDS: u32 = 8;
/// Clients creating sessions concurrently in each round.
const WRITERS: u32 = 4;

/// One create the server answered with a session id.
#[derive(Debug, Clone)]
struct Ack {
    request_id: String,
    title: String,
    session_id: String,
}

/// What one writer saw in one round.
#[derive(Debug, Default)]
struct WriterOutcome {
    acked: Vec<Ack>,
    /// Creates that got no answer (the server died under them): request id, title, error.
    cut_off: Vec<(String, String, String)>,
    /// Answers that should never happen (an API error from a live server).
    unexpected: Vec<String>,
}

/// Starts the binary over `data_dir`, logging into `<log_dir>/<label>.log`.
async fn start(data_dir: &Path, log_dir: &Path, label: &str) -> ServerProcess {
    crash::start(crate::SERVER_BIN, data_dir, log_dir, label).await
}

fn client_of(server: &ServerProcess) -> Client {
    crash::client(&server.url, &SEED)
}

fn create(agent_id: &str, request_id: &str, title: &str) -> CreateSession {
    CreateSession {
        agent_id: agent_id.into(),
        client_request_id: Some(request_id.to_owned()),
        model_override: None,
        thoroughness: None,
        title: Some(title.to_owned()),
    }
}

/// Creates sessions one after another until the server stops answering (or `stop` is set).
async fn writer(
    client: Arc<Client>,
    agent_id: String,
    round: u32,
    writer: u32,
    stop: Arc<AtomicBool>,
) -> WriterOutcome {
    let mut outcome = WriterOutcome::default();
    for n in 0..100_000u32 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let request_id = format!("crash-r{round}-w{writer}-n{n}");
        let title = format!("Crash round {round} writer {writer} #{n}");
        match client.call(create(&agent_id, &request_id, &title)).await {
            Ok(response) => {
                outcome.acked.push(Ack { request_id, title, session_id: response.session_id.into_string() })
            }
            // No (complete) answer: the server died under this request.
            Err(error @ (Error::Transport(_) | Error::Decode { .. })) => {
                outcome.cut_off.push((request_id, title, error.to_string()));
                break;
            }
            Err(error) => {
                outcome.unexpected.push(format!("{request_id}: {error}"));
                break;
            }
        }
    }
    outcome
}

/// Every session the account lists, page by page (limit 200), in order.
async fn list_all(client: &Client) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    for page in 0.. {
        assert!(page < 1000, "ListSessions paging does not end");
        let response = client
            .call(ListSessions {
                agent_id: None,
                cursor: cursor.take(),
                exclude_triggered: None,
                include_children: None,
                limit: Some(200),
                parent_session_id: None,
            })
            .await
            .unwrap_or_else(|error| panic!("ListSessions page {page}: {error}"));
        assert!(response.sessions.len() <= 200, "page {page} has {} sessions", response.sessions.len());
        ids.extend(response.sessions.into_iter().map(|session| session.id.into_string()));
        match response.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    ids
}

/// Runs `check` over `items` with a few concurrent callers.
async fn for_each_concurrently<T, F, Fut>(items: Vec<T>, check: F)
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let check = Arc::new(check);
    let mut chunks: Vec<Vec<T>> = (0..WRITERS).map(|_| Vec::new()).collect();
    for (index, item) in items.into_iter().enumerate() {
        chunks[index % WRITERS as usize].push(item);
    }
    let tasks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let check = check.clone();
            tokio::spawn(async move {
                for item in chunk {
                    check(item).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_session_creates_survive_sigkill() {
    let started = Instant::now();
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let account = Ed25519Signer::from_seed(&SEED).principal().to_string();

    // Setup: a provider and an agent, acknowledged, then the first crash.
    let server = start(data.path(), logs.path(), "setup").await;
    let client = client_of(&server);
    client.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let agent_id = client
        .call(CreateAgent { client_request_id: None, definition: definition("Crash agent") })
        .await
        .unwrap()
        .agent_id;
    drop(client);
    server.kill();

    let mut acked: Vec<Ack> = Vec::new();
    let mut cut_off: Vec<(String, String)> = Vec::new();
    let mut unexpected: Vec<String> = Vec::new();
    for round in 0..ROUNDS {
        let server = start(data.path(), logs.path(), &format!("round-{round}")).await;
        // A fresh client (and connection pool) per server process.
        let client = Arc::new(client_of(&server));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(writer(client.clone(), agent_id.to_string(), round, w, stop.clone())))
            .collect();
        // 50..=400 ms, spread deterministically over the rounds.
        let delay = Duration::from_millis(50 + u64::from(round * 137 % 351));
        // The kill lands this long into the round's writes: the scenario, not a wait.
        tokio::time::sleep(delay).await;
        let status = server.kill();
        stop.store(true, Ordering::Relaxed);
        let mut round_acked = 0;
        let mut round_cut = 0;
        for task in tasks {
            let outcome = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .unwrap_or_else(|_| panic!("round {round}: a writer still waits 30 s after the kill"))
                .unwrap();
            round_acked += outcome.acked.len();
            round_cut += outcome.cut_off.len();
            acked.extend(outcome.acked);
            cut_off.extend(outcome.cut_off.into_iter().map(|(request_id, title, _)| (request_id, title)));
            unexpected.extend(outcome.unexpected);
        }
        println!(
            "round {round}: killed after {delay:?} ({status}); {round_acked} creates acknowledged, {round_cut} cut off"
        );
    }
    assert!(unexpected.is_empty(), "the live server answered creates with errors:\n{}", unexpected.join("\n"));
    assert!(acked.len() >= ROUNDS as usize, "too few creates were acknowledged ({}) to prove anything", acked.len());

    // A clean start over what the crashes left.
    let server = start(data.path(), logs.path(), "final").await;
    let client = Arc::new(client_of(&server));

    // Every acknowledged create is there, with its title.
    let missing = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    {
        let (client, missing, agent_id) = (client.clone(), missing.clone(), agent_id.clone());
        for_each_concurrently(acked.clone(), move |ack: Ack| {
            let (client, missing, agent_id) = (client.clone(), missing.clone(), agent_id.clone());
            async move {
                let problem = match client
                    .call(GetSession {
                        after_seq: None,
                        before_seq: None,
                        limit: None,
                        session_id: ack.session_id.clone().into(),
                    })
                    .await
                {
                    Ok(found) if found.session.title.as_deref() != Some(ack.title.as_str()) => {
                        Some(format!("title {:?}, expected {:?}", found.session.title, ack.title))
                    }
                    Ok(found) if found.session.agent_id != agent_id => {
                        Some(format!("agent {}, expected {agent_id}", found.session.agent_id))
                    }
                    Ok(_) => None,
                    Err(error) => Some(error.to_string()),
                };
                if let Some(problem) = problem {
                    missing.lock().unwrap().push(format!("{} ({}): {problem}", ack.session_id, ack.request_id));
                }
            }
        })
        .await;
    }
    let missing = missing.lock().unwrap().clone();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged sessions are missing or wrong after the crashes:\n{}",
        missing.len(),
        acked.len(),
        missing.join("\n")
    );

    // Listed once each.
    let listed = list_all(&client).await;
    let listed_set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    assert_eq!(listed_set.len(), listed.len(), "ListSessions pages repeat sessions");
    let unlisted: Vec<&str> =
        acked.iter().map(|ack| ack.session_id.as_str()).filter(|id| !listed_set.contains(id)).collect();
    assert!(unlisted.is_empty(), "acknowledged sessions missing from ListSessions: {unlisted:?}");

    // Re-sending an acknowledged create replays its session.
    let replay_failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    {
        let (client, failures, agent_id) = (client.clone(), replay_failures.clone(), agent_id.clone());
        for_each_concurrently(acked.clone(), move |ack: Ack| {
            let (client, failures, agent_id) = (client.clone(), failures.clone(), agent_id.clone());
            async move {
                match client.call(create(&agent_id, &ack.request_id, &ack.title)).await {
                    Ok(response) if response.session_id == ack.session_id => {}
                    Ok(response) => failures.lock().unwrap().push(format!(
                        "{}: replayed {}, acknowledged {}",
                        ack.request_id, response.session_id, ack.session_id
                    )),
                    Err(error) => failures.lock().unwrap().push(format!("{}: {error}", ack.request_id)),
                }
            }
        })
        .await;
    }
    let replay_failures = replay_failures.lock().unwrap().clone();
    assert!(replay_failures.is_empty(), "re-sent acknowledged creates did not replay:\n{}", replay_failures.join("\n"));
    // The replays created nothing.
    assert_eq!(list_all(&client).await.len(), listed.len(), "re-sent creates made new sessions");
    drop(client);

    let status = server.terminate().await;
    assert!(status.success(), "the server did not stop cleanly on SIGTERM: {status}");

    // The file itself, read-only, after a clean stop: sound, then as below.
    let conn = crash::open_sound(data.path());

    // Sessions as stored: id -> (account, agent, title).
    let sessions: BTreeMap<String, (String, String, Option<String>)> = conn
        .prepare("SELECT id, account_id, agent_id, title FROM sessions")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?, row.get(3)?))))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(sessions.len(), listed.len(), "the sessions table and ListSessions disagree on the count");

    // Idempotency rows for CreateSession: client request id -> session id, each pointing to an
    // existing session with the title of the stored request.
    let rows: Vec<(String, String, Vec<u8>, Vec<u8>)> = conn
        .prepare(
            "SELECT account_id, client_request_id, request_cbor, response_cbor FROM action_idempotency
             WHERE action = 'CreateSession'",
        )
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let mut by_request: BTreeMap<String, String> = BTreeMap::new();
    let mut half_written = Vec::new();
    for (row_account, request_id, request, response) in rows {
        let response: AgentResponse = wire::from_slice(&response)
            .unwrap_or_else(|error| panic!("idempotency row {request_id}: response_cbor does not decode: {error}"));
        let session_id = CreateSessionResponse::from_response(response.clone())
            .unwrap_or_else(|| panic!("idempotency row {request_id} stores {response:?}, not a CreateSessionResponse"))
            .session_id
            .into_string();
        let request: Ipld = wire::from_slice(&request)
            .unwrap_or_else(|error| panic!("idempotency row {request_id}: request_cbor does not decode: {error}"));
        let Ipld::Map(request) = request else { panic!("idempotency row {request_id}: request is {request:?}") };
        let requested_title = match request.get("title") {
            Some(Ipld::String(title)) => Some(title.clone()),
            other => panic!("idempotency row {request_id}: request title is {other:?}"),
        };
        match sessions.get(&session_id) {
            None => half_written.push(format!("{request_id} -> {session_id}: no such session")),
            Some((owner, session_agent, title)) => {
                if owner != &account || row_account != account || session_agent != &agent_id {
                    half_written.push(format!(
                        "{request_id} -> {session_id}: account {row_account}, session owner {owner}, agent {session_agent}"
                    ));
                }
                if title != &requested_title {
                    half_written
                        .push(format!("{request_id} -> {session_id}: title {title:?}, requested {requested_title:?}"));
                }
            }
        }
        if let Some(previous) = by_request.insert(request_id.clone(), session_id) {
            half_written.push(format!("{request_id}: two rows ({previous} and another)"));
        }
    }
    let keyed: BTreeSet<&str> = by_request.values().map(String::as_str).collect();
    assert_eq!(keyed.len(), by_request.len(), "two idempotency rows name the same session");
    for id in sessions.keys() {
        if !keyed.contains(id.as_str()) {
            half_written.push(format!("session {id} has no idempotency row (every create sent a clientRequestId)"));
        }
    }
    for ack in &acked {
        if by_request.get(&ack.request_id) != Some(&ack.session_id) {
            half_written.push(format!(
                "acknowledged {} -> {}: idempotency row says {:?}",
                ack.request_id,
                ack.session_id,
                by_request.get(&ack.request_id)
            ));
        }
    }
    assert!(half_written.is_empty(), "half-written creates:\n{}", half_written.join("\n"));

    // Creates cut off by a kill either committed whole or not at all (checked above); count them.
    let cut_committed = cut_off.iter().filter(|(request_id, _)| by_request.contains_key(request_id)).count();
    println!(
        "{ROUNDS} kills: {} creates acknowledged, {} cut off ({} of those committed anyway), {} sessions stored; {:?}",
        acked.len(),
        cut_off.len(),
        cut_committed,
        sessions.len(),
        started.elapsed()
    );
    assert_eq!(sessions.len(), acked.len() + cut_committed, "sessions that no create accounts for");
}
