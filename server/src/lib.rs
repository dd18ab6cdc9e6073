//! The Seed Agents server.
//!
//! Not built yet: this crate exists so the workspace layout is fixed from the start. The server
//! core (signed action endpoint, verification, SQLite store, agents and sessions) is the next
//! issue. Until then the crate only re-exports the protocol it will serve.

pub use seed_agents_protocol as protocol;
