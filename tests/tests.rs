//! Black-box tests: the real server on an ephemeral loopback port, spoken to over HTTP with
//! signed DAG-CBOR (through the SDK, or raw where the SDK would never send such bytes). One
//! binary, a module per surface; tests that need the server as a child process (kills, signals,
//! the binary's own flags) live in `server/tests/` instead, where Cargo says where the binary is.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

// The shared test code (servers, fakes, fixtures, waits) is its own crate; `crate::support::…`
// names it in every module.
use seed_agents_test_support as support;

// Every routed action × seven kinds of caller, as one table checked cell by cell.
mod authorization;
// `continue_session`: a conversation moved to a linked session.
mod continuation;
// Orchestration: delegated children, parked parents resumed with results, plans, cancellation.
mod delegate;
// The message endpoint: every rejection class, replays, and the routes around it.
mod envelope;
// The fake Hypermedia server's own checks (what it refuses, the CIDs it names).
mod fake_hm;
// Each server-core feature through the SDK, happy and failure paths.
mod features;
// `read hm://…`, `read activity:` and `read http(s)://…`, as verbs and in model turns.
mod hypermedia;
// `write hm://…` beyond creating documents: comments, moves, forks, publishing, raw commands.
mod hypermedia_writes;
// Signing identities, against a fake Hypermedia server that checks every blob.
mod identities;
// Memory files uploaded to IPFS through the fake Hypermedia server.
mod ipfs;
// Lambda tools run in the code sandbox, called by a user or a model (docs/sandbox.md).
mod lambdas;
// `/agents/ws` over real sockets: keys × roles, replay then live, limits, pings, shutdown.
mod live;
// MCP servers: both transports, projection, model turns calling their tools.
mod mcp;
// The agent memory filesystem: actions, path rules, reads, events, downloads.
mod memory;
// Operating it: `/metrics`, `/api/ready`, per-account rate limits and the storage quota.
mod operations;
// Keyset pagination: ties on `updatedAt` listed once each, in order.
mod pagination;
// "Sign in with ChatGPT": sign-ins against a fake issuer, subscription turns, token refreshes.
mod provider_oauth;
// `ListProviderModels` against a fixture vendor of each model-list format.
mod provider_models;
// The run engine through the endpoint: retries, stops, and every run action.
mod runs;
// Agent turns end to end against the scripted provider: streaming, tools, titles, queueing.
mod runtime;
// The same on a `google` provider: Gemini's wire, thought signatures through tool loops.
mod runtime_google;
// Agent turns on OpenAI's Responses API: encrypted reasoning through a tool loop, failures.
mod runtime_responses;
// The code sandbox and `execute`: results, limits, escape attempts (needs bubblewrap).
mod sandbox;
// Agent tools: tool documents, `~/tools`, `call`, and turns that use them.
mod tools;
// The schedule and activity monitors, on virtual time and the fake feed.
mod trigger_monitors;
// Wake continuations: a webhook that resumes a parked run, once.
mod trigger_wake;
// `script` and `tool` continuations: root workflow runs, their firings, failure threads.
mod trigger_workflows;
// Triggers: CRUD and validation, webhooks firing runs, run-completed chains.
mod triggers;
// Attachments and chunked uploads: limits, deletion, resuming across a restart.
mod uploads;
// `InvokeSessionTool` user verbs and the events each call appends.
mod verbs;
// Version skew: clients of each protocol get their shape; a raised minimum answers 426.
mod versions;
// Workflow runs: script children, their journal, waits, signals and timers.
mod workflows;
