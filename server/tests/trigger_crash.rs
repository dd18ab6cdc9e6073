//! Crash safety of trigger firings: the real `seed-agents-server` binary is killed with SIGKILL,
//! round after round, while several senders call a webhook trigger (each call a distinct
//! `webhook-id`, so each claims one firing), and the triggered runs answer from a scripted
//! provider.
//!
//! What it proves:
//! - **No firing is lost.** Every call the server acknowledged (202) has its firing after the
//!   restarts; every call cut off by a kill, sent again to the restarted server, is answered
//!   either 202 (it had not committed) or 409 (it had): its firing exists once either way.
//! - **No firing is doubled.** Re-sending every acknowledged call answers 409 and writes nothing;
//!   each `webhook-id` has exactly one firing.
//! - **A firing is whole.** Each firing has its session (titled after the trigger, opening with
//!   the trigger's prompt) and exactly one run whose `trigger_firing_id` names it; no triggered
//!   session or run exists without its firing. After a clean stop, `PRAGMA integrity_check` is
//!   `ok` and `PRAGMA foreign_key_check` finds nothing.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use seed_agents_protocol::generated::{CreateAgent, CreateAgentTrigger, SetModelProvider};

use crate::support::crash;
use crate::support::fixtures::{custom_provider_config, definition, webhook_trigger};
use crate::support::process::ServerProcess;
use crate::support::provider::{Fallback, Provider};
use crate::support::webhook;

const SEED: [u8; 32] = [9; 32];
const ROUNDS: u32 = 6;
const SENDERS: u32 = 4;

async fn start(data_dir: &Path, log_dir: &Path, label: &str) -> ServerProcess {
    crash::start(crate::SERVER_BIN, data_dir, log_dir, label).await
}

/// One webhook call: what a Standard Webhooks sender posts.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Fired,
    AlreadyReceived,
    /// No (complete) answer: the server died under it.
    CutOff,
    Other(u16),
}

async fn send(http: &reqwest::Client, url: &str, trigger_id: &str, secret: &[u8], call: &Call) -> Answer {
    let mut request = http
        .post(format!("{url}/api/triggers/{trigger_id}/webhook"))
        .body(call.body.clone())
        .timeout(Duration::from_secs(20));
    for (name, value) in webhook::headers(secret, &call.id, webhook::now_seconds(), &call.body) {
        request = request.header(name, value);
    }
    let sent = request.send().await;
    match sent {
        Err(_) => Answer::CutOff,
        Ok(response) => match response.status().as_u16() {
            202 => match response.bytes().await {
                Ok(_) => Answer::Fired,
                Err(_) => Answer::CutOff,
            },
            409 => Answer::AlreadyReceived,
            status => Answer::Other(status),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firings_survive_sigkill_once_each() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Text("handled".into()));

    let server = start(data.path(), logs.path(), "setup").await;
    let client = crash::client(&server.url, &SEED);
    client
        .call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent_id =
        client.call(CreateAgent { client_request_id: None, definition: definition("Hooked") }).await.unwrap().agent_id;
    let trigger = webhook_trigger("Deploy hook", "A deploy happened.");
    let created =
        client.call(CreateAgentTrigger { agent_id: agent_id.clone(), client_request_id: None, trigger }).await.unwrap();
    let trigger_id = created.trigger.id;
    let secret: Arc<[u8]> = webhook::key(&created.webhook_secret.unwrap()).into();
    server.kill();

    let http = seed_agents_sdk::default_http_client().unwrap();
    let mut acked: Vec<Call> = Vec::new();
    let mut cut_off: Vec<Call> = Vec::new();
    let mut unexpected: Vec<String> = Vec::new();
    for round in 0..ROUNDS {
        let server = start(data.path(), logs.path(), &format!("round-{round}")).await;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let (http, url, trigger_id, secret, stop) =
                    (http.clone(), server.url.clone(), trigger_id.clone(), secret.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut outcome = (Vec::new(), Vec::new(), Vec::new());
                    for n in 0..100_000u32 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let call = Call { id: format!("r{round}-s{sender}-n{n}"), body: format!("{{\"n\":{n}}}") };
                        match send(&http, &url, &trigger_id, &secret, &call).await {
                            Answer::Fired => outcome.0.push(call),
                            Answer::CutOff => {
                                outcome.1.push(call);
                                break;
                            }
                            other => {
                                outcome.2.push(format!("{}: {other:?}", call.id));
                                break;
                            }
                        }
                    }
                    outcome
                })
            })
            .collect();
        let delay = Duration::from_millis(100 + u64::from(round * 137 % 351));
        // The kill lands this long into the round's writes: the scenario, not a wait.
        tokio::time::sleep(delay).await;
        server.kill();
        stop.store(true, Ordering::Relaxed);
        let (mut round_acked, mut round_cut) = (0, 0);
        for task in tasks {
            let (fired, cut, odd) = tokio::time::timeout(Duration::from_secs(30), task).await.unwrap().unwrap();
            round_acked += fired.len();
            round_cut += cut.len();
            acked.extend(fired);
            cut_off.extend(cut);
            unexpected.extend(odd);
        }
        println!("round {round}: killed after {delay:?}; {round_acked} calls fired, {round_cut} cut off");
    }
    assert!(unexpected.is_empty(), "the live server answered calls unexpectedly:\n{}", unexpected.join("\n"));
    assert!(acked.len() >= ROUNDS as usize, "too few calls were acknowledged ({}) to prove anything", acked.len());

    let server = start(data.path(), logs.path(), "final").await;
    // Cut-off calls, sent again: each fires now or had fired before the kill.
    for call in &cut_off {
        let answer = send(&http, &server.url, &trigger_id, &secret, call).await;
        assert!(matches!(answer, Answer::Fired | Answer::AlreadyReceived), "{}: {answer:?}", call.id);
    }
    // Acknowledged calls, sent again: already received, nothing written.
    for call in &acked {
        let answer = send(&http, &server.url, &trigger_id, &secret, call).await;
        assert_eq!(answer, Answer::AlreadyReceived, "{}", call.id);
    }
    let status = server.terminate().await;
    assert!(status.success(), "the server did not stop cleanly: {status}");

    // Sound (`integrity_check` ok, no foreign key violations), then as below.
    let conn = crash::open_sound(data.path());
    let keys: Vec<String> = conn
        .prepare("SELECT activity_key FROM trigger_firings WHERE trigger_id = ?1")
        .unwrap()
        .query_map([trigger_id.as_str()], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let unique: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(unique.len(), keys.len(), "a webhook id fired twice");
    let expected: BTreeSet<String> = acked.iter().chain(&cut_off).map(|call| format!("webhook:{}", call.id)).collect();
    let missing: Vec<&String> = expected.iter().filter(|key| !unique.contains(key.as_str())).collect();
    assert!(missing.is_empty(), "firings lost: {missing:?}");
    assert_eq!(unique.len(), expected.len(), "firings for calls never sent");

    // Each firing is whole: one session that opens with the prompt, one run naming the firing.
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |row| row.get(0)).unwrap() };
    let firings = count("SELECT COUNT(*) FROM trigger_firings");
    assert_eq!(firings, expected.len() as i64);
    assert_eq!(count("SELECT COUNT(*) FROM trigger_firings WHERE session_id IS NULL OR run_id IS NULL"), 0);
    assert_eq!(count("SELECT COUNT(*) FROM sessions"), firings, "a session per firing, none without one");
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM trigger_firings f JOIN runs r ON r.id = f.run_id
             WHERE r.trigger_firing_id = f.id AND r.session_id = f.session_id AND r.origin = 'trigger'"
        ),
        firings
    );
    assert_eq!(count("SELECT COUNT(*) FROM runs"), firings, "a run per firing, none without one");
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM trigger_firings f JOIN session_events e ON e.session_id = f.session_id AND e.seq = 1"
        ),
        firings,
        "every triggered session opens with the prompt"
    );
    println!("{} firings, {} acknowledged, {} cut off and re-sent", firings, acked.len(), cut_off.len());
}
