//! The edge's state: the [`App`] the features share, plus what only the transports need (the
//! decompressed signer keys, the replay guard, the budget of request bodies, the live sockets).
//!
//! Features never see this type: they receive the `App` and a `Caller`.

use std::sync::Arc;

use seed_agents_protocol::envelope::KeyCache;

use crate::app::App;
use crate::auth::replay::ReplayGuard;
use crate::http::body::{BodyBudget, BodyLimits};
use crate::http::requests::RequestStats;
use crate::ws::live::{Live, WsLimits};

/// The state of the HTTP routes and WebSocket sockets.
#[derive(Debug)]
pub(crate) struct Edge {
    /// What the features share.
    pub(crate) app: Arc<App>,
    /// Decompressed signer keys (`auth::verify`).
    pub(crate) keys: KeyCache,
    /// Signatures seen within the timestamp window (`auth::verify`).
    pub(crate) replay: ReplayGuard,
    /// Bytes held by request bodies until their request is answered (`http::body`).
    pub(crate) bodies: BodyBudget,
    /// WebSocket subscriptions; also the app's session-frame sink (`bus::SessionSink`).
    pub(crate) live: Arc<Live>,
    /// Requests answered, by action and status (`/metrics`).
    pub(crate) requests: RequestStats,
}

impl Edge {
    /// The edge of `app`, bounded by its configuration.
    pub(crate) fn new(app: Arc<App>) -> Self {
        let config = &app.config;
        if config.max_body_bytes > config.body_budget_bytes {
            tracing::warn!(
                max_body_bytes = config.max_body_bytes,
                body_budget_bytes = config.body_budget_bytes,
                "--max-body-bytes is over --body-budget-bytes: bodies larger than the budget are refused"
            );
        }
        let bodies = BodyBudget::new(config.body_budget_bytes);
        let live = Arc::new(Live::new(WsLimits::of(config)));
        Self {
            keys: KeyCache::new(),
            replay: ReplayGuard::new(ReplayGuard::DEFAULT_CAPACITY),
            bodies,
            live,
            requests: RequestStats::default(),
            app,
        }
    }

    /// How request bodies are bounded, from the configuration.
    pub(crate) fn body_limits(&self) -> BodyLimits {
        let config = &self.app.config;
        BodyLimits {
            // A body the budget can never hold is too large, not "busy".
            max_body_bytes: config.max_body_bytes.min(config.body_budget_bytes),
            body_timeout: config.body_timeout,
            body_min_rate: config.body_min_rate,
        }
    }
}
