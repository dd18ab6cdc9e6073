//! The code sandbox and the `execute` callable (docs/sandbox.md) on a real bubblewrap: results,
//! limits, and escape attempts that must fail while the server keeps answering. These tests fail
//! (they do not skip) on a host without bubblewrap: CI installs it.

use std::time::Duration;

use futures_util::StreamExt as _;
use seed_agents_protocol::generated::{
    GetSession, InvokeSessionToolVerb, ListAgentTools, ReadAgentMemoryFile, SessionEventPayload, SetModelProvider,
};
use seed_agents_protocol::{AgentId, SessionId};
use seed_agents_sdk::subscription::Event as Live;
use seed_agents_server::ExecBackend;
use serde_json::{Value as Json, json};

use crate::support::fixtures::{invoke, tool_output as output};
use crate::support::provider::{Provider, Script};
use crate::support::{TestServer, User, custom_provider_config, definition, say};

/// A server that runs code, a user, an agent and a session.
async fn setup(
    adjust: impl FnOnce(&mut seed_agents_server::Config) + Send + 'static,
) -> (TestServer, User, AgentId, SessionId) {
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), move |config| {
        config.exec_backend = ExecBackend::Namespaces;
        config.exec_concurrency = 4;
        config.exec_per_account = 2;
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
        adjust(config);
    })
    .await;
    let health = health(&server).await;
    assert_eq!(health["codeExec"], true, "the sandbox must run here (install bubblewrap): {health}");
    let user = server.user();
    let agent = user.create_agent("Coder").await;
    let session = user.create_session(&agent, None).await;
    (server, user, agent, session)
}

async fn health(server: &TestServer) -> Json {
    let response = server.http.get(format!("{}/api/health", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

/// `call {tool: "execute", input}` as the user: the output.
async fn execute(user: &User, session: &str, input: Json) -> Json {
    let call = invoke(session, InvokeSessionToolVerb::Call, json!({"tool": "execute", "input": input}));
    output(&user.call(call).await.unwrap())
}

async fn shell(user: &User, session: &str, code: &str, timeout_secs: u64) -> Json {
    execute(user, session, json!({"runtime": "shell", "code": code, "timeout_secs": timeout_secs})).await
}

async fn python(user: &User, session: &str, code: &str, timeout_secs: u64) -> Json {
    execute(user, session, json!({"runtime": "python", "code": code, "timeout_secs": timeout_secs})).await
}

/// This process's resident memory, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn execute_runs_code_with_memory_as_its_workspace() {
    let (server, user, agent, session) = setup(|_| {}).await;
    let health = health(&server).await;
    assert_eq!(health["codeExecRuntimes"], json!(["python", "shell"]));
    assert_eq!((health["codeExecReason"].clone(), health["codeExecReasonCode"].clone()), (Json::Null, Json::Null));
    assert!(health["codeExecLimits"].as_array().unwrap().contains(&json!("seccomp")), "{health}");

    let ran = shell(&user, &session, "echo hello > greeting.txt; cat greeting.txt; echo warn >&2", 30).await;
    assert_eq!((ran["exitCode"].clone(), ran["success"].clone()), (json!(0), json!(true)));
    assert_eq!((ran["stdout"].as_str(), ran["stderr"].as_str()), (Some("hello\n"), Some("warn\n")));
    assert_eq!(ran["changedFiles"], json!([{"path": "greeting.txt", "change": "added"}]));
    assert_eq!(ran["truncated"], false);
    let summary = ran["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Ran shell code (exit 0, ") && summary.ends_with("ms, 1 memory file changed)."),
        "{summary}"
    );
    // The file is the agent's memory file.
    let read = invoke(&session, InvokeSessionToolVerb::Read, json!({"address": "~/memory/greeting.txt"}));
    assert!(serde_json::to_string(&output(&user.call(read).await.unwrap())).unwrap().contains("hello"));

    // A non-zero exit is a result, not an error; python sees the same files.
    let ran = python(&user, &session, "import sys\nprint(open('greeting.txt').read().strip())\nsys.exit(4)", 30).await;
    assert_eq!((ran["exitCode"].clone(), ran["success"].clone()), (json!(4), json!(false)));
    assert_eq!(ran["stdout"], "hello\n");
    let ran = python(&user, &session, "import os\nos.remove('greeting.txt')", 30).await;
    assert_eq!(ran["changedFiles"], json!([{"path": "greeting.txt", "change": "removed"}]));

    // The legacy name, a runtime this server lacks, no code.
    let call =
        |tool: &str, input: Json| invoke(&session, InvokeSessionToolVerb::Call, json!({"tool": tool, "input": input}));
    let legacy =
        output(&user.call(call("execute_code", json!({"runtime": "shell", "code": "echo old"}))).await.unwrap());
    assert_eq!(legacy["stdout"], "old\n");
    let ts = output(&user.call(call("execute", json!({"runtime": "ts", "code": "1"}))).await.unwrap());
    assert!(ts["summary"].as_str().unwrap().starts_with("Input for execute did not match its contract"), "{ts}");
    let blank = user.call(call("execute", json!({"runtime": "shell", "code": "  "}))).await.unwrap();
    assert_eq!(blank.error.as_deref(), Some("Code is required"));

    // Listed and granted.
    let tools = user.call(ListAgentTools { agent_id: agent }).await.unwrap().tools;
    let execute = tools.iter().find(|tool| tool.name == "execute").unwrap();
    assert!(execute.granted);
    server.stop().await;
}

#[tokio::test]
async fn execute_is_not_offered_when_off() {
    let server = TestServer::start().await;
    let health = health(&server).await;
    assert_eq!(
        (health["codeExec"].clone(), health["codeExecReasonCode"].clone()),
        (json!(false), json!("config-disabled"))
    );
    let user = server.user();
    let agent = user.create_agent("NoCode").await;
    let session = user.create_session(&agent, None).await;
    let call = invoke(
        &session,
        InvokeSessionToolVerb::Call,
        json!({"tool": "execute", "input": {"runtime": "shell", "code": "id"}}),
    );
    let miss = output(&user.call(call).await.unwrap());
    assert_eq!(miss["summary"], "No callable tool named execute. Here is what you can call.");
    let tools = user.call(ListAgentTools { agent_id: agent }).await.unwrap().tools;
    assert!(!tools.iter().find(|tool| tool.name == "execute").unwrap().granted);
    server.stop().await;
}

#[tokio::test]
async fn the_server_and_the_host_stay_out_of_reach() {
    let (server, user, agent, session) = setup(|_| {}).await;
    let data_dir = server.dir.path().to_string_lossy().into_owned();

    // The data directory (database, secret key, every agent's memory) is not there at all.
    let ran = shell(
        &user,
        &session,
        &format!("ls -a '{data_dir}' || echo absent; ls /; cat /etc/shadow || echo no-shadow"),
        30,
    )
    .await;
    let stdout = ran["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("absent\n"), "{ran}");
    assert!(stdout.ends_with("no-shadow\n"), "{ran}");
    let top: Vec<&str> = stdout.lines().collect();
    for hidden in ["home", "var", "sys", "boot", "srv", "opt", "mnt"] {
        assert!(!top.contains(&hidden), "/{hidden} is visible: {ran}");
    }
    assert!(!stdout.contains("seed-agents.sqlite"), "{ran}");

    // Writes to the system and the kernel's settings fail; /tmp is the sandbox's own.
    let marker = format!("seed-sandbox-escape-{}", std::process::id());
    let ran = shell(
        &user,
        &session,
        &format!(
            "for f in /usr/x /usr/bin/sh /proc/sys/kernel/core_pattern /proc/sys/kernel/hostname /proc/sys/vm/drop_caches; \
             do echo x > $f 2>/dev/null && echo wrote $f; done; echo x > /tmp/{marker} && echo tmp-ok"
        ),
        30,
    )
    .await;
    assert_eq!(ran["stdout"], "tmp-ok\n", "{ran}");
    // The sandbox's root folder is its own (a tmpfs): what lands there stays there.
    let ran = shell(&user, &session, &format!("echo x > /{marker} && echo wrote"), 30).await;
    assert_eq!(ran["stdout"], "wrote\n");
    assert!(!std::path::Path::new("/").join(&marker).exists());
    assert!(!std::path::Path::new("/tmp").join(&marker).exists());

    // No symlinks or FIFOs can be made (a memory operation of the server running at the same time
    // must not meet one swapped in); a symlink put there otherwise is never followed.
    let ran = shell(
        &user,
        &session,
        "ln -s /etc/passwd passwd || echo no-symlink; mkfifo pipe || echo no-fifo; \
         python3 -c 'import os; os.symlink(\"/\", \"root\")' 2>/dev/null || echo no-python-symlink; ls",
        30,
    )
    .await;
    assert_eq!(ran["stdout"], "no-symlink\nno-fifo\nno-python-symlink\n", "{ran}");
    let memory = server.dir.path().join("agents").join(agent.to_string()).join("memory");
    assert!(memory.is_dir(), "{}", memory.display());
    // A file the server holds in the data directory on either database: the secret key.
    let target = server.dir.path().join("secret.key");
    assert!(target.is_file(), "{}", target.display());
    std::os::unix::fs::symlink(target, memory.join("db")).unwrap();
    let read = invoke(&session, InvokeSessionToolVerb::Read, json!({"address": "~/memory/db"}));
    assert!(user.call(read).await.unwrap().error.is_some(), "the server followed a symlink");
    let direct = user.call(ReadAgentMemoryFile { agent_id: agent.clone(), path: "db".into() }).await;
    assert!(direct.is_err(), "ReadAgentMemoryFile followed a symlink");
    let ran = shell(&user, &session, "cat db >/dev/null 2>&1 || echo unreadable", 30).await;
    assert_eq!(ran["stdout"], "unreadable\n", "inside, the link points into the sandbox's own tree: {ran}");

    // No network: a listener on the host's loopback is unreachable.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\n\
         except OSError as error:\n    print('refused', type(error).__name__)\n\
         try:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    print('internet')\nexcept OSError:\n    print('offline')"
    );
    let ran = python(&user, &session, &code, 30).await;
    assert_eq!(ran["stdout"], "refused ConnectionRefusedError\noffline\n", "{ran}");
    assert!(listener.accept().is_err(), "nothing connected to the host's loopback");

    // Kernel interfaces the filter closes.
    let code = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                for name, number in [('ptrace', 101), ('unshare', 272), ('keyctl', 250), ('bpf', 321), ('mount', 165)]:\n    \
                result = libc.syscall(number, 0, 0, 0, 0, 0)\n    print(name, result, os.strerror(ctypes.get_errno()))";
    if std::env::consts::ARCH == "x86_64" {
        let ran = python(&user, &session, code, 30).await;
        let stdout = ran["stdout"].as_str().unwrap();
        for name in ["ptrace", "unshare", "keyctl", "bpf", "mount"] {
            assert!(stdout.contains(&format!("{name} -1 Operation not permitted")), "{ran}");
        }
    }
    let ran = shell(&user, &session, "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status", 30).await;
    let stdout = ran["stdout"].as_str().unwrap();
    assert!(stdout.contains("CapEff:\t0000000000000000") && stdout.contains("CapBnd:\t0000000000000000"), "{ran}");
    assert!(stdout.contains("Seccomp:\t2"), "{ran}");
    assert_eq!(health(&server).await["status"], "ok");
    server.stop().await;
}

#[tokio::test]
async fn bombs_loops_floods_and_leftovers_are_contained() {
    let (server, user, _, session) = setup(|_| {}).await;

    // A fork bomb: the process cap stops it; the server answers meanwhile and afterwards.
    let bomb = shell(&user, &session, "b() { b | b & }; b; sleep 2; echo survived", 4);
    let (ran, during) = tokio::join!(bomb, health(&server));
    assert_eq!(during["status"], "ok");
    assert!(ran["summary"].as_str().unwrap().starts_with("Ran shell code ("), "{ran}");
    let after = shell(&user, &session, "echo fine", 30).await;
    assert_eq!(after["stdout"], "fine\n", "the next execution runs: {after}");

    // At most 64 processes (and bubblewrap's) at once: the rest of the 200 forks fail.
    let code = "import os, time\nstarted = 0\nfor _ in range(200):\n    try:\n        if os.fork() == 0:\n            \
                time.sleep(5)\n            os._exit(0)\n        started += 1\n    except OSError:\n        pass\nprint(started)";
    let ran = python(&user, &session, code, 30).await;
    let count: u64 = ran["stdout"].as_str().unwrap().trim().parse().unwrap_or_else(|_| panic!("{ran}"));
    assert!((10..=65).contains(&count), "{count} processes started: {ran}");

    // A memory bomb fails inside the sandbox.
    let ran = python(&user, &session, "x = bytearray(2 * 1024 ** 3)\nprint('allocated')", 30).await;
    assert_eq!(ran["success"], false, "{ran}");
    assert!(!ran["stdout"].as_str().unwrap().contains("allocated"), "{ran}");
    assert!(ran["stderr"].as_str().unwrap().contains("MemoryError"), "{ran}");

    // Processes that stay under the address-space limit one by one meet the execution's memory
    // cap together: the kernel kills one of them (where a memory group caps it: on a root server
    // here and in CI).
    let code = "import os\nchildren = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n        \
                block = b'x' * (400 * 1024 * 1024)\n        os._exit(0)\n    children.append(pid)\n\
                print(sorted(os.WEXITSTATUS(s) if os.WIFEXITED(s) else -os.WTERMSIG(s) for s in (os.waitpid(p, 0)[1] for p in children)))";
    let limits = health(&server).await["codeExecLimits"].clone();
    if limits.as_array().unwrap().contains(&json!("memory-cgroup")) {
        let ran = python(&user, &session, code, 60).await;
        assert!(ran["stdout"].as_str().unwrap().contains("-9"), "none was killed: {ran}");
    }

    // An infinite loop is stopped at its timeout.
    let ran = shell(&user, &session, "echo looping; while :; do :; done", 1).await;
    assert_eq!(
        (ran["exitCode"].clone(), ran["timedOut"].clone(), ran["success"].clone()),
        (json!(-1), json!(true), json!(false))
    );
    assert_eq!(ran["stdout"], "looping\n");
    assert!(ran["summary"].as_str().unwrap().starts_with("Ran shell code (timed out after 1s, "), "{ran}");

    // 256 MB of output: the first 64 KiB kept, the server's memory far from holding it (other tests
    // share this process, so the bound is half the flood, not zero).
    let before = rss_kib();
    let ran = shell(&user, &session, "head -c 256000000 /dev/zero | tr '\\0' x; echo end >&2", 120).await;
    let grown = rss_kib().saturating_sub(before);
    assert_eq!((ran["exitCode"].clone(), ran["truncated"].clone()), (json!(0), json!(true)), "{}", ran["summary"]);
    assert_eq!(ran["stdout"].as_str().unwrap().len(), 64 * 1024);
    assert_eq!(ran["stderr"], "end\n");
    assert!(grown < 128 * 1024, "the server grew by {grown} KiB reading 256 MB of output");

    // A process left in the background dies with the execution.
    let marker = format!("seed-sandbox-leftover-{}", uuid_like());
    let code = format!(
        "python3 -c 'import sys, time\ntime.sleep(1)\nopen(\"late.txt\", \"w\").write(\"late\")' {marker} &\necho started"
    );
    let ran = shell(&user, &session, &code, 30).await;
    assert_eq!(ran["stdout"], "started\n");
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(&marker));
    assert!(!alive, "a background process outlived its execution");
    // An execution that outlasts the leftover's second: the file never appears.
    let ran = shell(&user, &session, "sleep 1.5; ls", 30).await;
    assert!(!ran["stdout"].as_str().unwrap().contains("late.txt"), "{ran}");
    assert_eq!(health(&server).await["status"], "ok");
    server.stop().await;
}

/// A name no other test process uses.
fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    )
}

#[tokio::test]
async fn a_model_writes_a_file_with_execute_and_reads_it_next_turn() {
    let provider = Provider::start().await;
    let (server, user, _, _) = setup(|_| {}).await;
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent = user
        .call(seed_agents_protocol::generated::CreateAgent { client_request_id: None, definition: definition("Scout") })
        .await
        .unwrap()
        .agent_id;
    let session = user.create_session(&agent, None).await;
    let mut live = user.client.subscribe(format!("sessions/{session}")).start();
    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));
    provider.push(Script::tool_call(
        "e1",
        "call",
        r#"{"tool":"execute","input":{"runtime":"python","code":"print('working on it', flush=True)\nopen('answer.txt','w').write(str(6*7))"}}"#,
    ));
    provider.push(Script::text("Written."));
    provider.push(Script::tool_call("r1", "read", r#"{"address":"~/memory/answer.txt"}"#));
    provider.push(Script::text("It says 42."));
    user.call(say(&session, "compute the answer into a file")).await.unwrap();
    // The running call's output went out live as its activity.
    let tail = loop {
        match tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().unwrap().unwrap() {
            Live::Partial { patch, .. } => {
                if let Some(activity) = patch.activity.filter(|activity| activity.output_tail.is_some()) {
                    break activity;
                }
            }
            _ => continue,
        }
    };
    // (Unbuffered, python may write the line and its newline apart.)
    assert!(tail.output_tail.as_deref().is_some_and(|tail| tail.starts_with("working on it")), "{tail:?}");
    assert_eq!((tail.tool_name.as_deref(), tail.tool_call_id.as_deref()), (Some("call"), Some("e1")));
    user.call(say(&session, "what does the file say?")).await.unwrap();
    let events = user
        .call(GetSession { session_id: session.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .events;
    let results: Vec<(String, Json, Option<String>)> = events
        .into_iter()
        .filter_map(|event| match event.event {
            SessionEventPayload::ToolResultEvent(result) => Some((
                result.name,
                result.output.map(|output| serde_json::to_value(&output).unwrap()).unwrap_or(Json::Null),
                result.error,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    let (_, ran, error) = &results[0];
    assert_eq!(error, &None);
    assert_eq!(ran["changedFiles"], json!([{"path": "answer.txt", "change": "added"}]), "{ran}");
    let (name, read, error) = &results[1];
    assert_eq!((name.as_str(), error), ("read", &None));
    assert!(serde_json::to_string(read).unwrap().contains("42"), "{read}");
    // The model was told execute is there (the prompt lists what it can call).
    let requests = provider.requests();
    assert!(requests[0].body.to_string().contains("execute"), "{}", requests[0].body);
    server.stop().await;
}
