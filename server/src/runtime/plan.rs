//! The `plan` and `status` verbs: the session's visible checklist and its honest name
//! (docs/runtime.md §5.7–§5.9).
//!
//! A plan lives in `sessions.plan_cbor`, owned by the run that wrote it. It leaves no durable
//! event (the model sees it again only through the `<plan_state>` block at the end of every
//! pass), while `status` calls are ordinary tool events. When a plan becomes fully settled it is
//! stamped `settledAt` and copied onto its owner run; the next run retires it. A turn that ends
//! with open steps is sent back (see `obligations`).

use crate::db::Connection;
use seed_agents_protocol::generated::{RunPlan, RunPlanStep, RunPlanStepResolvedBy, RunPlanStepStatus};
use serde_json::{Value as Json, json};

use crate::bus::{ChangeReason, Event};
use crate::error::{ApiError, ApiResult};
use crate::sessions::store as session_store;
use crate::validate::bounded_string;

use super::Turn;

/// The longest title `status` takes, in UTF-8 bytes.
pub(crate) const MAX_TITLE_BYTES: usize = 256;
/// The longest description `status` takes, in UTF-8 bytes.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 1024;

/// Whether a step is settled (done, failed or skipped).
pub(crate) fn settled(step: &RunPlanStep) -> bool {
    matches!(step.status, RunPlanStepStatus::Done | RunPlanStepStatus::Failed | RunPlanStepStatus::Skipped)
}

/// The session's plan.
pub(crate) fn load(conn: &Connection, session_id: &str) -> ApiResult<Option<RunPlan>> {
    session_store::plan(conn, session_id)
}

fn store(conn: &Connection, session_id: &str, plan: Option<&RunPlan>, now: i64) -> ApiResult<()> {
    session_store::set_plan(conn, session_id, plan, now)
}

fn copy_to_run(conn: &Connection, plan: &RunPlan) -> ApiResult<()> {
    if let Some(owner) = &plan.owner_run_id {
        crate::runs::store::set_plan(conn, owner.as_str(), plan)?;
    }
    Ok(())
}

/// Whether `plan` was fully settled under a run other than `run_id` (the next pass retires it).
pub(crate) fn retirable(plan: &RunPlan, run_id: &str) -> bool {
    plan.owner_run_id.as_deref().is_some_and(|owner| owner != run_id) && plan.steps.iter().all(settled)
}

/// At the start of a pass of `run_id`: the plan to show, after retiring one that was fully
/// settled under an earlier run (copied onto that run, cleared from the session).
pub(crate) fn current(
    conn: &Connection,
    session_id: &str,
    run_id: &str,
    now: i64,
) -> ApiResult<(Option<RunPlan>, bool)> {
    let Some(plan) = load(conn, session_id)? else { return Ok((None, false)) };
    if retirable(&plan, run_id) {
        copy_to_run(conn, &plan)?;
        store(conn, session_id, None, now)?;
        return Ok((None, true));
    }
    Ok((Some(plan), false))
}

/// The labels of the plan's open steps (pending or running).
pub(crate) fn open_steps(plan: Option<&RunPlan>) -> Vec<String> {
    plan.map(|plan| plan.steps.iter().filter(|step| !settled(step)).map(|step| step.label.clone()).collect())
        .unwrap_or_default()
}

/// `plan {title?, steps}` (arguments already checked against its schema).
pub(crate) async fn apply(turn: &Turn, arguments: &Json) -> ApiResult<Json> {
    let steps: Vec<RunPlanStep> = arguments["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .filter_map(|step| {
                    Some(RunPlanStep {
                        extra: Default::default(),
                        id: step["id"].as_str()?.to_owned(),
                        label: step["label"].as_str()?.to_owned(),
                        resolved_by: None,
                        status: serde_json::from_value(step["status"].clone()).ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let title = arguments["title"].as_str().map(str::trim).filter(|title| !title.is_empty()).map(str::to_owned);
    let count = steps.len();
    let (session_id, run_id, now) = (turn.session_id.clone(), turn.run_id.clone(), turn.app.clock.now_ms());
    turn.app
        .db
        .write(move |conn| {
            let previous = load(conn, &session_id)?;
            let mut plan = RunPlan {
                extra: Default::default(),
                owner_run_id: Some(run_id.into()),
                settled_at: None,
                steps,
                title,
            };
            let all_settled = !plan.steps.is_empty() && plan.steps.iter().all(settled);
            if let Some(previous) = &previous {
                // A step the runtime settled from its children keeps the mark while it stays done.
                for step in &mut plan.steps {
                    let settled_by_runtime = previous.steps.iter().any(|old| {
                        old.id == step.id
                            && old.status == RunPlanStepStatus::Done
                            && old.resolved_by == Some(RunPlanStepResolvedBy::Runtime)
                    });
                    if settled_by_runtime && step.status == RunPlanStepStatus::Done {
                        step.resolved_by = Some(RunPlanStepResolvedBy::Runtime);
                    }
                }
                let same_steps = previous.steps.iter().map(|s| &s.id).eq(plan.steps.iter().map(|s| &s.id));
                // A settled rewrite of the same steps stays with the run that made the plan.
                if all_settled && same_steps {
                    plan.owner_run_id.clone_from(&previous.owner_run_id);
                }
                if all_settled {
                    plan.settled_at = previous.settled_at;
                }
            }
            if all_settled && plan.settled_at.is_none() {
                plan.settled_at = Some(now);
                copy_to_run(conn, &plan)?;
            }
            store(conn, &session_id, Some(&plan), now)
        })
        .await?;
    turn.session_updated();
    Ok(json!({"ok": true, "steps": count}))
}

/// After a run ends with no other live run on the session: steps still `running` become `done`
/// (the run succeeded) or `failed` (it failed). Pending steps stay as they are.
pub(crate) fn close_running_steps(conn: &Connection, session_id: &str, succeeded: bool, now: i64) -> ApiResult<bool> {
    let Some(mut plan) = load(conn, session_id)? else { return Ok(false) };
    let mut changed = false;
    for step in &mut plan.steps {
        if step.status == RunPlanStepStatus::Running {
            step.status = if succeeded { RunPlanStepStatus::Done } else { RunPlanStepStatus::Failed };
            changed = true;
        }
    }
    if changed {
        if plan.steps.iter().all(settled) && plan.settled_at.is_none() {
            plan.settled_at = Some(now);
            copy_to_run(conn, &plan)?;
        }
        store(conn, session_id, Some(&plan), now)?;
    }
    Ok(changed)
}

/// Marks step `step_id` of the session's plan `done` with `resolvedBy: 'runtime'` (its children
/// all came back succeeded, docs/runtime.md §5.7); nothing when the step is gone or already
/// settled. Whether the plan changed.
pub(crate) fn settle_step(conn: &Connection, session_id: &str, step_id: &str, now: i64) -> ApiResult<bool> {
    let Some(mut plan) = load(conn, session_id)? else { return Ok(false) };
    let Some(step) = plan.steps.iter_mut().find(|step| step.id == step_id) else { return Ok(false) };
    if settled(step) {
        return Ok(false);
    }
    step.status = RunPlanStepStatus::Done;
    step.resolved_by = Some(RunPlanStepResolvedBy::Runtime);
    if plan.steps.iter().all(settled) && plan.settled_at.is_none() {
        plan.settled_at = Some(now);
        copy_to_run(conn, &plan)?;
    }
    store(conn, session_id, Some(&plan), now)?;
    Ok(true)
}

/// The single `running` step of the session's plan, as `(id, label)`; none when no step or
/// several run (a spawn then attaches to no step).
pub(crate) fn running_step(conn: &Connection, session_id: &str) -> ApiResult<Option<(String, String)>> {
    let Some(plan) = load(conn, session_id)? else { return Ok(None) };
    let mut running = plan.steps.iter().filter(|step| step.status == RunPlanStepStatus::Running);
    match (running.next(), running.next()) {
        (Some(step), None) => Ok(Some((step.id.clone(), step.label.clone()))),
        _ => Ok(None),
    }
}

/// `status {title?, description?}`: names the session (unless its user named it) and says
/// where it stands.
pub(crate) async fn status(turn: &Turn, arguments: &Json) -> ApiResult<Json> {
    let title = arguments["title"].as_str().map(str::trim).filter(|title| !title.is_empty());
    let description = arguments["description"].as_str().map(str::trim);
    if title.is_none() && description.is_none() {
        return Err(ApiError::invalid("status needs a title, a description, or both"));
    }
    let title = title.map(|title| bounded_string(title, "Title", MAX_TITLE_BYTES)).transpose()?;
    let description = description.map(|text| bounded_string(text, "Description", MAX_DESCRIPTION_BYTES)).transpose()?;
    let (session_id, now) = (turn.session_id.clone(), turn.app.clock.now_ms());
    let (new_title, new_description) = (title.clone(), description.clone());
    let titled = turn
        .app
        .db
        .write(move |conn| {
            let mut titled = false;
            if let Some(title) = &new_title {
                titled = session_store::set_agent_title(conn, &session_id, title, now)?;
            }
            if let Some(description) = &new_description {
                session_store::set_description(conn, &session_id, description, now)?;
            }
            Ok(titled)
        })
        .await?;
    if title.is_some() && !titled {
        tracing::debug!(session = %turn.session_id, "status kept the user's own title");
    }
    turn.session_updated();
    let mut output = json!({"ok": true});
    if let Some(title) = title.filter(|_| titled) {
        output["title"] = Json::String(title);
    }
    if let Some(description) = description {
        output["description"] = Json::String(description);
    }
    Ok(output)
}

impl Turn {
    /// The session's record changed: its subscribers and its owner's account hear it.
    pub(super) fn session_updated(&self) {
        self.app
            .bus
            .publish(Event::SessionChanged { session_id: self.session_id.clone(), agent_id: self.agent_id.clone() });
        self.app.bus.account_change(
            &self.owner_id,
            ChangeReason::SessionUpdated,
            Some(&self.agent_id),
            Some(&self.session_id),
        );
    }
}

#[cfg(test)]
mod tests {
    use seed_agents_protocol::wire;

    use super::*;
    use crate::db::migrated_in_memory;

    fn step(id: &str, status: RunPlanStepStatus) -> RunPlanStep {
        RunPlanStep { extra: Default::default(), id: id.into(), label: format!("step {id}"), resolved_by: None, status }
    }

    fn db() -> Connection {
        let conn = migrated_in_memory();
        conn.execute_batch(
            "INSERT INTO agents (id, account_id, definition_cbor, state_dir, status, created_at, updated_at)
                 VALUES ('a', 'owner', x'a0', '/tmp/a', 'active', 1, 1);
             INSERT INTO sessions (id, account_id, agent_id, title_source, status, created_at, updated_at)
                 VALUES ('s', 'owner', 'a', 'system', 'idle', 1, 1);
             INSERT INTO runs (id, account_id, root_run_id, kind, origin, agent_id, session_id, input_cbor,
                               status, created_at, updated_at)
                 VALUES ('r1', 'owner', 'r1', 'agent', 'user', 'a', 's', x'a0', 'succeeded', 1, 1);",
        )
        .unwrap();
        conn
    }

    #[test]
    fn a_plan_settled_under_an_earlier_run_is_retired_onto_that_run() {
        let conn = db();
        let plan = RunPlan {
            extra: Default::default(),
            owner_run_id: Some("r1".into()),
            settled_at: Some(5),
            steps: vec![step("1", RunPlanStepStatus::Done), step("2", RunPlanStepStatus::Skipped)],
            title: None,
        };
        store(&conn, "s", Some(&plan), 5).unwrap();
        assert_eq!(current(&conn, "s", "r1", 6).unwrap(), (Some(plan.clone()), false), "its own run still sees it");
        assert_eq!(current(&conn, "s", "r2", 6).unwrap(), (None, true));
        assert_eq!(load(&conn, "s").unwrap(), None);
        let copied: Vec<u8> =
            conn.query_row("SELECT plan_cbor FROM runs WHERE id = 'r1'", [], |row| row.get(0)).unwrap();
        assert_eq!(wire::from_slice::<RunPlan>(&copied).unwrap(), plan);
    }

    #[test]
    fn an_open_plan_stays_and_running_steps_close_with_the_run() {
        let conn = db();
        let plan = RunPlan {
            extra: Default::default(),
            owner_run_id: Some("r1".into()),
            settled_at: None,
            steps: vec![step("1", RunPlanStepStatus::Running), step("2", RunPlanStepStatus::Pending)],
            title: None,
        };
        store(&conn, "s", Some(&plan), 5).unwrap();
        assert_eq!(current(&conn, "s", "r2", 6).unwrap().0, Some(plan.clone()));
        assert_eq!(open_steps(Some(&plan)), ["step 1", "step 2"]);
        assert!(close_running_steps(&conn, "s", false, 7).unwrap());
        let closed = load(&conn, "s").unwrap().unwrap();
        assert_eq!(closed.steps[0].status, RunPlanStepStatus::Failed);
        assert_eq!(closed.steps[1].status, RunPlanStepStatus::Pending, "pending steps are left alone");
        assert_eq!(closed.settled_at, None);
        assert!(!close_running_steps(&conn, "s", true, 8).unwrap(), "nothing running any more");
    }
}
