//! The code sandbox (docs/sandbox.md): runs a program (python or shell code) in a fresh
//! bubblewrap sandbox per execution, with the agent's memory folder as `/workspace`.
//!
//! Each execution gets its own user, network, PID, mount, IPC, UTS and cgroup namespaces, no
//! capabilities, a seccomp deny list ([`seccomp`]), read-only system folders, a private `/tmp`,
//! no network at all, rlimits set inside the sandbox (CPU seconds, address space, file size, open
//! files, processes) and, where the server can write them, per-execution `pids` and `memory`
//! control groups ([`cgroup`]): those are what stop a fork bomb when the server runs as root,
//! since the kernel does not enforce `RLIMIT_NPROC` for root. A wall-clock timeout kills
//! bubblewrap, and with it the sandbox's PID namespace: every process the code left behind dies
//! with the namespace's init, at the timeout or when the program exits.
//!
//! A server running as root runs bubblewrap as root: the sandbox's user then maps to root, which
//! has no capabilities in the sandbox but passes file permission checks as root, so the
//! machine-wide parts of `/proc` (`/proc/sys` first: `kernel.core_pattern` would run a program as
//! root on the host) are bound read-only or hidden, as container runtimes do for root without
//! capabilities. Running bubblewrap as an unprivileged user instead (`setpriv`) was measured and
//! set aside: bubblewrap resolves bind sources as that user, so an interpreter under `/root` (a
//! version manager's) cannot be bound, and the workspace would have to change owner.
//!
//! [`Sandbox::new`] probes once per process, by running a trivial program in a real sandbox (and
//! `python3 -c pass` for the python runtime), and [`Sandbox::availability`] reports the result.
//! [`Sandbox::run`] queues executions behind a server-wide and a per-account limit, reads both
//! output streams to the end while keeping only the first 64 KiB of each, and reports the live
//! tail at most every 250 ms. It knows nothing of agents or tools: a caller hands it a runtime,
//! the code and a workspace.

mod cgroup;
mod seccomp;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use cgroup::{Caps, Cgroups, Controller};

/// Bytes of each output stream kept (the rest is read and dropped).
pub(crate) const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Characters of recent combined output in a progress report.
pub(crate) const TAIL_CHARS: usize = 2000;
/// The shortest time between two progress reports.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// Where the workspace is inside the sandbox (also the working directory).
pub(crate) const WORKSPACE: &str = "/workspace";
/// Where the program's file is inside the sandbox (read-only).
const PROGRAM_DIR: &str = "/run/seed-sandbox";
/// Address space of each process, and memory of the whole execution where a group caps it.
pub(crate) const MEMORY_BYTES: u64 = 512 << 20;
/// Processes of one execution.
pub(crate) const PROCESSES: u64 = 64;
/// Open files of each process.
pub(crate) const OPEN_FILES: u64 = 256;
/// The largest file a process may write.
pub(crate) const FILE_BYTES: u64 = 64 << 20;
/// Size of the private `/tmp`.
pub(crate) const TMP_BYTES: u64 = 64 << 20;
/// The user and group the code runs as inside its namespace.
const SANDBOX_ID: &str = "1000";
/// One execution's control groups: its processes (and bubblewrap's two), its memory and `/tmp`.
const CAPS: Caps = Caps { pids: PROCESSES + 4, memory_bytes: MEMORY_BYTES + TMP_BYTES };
/// The signal the wrapper ends itself with when it cannot join a control group (`SIGUSR1`).
const JOIN_FAILED: i32 = 10;
/// Parts of `/proc` that act on the whole machine, bound read-only over the sandbox's own.
const READ_ONLY_PROC: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/acpi",
    "/proc/asound",
    "/proc/scsi",
];
/// Parts of `/proc` that show the machine's internals, hidden behind `/dev/null`.
const HIDDEN_PROC: &[&str] =
    &["/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug"];
/// What `PATH` holds inside, after the python interpreter's own folder.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How the server was configured to run code.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Whether code runs at all (`--exec-backend namespaces`).
    pub enabled: bool,
    /// Executions at once, server-wide.
    pub concurrency: usize,
    /// Executions at once for one account.
    pub per_account: usize,
}

/// A language the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Runtime {
    /// `python3 <program>`.
    Python,
    /// `/bin/sh <program>`.
    Shell,
}

impl Runtime {
    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Python => "python",
            Runtime::Shell => "shell",
        }
    }

    /// The runtime called `name`.
    pub fn named(name: &str) -> Option<Runtime> {
        [Runtime::Python, Runtime::Shell].into_iter().find(|runtime| runtime.name() == name)
    }
}

/// Whether code runs here, and if not why.
#[derive(Debug, Clone)]
pub struct Availability {
    /// Whether executions can start.
    pub available: bool,
    /// A stable code for why not (`config-disabled`, `unsupported-platform`, `bwrap-missing`,
    /// `prlimit-missing`, `no-process-limit`, `runtime-error`).
    pub reason_code: Option<&'static str>,
    /// Why not, for people.
    pub reason: Option<String>,
    /// The runtimes that ran in the probe.
    pub runtimes: Vec<Runtime>,
    /// The limits in force, by name (`seccomp`, `rlimits`, `pids-cgroup`, `memory-cgroup`).
    pub limits: Vec<&'static str>,
}

impl Availability {
    fn unavailable(code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            available: false,
            reason_code: Some(code),
            reason: Some(reason.into()),
            runtimes: Vec::new(),
            limits: Vec::new(),
        }
    }
}

/// What the probe found: the paths and groups every execution uses.
#[derive(Debug)]
struct Host {
    bwrap: PathBuf,
    prlimit: PathBuf,
    /// The python interpreter and the folders it needs (bound read-only), when it runs.
    python: Option<Python>,
    /// The seccomp program, as bubblewrap reads it.
    seccomp: Vec<u8>,
    cgroups: Cgroups,
}

#[derive(Debug, Clone)]
struct Python {
    executable: PathBuf,
    binds: Vec<PathBuf>,
}

/// One execution.
#[derive(Debug)]
pub struct ExecRequest {
    /// Who it counts against for the per-account limit.
    pub account_id: String,
    pub runtime: Runtime,
    /// The program's text.
    pub code: String,
    /// The folder bound read-write at `/workspace` (created when missing).
    pub workspace: PathBuf,
    /// Wall-clock limit; the sandbox is killed when it passes.
    pub timeout: Duration,
    /// Receives the live tail of combined output, at most every [`PROGRESS_INTERVAL`] (a full
    /// channel drops a report rather than wait).
    pub progress: Option<mpsc::Sender<Progress>>,
}

/// A live report while an execution runs.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The last [`TAIL_CHARS`] characters of stdout and stderr, as they arrived.
    pub output_tail: String,
}

/// How an execution ended.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    /// The program's exit code (128 + n when signal n ended it inside the sandbox); `None` when
    /// the sandbox itself was killed.
    pub exit_code: Option<i32>,
    /// The signal that ended the sandbox (the timeout's `SIGKILL`).
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// The first [`MAX_OUTPUT_BYTES`] of stdout (invalid UTF-8 replaced).
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
}

/// Why an execution did not run to an outcome.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SandboxError {
    pub code: SandboxErrorCode,
    pub message: String,
}

/// The kind of a [`SandboxError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxErrorCode {
    /// Code does not run on this server ([`Availability::reason`] says why).
    Unavailable,
    /// The runtime did not run in the probe.
    RuntimeUnavailable,
    /// The sandbox could not be set up or started.
    Start,
    /// The sandbox started but could not be waited for or read.
    Failed,
}

impl SandboxErrorCode {
    /// A stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxErrorCode::Unavailable => "unavailable",
            SandboxErrorCode::RuntimeUnavailable => "runtime-unavailable",
            SandboxErrorCode::Start => "start-failed",
            SandboxErrorCode::Failed => "execution-failed",
        }
    }
}

fn error(code: SandboxErrorCode, message: impl Into<String>) -> SandboxError {
    SandboxError { code, message: message.into() }
}

/// The sandbox: the probe's findings and the execution queues.
#[derive(Debug)]
pub struct Sandbox {
    availability: Availability,
    host: Option<Arc<Host>>,
    global: Arc<Semaphore>,
    per_account: usize,
    accounts: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The probe's result, once per process (the host does not change under a running server).
static PROBED: OnceLock<(Availability, Option<Arc<Host>>)> = OnceLock::new();

impl Sandbox {
    /// The sandbox `settings` describe, probed (once per process) when enabled.
    pub fn new(settings: Settings) -> Self {
        let (availability, host) = if settings.enabled {
            PROBED.get_or_init(probe).clone()
        } else {
            (Availability::unavailable("config-disabled", "Code execution is disabled by configuration"), None)
        };
        Self {
            availability,
            host,
            global: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            per_account: settings.per_account.max(1),
            accounts: Mutex::default(),
        }
    }

    /// Whether code runs here, with which runtimes and limits.
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// Runs `request` in a fresh sandbox once the queues let it start.
    pub async fn run(&self, request: ExecRequest) -> Result<ExecOutcome, SandboxError> {
        let Some(host) = self.host.clone().filter(|_| self.availability.available) else {
            let reason = self.availability.reason.clone().unwrap_or_default();
            return Err(error(SandboxErrorCode::Unavailable, reason));
        };
        if !self.availability.runtimes.contains(&request.runtime) {
            return Err(error(
                SandboxErrorCode::RuntimeUnavailable,
                format!("The {} runtime does not run on this server", request.runtime.name()),
            ));
        }
        let outcome = {
            let _permits = self.admit(&request.account_id).await;
            execute(&host, request).await
        };
        self.forget_idle_accounts();
        outcome
    }

    /// Waits for the account's turn, then for a server-wide slot (in that order, so an account's
    /// queue holds no server-wide slot while it waits).
    async fn admit(&self, account_id: &str) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
        let account = {
            let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
            accounts.entry(account_id.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.per_account))).clone()
        };
        // Neither semaphore is ever closed.
        let Ok(account) = account.acquire_owned().await else { unreachable!("the account queue is never closed") };
        let Ok(global) = self.global.clone().acquire_owned().await else {
            unreachable!("the server queue is never closed")
        };
        (account, global)
    }

    /// Drops the queues no execution holds or waits on.
    fn forget_idle_accounts(&self) {
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        accounts.retain(|_, queue| Arc::strong_count(queue) > 1 || queue.available_permits() < self.per_account);
    }
}

/// Finds bubblewrap, prlimit, python and the control groups, then runs a trivial program in a
/// real sandbox (and `python3 -c pass`).
fn probe() -> (Availability, Option<Arc<Host>>) {
    if !cfg!(target_os = "linux") {
        return (Availability::unavailable("unsupported-platform", "The code sandbox needs Linux"), None);
    }
    let Some(bwrap) = on_path("bwrap") else {
        return (Availability::unavailable("bwrap-missing", "bubblewrap (bwrap) is not installed on this host"), None);
    };
    let Some(prlimit) = on_path("prlimit") else {
        return (
            Availability::unavailable("prlimit-missing", "prlimit (util-linux) is not installed on this host"),
            None,
        );
    };
    let seccomp = match seccomp::program() {
        Ok(program) => program,
        Err(message) => return (Availability::unavailable("unsupported-platform", message), None),
    };
    let cgroups = Cgroups::discover();
    let root =
        std::fs::metadata("/proc/self").map(|meta| std::os::unix::fs::MetadataExt::uid(&meta) == 0).unwrap_or(false);
    if root && !cgroups.has(Controller::Pids) {
        return (
            Availability::unavailable(
                "no-process-limit",
                "The server runs as root and cannot create a pids control group, so nothing would stop a fork bomb",
            ),
            None,
        );
    }
    let mut host = Host { bwrap, prlimit, python: find_python(), seccomp, cgroups };
    let mut limits = vec!["seccomp", "rlimits"];
    if host.cgroups.has(Controller::Pids) {
        limits.push("pids-cgroup");
    }
    if host.cgroups.has(Controller::Memory) {
        limits.push("memory-cgroup");
    }
    let workspace = match tempfile::Builder::new().prefix("seed-sandbox-probe-").tempdir() {
        Ok(dir) => dir,
        Err(error) => return (Availability::unavailable("runtime-error", format!("probe folder: {error}")), None),
    };
    let trial = |host: &Host, runtime: Runtime, code: &str| -> Result<String, String> {
        let (group, procs) = host.cgroups.create(&format!("probe-{}", uuid::Uuid::new_v4()), CAPS)?;
        let prepared = prepare_in(host, runtime, code, workspace.path(), Duration::from_secs(10), &procs)?;
        let output = std::process::Command::new(&prepared.argv[0])
            .args(&prepared.argv[1..])
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("cannot start bwrap: {error}"))?;
        group.remove_blocking();
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!("{} ({})", String::from_utf8_lossy(&output.stderr).trim(), output.status))
        }
    };
    match trial(&host, Runtime::Shell, "echo sandboxed") {
        Ok(out) if out.trim() == "sandboxed" => {}
        Ok(out) => return (Availability::unavailable("runtime-error", format!("the probe printed {out:?}")), None),
        Err(message) => {
            return (Availability::unavailable("runtime-error", format!("the sandbox did not run: {message}")), None);
        }
    }
    let mut runtimes = vec![Runtime::Shell];
    if host.python.is_some() {
        match trial(&host, Runtime::Python, "pass") {
            Ok(_) => runtimes.insert(0, Runtime::Python),
            Err(message) => {
                tracing::warn!(%message, "python does not run in the code sandbox; only shell is offered");
                host.python = None;
            }
        }
    }
    let availability = Availability { available: true, reason_code: None, reason: None, runtimes, limits };
    (availability, Some(Arc::new(host)))
}

/// The first executable `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|meta| {
            meta.is_file() && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0
        })
    })
}

/// The real python interpreter behind `python3` on `PATH` (a version manager's shim resolves to
/// it) and the folders outside `/usr` it needs.
fn find_python() -> Option<Python> {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable); print(sys.prefix); print(sys.base_prefix)"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success())?;
    let text = String::from_utf8(output.stdout).ok()?;
    let mut lines = text.lines().map(PathBuf::from);
    let executable = std::fs::canonicalize(lines.next()?).ok()?;
    let mut binds: Vec<PathBuf> = Vec::new();
    for dir in lines.chain(executable.parent().map(Path::to_path_buf)) {
        let Ok(dir) = std::fs::canonicalize(&dir) else { continue };
        let covered = |outer: &Path| dir.starts_with(outer);
        if !covered(Path::new("/usr")) && !binds.iter().any(|bound| covered(bound)) && dir != Path::new("/") {
            binds.retain(|bound| !bound.starts_with(&dir));
            binds.push(dir);
        }
    }
    Some(Python { executable, binds })
}

/// An execution's command line and the files it needs (removed on drop).
struct Prepared {
    argv: Vec<String>,
    _files: tempfile::TempDir,
}

/// Writes the program and the seccomp filter to a private folder and builds the command line:
/// `/bin/sh` joins the control groups (their `cgroup.procs` files) and `exec`s bubblewrap with
/// the filter on fd 3, and inside, `prlimit` sets the rlimits and `exec`s the runtime on the
/// program.
fn prepare_in(
    host: &Host,
    runtime: Runtime,
    code: &str,
    workspace: &Path,
    timeout: Duration,
    cgroup_procs: &[PathBuf],
) -> Result<Prepared, String> {
    let files = tempfile::Builder::new()
        .prefix("seed-sandbox-")
        .tempdir()
        .map_err(|error| format!("temporary folder: {error}"))?;
    let program = files.path().join("program");
    std::fs::write(&program, code).map_err(|error| format!("program file: {error}"))?;
    let filter = files.path().join("seccomp.bpf");
    std::fs::write(&filter, &host.seccomp).map_err(|error| format!("seccomp file: {error}"))?;
    let text = |path: &Path| path.to_string_lossy().into_owned();
    let mut argv: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        // $1: the filter; then the groups' cgroup.procs files up to `--`; then bwrap's argv.
        "f=$1; shift; while [ \"$1\" != -- ]; do echo $$ > \"$1\" || kill -s USR1 $$; shift; done; shift; exec \"$@\" 3<\"$f\""
            .into(),
        "seed-sandbox".into(),
        text(&filter),
    ];
    argv.extend(cgroup_procs.iter().map(|path| text(path)));
    argv.push("--".into());
    argv.push(text(&host.bwrap));
    argv.extend(bwrap_args(host, runtime, workspace, timeout, &text(&program)));
    Ok(Prepared { argv, _files: files })
}

/// bubblewrap's arguments: namespaces, mounts, environment, then the limited runtime.
fn bwrap_args(host: &Host, runtime: Runtime, workspace: &Path, timeout: Duration, program: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        SANDBOX_ID,
        "--gid",
        SANDBOX_ID,
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--seccomp",
        "3",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .map(str::to_owned)
    .to_vec();
    // The top-level folders a merged /usr links into it; on other systems, read-only copies.
    for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
        match std::fs::symlink_metadata(top) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(top) {
                    args.extend(["--symlink".into(), target.to_string_lossy().into_owned(), top.into()]);
                }
            }
            Ok(meta) if meta.is_dir() => args.extend(["--ro-bind".into(), top.into(), top.into()]),
            _ => {}
        }
    }
    // What the dynamic loader and a few tools read from /etc; nothing else of it.
    for file in ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/alternatives", "/etc/localtime"] {
        if Path::new(file).exists() {
            args.extend(["--ro-bind".into(), file.into(), file.into()]);
        }
    }
    let mut path = PATH.to_owned();
    if let Some(python) = &host.python {
        for dir in &python.binds {
            let dir = dir.to_string_lossy().into_owned();
            args.extend(["--ro-bind".into(), dir.clone(), dir]);
        }
        if let Some(bin) = python.executable.parent() {
            path = format!("{}:{path}", bin.to_string_lossy());
        }
    }
    args.extend(["--proc".into(), "/proc".into()]);
    // For a server running as root the sandbox's user is root to the kernel's file permission
    // checks (without capabilities): the kernel-wide files of /proc are made read-only or hidden,
    // as container runtimes do (docs/sandbox.md).
    for dir in READ_ONLY_PROC {
        if Path::new(dir).exists() {
            args.extend(["--ro-bind".into(), (*dir).into(), (*dir).into()]);
        }
    }
    for file in HIDDEN_PROC {
        if Path::new(file).exists() {
            args.extend(["--ro-bind".into(), "/dev/null".into(), (*file).into()]);
        }
    }
    args.extend(
        [
            "--dev",
            "/dev",
            "--size",
            &TMP_BYTES.to_string(),
            "--tmpfs",
            "/tmp",
            "--bind",
            &workspace.to_string_lossy(),
            WORKSPACE,
            "--ro-bind",
            program,
            &format!("{PROGRAM_DIR}/program"),
            "--chdir",
            WORKSPACE,
            "--setenv",
            "PATH",
            &path,
            "--setenv",
            "HOME",
            WORKSPACE,
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONDONTWRITEBYTECODE",
            "1",
            "--setenv",
            "PYTHONUNBUFFERED",
            "1",
            "--",
        ]
        .map(str::to_owned),
    );
    let cpu_seconds = timeout.as_secs() + 1;
    args.extend([
        host.prlimit.to_string_lossy().into_owned(),
        format!("--cpu={cpu_seconds}"),
        format!("--as={MEMORY_BYTES}"),
        format!("--fsize={FILE_BYTES}"),
        format!("--nofile={OPEN_FILES}"),
        format!("--nproc={PROCESSES}"),
        "--core=0".into(),
        "--".into(),
    ]);
    match (runtime, &host.python) {
        (Runtime::Python, Some(python)) => args.push(python.executable.to_string_lossy().into_owned()),
        _ => args.push("/bin/sh".into()),
    }
    args.push(format!("{PROGRAM_DIR}/program"));
    args
}

/// Output kept while it streams: the head of each stream and the combined tail.
#[derive(Debug, Default)]
struct Captured {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    /// The last bytes of combined output (trimmed to about 4 × [`TAIL_CHARS`] bytes).
    tail: Vec<u8>,
    /// Whether output arrived since the last progress report.
    fresh: bool,
    /// When the last progress report went out.
    reported: Option<Instant>,
}

/// Runs one admitted execution.
async fn execute(host: &Host, request: ExecRequest) -> Result<ExecOutcome, SandboxError> {
    let started = Instant::now();
    std::fs::create_dir_all(&request.workspace)
        .map_err(|error| error_start(format!("workspace {}: {error}", request.workspace.display())))?;
    let id = uuid::Uuid::new_v4().to_string();
    let (group, procs) =
        host.cgroups.create(&id, CAPS).map_err(|message| error_start(format!("control group: {message}")))?;
    let prepared = prepare_in(host, request.runtime, &request.code, &request.workspace, request.timeout, &procs)
        .map_err(error_start)?;
    let mut child = tokio::process::Command::new(&prepared.argv[0])
        .args(&prepared.argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| error_start(format!("cannot start bwrap: {error}")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(error(SandboxErrorCode::Failed, "the sandbox's output pipes are missing"));
    };
    let captured = Mutex::new(Captured::default());
    let (status, read) = {
        let waited = async {
            match tokio::time::timeout(request.timeout, child.wait()).await {
                Ok(status) => status.map(|status| (status, false)),
                Err(_) => {
                    // SIGKILL to bubblewrap; its init has it as parent-death signal, and the PID
                    // namespace dies with its init.
                    let _ = child.start_kill();
                    child.wait().await.map(|status| (status, true))
                }
            }
        };
        let reading = async {
            let progress = request.progress.as_ref();
            let (out, err) =
                tokio::join!(read(stdout, &captured, false, progress), read(stderr, &captured, true, progress));
            out.and(err)
        };
        let run = async { tokio::join!(waited, reading) };
        tokio::pin!(run);
        let mut ticker = tokio::time::interval(PROGRESS_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                done = &mut run => break done,
                _ = ticker.tick(), if request.progress.is_some() => {
                    report(&mut captured.lock().unwrap_or_else(PoisonError::into_inner), request.progress.as_ref());
                }
            }
        }
    };
    group.remove().await;
    let (status, timed_out) = status.map_err(|error| error_failed(format!("waiting for the sandbox: {error}")))?;
    read.map_err(|error| error_failed(format!("reading the sandbox's output: {error}")))?;
    if status.signal() == Some(JOIN_FAILED) {
        // The wrapper could not join a control group (bubblewrap never ran).
        let captured = captured.into_inner().unwrap_or_else(PoisonError::into_inner);
        return Err(error_start(String::from_utf8_lossy(&captured.stderr).trim().to_owned()));
    }
    let captured = captured.into_inner().unwrap_or_else(PoisonError::into_inner);
    Ok(ExecOutcome {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        stdout: String::from_utf8_lossy(&captured.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&captured.stderr).into_owned(),
        stdout_truncated: captured.stdout_truncated,
        stderr_truncated: captured.stderr_truncated,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

fn error_start(message: impl Into<String>) -> SandboxError {
    error(SandboxErrorCode::Start, message)
}

fn error_failed(message: impl Into<String>) -> SandboxError {
    error(SandboxErrorCode::Failed, message)
}

/// Reads `stream` to its end, keeping its first [`MAX_OUTPUT_BYTES`] and the combined tail, and
/// reporting the tail when no report went out in the last [`PROGRESS_INTERVAL`] (so the first
/// output is reported as it arrives).
async fn read(
    mut stream: impl AsyncRead + Unpin,
    captured: &Mutex<Captured>,
    is_stderr: bool,
    progress: Option<&mpsc::Sender<Progress>>,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let count = stream.read(&mut buffer).await?;
        if count == 0 {
            return Ok(());
        }
        let chunk = &buffer[..count];
        let mut captured = captured.lock().unwrap_or_else(PoisonError::into_inner);
        let captured = &mut *captured;
        let (kept, truncated) = if is_stderr {
            (&mut captured.stderr, &mut captured.stderr_truncated)
        } else {
            (&mut captured.stdout, &mut captured.stdout_truncated)
        };
        let room = MAX_OUTPUT_BYTES - kept.len();
        kept.extend_from_slice(&chunk[..count.min(room)]);
        *truncated |= count > room;
        captured.tail.extend_from_slice(chunk);
        let keep = TAIL_CHARS * 4;
        if captured.tail.len() > keep * 2 {
            captured.tail.drain(..captured.tail.len() - keep);
        }
        captured.fresh = true;
        report(captured, progress);
    }
}

/// Sends the tail when output arrived since the last report and the last report is at least
/// [`PROGRESS_INTERVAL`] old (a full channel drops the report).
fn report(captured: &mut Captured, progress: Option<&mpsc::Sender<Progress>>) {
    let Some(progress) = progress else { return };
    if !captured.fresh || captured.reported.is_some_and(|at| at.elapsed() < PROGRESS_INTERVAL) {
        return;
    }
    captured.fresh = false;
    captured.reported = Some(Instant::now());
    let tail = String::from_utf8_lossy(&captured.tail);
    let skip = tail.chars().count().saturating_sub(TAIL_CHARS);
    let output_tail = tail.chars().skip(skip).collect();
    let _ = progress.try_send(Progress { output_tail });
}

#[cfg(test)]
mod tests;
