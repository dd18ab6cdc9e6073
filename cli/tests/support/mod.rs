//! The real `seed-agents-server` binary on a loopback port with a temporary data directory, and
//! the `seed-agents` binary run against it with a clean environment.
//!
//! Cargo tells a test the path of its own package's binaries only. The server binary is found
//! beside the CLI's (`cargo test --workspace` builds both before running any test); when it is
//! missing (`cargo test -p seed-agents-cli` alone), it is built first with this workspace's
//! cargo. `SEED_AGENTS_SERVER_BIN` names another one.

#![allow(dead_code)] // not every test uses every helper

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The CLI under test.
pub const CLI: &str = env!("CARGO_BIN_EXE_seed-agents");

/// How long the server may take to accept connections after a start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The server binary (built if missing).
pub fn server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os("SEED_AGENTS_SERVER_BIN") {
            return PathBuf::from(path);
        }
        let profile_dir = Path::new(CLI).parent().expect("the CLI binary has a directory");
        let binary = profile_dir.join(format!("seed-agents-server{}", std::env::consts::EXE_SUFFIX));
        if !binary.exists() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
            let mut build = Command::new(cargo);
            build.args(["build", "-p", "seed-agents-server", "--bin", "seed-agents-server", "--manifest-path"]);
            build.arg(&manifest);
            if profile_dir.ends_with("release") {
                build.arg("--release");
            }
            let status = build.status().expect("cargo runs");
            assert!(status.success(), "cargo build -p seed-agents-server failed: {status}");
        }
        assert!(binary.exists(), "no server binary at {}", binary.display());
        binary
    })
}

/// A running server binary, killed and reaped on drop.
pub struct Server {
    child: Child,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts the binary on a free loopback port over a fresh data directory.
    pub fn start() -> Server {
        let mut dir = tempfile::tempdir().expect("temp dir");
        let mut failures = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
            let child = Command::new(server_binary())
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .env_remove("SEED_AGENTS_SECRET_KEY")
                .env_remove("SEED_AGENTS_LISTEN")
                .env_remove("SEED_AGENTS_DATA_DIR")
                .env("RUST_LOG", "warn")
                .env("SEED_AGENTS_HM_SERVER_URL", "http://127.0.0.1:9")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("the server binary starts");
            let mut server = Server { child, url: format!("http://127.0.0.1:{port}"), dir };
            match server.wait_listening(port) {
                Ok(()) => return server,
                Err(failure) => {
                    failures.push(failure);
                    dir = server.stop();
                }
            }
        }
        panic!("the server did not start: {failures:?}");
    }

    fn wait_listening(&mut self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Err(format!("it exited with {status}: {}", self.log()));
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not listening after {START_TIMEOUT:?}: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Kills the server and gives its directory back.
    fn stop(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.dir, dir)
    }

    /// The CLI pointed at this server, with `key` as its key file.
    pub fn cli(&self, key: &Path) -> Cli {
        Cli::new(self.dir.path()).env("SEED_AGENTS_SERVER", &self.url).env("SEED_AGENTS_KEY_FILE", key)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// One run of the CLI: arguments, environment and stdin.
pub struct Cli {
    command: Command,
    stdin: Option<Vec<u8>>,
}

impl Cli {
    /// The CLI with none of the caller's `SEED_AGENTS_*` settings and its config directory in
    /// `home`, so the developer's own key is never read.
    pub fn new(home: &Path) -> Cli {
        let mut command = Command::new(CLI);
        for var in ["SEED_AGENTS_SERVER", "SEED_AGENTS_KEY_FILE", "SEED_AGENTS_ACCOUNT"] {
            command.env_remove(var);
        }
        command.env("XDG_CONFIG_HOME", home.join("config")).env("HOME", home);
        Cli { command, stdin: None }
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Cli {
        self.command.env(key, value);
        self
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Cli {
        self.stdin = Some(bytes.into());
        self
    }

    /// Runs with `args` and waits.
    pub fn run<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        self.command.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = self.command.spawn().expect("the CLI starts");
        if let Some(bytes) = self.stdin.take() {
            child.stdin.take().expect("stdin").write_all(&bytes).expect("write stdin");
        }
        Run(child.wait_with_output().expect("the CLI ends"))
    }

    /// Starts with `args` and returns the running child (stdout piped).
    pub fn spawn<I, S>(mut self, args: I) -> Child
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
        self.command.spawn().expect("the CLI starts")
    }
}

/// A finished run.
pub struct Run(pub Output);

impl Run {
    pub fn code(&self) -> i32 {
        self.0.status.code().expect("exited, not signalled")
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }

    /// Asserts success and parses stdout as one JSON value.
    pub fn json(&self) -> serde_json::Value {
        self.expect_code(0);
        serde_json::from_slice(&self.0.stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {}", self.stdout()))
    }

    /// Asserts the exit code, printing both streams when it differs.
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code(),
            code,
            "exit code {} instead of {code}\nstdout: {}\nstderr: {}",
            self.code(),
            self.stdout(),
            self.stderr()
        );
        self
    }
}
