//! The real `seed-agents-server` binary as a child process, for the server's process tests:
//! started on a loopback port over a data directory, waited for until `/api/health` answers,
//! stopped with SIGKILL or SIGTERM, and killed and reaped on drop so a failing test leaves
//! nothing behind.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to answer `/api/health` after a start: a bound for a hung start,
/// not a measure (the tests run side by side on machines that may be busy).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start one server.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The server binary (`env!("CARGO_BIN_EXE_seed-agents-server")` in the server's tests).
    pub binary: PathBuf,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// The port; `None` picks a free one (retrying if it is taken before the server binds it).
    pub port: Option<u16>,
    /// More flags.
    pub args: Vec<String>,
    /// `RUST_LOG`.
    pub log_level: &'static str,
}

impl Launch {
    pub fn new(binary: impl Into<PathBuf>, data_dir: &Path, log: &Path) -> Self {
        Self {
            binary: binary.into(),
            data_dir: data_dir.to_owned(),
            log: log.to_owned(),
            port: None,
            args: Vec::new(),
            log_level: "warn",
        }
    }

    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn log_level(mut self, level: &'static str) -> Self {
        self.log_level = level;
        self
    }
}

/// A running server binary.
pub struct ServerProcess {
    child: Option<Child>,
    pub url: String,
    pub port: u16,
    pub log: PathBuf,
}

impl ServerProcess {
    /// Starts the binary and waits until it answers `/api/health`.
    pub async fn start(launch: &Launch) -> Self {
        let mut last_failure = String::new();
        for _ in 0..if launch.port.is_some() { 1 } else { 3 } {
            let port = launch.port.unwrap_or_else(free_port);
            let child = Command::new(&launch.binary)
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--data-dir")
                .arg(&launch.data_dir)
                // Nothing leaves loopback; a test with a fake Hypermedia server passes its own.
                .env("SEED_AGENTS_HM_SERVER_URL", "http://127.0.0.1:9")
                .args(&launch.args)
                .env_remove("SEED_AGENTS_SECRET_KEY")
                .env_remove("SEED_AGENTS_LISTEN")
                .env_remove("SEED_AGENTS_DATA_DIR")
                .env_remove("SEED_AGENTS_LOG_FORMAT")
                .env("RUST_LOG", launch.log_level)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(std::fs::File::create(&launch.log).unwrap()))
                .spawn()
                .unwrap_or_else(|error| panic!("cannot spawn the server binary: {error}"));
            let mut server =
                Self { child: Some(child), url: format!("http://127.0.0.1:{port}"), port, log: launch.log.clone() };
            match server.wait_healthy().await {
                Ok(()) => return server,
                Err(failure) => last_failure = failure,
            }
        }
        panic!("the server did not start: {last_failure}");
    }

    async fn wait_healthy(&mut self) -> Result<(), String> {
        let http = seed_agents_sdk::default_http_client().unwrap();
        let health = format!("{}/api/health", self.url);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(format!("it exited with {status}; log:\n{}", self.log_text()));
            }
            if let Ok(response) = http.get(&health).timeout(Duration::from_secs(2)).send().await
                && response.status().as_u16() == 200
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("no healthy answer within {START_TIMEOUT:?}; log:\n{}", self.log_text()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|error| format!("(no log: {error})"))
    }

    /// SIGKILL (what `Child::kill` sends on unix), then reap.
    pub fn kill(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap()
    }

    /// SIGTERM, then wait (bounded) for the graceful shutdown to finish.
    pub async fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let sent = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
        assert!(sent.success(), "kill -TERM {} failed: {sent}", child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not stop within 10 s of SIGTERM; log:\n{}", self.log_text());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Resident memory of a process now, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
