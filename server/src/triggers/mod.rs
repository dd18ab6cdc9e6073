//! Triggers: agents that act without being messaged (docs/protocol.md §C.4, §E).
//!
//! Layout:
//! - [`actions`]: the signed CRUD actions and `CombineAgentTriggers`;
//! - [`validate`]: normalising names, prompts, continuations and every kind of source;
//! - [`store`]: trigger and firing rows as protocol types, session attributions, access;
//! - [`firing`]: [`firing::fire`], the one idempotent entry point every source fires through;
//! - [`thread`]: a new-thread continuation's own system prompt and tools, for its session's runs;
//! - [`webhook`]: `POST /api/triggers/<id>/webhook` (Standard Webhooks signatures);
//! - [`chain`]: the run-completed monitor and its loop guard;
//! - [`schedule`]: when interval, weekly and once schedules are due;
//! - [`activity`]: polling the Hypermedia activity feed and matching events to activity sources;
//! - [`monitor`]: both of those on a timer, handing each decision (a [`sink::TriggerMatch`] with a
//!   deterministic firing key) to a [`sink::FiringSink`]; the server's sink is [`FireSink`],
//!   which is [`firing::fire`].
//!
//! Invariants: a `(trigger, activity key)` pair fires at most once (a unique index, insert or
//! ignore); a firing, its session, its prompt message and its run are written in one
//! transaction (for a `wake` continuation: the firing and the signal's delivery, through the same
//! code as `SignalRun`); webhook secrets are stored sealed and shown only when minted; the monitors never
//! record firings themselves and save their progress only after the sink answered.

pub(crate) mod actions;
pub(crate) mod activity;
pub(crate) mod chain;
pub(crate) mod firing;
pub(crate) mod monitor;
pub(crate) mod schedule;
pub(crate) mod sink;
pub(crate) mod store;
pub(crate) mod thread;
pub(crate) mod validate;
pub(crate) mod webhook;

pub(crate) use actions::{
    combine_agent_triggers, create_agent_trigger, delete_agent_trigger, get_agent_trigger, list_agent_triggers,
    update_agent_trigger,
};
pub(crate) use firing::{Activity, FireOutcome, fire};

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;

use crate::app::App;
use crate::error::{ApiError, ApiResult};

/// The sink the schedule and activity monitors fire through: [`firing::fire`], which records
/// the firing once and starts its run. It holds the app weakly: the monitors live inside it.
#[derive(Debug)]
pub(crate) struct FireSink {
    app: Weak<App>,
}

impl sink::FiringSink for FireSink {
    fn fire(&self, found: sink::TriggerMatch) -> BoxFuture<'_, ApiResult<bool>> {
        Box::pin(async move {
            let app = self.app.upgrade().ok_or_else(|| ApiError::unavailable("The server is shutting down"))?;
            let activity = Activity {
                summary: found.summary,
                value: found.activity,
                matched_conditions: found.matched_conditions,
                parent_firing_id: None,
            };
            let outcome = fire(&app, &found.trigger_id, &found.firing_key, activity).await?;
            Ok(matches!(outcome, FireOutcome::Fired { .. } | FireOutcome::Started { .. } | FireOutcome::Woke { .. }))
        })
    }
}

/// The trigger monitors this server runs: run-completed chains, schedules and the activity feed.
#[derive(Debug)]
pub(crate) struct Monitors {
    chain: JoinHandle<()>,
    timed: monitor::Monitors,
}

impl Monitors {
    /// Stops them; a schedule or feed tick in progress finishes first, so a firing being
    /// recorded is never cut in half.
    pub(crate) async fn stop(self) {
        self.chain.abort();
        self.timed.stop().await;
    }
}

/// Starts the trigger monitors, ticking every `--trigger-poll-interval`.
pub(crate) fn spawn_monitors(app: &Arc<App>) -> Monitors {
    let sink = Arc::new(FireSink { app: Arc::downgrade(app) });
    let settings = monitor::MonitorSettings { poll_interval: app.config.trigger_poll_interval, ..Default::default() };
    Monitors { chain: chain::spawn(app), timed: monitor::spawn(app, sink, settings) }
}
