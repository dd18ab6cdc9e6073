//! Reading an unauthenticated request body without letting it take the server's memory or time.
//!
//! A body is nobody's until its signature verifies, which needs every byte of it. So before
//! that, three things bound what a body may cost:
//!
//! - **a limit per action, decided from the start of the body.** The envelope is canonical
//!   DAG-CBOR, so its keys come sorted (`sig`, `type`, `action`, …) and the action's name is its
//!   first key: it sits within the first couple of hundred bytes. [`limit_for`] gives ordinary
//!   actions [`ORDINARY_LIMIT`] and only the actions that carry a file inline more
//!   ([`action_limit`]). A declared `Content-Length` over the limit is refused before a byte is
//!   read; a body that runs past it, as soon as it does.
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

use crate::error::{ApiError, ErrorKind};

/// The largest body of an action that carries no file: 4 MiB. The largest legitimate ones fit
/// with room: the worst is a `CreateAgent`/`UpdateAgent` whose 64 KiB system prompt is sent as
/// one block per character (about 1.5 MiB with 16 KiB of metadata); a `MessageSession` with
/// 64 KiB of text, 64 context lines of 2 KiB and 16 attachments, or a 64 KiB `SetSecret`, are
/// far smaller (the `largest_ordinary_actions_fit` test measures them).
pub(crate) const ORDINARY_LIMIT: usize = 4 << 20;

/// Room for an envelope around a file: principals, signature, names, paths, ids.
pub(crate) const ENVELOPE_SLACK: usize = 64 * 1024;

/// How many leading bytes are enough to find the action's name.
const PREFIX_BYTES: usize = 512;

/// The answer to a body over its limit (upstream has none; the server's own words).
pub(crate) const TOO_LARGE: &str = "Request body is too large";
/// The answer to a body that stalls or trickles.
pub(crate) const TOO_SLOW: &str = "Request body arrived too slowly";
/// The answer when the budget of body bytes is spent.
pub(crate) const BUSY: &str = "The server is receiving too much right now; try again in a moment";

/// How bodies are bounded (from the server's configuration).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// The limit of the actions that carry a file inline (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Time for the first body bytes and for each later frame (`--body-timeout`).
    pub body_timeout: Duration,
    /// The average rate a body must keep up past `body_timeout` (`--body-min-rate`), bytes/s.
    pub body_min_rate: u64,
}

/// The limit of the action named `name`: ordinary actions get [`ORDINARY_LIMIT`]; the ones that
/// carry a file get what that file may be, plus the envelope around it.
pub fn action_limit(name: &str, max_body_bytes: usize) -> usize {
    let file = |bytes: usize| bytes.saturating_add(ENVELOPE_SLACK).min(max_body_bytes);
    match name {
        "AppendFileUploadChunk" => file(crate::uploads::MAX_CHUNK_BYTES as usize),
        "UploadSessionAttachment" => file(crate::attachments::MAX_ATTACHMENT_BYTES as usize),
        // Memory files have no size limit of their own, and a user verb may write one; an icon
        // has none either. The operator's ceiling is theirs.
        "WriteAgentMemoryFile" | "InvokeSessionTool" | "UpdateSigningIdentity" => max_body_bytes,
        _ => ORDINARY_LIMIT.min(max_body_bytes),
    }
}

/// What the first bytes of a body say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prefix<'a> {
    /// The action's name.
    Action(&'a str),
    /// Not enough bytes yet, or an envelope laid out unusually: no name to go by.
    Unknown,
    /// Not the start of a CBOR map: whatever it is, it is not an envelope.
    NotEnvelope,
}

/// Finds the action's name in the first bytes of an envelope without decoding the rest.
///
/// Walks the top-level map: small values before `action` are skipped (a canonical envelope has
/// only `sig` and `type` there), and the action map's first key must be `_`. Anything else
/// (a long value, a truncated prefix, another key order) is [`Prefix::Unknown`], which gets the
/// ordinary limit; the full decoder judges the body later.
pub fn parse_prefix(bytes: &[u8]) -> Prefix<'_> {
    let mut reader = Reader { bytes, at: 0 };
    match reader.head() {
        Some((5, entries)) => {
            for _ in 0..entries {
                let Some(key) = reader.text() else { return Prefix::Unknown };
                if key == "action" {
                    return match (reader.head(), reader.text()) {
                        (Some((5, _)), Some("_")) => reader.text().map_or(Prefix::Unknown, Prefix::Action),
                        _ => Prefix::Unknown,
                    };
                }
                if !reader.skip_small() {
                    return Prefix::Unknown;
                }
            }
            Prefix::Unknown
        }
        Some(_) => Prefix::NotEnvelope,
        None if bytes.is_empty() => Prefix::Unknown,
        None => Prefix::NotEnvelope,
    }
}

/// The limit for a body that starts with `prefix` (see [`parse_prefix`]).
pub fn limit_for(prefix: &[u8], limits: &BodyLimits) -> usize {
    match parse_prefix(prefix) {
        Prefix::Action(name) => action_limit(name, limits.max_body_bytes),
        Prefix::Unknown | Prefix::NotEnvelope => ORDINARY_LIMIT.min(limits.max_body_bytes),
    }
}

/// A cursor over CBOR heads, enough for [`parse_prefix`].
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A definite-length head: `(major type, argument)`. `None` at the end of the bytes or on
    /// an indefinite length or a reserved value.
    fn head(&mut self) -> Option<(u8, u64)> {
        let initial = *self.bytes.get(self.at)?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        let width = match info {
            0..=23 => 0,
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            _ => return None,
        };
        let argument = if width == 0 {
            u64::from(info)
        } else {
            let raw = self.bytes.get(self.at + 1..self.at + 1 + width)?;
            raw.iter().fold(0u64, |value, byte| (value << 8) | u64::from(*byte))
        };
        self.at += 1 + width;
        Some((major, argument))
    }

    /// A text string that lies wholly within the bytes.
    fn text(&mut self) -> Option<&'a str> {
        let (major, length) = self.head()?;
        if major != 3 {
            return None;
        }
        let raw = self.take(length)?;
        std::str::from_utf8(raw).ok()
    }

    fn take(&mut self, length: u64) -> Option<&'a [u8]> {
        let end = self.at.checked_add(usize::try_from(length).ok()?)?;
        let raw = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(raw)
    }

    /// Skips an integer, a simple value, or a byte or text string that lies within the bytes.
    fn skip_small(&mut self) -> bool {
        match self.head() {
            Some((0 | 1 | 7, _)) => true,
            Some((2 | 3, length)) => self.take(length).is_some(),
            _ => false,
        }
    }
}

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

    /// Bytes reserved right now.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        let total = self.bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        (total - self.permits.available_permits()) * 1024
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
    use super::*;

    fn envelope_prefix(action: &str) -> Vec<u8> {
        let mut bytes = vec![0xa5, 0x63];
        bytes.extend(b"sig");
        bytes.extend([0x58, 64]);
        bytes.extend([0u8; 64]);
        bytes.push(0x64);
        bytes.extend(b"type");
        bytes.push(0x6c);
        bytes.extend(b"AgentsAction");
        bytes.push(0x66);
        bytes.extend(b"action");
        bytes.extend([0xa3, 0x61, b'_']);
        bytes.push(0x60 + action.len() as u8);
        bytes.extend(action.as_bytes());
        bytes
    }

    #[test]
    fn the_action_name_is_found_in_the_first_bytes() {
        let prefix = envelope_prefix("AppendFileUploadChunk");
        assert_eq!(parse_prefix(&prefix), Prefix::Action("AppendFileUploadChunk"));
        assert_eq!(parse_prefix(&prefix[..prefix.len() - 3]), Prefix::Unknown, "truncated");
        assert_eq!(parse_prefix(&[0u8; 64]), Prefix::NotEnvelope);
        assert_eq!(parse_prefix(b""), Prefix::Unknown);
        assert_eq!(parse_prefix(&[0x1f]), Prefix::NotEnvelope, "reserved head");
        // A map whose first value is too long to skip within the prefix.
        assert_eq!(parse_prefix(&[0xa1, 0x61, b'x', 0x5a, 0xff, 0xff, 0xff, 0xff]), Prefix::Unknown);
    }

    #[test]
    fn limits_follow_the_action() {
        let limits =
            BodyLimits { max_body_bytes: 128 << 20, body_timeout: Duration::from_secs(10), body_min_rate: 16 * 1024 };
        assert_eq!(limit_for(&envelope_prefix("ListAgents"), &limits), ORDINARY_LIMIT);
        assert_eq!(limit_for(&envelope_prefix("AppendFileUploadChunk"), &limits), (8 << 20) + ENVELOPE_SLACK);
        assert_eq!(limit_for(&envelope_prefix("UploadSessionAttachment"), &limits), (100 << 20) + ENVELOPE_SLACK);
        assert_eq!(limit_for(&envelope_prefix("WriteAgentMemoryFile"), &limits), 128 << 20);
        assert_eq!(limit_for(&[0u8; 600], &limits), ORDINARY_LIMIT, "not an envelope: the ordinary limit");
        let small = BodyLimits { max_body_bytes: 4096, ..limits };
        assert_eq!(limit_for(&envelope_prefix("AppendFileUploadChunk"), &small), 4096, "the flag is the ceiling");
    }

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
