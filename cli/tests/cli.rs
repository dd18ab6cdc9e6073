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

/// The number of actions `call --list` shows: every HTTP action of this build.
fn http_actions() -> usize {
    let listed = Cli::new(std::env::temp_dir().as_path()).run(["call", "--list", "--format", "json"]).json();
    listed.as_array().expect("an array").len()
}

#[test]
fn actions_describe_themselves_without_a_server() {
    let home = tempfile::tempdir().unwrap();
    let cli = || Cli::new(home.path()).env("SEED_AGENTS_SERVER", format!("http://127.0.0.1:{}", free_port()));

    let table = cli().run(["call", "--list"]);
    table.expect_code(0);
    let stdout = table.stdout();
    let rows: Vec<&str> = stdout.lines().take_while(|line| !line.is_empty()).map(str::trim_end).collect();
    assert_eq!(rows.len(), http_actions(), "one line per action:\n{}", table.stdout());
    let list_agents = rows.iter().find(|line| line.starts_with("ListAgents ")).expect("ListAgents is listed");
    assert!(list_agents.contains(" read ") && list_agents.len() < 200, "{list_agents}");
    let json = cli().run(["call", "--list", "--format", "json"]).json();
    let set = json.as_array().unwrap().iter().find(|row| row["action"] == "SetModelProvider").unwrap();
    assert_eq!((set["effect"].as_str(), set["response"].as_str()), (Some("write"), Some("SetModelProviderResponse")));
    let reads = cli().run(["call", "--list", "--jq", r#".[] | select(.effect == "read") | .action"#]);
    reads.expect_code(0);
    assert!(reads.stdout().lines().any(|line| line == "ListAgents") && !reads.stdout().contains("CreateAgent"));
    assert_eq!(cli().run(["call", "--list", "--format", "jsonl"]).stdout().lines().count(), http_actions());

    let described = cli().run(["call", "SetModelProvider", "--describe"]);
    described.expect_code(0);
    let text = described.stdout();
    assert!(text.starts_with("SetModelProvider: a write action"), "{text}");
    for expected in
        ["  .name*  string\n", "  .provider*  ModelProviderConfig\n", "  .provider.secretRefs  map<string>\n"]
    {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    assert!(text.contains("Skeleton"), "{text}");
    let as_json = cli().run(["call", "SetModelProvider", "--describe", "--format", "json"]).json();
    assert_eq!(as_json["skeleton"], json!({"name": "<string>", "provider": {"type": "<string>"}}));
    let members = cli().run(["call", "MessageSession", "--describe", "--jq", ".fields[] | select(.member) | .path"]);
    assert!(members.stdout().lines().any(|line| line == ".content[].text"), "{}", members.stdout());
    let response = cli().run(["call", "InvokeSessionTool", "--describe-response"]);
    response.expect_code(0);
    assert!(response.stdout().starts_with("InvokeSessionToolResponse: a response."), "{}", response.stdout());
    assert!(response.stdout().contains("  .error  string\n      Why the verb failed"), "{}", response.stdout());

    let typo = cli().run(["call", "ListAgent", "--describe"]);
    typo.expect_code(2);
    assert!(typo.stderr().contains("did you mean ListAgents?"), "{}", typo.stderr());
}

#[test]
fn input_is_checked_at_every_depth_before_anything_is_signed() {
    let server = Server::start();
    let (key, _) = keygen(&server, "key");
    let refused = |input: Value, action: &str| {
        let run = server.cli(&key).run(["call", action, &input.to_string()]);
        run.expect_code(2);
        assert_eq!(run.stdout(), "");
        run.stderr()
    };
    let nested = refused(
        json!({"name": "main", "provider": {"type": "openai", "secretRef": {"apiKey": "openai-key"}}}),
        "SetModelProvider",
    );
    assert!(nested.contains("at .provider.secretRef: unknown field (did you mean \"secretRefs\"?)"), "{nested}");
    // Nothing was stored.
    let providers = server.cli(&key).run(["call", "ListModelProviders", "--jq", ".providers | length"]);
    assert_eq!(providers.stdout(), "0\n", "{}", providers.stderr());

    let limit = refused(json!({"limit": "5"}), "ListSessions");
    assert!(limit.contains("at .limit: expected an integer, got the string \"5\""), "{limit}");
    let secret = refused(json!({"name": "k", "value": "sk-plain"}), "SetSecret");
    assert!(secret.contains("at .value: expected bytes, written {\"$bytes\": \"<hex digits>\"}"), "{secret}");
    assert!(secret.contains("--value-file") && !secret.contains("sk-plain"), "{secret}");
    let verb = refused(json!({"sessionId": "s", "verb": "raed", "input": {}}), "InvokeSessionTool");
    assert!(
        verb.contains("at .verb: expected one of \"call\", \"read\", \"write\"") && verb.contains("\"read\"?"),
        "{verb}"
    );
    // An open map takes any key; its values are still checked.
    let open = server.cli(&key).run([
        "call",
        "SetModelProvider",
        &json!({"name": "m", "provider": {"type": "ollama", "modelDefaults": {"anyKey": [1]}}}).to_string(),
    ]);
    open.expect_code(0);

    let misspelled = server.cli(&key).run(["call", "ListAgnets"]);
    misspelled.expect_code(2);
    assert!(misspelled.stderr().contains("did you mean ListAgents?"), "{}", misspelled.stderr());

    // A value read raw: from a file, and from stdin without its trailing newline.
    let value = server.dir.path().join("value.bin");
    std::fs::write(&value, [0u8, 1, 2, 255]).unwrap();
    let from_file = server
        .cli(&key)
        .run(["call", "SetSecret", r#"{"name": "from-file"}"#, "--value-file", value.to_str().unwrap()])
        .json();
    assert_eq!(from_file["secret"]["hasValue"], true);
    let from_stdin = server
        .cli(&key)
        .stdin("typed\n")
        .run(["call", "SetSecret", r#"{"name": "from-stdin"}"#, "--value-stdin"])
        .json();
    assert_eq!(from_stdin["secret"]["name"], "from-stdin");
    let both = server.cli(&key).run([
        "call",
        "SetSecret",
        r#"{"name": "k", "value": {"$bytes": "00"}}"#,
        "--value-file",
        value.to_str().unwrap(),
    ]);
    both.expect_code(2);
    // JSON piped in without `-` is the input.
    let piped = server.cli(&key).stdin(r#"{"limit": 1}"#).run(["call", "ListSessions"]).json();
    assert_eq!(piped["_"], "ListSessionsResponse");
    let wrong = server.cli(&key).stdin(r#"{"limit": "x"}"#).run(["call", "ListSessions"]);
    wrong.expect_code(2);
}

#[test]
fn jq_formats_verb_failures_and_unreachable_servers() {
    let server = Server::start();
    let (key, _) = keygen(&server, "key");
    let agent_id = create_agent(&server, &key, "tab\tname");
    let tsv = server.cli(&key).run(["call", "ListAgents", "--jq", ".agents[] | [.id, .definition.name] | @tsv"]);
    tsv.expect_code(0);
    assert_eq!(tsv.stdout(), format!("{agent_id}\ttab\\tname\n"));
    let csv =
        server.cli(&key).run(["call", "ListAgents", "--jq", ".agents[] | [.id, .definition.name, 1, null] | @csv"]);
    assert_eq!(csv.stdout(), format!("\"{agent_id}\",\"tab\tname\",1,\n"));
    let others = server.cli(&key).run([
        "call",
        "ListAgents",
        "--jq",
        r#".agents[0] | (.definition | {name} | @json), (.definition.name | @base64), ([.definition.name] | @sh), (.definition.model | @text)"#,
    ]);
    assert_eq!(others.stdout(), "{\"name\":\"tab\\tname\"}\ndGFiCW5hbWU=\n'tab\tname'\ngpt-4.1\n");

    // A verb that fails: the answer is printed, and the exit code says so.
    let session = server.cli(&key).run(["call", "CreateSession", &json!({"agentId": agent_id}).to_string()]).json();
    let session_id = text(&session, "/sessionId").to_owned();
    let read = json!({"sessionId": session_id, "verb": "read", "input": {"address": "~/memory/missing.md"}});
    let failed = server.cli(&key).run(["call", "InvokeSessionTool", &read.to_string()]);
    failed.expect_code(13);
    let answer: Value = serde_json::from_str(&failed.stdout()).expect("the answer is printed");
    assert!(answer["error"].is_string(), "{answer}");
    assert!(failed.stderr().contains("InvokeSessionTool answered a failure"), "{}", failed.stderr());

    // An unreachable server is named, with how to name another.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let refused = server.cli(&key).run(["--server", &closed, "call", "ListAgents"]);
    refused.expect_code(11);
    let stderr = refused.stderr();
    assert!(stderr.contains(&format!("cannot reach the server at {closed}: ")), "{stderr}");
    assert!(stderr.to_lowercase().contains("connection refused"), "{stderr}");
    assert!(stderr.contains("--server URL or SEED_AGENTS_SERVER"), "{stderr}");
    assert!(!stderr.contains("error sending request"), "no connector chain: {stderr}");

    // A subscription whose first connection never succeeds gives up, saying why.
    let gave_up = server.cli(&key).run([
        "--server",
        &closed,
        "subscribe",
        &format!("sessions/{session_id}"),
        "--connect-timeout",
        "1",
    ]);
    gave_up.expect_code(11);
    let stderr = gave_up.stderr();
    assert!(stderr.contains("cannot connect yet"), "{stderr}");
    assert!(stderr.contains(&format!("cannot reach the server at {closed}: no connection within 1 s")), "{stderr}");
}

#[test]
fn subscribe_reports_a_lost_connection_and_its_return() {
    let mut server = Server::start();
    let (key, _) = keygen(&server, "key");
    let agent_id = create_agent(&server, &key, "followed");
    let session = server.cli(&key).run(["call", "CreateSession", &json!({"agentId": agent_id}).to_string()]).json();
    let session_id = text(&session, "/sessionId").to_owned();
    let mut child = server.cli(&key).spawn(["subscribe", &format!("sessions/{session_id}")]);
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&stdout.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["type"], "subscribed");

    server.kill();
    let lost = stderr.next().expect("a line").expect("readable");
    assert!(lost.starts_with("seed-agents: connection lost ("), "{lost}");
    // While the server is down, each attempt fails and says so.
    let failed = stderr.next().expect("a line").expect("readable");
    assert!(failed.starts_with("seed-agents: reconnect attempt failed ("), "{failed}");
    assert!(failed.contains("); next in "), "{failed}");
    server.restart();
    let back = stderr
        .by_ref()
        .map(|line| line.expect("readable"))
        .find(|line| !line.starts_with("seed-agents: reconnect attempt failed ("))
        .expect("a line");
    assert_eq!(back, "seed-agents: reconnected");
    // On stdout, the same story as frames (a session's `change` snapshots aside).
    let mut types = Vec::new();
    while types.last().is_none_or(|last| last != "resumed") {
        let frame: Value = serde_json::from_str(&stdout.next().expect("a frame").expect("readable")).unwrap();
        if frame["type"] != "change" {
            types.push(frame["type"].as_str().unwrap_or_default().to_owned());
        }
    }
    types.dedup();
    assert_eq!(types, ["disconnected", "retrying", "subscribed", "resumed"]);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn model_list_failures_name_the_provider_type_and_url() {
    let server = Server::start();
    let (key, _) = keygen(&server, "key");
    let closed = format!("http://127.0.0.1:{}/v1", free_port());
    let provider = json!({"name": "local", "provider": {"type": "custom", "baseUrl": closed}});
    server.cli(&key).run(["call", "SetModelProvider", &provider.to_string()]).expect_code(0);
    let listed = server.cli(&key).run(["call", "ListProviderModels", r#"{"provider": "local"}"#]);
    listed.expect_code(9);
    let stderr = listed.stderr();
    assert!(stderr.contains(&format!("custom provider at {closed}: models request failed: unreachable")), "{stderr}");
    assert!(!stderr.contains("OpenAI"), "{stderr}");
}
