//! Idempotent creates: `(account, action, key)` → the request bytes and the response bytes.
//!
//! The same key with the same request bytes replays the stored response; with other bytes it is
//! 409. The lookup, the work and the row are one transaction on the writer, so two concurrent
//! retries cannot both create. The request bytes are the canonical CBOR of the action's
//! identifying fields (never `ts`), so a re-signed retry with a fresh timestamp replays.

mod store;

use crate::db::Connection;
use seed_agents_protocol::{Response, wire};
use serde::Serialize;

use crate::error::{ApiError, ApiResult};
use crate::validate::bounded_string;

/// One idempotency key, ready to check.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    account_id: String,
    action: &'static str,
    id: String,
    request: Vec<u8>,
    mismatch: &'static str,
}

impl Key {
    /// A `clientRequestId` key for `action`; `None` when the client sent none.
    pub(crate) fn request<T: Serialize>(
        account_id: &str,
        action: &'static str,
        client_request_id: Option<&str>,
        request: &T,
    ) -> ApiResult<Option<Self>> {
        Self::build(
            account_id,
            action,
            client_request_id,
            request,
            "Client request ID",
            "Client request ID payload mismatch",
        )
    }

    /// A `clientMessageId` key (MessageSession), scoped to the acting account.
    pub(crate) fn message<T: Serialize>(
        account_id: &str,
        action: &'static str,
        client_message_id: Option<&str>,
        request: &T,
    ) -> ApiResult<Option<Self>> {
        Self::build(
            account_id,
            action,
            client_message_id,
            request,
            "Client message ID",
            "Client message ID payload mismatch",
        )
    }

    fn build<T: Serialize>(
        account_id: &str,
        action: &'static str,
        id: Option<&str>,
        request: &T,
        label: &str,
        mismatch: &'static str,
    ) -> ApiResult<Option<Self>> {
        let Some(id) = id else { return Ok(None) };
        let id = bounded_string(id, label, 256)?;
        let request = wire::to_vec(request).map_err(ApiError::internal)?;
        Ok(Some(Self { account_id: account_id.to_owned(), action, id, request, mismatch }))
    }

    fn slot(&self) -> store::Slot<'_> {
        store::Slot { account_id: &self.account_id, action: self.action, id: &self.id }
    }

    /// The stored response when this key was used before with the same request (409 when with
    /// another). Call inside the write transaction that will [`Key::store`].
    pub(crate) fn replay<R: Response>(&self, conn: &Connection) -> ApiResult<Option<R>> {
        let Some((request, response)) = store::load(conn, self.slot())? else { return Ok(None) };
        if request != self.request {
            return Err(ApiError::conflict(self.mismatch));
        }
        R::from_response(response)
            .map(Some)
            .ok_or_else(|| ApiError::internal("stored idempotent response has another type"))
    }

    /// Records `response` for this key.
    pub(crate) fn store<R: Response>(&self, conn: &Connection, response: &R, now_ms: i64) -> ApiResult<()> {
        store::insert(conn, self.slot(), &self.request, &response.clone().into_response(), now_ms)
    }
}

impl Key {
    /// Replaces the response stored for this key (a reservation made before the work was done,
    /// now that it is).
    pub(crate) fn update<R: Response>(&self, conn: &Connection, response: &R) -> ApiResult<()> {
        store::set_response(conn, self.slot(), &response.clone().into_response())
    }
}

/// Runs `create` unless `key` replays; stores its response under `key`. For use inside a write.
pub(crate) fn once<R: Response>(
    conn: &Connection,
    key: Option<&Key>,
    now_ms: i64,
    create: impl FnOnce() -> ApiResult<R>,
) -> ApiResult<(R, bool)> {
    if let Some(key) = key
        && let Some(response) = key.replay(conn)?
    {
        return Ok((response, true));
    }
    let response = create()?;
    if let Some(key) = key {
        key.store(conn, &response, now_ms)?;
    }
    Ok((response, false))
}
