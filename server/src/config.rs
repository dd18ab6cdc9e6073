//! Server configuration: command line flags with environment equivalents and embedded defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use seed_agents_protocol::version::MIN_CLIENT_PROTOCOL;

/// Default listen address (loopback: exposing the server is a deliberate choice).
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:3050";
/// Default data directory (database, secret key, agent state).
pub(crate) const DEFAULT_DATA_DIR: &str = "./seed-agents-data";

/// `seed-agents-server`: the Seed Agents signed action API.
#[derive(Debug, Clone, Parser)]
#[command(name = "seed-agents-server", version, about)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SEED_AGENTS_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Directory for the database, the secret key file and agent state.
    #[arg(long, env = "SEED_AGENTS_DATA_DIR", default_value = DEFAULT_DATA_DIR, global = true)]
    pub data_dir: PathBuf,

    /// The database: unset, the SQLite file in the data directory (the default); or a PostgreSQL
    /// URL, `postgres://user@host:port/database` (docs/postgres.md). Files (agents' memory,
    /// attachments, uploads) stay in the data directory either way.
    #[arg(long, env = "SEED_AGENTS_DATABASE_URL", global = true)]
    pub database_url: Option<String>,

    /// Log line format.
    #[arg(long, env = "SEED_AGENTS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Largest request body, in bytes: the limit of the actions that carry a file inline
    /// (`WriteAgentMemoryFile`, `InvokeSessionTool`, an identity's icon). Upload chunks and
    /// attachments have their own smaller limits and every other action 4 MiB; larger files go
    /// through chunked uploads. Raise `--body-budget-bytes` with it.
    #[arg(long, env = "SEED_AGENTS_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// Bytes held at once by request bodies (from before they are read until their request is
    /// answered); a body that would pass it is answered 503 with `Retry-After`.
    #[arg(long, env = "SEED_AGENTS_BODY_BUDGET_BYTES", default_value_t = DEFAULT_BODY_BUDGET_BYTES)]
    pub body_budget_bytes: usize,

    /// Seconds a client has to send a request's headers. hyper starts the same clock when a
    /// kept-alive connection waits for its next request, so it is also the idle keep-alive limit.
    #[arg(long, env = "SEED_AGENTS_HEADER_TIMEOUT", default_value = "10", value_parser = parse_seconds)]
    pub header_timeout: Duration,

    /// Seconds for a body's first bytes and between any two of its frames; past that allowance a
    /// body must also keep up `--body-min-rate` on average.
    #[arg(long, env = "SEED_AGENTS_BODY_TIMEOUT", default_value = "10", value_parser = parse_seconds)]
    pub body_timeout: Duration,

    /// Seconds a model provider may take to start answering, and to send the next piece of a
    /// streaming answer, before the step fails with a timeout error.
    #[arg(long, env = "SEED_AGENTS_PROVIDER_TIMEOUT", default_value = "120", value_parser = parse_seconds)]
    pub provider_timeout: Duration,

    /// Seconds between two checks of the trigger schedules and two polls of the Hypermedia
    /// activity feed (per account with activity triggers).
    #[arg(long, env = "SEED_AGENTS_TRIGGER_POLL_INTERVAL", default_value = "5", value_parser = parse_seconds)]
    pub trigger_poll_interval: Duration,

    /// Where every provider of one type sends its requests instead of the vendor's default, as
    /// `<type>=<url>` (repeat the flag, or separate with commas): a gateway or proxy in front of
    /// the vendor. A provider record's own base URL (ollama, custom) still wins.
    #[arg(
        long = "provider-url",
        env = "SEED_AGENTS_PROVIDER_URLS",
        value_delimiter = ',',
        value_parser = crate::model::vendors::parse_provider_url
    )]
    pub provider_urls: Vec<crate::model::vendors::ProviderUrl>,

    /// Origin of a self-hosted SearXNG instance (an http(s) URL, one trailing `/` dropped): the
    /// backend of the `web_search` callable. Without it `web_search` is neither offered nor
    /// granted to any agent.
    #[arg(long, env = "SEED_AGENTS_SEARXNG_URL", value_parser = parse_searxng_url)]
    pub searxng_url: Option<String>,

    /// Whether a conversation with a provisional title gets one from the model when a turn
    /// starts (one tool-less call; never replaces a title the agent or a person gave).
    #[arg(
        long,
        env = "SEED_AGENTS_SESSION_TITLE_GENERATION",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub session_title_generation: bool,

    /// The average rate, in bytes per second, a request body must keep up past `--body-timeout`.
    #[arg(long, env = "SEED_AGENTS_BODY_MIN_RATE", default_value_t = DEFAULT_BODY_MIN_RATE)]
    pub body_min_rate: u64,

    /// Seconds to answer a request once its body arrived; a slower answer is abandoned with 503.
    #[arg(long, env = "SEED_AGENTS_REQUEST_TIMEOUT", default_value = "300", value_parser = parse_seconds)]
    pub request_timeout: Duration,

    /// WebSockets open at once (`/agents/ws`); more are answered 503.
    #[arg(long, env = "SEED_AGENTS_WS_MAX_SOCKETS", default_value_t = 10_000)]
    pub ws_max_sockets: usize,

    /// WebSockets one account may have subscribed at once.
    #[arg(long, env = "SEED_AGENTS_WS_PER_ACCOUNT", default_value_t = 64)]
    pub ws_per_account: usize,

    /// Subscriptions one WebSocket may hold.
    #[arg(long, env = "SEED_AGENTS_WS_SUBSCRIPTIONS", default_value_t = 64)]
    pub ws_subscriptions: usize,

    /// Deliveries waiting for one WebSocket (a frame, or the appends of one commit) before its
    /// client counts as too slow and is disconnected (it resumes from its last `seq`).
    #[arg(long, env = "SEED_AGENTS_WS_QUEUE", default_value_t = 1024)]
    pub ws_queue: usize,

    /// Bytes of frames waiting for one WebSocket before its client counts as too slow and is
    /// disconnected (it resumes from its last `seq`).
    #[arg(long, env = "SEED_AGENTS_WS_QUEUE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub ws_queue_bytes: usize,

    /// Bytes of frames waiting for all of one account's WebSockets together; a socket whose next
    /// frame would pass it is disconnected as too slow.
    #[arg(long, env = "SEED_AGENTS_WS_ACCOUNT_QUEUE_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub ws_account_queue_bytes: usize,

    /// Seconds between pings to a WebSocket's peer; a peer silent for two and a half intervals is
    /// dropped.
    #[arg(long, env = "SEED_AGENTS_WS_PING_INTERVAL", default_value = "20", value_parser = parse_seconds)]
    pub ws_ping_interval: Duration,

    /// HTTP connections served at once; more wait in the kernel's queue until one closes.
    /// WebSockets, once upgraded, count against `--ws-max-sockets` instead.
    #[arg(long, env = "SEED_AGENTS_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// Let server-side fetches (memory downloads, MCP servers) reach loopback, private and
    /// link-local addresses. Off by default, so the server cannot be turned against its own network.
    #[arg(long, env = "SEED_AGENTS_ALLOW_PRIVATE_NETWORK")]
    pub allow_private_network: bool,

    /// Origin of the Hypermedia server the server publishes to (signing identity profiles):
    /// an http(s) URL, one trailing `/` dropped.
    #[arg(long, env = "SEED_AGENTS_HM_SERVER_URL", default_value = DEFAULT_HM_SERVER_URL, value_parser = parse_hm_server_url)]
    pub hm_server_url: String,

    /// Offer "Sign in with ChatGPT" (`StartProviderOAuth` and the other provider OAuth actions;
    /// `subscriptionAuth` on `/api/health`). Off by default: finishing a sign-in needs a client
    /// that catches the vendor's redirect to `localhost:1455` or a user who pastes it. Providers
    /// already signed in keep running either way.
    #[arg(long, env = "SEED_AGENTS_SUBSCRIPTION_AUTH")]
    pub subscription_auth: bool,

    /// The OAuth issuer subscription sign-in talks to (its `/oauth/authorize` and `/oauth/token`):
    /// an http(s) origin, one trailing `/` dropped. Change it only for a gateway or a test issuer.
    #[arg(long, env = "SEED_AGENTS_OAUTH_ISSUER_URL", default_value = DEFAULT_OAUTH_ISSUER_URL, value_parser = parse_oauth_issuer_url)]
    pub oauth_issuer_url: String,

    /// The oldest client protocol answered (not a flag: the build's `MIN_CLIENT_PROTOCOL`; tests
    /// raise it to exercise the 426 answer).
    #[arg(skip = MIN_CLIENT_PROTOCOL)]
    pub min_client_protocol: u32,
    /// How long an upload chunk that arrived ahead of its predecessor waits for it to arrive
    /// (not a flag: tests that skip ahead on purpose shorten it, tests of pipelining lengthen it).
    #[arg(skip = seed_agents_server_core::upload_order::ARRIVAL_GRACE)]
    pub upload_arrival_grace: Duration,
    /// How much work may wait for the database (not a flag: tests shrink it to show the 503).
    #[arg(skip)]
    pub db_queues: crate::db::Queues,
    /// The run engine's leases, tick, retry delays and concurrency (not a flag: upstream's
    /// constants; tests shorten them).
    #[arg(skip)]
    pub run_limits: crate::runs::Limits,

    /// Seconds an MCP server's tool may take to answer a call before the call fails (the model
    /// reads that as the tool's error).
    #[arg(long, env = "SEED_AGENTS_MCP_CALL_TIMEOUT", default_value = "60", value_parser = parse_seconds)]
    pub mcp_call_timeout: Duration,

    /// How agents' code runs (the `execute` callable, docs/sandbox.md): `namespaces`, a fresh
    /// bubblewrap sandbox per execution (when bwrap is missing or its probe fails, `execute` is
    /// not offered and `/api/health` says why), or `off`.
    #[arg(long, env = "SEED_AGENTS_EXEC_BACKEND", value_enum, default_value_t = ExecBackend::Namespaces)]
    pub exec_backend: ExecBackend,

    /// Code executions running at once, server-wide; more wait their turn.
    #[arg(long, env = "SEED_AGENTS_EXEC_CONCURRENCY", default_value_t = 2)]
    pub exec_concurrency: usize,

    /// Code executions running at once for one account; more wait their turn.
    #[arg(long, env = "SEED_AGENTS_EXEC_PER_ACCOUNT", default_value_t = 1)]
    pub exec_per_account: usize,

    /// Seconds a workflow script may compute between two `ctx` calls before its run fails
    /// `fuel-exhausted` (docs/workflows.md §1); fractions allowed.
    #[arg(long, env = "SEED_AGENTS_WORKFLOW_COMPUTE_SLICE", default_value = "2", value_parser = parse_seconds)]
    pub workflow_compute_slice: Duration,

    /// Address of the Prometheus metrics listener (`GET /metrics`, server/README.md "Metrics").
    /// Off unless given: metrics are for the operator's network, not the API's clients.
    #[arg(long, env = "SEED_AGENTS_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Writes one account may send per second, sustained (reads are never limited; turns and
    /// uploads have their own buckets); past the burst a write is answered 429 `rate_limited`
    /// with `Retry-After`. `0`: unlimited.
    #[arg(long, env = "SEED_AGENTS_RATE_WRITES_PER_SECOND", default_value_t = DEFAULT_RATE_PER_SECOND)]
    pub rate_writes_per_second: u32,

    /// Writes one account may send at once before `--rate-writes-per-second` applies.
    #[arg(long, env = "SEED_AGENTS_RATE_WRITES_BURST", default_value_t = DEFAULT_RATE_BURST)]
    pub rate_writes_burst: u32,

    /// Turns (`MessageSession`, `RetrySession`) one account may start per second, sustained.
    /// `0`: unlimited.
    #[arg(long, env = "SEED_AGENTS_RATE_TURNS_PER_SECOND", default_value_t = DEFAULT_RATE_PER_SECOND)]
    pub rate_turns_per_second: u32,

    /// Turns one account may start at once before `--rate-turns-per-second` applies.
    #[arg(long, env = "SEED_AGENTS_RATE_TURNS_BURST", default_value_t = DEFAULT_RATE_BURST)]
    pub rate_turns_burst: u32,

    /// Upload requests (`BeginFileUpload`, `AppendFileUploadChunk`, `CommitFileUpload`,
    /// `AbortFileUpload`, `UploadSessionAttachment`) one account may send per second, sustained.
    /// `0`: unlimited.
    #[arg(long, env = "SEED_AGENTS_RATE_UPLOADS_PER_SECOND", default_value_t = DEFAULT_RATE_PER_SECOND)]
    pub rate_uploads_per_second: u32,

    /// Upload requests one account may send at once before `--rate-uploads-per-second` applies.
    #[arg(long, env = "SEED_AGENTS_RATE_UPLOADS_BURST", default_value_t = DEFAULT_RATE_BURST)]
    pub rate_uploads_burst: u32,

    /// Bytes of file content (the request bodies of `WriteAgentMemoryFile`,
    /// `AppendFileUploadChunk` and `UploadSessionAttachment`) one account may send per hour,
    /// sustained. `0`: unlimited.
    #[arg(long, env = "SEED_AGENTS_RATE_MEMORY_BYTES_PER_HOUR", default_value_t = DEFAULT_RATE_MEMORY_BYTES_PER_HOUR)]
    pub rate_memory_bytes_per_hour: u64,

    /// Bytes of file content one account may send at once before
    /// `--rate-memory-bytes-per-hour` applies (at least `--max-body-bytes`, or a largest body
    /// could never pass).
    #[arg(long, env = "SEED_AGENTS_RATE_MEMORY_BYTES_BURST", default_value_t = DEFAULT_RATE_MEMORY_BYTES_BURST)]
    pub rate_memory_bytes_burst: u64,

    /// Bytes one account may keep in its agents' memory files and its sessions' attachments
    /// together; a write past it is answered 413 `quota_exceeded` and writes nothing. `0`:
    /// unlimited.
    #[arg(long, env = "SEED_AGENTS_STORAGE_QUOTA_BYTES", default_value_t = 0)]
    pub storage_quota_bytes: u64,
}

/// The default OAuth issuer of subscription sign-in (OpenAI's).
pub(crate) const DEFAULT_OAUTH_ISSUER_URL: &str = "https://auth.openai.com";

/// Checks an OAuth issuer URL is http(s) and drops one trailing `/`.
pub(crate) fn parse_oauth_issuer_url(value: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(value).map_err(|error| format!("invalid URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("the OAuth issuer URL must be http(s)".to_owned());
    }
    Ok(value.strip_suffix('/').unwrap_or(value).to_owned())
}

/// Default Hypermedia server.
pub(crate) const DEFAULT_HM_SERVER_URL: &str = "https://hyper.media";

/// Checks a Hypermedia server URL is http(s) and drops one trailing `/`.
pub(crate) fn parse_hm_server_url(value: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(value).map_err(|error| format!("invalid URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("the Hypermedia server URL must be http(s)".to_owned());
    }
    Ok(value.strip_suffix('/').unwrap_or(value).to_owned())
}

/// Checks a SearXNG URL is http(s) and drops one trailing `/`.
pub(crate) fn parse_searxng_url(value: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(value).map_err(|error| format!("invalid URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("the SearXNG URL must be http(s)".to_owned());
    }
    Ok(value.strip_suffix('/').unwrap_or(value).to_owned())
}

/// Default bound on one request body: 32 MiB. Clients send files larger than a few MiB in
/// chunks (the desktop app above 2 MiB, the SDK's upload helpers always), so this bounds what one
/// unauthenticated body can make the server hold without refusing any client's upload.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 32 << 20;
/// Default budget of body bytes held at once: 128 MiB.
pub(crate) const DEFAULT_BODY_BUDGET_BYTES: usize = 128 << 20;
/// Default minimum body rate: 16 KiB/s.
pub(crate) const DEFAULT_BODY_MIN_RATE: u64 = 16 * 1024;
/// Default sustained rate of each per-account request bucket (writes, turns, uploads): high
/// enough that one busy client (the benches drive one account at hundreds of turns a second) is
/// never refused; an operator of a shared server lowers it (server/README.md, "Rate limits").
pub(crate) const DEFAULT_RATE_PER_SECOND: u32 = 1000;
/// Default burst of each per-account request bucket.
pub(crate) const DEFAULT_RATE_BURST: u32 = 2000;
/// Default sustained file bytes per account: 64 GiB an hour.
pub(crate) const DEFAULT_RATE_MEMORY_BYTES_PER_HOUR: u64 = 64 << 30;
/// Default burst of file bytes per account: 4 GiB.
pub(crate) const DEFAULT_RATE_MEMORY_BYTES_BURST: u64 = 4 << 30;
/// Default bound on concurrent HTTP connections.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Parses a number of seconds (fractions allowed) as a duration.
pub(crate) fn parse_seconds(value: &str) -> Result<Duration, String> {
    let seconds: f64 = value.trim().parse().map_err(|_| format!("not a number of seconds: {value}"))?;
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("not a duration in seconds: {value}"))
}

/// How agents' code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecBackend {
    /// A bubblewrap sandbox per execution: Linux namespaces, seccomp, rlimits, control groups.
    Namespaces,
    /// No code execution.
    Off,
}

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
            database_url: None,
            log_format: LogFormat::Text,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_budget_bytes: DEFAULT_BODY_BUDGET_BYTES,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            provider_timeout: Duration::from_secs(120),
            trigger_poll_interval: Duration::from_secs(5),
            session_title_generation: true,
            provider_urls: Vec::new(),
            searxng_url: None,
            request_timeout: Duration::from_secs(300),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            ws_max_sockets: 10_000,
            ws_per_account: 64,
            ws_subscriptions: 64,
            ws_queue: 1024,
            ws_queue_bytes: 4 * 1024 * 1024,
            ws_account_queue_bytes: 32 * 1024 * 1024,
            ws_ping_interval: Duration::from_secs(20),
            allow_private_network: false,
            hm_server_url: DEFAULT_HM_SERVER_URL.to_owned(),
            subscription_auth: false,
            oauth_issuer_url: DEFAULT_OAUTH_ISSUER_URL.to_owned(),
            min_client_protocol: MIN_CLIENT_PROTOCOL,
            upload_arrival_grace: seed_agents_server_core::upload_order::ARRIVAL_GRACE,
            db_queues: crate::db::Queues::default(),
            run_limits: crate::runs::Limits::default(),
            mcp_call_timeout: Duration::from_secs(60),
            workflow_compute_slice: Duration::from_secs(2),
            metrics_listen: None,
            rate_writes_per_second: DEFAULT_RATE_PER_SECOND,
            rate_writes_burst: DEFAULT_RATE_BURST,
            rate_turns_per_second: DEFAULT_RATE_PER_SECOND,
            rate_turns_burst: DEFAULT_RATE_BURST,
            rate_uploads_per_second: DEFAULT_RATE_PER_SECOND,
            rate_uploads_burst: DEFAULT_RATE_BURST,
            rate_memory_bytes_per_hour: DEFAULT_RATE_MEMORY_BYTES_PER_HOUR,
            rate_memory_bytes_burst: DEFAULT_RATE_MEMORY_BYTES_BURST,
            storage_quota_bytes: 0,
            exec_backend: ExecBackend::Namespaces,
            exec_concurrency: 2,
            exec_per_account: 1,
        }
    }

    /// The SQLite database file's name in the data directory (and in a backup).
    pub const DATABASE_FILE: &'static str = "seed-agents.sqlite";

    /// The SQLite database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join(Self::DATABASE_FILE)
    }

    /// Where every session's attachments live.
    pub fn attachments_dir(&self) -> PathBuf {
        self.data_dir.join("session-attachments")
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

    #[test]
    fn searxng_url_is_optional_checked_and_normalised() {
        let parse =
            |args: &[&str]| Config::try_parse_from(std::iter::once("seed-agents-server").chain(args.iter().copied()));
        assert_eq!(parse(&[]).unwrap().searxng_url, None);
        assert_eq!(
            parse(&["--searxng-url", "http://127.0.0.1:8080/"]).unwrap().searxng_url.as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert!(parse(&["--searxng-url", "ftp://search.example"]).is_err());
    }
}
