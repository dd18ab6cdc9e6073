//! The Seed Agents signed action protocol.
//!
//! # Brief overview
//!
//! Every request to a Seed Agents server is an Ed25519-signed envelope encoded as canonical
//! DAG-CBOR. This crate holds everything both sides of that wire need, and nothing that needs an
//! async runtime or a network:
//!
//! - [`generated`]: one Rust type per action, response and named type of the protocol, generated
//!   from the JSON Schema in `schema/json/` into one file per schema file under `src/generated/`
//!   and re-exported flat (never edit them by hand), with the [`AgentAction`] and
//!   [`AgentResponse`] enums and the [`Action`] table linking each action to its response and its
//!   [`Effect`] (read or write).
//! - [`wire`]: canonical DAG-CBOR encoding and strict decoding.
//! - [`Value`], [`Bytes`], [`Float`], [`Nullable`]: wire distinctions plain Rust types would lose.
//! - [`Principal`]: account and signer identities.
//! - Typed ids ([`AgentId`], [`SessionId`], [`RunId`], [`AccountId`], …), generated from the
//!   schema's `x-ids` table: transparent newtypes over the wire's strings ([`id`] has what they
//!   share).
//! - [`envelope`]: signing ([`UnsignedEnvelope`]) and verification ([`SignedEnvelope`] →
//!   [`VerifiedEnvelope`]) with the upstream error messages.
//! - [`Signer`] and [`Ed25519Signer`].
//! - [`version`]: `AGENTS_PROTOCOL_VERSION`, `MIN_CLIENT_PROTOCOL` and the declared-version rule.
//!
//! ```
//! use seed_agents_protocol::{wire, AgentAction, Ed25519Signer, Signer, UnsignedEnvelope, SignedEnvelope};
//! use seed_agents_protocol::generated::GetAgent;
//!
//! let signer = Ed25519Signer::from_seed(&[1; 32]);
//! let action = AgentAction::GetAgent(GetAgent::new("agent-1"));
//! let mut action = wire::to_ipld(&action).unwrap();
//! if let ipld_core::ipld::Ipld::Map(map) = &mut action {
//!     map.insert("ts".into(), 1_767_225_600_000i64.into());
//! }
//! let envelope = UnsignedEnvelope { signer: signer.principal(), account: signer.principal(), protocol: Some(3), action };
//! let mut bytes = envelope.signing_bytes().unwrap();
//! seed_agents_protocol::envelope::insert_signature(&mut bytes, &signer.sign_now(&envelope.signing_bytes().unwrap())).unwrap();
//! let verified = SignedEnvelope::decode(&bytes).unwrap().verify(1_767_225_600_500).unwrap();
//! assert_eq!(verified.action_name(), "GetAgent");
//! ```

#![deny(missing_docs)]

// Generated code names our own leaf types by their external path (`::seed_agents_protocol::Value`).
extern crate self as seed_agents_protocol;

pub mod action;
pub mod codes;
pub mod envelope;
#[allow(clippy::all, missing_debug_implementations)]
pub mod generated;
pub mod id;
mod ipld_de;
pub mod principal;
pub mod signer;
pub mod value;
pub mod version;
pub mod wire;

pub use action::{Action, ActionInfo, Effect, Response};
pub use envelope::{EnvelopeError, SignedEnvelope, UnsignedEnvelope, VerifiedEnvelope};
pub use generated::ids::*;
pub use generated::{AgentAction, AgentResponse};
pub use id::{IdError, IdFormat};
pub use principal::{Principal, PrincipalError};
pub use signer::{Ed25519Signer, KeyError, Signer, SignerError};
pub use value::{Bytes, Float, Nullable, Value};
pub use version::{AGENTS_PROTOCOL_HEADER, AGENTS_PROTOCOL_VERSION, MIN_CLIENT_PROTOCOL};
