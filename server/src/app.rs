//! The application state every handler receives, and the running server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use seed_agents_protocol::envelope::KeyCache;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::replay::ReplayGuard;
use crate::bus::Bus;
use crate::clock::Clock;
use crate::config::Config;
use crate::db::{Db, DbError};
use crate::secrets::crypto::{SecretKey, SecretKeyError};

/// Shared state: database, bus, configuration, secret key, clock, verification caches.
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
    /// Decompressed signer keys.
    pub keys: KeyCache,
    /// Signatures seen within the timestamp window.
    pub replay: ReplayGuard,
    /// The outbound HTTP client (provider model lists, downloads, the Hypermedia server).
    pub http: reqwest::Client,
    /// Model providers, over [`Self::http`].
    pub model: crate::model::Client,
    /// Automatic session titles in progress.
    pub titles: crate::runtime::title::Titler,
    /// User verbs executing now, by session.
    pub user_verbs: crate::verbs::InFlight,
    /// When the server started (for `uptime`).
    pub started: Instant,
    /// Upload chunks that arrived ahead of their predecessor (pipelined clients).
    pub upload_order: crate::uploads::AppendOrder,
    /// Bytes held by request bodies until their request is answered.
    pub bodies: crate::http::body::BodyBudget,
    /// WebSocket subscriptions.
    pub live: crate::ws::Live,
    /// The run engine: claims, executes, cancels and finishes runs.
    pub runs: crate::runs::Engine,
    /// Holds the data directory's lock file for the life of the server.
    _lock: std::fs::File,
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
        let dir = &config.data_dir;
        let data_dir_error = |message: String| StartError::DataDir { path: dir.display().to_string(), message };
        std::fs::create_dir_all(dir).map_err(|error| data_dir_error(error.to_string()))?;
        std::fs::create_dir_all(config.agents_dir()).map_err(|error| data_dir_error(error.to_string()))?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("server.lock"))
            .map_err(|error| data_dir_error(error.to_string()))?;
        lock.try_lock()
            .map_err(|_| data_dir_error("another seed-agents-server is already using this directory".to_owned()))?;
        let secrets = SecretKey::load(dir, std::env::var(SecretKey::ENV).ok().as_deref())?;
        let db = Db::open_with(&config.database_path(), config.db_queues)?;
        if config.max_body_bytes > config.body_budget_bytes {
            tracing::warn!(
                max_body_bytes = config.max_body_bytes,
                body_budget_bytes = config.body_budget_bytes,
                "--max-body-bytes is over --body-budget-bytes: bodies larger than the budget are refused"
            );
        }
        let bodies = crate::http::body::BodyBudget::new(config.body_budget_bytes);
        let upload_order = crate::uploads::AppendOrder::with_grace(config.upload_arrival_grace);
        let http = outbound_http_client().map_err(|error| StartError::HttpClient(error.to_string()))?;
        let live = crate::ws::Live::new(config.ws_limits());
        let runs = crate::runs::Engine::new(config.run_limits);
        let model = crate::model::Client::new(
            http.clone(),
            crate::model::Timeouts {
                connect: std::time::Duration::from_secs(10),
                first_byte: config.provider_timeout,
                idle: config.provider_timeout,
            },
        );
        Ok(Self {
            live,
            runs,
            db,
            bus: Bus::new(),
            config,
            secrets,
            clock,
            keys: KeyCache::new(),
            replay: ReplayGuard::new(ReplayGuard::DEFAULT_CAPACITY),
            model,
            titles: crate::runtime::title::Titler::default(),
            user_verbs: crate::verbs::InFlight::default(),
            http,
            started: Instant::now(),
            upload_order,
            bodies,
            _lock: lock,
        })
    }
}

impl App {
    /// How request bodies are bounded, from the configuration.
    pub fn body_limits(&self) -> crate::http::body::BodyLimits {
        crate::http::body::BodyLimits {
            // A body the budget can never hold is too large, not "busy".
            max_body_bytes: self.config.max_body_bytes.min(self.config.body_budget_bytes),
            body_timeout: self.config.body_timeout,
            body_min_rate: self.config.body_min_rate,
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

/// A server running on a Tokio runtime: its address and a way to stop it.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    app: Arc<App>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
    /// Expires idle uploads (`uploads::sweep`).
    upload_sweeper: JoinHandle<()>,
    /// Fans bus events out to WebSockets (`ws::hub`).
    hub: JoinHandle<()>,
    /// The run dispatcher (`runs::engine`).
    dispatcher: JoinHandle<()>,
    /// The trigger monitors (`triggers::spawn_monitors`), until shutdown stops them.
    trigger_monitors: Option<crate::triggers::Monitors>,
}

impl RunningServer {
    /// Opens the app and binds `config.listen` (use port 0 for an ephemeral port).
    pub async fn start(config: Config, clock: Clock) -> Result<Self, StartError> {
        let address = config.listen;
        let app = Arc::new(App::open(config, clock)?);
        // Before anything that writes starts, so every temp file found is an earlier process's.
        let config = app.config.clone();
        let _ =
            tokio::task::spawn_blocking(move || crate::leftovers::remove(&config, std::time::SystemTime::now())).await;
        let listener = TcpListener::bind(address).await.map_err(|source| StartError::Listen { address, source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen { address, source })?;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let router = crate::http::router(app.clone());
        let limits = crate::http::serve::ConnectionLimits {
            max_connections: app.config.max_connections,
            header_timeout: app.config.header_timeout,
        };
        let hub = crate::ws::spawn_hub(&app);
        let task = tokio::spawn(crate::http::serve::serve(listener, router, limits, async move {
            let _ = stopped.await;
        }));
        let upload_sweeper = crate::uploads::spawn_sweeper(&app);
        app.runs.install(Arc::new(crate::runtime::AgentExecutor));
        let dispatcher = crate::runs::Engine::start(&app);
        let trigger_monitors = Some(crate::triggers::spawn_monitors(&app));
        Ok(Self { addr, app, shutdown: Some(shutdown), task, upload_sweeper, hub, dispatcher, trigger_monitors })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The app (tests inspect the database or bus through it).
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Closes WebSockets (1001), asks executing runs to end (the next start requeues them), stops
    /// accepting connections, finishes in-flight requests, then closes the database.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(monitors) = self.trigger_monitors.take() {
            monitors.stop().await;
        }
        self.app.live.shut_down(std::time::Duration::from_secs(5)).await;
        let _ = (&mut self.hub).await;
        // Before the requests: an inline run's request answers once its run stopped.
        self.app.runs.shutdown().await;
        let _ = (&mut self.dispatcher).await;
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let served = (&mut self.task).await.unwrap_or_else(|error| Err(std::io::Error::other(error)));
        self.upload_sweeper.abort();
        let db = self.app.db.clone();
        tokio::task::spawn_blocking(move || db.close()).await.map_err(std::io::Error::other)?;
        served
    }
}
