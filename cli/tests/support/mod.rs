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
    port: u16,
    args: Vec<String>,
}

impl Server {
    /// Starts the binary on a free loopback port over a fresh data directory.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// [`Server::start`] with more arguments for the server (`--provider-url openai=…`).
    pub fn start_with(args: &[String]) -> Server {
        let mut dir = tempfile::tempdir().expect("temp dir");
        let mut failures = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let child = spawn_server(dir.path(), port, args);
            let mut server = Server { child, url: format!("http://127.0.0.1:{port}"), dir, port, args: args.to_vec() };
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

    /// Kills the server (connections drop) and waits until it has exited.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again, on the same port over the same data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn_server(self.dir.path(), self.port, &self.args);
        if let Err(failure) = self.wait_listening(self.port) {
            panic!("the server did not restart: {failure}");
        }
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

/// The lines of `path` once it has at least `count` (a file another process writes), or a panic
/// after a generous while (the deadline only keeps a broken test from hanging).
pub fn wait_for_lines(path: &Path, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(Instant::now() < deadline, "{} has {} lines, not {count}: {text}", path.display(), lines.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server binary on `port` over `dir`'s data directory, logging to `dir/server.log`.
fn spawn_server(dir: &Path, port: u16, args: &[String]) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).expect("log file");
    Command::new(server_binary())
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env_remove("SEED_AGENTS_SECRET_KEY")
        .env_remove("SEED_AGENTS_LISTEN")
        .env_remove("SEED_AGENTS_DATA_DIR")
        .env_remove("SEED_AGENTS_PROVIDER_URLS")
        .env("RUST_LOG", "warn")
        .env("SEED_AGENTS_HM_SERVER_URL", "http://127.0.0.1:9")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("the server binary starts")
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
        Cli::with(Command::new(CLI), home)
    }

    /// `sh -c script` with the CLI first on `PATH` (as `seed-agents`) and the environment of
    /// [`Cli::new`], run in `home`: for examples written as shell lines.
    pub fn shell(home: &Path, script: &str) -> Cli {
        let bin = Path::new(CLI).parent().expect("the CLI binary has a directory");
        let path = std::env::join_paths(
            std::iter::once(bin.to_path_buf())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH");
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).env("PATH", path).current_dir(home);
        Cli::with(command, home)
    }

    fn with(mut command: Command, home: &Path) -> Cli {
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

    /// Runs in `dir`.
    pub fn current_dir(mut self, dir: &Path) -> Cli {
        self.command.current_dir(dir);
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
