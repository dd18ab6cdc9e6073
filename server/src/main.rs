//! `seed-agents-server`: serves the Seed Agents signed action API until SIGINT or SIGTERM.

use clap::Parser;
use seed_agents_server::config::LogFormat;
use seed_agents_server::{Clock, Config, RunningServer};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = Config::parse();
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
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
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
