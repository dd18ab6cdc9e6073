#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]
// The server's API is `RunningServer` and its configuration; its modules are private, and their
// docs (rendered with `--document-private-items`) link to each other freely.
#![allow(rustdoc::private_intra_doc_links)]

mod access;
mod agents;
mod app;
mod attachments;
mod auth;
mod bus;
mod caller;
mod clock;
mod collaborators;
mod config;
mod db;
mod dispatch;
mod durable;
mod edge;
mod error;
mod hm;
mod http;
mod idempotency;
mod identities;
mod leftovers;
mod limits;
mod mcp;
mod memory;
mod model;
mod ops;
mod providers;
mod quota;
mod runs;
mod runtime;
mod sandbox;
mod secrets;
mod server;
mod sessions;
mod signers;
mod telemetry;
mod tools;
mod triggers;
mod uploads;
mod validate;
mod verbs;
mod workflows;
mod ws;

#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod layering;

pub use app::StartError;
pub use clock::Clock;
pub use config::{Config, ExecBackend, LogFormat};
pub use ops::{Command, run as run_command};
pub use seed_agents_protocol as protocol;
pub use server::RunningServer;
