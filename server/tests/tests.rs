//! The server crate's integration tests, in one binary (linking the whole server once instead of
//! once per file). Most start the real `seed-agents-server` binary as a child process
//! ([`support::process`]); Cargo tells only this crate's tests where it is, so tests that need
//! the binary belong here, and tests that can run the server in process belong in the
//! workspace's `tests/` crate.
//!
//! The tests of this binary run side by side on the test harness's threads: each starts its own
//! servers on free ports over its own temporary directories, and nothing here sets an
//! environment variable of this process.
//!
//! `cargo test -p seed-agents-server --test tests <module> -- --nocapture` runs one module and
//! shows the figures the crash and edge tests print.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

// The shared test code (child-process servers, fixtures, the scripted provider, waits) is its own
// crate; `crate::support::…` names it in every module.
use seed_agents_test_support as support;

/// The server binary Cargo built for these tests.
const SERVER_BIN: &str = env!("CARGO_BIN_EXE_seed-agents-server");

// Session creates acknowledged before a SIGKILL survive it, whole and exactly once.
#[cfg(unix)]
mod crash;
// Delegating parents and their children survive SIGKILLs: each result delivered once.
#[cfg(unix)]
mod delegate_crash;
// Workflow runs survive SIGKILLs: completed effects never redone, one signal and child each.
#[cfg(unix)]
mod workflow_crash;
// The HTTP edge under hostile traffic: oversized and slow bodies, slow headers, a spent budget.
#[cfg(unix)]
mod edge;
// The published TypeScript client against `/agents/ws` (needs Node.js: ignored unless asked for;
// `cargo test --workspace --test tests interop_ws -- --ignored` runs them, as CI does).
#[cfg(unix)]
mod interop_ws;
// The binary's own lifecycle: flags, a clean stop on SIGTERM, a newer database refused.
#[cfg(unix)]
mod lifecycle;
// Live updates across SIGKILLs, and a subscriber that stops reading.
#[cfg(unix)]
mod live_restart;
// The model client against the scripted provider: the wire format of both vendors, retries.
mod model_wire;
// The same for Gemini: its wire format, thought signatures through a tool loop, retries.
mod model_wire_google;
// The model client against the scripted provider's OpenAI Responses API: requests, streamed
// answers, encrypted reasoning handed back, retries and failures.
mod responses_wire;
// The operator's commands: a backup under load restored whole, a key rotation killed anywhere,
// doctor's findings.
#[cfg(unix)]
mod ops;
// Streaming turns survive SIGKILLs at random points: durable events stay, in order, once.
#[cfg(unix)]
mod runtime_crash;
// No secret the server holds or makes leaks into its answers, logs, files or outgoing calls.
#[cfg(unix)]
mod secret_scan;
// Webhook firings survive SIGKILLs: none lost, none doubled, each whole.
#[cfg(unix)]
mod trigger_crash;
