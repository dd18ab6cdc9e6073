#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod client;
mod error;
mod generated;
pub mod subscription;
mod upload;

pub use client::{
    Client, ClientBuilder, Clock, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT, MAX_RETRY_AFTER, default_http_client,
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
