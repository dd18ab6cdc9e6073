//! `seed-agents-server`: serves the Seed Agents signed action API until SIGINT or SIGTERM; or,
//! given a command (`backup`, `verify`, `restore`, `rotate-secret-key`, `doctor`), runs it on the
//! data directory and exits.

use clap::Parser;
use seed_agents_server::LogFormat;
use seed_agents_server::{Clock, Command, Config, RunningServer};
use tracing_subscriber::EnvFilter;

// The command line: the server's flags, and an optional operator's command.
#[derive(Debug, Parser)]
#[command(name = "seed-agents-server", version, about)]
struct Cli {
    #[command(flatten)]
    config: Config,
    #[command(subcommand)]
    command: Option<Command>,
}

fn main() -> std::process::ExitCode {
    let Cli { config, command } = Cli::parse();
    if let Some(command) = command {
        init_logging(config.log_format);
        return seed_agents_server::run_command(&command, &config);
    }
    tune_allocator();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("seed-agents-server: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(config))
}

/// glibc's allocator keeps up to eight arenas per core and grows its mmap threshold as large
/// blocks are freed, so a server whose threads allocate and free large short-lived buffers
/// (request bodies, upload chunks, model streams) holds on to freed memory for good: the soak
/// bench saw RSS climb from 46 to 70 MiB over ten minutes with nothing live. Four arenas, and
/// blocks of 128 KiB or more from mmap (returned to the system when freed), keep it level.
/// (Two arenas made threads queue on the arena locks: the turns bench, `TURNS=20000`, back to
/// back, did 507 turns/s at p99 47.8 ms with two, 646 at 38.1 ms with four, 699 at 35.5 ms with
/// eight; RSS at the end 24.4, 24.9 and 26.0 MiB.) An operator's `MALLOC_ARENA_MAX` /
/// `MALLOC_MMAP_THRESHOLD_` still win.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_allocator() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: `mallopt` only sets a glibc allocator parameter from a plain integer; it runs
        // once, before the async runtime (or any other thread) exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 4);
        }
    }
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: as above.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}

async fn serve(config: Config) -> std::process::ExitCode {
    init_logging(config.log_format);
    let server = match RunningServer::start(config.clone(), Clock::system()).await {
        Ok(server) => server,
        Err(error) => {
            tracing::error!(%error, "cannot start");
            eprintln!("seed-agents-server: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(address = %server.addr(), data_dir = %config.data_dir.display(), "listening");
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests");
    match server.shutdown().await {
        Ok(()) => {
            tracing::info!("stopped");
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(%error, "shutdown failed");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person at a terminal: a log file or journal gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
