//! The trigger actions' writes: inserting, replacing and patching a trigger, merging and
//! deleting, the sealed webhook secret.

use super::*;

/// Inserts trigger `id` for `agent_id` (stored under `owner_id`), without a webhook secret.
pub(crate) fn insert(
    conn: &Connection,
    id: &str,
    owner_id: &str,
    agent_id: &str,
    trigger: &Normalized,
    now: i64,
) -> ApiResult<()> {
    conn.prepare_cached(
        "INSERT INTO agent_triggers (id, account_id, agent_id, name, enabled, source_cbor, prompt, prompt_cbor,
                                     continuation_cbor, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
    )?
    .execute(params![
        id,
        owner_id,
        agent_id,
        trigger.name,
        trigger.enabled,
        Cbor(&trigger.source),
        trigger.prompt.markdown,
        trigger.prompt.blocks.as_ref().map(Cbor),
        trigger.continuation.as_ref().map(Cbor),
        now
    ])?;
    Ok(())
}

/// Inserts an enabled trigger `id` for `agent_id` (stored under `owner_id`) with a text prompt
/// and no continuation (an agent's default trigger; its caller logs a failure and goes on, so the
/// error stays a `crate::db::Error`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert_enabled(
    conn: &Connection,
    id: &str,
    owner_id: &str,
    agent_id: &str,
    name: &str,
    source: &AgentTriggerSource,
    prompt: &str,
    now: i64,
) -> crate::db::Result<()> {
    conn.prepare_cached(
        "INSERT INTO agent_triggers
           (id, account_id, agent_id, name, enabled, source_cbor, prompt, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?7)",
    )?
    .execute(params![id, owner_id, agent_id, name, Cbor(source), prompt, now])?;
    Ok(())
}

/// Replaces every field of trigger `id` with `trigger`, its webhook secret cleared, `updatedAt`
/// set to `updated_at`.
pub(crate) fn replace(conn: &Connection, id: &str, trigger: &Normalized, updated_at: i64) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_triggers SET name = ?2, enabled = ?3, source_cbor = ?4, prompt = ?5, prompt_cbor = ?6,
                continuation_cbor = ?7, webhook_secret = NULL, updated_at = ?8
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        trigger.name,
        trigger.enabled,
        Cbor(&trigger.source),
        trigger.prompt.markdown,
        trigger.prompt.blocks.as_ref().map(Cbor),
        trigger.continuation.as_ref().map(Cbor),
        updated_at
    ])?;
    Ok(())
}

/// Renames trigger `id`.
pub(crate) fn set_name(conn: &Connection, id: &str, name: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET name = ?2 WHERE id = ?1")?.execute(params![id, name])?;
    Ok(())
}

/// Enables or disables trigger `id`.
pub(crate) fn set_enabled(conn: &Connection, id: &str, enabled: bool) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET enabled = ?2 WHERE id = ?1")?.execute(params![id, enabled])?;
    Ok(())
}

/// Replaces trigger `id`'s prompt.
pub(crate) fn set_prompt(conn: &Connection, id: &str, prompt: &Prompt) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET prompt = ?2, prompt_cbor = ?3 WHERE id = ?1")?.execute(params![
        id,
        prompt.markdown,
        prompt.blocks.as_ref().map(Cbor)
    ])?;
    Ok(())
}

/// Replaces (or, with `None`, removes) trigger `id`'s continuation.
pub(crate) fn set_continuation(
    conn: &Connection,
    id: &str,
    continuation: Option<&TriggerContinuation>,
) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET continuation_cbor = ?2 WHERE id = ?1")?
        .execute(params![id, continuation.map(Cbor)])?;
    Ok(())
}

/// Gives trigger `id` another action: the prompt (markdown, and blocks when it has them) and the
/// continuation of another trigger.
pub(crate) fn set_action(
    conn: &Connection,
    id: &str,
    markdown: &str,
    blocks: Option<&Vec<AgentPromptBlock>>,
    continuation: Option<&TriggerContinuation>,
) -> ApiResult<()> {
    conn.prepare_cached(
        "UPDATE agent_triggers SET prompt = ?2, prompt_cbor = ?3, continuation_cbor = ?4 WHERE id = ?1",
    )?
    .execute(params![id, markdown, blocks.map(Cbor), continuation.map(Cbor)])?;
    Ok(())
}

/// Replaces trigger `id`'s source.
pub(crate) fn set_source(conn: &Connection, id: &str, source: &AgentTriggerSource) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET source_cbor = ?2 WHERE id = ?1")?
        .execute(params![id, Cbor(source)])?;
    Ok(())
}

/// Sets trigger `id`'s `updatedAt`.
pub(crate) fn set_updated_at(conn: &Connection, id: &str, updated_at: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET updated_at = ?2 WHERE id = ?1")?.execute(params![id, updated_at])?;
    Ok(())
}

/// Marks trigger `id` merged into `survivor`: disabled, `mergedInto` set, `updatedAt` moved.
pub(crate) fn merge_into(conn: &Connection, id: &str, survivor: &str, updated_at: i64) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET merged_into = ?2, enabled = 0, updated_at = ?3 WHERE id = ?1")?
        .execute(params![id, survivor, updated_at])?;
    Ok(())
}

/// Deletes trigger `id` (its firings go by cascade); triggers merged into it are released first.
pub(crate) fn delete(conn: &Connection, id: &str) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET merged_into = NULL WHERE merged_into = ?1")?.execute(params![id])?;
    conn.prepare_cached("DELETE FROM agent_triggers WHERE id = ?1")?.execute(params![id])?;
    Ok(())
}

/// Stores trigger `id`'s sealed webhook secret (or, with `None`, removes it).
pub(crate) fn set_webhook_secret(conn: &Connection, id: &str, sealed: Option<&[u8]>) -> ApiResult<()> {
    conn.prepare_cached("UPDATE agent_triggers SET webhook_secret = ?2 WHERE id = ?1")?.execute(params![id, sealed])?;
    Ok(())
}

/// Every trigger with a webhook secret: its id, owner and sealed secret, in id order.
pub(crate) fn all_webhook_secrets(conn: &Connection) -> ApiResult<Vec<(String, String, Vec<u8>)>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, account_id, webhook_secret FROM agent_triggers WHERE webhook_secret IS NOT NULL ORDER BY id",
    )?;
    let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    Ok(rows.collect::<crate::db::Result<_>>()?)
}

/// The owner of trigger `id` and its sealed webhook secret, when the trigger exists.
pub(crate) fn webhook_secret(conn: &Connection, id: &str) -> ApiResult<Option<(String, Option<Vec<u8>>)>> {
    Ok(conn
        .prepare_cached("SELECT account_id, webhook_secret FROM agent_triggers WHERE id = ?1")?
        .query_row(params![id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}
