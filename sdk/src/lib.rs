//! Rust SDK for the Seed Agents signed action API.
//!
//! # Brief overview
//!
//! A [`Client`] talks to one server for one account. Every call builds the action, adds `ts`,
//! signs the canonical DAG-CBOR envelope with its [`Signer`], posts it to `/api/message` and
//! decodes the typed response. There is one typed method per action (generated from the
//! protocol's action table, e.g. [`Client::create_session`]), all over one hand-written
//! [`Client::call`]. Failures come back as one [`Error`] that keeps transport problems, API errors
//! (status, message, `code`), protocol skew and undecodable bodies (raw bytes kept) apart.
//!
//! ```no_run
//! use seed_agents_protocol::generated::ListAgents;
//! use seed_agents_sdk::{Client, Ed25519Signer};
//!
//! # async fn run() -> Result<(), seed_agents_sdk::Error> {
//! let signer = Ed25519Signer::from_seed(&[7; 32]);
//! let client = Client::new("http://127.0.0.1:3050", signer)?;
//! let agents = client.list_agents(ListAgents::new()).await?;
//! println!("{} agents", agents.agents.len());
//! # Ok(())
//! # }
//! ```
//!
//! [`Client::upload`] sends a file of any size in signed chunks with progress, two chunks in
//! flight, retrying transient failures; an upload that stops can be resumed
//! ([`Client::resume_upload`]). [`Client::subscribe`] follows sessions, agents, run trees or the
//! whole account live over one WebSocket, resuming after drops with every session event once and
//! in order (see [`subscription`]). The `seed-agents` command-line tool (crate
//! `seed-agents-cli`) is built on this crate alone.

#![deny(missing_docs)]

mod client;
mod error;
mod generated;
pub mod subscription;
mod upload;

pub use client::{
    Client, ClientBuilder, Clock, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT, default_http_client,
};
pub use error::{DecodeError, Error, ErrorCode};
pub use seed_agents_protocol as protocol;
pub use seed_agents_protocol::{Ed25519Signer, KeyError, Principal, Signer};

/// Every protocol type: actions, responses and the types inside them, generated from the schema.
///
/// One import for callers: `use seed_agents_sdk::types::{CreateSession, ListAgents};`. Build a
/// value with `new(required…)` and chain a setter per optional field; a struct literal would
/// stop compiling when the protocol gains an optional field, `new` and the setters do not:
///
/// ```
/// use seed_agents_sdk::types::{CreateSession, ListAgents};
/// let create = CreateSession::new("agent-1").title("Release notes");
/// assert_eq!(create.title.as_deref(), Some("Release notes"));
/// let list = ListAgents::new(); // nothing required: also `Default`
/// # let _ = list;
/// ```
///
/// Responses and the types inside them keep fields this build does not know in `extra` and send
/// them back unchanged, so get → modify → update loses nothing a newer server added.
pub mod types {
    pub use seed_agents_protocol::generated::*;
}
pub use subscription::{Event, Subscription, SubscriptionBuilder};
pub use upload::{MAX_ATTEMPTS, Progress, WINDOW};
