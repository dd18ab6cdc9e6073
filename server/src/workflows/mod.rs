//! Workflow runs (docs/workflows.md): a script child whose every effect crosses `ctx` and is
//! journaled, so a resume replays it from the top without doing completed work twice.
//!
//! - [`journal`]: the entry kinds and their content keys.
//! - [`host`]: what an execution asks of the server (implemented over the app; faked in tests).
//! - [`source`]: the authoring-time lint and the transform of the default export.
//! - [`error`]: how an execution failed, and the failure codes.
//! - [`vm`]: the script realm, on a thread of its own, with its limits.
//! - [`pump`]: one execution, from the journal and the host to an [`Outcome`](pump::Outcome).
//! - [`run`]: the executor of claimed workflow runs, and the host it gives the pump.

mod error;
pub(crate) mod host;
pub(crate) mod journal;
pub(crate) mod pump;
pub(crate) mod run;
pub(crate) mod source;
pub(crate) mod vm;

#[cfg(test)]
mod tests;
