//! Turns survive crashes, against the real binary: the server is SIGKILLed 50 times at random
//! moments while several sessions stream answers (some with tool calls) from a scripted provider,
//! and restarted on the same data directory each time. After every restart the log of each
//! session still holds every event seen before the kill, with gap-free seqs and no event twice;
//! at the end no session is left streaming and every run ended (the interrupted ones re-ran from
//! the boot sweep, or failed by the rules).
//!
//! `cargo test -p seed-agents-server --test tests runtime_crash -- --nocapture` prints the figures;
//! `CRASH_KILLS=n` changes the number of kills.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use seed_agents_protocol::generated::{
    CreateAgent, CreateSession, GetSession, ListRuns, MessageEventRole, RunStatus, SessionEvent, SessionEventPayload,
    SessionInfoStatus, SetModelProvider,
};
use seed_agents_sdk::Client;

use crate::support::crash::{self, DATABASE_FILE, Lcg};
use crate::support::fixtures::{custom_provider_config, definition, say};
use crate::support::process::{Launch, ServerProcess, free_port};
use crate::support::provider::{Fallback, Provider, Script};
use crate::support::wait;

const SEED: [u8; 32] = [7; 32];
const SESSIONS: usize = 4;

fn client(url: &str) -> Client {
    crash::client(url, &SEED)
}

async fn log(client: &Client, session_id: &str) -> (Vec<SessionEvent>, SessionInfoStatus) {
    let got = client
        .get_session(GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap();
    (got.events, got.session.status)
}

fn scripts(provider: &Provider, count: usize, random: &mut Lcg) {
    for index in 0..count {
        let script = if random.next(3) == 0 {
            Script::tool_call(
                &format!("call_{index}"),
                "write",
                &format!(r#"{{"address":"~/memory/n{index}.md","content":"note {index}"}}"#),
            )
        } else {
            Script::text("A streamed answer in several small pieces, slowly.")
        };
        provider.push(script.split().delay(Duration::from_millis(2)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_survive_sigkill_at_random_points() {
    let kills = crash::kills(50);
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Text("Done.".into()));
    let mut random = Lcg(0x5eed);
    scripts(&provider, kills * SESSIONS * 3, &mut random);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let launch = Launch::new(crate::SERVER_BIN, &dir.path().join("data"), &dir.path().join("server.log"))
        .port(port)
        .arg("--session-title-generation")
        .arg("false");
    let mut server = ServerProcess::start(&launch).await;
    let owner = client(&server.url);
    let custom = custom_provider_config(provider.openai_base());
    owner.set_model_provider(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent = owner
        .create_agent(CreateAgent { client_request_id: None, definition: definition("crash") })
        .await
        .unwrap()
        .agent_id;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let create = CreateSession {
            agent_id: agent.clone(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: None,
        };
        sessions.push(owner.create_session(create).await.unwrap().session_id);
    }
    let mut seen: Vec<Vec<SessionEvent>> = vec![Vec::new(); SESSIONS];
    let started = Instant::now();
    for kill in 0..kills {
        let url = server.url.clone();
        for (index, session) in sessions.iter().enumerate() {
            let (client, message) = (client(&url), say(session, format!("message {kill}.{index}")));
            // Answered or cut off by the kill: either is fine, the log says what happened.
            tokio::spawn(async move { client.message_session(message).await });
        }
        // The kill lands at a random moment of the turns: the scenario, not a wait.
        tokio::time::sleep(Duration::from_millis(20 + random.next(250))).await;
        server.kill();
        server = ServerProcess::start(&launch).await;
        let owner = client(&server.url);
        for (index, session) in sessions.iter().enumerate() {
            let (events, _) = log(&owner, session).await;
            let seqs: Vec<i64> = events.iter().map(|event| event.seq).collect();
            assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>(), "gap-free seqs after kill {kill}");
            let ids: HashSet<&str> = events.iter().map(|event| event.id.as_str()).collect();
            assert_eq!(ids.len(), events.len(), "no event twice after kill {kill}");
            assert!(events.len() >= seen[index].len(), "events lost after kill {kill}");
            assert_eq!(&events[..seen[index].len()], &seen[index][..], "an event changed after kill {kill}");
            seen[index] = events;
        }
    }
    // Let the boot sweep finish what the last kill interrupted.
    let owner = client(&server.url);
    let (owner_ref, sessions_ref) = (&owner, &sessions);
    wait::until_ok_within(Duration::from_secs(60), "no session is streaming", || async move {
        for session in sessions_ref {
            if log(owner_ref, session).await.1 == SessionInfoStatus::Streaming {
                return Err(format!("session {session} still streaming"));
            }
        }
        Ok(())
    })
    .await;
    for session in &sessions {
        let runs = owner
            .list_runs(ListRuns {
                agent_id: None,
                limit: Some(200),
                root_run_id: None,
                session_id: Some(session.clone()),
                status: None,
            })
            .await
            .unwrap()
            .runs;
        let live: Vec<_> = runs
            .iter()
            .filter(|run| !matches!(run.status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled))
            .collect();
        assert!(live.is_empty(), "runs left unfinished: {live:?}");
    }
    let total: usize = seen.iter().map(Vec::len).sum();
    println!(
        "{kills} kills in {:.1} s; {total} durable events checked after every restart",
        started.elapsed().as_secs_f64()
    );
    server.terminate().await;
}

/// A pass's final answer is durable before its run ends; a server that dies between the two
/// finds the answer recorded on the run at the boot sweep's re-execution and ends the run from
/// it, rather than asking the model to answer again (docs/runtime.md §6.3). The state such a
/// crash leaves is made by hand, on the real binary's database, between two starts: a finished
/// turn is turned back into one that was running when the server died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_recorded_before_a_crash_is_not_asked_for_again() {
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Text("Asked again.".into()));
    provider.push(Script::text("The only answer."));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let launch = Launch::new(crate::SERVER_BIN, &data, &dir.path().join("server.log"))
        .port(free_port())
        .arg("--session-title-generation")
        .arg("false");
    let server = ServerProcess::start(&launch).await;
    let owner = client(&server.url);
    let custom = custom_provider_config(provider.openai_base());
    owner.set_model_provider(SetModelProvider { name: "main".into(), provider: custom }).await.unwrap();
    let agent = CreateAgent { client_request_id: None, definition: definition("answered") };
    let agent = owner.create_agent(agent).await.unwrap().agent_id;
    let create = CreateSession {
        agent_id: agent,
        client_request_id: None,
        model_override: None,
        thoroughness: None,
        title: None,
    };
    let session = owner.create_session(create).await.unwrap().session_id;
    let answer = owner.message_session(say(&session, "hello")).await.unwrap().assistant_event_id;
    assert!(!answer.is_empty(), "the turn answered");
    server.terminate().await;

    // The run as the crash would have left it: still running, its answer recorded, no output.
    let conn = rusqlite::Connection::open(data.join(DATABASE_FILE)).unwrap();
    let (run_id, recorded): (String, Option<String>) = conn
        .query_row("SELECT id, answered_event_id FROM runs WHERE session_id = ?1", [session.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!(recorded.as_deref(), Some(answer.as_str()), "the answer is recorded with the run");
    conn.execute(
        "UPDATE runs SET status = 'running', output_cbor = NULL, finished_at = NULL, lease_owner = 'gone',
             lease_expires_at = 0 WHERE id = ?1",
        [run_id.as_str()],
    )
    .unwrap();
    conn.execute("UPDATE sessions SET status = 'streaming' WHERE id = ?1", [session.as_str()]).unwrap();
    drop(conn);

    let server = ServerProcess::start(&launch).await;
    let owner = client(&server.url);
    let (owner_ref, run_ref) = (&owner, &run_id);
    wait::until_ok_within(Duration::from_secs(30), "the re-executed run ends", || async move {
        let runs = owner_ref
            .list_runs(ListRuns {
                agent_id: None,
                limit: None,
                root_run_id: Some(run_ref.clone().into()),
                session_id: None,
                status: None,
            })
            .await
            .map_err(|error| error.to_string())?
            .runs;
        match runs.into_iter().find(|run| run.id.as_str() == run_ref) {
            Some(run) if run.status == RunStatus::Succeeded => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(provider.request_count(), 1, "the model was not asked again");
    let (events, status) = log(&owner, &session).await;
    let answers: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.event {
            SessionEventPayload::MessageEvent(message) if message.role == MessageEventRole::Assistant => {
                Some(message.content.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["The only answer."], "one answer in the log");
    assert_eq!(status, SessionInfoStatus::Idle);
    server.terminate().await;
}
