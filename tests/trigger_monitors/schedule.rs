//! Schedule triggers in virtual time: the manual clock is stepped and the monitor's tick run at
//! each step, as the timer would.

use std::sync::Arc;
use std::time::Duration;

use seed_agents_protocol::generated::{
    AgentScheduleTrigger, AgentTriggerSource, IntervalSchedule, IntervalScheduleUnit, OnceSchedule, ScheduleSource,
    WeeklySchedule,
};
use seed_agents_server::testing::triggers::activity::FeedSettings;
use seed_agents_server::testing::triggers::{monitor, schedule};

use super::{Harness, pairs};
use crate::support::wait;

const MINUTE: i64 = 60_000;

fn source(schedule: AgentScheduleTrigger) -> AgentTriggerSource {
    AgentTriggerSource::ScheduleSource(ScheduleSource { extra: Default::default(), schedule })
}

fn every(minutes: i64) -> AgentTriggerSource {
    source(AgentScheduleTrigger::IntervalSchedule(IntervalSchedule {
        extra: Default::default(),
        every: minutes,
        unit: IntervalScheduleUnit::Minutes,
    }))
}

fn once(run_at: i64) -> AgentTriggerSource {
    source(AgentScheduleTrigger::OnceSchedule(OnceSchedule {
        extra: Default::default(),
        run_at,
        timezone: Some("Europe/Lisbon".into()),
    }))
}

fn weekly(days: &[i64], time: &str, zone: &str) -> AgentTriggerSource {
    source(AgentScheduleTrigger::WeeklySchedule(WeeklySchedule {
        extra: Default::default(),
        days_of_week: days.to_vec(),
        time_of_day: time.to_owned(),
        timezone: zone.to_owned(),
    }))
}

fn at(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

/// Runs the monitor's tick at every `step` from the clock's time up to `until`.
async fn run_until(harness: &Harness, until: i64, step: i64) {
    loop {
        schedule::check(&harness.db, &harness.sink, harness.clock.now_ms()).await.unwrap();
        if harness.clock.now_ms() >= until {
            return;
        }
        harness.clock.advance(step.min(until - harness.clock.now_ms()));
    }
}

#[tokio::test]
async fn every_kind_fires_on_time_and_once() {
    let start = at("2026-05-04T07:00:00Z"); // a Monday
    let harness = Harness::new(start).await;
    harness.trigger("owner", "interval", &every(30), start).await;
    harness.trigger("owner", "weekly", &weekly(&[1, 3], "09:15", "Europe/Berlin"), start).await;
    harness.trigger("owner", "once", &once(start + 95 * MINUTE), start).await;

    // Two days in one-minute steps (a tick every virtual minute).
    run_until(&harness, start + 2 * 24 * 60 * MINUTE, MINUTE).await;

    let fired = harness.sink.fired();
    let interval: Vec<i64> =
        fired.iter().filter(|found| found.trigger_id == "interval").map(|found| found.fired_at_ms - start).collect();
    assert_eq!(interval, (1..=96).map(|n| n * 30 * MINUTE).collect::<Vec<_>>(), "every 30 minutes, on the minute");
    let keys = |trigger: &str| -> Vec<String> {
        fired.iter().filter(|found| found.trigger_id == trigger).map(|found| found.firing_key.clone()).collect()
    };
    // Berlin is UTC+2 in May: Monday 09:15 is 07:15Z; Wednesday is outside the two days.
    assert_eq!(keys("weekly"), [format!("schedule:weekly:{}", at("2026-05-04T07:15:00Z"))]);
    assert_eq!(keys("once"), [format!("schedule:once:{}", start + 95 * MINUTE)]);
    assert_eq!(harness.sink.calls(), fired.len(), "no occurrence was handed over twice");

    let once_firing = fired.iter().find(|found| found.trigger_id == "once").unwrap();
    let activity: std::collections::BTreeMap<String, ipld_core::ipld::Ipld> =
        once_firing.activity.iter().map(|(key, value)| (key.clone(), value.clone().into_ipld())).collect();
    assert_eq!(activity["type"], ipld_core::ipld::Ipld::String("schedule".into()));
    assert_eq!(activity["scheduleKind"], ipld_core::ipld::Ipld::String("once".into()));
    assert_eq!(activity["scheduledAt"], ipld_core::ipld::Ipld::Integer((start + 95 * MINUTE).into()));
    assert_eq!(activity["timezone"], ipld_core::ipld::Ipld::String("Europe/Lisbon".into()));
    let (enabled, last_fired, error) = harness.trigger_state("once").await;
    assert_eq!(
        (enabled, last_fired, error),
        (false, Some(start + 95 * MINUTE), None),
        "a fired once-trigger is disabled"
    );
}

#[tokio::test]
async fn a_server_down_across_several_due_times_fires_once() {
    let start = at("2026-05-04T07:00:00Z");
    let mut harness = Harness::new(start).await;
    harness.trigger("owner", "hourly", &every(60), start).await;
    harness.trigger("owner", "daily", &weekly(&[0, 1, 2, 3, 4, 5, 6], "08:00", "UTC"), start).await;
    run_until(&harness, start + 60 * MINUTE, 5 * MINUTE).await;
    assert_eq!(
        harness.fired(),
        pairs(&[
            ("daily", &format!("schedule:daily:{}", at("2026-05-04T08:00:00Z"))),
            ("hourly", &format!("schedule:hourly:{}", start + 60 * MINUTE))
        ])
    );

    // Down for three days and a bit: one firing each, for the newest occurrence.
    harness.restart().await;
    harness.clock.advance(3 * 24 * 60 * MINUTE + 17 * MINUTE);
    for _ in 0..3 {
        schedule::check(&harness.db, &harness.sink, harness.clock.now_ms()).await.unwrap();
        harness.clock.advance(MINUTE);
    }
    let hourly_catch_up = start + 60 * MINUTE + 3 * 24 * 60 * MINUTE;
    assert_eq!(
        harness.fired(),
        pairs(&[
            ("daily", &format!("schedule:daily:{}", at("2026-05-04T08:00:00Z"))),
            ("daily", &format!("schedule:daily:{}", at("2026-05-07T08:00:00Z"))),
            ("hourly", &format!("schedule:hourly:{}", start + 60 * MINUTE)),
            ("hourly", &format!("schedule:hourly:{hourly_catch_up}")),
        ])
    );
    // The grid is kept: the next hourly firing is an hour after the caught-up one.
    harness.clock.set(hourly_catch_up + 60 * MINUTE - 1);
    schedule::check(&harness.db, &harness.sink, harness.clock.now_ms()).await.unwrap();
    assert_eq!(harness.sink.fired().len(), 4);
    harness.clock.set(hourly_catch_up + 60 * MINUTE);
    schedule::check(&harness.db, &harness.sink, harness.clock.now_ms()).await.unwrap();
    assert_eq!(harness.sink.fired().len(), 5);
}

#[tokio::test]
async fn a_once_trigger_never_repeats() {
    let start = at("2026-05-04T07:00:00Z");
    let mut harness = Harness::new(start).await;
    harness.trigger("owner", "once", &once(start + 10 * MINUTE), start).await;
    run_until(&harness, start + 30 * MINUTE, MINUTE).await;
    assert_eq!(harness.sink.calls(), 1);

    // Enabled again by hand, and after a restart, a week later: still nothing.
    harness
        .db
        .write(|conn| Ok(conn.execute("UPDATE agent_triggers SET enabled = 1 WHERE id = 'once'", []).map(drop)?))
        .await
        .unwrap();
    harness.restart().await;
    harness.clock.advance(7 * 24 * 60 * MINUTE);
    run_until(&harness, harness.clock.now_ms() + 30 * MINUTE, MINUTE).await;
    assert_eq!(harness.sink.calls(), 1, "the occurrence was never handed over again");
    assert_eq!(harness.fired(), pairs(&[("once", &format!("schedule:once:{}", start + 10 * MINUTE))]));
}

#[tokio::test]
async fn a_daily_schedule_follows_a_dst_change() {
    // New York, every day at 09:00 and at 02:30, across the spring-forward night of 2026-03-08
    // (02:00 EST jumps to 03:00 EDT), ticking every virtual 10 minutes.
    let start = at("2026-03-06T00:00:00Z");
    let harness = Harness::new(start).await;
    let days = [0, 1, 2, 3, 4, 5, 6];
    harness.trigger("owner", "nine", &weekly(&days, "09:00", "America/New_York"), start).await;
    harness.trigger("owner", "gap", &weekly(&days, "02:30", "America/New_York"), start).await;
    run_until(&harness, at("2026-03-10T00:00:00Z"), 10 * MINUTE).await;

    let firings = |trigger: &str| -> Vec<i64> {
        harness.sink.fired().iter().filter(|found| found.trigger_id == trigger).map(|found| found.fired_at_ms).collect()
    };
    let expected_nine: Vec<i64> =
        ["2026-03-06T14:00:00Z", "2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"]
            .map(at)
            .to_vec();
    assert_eq!(firings("nine"), expected_nine, "09:00 local: 14:00Z before the change, 13:00Z after");
    // 02:30 does not exist on the 8th: it fires once that day, at 03:30 EDT (07:30Z).
    let expected_gap: Vec<i64> =
        ["2026-03-06T07:30:00Z", "2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"]
            .map(at)
            .to_vec();
    assert_eq!(firings("gap"), expected_gap);
    assert_eq!(harness.sink.calls(), 8);
}

#[tokio::test]
async fn a_failing_sink_leaves_the_occurrence_for_the_next_tick() {
    let start = at("2026-05-04T07:00:00Z");
    let harness = Harness::new(start).await;
    harness.trigger("owner", "interval", &every(10), start).await;
    harness.clock.advance(10 * MINUTE);
    harness.sink.set_failing(true);
    let tick = schedule::check(&harness.db, &harness.sink, harness.clock.now_ms()).await.unwrap();
    assert_eq!((tick.fired, tick.errors), (0, 1));
    let (_, last_fired, error) = harness.trigger_state("interval").await;
    assert_eq!((last_fired, error.as_deref()), (None, Some("the firing sink is failing")));

    harness.sink.set_failing(false);
    harness.clock.advance(MINUTE);
    let tick = schedule::check(&harness.db, &harness.sink, harness.clock.now_ms()).await.unwrap();
    assert_eq!((tick.fired, tick.errors), (1, 0));
    assert_eq!(harness.fired(), pairs(&[("interval", &format!("schedule:interval:{}", start + 10 * MINUTE))]));
    assert_eq!(harness.trigger_state("interval").await.2, None, "the error is cleared");
}

#[tokio::test]
async fn the_spawned_monitor_fires_as_the_clock_moves() {
    let start = at("2026-05-04T07:00:00Z");
    let harness = Harness::new(start).await;
    harness.trigger("owner", "interval", &every(5), start).await;
    let activity = Arc::new(harness.monitor(FeedSettings::default()));
    let monitors = monitor::spawn_with(
        harness.db.clone(),
        harness.clock.clone(),
        Arc::new(harness.sink.clone()),
        activity,
        Duration::from_millis(5),
    );
    let wait_for = |count: usize| {
        let sink = harness.sink.clone();
        async move { wait::until_true(&format!("the monitor fired {count} times"), || sink.fired().len() >= count).await }
    };
    harness.clock.advance(5 * MINUTE);
    wait_for(1).await;
    harness.clock.advance(12 * MINUTE);
    wait_for(2).await;
    monitors.stop().await;
    assert_eq!(
        harness.fired(),
        pairs(&[
            ("interval", &format!("schedule:interval:{}", start + 5 * MINUTE)),
            ("interval", &format!("schedule:interval:{}", start + 15 * MINUTE)),
        ])
    );
}

#[tokio::test]
async fn a_schedule_that_cannot_be_evaluated_says_why_and_never_fires() {
    let start = at("2026-05-04T07:00:00Z");
    let harness = Harness::new(start).await;
    harness.trigger("owner", "mars", &weekly(&[1], "09:00", "Mars/Base"), start).await;
    run_until(&harness, start + 3 * 24 * 60 * MINUTE, 60 * MINUTE).await;
    assert_eq!(harness.sink.calls(), 0);
    let (enabled, last_fired, error) = harness.trigger_state("mars").await;
    assert_eq!((enabled, last_fired, error.as_deref()), (true, None, Some("Unknown schedule time zone Mars/Base")));
}
