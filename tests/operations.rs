//! Operating the server (server/README.md): `/metrics` after a scripted workload, `/api/ready`,
//! per-account rate limits (burst, refill, `Retry-After`, reads untouched, accounts apart, the
//! SDK's retry) and the storage quota.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use seed_agents_protocol::generated::{
    BeginFileUpload, CreateAgent, CreateAgentTrigger, DeleteAgentMemoryFile, FileUploadTarget, GetAgent,
    InvokeSessionTool, InvokeSessionToolVerb, ListAgentMemory, ListAgents, MemoryUploadTarget, SetSecret,
    UploadSessionAttachment, WriteAgentMemoryFile, WriteAgentMemoryFileContent,
};
use seed_agents_protocol::{Action as _, Bytes, Value};
use seed_agents_sdk::ErrorCode;
use seed_agents_sdk::subscription::Event as Live;

use crate::support::fixtures::webhook_trigger;
use crate::support::provider::{Fallback, Provider, Script};
use crate::support::wait::until;
use crate::support::webhook::{now_seconds, signed};
use crate::support::{TestServer, User, api_error, custom_provider_config, definition, say};

/// `/metrics` as `name{labels}` → value (comments and `# EOF` left out).
async fn scrape(server: &TestServer) -> (String, BTreeMap<String, f64>) {
    let addr = server.server.as_ref().unwrap().metrics_addr().expect("a metrics listener");
    let response = server.http.get(format!("http://{addr}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let text = response.text().await.unwrap();
    let samples = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse::<f64>().unwrap())
        })
        .collect();
    (text, samples)
}

fn sample(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples.get(key).unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

fn write(agent_id: &str, path: &str, bytes: usize) -> WriteAgentMemoryFile {
    WriteAgentMemoryFile {
        agent_id: agent_id.into(),
        path: path.into(),
        content: WriteAgentMemoryFileContent::Bytes(Bytes(vec![7; bytes])),
    }
}

fn memory_target(agent_id: &str, path: &str) -> FileUploadTarget {
    FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
        extra: Default::default(),
        agent_id: agent_id.into(),
        path: path.into(),
    })
}

fn secret(name: &str) -> SetSecret {
    SetSecret { metadata: None, name: name.into(), value: Bytes(b"v".to_vec()) }
}

#[tokio::test]
async fn metrics_count_what_a_scripted_workload_did() {
    let provider = Provider::start().await;
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
        config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    // Metrics are not on the API's address.
    let on_api = server.http.get(format!("{}/metrics", server.url)).send().await.unwrap();
    assert_eq!(on_api.status(), 404);

    let user = server.user();
    let custom = custom_provider_config(provider.openai_base());
    user.call(seed_agents_protocol::generated::SetModelProvider { name: "main".into(), provider: custom })
        .await
        .unwrap();
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Counter") }).await.unwrap().agent_id;
    for _ in 0..3 {
        user.call(ListAgents {}).await.unwrap();
    }
    let (status, _) = api_error(user.call(GetAgent { agent_id: "missing".into() }).await);
    assert_eq!(status, 404);
    let session_id = user.create_session(&agent_id, None).await;
    user.call(write(&agent_id, "notes.md", 10)).await.unwrap();
    let target = memory_target(&agent_id, "big.bin");
    user.call(BeginFileUpload { size: 1000, target }).await.unwrap();
    // One turn that succeeds, one the provider refuses (400: not retried).
    provider.push(Script::text("Hello."));
    user.call(say(&session_id, "hi")).await.unwrap();
    provider.push(Script::status(400).message("bad request"));
    let (status, _) = api_error(user.call(say(&session_id, "again")).await);
    assert_eq!(status, 502);
    // One webhook firing, whose background run answers from the fallback.
    provider.set_fallback(Fallback::Text("done".into()));
    let created = user
        .call(CreateAgentTrigger {
            agent_id: agent_id.clone(),
            client_request_id: None,
            trigger: webhook_trigger("Hook", "Handle it."),
        })
        .await
        .unwrap();
    let body = r#"{"event":"x"}"#;
    let mut request =
        server.http.post(format!("{}/api/triggers/{}/webhook", server.url, created.trigger.id)).body(body);
    for (name, value) in signed(created.webhook_secret.as_deref().unwrap(), "msg_1", now_seconds(), body) {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 202);
    // One WebSocket, subscribed.
    let mut live = user.client.subscribe(format!("account/{}", user.id)).start();
    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));
    until("the triggered run ended and the socket counts", || async {
        let (_, samples) = scrape(&server).await;
        samples.get("seed_agents_runs{state=\"succeeded\"}") == Some(&2.0)
            && samples.get("seed_agents_websockets_open") == Some(&1.0)
    })
    .await;

    let (text, samples) = scrape(&server).await;
    for family in [
        "http_requests",
        "http_request_duration_seconds",
        "db_write_batch_size",
        "db_commit_duration_seconds",
        "runs",
        "run_queue_depth",
        "turn_duration_seconds",
        "provider_errors",
        "websockets_open",
        "websocket_frames_dropped",
        "uploads_in_flight",
        "trigger_firings",
        "body_budget_in_use_bytes",
        "body_budget_bytes",
        "rate_limited",
    ] {
        assert!(text.contains(&format!("# TYPE seed_agents_{family} ")), "no family {family}:\n{text}");
    }
    let requests = |action: &str, status: u16| {
        sample(&samples, &format!("seed_agents_http_requests_total{{action=\"{action}\",status=\"{status}\"}}"))
    };
    assert_eq!(requests("ListAgents", 200), 3.0);
    assert_eq!(requests("GetAgent", 404), 1.0);
    assert_eq!(requests("CreateAgent", 200), 1.0);
    assert_eq!(requests("MessageSession", 200), 1.0);
    assert_eq!(requests("MessageSession", 502), 1.0);
    assert_eq!(sample(&samples, "seed_agents_http_request_duration_seconds_count{action=\"ListAgents\"}"), 3.0);
    assert_eq!(
        sample(&samples, "seed_agents_http_request_duration_seconds_bucket{le=\"+Inf\",action=\"ListAgents\"}"),
        3.0
    );
    // Every batch the writer committed has its latency (the engine's own writes go on in the
    // background, so one may land between the two reads of a scrape).
    let batches = sample(&samples, "seed_agents_db_write_batch_size_count");
    assert!(batches >= 8.0, "{batches}");
    let commits = sample(&samples, "seed_agents_db_commit_duration_seconds_count");
    assert!((commits - batches).abs() <= 1.0, "{commits} commits, {batches} batches");
    assert_eq!(sample(&samples, "seed_agents_runs{state=\"succeeded\"}"), 2.0);
    assert_eq!(sample(&samples, "seed_agents_runs{state=\"failed\"}"), 1.0);
    assert_eq!(sample(&samples, "seed_agents_runs{state=\"queued\"}"), 0.0);
    assert_eq!(sample(&samples, "seed_agents_run_queue_depth"), 0.0);
    assert_eq!(sample(&samples, "seed_agents_turn_duration_seconds_count"), 3.0);
    assert_eq!(sample(&samples, "seed_agents_provider_errors_total{type=\"http\"}"), 1.0);
    assert_eq!(sample(&samples, "seed_agents_provider_errors_total{type=\"connect\"}"), 0.0);
    assert_eq!(sample(&samples, "seed_agents_websockets_open"), 1.0);
    assert_eq!(sample(&samples, "seed_agents_websocket_frames_dropped_total"), 0.0);
    assert_eq!(sample(&samples, "seed_agents_uploads_in_flight"), 1.0);
    assert_eq!(sample(&samples, "seed_agents_trigger_firings_total{kind=\"thread\"}"), 1.0);
    assert_eq!(sample(&samples, "seed_agents_trigger_firings_total{kind=\"wake\"}"), 0.0);
    assert_eq!(sample(&samples, "seed_agents_body_budget_bytes"), (128u64 << 20) as f64);
    // The scrape's own request is not a signed one; nothing else is in flight.
    assert_eq!(sample(&samples, "seed_agents_body_budget_in_use_bytes"), 0.0);
    assert_eq!(sample(&samples, "seed_agents_rate_limited_total{bucket=\"writes\"}"), 0.0);
    // No label carries an account (or any other id).
    assert!(!text.contains(&*user.id), "an account id in the metrics");
    assert!(!text.contains(&*agent_id) && !text.contains(&*session_id), "an id in the metrics");
    drop(live);
    server.stop().await;
}

#[tokio::test]
async fn ready_reports_the_database_the_migrations_and_the_writer() {
    let server = TestServer::start().await;
    for path in ["/api/ready", "/agents/api/ready"] {
        let response = server.http.get(format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            body,
            serde_json::json!({"status": "ready", "checks": {"database": "ok", "migrations": "ok", "writer": "ok"}})
        );
    }
    // With the database closed under it, the server is alive but not ready, and says why.
    let app = server.server.as_ref().unwrap().app().clone();
    tokio::task::spawn_blocking(move || app.db.close()).await.unwrap();
    let response = server.http.get(format!("{}/api/ready", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["status"], "not-ready");
    assert_eq!(body["checks"]["writer"], "the database writer is not running");
    assert_ne!(body["checks"]["database"], "ok");
    let health = server.http.get(format!("{}/api/health", server.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    drop(server);
}

/// A server whose writes are limited to one a second after a burst of three.
async fn limited() -> TestServer {
    TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.rate_writes_per_second = 1;
        config.rate_writes_burst = 3;
        config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await
}

#[tokio::test]
async fn writes_past_the_burst_get_429_with_retry_after_and_reads_and_other_accounts_do_not() {
    let server = limited().await;
    let user = server.user();
    let once = user.client.with_max_retries(0);
    for index in 0..3 {
        once.call(secret(&format!("s{index}"))).await.unwrap();
    }
    let refused = once.call(secret("s3")).await.unwrap_err();
    assert_eq!(refused.status(), Some(429), "{refused:?}");
    assert_eq!(refused.code(), Some(ErrorCode::RateLimited));
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
    // Steady state: after the wait the server asked for, one more write passes, the next not.
    tokio::time::sleep(refused.retry_after().unwrap()).await;
    once.call(secret("s4")).await.unwrap();
    assert_eq!(once.call(secret("s5")).await.unwrap_err().code(), Some(ErrorCode::RateLimited));
    // The raw answer: 429, `Retry-After`, the code in the CBOR error.
    let body = user.client.sign(&secret("raw").into_action()).await.unwrap();
    let (status, headers, bytes) = server.post_raw("application/cbor", body).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "1");
    let (message, code) = crate::support::error_body(&bytes);
    assert_eq!((message.as_str(), code.as_deref()), ("Too many requests; try again later", Some("rate_limited")));
    // Reads are not limited, however many.
    for _ in 0..50 {
        once.call(ListAgents {}).await.unwrap();
    }
    // Another account has its own bucket.
    let other = server.user();
    for index in 0..3 {
        other.client.with_max_retries(0).call(secret(&format!("mine{index}"))).await.unwrap();
    }
    let (_, samples) = scrape(&server).await;
    assert_eq!(sample(&samples, "seed_agents_rate_limited_total{bucket=\"writes\"}"), 3.0);
    assert_eq!(sample(&samples, "seed_agents_http_requests_total{action=\"SetSecret\",status=\"429\"}"), 3.0);
    server.stop().await;
}

#[tokio::test]
async fn the_sdk_waits_out_retry_after_and_the_write_goes_through() {
    let server = limited().await;
    let user = server.user();
    // The default client retries a 429 after its `Retry-After` (up to its retry count).
    for index in 0..5 {
        user.call(secret(&format!("s{index}"))).await.unwrap();
    }
    let (_, samples) = scrape(&server).await;
    // The fourth write waited a second; the fifth, a moment later, found the bucket empty again
    // unless this machine stalled for a second in between.
    let refused = sample(&samples, "seed_agents_rate_limited_total{bucket=\"writes\"}");
    assert!((1.0..=2.0).contains(&refused), "{refused}");
    assert_eq!(sample(&samples, "seed_agents_http_requests_total{action=\"SetSecret\",status=\"200\"}"), 5.0);
    server.stop().await;
}

#[tokio::test]
async fn turns_uploads_and_file_bytes_have_buckets_of_their_own() {
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Text("ok".into()));
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.rate_turns_per_second = 1;
        config.rate_turns_burst = 1;
        config.max_body_bytes = 64 * 1024;
        config.rate_memory_bytes_per_hour = 64 * 1024;
        config.rate_memory_bytes_burst = 64 * 1024;
    })
    .await;
    let user = server.user();
    let once = user.client.with_max_retries(0);
    let custom = custom_provider_config(provider.openai_base());
    once.call(seed_agents_protocol::generated::SetModelProvider { name: "main".into(), provider: custom })
        .await
        .unwrap();
    let agent_id =
        once.call(CreateAgent { client_request_id: None, definition: definition("Busy") }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    once.call(say(&session_id, "one")).await.unwrap();
    let refused = once.call(say(&session_id, "two")).await.unwrap_err();
    assert_eq!((refused.status(), refused.code()), (Some(429), Some(ErrorCode::RateLimited)));
    // Writes still pass: turns have their own bucket.
    user.create_session(&agent_id, None).await;

    // 64 KiB of file content an hour: 40 KiB passes, 40 more must wait far longer than a call
    // waits by itself, so even the retrying client hands the refusal back at once.
    user.call(write(&agent_id, "a.bin", 40 * 1024)).await.unwrap();
    let refused = user.call(write(&agent_id, "b.bin", 40 * 1024)).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::RateLimited));
    assert!(refused.retry_after().unwrap() > seed_agents_sdk::MAX_RETRY_AFTER, "{refused:?}");
    let listed = user.call(ListAgentMemory { agent_id: agent_id.clone() }).await.unwrap();
    assert_eq!(listed.entries.iter().map(|entry| entry.path.as_str()).collect::<Vec<_>>(), ["a.bin"]);
    server.stop().await;
}

#[tokio::test]
async fn the_storage_quota_refuses_with_413_and_writes_nothing() {
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.storage_quota_bytes = 10_000;
    })
    .await;
    let user = server.user();
    user.ensure_provider().await;
    let agent_id =
        user.call(CreateAgent { client_request_id: None, definition: definition("Full") }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    user.call(write(&agent_id, "a.bin", 6000)).await.unwrap();
    let refused = user.call(write(&agent_id, "b.bin", 6000)).await.unwrap_err();
    assert_eq!((refused.status(), refused.code()), (Some(413), Some(ErrorCode::QuotaExceeded)), "{refused:?}");
    let paths = |user: User, agent_id: seed_agents_protocol::AgentId| async move {
        let listed = user.call(ListAgentMemory { agent_id }).await.unwrap();
        listed.entries.into_iter().map(|entry| entry.path).collect::<Vec<_>>()
    };
    assert_eq!(paths(user.clone(), agent_id.clone()).await, ["a.bin"]);
    // Overwriting frees what it replaces.
    user.call(write(&agent_id, "a.bin", 9000)).await.unwrap();
    // Attachments count too, inline and chunked.
    let attachment = UploadSessionAttachment {
        content: Bytes(vec![1; 2000]),
        mime_type: None,
        name: "x.bin".into(),
        session_id: session_id.clone(),
    };
    let refused = user.call(attachment.clone()).await.unwrap_err();
    assert_eq!((refused.status(), refused.code()), (Some(413), Some(ErrorCode::QuotaExceeded)));
    let target = memory_target(&agent_id, "c.bin");
    let refused = user.call(BeginFileUpload { size: 5000, target }).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::QuotaExceeded));
    // Room again once a file is gone.
    user.call(DeleteAgentMemoryFile { agent_id: agent_id.clone(), path: "a.bin".into() }).await.unwrap();
    user.call(attachment).await.unwrap();
    assert!(paths(user.clone(), agent_id.clone()).await.is_empty());
    // Copying an attachment into memory counts like any write: 2,000 + 6,000 in attachments, and
    // a 6,000-byte copy would pass 10,000.
    let big = UploadSessionAttachment {
        content: Bytes(vec![2; 6000]),
        mime_type: None,
        name: "y.bin".into(),
        session_id: session_id.clone(),
    };
    let big = user.call(big).await.unwrap().attachment;
    let input = serde_json::json!({ "address": "~/memory/y.bin", "options": { "fromAttachment": big.id } });
    let copy = InvokeSessionTool {
        input: Value(seed_agents_protocol::wire::to_ipld(&input).unwrap()),
        session_id: session_id.clone(),
        verb: InvokeSessionToolVerb::Write,
    };
    let copied = user.call(copy).await.unwrap();
    let error = copied.error.unwrap_or_default();
    assert!(error.starts_with("Storage quota exceeded"), "{error:?}");
    assert!(paths(user.clone(), agent_id.clone()).await.is_empty());
    server.stop().await;
}

/// On PostgreSQL the database outlives the data directory: a server started with another
/// directory (a new `secret.key`) beside secrets sealed with the old key refuses to start and says
/// why, instead of sealing new secrets with a key the old ones do not open with. (With SQLite the
/// database lives in the directory, so the two cannot part; the check runs on PostgreSQL only.)
#[tokio::test]
async fn a_postgres_server_with_another_key_than_its_secrets_refuses_to_start() {
    if crate::support::postgres_url().is_none() {
        eprintln!("a PostgreSQL-only check: the suite runs on SQLite");
        return;
    }
    let server = TestServer::start().await;
    let secret = seed_agents_protocol::generated::SetSecret {
        name: "api-key".into(),
        value: Bytes(b"sk-kept".to_vec()),
        metadata: None,
    };
    server.user().call(secret).await.unwrap();
    let dir = server.stop().await;
    let key = dir.path().join("secret.key");
    let kept = std::fs::read(&key).unwrap();
    std::fs::remove_file(&key).unwrap();
    let refused =
        seed_agents_server::RunningServer::start(TestServer::config(dir.path()), seed_agents_server::Clock::system())
            .await
            .map(|_| ())
            .expect_err("a new key beside old secrets");
    let message = refused.to_string();
    assert!(message.contains("1 of 1 secrets stored in the database do not open"), "{message}");
    // With the right key back, it starts.
    std::fs::write(&key, kept).unwrap();
    TestServer::start_in(dir).await.stop().await;
}
