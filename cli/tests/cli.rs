//! The `seed-agents` binary against the real server binary on loopback: a key, calls from JSON,
//! listing, uploads with progress, subscriptions, and the exit code of each class of failure.

mod support;

use std::io::{BufRead as _, BufReader};

use serde_json::{Value, json};
use support::{Cli, Server, free_port};

/// Writes a new key with `keygen --out` and returns its path and account.
fn keygen(server: &Server, name: &str) -> (std::path::PathBuf, String) {
    let path = server.dir.path().join(name);
    let run =
        Cli::new(server.dir.path()).run(["keygen", "--out"].iter().map(std::ffi::OsStr::new).chain([path.as_os_str()]));
    run.expect_code(0);
    let account = run.stdout().trim().to_owned();
    assert!(account.starts_with('z'), "keygen printed {account:?}");
    (path, account)
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("no string at {pointer} in {value}"))
}

/// Sets a secret, a provider and an agent from JSON (inline, @file, stdin); returns the agent id.
fn create_agent(server: &Server, key: &std::path::Path, name: &str) -> String {
    let secret = server
        .cli(key)
        .run([
            "call",
            "SetSecret",
            &json!({"name": "openai-key", "value": {"$bytes": hex::encode("sk-cli-test")}}).to_string(),
        ])
        .json();
    assert_eq!(secret["_"], "SetSecretResponse");
    assert_eq!(secret["secret"]["name"], "openai-key");
    assert_eq!(secret["secret"]["hasValue"], true);
    assert!(!secret.to_string().contains(&hex::encode("sk-cli-test")), "the secret came back: {secret}");

    let provider = server.dir.path().join("provider.json");
    std::fs::write(
        &provider,
        json!({"name": "main", "provider": {"type": "openai", "secretRefs": {"apiKey": "openai-key"}}}).to_string(),
    )
    .expect("provider.json");
    let set = server.cli(key).run(["call", "SetModelProvider", &format!("@{}", provider.display())]).json();
    assert_eq!(set["_"], "SetModelProviderResponse", "{set}");

    let definition = json!({"definition": {"name": name, "model": "gpt-4.1", "modelProvider": "main", "systemPrompt": "You are helpful."}});
    let created = server.cli(key).stdin(definition.to_string()).run(["call", "CreateAgent", "-"]).json();
    assert_eq!(created["_"], "CreateAgentResponse");
    text(&created, "/agentId").to_owned()
}

#[test]
fn keygen_calls_from_json_list_and_upload_with_progress() {
    let server = Server::start();
    let (key, account) = keygen(&server, "key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let again = Cli::new(server.dir.path()).run(["keygen", "--out", key.to_str().unwrap()]);
    again.expect_code(1);
    assert!(again.stderr().contains("--force"), "{}", again.stderr());
    let whoami = server.cli(&key).run(["whoami"]).json();
    assert_eq!(whoami["account"], account.as_str());
    assert_eq!(whoami["signer"], account.as_str());

    let agent_id = create_agent(&server, &key, "cli-agent");

    let listed = server.cli(&key).run(["call", "ListAgents", "--format", "json"]).json();
    assert_eq!(listed["_"], "ListAgentsResponse");
    let agents = listed["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 1, "{listed}");
    assert_eq!(agents[0]["id"], agent_id.as_str());
    assert_eq!(agents[0]["definition"]["name"], "cli-agent");
    let line = server.cli(&key).run(["call", "ListAgents", "--format", "jsonl"]);
    line.expect_code(0);
    assert_eq!(line.stdout().lines().count(), 1);
    assert_eq!(serde_json::from_str::<Value>(&line.stdout()).unwrap(), listed);
    let diag = server.cli(&key).run(["call", "ListAgents", "--format", "diag"]);
    diag.expect_code(0);
    assert!(diag.stdout().starts_with(r#"{"_": "ListAgentsResponse", "agents": ["#), "{}", diag.stdout());

    let names =
        server.cli(&key).run(["call", "ListAgents", "--jq", "(.agents[] | .definition.name), (.agents | length)"]);
    names.expect_code(0);
    assert_eq!(names.stdout(), "cli-agent\n1\n");

    // Two chunks (the server asks for 8 MiB ones), a line of progress per acknowledged chunk.
    let size = 9 * 1024 * 1024 + 123;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    let file = server.dir.path().join("big.bin");
    std::fs::write(&file, &data).unwrap();
    let upload = server.cli(&key).run([
        "upload",
        file.to_str().unwrap(),
        "--agent",
        &agent_id,
        "--path",
        "docs/big.bin",
        "--progress",
        "plain",
    ]);
    let committed = upload.json();
    assert_eq!(committed["_"], "CommitFileUploadResponse");
    assert_eq!(committed["entry"]["path"], "docs/big.bin");
    assert_eq!(committed["entry"]["size"], size);
    let progress: Vec<String> = upload.stderr().lines().map(str::to_owned).collect();
    assert!(progress.len() >= 2, "one line per chunk: {progress:?}");
    assert_eq!(progress.last().unwrap(), &format!("{size}/{size} bytes"));
    let read = server
        .cli(&key)
        .run(["call", "ReadAgentMemoryFile", &json!({"agentId": agent_id, "path": "docs/big.bin"}).to_string()])
        .json();
    assert_eq!(read["file"]["size"], size);
    assert!(text(&read, "/file/data/$bytes") == hex::encode(&data), "the file read back differs");

    // A session attachment; stderr is not a terminal, so the default progress bar stays hidden.
    let session = server.cli(&key).run(["call", "CreateSession", &json!({"agentId": agent_id}).to_string()]).json();
    let session_id = text(&session, "/sessionId").to_owned();
    let note = server.dir.path().join("note.txt");
    std::fs::write(&note, "hello from the CLI").unwrap();
    let attached =
        server.cli(&key).run(["upload", note.to_str().unwrap(), "--session", &session_id, "--mime-type", "text/plain"]);
    let attached_json = attached.json();
    assert_eq!(attached.stderr(), "", "no progress drawn on a pipe");
    assert_eq!(attached_json["attachment"]["name"], "note.txt");
    let attachment = server
        .cli(&key)
        .run([
            "call",
            "ReadSessionAttachment",
            &json!({"sessionId": session_id, "attachmentId": text(&attached_json, "/attachment/id")}).to_string(),
        ])
        .json();
    assert_eq!(text(&attachment, "/data/$bytes"), hex::encode("hello from the CLI"));
}

#[test]
fn exit_codes_name_the_class_of_failure() {
    let server = Server::start();
    let (key, _) = keygen(&server, "key");
    let (_, stranger) = keygen(&server, "stranger.key");

    let missing = server.cli(&key).run(["call", "GetAgent", r#"{"agentId": "no-such-agent"}"#]);
    missing.expect_code(4);
    assert!(missing.stderr().contains("404"), "{}", missing.stderr());
    assert_eq!(missing.stdout(), "");

    let unauthorized = server.cli(&key).run(["--account", &stranger, "call", "ListAgents"]);
    unauthorized.expect_code(5);
    assert!(unauthorized.stderr().contains("Signer is not authorized for account"), "{}", unauthorized.stderr());

    let closed = format!("http://127.0.0.1:{}", free_port());
    let refused = server.cli(&key).run(["--server", &closed, "call", "ListAgents"]);
    refused.expect_code(11);
    assert!(refused.stderr().to_lowercase().contains("refused"), "the cause is named: {}", refused.stderr());
    server.cli(&key).run(["--server", &closed, "health"]).expect_code(11);

    // Browser relay actions are not built: 501 is a server failure.
    let browser = r#"{"sessionId": "s", "connectionId": "c"}"#;
    server.cli(&key).run(["call", "ConnectSessionBrowser", browser]).expect_code(9);

    // Refused before anything is sent.
    let typo = server.cli(&key).run(["call", "GetAgent", r#"{"agentId": "a", "agentid": "b"}"#]);
    typo.expect_code(2);
    assert!(typo.stderr().contains(".agentid"), "{}", typo.stderr());
    server.cli(&key).run(["call", "GetAgent", "{nope"]).expect_code(2);
    server.cli(&key).run(["call", "NoSuchAction"]).expect_code(2);
    server.cli(&key).run(["call", "ListAgents", "--jq", ".agents["]).expect_code(2);
    server.cli(&key).run(["--server", "ftp://127.0.0.1", "call", "ListAgents"]).expect_code(2);
    server.cli(&key).run(["call"]).expect_code(2);
    let no_key = server.cli(&server.dir.path().join("absent.key")).run(["call", "ListAgents"]);
    no_key.expect_code(3);
    assert!(no_key.stderr().contains("keygen"), "{}", no_key.stderr());

    let health = server.cli(&key).run(["health"]).json();
    assert_eq!(health["status"], "ok");
    let version = server.cli(&key).run(["version"]).json();
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
}

/// On Linux the config directory is `$XDG_CONFIG_HOME`, which the test points at a temp dir.
#[cfg(target_os = "linux")]
#[test]
fn the_default_key_lives_in_the_config_directory() {
    let home = tempfile::tempdir().unwrap();
    let made = Cli::new(home.path()).run(["keygen"]);
    made.expect_code(0);
    let path = home.path().join("config").join("seed-agents").join("key");
    assert!(path.exists(), "{}", made.stderr());
    let whoami = Cli::new(home.path()).run(["whoami"]).json();
    assert_eq!(whoami["account"], made.stdout().trim());
    assert_eq!(whoami["keyFile"], path.to_str().unwrap());
    Cli::new(home.path()).run(["keygen"]).expect_code(1);
}

#[test]
fn subscribe_prints_a_line_per_frame_and_resumes_after_a_seq() {
    let server = Server::start();
    let (key, _) = keygen(&server, "key");
    let agent_id = create_agent(&server, &key, "followed");
    let session = server.cli(&key).run(["call", "CreateSession", &json!({"agentId": agent_id}).to_string()]).json();
    let session_id = text(&session, "/sessionId").to_owned();
    let write = |content: &str| {
        let input = json!({"sessionId": session_id, "verb": "write", "input": {"address": "~/memory/notes.md", "content": content}});
        server.cli(&key).run(["call", "InvokeSessionTool", &input.to_string()]).expect_code(0);
    };
    write("first");

    let follow = |after: Option<i64>, wanted: usize| -> Vec<Value> {
        let mut args = vec!["subscribe".to_owned(), format!("sessions/{session_id}")];
        if let Some(after) = after {
            args.extend(["--after-seq".to_owned(), after.to_string()]);
        }
        let mut child = server.cli(&key).spawn(&args);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut frames = Vec::new();
        while frames.iter().filter(|frame: &&Value| frame["type"] == "append").count() < wanted {
            let line = lines.next().expect("a line before the stream ends").expect("readable");
            frames.push(serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}")));
        }
        let _ = child.kill();
        let _ = child.wait();
        frames
    };
    let first = follow(None, 2);
    assert_eq!(first[0]["type"], "subscribed", "{first:?}");
    let appends: Vec<&Value> = first.iter().filter(|frame| frame["type"] == "append").collect();
    let seqs: Vec<i64> = appends.iter().map(|frame| frame["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1), "{seqs:?}");
    assert_eq!(appends[0]["event"]["seq"], appends[0]["seq"]);
    let last = *seqs.last().unwrap();

    write("second");
    let resumed = follow(Some(last), 1);
    let next = resumed.iter().find(|frame| frame["type"] == "append").unwrap();
    assert_eq!(next["seq"], last + 1, "{resumed:?}");

    let refused = server.cli(&key).run(["subscribe", "sessions/no-such-session"]);
    refused.expect_code(8);
    let frames: Vec<Value> = refused.stdout().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(frames.last().unwrap()["type"], "error", "{frames:?}");
}
