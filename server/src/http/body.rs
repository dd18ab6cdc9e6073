//! Reading an unauthenticated request body without letting it take the server's memory or time.
//!
//! A body is nobody's until its signature verifies, which needs every byte of it. So before
//! that, three things bound what a body may cost:
//!
//! - **a limit per action, decided from the start of the body** ([`limit_for`], of the server's
//!   core crate: ordinary actions get
//!   [`ORDINARY_LIMIT`](seed_agents_server_core::body::ORDINARY_LIMIT), the ones that carry a
//!   file inline more). A declared `Content-Length` over the limit is refused before a byte is read; a body
//!   that runs past it, as soon as it does.
//! - **a server-wide budget of body bytes** ([`BodyBudget`]): a body reserves its declared
//!   length (or each frame as it comes) before its bytes are read, and holds the reservation
//!   until its request is answered (a valid signature costs an attacker nothing: any key signs,
//!   so verified bytes are not free either). Over budget the request is answered 503 with
//!   `Retry-After`, not with more memory.
//! - **time**: after the headers, the first body bytes must come within `body_timeout`, every
//!   later frame too, and the whole body must keep up an average of `body_min_rate` bytes per
//!   second past that allowance (the deadline is `start + body_timeout + received / min_rate`,
//!   Apache's `mod_reqtimeout` rule). A client trickling a byte a second is cut after about
//!   `body_timeout`; a large upload on a slow but honest link keeps going.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use http_body_util::BodyExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub(crate) use seed_agents_server_core::body::{BodyLimits, PREFIX_BYTES, limit_for};

use crate::error::{ApiError, ErrorKind};

/// The answer to a body over its limit (upstream has none; the server's own words).
pub(crate) const TOO_LARGE: &str = "Request body is too large";
/// The answer to a body that stalls or trickles.
pub(crate) const TOO_SLOW: &str = "Request body arrived too slowly";
/// The answer when the budget of body bytes is spent.
pub(crate) const BUSY: &str = "The server is receiving too much right now; try again in a moment";

/// The server-wide budget of bytes held by request bodies (from before they are read until their
/// request is answered).
#[derive(Debug, Clone)]
pub(crate) struct BodyBudget {
    /// One permit per KiB.
    permits: Arc<Semaphore>,
    /// The whole budget, in bytes.
    bytes: usize,
}

/// Budget held by one body until its request is answered (dropping it gives the bytes back).
#[derive(Debug)]
pub(crate) struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    budget: BodyBudget,
    kib: u32,
}

impl BodyBudget {
    /// A budget of `bytes` (rounded up to whole KiB).
    pub(crate) fn new(bytes: usize) -> Self {
        let kib = bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        Self { permits: Arc::new(Semaphore::new(kib)), bytes }
    }

    /// Bytes reserved right now (`/metrics`).
    pub(crate) fn in_use(&self) -> usize {
        let total = self.bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        (total - self.permits.available_permits()) * 1024
    }

    /// The whole budget, in bytes.
    pub(crate) fn total(&self) -> usize {
        self.bytes
    }

    /// An empty reservation.
    pub(crate) fn reservation(&self) -> Reservation {
        Reservation { permit: None, budget: self.clone(), kib: 0 }
    }
}

impl Reservation {
    /// Grows the reservation to cover `bytes`; 503 when the budget cannot.
    fn cover(&mut self, bytes: usize) -> Result<(), ApiError> {
        let wanted = u32::try_from(bytes.div_ceil(1024)).map_err(|_| ApiError::unavailable(BUSY))?;
        if wanted <= self.kib {
            return Ok(());
        }
        let more = self.budget.permits.clone().try_acquire_many_owned(wanted - self.kib).map_err(|_| {
            tracing::debug!(bytes, budget = self.budget.bytes, "body budget spent; answering 503");
            ApiError::unavailable(BUSY)
        })?;
        match &mut self.permit {
            Some(permit) => permit.merge(more),
            None => self.permit = Some(more),
        }
        self.kib = wanted;
        Ok(())
    }
}

/// Reads a body under the rules of the module doc. The returned [`Reservation`] holds its
/// bytes' share of the budget: keep it until the request is answered.
pub(crate) async fn read(
    headers: &HeaderMap,
    body: Body,
    limits: &BodyLimits,
    budget: &BodyBudget,
) -> Result<(Vec<u8>, Reservation), ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limits.max_body_bytes) {
        return Err(ApiError::too_large(TOO_LARGE));
    }
    let started = Instant::now();
    let mut reservation = budget.reservation();
    let mut body = body;
    let mut bytes = Vec::new();
    // Decided once the first bytes are in (or the body ended before that).
    let mut limit = None;
    loop {
        let deadline = deadline(started, bytes.len(), limits);
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                tracing::debug!(received = bytes.len(), "request body too slow; cutting it off");
                return Err(ApiError::new(ErrorKind::TimedOut, TOO_SLOW));
            }
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(ApiError::invalid("Invalid CBOR request")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        let received = bytes.len() + data.len();
        if limit.is_some_and(|limit| received > limit) {
            return Err(ApiError::too_large(TOO_LARGE));
        }
        reservation.cover(if limit.is_some() { received.max(declared.unwrap_or(0)) } else { received })?;
        bytes.extend_from_slice(&data);
        if limit.is_none() && received >= PREFIX_BYTES.min(declared.unwrap_or(usize::MAX)) {
            let decided = decide(&bytes, declared, limits)?;
            // The whole declared body is covered (and allocated) at once from here on.
            reservation.cover(received.max(declared.unwrap_or(0)))?;
            if let Some(length) = declared {
                bytes.reserve_exact(length.saturating_sub(received));
            }
            limit = Some(decided);
        }
    }
    if limit.is_none() {
        decide(&bytes, None, limits)?;
    }
    Ok((bytes, reservation))
}

/// The limit for a body starting with `first` (which may be all of it), refusing it when its
/// declared length or what already arrived is over.
fn decide(first: &[u8], declared: Option<usize>, limits: &BodyLimits) -> Result<usize, ApiError> {
    let limit = limit_for(first, limits);
    if declared.is_some_and(|length| length > limit) || first.len() > limit {
        return Err(ApiError::too_large(TOO_LARGE));
    }
    Ok(limit)
}

/// When the next frame must have arrived by, after `received` bytes.
fn deadline(started: Instant, received: usize, limits: &BodyLimits) -> Instant {
    let earned = Duration::from_secs_f64(received as f64 / limits.body_min_rate.max(1) as f64);
    let overall = started + limits.body_timeout + earned;
    overall.min(Instant::now() + limits.body_timeout)
}

#[cfg(test)]
mod tests {
    use seed_agents_server_core::body::ORDINARY_LIMIT;

    use super::*;

    /// The worst legitimate ordinary actions, signed as a client sends them, fit the limit.
    #[tokio::test]
    async fn largest_ordinary_actions_fit() {
        use ipld_core::ipld::Ipld;
        use seed_agents_protocol::generated::{
            AgentDefinition, AgentDefinitionSystemPrompt, AttachmentContentPart, ContextContentPart, CreateAgent,
            MessageSession, MessageSessionContentPart, TextContentPart,
        };
        use seed_agents_protocol::{AgentAction, Ed25519Signer, Signer, UnsignedEnvelope, Value, wire};
        let signer = Ed25519Signer::from_seed(&[1; 32]);
        let signed = async |action: AgentAction| {
            let envelope = UnsignedEnvelope {
                signer: signer.principal(),
                account: signer.principal(),
                protocol: Some(3),
                action: wire::to_ipld(&action).unwrap(),
            };
            envelope.sign(&signer).await.unwrap().len()
        };
        // 64 KiB of markdown as one-character paragraphs (the most blocks a prompt can have),
        // the full 16 KiB of metadata, the most tools.
        let blocks = crate::agents::prompt::markdown_to_blocks(&"a\n\n".repeat(64 * 1024 / 3));
        let metadata =
            (0..16 * 1024 / 32).map(|index| (format!("key-{index:08}"), Value(Ipld::String("v".repeat(16)))));
        let definition = AgentDefinition {
            extra: Default::default(),
            enabled_models: None,
            mcp_servers: Some(vec!["m".repeat(32); 16]),
            metadata: Some(metadata.collect()),
            model: "m".repeat(256),
            model_provider: "p".repeat(256),
            name: "n".repeat(256),
            reasoning_level: None,
            signing_key: None,
            signing_keys: None,
            system_prompt: AgentDefinitionSystemPrompt::Array(blocks),
            thoroughness: None,
            tools: Some(vec!["t".repeat(128); 32]),
        };
        let create =
            signed(AgentAction::CreateAgent(CreateAgent { client_request_id: Some("r".repeat(64)), definition })).await;
        // 64 KiB of text, 64 context lines of 2 KiB, 16 attachments.
        let mut content = vec![MessageSessionContentPart::TextContentPart(TextContentPart {
            extra: Default::default(),
            blocks: None,
            client_message_id: None,
            text: "x".repeat(64 * 1024),
        })];
        content.push(MessageSessionContentPart::ContextContentPart(ContextContentPart {
            extra: Default::default(),
            lines: vec!["l".repeat(2048); 64],
        }));
        content.extend((0..16).map(|_| {
            MessageSessionContentPart::AttachmentContentPart(AttachmentContentPart {
                extra: Default::default(),
                id: "0".repeat(64).into(),
            })
        }));
        let message = signed(AgentAction::MessageSession(MessageSession {
            client_message_id: Some("m".repeat(64)),
            content,
            session_id: "s".repeat(36).into(),
        }))
        .await;
        println!(
            "CreateAgent with the most prompt blocks: {create} bytes; the largest MessageSession: {message} bytes"
        );
        assert!(create < ORDINARY_LIMIT / 2 && message < ORDINARY_LIMIT / 2, "{create} / {message}");
    }

    #[test]
    fn the_budget_is_shared_and_given_back() {
        let budget = BodyBudget::new(10 * 1024);
        let mut first = budget.reservation();
        first.cover(6 * 1024).unwrap();
        first.cover(6 * 1024).unwrap();
        assert_eq!(budget.in_use(), 6 * 1024);
        let mut second = budget.reservation();
        assert_eq!(second.cover(5 * 1024).unwrap_err().kind(), ErrorKind::Unavailable);
        second.cover(4 * 1024).unwrap();
        drop(first);
        assert_eq!(budget.in_use(), 4 * 1024);
        second.cover(10 * 1024).unwrap();
        drop(second);
        assert_eq!(budget.in_use(), 0);
    }
}
