//! The parts of the Seed Agents server that hold no state, do no I/O and know no HTTP stack: the
//! server's error type, and the rules a request meets before any handler runs.
//!
//! - [`error`]: [`ApiError`](error::ApiError), what went wrong as an
//!   [`ErrorKind`](error::ErrorKind), with the message clients see;
//! - [`body`]: the limit of a request body, decided from its first bytes;
//! - [`action`]: from a verified action map to its typed action (upstream's lenient fields and
//!   hand checks, typed decoding);
//! - [`memory_path`]: the normalisation rules of an agent's memory paths;
//! - [`upload_order`]: a pipelined upload chunk waiting for its predecessor.
//!
//! The server (`seed-agents-server`) uses them in the layers ARCHITECTURE.md gives them; they are a
//! crate of their own so that the fuzz targets (`fuzz/`) build what they exercise without the
//! server's dependency tree (HTTP, TLS, SQLite, the model and MCP clients).

pub mod action;
pub mod body;
pub mod error;
pub mod memory_path;
pub mod upload_order;
