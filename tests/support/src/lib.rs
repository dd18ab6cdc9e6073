//! What the workspace's tests and benchmarks share, in one crate instead of files included with
//! `#[path]` (each includer compiled its own copy, with its own `dead_code` allowances).
//!
//! Layout (every module but the last two needs the `server` feature):
//!
//! - `server`: the server in this process on `127.0.0.1:0` over a temporary data directory
//!   (`TestServer`), users with their own keys and SDK clients (`User`), raw signed CBOR for
//!   what the SDK would never send. Re-exported at the root.
//! - `process`: the real `seed-agents-server` binary as a child process, started, waited for,
//!   SIGKILLed or SIGTERMed, reaped on drop; `crash`: what the kill-and-restart tests share.
//! - `db`: a test server's database read and written through the server's own SQL interface
//!   (SQLite or PostgreSQL alike).
//! - `bench`: child-process servers for the benchmarks and what `/proc` says about them.
//! - `fixtures`: fixed inputs (a provider, an agent definition, a message).
//! - `provider`: a scripted model provider on loopback, speaking each codec's stream (chat
//!   completions, the Responses API, Anthropic Messages, Gemini).
//! - `hm`, `searxng`, `oauth`: fake Hypermedia, SearXNG and OAuth issuer servers on loopback.
//! - `runs`: a scripted run executor and runs staged through the engine's own SQL.
//! - `transcript`: a session's log as short lines; `webhook`: Standard Webhooks signing.
//! - `wait`: polling a condition until a deadline, instead of sleeping for a guessed time.
//! - `schema`: the merged schema definitions and one example value per definition (the
//!   round-trip and payload snapshot tests); `vectors`: the signing vectors' JSON notation
//!   (the protocol's and the SDK's vector tests).
//!
//! The binary's path is a parameter wherever one is started: Cargo tells only the server crate's
//! own tests and benches where it is (`env!("CARGO_BIN_EXE_seed-agents-server")`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report
// Test helpers hold tasks, channels and closures; nothing prints them.
#![allow(missing_debug_implementations)]

#[cfg(feature = "server")]
pub mod bench;
#[cfg(feature = "server")]
pub mod crash;
#[cfg(feature = "server")]
pub mod db;
#[cfg(feature = "server")]
pub mod fixtures;
#[cfg(feature = "server")]
pub mod hm;
#[cfg(feature = "server")]
pub mod mcp;
#[cfg(feature = "server")]
pub mod oauth;
#[cfg(feature = "server")]
pub mod process;
#[cfg(feature = "server")]
pub mod provider;
#[cfg(feature = "server")]
pub mod runs;
#[cfg(feature = "server")]
pub mod searxng;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod transcript;
#[cfg(feature = "server")]
pub mod wait;
#[cfg(feature = "server")]
pub mod webhook;

pub mod schema;
pub mod vectors;

#[cfg(feature = "server")]
pub use fixtures::{custom_provider_config, definition, provider_config, say};
#[cfg(feature = "server")]
pub use server::{TestServer, User, action_map, api_error, error_body, now_ms, postgres_url, route_provider};
