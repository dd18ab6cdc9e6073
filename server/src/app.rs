//! The application state every feature receives: the database, the event bus, the configuration,
//! the secret key, the clock, the outbound clients, the code sandbox, and the state of the features that keep some
//! in memory (the run engine, user verbs and titles in progress, upload chunk order, sign-ins).

use std::net::SocketAddr;
use std::time::Instant;

use crate::bus::Bus;
use crate::clock::Clock;
use crate::config::Config;
use crate::db::{Db, DbError};
use crate::secrets::crypto::{SecretKey, SecretKeyError};

/// Shared state: database, bus, configuration, secret key, clock, outbound clients.
#[derive(Debug)]
pub struct App {
    /// The database.
    pub db: Db,
    /// In-process events for WebSocket fan-out.
    pub bus: Bus,
    /// How the server was started.
    pub config: Config,
    /// Encrypts secrets at rest.
    pub secrets: SecretKey,
    /// Milliseconds since the epoch (manual in tests).
    pub clock: Clock,
    /// The outbound HTTP client (provider model lists, downloads, the Hypermedia server).
    pub http: reqwest::Client,
    /// Model providers, over [`Self::http`].
    pub model: crate::model::Client,
    /// Automatic session titles in progress.
    pub titles: crate::runtime::titles::Titler,
    /// User verbs executing now, by session.
    pub user_verbs: crate::verbs::in_flight::InFlight,
    /// When the server started (for `uptime`).
    pub started: Instant,
    /// Upload chunks that arrived ahead of their predecessor (pipelined clients).
    pub upload_order: seed_agents_server_core::upload_order::AppendOrder,
    /// The run engine: claims, executes, cancels and finishes runs.
    pub runs: crate::runs::Engine,
    /// The code sandbox (`execute`), probed at start.
    pub(crate) sandbox: crate::sandbox::Sandbox,
    /// Subscription sign-ins in progress and the refresh locks of signed-in secrets.
    pub(crate) sign_ins: crate::providers::signin::SignIns,
    /// Per-account rate limits (`limits`).
    pub(crate) limits: crate::limits::RateLimits,
    /// What the runtime and the triggers count for `/metrics`.
    pub(crate) telemetry: crate::telemetry::Telemetry,
    /// Holds the data directory's lock file for the life of the server.
    _lock: DataDirLock,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory could not be created or locked.
    #[error("data directory {path}: {message}")]
    DataDir {
        /// The directory.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The database could not be opened.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The secret key could not be loaded.
    #[error(transparent)]
    SecretKey(#[from] SecretKeyError),
    /// A secret key rotation was interrupted and could not be finished or undone.
    /// Stored secrets do not open with the key (a PostgreSQL database is not in the data
    /// directory, so a new data directory would otherwise start with a new key beside them).
    #[error(
        "{unopened} of {total} secrets stored in the database do not open with the secret key of this data \
         directory: give this server the key the database's secrets were sealed with ({key_file} or \
         SEED_AGENTS_SECRET_KEY; docs/postgres.md)"
    )]
    KeyMismatch {
        /// Secrets that do not open.
        unopened: usize,
        /// Secrets stored.
        total: usize,
        /// The key file's path.
        key_file: String,
    },
    #[error("an interrupted secret key rotation could not be finished: {0}")]
    KeyRotation(String),
    /// The outbound HTTP client could not be built (TLS setup).
    #[error("cannot build the outbound HTTP client: {0}")]
    HttpClient(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl App {
    /// Opens the data directory (creating it), takes its lock, opens the database (migrating it)
    /// and loads the secret key.
    pub fn open(config: Config, clock: Clock) -> Result<Self, StartError> {
        let lock = DataDirLock::take(&config)?;
        Self::open_locked(config, clock, lock)
    }

    /// [`App::open`] for a caller that already holds the data directory's lock (the server
    /// finishes an interrupted key rotation between taking it and loading the key).
    pub(crate) fn open_locked(config: Config, clock: Clock, lock: DataDirLock) -> Result<Self, StartError> {
        let dir = &config.data_dir;
        let secrets = SecretKey::load(dir, std::env::var(SecretKey::ENV).ok().as_deref())?;
        let db = match &config.database_url {
            Some(url) => Db::open_postgres(url, config.db_queues)?,
            None => Db::open_with(&config.database_path(), config.db_queues)?,
        };
        let upload_order = seed_agents_server_core::upload_order::AppendOrder::with_grace(config.upload_arrival_grace);
        let http = outbound_http_client().map_err(|error| StartError::HttpClient(error.to_string()))?;
        let issuer = crate::model::oauth::Issuer::new(&config.oauth_issuer_url).map_err(StartError::HttpClient)?;
        let bus = Bus::new();
        let runs = crate::runs::Engine::new(db.clone(), bus.clone(), clock.clone(), config.run_limits);
        let model = crate::model::Client::new(
            http.clone(),
            crate::model::Timeouts {
                connect: std::time::Duration::from_secs(10),
                first_byte: config.provider_timeout,
                idle: config.provider_timeout,
            },
        );
        let sandbox = crate::sandbox::Sandbox::new(crate::sandbox::Settings {
            enabled: config.exec_backend == crate::config::ExecBackend::Namespaces,
            concurrency: config.exec_concurrency,
            per_account: config.exec_per_account,
        });
        let limits = crate::limits::RateLimits::new(&config);
        Ok(Self {
            sandbox,
            runs,
            db,
            bus,
            config,
            secrets,
            clock,
            model,
            titles: crate::runtime::titles::Titler::default(),
            user_verbs: crate::verbs::in_flight::InFlight::default(),
            http,
            started: Instant::now(),
            upload_order,
            sign_ins: crate::providers::signin::SignIns::new(issuer),
            limits,
            telemetry: crate::telemetry::Telemetry::default(),
            _lock: lock,
        })
    }
}

/// The data directory's lock (`server.lock`, an exclusive `flock`): a server holds it for its
/// whole life, and the operator's commands that change the directory (`restore`,
/// `rotate-secret-key`) take it too, so they never run beside a server.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    /// Held, never read: the lock lasts as long as the open file.
    _file: std::fs::File,
}

/// The marker a restore leaves until every file is in place (server/README.md "Operations"): a
/// directory holding it is refused, so a half-restored directory never starts as a server.
pub(crate) const RESTORE_MARKER: &str = ".restore-incomplete";

/// The name of the lock file in the data directory.
pub(crate) const LOCK_FILE: &str = "server.lock";

impl DataDirLock {
    /// Creates the data directory and its `agents/` folder when missing and takes the lock;
    /// refuses when another process holds it or a restore into the directory did not finish.
    pub(crate) fn take(config: &Config) -> Result<Self, StartError> {
        let dir = &config.data_dir;
        let data_dir_error = |message: String| StartError::DataDir { path: dir.display().to_string(), message };
        std::fs::create_dir_all(dir).map_err(|error| data_dir_error(error.to_string()))?;
        let lock = Self::try_take(dir)
            .map_err(|error| data_dir_error(error.to_string()))?
            .ok_or_else(|| data_dir_error("another seed-agents-server is already using this directory".to_owned()))?;
        if dir.join(RESTORE_MARKER).exists() {
            return Err(data_dir_error(
                "a restore into this directory did not finish; empty it and run `seed-agents-server restore` again"
                    .to_owned(),
            ));
        }
        std::fs::create_dir_all(config.agents_dir()).map_err(|error| data_dir_error(error.to_string()))?;
        Ok(lock)
    }

    /// Takes the lock of the existing directory `dir` (creating the lock file), or `None` when
    /// another process holds it.
    pub(crate) fn try_take(dir: &std::path::Path) -> std::io::Result<Option<Self>> {
        let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE))?;
        match lock.try_lock() {
            Ok(()) => Ok(Some(Self { _file: lock })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(error)) => Err(error),
        }
    }
}

/// The outbound client: rustls with the ring provider, redirects followed (up to 10), a connect
/// timeout; per-request timeouts are the caller's (downloads use an idle timeout).
fn outbound_http_client() -> reqwest::Result<reqwest::Client> {
    // Installing twice is harmless (the first provider stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(15))
        .user_agent(concat!("seed-agents-server/", env!("CARGO_PKG_VERSION")))
        .build()
}
