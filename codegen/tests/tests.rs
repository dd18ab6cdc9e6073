//! The generator's integration tests, in one binary: the committed output is current, the schema
//! is documented, and generated types can grow without breaking callers.

// Drift: the committed generated files equal what the schema generates now.
mod check;
// Every definition and property of the schema has a description.
mod descriptions;
// An added optional field breaks no caller, but does break a struct literal (builds a crate).
mod growth;
