#![doc = include_str!("../README.md")]

pub mod access;
pub mod agents;
pub mod app;
pub mod attachments;
pub mod auth;
pub mod bus;
pub mod clock;
pub mod collaborators;
pub mod config;
pub mod db;
pub mod dispatch;
pub mod durable;
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
pub mod sessions;
pub mod tools;
pub mod triggers;
pub mod uploads;
pub mod validate;
pub mod verbs;
pub mod ws;

pub use app::{App, RunningServer, StartError};
pub use clock::Clock;
pub use config::Config;
pub use seed_agents_protocol as protocol;
