//! Triggers: agents that act without being messaged (PROTOCOL-NOTES §C.4, §E).
//!
//! Layout:
//! - [`actions`]: the signed CRUD actions and `CombineAgentTriggers`;
//! - [`validate`]: normalising names, prompts, continuations and every kind of source;
//! - [`store`]: trigger and firing rows as protocol types, session attributions, access;
//! - [`firing`]: [`firing::fire`], the one idempotent entry point every source fires through;
//! - [`webhook`]: `POST /api/triggers/<id>/webhook` (Standard Webhooks signatures);
//! - [`chain`]: the run-completed monitor and its loop guard.
//!
//! Invariants: a `(trigger, activity key)` pair fires at most once (a unique index, insert or
//! ignore); a firing, its session, its prompt message and its run are written in one
//! transaction; webhook secrets are stored sealed and shown only when minted.

pub mod actions;
pub mod chain;
pub mod firing;
pub mod store;
pub mod validate;
pub mod webhook;

pub use actions::{
    combine_agent_triggers, create_agent_trigger, delete_agent_trigger, get_agent_trigger, list_agent_triggers,
    update_agent_trigger,
};
pub use firing::{Activity, FireOutcome, fire};

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::app::App;

/// Starts the trigger monitors this server runs (today: run-completed chains).
pub fn spawn_monitors(app: &Arc<App>) -> Vec<JoinHandle<()>> {
    vec![chain::spawn(app)]
}
