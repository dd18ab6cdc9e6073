#![doc = include_str!("../README.md")]

pub mod access;
pub mod agents;
pub mod app;
pub mod attachments;
pub mod auth;
pub mod bus;
pub mod caller;
pub mod clock;
pub mod collaborators;
pub mod config;
pub mod db;
pub mod dispatch;
pub mod durable;
mod edge;
pub mod error;
pub mod hm;
pub mod http;
pub mod idempotency;
pub mod identities;
pub mod leftovers;
pub mod memory;
pub mod model;
pub mod providers;
pub mod runs;
pub mod runtime;
pub mod secrets;
mod server;
pub mod sessions;
pub mod signers;
pub mod tools;
pub mod triggers;
pub mod uploads;
pub mod validate;
pub mod verbs;
pub mod ws;

#[cfg(test)]
mod layering;

pub use app::{App, StartError};
pub use clock::Clock;
pub use config::Config;
pub use seed_agents_protocol as protocol;
pub use server::RunningServer;
