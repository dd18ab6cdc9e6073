//! The provider OAuth actions ("Sign in with ChatGPT"): `StartProviderOAuth`,
//! `SubmitProviderOAuthCode`, `GetProviderOAuthStatus` and `CancelProviderOAuth`
//! (docs/protocol.md, docs/runtime.md §1.3).
//!
//! A sign-in is started only when the server runs with `--subscription-auth` (403 otherwise); the
//! others find nothing without one (404). The code comes back through `SubmitProviderOAuthCode`,
//! which exchanges it with the issuer before answering: 400 when the issuer refuses it (the
//! sign-in fails), 502 when the issuer cannot be reached (the sign-in waits for the code again).
//! The credentials become the account's secret `<type>-subscription-oauth` (sealed like every
//! secret; a new sign-in overwrites it in place and clears a `needsReauth` flag), which
//! subscription providers reference as `secretRefs.oauth`.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    CancelProviderOAuth, CancelProviderOAuthResponse, GetProviderOAuthStatus, ProviderOAuthStatusResponse,
    ProviderOAuthStatusResponseStatus, StartProviderOAuth, StartProviderOAuthResponse, SubmitProviderOAuthCode,
    SubmitProviderOAuthCodeResponse,
};
use seed_agents_protocol::wire;
use zeroize::Zeroizing;

use super::signin::{Refusal, Status};
use crate::app::App;
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::model::oauth::SignInError;
use crate::model::vendors::ProviderType;
use crate::secrets;
use crate::validate::{MAX_NAME_BYTES, bounded_string};

/// 403 when the operator did not turn sign-in on.
pub(crate) const NOT_ENABLED: &str = "Subscription sign-in is not enabled on this server";
/// 404 for a sign-in the account does not have.
const NOT_FOUND: &str = "Sign-in not found";
/// The longest code (or redirect URL) taken.
const MAX_CODE_BYTES: usize = 8192;

use seed_agents_protocol::codes::{
    SIGN_IN_CODE_REFUSED as CODE_REFUSED, SIGN_IN_ENDED as CODE_SIGN_IN_ENDED,
    SIGN_IN_STATE_MISMATCH as CODE_STATE_MISMATCH,
};

/// The secret a type's subscription credentials are stored as.
pub(crate) fn secret_name(provider_type: ProviderType) -> String {
    format!("{}-subscription-oauth", provider_type.as_str())
}

/// The metadata of a subscription credentials secret (no `needsReauth`: they work).
pub(crate) fn secret_metadata(provider_type: ProviderType) -> ApiResult<Vec<u8>> {
    let metadata = [
        ("kind".to_owned(), Ipld::String("provider-oauth".to_owned())),
        ("provider".to_owned(), Ipld::String(provider_type.as_str().to_owned())),
    ];
    wire::ipld_to_vec(&Ipld::Map(metadata.into_iter().collect())).map_err(ApiError::internal)
}

/// `StartProviderOAuth {providerType}`: a new sign-in of the caller (replacing its pending one),
/// with the URL to open in the user's browser.
pub(crate) async fn start_provider_oauth(
    app: &App,
    caller: &Caller,
    action: StartProviderOAuth,
) -> ApiResult<StartProviderOAuthResponse> {
    if !app.config.subscription_auth {
        return Err(ApiError::forbidden(NOT_ENABLED));
    }
    let type_name = bounded_string(&action.provider_type, "Provider type", MAX_NAME_BYTES)?;
    if !ProviderType::parse(&type_name).is_some_and(ProviderType::supports_subscription) {
        return Err(ApiError::invalid(format!("Provider type does not support subscription sign-in: {type_name}")));
    }
    let begun = app.sign_ins.issuer().begin();
    let auth_url = begun.auth_url.clone();
    let (login_id, expires_at) = app.sign_ins.start(&caller.account_id, begun, app.clock.now_ms());
    Ok(StartProviderOAuthResponse { extra: Default::default(), auth_url, expires_at, login_id: login_id.into() })
}

/// `SubmitProviderOAuthCode {loginId, code}`: exchanges the code (or the redirect URL's) and
/// stores the credentials.
pub(crate) async fn submit_provider_oauth_code(
    app: &App,
    caller: &Caller,
    action: SubmitProviderOAuthCode,
) -> ApiResult<SubmitProviderOAuthCodeResponse> {
    let login_id = bounded_string(&action.login_id, "Login id", MAX_NAME_BYTES)?;
    let input = Zeroizing::new(bounded_string(&action.code, "Authorization code", MAX_CODE_BYTES)?);
    let account = caller.account_id.clone();
    let claimed =
        app.sign_ins.claim(&account, &login_id, &input, app.clock.now_ms()).map_err(|refusal| match refusal {
            Refusal::NotFound => ApiError::not_found(NOT_FOUND),
            Refusal::NotPending => {
                ApiError::invalid("Sign-in is no longer pending; start a new one").with_code(CODE_SIGN_IN_ENDED)
            }
            Refusal::MissingCode => ApiError::invalid("Missing authorization code"),
            Refusal::StateMismatch => ApiError::invalid(
                "State mismatch: this redirect belongs to another sign-in; the sign-in failed, start a new one",
            )
            .with_code(CODE_STATE_MISMATCH),
        })?;
    // Only `openai` signs in today.
    let provider_type = ProviderType::OpenAi;
    let verifier_copy = oauth2::PkceCodeVerifier::new(claimed.verifier.secret().clone());
    let exchanged = app.sign_ins.issuer().exchange(&claimed.code, claimed.verifier, app.clock.now_ms()).await;
    let credentials = match exchanged {
        Ok(credentials) => credentials,
        Err(SignInError::Unavailable(reason)) => {
            // Nothing was decided: the sign-in waits for the code again.
            app.sign_ins.reopen(&login_id, verifier_copy);
            return Err(ApiError::upstream(reason));
        }
        Err(SignInError::Refused(reason)) => {
            let message = format!("Token exchange failed: {reason}");
            app.sign_ins.finish(&login_id, Status::Failed(message.clone()), app.clock.now_ms());
            return Err(ApiError::invalid(message).with_code(CODE_REFUSED));
        }
        Err(SignInError::Invalid(reason)) => {
            app.sign_ins.finish(&login_id, Status::Failed(reason.clone()), app.clock.now_ms());
            return Err(ApiError::upstream(reason));
        }
    };
    let name = secret_name(provider_type);
    if !app.sign_ins.finish(&login_id, Status::Completed(name.clone()), app.clock.now_ms()) {
        return Err(ApiError::invalid("Sign-in is no longer pending; start a new one").with_code(CODE_SIGN_IN_ENDED));
    }
    if let Err(error) = store(app, &account, &name, provider_type, &credentials).await {
        app.sign_ins.fail_completed(&login_id, "The credentials could not be stored".to_owned());
        return Err(error);
    }
    app.bus.account_change(&account, ChangeReason::ModelProviderChanged, None, None);
    Ok(SubmitProviderOAuthCodeResponse { extra: Default::default() })
}

/// Seals and stores credentials as the account's secret `name`.
async fn store(
    app: &App,
    account: &str,
    name: &str,
    provider_type: ProviderType,
    credentials: &crate::model::oauth::Credentials,
) -> ApiResult<()> {
    let ciphertext = super::subscription::seal(app, account, name, credentials)?;
    let metadata = secret_metadata(provider_type)?;
    let (account, name, now) = (account.to_owned(), name.to_owned(), app.clock.now_ms());
    app.db
        .write(move |conn| secrets::store::upsert(conn, &account, &name, &ciphertext, Some(&metadata), now).map(|_| ()))
        .await
}

/// `GetProviderOAuthStatus {loginId}`.
pub(crate) async fn get_provider_oauth_status(
    app: &App,
    caller: &Caller,
    action: GetProviderOAuthStatus,
) -> ApiResult<ProviderOAuthStatusResponse> {
    let login_id = bounded_string(&action.login_id, "Login id", MAX_NAME_BYTES)?;
    let snapshot = app
        .sign_ins
        .status(&caller.account_id, &login_id, app.clock.now_ms())
        .ok_or_else(|| ApiError::not_found(NOT_FOUND))?;
    let (status, secret_name, error) = match snapshot.status {
        Status::Pending | Status::Exchanging => (ProviderOAuthStatusResponseStatus::Pending, None, None),
        Status::Completed(name) => (ProviderOAuthStatusResponseStatus::Completed, Some(name), None),
        Status::Failed(error) => (ProviderOAuthStatusResponseStatus::Failed, None, Some(error)),
    };
    Ok(ProviderOAuthStatusResponse { extra: Default::default(), error, login_id: login_id.into(), secret_name, status })
}

/// `CancelProviderOAuth {loginId}`.
pub(crate) async fn cancel_provider_oauth(
    app: &App,
    caller: &Caller,
    action: CancelProviderOAuth,
) -> ApiResult<CancelProviderOAuthResponse> {
    let login_id = bounded_string(&action.login_id, "Login id", MAX_NAME_BYTES)?;
    app.sign_ins
        .cancel(&caller.account_id, &login_id, app.clock.now_ms())
        .ok_or_else(|| ApiError::not_found(NOT_FOUND))?;
    Ok(CancelProviderOAuthResponse { extra: Default::default(), login_id: login_id.into() })
}
