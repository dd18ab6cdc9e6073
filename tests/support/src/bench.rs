//! Child-process servers and what `/proc` says about them, for the server's benchmarks.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Linux's `USER_HZ`: the unit of the CPU times in `/proc/<pid>/stat`.
pub const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// A server running as a child process; killed when dropped.
pub struct Server {
    pub name: &'static str,
    pub addr: SocketAddr,
    child: Child,
}

impl Server {
    pub fn spawn(name: &'static str, (mut command, addr): (Command, SocketAddr)) -> Self {
        let child = command.stdin(Stdio::null()).stdout(Stdio::null()).spawn().expect("the server binary starts");
        Server { name, addr, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://{}/api/message", self.addr)
    }

    /// Waits until the server accepts connections (panics if it exits or takes over 30 s).
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_err() {
            assert!(Instant::now() < deadline, "{} did not start listening on {}", self.name, self.addr);
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited: {status}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server `binary` (`env!("CARGO_BIN_EXE_seed-agents-server")` in a bench) on a free
/// loopback port, keeping its data in `data_dir`.
///
/// `BENCH_SERVER_BIN` names another build of the server to drive instead (an older commit's
/// binary, say), so an A/B comparison runs both under the same load generator in one session.
pub fn server_command(binary: &str, data_dir: &Path) -> (Command, SocketAddr) {
    let addr = free_addr();
    let binary = std::env::var_os("BENCH_SERVER_BIN").map_or_else(|| binary.into(), std::path::PathBuf::from);
    let mut command = Command::new(binary);
    command
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--listen")
        .arg(addr.to_string())
        .env("RUST_LOG", "warn")
        .env("SEED_AGENTS_HM_SERVER_URL", "http://127.0.0.1:9");
    (command, addr)
}

/// A loopback address nobody listens on right now.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("a free loopback port")
}

/// Resident memory of a process, in MiB.
pub struct Memory {
    pub rss: f64,
    pub peak: f64,
    /// The anonymous part of `rss` (heap and stacks; the rest is mapped files and shared memory).
    pub anon: f64,
}

impl Memory {
    pub fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map_or(f64::NAN, |kib| kib / 1024.0)
        };
        Memory { rss: field("VmRSS:"), peak: field("VmHWM:"), anon: field("RssAnon:") }
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VmRSS {:.1} MiB, VmHWM {:.1} MiB", self.rss, self.peak)
    }
}

/// User plus system CPU time of a process (all its threads, living or not), in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`, which may hold spaces: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |index: usize| fields.get(index).and_then(|value| value.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

/// The machine's load averages (`/proc/loadavg`): other work moves every figure a bench prints.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "unknown".to_owned(), |text| text.trim().to_owned())
}
