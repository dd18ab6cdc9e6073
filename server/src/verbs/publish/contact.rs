//! `write hm://… {action: "contact.create" | "contact.delete"}`: the signer's contacts (raw
//! dotted commands; docs/hypermedia.md §2.6).
//!
//! - `contact.create`: `options.input.subject` (or `subjectUid`; else the address's account when
//!   it is not the signer's own) and `name` (also `options.name`), a Contact blob; the output's
//!   `contactId` is its record id `<signer>/<tsid>`.
//! - `contact.delete`: `options.input.contact` (or `contactId`), `<authority>/<tsid>` (also with
//!   `hm://`), a tombstone. The authority must be the signer: a tombstone signed by another key
//!   deletes nothing (upstream publishes it anyway).

use seed_agents_protocol::Value;

use super::comment::is_tsid;
use super::{Output, Publish, account_id, plain_address};
use crate::error::{ApiError, ApiResult};
use crate::hm::{blob, contact};
use crate::validate::MAX_NAME_BYTES;

/// `contact.create`.
pub(super) async fn create(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let address = plain_address(raw)?;
    let input = publish.raw_input()?;
    let name = publish.name_option("Contact name", MAX_NAME_BYTES)?;
    let name = name.ok_or_else(|| ApiError::invalid("Contact name is required (options.name)"))?;
    let given = input.text(&["subject", "subjectUid"], "Contact subject", MAX_NAME_BYTES)?;
    let key = publish.signing_key().await?;
    let signer = blob::principal(&key);
    let subject = match given {
        Some(subject) => account_id(subject, "Contact subject")?,
        None if address.uid != signer.to_string() => account_id(&address.uid, "Contact subject")?,
        None => {
            return Err(ApiError::invalid(
                "Contact subject is required (options.input.subject, an account id, or the account's hm:// address)",
            ));
        }
    };
    if subject == signer {
        return Err(ApiError::invalid("A contact names another account, not the signer"));
    }
    let (blob, id) = contact::contact(&key, publish.now, &subject, Some(name)).map_err(ApiError::internal)?;
    drop(key);
    let output = Output {
        action: "contact.create",
        contact_id: Some(id.clone()),
        subject: Some(subject.to_string()),
        ..Output::default()
    };
    let summary = format!("Added hm://{subject} to the contacts of hm://{signer} as {name} (contact {id}).");
    publish.finish(&format!("contact {id}"), vec![blob], output, summary).await
}

/// `contact.delete`.
pub(super) async fn delete(publish: &Publish<'_, '_>) -> ApiResult<Value> {
    let given = publish
        .raw_input()?
        .text(&["contact", "contactId"], "Contact ID", 2048)?
        .ok_or_else(|| ApiError::invalid("Contact ID is required (options.input.contact: <account>/<tsid>)"))?;
    let bare = given.strip_prefix("hm://").unwrap_or(given);
    let invalid = || ApiError::invalid(format!("Invalid contact ID format: {given}. Expected \"authority/tsid\"."));
    let (authority, tsid) = bare.split_once('/').ok_or_else(invalid)?;
    if !is_tsid(tsid) {
        return Err(invalid());
    }
    let authority = account_id(authority, "Contact ID authority")?;
    let key = publish.signing_key().await?;
    let signer = blob::principal(&key);
    if authority != signer {
        return Err(ApiError::forbidden(format!(
            "Contact {bare} belongs to hm://{authority}; this agent signs as {signer} and can only delete its own \
             contacts"
        )));
    }
    let blob = contact::tombstone(&key, publish.now, &authority, tsid).map_err(ApiError::internal)?;
    drop(key);
    let output = Output { action: "contact.delete", contact_id: Some(bare.to_owned()), ..Output::default() };
    let summary = format!("Deleted contact {bare}.");
    publish.finish(&format!("contact {bare}"), vec![blob], output, summary).await
}
