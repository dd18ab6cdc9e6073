//! `GET /metrics` on the `--metrics-listen` address (server/README.md, "Metrics"): what the server
//! counts, in the Prometheus text format (OpenMetrics) written by `prometheus-client`.
//!
//! The counts are plain atomics kept beside what they count (`http::requests` for the edge's,
//! the writer's in `db`, the model client's, the WebSockets', `telemetry` for the runtime and
//! triggers); the
//! store-backed gauges (runs by state, queue depth, uploads in flight) are read on a reader
//! connection at scrape time. Every label value comes from a closed set: action names of the
//! protocol (`other` for anything else), HTTP statuses, error kinds, bucket names.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::edge::Edge;
use crate::telemetry::{FIRING_KINDS, HistogramSnapshot};

/// The metrics routes (served on their own listener, never on the API's).
pub(crate) fn router(edge: Arc<Edge>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(edge)
}

/// `GET /metrics`.
async fn metrics(State(edge): State<Arc<Edge>>) -> Response {
    let scrape = match Scrape::take(&edge).await {
        Ok(scrape) => scrape,
        Err(error) => {
            tracing::warn!(%error, "metrics scrape could not read the database");
            return (StatusCode::SERVICE_UNAVAILABLE, "the database could not be read\n").into_response();
        }
    };
    let mut registry = Registry::with_prefix("seed_agents");
    registry.register_collector(Box::new(scrape));
    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::error!(%error, "metrics could not be encoded");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

/// Everything one scrape reports, read first (the database gauges need `.await`), then encoded.
#[derive(Debug)]
struct Scrape {
    /// `(action, status, count)` for every pair seen.
    requests: Vec<(&'static str, u16, u64)>,
    /// `(action, latency)` for every action seen.
    latency: Vec<(&'static str, HistogramSnapshot)>,
    batch_size: HistogramSnapshot,
    commit_seconds: HistogramSnapshot,
    /// `(state, runs)` for every run status.
    runs: Vec<(&'static str, i64)>,
    queue_depth: i64,
    turns: HistogramSnapshot,
    provider_errors: Vec<(&'static str, u64)>,
    websockets_open: u64,
    frames_dropped: u64,
    uploads_in_flight: i64,
    trigger_firings: Vec<(&'static str, u64)>,
    body_budget_in_use: u64,
    body_budget: u64,
    rate_limited: Vec<(&'static str, u64)>,
}

/// Every run status, so each scrape reports all of them (a state with no runs is a 0).
const RUN_STATES: [&str; 7] = ["queued", "claimed", "running", "waiting", "succeeded", "failed", "canceled"];

impl Scrape {
    async fn take(edge: &Edge) -> crate::error::ApiResult<Self> {
        let app = &edge.app;
        let now = app.clock.now_ms();
        let (counted, queue_depth) = app.db.read(move |conn| crate::runs::store::count_by_status(conn, now)).await?;
        let runs = RUN_STATES
            .iter()
            .map(|state| {
                let count = counted.iter().find(|(status, _)| status == state).map_or(0, |(_, count)| *count);
                (*state, count)
            })
            .collect();
        let uploads_in_flight = crate::uploads::in_flight(app).await?;
        let requests = edge.requests.counts().collect();
        let latency = edge.requests.latencies().collect();
        let writer = app.db.writer_stats();
        Ok(Self {
            requests,
            latency,
            batch_size: writer.batch_size.snapshot(),
            commit_seconds: writer.commit_seconds.snapshot(),
            runs,
            queue_depth,
            turns: app.telemetry.turns.snapshot(),
            provider_errors: app.model.errors().map(|(kind, count)| (kind.as_str(), count)).collect(),
            websockets_open: edge.live.open_sockets() as u64,
            frames_dropped: edge.live.dropped.load(std::sync::atomic::Ordering::Relaxed),
            uploads_in_flight,
            trigger_firings: FIRING_KINDS
                .iter()
                .zip(app.telemetry.trigger_firings.iter())
                .map(|(kind, counter)| (*kind, counter.get()))
                .collect(),
            body_budget_in_use: edge.bodies.in_use() as u64,
            body_budget: edge.bodies.total() as u64,
            rate_limited: app.limits.refused().map(|(bucket, count)| (bucket.as_str(), count)).collect(),
        })
    }
}

fn counter(encoder: &mut MetricEncoder<'_>, value: u64) -> std::fmt::Result {
    encoder.encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn histogram(encoder: &mut MetricEncoder<'_>, snapshot: &HistogramSnapshot) -> std::fmt::Result {
    encoder.encode_histogram::<NoLabelSet>(snapshot.sum, snapshot.count, &snapshot.buckets, None)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let seconds = Some(&Unit::Seconds);
        let mut family = encoder.encode_descriptor(
            "http_requests",
            "Signed requests answered, by action and HTTP status",
            None,
            MetricType::Counter,
        )?;
        for (action, status, count) in &self.requests {
            let status = status.to_string();
            let labels = [("action", *action), ("status", status.as_str())];
            counter(&mut family.encode_family(&labels)?, *count)?;
        }
        let mut family = encoder.encode_descriptor(
            "http_request_duration",
            "Time from a signed request's arrival to its answer, by action",
            seconds,
            MetricType::Histogram,
        )?;
        for (action, snapshot) in &self.latency {
            histogram(&mut family.encode_family(&[("action", *action)])?, snapshot)?;
        }
        histogram(
            &mut encoder.encode_descriptor(
                "db_write_batch_size",
                "Writes committed together by the database writer, per commit",
                None,
                MetricType::Histogram,
            )?,
            &self.batch_size,
        )?;
        histogram(
            &mut encoder.encode_descriptor(
                "db_commit_duration",
                "Time of one group commit, from BEGIN to the end of COMMIT (fsync included)",
                seconds,
                MetricType::Histogram,
            )?,
            &self.commit_seconds,
        )?;
        let mut family =
            encoder.encode_descriptor("runs", "Runs in the database, by state", None, MetricType::Gauge)?;
        for (state, count) in &self.runs {
            family.encode_family(&[("state", *state)])?.encode_gauge(count)?;
        }
        encoder
            .encode_descriptor("run_queue_depth", "Queued runs due to be claimed now", None, MetricType::Gauge)?
            .encode_gauge(&self.queue_depth)?;
        histogram(
            &mut encoder.encode_descriptor(
                "turn_duration",
                "Time of one agent run execution, from its claim until it ends, parks or stops",
                seconds,
                MetricType::Histogram,
            )?,
            &self.turns,
        )?;
        let mut family = encoder.encode_descriptor(
            "provider_errors",
            "Failed model steps, by kind of failure",
            None,
            MetricType::Counter,
        )?;
        for (kind, count) in &self.provider_errors {
            counter(&mut family.encode_family(&[("type", *kind)])?, *count)?;
        }
        encoder
            .encode_descriptor("websockets_open", "WebSockets open now", None, MetricType::Gauge)?
            .encode_gauge(&self.websockets_open)?;
        counter(
            &mut encoder.encode_descriptor(
                "websocket_frames_dropped",
                "Frames not queued because their socket fell behind (the socket is closed)",
                None,
                MetricType::Counter,
            )?,
            self.frames_dropped,
        )?;
        encoder
            .encode_descriptor(
                "uploads_in_flight",
                "Chunked uploads begun and not yet committed, aborted or expired",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&self.uploads_in_flight)?;
        let mut family = encoder.encode_descriptor(
            "trigger_firings",
            "Trigger firings recorded, by what they started",
            None,
            MetricType::Counter,
        )?;
        for (kind, count) in &self.trigger_firings {
            counter(&mut family.encode_family(&[("kind", *kind)])?, *count)?;
        }
        encoder
            .encode_descriptor(
                "body_budget_in_use",
                "Bytes of request bodies held now (--body-budget-bytes)",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?
            .encode_gauge(&self.body_budget_in_use)?;
        encoder
            .encode_descriptor(
                "body_budget",
                "The body budget (--body-budget-bytes)",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?
            .encode_gauge(&self.body_budget)?;
        let mut family = encoder.encode_descriptor(
            "rate_limited",
            "Requests refused by a per-account rate limit, by bucket",
            None,
            MetricType::Counter,
        )?;
        for (bucket, count) in &self.rate_limited {
            counter(&mut family.encode_family(&[("bucket", *bucket)])?, *count)?;
        }
        Ok(())
    }
}
