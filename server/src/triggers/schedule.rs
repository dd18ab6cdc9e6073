//! Schedule triggers (docs/protocol.md §E.2): when an `interval`, `weekly` or `once` schedule is
//! due, and the monitor tick that fires it.
//!
//! The due rules, given the trigger's creation time and the last occurrence it fired for:
//! - `interval` (`every` minutes or hours): occurrences lie on the grid `anchor + k × interval`,
//!   the anchor being the last fired occurrence (or the creation time). When at least one grid
//!   point has passed, the latest one is due: a server that was down across several points
//!   fires once, for the newest, and the grid never drifts with the poll interval.
//! - `weekly` (`daysOfWeek` 0 = Sunday, `timeOfDay` `HH:MM`, an IANA `timezone`): the latest
//!   occurrence in the past 7 days that is at or after the creation time and after the last one
//!   fired. Wall-clock times are resolved in the zone with its DST rules; a time skipped by a
//!   spring-forward gap fires at the same offset after the gap, and a time repeated by a fall-back
//!   fires once, at its first instant ("compatible" disambiguation, as RFC 5545 and JavaScript do).
//! - `once` (`runAt` ms): due when `now ≥ runAt` and it never fired for that `runAt`; after firing
//!   the trigger is disabled, as upstream does, and it never fires again for that `runAt`.
//!
//! A firing's key is `schedule:<triggerId>:<scheduledAt>`, so handing the same occurrence to the
//! sink twice fires it once. The monitor fires first and then records the occurrence in
//! `trigger_schedule_state`: a crash in between makes the next tick hand the same key again.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use seed_agents_protocol::Value;
use seed_agents_protocol::generated::{AgentScheduleTrigger, AgentTriggerSource, IntervalScheduleUnit, WeeklySchedule};

use super::sink::{FiringSink, TriggerMatch};
use super::store;
use crate::db::Db;
use crate::error::ApiResult;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;

/// Why a stored schedule cannot be evaluated (the trigger's `lastError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ScheduleError {
    /// `every` is not a positive number of minutes or hours that fits in milliseconds.
    #[error("Schedule interval must be a positive whole number")]
    Interval,
    /// `timezone` names no IANA time zone.
    #[error("Unknown schedule time zone {0}")]
    TimeZone(String),
    /// `timeOfDay` is not `HH:MM` (00–23, 00–59).
    #[error("Schedule time of day must be HH:MM")]
    TimeOfDay,
    /// A day of the week outside 0–6, or none at all.
    #[error("Schedule days of week must be 0-6 (0 = Sunday)")]
    DaysOfWeek,
}

/// The firing key of one occurrence.
pub(crate) fn firing_key(trigger_id: &str, scheduled_at: i64) -> String {
    format!("schedule:{trigger_id}:{scheduled_at}")
}

/// The occurrence of `schedule` due at `now`, if any (see the module docs for the rules).
/// `last_scheduled_at` is the last occurrence this trigger fired for.
pub(crate) fn due(
    schedule: &AgentScheduleTrigger,
    created_at: i64,
    last_scheduled_at: Option<i64>,
    now: i64,
) -> Result<Option<i64>, ScheduleError> {
    match schedule {
        AgentScheduleTrigger::IntervalSchedule(interval) => {
            let unit = match interval.unit {
                IntervalScheduleUnit::Minutes => MINUTE_MS,
                IntervalScheduleUnit::Hours => HOUR_MS,
            };
            let step = interval.every.checked_mul(unit).filter(|step| *step > 0).ok_or(ScheduleError::Interval)?;
            let anchor = last_scheduled_at.unwrap_or(created_at);
            let periods = now.saturating_sub(anchor) / step;
            Ok((periods >= 1).then(|| anchor + periods * step))
        }
        AgentScheduleTrigger::OnceSchedule(once) => {
            Ok((now >= once.run_at && last_scheduled_at != Some(once.run_at)).then_some(once.run_at))
        }
        AgentScheduleTrigger::WeeklySchedule(weekly) => {
            let latest = latest_weekly(weekly, created_at, now)?;
            Ok(latest.filter(|at| last_scheduled_at.is_none_or(|last| *at > last)))
        }
    }
}

/// The latest weekly occurrence at or before `now`, within the past 7 days, not before
/// `created_at`.
fn latest_weekly(weekly: &WeeklySchedule, created_at: i64, now: i64) -> Result<Option<i64>, ScheduleError> {
    let zone = TimeZone::get(&weekly.timezone).map_err(|_| ScheduleError::TimeZone(weekly.timezone.clone()))?;
    let (hour, minute) = time_of_day(&weekly.time_of_day)?;
    if weekly.days_of_week.is_empty() || weekly.days_of_week.iter().any(|day| !(0..=6).contains(day)) {
        return Err(ScheduleError::DaysOfWeek);
    }
    let Ok(now_instant) = Timestamp::from_millisecond(now) else { return Ok(None) };
    let mut date: Date = now_instant.to_zoned(zone.clone()).date();
    let mut latest = None;
    for _ in 0..=7 {
        if weekly.days_of_week.contains(&i64::from(date.weekday().to_sunday_zero_offset()))
            && let Ok(zoned) = date.at(hour, minute, 0, 0).to_zoned(zone.clone())
        {
            let at = zoned.timestamp().as_millisecond();
            if at <= now && at >= created_at && latest.is_none_or(|latest| at > latest) {
                latest = Some(at);
            }
        }
        let Ok(previous) = date.yesterday() else { break };
        date = previous;
    }
    Ok(latest)
}

/// `HH:MM` as hour and minute.
fn time_of_day(text: &str) -> Result<(i8, i8), ScheduleError> {
    let bytes = text.as_bytes();
    let digit = |index: usize| bytes.get(index).filter(|byte| byte.is_ascii_digit()).map(|byte| (byte - b'0') as i8);
    let (Some(h1), Some(h2), Some(b':'), Some(m1), Some(m2), 5) =
        (digit(0), digit(1), bytes.get(2).copied(), digit(3), digit(4), bytes.len())
    else {
        return Err(ScheduleError::TimeOfDay);
    };
    let (hour, minute) = (h1 * 10 + h2, m1 * 10 + m2);
    if hour > 23 || minute > 59 {
        return Err(ScheduleError::TimeOfDay);
    }
    Ok((hour, minute))
}

/// The schedule's wire kind (`interval`, `weekly`, `once`).
fn kind(schedule: &AgentScheduleTrigger) -> &'static str {
    match schedule {
        AgentScheduleTrigger::IntervalSchedule(_) => "interval",
        AgentScheduleTrigger::WeeklySchedule(_) => "weekly",
        AgentScheduleTrigger::OnceSchedule(_) => "once",
    }
}

/// The activity a schedule firing records: `{type: 'schedule', scheduleKind, scheduledAt,
/// firedAt, timezone?}`.
pub(crate) fn activity(schedule: &AgentScheduleTrigger, scheduled_at: i64, fired_at: i64) -> BTreeMap<String, Value> {
    let text = |text: &str| Value::from(Ipld::String(text.to_owned()));
    let mut activity = BTreeMap::from([
        ("type".to_owned(), text("schedule")),
        ("scheduleKind".to_owned(), text(kind(schedule))),
        ("scheduledAt".to_owned(), Value::from(Ipld::Integer(scheduled_at.into()))),
        ("firedAt".to_owned(), Value::from(Ipld::Integer(fired_at.into()))),
    ]);
    let timezone = match schedule {
        AgentScheduleTrigger::WeeklySchedule(weekly) => Some(weekly.timezone.as_str()),
        AgentScheduleTrigger::OnceSchedule(once) => once.timezone.as_deref(),
        AgentScheduleTrigger::IntervalSchedule(_) => None,
    };
    if let Some(timezone) = timezone {
        activity.insert("timezone".to_owned(), text(timezone));
    }
    activity
}

/// A short summary of one occurrence (session titles).
pub(crate) fn summary(schedule: &AgentScheduleTrigger, scheduled_at: i64) -> String {
    let at =
        Timestamp::from_millisecond(scheduled_at).map_or_else(|_| scheduled_at.to_string(), |at| format!("{at:.3}"));
    match schedule {
        AgentScheduleTrigger::IntervalSchedule(_) => format!("Scheduled interval at {at}"),
        AgentScheduleTrigger::OnceSchedule(_) => format!("One-time schedule at {at}"),
        AgentScheduleTrigger::WeeklySchedule(weekly) => {
            format!("Scheduled weekly run at {} {}", weekly.time_of_day, weekly.timezone)
        }
    }
}

/// What one tick of the schedule monitor did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleTick {
    /// Enabled schedule triggers looked at.
    pub checked: usize,
    /// Occurrences the sink fired now.
    pub fired: usize,
    /// Due occurrences the sink had already fired (a restart between firing and recording).
    pub repeated: usize,
    /// Triggers whose schedule could not be evaluated or whose firing failed.
    pub errors: usize,
}

/// One enabled schedule trigger as the monitor reads it.
#[derive(Debug)]
struct Row {
    id: String,
    created_at: i64,
    schedule: AgentScheduleTrigger,
    last_scheduled_at: Option<i64>,
    last_error: Option<String>,
}

/// One tick: every enabled schedule trigger due at `now` is handed to `sink` once, then its
/// occurrence recorded. A failing sink leaves the occurrence unrecorded (retried next tick) and
/// the error on the trigger.
pub async fn check(db: &Db, sink: &dyn FiringSink, now: i64) -> ApiResult<ScheduleTick> {
    let rows = db.read(enabled_schedules).await?;
    let mut tick = ScheduleTick { checked: rows.len(), ..ScheduleTick::default() };
    let ids: Vec<String> = rows.iter().map(|row| row.id.clone()).collect();
    if ids.is_empty() {
        return Ok(tick);
    }
    db.write(move |conn| store::mark_checked(conn, &ids, now)).await?;
    for row in rows {
        let scheduled_at = match due(&row.schedule, row.created_at, row.last_scheduled_at, now) {
            Ok(Some(at)) => at,
            Ok(None) => continue,
            Err(error) => {
                tick.errors += 1;
                // Said once, not rewritten every tick.
                if row.last_error.as_deref() != Some(error.to_string().as_str()) {
                    record_error(db, &row.id, error.to_string()).await?;
                }
                continue;
            }
        };
        let found = TriggerMatch {
            trigger_id: row.id.clone(),
            firing_key: firing_key(&row.id, scheduled_at),
            activity: activity(&row.schedule, scheduled_at, now),
            summary: summary(&row.schedule, scheduled_at),
            matched_conditions: None,
            fired_at_ms: now,
        };
        match sink.fire(found).await {
            Ok(created) => {
                if created {
                    tick.fired += 1;
                } else {
                    tick.repeated += 1;
                }
                let once = matches!(row.schedule, AgentScheduleTrigger::OnceSchedule(_));
                record_fired(db, row.id, scheduled_at, once, now).await?;
            }
            Err(error) => {
                tick.errors += 1;
                tracing::warn!(trigger = %row.id, %error, "a schedule firing failed; it is retried on the next tick");
                record_error(db, &row.id, error.message().to_owned()).await?;
            }
        }
    }
    Ok(tick)
}

fn enabled_schedules(conn: &crate::db::Connection) -> ApiResult<Vec<Row>> {
    Ok(store::enabled_with_schedule_state(conn)?
        .into_iter()
        .filter_map(|scheduled| match scheduled.trigger.source {
            AgentTriggerSource::ScheduleSource(source) => Some(Row {
                id: scheduled.trigger.id,
                created_at: scheduled.trigger.created_at,
                schedule: source.schedule,
                last_scheduled_at: scheduled.last_scheduled_at,
                last_error: scheduled.last_error,
            }),
            _ => None,
        })
        .collect())
}

/// Records the occurrence fired (so it is never due again), `last_fired_at`, a cleared error,
/// and for a once-schedule the trigger disabled. A trigger deleted meanwhile records nothing.
async fn record_fired(db: &Db, trigger_id: String, scheduled_at: i64, once: bool, now: i64) -> ApiResult<()> {
    db.write(move |conn| {
        if !store::exists(conn, &trigger_id)? {
            return Ok(());
        }
        store::save_schedule_state(conn, &trigger_id, scheduled_at, now)?;
        store::mark_schedule_fired(conn, &trigger_id, once, now)
    })
    .await
}

async fn record_error(db: &Db, trigger_id: &str, message: String) -> ApiResult<()> {
    let trigger_id = trigger_id.to_owned();
    db.write(move |conn| store::set_last_error(conn, &trigger_id, &message)).await
}

#[cfg(test)]
mod tests {
    use seed_agents_protocol::generated::{IntervalSchedule, OnceSchedule};

    use super::*;

    const MIN: i64 = MINUTE_MS;

    fn interval(every: i64, unit: IntervalScheduleUnit) -> AgentScheduleTrigger {
        AgentScheduleTrigger::IntervalSchedule(IntervalSchedule { extra: Default::default(), every, unit })
    }

    fn weekly(days: &[i64], time: &str, zone: &str) -> AgentScheduleTrigger {
        AgentScheduleTrigger::WeeklySchedule(WeeklySchedule {
            extra: Default::default(),
            days_of_week: days.to_vec(),
            time_of_day: time.to_owned(),
            timezone: zone.to_owned(),
        })
    }

    fn once(run_at: i64) -> AgentScheduleTrigger {
        AgentScheduleTrigger::OnceSchedule(OnceSchedule { extra: Default::default(), run_at, timezone: None })
    }

    /// Unix ms of an RFC 3339 instant.
    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn interval_fires_the_latest_grid_point_once() {
        let every_ten = interval(10, IntervalScheduleUnit::Minutes);
        assert_eq!(due(&every_ten, 0, None, 10 * MIN - 1), Ok(None));
        assert_eq!(due(&every_ten, 0, None, 10 * MIN), Ok(Some(10 * MIN)));
        // Late by 4 minutes: still the grid point, no drift.
        assert_eq!(due(&every_ten, 0, None, 14 * MIN), Ok(Some(10 * MIN)));
        assert_eq!(due(&every_ten, 0, Some(10 * MIN), 19 * MIN), Ok(None));
        // Down across five points: only the newest.
        assert_eq!(due(&every_ten, 0, Some(10 * MIN), 65 * MIN), Ok(Some(60 * MIN)));
        assert_eq!(due(&interval(2, IntervalScheduleUnit::Hours), 0, None, 2 * HOUR_MS), Ok(Some(2 * HOUR_MS)));
        assert_eq!(due(&interval(0, IntervalScheduleUnit::Hours), 0, None, HOUR_MS), Err(ScheduleError::Interval));
        assert_eq!(due(&interval(i64::MAX, IntervalScheduleUnit::Hours), 0, None, 1), Err(ScheduleError::Interval));
    }

    #[test]
    fn once_fires_at_run_at_and_never_again() {
        let schedule = once(1_000);
        assert_eq!(due(&schedule, 0, None, 999), Ok(None));
        assert_eq!(due(&schedule, 0, None, 5_000), Ok(Some(1_000)));
        assert_eq!(due(&schedule, 0, Some(1_000), 1_000_000), Ok(None));
    }

    #[test]
    fn weekly_fires_the_latest_occurrence_in_its_zone() {
        // Mondays and Thursdays at 09:30 in Berlin (UTC+1 in January 2026; 2026-01-05 is a Monday,
        // the trigger was created on Friday 2026-01-02).
        let schedule = weekly(&[1, 4], "09:30", "Europe/Berlin");
        let created = at("2026-01-02T00:00:00Z");
        assert_eq!(due(&schedule, created, None, at("2026-01-05T08:29:59Z")), Ok(None));
        assert_eq!(due(&schedule, created, None, at("2026-01-05T08:30:00Z")), Ok(Some(at("2026-01-05T08:30:00Z"))));
        let fired = at("2026-01-05T08:30:00Z");
        assert_eq!(due(&schedule, created, Some(fired), at("2026-01-07T12:00:00Z")), Ok(None));
        // Down from Monday until the next Monday evening: one firing, for the newest occurrence.
        assert_eq!(
            due(&schedule, created, Some(fired), at("2026-01-12T20:00:00Z")),
            Ok(Some(at("2026-01-12T08:30:00Z")))
        );
        // Nothing before the trigger existed.
        assert_eq!(due(&schedule, at("2026-01-05T09:00:00Z"), None, at("2026-01-05T10:00:00Z")), Ok(None));
    }

    #[test]
    fn weekly_follows_daylight_saving_time() {
        // New York, daily at 09:00: 14:00Z in winter (EST), 13:00Z from 2026-03-08 (EDT).
        let every_day = weekly(&[0, 1, 2, 3, 4, 5, 6], "09:00", "America/New_York");
        let created = at("2026-03-02T00:00:00Z");
        assert_eq!(due(&every_day, created, None, at("2026-03-07T14:00:00Z")), Ok(Some(at("2026-03-07T14:00:00Z"))));
        assert_eq!(due(&every_day, created, None, at("2026-03-08T13:00:00Z")), Ok(Some(at("2026-03-08T13:00:00Z"))));
        // 02:30 does not exist on 2026-03-08 (02:00 jumps to 03:00): it fires at 03:30 EDT, once.
        let in_gap = weekly(&[0], "02:30", "America/New_York");
        assert_eq!(due(&in_gap, created, None, at("2026-03-08T07:29:59Z")), Ok(None));
        assert_eq!(due(&in_gap, created, None, at("2026-03-08T07:30:00Z")), Ok(Some(at("2026-03-08T07:30:00Z"))));
        // 01:30 happens twice on 2026-11-01: it fires at the first (EDT, 05:30Z) and not at the second.
        let twice = weekly(&[0], "01:30", "America/New_York");
        let first = at("2026-11-01T05:30:00Z");
        assert_eq!(due(&twice, created, None, first), Ok(Some(first)));
        assert_eq!(due(&twice, created, Some(first), at("2026-11-01T06:45:00Z")), Ok(None));
    }

    #[test]
    fn weekly_refuses_what_it_cannot_evaluate() {
        assert_eq!(
            due(&weekly(&[1], "09:00", "Mars/Olympus"), 0, None, 1),
            Err(ScheduleError::TimeZone("Mars/Olympus".into()))
        );
        for bad in ["9:00", "24:00", "12:60", "12-00", "12:000"] {
            assert_eq!(due(&weekly(&[1], bad, "UTC"), 0, None, 1), Err(ScheduleError::TimeOfDay), "{bad}");
        }
        assert_eq!(due(&weekly(&[7], "09:00", "UTC"), 0, None, 1), Err(ScheduleError::DaysOfWeek));
        assert_eq!(due(&weekly(&[], "09:00", "UTC"), 0, None, 1), Err(ScheduleError::DaysOfWeek));
    }

    #[test]
    fn activity_and_key_name_the_occurrence() {
        let schedule = weekly(&[1], "09:00", "Europe/Paris");
        let activity = activity(&schedule, 60_000, 61_000);
        let ipld: BTreeMap<String, Ipld> = activity.into_iter().map(|(key, value)| (key, value.into_ipld())).collect();
        assert_eq!(ipld["type"], Ipld::String("schedule".into()));
        assert_eq!(ipld["scheduleKind"], Ipld::String("weekly".into()));
        assert_eq!(ipld["scheduledAt"], Ipld::Integer(60_000));
        assert_eq!(ipld["firedAt"], Ipld::Integer(61_000));
        assert_eq!(ipld["timezone"], Ipld::String("Europe/Paris".into()));
        assert_eq!(firing_key("t1", 60_000), "schedule:t1:60000");
        assert_eq!(summary(&once(0), 0), "One-time schedule at 1970-01-01T00:00:00.000Z");
    }
}
