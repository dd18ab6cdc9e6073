//! The SDK's integration tests, in one binary: the client against scripted loopback servers (no
//! real server; the workspace's `tests/` crate runs the SDK against that).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

// Calls: envelopes byte for byte as the JS client signs them, every kind of answer as an `Error`.
mod client;
// Stalls, timeouts, retries of what is safe to repeat, unknown fields kept through an update.
mod resilience;
// Subscriptions: duplicates, gaps, reconnects that resume, refused keys, the socket's close.
mod subscription;
