//! The trigger every new agent with a Seed account gets (the seed's version, docs/protocol.md §C.2):
//! when the primary signing key is an `hm-account-key`, an enabled activity trigger named
//! `Mentions, replies, and comments for <name>` with three conditions on that account —
//! mentioned, replied to, commented on a document it authored.
//!
//! Best effort: building or storing it never fails `CreateAgent`. The row is built before the
//! agent's writes, and stored under a savepoint that is rolled back on error.

use crate::db::Connection;
use seed_agents_protocol::generated::{
    ActivitySource, AgentActivityCondition, AgentActivitySource, AgentDefinition, AgentTriggerSource,
    CommentReplySource, DocumentAuthorCommentSource, UserMentionSource,
};

use crate::error::ApiResult;

/// The prompt of the default trigger.
pub(crate) const PROMPT: &str =
    "Respond to the mention, reply, or comment on your document, performing any action requested.";

/// A trigger row ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TriggerRow {
    /// The trigger's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its source.
    pub source: AgentTriggerSource,
    /// Its prompt.
    pub prompt: String,
}

/// The default trigger's source for the identity account `account`.
pub fn source(account: &str) -> AgentTriggerSource {
    let accounts = vec![account.to_owned()];
    let condition = |id: &str, source| AgentActivityCondition { extra: Default::default(), id: id.to_owned(), source };
    AgentTriggerSource::ActivitySource(ActivitySource {
        extra: Default::default(),
        conditions: vec![
            condition(
                "user-mention",
                AgentActivitySource::UserMentionSource(UserMentionSource {
                    extra: Default::default(),
                    mentioned_accounts: accounts.clone(),
                    resource_prefix: None,
                }),
            ),
            condition(
                "comment-reply",
                AgentActivitySource::CommentReplySource(CommentReplySource {
                    extra: Default::default(),
                    replied_to_accounts: accounts.clone(),
                    resource_prefix: None,
                }),
            ),
            condition(
                "document-author-comment",
                AgentActivitySource::DocumentAuthorCommentSource(DocumentAuthorCommentSource {
                    extra: Default::default(),
                    document_authors: accounts,
                    resource_prefix: None,
                }),
            ),
        ],
    })
}

/// The default trigger of a (normalised) definition in `owner`'s account, or `None` when its
/// primary signing key is not an identity with an account id. Errors are the caller's to log.
pub(crate) fn build(conn: &Connection, owner: &str, definition: &AgentDefinition) -> ApiResult<Option<TriggerRow>> {
    let Some(key) = super::definition::primary_signing_key(definition) else { return Ok(None) };
    let Some(account) = crate::identities::store::identity_account(conn, owner, key)? else { return Ok(None) };
    Ok(Some(TriggerRow {
        id: uuid::Uuid::now_v7().to_string(),
        name: format!("Mentions, replies, and comments for {}", definition.name),
        source: source(&account),
        prompt: PROMPT.to_owned(),
    }))
}

/// [`build`], logging and dropping any error.
pub(crate) fn build_or_skip(
    conn: &Connection,
    owner: &str,
    agent_id_hint: &str,
    definition: &AgentDefinition,
) -> Option<TriggerRow> {
    // Under a savepoint: on PostgreSQL a failed statement aborts the transaction until rolled
    // back, and the caller's writes go on after this.
    crate::db::savepoint(conn, |conn| build(conn, owner, definition)).unwrap_or_else(|error| {
        tracing::warn!(agent = agent_id_hint, %error, "could not build the default trigger; the agent gets none");
        None
    })
}

/// Inserts `row` for `agent_id` under a savepoint: on failure the savepoint is rolled back, a
/// warning logged, and the surrounding transaction goes on.
pub(crate) fn insert_or_skip(conn: &Connection, owner: &str, agent_id: &str, row: &TriggerRow, now: i64) {
    let inserted = crate::db::savepoint(conn, |conn| {
        crate::triggers::store::insert_enabled(conn, &row.id, owner, agent_id, &row.name, &row.source, &row.prompt, now)
    });
    if let Err(error) = inserted {
        tracing::warn!(agent = agent_id, %error, "could not store the default trigger; the agent gets none");
    }
}
