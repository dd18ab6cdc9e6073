//! Server configuration: command line flags with environment equivalents and embedded defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use seed_agents_protocol::version::MIN_CLIENT_PROTOCOL;

/// Default listen address (loopback: exposing the server is a deliberate choice).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3050";
/// Default data directory (database, secret key, agent state).
pub const DEFAULT_DATA_DIR: &str = "./seed-agents-data";

/// `seed-agents-server`: the Seed Agents signed action API.
#[derive(Debug, Clone, Parser)]
#[command(name = "seed-agents-server", version, about)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SEED_AGENTS_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Directory for the database, the secret key file and agent state.
    #[arg(long, env = "SEED_AGENTS_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// Log line format.
    #[arg(long, env = "SEED_AGENTS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Largest request body accepted on the message route, in bytes (actions enforce their own,
    /// smaller limits; memory writes may be large).
    #[arg(long, env = "SEED_AGENTS_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// Let server-side fetches (memory downloads) reach loopback, private and link-local
    /// addresses. Off by default, so the server cannot be turned against its own network.
    #[arg(long, env = "SEED_AGENTS_ALLOW_PRIVATE_NETWORK")]
    pub allow_private_network: bool,

    /// Origin of the Hypermedia server the server publishes to (signing identity profiles):
    /// an http(s) URL, one trailing `/` dropped.
    #[arg(long, env = "SEED_AGENTS_HM_SERVER_URL", default_value = DEFAULT_HM_SERVER_URL, value_parser = parse_hm_server_url)]
    pub hm_server_url: String,

    /// The oldest client protocol answered (not a flag: the build's `MIN_CLIENT_PROTOCOL`; tests
    /// raise it to exercise the 426 answer).
    #[arg(skip = MIN_CLIENT_PROTOCOL)]
    pub min_client_protocol: u32,
    /// How long an upload chunk that arrived ahead of its predecessor waits for it to arrive
    /// (not a flag: tests that skip ahead on purpose shorten it, tests of pipelining lengthen it).
    #[arg(skip = crate::uploads::ARRIVAL_GRACE)]
    pub upload_arrival_grace: std::time::Duration,
}

/// Default Hypermedia server.
pub const DEFAULT_HM_SERVER_URL: &str = "https://hyper.media";

/// Checks a Hypermedia server URL is http(s) and drops one trailing `/`.
pub fn parse_hm_server_url(value: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(value).map_err(|error| format!("invalid URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("the Hypermedia server URL must be http(s)".to_owned());
    }
    Ok(value.strip_suffix('/').unwrap_or(value).to_owned())
}

/// Default bound on one request body: 1 GiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 30;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Config {
    /// The defaults, with another data directory and listen address (tests bind `127.0.0.1:0`).
    pub fn new(data_dir: impl Into<PathBuf>, listen: SocketAddr) -> Self {
        Self {
            listen,
            data_dir: data_dir.into(),
            log_format: LogFormat::Text,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            allow_private_network: false,
            hm_server_url: DEFAULT_HM_SERVER_URL.to_owned(),
            min_client_protocol: MIN_CLIENT_PROTOCOL,
            upload_arrival_grace: crate::uploads::ARRIVAL_GRACE,
        }
    }

    /// The SQLite database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("seed-agents.sqlite")
    }

    /// Where agents' state directories live.
    pub fn agents_dir(&self) -> PathBuf {
        self.data_dir.join("agents")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hm_server_url_is_checked_and_normalised() {
        let parse =
            |args: &[&str]| Config::try_parse_from(std::iter::once("seed-agents-server").chain(args.iter().copied()));
        assert_eq!(parse(&[]).unwrap().hm_server_url, DEFAULT_HM_SERVER_URL);
        assert_eq!(
            parse(&["--hm-server-url", "http://127.0.0.1:58004/"]).unwrap().hm_server_url,
            "http://127.0.0.1:58004"
        );
        assert_eq!(
            parse(&["--hm-server-url", "https://hm.example/base"]).unwrap().hm_server_url,
            "https://hm.example/base"
        );
        for bad in ["ftp://hm.example", "not a url", "file:///tmp/x"] {
            assert!(parse(&["--hm-server-url", bad]).is_err(), "{bad}");
        }
        assert_eq!(Config::new("d", "127.0.0.1:0".parse().unwrap()).hm_server_url, DEFAULT_HM_SERVER_URL);
    }
}
