//! The real `seed-agents-server` binary's lifecycle: it serves with its defaults overridden by
//! flags, stops cleanly on SIGTERM (exit 0, database closed), and refuses a database written by a
//! newer server with a message that names the file.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::process::free_port;
use crate::support::wait;

fn spawn(data_dir: &Path, port: u16) -> Child {
    Command::new(crate::SERVER_BIN)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(data_dir)
        .env("RUST_LOG", "info")
        .env_remove("SEED_AGENTS_SECRET_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn wait_healthy(port: u16) {
    let http = seed_agents_sdk::default_http_client().unwrap();
    let health = format!("http://127.0.0.1:{port}/api/health");
    wait::until("the server answers /api/health", || async {
        http.get(&health).send().await.is_ok_and(|response| response.status() == 200)
    })
    .await;
}

fn wait_exit(child: &mut Child) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status, stderr)
}

#[tokio::test]
async fn sigterm_stops_cleanly_and_a_newer_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = spawn(dir.path(), port);
    wait_healthy(port).await;
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let (status, stderr) = wait_exit(&mut child);
    assert!(status.success(), "exit status {status:?}; stderr:\n{stderr}");
    assert!(stderr.contains("shutting down") && stderr.contains("stopped"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "no colour codes in a log that is not a terminal: {stderr:?}");
    let database = dir.path().join("seed-agents.sqlite");
    // Closed cleanly: the write-ahead log was checkpointed and removed with the last connection.
    assert!(!dir.path().join("seed-agents.sqlite-wal").exists(), "WAL left behind after a clean stop");
    let key = dir.path().join("secret.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    let conn = rusqlite::Connection::open(&database).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let mut child = spawn(dir.path(), free_port());
    let (status, stderr) = wait_exit(&mut child);
    assert!(!status.success());
    assert!(stderr.contains("schema version 999, newer than this server"), "{stderr}");
    assert!(stderr.contains("seed-agents.sqlite"), "{stderr}");
}
