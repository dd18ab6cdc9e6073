//! The protocol crate's integration tests, in one binary: properties over every schema
//! definition, and the JS client's signing vectors.

// Every action, response and frame round-trips through typed values and canonical CBOR.
mod roundtrip;
// The published JS client's signing vectors: byte-identical envelopes, refusals for the stated
// reason.
mod vectors;
