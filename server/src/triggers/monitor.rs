//! The background tasks that run the trigger monitors: every `poll_interval` (and once at
//! start), the schedule monitor checks due schedules at the clock's `now` and the activity
//! monitor polls the feed. A tick that is still running when the next is due delays it (ticks
//! never overlap or pile up). Both stop when [`Monitors::stop`] is called.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::activity::{ActivityMonitor, FeedSettings};
use super::schedule;
use super::sink::FiringSink;
use crate::app::App;
use crate::clock::Clock;
use crate::db::Db;

/// How often the monitors tick, and how the feed is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MonitorSettings {
    /// Time between ticks of both monitors (default 5 s).
    pub poll_interval: Duration,
    /// The activity feed's paging.
    pub feed: FeedSettings,
}

impl Default for MonitorSettings {
    fn default() -> Self {
        Self { poll_interval: Duration::from_secs(5), feed: FeedSettings::default() }
    }
}

/// The running monitors. Dropping this stops them too (after the tick in progress).
#[derive(Debug)]
pub struct Monitors {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Monitors {
    /// Asks both monitors to stop and waits for them (a tick in progress finishes first).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Starts both monitors over the app's database, clock, HTTP client and Hypermedia server.
pub(crate) fn spawn(app: &Arc<App>, sink: Arc<dyn FiringSink>, settings: MonitorSettings) -> Monitors {
    let activity = Arc::new(ActivityMonitor::new(
        app.db.clone(),
        app.clock.clone(),
        app.http.clone(),
        app.config.hm_server_url.clone(),
        sink.clone(),
        settings.feed,
    ));
    spawn_with(app.db.clone(), app.clock.clone(), sink, activity, settings.poll_interval)
}

/// Starts both monitors from their parts (tests give a manual clock and their own sink).
pub fn spawn_with(
    db: Db,
    clock: Clock,
    sink: Arc<dyn FiringSink>,
    activity: Arc<ActivityMonitor>,
    poll_interval: Duration,
) -> Monitors {
    let (stop, stopped) = watch::channel(false);
    let schedules = tokio::spawn(every(poll_interval, stopped.clone(), move || {
        let (db, clock, sink) = (db.clone(), clock.clone(), sink.clone());
        async move {
            if let Err(error) = schedule::check(&db, sink.as_ref(), clock.now_ms()).await {
                tracing::warn!(%error, "schedule monitor tick failed");
            }
        }
    }));
    let feed = tokio::spawn(every(poll_interval, stopped, move || {
        let activity = activity.clone();
        async move {
            if let Err(error) = activity.poll().await {
                tracing::warn!(%error, "activity monitor tick failed");
            }
        }
    }));
    Monitors { stop, tasks: vec![schedules, feed] }
}

/// Runs `tick` now and then every `period` until `stopped` turns true.
async fn every<F, T>(period: Duration, mut stopped: watch::Receiver<bool>, mut tick: F)
where
    F: FnMut() -> T,
    T: Future<Output = ()>,
{
    let mut timer = tokio::time::interval(period.max(Duration::from_millis(1)));
    timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => tick().await,
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}
