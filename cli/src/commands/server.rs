//! `health` and `version`: what the server and this tool are, without signing anything.

use std::time::Duration;

use seed_agents_sdk::protocol::AGENTS_PROTOCOL_VERSION;

use super::Context;
use crate::failure::{Class, Failure, class_of_status, root_cause};
use crate::output::{self, Output};

/// How long `health` waits for an answer.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);

/// `GET <server>/api/health`, printed as JSON; a non-2xx answer fails by its status.
pub async fn health(context: &Context) -> Result<(), Output> {
    let base = context.server.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(Failure::usage(format!("--server {}: not an http(s) URL", context.server)).into());
    }
    let url = format!("{base}/api/health");
    let http = seed_agents_sdk::default_http_client()?;
    let unreachable = |error: reqwest::Error| Failure::new(Class::Unreachable, root_cause(&error));
    let response = http.get(&url).timeout(HEALTH_TIMEOUT).send().await.map_err(unreachable)?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(unreachable)?;
    if !(200..300).contains(&status) {
        let text = String::from_utf8_lossy(&body);
        return Err(
            Failure::new(class_of_status(status), format!("GET {url} answered {status}: {}", text.trim())).into()
        );
    }
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|error| {
        Failure::new(Class::BadAnswer, format!("GET {url} answered something other than JSON: {error}"))
    })?;
    output::json_pretty(&value)
}

/// This tool's version and the protocol version it declares in every envelope.
pub fn version() -> Result<(), Output> {
    output::json_pretty(&serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": AGENTS_PROTOCOL_VERSION,
    }))
}
