//! "Sign in with ChatGPT": the OAuth 2.0 authorization-code flow with PKCE (S256) against
//! OpenAI's issuer, and the refresh of the tokens it hands out (docs/runtime.md §1.3).
//!
//! The flow belongs to the OAuth client OpenAI registered for the Codex CLI, the one a ChatGPT
//! plan's entitlement is tied to: its only redirect is `http://localhost:1455/auth/callback` on
//! the machine of the user's browser. So this server never listens for the redirect: it builds
//! the authorization URL, and the code comes back through `SubmitProviderOAuthCode`, as the whole
//! redirect URL (which a desktop client catches on its own port 1455) or as the bare code a user
//! pastes ([`parse_authorization_input`]).
//!
//! The `oauth2` crate builds the authorization URL, the PKCE pair, the `state` and the token
//! requests, and reads the token responses. Its HTTP goes through [`Issuer`]'s own client, which
//! follows no redirect, caps what it reads and sorts every failure into [`SignInError`]: a 4xx
//! from the issuer is a refusal (the code or the refresh token is no good: the user must sign in
//! again), anything else is the issuer being unreachable for now. Nothing here knows accounts,
//! secrets or the database.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, CsrfToken, EndpointNotSet, EndpointSet, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, RefreshToken, Scope, TokenResponse as _, TokenUrl,
};
use serde::{Deserialize, Serialize};
use zeroize::Zeroize as _;

/// The OAuth client id of the Codex CLI, which a ChatGPT plan's entitlement is tied to.
const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// The client's one registered redirect: a port on the machine of the user's browser.
pub(crate) const REDIRECT_URI: &str = "http://localhost:1455/auth/callback";
/// What the sign-in asks for; `offline_access` is what brings a refresh token.
const SCOPES: [&str; 4] = ["openid", "profile", "email", "offline_access"];
/// The `originator` the authorization URL and the subscription backend's requests name.
pub(crate) const ORIGINATOR: &str = "seed-agents";
/// The claim of an OpenAI access token that carries the ChatGPT account.
const AUTH_CLAIM: &str = "https://api.openai.com/auth";
/// The most of an issuer answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long one token request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type OauthClient = BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// An OAuth issuer (`https://auth.openai.com` unless the operator points elsewhere).
#[derive(Clone)]
pub(crate) struct Issuer {
    client: OauthClient,
    http: reqwest::Client,
}

impl fmt::Debug for Issuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Issuer").field("token_url", &self.client.token_uri().as_str()).finish()
    }
}

/// A sign-in just begun: the URL for the user's browser, and what checks its answer.
pub(crate) struct Begun {
    /// The authorization URL.
    pub auth_url: String,
    /// The `state` the redirect must carry back.
    pub state: String,
    /// The PKCE verifier the code exchange proves the sign-in with.
    pub verifier: PkceCodeVerifier,
}

/// The tokens of a signed-in subscription, stored (sealed) as the account's OAuth secret in the
/// JSON shape `{access, refresh, expires, accountId}` (`expires` in Unix milliseconds). Its
/// `Debug` shows neither token; both are wiped from memory when dropped.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// The access token: the bearer of the subscription backend's requests.
    pub access: String,
    /// The refresh token.
    pub refresh: String,
    /// When the access token expires, in Unix milliseconds.
    pub expires: i64,
    /// The ChatGPT account the tokens act for (the `chatgpt-account-id` header).
    #[serde(rename = "accountId")]
    pub account_id: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("expires", &self.expires)
            .field("account_id", &self.account_id)
            .finish_non_exhaustive()
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        self.access.zeroize();
        self.refresh.zeroize();
    }
}

/// Why a token request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignInError {
    /// The issuer refused: the code, the verifier or the refresh token is no good (a 4xx answer).
    /// The message is the issuer's, when it gave one.
    #[error("{0}")]
    Refused(String),
    /// The issuer could not be reached or failed (network, timeout, 5xx, 429); try again later.
    #[error("{0}")]
    Unavailable(String),
    /// The issuer answered 2xx with something that is not usable credentials.
    #[error("{0}")]
    Invalid(String),
}

impl Issuer {
    /// The issuer at `origin` (an http(s) URL without a trailing `/`).
    pub(crate) fn new(origin: &str) -> Result<Self, String> {
        let auth = AuthUrl::new(format!("{origin}/oauth/authorize")).map_err(|error| error.to_string())?;
        let token = TokenUrl::new(format!("{origin}/oauth/token")).map_err(|error| error.to_string())?;
        let redirect = RedirectUrl::new(REDIRECT_URI.to_owned()).map_err(|error| error.to_string())?;
        let client = BasicClient::new(ClientId::new(CLIENT_ID.to_owned()))
            .set_auth_uri(auth)
            .set_token_uri(token)
            .set_redirect_uri(redirect);
        // Installing twice is harmless (the first provider stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The token endpoint is asked directly and answers directly: following a redirect could
        // carry a code or a refresh token to another host.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("seed-agents-server/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| error.to_string())?;
        Ok(Self { client, http })
    }

    /// Starts a sign-in: a fresh PKCE pair and `state`, and the authorization URL carrying them.
    pub(crate) fn begin(&self) -> Begun {
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state) = self
            .client
            .authorize_url(CsrfToken::new_random)
            .add_scopes(SCOPES.map(|scope| Scope::new(scope.to_owned())))
            .set_pkce_challenge(challenge)
            .add_extra_param("id_token_add_organizations", "true")
            .add_extra_param("codex_cli_simplified_flow", "true")
            .add_extra_param("originator", ORIGINATOR)
            .url();
        Begun { auth_url: url.to_string(), state: state.secret().clone(), verifier }
    }

    /// Trades an authorization code (and the verifier of its sign-in) for credentials.
    pub(crate) async fn exchange(
        &self,
        code: &str,
        verifier: PkceCodeVerifier,
        now_ms: i64,
    ) -> Result<Credentials, SignInError> {
        let http = self.http.clone();
        let send = move |request| send(http.clone(), request);
        let answer = self
            .client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(verifier)
            .request_async(&send)
            .await
            .map_err(failure)?;
        let refresh = answer.refresh_token().map(|token| token.secret().clone());
        credentials(answer.access_token().secret(), refresh, answer.expires_in(), None, now_ms)
    }

    /// Trades a refresh token for new credentials. An issuer that rotates refresh tokens sends a
    /// new one; one that does not leaves the old one in place.
    pub(crate) async fn refresh(&self, current: &Credentials, now_ms: i64) -> Result<Credentials, SignInError> {
        let http = self.http.clone();
        let send = move |request| send(http.clone(), request);
        let token = RefreshToken::new(current.refresh.clone());
        let answer = self.client.exchange_refresh_token(&token).request_async(&send).await.map_err(failure)?;
        let refresh = answer.refresh_token().map(|token| token.secret().clone());
        credentials(answer.access_token().secret(), refresh, answer.expires_in(), Some(current), now_ms)
    }
}

/// One token request over `http`: a 2xx answer is handed back to `oauth2` to read; any other
/// answer or failure is sorted here. (It owns its client so the future borrows nothing.)
async fn send(http: reqwest::Client, request: oauth2::HttpRequest) -> Result<oauth2::HttpResponse, HttpFailure> {
    let (head, body) = request.into_parts();
    let sent = http.request(head.method, head.uri.to_string()).headers(head.headers).body(body).send();
    let mut response = sent.await.map_err(|error| HttpFailure::unavailable(&error))?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|error| HttpFailure::unavailable(&error))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(HttpFailure::Unavailable("The sign-in service sent an answer that is too large".into()));
        }
        body.extend_from_slice(&chunk);
    }
    if status.is_success() {
        let mut answer = oauth2::http::Response::builder().status(status);
        if let Some(content_type) = response.headers().get(oauth2::http::header::CONTENT_TYPE) {
            answer = answer.header(oauth2::http::header::CONTENT_TYPE, content_type);
        }
        return answer.body(body).map_err(|error| HttpFailure::Unavailable(error.to_string()));
    }
    let code = status.as_u16();
    let reason = issuer_message(&body).unwrap_or_else(|| format!("HTTP {code}"));
    if status.is_client_error() && code != 408 && code != 429 {
        Err(HttpFailure::Refused(reason))
    } else {
        Err(HttpFailure::Unavailable(format!("The sign-in service failed: {reason}")))
    }
}

/// A token request that did not get a 2xx answer.
#[derive(Debug, thiserror::Error)]
enum HttpFailure {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Unavailable(String),
}

impl HttpFailure {
    fn unavailable(error: &dyn std::error::Error) -> Self {
        Self::Unavailable(format!("The sign-in service could not be reached: {}", super::error::error_chain(error)))
    }
}

fn failure(error: oauth2::RequestTokenError<HttpFailure, oauth2::basic::BasicErrorResponse>) -> SignInError {
    match error {
        oauth2::RequestTokenError::Request(HttpFailure::Refused(reason)) => SignInError::Refused(reason),
        oauth2::RequestTokenError::Request(HttpFailure::Unavailable(reason)) => SignInError::Unavailable(reason),
        // Only 2xx answers reach `oauth2`'s reading, so these are 2xx answers we cannot use.
        oauth2::RequestTokenError::ServerResponse(response) => SignInError::Refused(response.error().to_string()),
        oauth2::RequestTokenError::Parse(error, _) => {
            SignInError::Invalid(format!("The sign-in service's answer is not a token response: {error}"))
        }
        oauth2::RequestTokenError::Other(reason) => SignInError::Invalid(reason),
    }
}

/// The issuer's own words for a refusal: `error_description`, `error` as a string, or
/// `error.message` / `error.code` when `error` is an object.
fn issuer_message(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = |value: &serde_json::Value| value.as_str().filter(|text| !text.is_empty()).map(str::to_owned);
    let error = &value["error"];
    text(&value["error_description"])
        .or_else(|| text(error))
        .or_else(|| text(&error["message"]))
        .or_else(|| text(&error["code"]))
        .map(|message| message.chars().take(512).collect())
}

/// Credentials from a token answer. A refresh without a new refresh token keeps `previous`'s; a
/// sign-in without one cannot be kept.
fn credentials(
    access: &str,
    refresh: Option<String>,
    expires_in: Option<Duration>,
    previous: Option<&Credentials>,
    now_ms: i64,
) -> Result<Credentials, SignInError> {
    let refresh = match (refresh, previous) {
        (Some(refresh), _) if !refresh.is_empty() => refresh,
        (_, Some(previous)) => previous.refresh.clone(),
        _ => return Err(SignInError::Invalid("The sign-in service sent no refresh token".into())),
    };
    let expires_in = expires_in
        .ok_or_else(|| SignInError::Invalid("The sign-in service did not say when the token expires".into()))?;
    let account_id = chatgpt_account_id(access)
        .or_else(|| previous.map(|previous| previous.account_id.clone()))
        .ok_or_else(|| SignInError::Invalid("The access token names no ChatGPT account".into()))?;
    let expires = now_ms.saturating_add(i64::try_from(expires_in.as_millis()).unwrap_or(i64::MAX));
    Ok(Credentials { access: access.to_owned(), refresh, expires, account_id })
}

/// The ChatGPT account of an OpenAI access token (a JWT): its payload's
/// `https://api.openai.com/auth` claim's `chatgpt_account_id`. The signature is not checked: the
/// token is the issuer's answer over TLS, and the backend checks it on every use.
pub(crate) fn chatgpt_account_id(access_token: &str) -> Option<String> {
    let mut parts = access_token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let payload = engine.decode(payload).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&payload).ok()?;
    claims[AUTH_CLAIM]["chatgpt_account_id"].as_str().filter(|id| !id.is_empty()).map(str::to_owned)
}

/// What a user hands back from the browser: the whole redirect URL, its query string, `code#state`,
/// or the bare code. Returns `(code, state)`, each when present and not empty.
pub(crate) fn parse_authorization_input(input: &str) -> (Option<String>, Option<String>) {
    let value = input.trim();
    let present = |text: Option<String>| text.filter(|text| !text.is_empty());
    if value.is_empty() {
        return (None, None);
    }
    let from_pairs = |pairs: url::form_urlencoded::Parse<'_>| {
        let (mut code, mut state) = (None, None);
        for (key, found) in pairs {
            match &*key {
                "code" if code.is_none() => code = Some(found.into_owned()),
                "state" if state.is_none() => state = Some(found.into_owned()),
                _ => {}
            }
        }
        (present(code), present(state))
    };
    if let Ok(url) = url::Url::parse(value)
        && url.has_host()
    {
        return from_pairs(url.query_pairs());
    }
    if let Some((code, state)) = value.split_once('#') {
        return (present(Some(code.to_owned())), present(Some(state.to_owned())));
    }
    if value.contains("code=") {
        return from_pairs(url::form_urlencoded::parse(value.trim_start_matches('?').as_bytes()));
    }
    (Some(value.to_owned()), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{}.{}.sig", engine.encode(br#"{"alg":"none"}"#), engine.encode(claims.to_string()))
    }

    #[test]
    fn authorization_input_forms() {
        let both = (Some("c1".to_owned()), Some("s1".to_owned()));
        assert_eq!(parse_authorization_input("http://localhost:1455/auth/callback?code=c1&state=s1"), both);
        assert_eq!(parse_authorization_input("  code=c1&state=s1 "), both);
        assert_eq!(parse_authorization_input("?state=s1&code=c1"), both);
        assert_eq!(parse_authorization_input("c1#s1"), both);
        assert_eq!(parse_authorization_input("c1"), (Some("c1".to_owned()), None));
        assert_eq!(
            parse_authorization_input("http://localhost:1455/auth/callback?state=s1"),
            (None, Some("s1".into()))
        );
        assert_eq!(parse_authorization_input("   "), (None, None));
        assert_eq!(parse_authorization_input("http://localhost:1455/x?code=&state="), (None, None));
        // Percent-encoding in a URL is undone.
        assert_eq!(parse_authorization_input("http://h/?code=a%2Bb&state=s").0.as_deref(), Some("a+b"));
    }

    #[test]
    fn account_id_from_the_access_token() {
        let token = jwt(serde_json::json!({AUTH_CLAIM: {"chatgpt_account_id": "acct_1"}, "exp": 1}));
        assert_eq!(chatgpt_account_id(&token).as_deref(), Some("acct_1"));
        assert_eq!(chatgpt_account_id(&jwt(serde_json::json!({"sub": "x"}))), None);
        assert_eq!(chatgpt_account_id("not-a-jwt"), None);
        assert_eq!(chatgpt_account_id("a.b.c.d"), None);
        assert_eq!(chatgpt_account_id("a.%%%.c"), None);
    }

    #[test]
    fn credentials_from_answers() {
        let token = jwt(serde_json::json!({AUTH_CLAIM: {"chatgpt_account_id": "acct_1"}}));
        let first = credentials(&token, Some("r1".into()), Some(Duration::from_secs(60)), None, 1_000).unwrap();
        assert_eq!((first.refresh.as_str(), first.expires, first.account_id.as_str()), ("r1", 61_000, "acct_1"));
        // A refresh without a new refresh token or account keeps the old ones.
        let next = credentials("opaque", None, Some(Duration::from_secs(1)), Some(&first), 2_000).unwrap();
        assert_eq!((next.refresh.as_str(), next.expires, next.account_id.as_str()), ("r1", 3_000, "acct_1"));
        assert!(matches!(credentials(&token, None, Some(Duration::ZERO), None, 0), Err(SignInError::Invalid(_))));
        assert!(matches!(credentials(&token, Some("r".into()), None, None, 0), Err(SignInError::Invalid(_))));
        assert!(matches!(
            credentials("opaque", Some("r".into()), Some(Duration::ZERO), None, 0),
            Err(SignInError::Invalid(_))
        ));
        // The stored shape, and a Debug that shows no token.
        let json = serde_json::to_value(&first).unwrap();
        assert_eq!(json["accountId"], "acct_1");
        assert_eq!(json["expires"], 61_000);
        let shown = format!("{first:?}");
        assert!(!shown.contains("r1") && !shown.contains(&token), "{shown}");
    }

    #[test]
    fn issuer_messages() {
        assert_eq!(issuer_message(br#"{"error":"invalid_grant","error_description":"expired"}"#).unwrap(), "expired");
        assert_eq!(issuer_message(br#"{"error":"invalid_grant"}"#).unwrap(), "invalid_grant");
        assert_eq!(issuer_message(br#"{"error":{"code":"refresh_token_expired"}}"#).unwrap(), "refresh_token_expired");
        assert_eq!(issuer_message(br#"{"error":{"message":"Gone","code":"x"}}"#).unwrap(), "Gone");
        assert_eq!(issuer_message(b"<html>"), None);
    }

    #[test]
    fn the_authorization_url_carries_pkce_and_state() {
        let issuer = Issuer::new("http://127.0.0.1:9").unwrap();
        let begun = issuer.begin();
        let url = url::Url::parse(&begun.auth_url).unwrap();
        assert_eq!(url.path(), "/oauth/authorize");
        let query: std::collections::BTreeMap<String, String> = url.query_pairs().into_owned().collect();
        assert_eq!(query["response_type"], "code");
        assert_eq!(query["client_id"], CLIENT_ID);
        assert_eq!(query["redirect_uri"], REDIRECT_URI);
        assert_eq!(query["scope"], "openid profile email offline_access");
        assert_eq!(query["code_challenge_method"], "S256");
        assert_eq!(query["state"], begun.state);
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(begun.verifier.secret().as_bytes());
        assert_eq!(query["code_challenge"], base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest));
        // Each sign-in gets its own.
        assert_ne!(issuer.begin().state, begun.state);
    }
}
