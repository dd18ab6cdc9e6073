//! The credentials a subscription turn sends (docs/runtime.md §1.3): the account's OAuth secret,
//! opened in memory, refreshed when the access token is within [`REFRESH_MARGIN_MS`] of expiring
//! or the backend refused it.
//!
//! Refreshes are single-flight per `(account, secret)` ([`super::signin::SignIns::refresh_lock`]):
//! a turn that needs one holds the lock while it asks the issuer; a turn that waited reads the
//! secret again and finds the fresh token. The refreshed credentials replace the secret only if
//! it still holds what was read (a compare-and-set), so a sign-in that lands meanwhile wins.
//!
//! An issuer that refuses the refresh token ends the subscription's sign-in: the secret is
//! flagged `needsReauth` (its providers list `authStatus: needs-login`, and the account hears
//! `model-provider-changed`) and the turn fails with `code` [`CODE_SIGN_IN_REQUIRED`] until a
//! new sign-in overwrites the secret. An issuer that cannot be reached fails the turn as a
//! provider failure, retried like one, and flags nothing.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::wire;
use zeroize::Zeroizing;

use crate::app::App;
use crate::bus::ChangeReason;
use crate::error::{ApiError, ApiResult};
use crate::model::oauth::{Credentials, SignInError};
use crate::secrets;

/// How close to its expiry an access token is refreshed before use.
pub(crate) const REFRESH_MARGIN_MS: i64 = 5 * 60 * 1000;

/// `code` of a turn that cannot run until the owner signs in again.
pub(crate) use seed_agents_protocol::codes::SIGN_IN_REQUIRED as CODE_SIGN_IN_REQUIRED;

/// The message of a subscription whose sign-in ended (upstream's words).
pub(crate) const SIGN_IN_EXPIRED: &str = "Your OpenAI subscription sign-in has expired or was revoked. Open model provider settings and sign in with ChatGPT again.";

/// The message of a subscription provider whose credentials are missing.
const NOT_SIGNED_IN: &str =
    "This OpenAI subscription provider is not signed in. Open model provider settings and sign in with ChatGPT.";

/// What a subscription request authenticates with.
pub(crate) struct Access {
    /// The bearer token.
    pub(crate) token: Zeroizing<String>,
    /// The ChatGPT account (`chatgpt-account-id`).
    pub(crate) account_id: String,
}

impl From<&Credentials> for Access {
    fn from(credentials: &Credentials) -> Self {
        Self { token: Zeroizing::new(credentials.access.clone()), account_id: credentials.account_id.clone() }
    }
}

fn sign_in_required(message: &'static str) -> ApiError {
    ApiError::unauthorized(message).with_code(CODE_SIGN_IN_REQUIRED)
}

/// The access of `owner`'s OAuth secret `secret`, refreshed first when it expires within the
/// margin or when it is `refused` (the token a backend just answered 401 to).
pub(crate) async fn access(app: &App, owner: &str, secret: &str, refused: Option<&str>) -> ApiResult<Access> {
    let lock = app.sign_ins.refresh_lock(owner, secret);
    let _held = lock.lock().await;
    // Twice at most: a refresh that lost its compare-and-set reads what won.
    for _ in 0..2 {
        let (owner_id, name) = (owner.to_owned(), secret.to_owned());
        let stored = app.db.read(move |conn| secrets::store::load_sealed_and_metadata(conn, &owner_id, &name)).await?;
        let Some((sealed, metadata)) = stored else {
            return Err(sign_in_required(NOT_SIGNED_IN));
        };
        let mut metadata = metadata.as_deref().and_then(secrets::decode_metadata).unwrap_or_default();
        if metadata.get("needsReauth").is_some_and(super::js_truthy) {
            return Err(sign_in_required(SIGN_IN_EXPIRED));
        }
        let current = open(app, owner, secret, &sealed)?;
        let now = app.clock.now_ms();
        let stale = current.expires.saturating_sub(now) <= REFRESH_MARGIN_MS
            || refused.is_some_and(|token| token == current.access);
        if !stale {
            return Ok(Access::from(&current));
        }
        match app.sign_ins.issuer().refresh(&current, now).await {
            Ok(fresh) => {
                metadata.remove("needsReauth");
                if replace(app, owner, secret, &sealed, &fresh, &metadata).await? {
                    return Ok(Access::from(&fresh));
                }
            }
            Err(SignInError::Refused(reason)) => {
                tracing::info!(account = owner, secret, reason, "subscription refresh refused; sign-in needed");
                metadata.insert("needsReauth".to_owned(), Ipld::Bool(true));
                let metadata = wire::ipld_to_vec(&Ipld::Map(metadata)).map_err(ApiError::internal)?;
                let (owner_id, name, now) = (owner.to_owned(), secret.to_owned(), app.clock.now_ms());
                let flagged = app
                    .db
                    .write(move |conn| {
                        secrets::store::set_metadata_if_unchanged(conn, &owner_id, &name, &sealed, &metadata, now)
                    })
                    .await?;
                if flagged {
                    app.bus.account_change(owner, ChangeReason::ModelProviderChanged, None, None);
                    return Err(sign_in_required(SIGN_IN_EXPIRED));
                }
                // A sign-in replaced the secret meanwhile: read it.
            }
            Err(SignInError::Unavailable(reason) | SignInError::Invalid(reason)) => {
                return Err(ApiError::upstream(format!("Could not refresh the OpenAI subscription sign-in: {reason}")));
            }
        }
    }
    Err(ApiError::unavailable("The OpenAI subscription sign-in changed while it was refreshed; try again"))
}

/// The credentials sealed in `sealed`.
fn open(app: &App, owner: &str, secret: &str, sealed: &[u8]) -> ApiResult<Credentials> {
    let plaintext = Zeroizing::new(app.secrets.open(owner, secret, sealed).map_err(ApiError::internal)?);
    serde_json::from_slice(&plaintext).map_err(|_| {
        sign_in_required(
            "The stored OpenAI subscription credentials are not readable. Open model provider settings and sign in with ChatGPT again.",
        )
    })
}

/// `credentials` sealed as `owner`'s secret `secret` (the JSON of [`Credentials`]).
pub(crate) fn seal(app: &App, owner: &str, secret: &str, credentials: &Credentials) -> ApiResult<Vec<u8>> {
    let plaintext = Zeroizing::new(serde_json::to_vec(credentials).map_err(ApiError::internal)?);
    app.secrets.seal(owner, secret, &plaintext).map_err(ApiError::internal)
}

/// Stores `fresh` over the secret if it still holds `expected`; whether it did.
async fn replace(
    app: &App,
    owner: &str,
    secret: &str,
    expected: &[u8],
    fresh: &Credentials,
    metadata: &BTreeMap<String, Ipld>,
) -> ApiResult<bool> {
    let ciphertext = seal(app, owner, secret, fresh)?;
    let metadata = wire::ipld_to_vec(&Ipld::Map(metadata.clone())).map_err(ApiError::internal)?;
    let (owner, secret, expected, now) = (owner.to_owned(), secret.to_owned(), expected.to_vec(), app.clock.now_ms());
    app.db
        .write(move |conn| {
            secrets::store::replace_if_unchanged(conn, &owner, &secret, &expected, &ciphertext, Some(&metadata), now)
        })
        .await
}
