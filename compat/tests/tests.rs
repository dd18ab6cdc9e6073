//! The compat crate's integration tests, in one binary: the breaking-change classifier, and what
//! each supported protocol sees of every payload.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

// The classifier, one test per row of `schema/PROTOCOL.md`'s "What counts as breaking".
mod classify;
// Snapshots of every action, response and frame as each supported protocol sees it.
mod versions;
