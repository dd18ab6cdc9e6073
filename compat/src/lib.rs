//! Protocol version compatibility: per-version shims and the surface classifier.
//!
//! Not built yet (a later issue). Today every supported client protocol (1 to 3) is served the
//! current shapes; the shims that rewrite responses for protocol 1 and 2 clients arrive with the
//! compat issue. The bounds this crate will work between:

pub use seed_agents_protocol::version::{AGENTS_PROTOCOL_VERSION, MIN_CLIENT_PROTOCOL};
