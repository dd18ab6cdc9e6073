//! The running server: what [`RunningServer::start`] wires together and the order
//! [`RunningServer::shutdown`] takes it apart in. The one module that knows every layer.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::db::Connection;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::app::{App, StartError};
use crate::clock::Clock;
use crate::config::Config;
use crate::edge::Edge;
use crate::error::ApiResult;
use crate::runs::RunHooks;
use crate::secrets::crypto::SecretKey;

/// A server running on a Tokio runtime: its address and a way to stop it.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    edge: Arc<Edge>,
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
    /// The `--metrics-listen` listener: its address, its stop signal and its task.
    metrics: Option<MetricsListener>,
    /// Drops the rate-limit buckets of idle accounts every minute (`limits`).
    limits_sweeper: JoinHandle<()>,
}

/// The metrics listener (`http::metrics`), on its own address.
#[derive(Debug)]
struct MetricsListener {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Opens the app and binds `config.listen` (use port 0 for an ephemeral port).
    pub async fn start(config: Config, clock: Clock) -> Result<Self, StartError> {
        let address = config.listen;
        // The lock first, then an interrupted key rotation finished or undone, then the key.
        let lock = crate::app::DataDirLock::take(&config)?;
        // On a thread of its own: with PostgreSQL it opens the database with the synchronous
        // client, which must not start (or stop) inside this runtime.
        std::thread::scope(|scope| scope.spawn(|| crate::ops::rotate::finish_interrupted(&config)).join())
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            .map_err(StartError::KeyRotation)?;
        let app = Arc::new(App::open_locked(config, clock, lock)?);
        if app.config.database_url.is_some()
            && let Err(error) = check_key_opens_secrets(&app).await
        {
            // Closed now, so the schema's lock is free when this returns.
            app.db.close();
            return Err(error);
        }
        // Before anything that writes starts, so every temp file found is an earlier process's.
        let config = app.config.clone();
        let _ =
            tokio::task::spawn_blocking(move || crate::leftovers::remove(&config, std::time::SystemTime::now())).await;
        // Before anything can end a run or claim one.
        app.runs.install_hooks(Arc::new(Consumers));
        app.runs.install(Arc::new(ByKind {
            agent: crate::runtime::AgentExecutor::new(&app),
            workflow: crate::workflows::run::WorkflowExecutor::new(&app),
        }));
        let listener = TcpListener::bind(address).await.map_err(|source| StartError::Listen { address, source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen { address, source })?;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let edge = Arc::new(Edge::new(app.clone()));
        app.bus.install_session_sink(edge.live.clone());
        let router = crate::http::router(edge.clone());
        let limits = crate::http::serve::ConnectionLimits {
            max_connections: app.config.max_connections,
            header_timeout: app.config.header_timeout,
        };
        let hub = crate::ws::spawn_hub(&edge);
        let task = tokio::spawn(crate::http::serve::serve(listener, router, limits, async move {
            let _ = stopped.await;
        }));
        let metrics = match app.config.metrics_listen {
            None => None,
            Some(address) => {
                let listener =
                    TcpListener::bind(address).await.map_err(|source| StartError::Listen { address, source })?;
                let addr = listener.local_addr().map_err(|source| StartError::Listen { address, source })?;
                let (shutdown, stopped) = oneshot::channel::<()>();
                let task = tokio::spawn(crate::http::serve::serve(
                    listener,
                    crate::http::metrics::router(edge.clone()),
                    crate::http::serve::ConnectionLimits { max_connections: 16, header_timeout: limits.header_timeout },
                    async move {
                        let _ = stopped.await;
                    },
                ));
                Some(MetricsListener { addr, shutdown, task })
            }
        };
        let upload_sweeper = crate::uploads::spawn_sweeper(&app);
        let dispatcher = app.runs.start();
        let trigger_monitors = Some(crate::triggers::spawn_monitors(&app));
        let limits_sweeper = tokio::spawn({
            let app = Arc::downgrade(&app);
            async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
                loop {
                    every.tick().await;
                    match app.upgrade() {
                        Some(app) => app.limits.forget_idle(),
                        None => break,
                    }
                }
            }
        });
        Ok(Self {
            addr,
            edge,
            shutdown: Some(shutdown),
            task,
            upload_sweeper,
            hub,
            dispatcher,
            trigger_monitors,
            metrics,
            limits_sweeper,
        })
    }

    /// The address of the metrics listener, when `--metrics-listen` asked for one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|metrics| metrics.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The app (tests inspect the database or bus through it).
    pub fn app(&self) -> &Arc<App> {
        &self.edge.app
    }

    /// Closes WebSockets (1001), asks executing runs to end (the next start requeues them), stops
    /// accepting connections, finishes in-flight requests, then closes the database.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(monitors) = self.trigger_monitors.take() {
            monitors.stop().await;
        }
        self.edge.live.shut_down(std::time::Duration::from_secs(5)).await;
        let _ = (&mut self.hub).await;
        // Before the requests: an inline run's request answers once its run stopped.
        self.edge.app.runs.shutdown().await;
        let _ = (&mut self.dispatcher).await;
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let served = (&mut self.task).await.unwrap_or_else(|error| Err(std::io::Error::other(error)));
        if let Some(metrics) = self.metrics.take() {
            let _ = metrics.shutdown.send(());
            let _ = metrics.task.await;
        }
        self.upload_sweeper.abort();
        self.limits_sweeper.abort();
        let db = self.edge.app.db.clone();
        tokio::task::spawn_blocking(move || db.close()).await.map_err(std::io::Error::other)?;
        served
    }
}

/// The run engine's consumers (`runs::RunHooks`): trigger chains watch run ends, and plan steps
/// settle with the runs delegated for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Consumers;

impl RunHooks for Consumers {
    fn run_ended(&self, conn: &Connection, run_id: &str) -> ApiResult<bool> {
        crate::triggers::chain::settle_unwatched(conn, run_id)
    }

    fn session_quiet(&self, conn: &Connection, session_id: &str, succeeded: bool, now_ms: i64) -> ApiResult<bool> {
        crate::runtime::plan::close_running_steps(conn, session_id, succeeded, now_ms)
    }

    fn step_done(&self, conn: &Connection, session_id: &str, step_id: &str, now_ms: i64) -> ApiResult<bool> {
        crate::runtime::plan::settle_step(conn, session_id, step_id, now_ms)
    }
}

/// The run engine's one executor: agent turns to the model runtime, workflow runs to the
/// script pump.
#[derive(Debug)]
struct ByKind {
    agent: crate::runtime::AgentExecutor,
    workflow: crate::workflows::run::WorkflowExecutor,
}

impl crate::runs::engine::Executor for ByKind {
    fn execute(
        &self,
        run: crate::runs::engine::Claimed,
        stop: crate::runs::engine::StopSignal,
    ) -> futures_util::future::BoxFuture<'static, crate::runs::engine::Outcome> {
        use crate::runs::engine::Executor;
        // Called as trait functions: `.execute(` reads as SQL to the layer test.
        match run.kind {
            seed_agents_protocol::generated::RunInfoKind::Workflow => Executor::execute(&self.workflow, run, stop),
            _ => Executor::execute(&self.agent, run, stop),
        }
    }
}

/// On PostgreSQL: refuses to start when the stored secrets do not open with the data directory's
/// key. With SQLite the database and the key live in one directory and start together; the
/// database on a PostgreSQL server outlives a data directory, and a new one would make a new key.
async fn check_key_opens_secrets(app: &Arc<App>) -> Result<(), StartError> {
    let reader = app.clone();
    let read = app.db.read(move |conn| crate::ops::rotate::unopened(conn, &reader.secrets));
    let (total, unopened) = read.await.map_err(|error| {
        StartError::KeyRotation(format!("cannot read the stored secrets to check the key: {}", error.message()))
    })?;
    if unopened > 0 {
        let key_file = app.config.data_dir.join(SecretKey::FILE_NAME).display().to_string();
        return Err(StartError::KeyMismatch { unopened, total, key_file });
    }
    Ok(())
}
