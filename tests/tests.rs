//! Black-box tests: the real server on an ephemeral loopback port, spoken to over HTTP with
//! signed DAG-CBOR (through the SDK, or raw where the SDK would never send such bytes).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

// The shared test code (servers, fakes, fixtures, waits) is its own crate; `crate::support::…`
// names it in every module.
use seed_agents_test_support as support;

mod authorization;
mod delegate;
mod envelope;
mod fake_hm;
mod features;
mod hypermedia;
mod hypermedia_writes;
mod identities;
mod ipfs;
mod live;
mod memory;
mod pagination;
mod provider_models;
mod runs;
mod runtime;
mod tools;
mod trigger_monitors;
mod trigger_wake;
mod triggers;
mod uploads;
mod verbs;
mod versions;
