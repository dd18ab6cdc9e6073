//! A fake OAuth issuer on loopback for "Sign in with ChatGPT": the user's browser half
//! ([`Issuer::authorize`]: check the authorization URL, hand out a code bound to its PKCE
//! challenge, and build the redirect the desktop client would catch) and the token endpoint
//! (`POST /oauth/token`, form-encoded, as OpenAI's): `authorization_code` checks the code (once),
//! the client, the redirect and the verifier against the challenge (S256); `refresh_token` rotates
//! a known refresh token. Access tokens are JWT-shaped, carrying the ChatGPT account claim, and
//! numbered so a test can tell which one a request carried ([`Issuer::access_token`]).
//!
//! A test can set the lifetime of the tokens it hands out, make refreshes fail (as OpenAI does
//! for an expired or revoked refresh token: 401 with an `error` object), and hold refreshes at a
//! [`Gate`] to line turns up behind one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use serde_json::json;
use sha2::Digest as _;

use crate::provider::Gate;

/// The ChatGPT account the fake's tokens act for.
pub const ACCOUNT_ID: &str = "acct_fake_chatgpt";
/// The client id and redirect the server must use (the Codex CLI's).
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
pub const REDIRECT_URI: &str = "http://localhost:1455/auth/callback";

/// A running fake issuer; stops when dropped.
pub struct Issuer {
    addr: SocketAddr,
    state: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    /// Codes handed out and not used yet, with their PKCE challenge.
    codes: Mutex<HashMap<String, String>>,
    /// Refresh tokens that still work.
    refresh_tokens: Mutex<HashSet<String>>,
    /// Codes handed out so far.
    issued: AtomicUsize,
    /// Token pairs handed out so far.
    tokens: AtomicUsize,
    expires_in: AtomicU64,
    refuse_refresh: AtomicBool,
    refreshes: AtomicUsize,
    hold: Mutex<Option<Gate>>,
    /// Every token request's form, in order.
    requests: Mutex<Vec<BTreeMap<String, String>>>,
}

impl Issuer {
    /// Starts on 127.0.0.1 with an ephemeral port; tokens live an hour.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Shared { expires_in: AtomicU64::new(3600), ..Shared::default() });
        let app = Router::new().route("/oauth/token", post(token)).with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state, task }
    }

    /// The issuer's origin, for `--oauth-issuer-url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the user's browser does with an authorization URL: checks it names this issuer's
    /// `/oauth/authorize`, the client, the redirect and an S256 challenge, and returns the
    /// redirect URL carrying a fresh code and the URL's `state`.
    pub fn authorize(&self, auth_url: &str) -> String {
        let url = reqwest::Url::parse(auth_url).expect("authorization URL");
        assert_eq!(format!("{}://{}", url.scheme(), url.authority()), self.url(), "{auth_url}");
        assert_eq!(url.path(), "/oauth/authorize");
        let query: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
        assert_eq!(query["response_type"], "code");
        assert_eq!(query["client_id"], CLIENT_ID);
        assert_eq!(query["redirect_uri"], REDIRECT_URI);
        assert_eq!(query["code_challenge_method"], "S256");
        assert!(query["scope"].split(' ').any(|scope| scope == "offline_access"), "{auth_url}");
        let code = format!("code-{}", self.state.issued.fetch_add(1, Ordering::SeqCst));
        self.state.codes.lock().unwrap().insert(code.clone(), query["code_challenge"].clone());
        let mut redirect = reqwest::Url::parse(REDIRECT_URI).unwrap();
        redirect.query_pairs_mut().append_pair("code", &code).append_pair("state", &query["state"]);
        redirect.to_string()
    }

    /// The code of a redirect URL [`Self::authorize`] returned.
    pub fn code_of(redirect: &str) -> String {
        let url = reqwest::Url::parse(redirect).expect("redirect");
        url.query_pairs().find(|(key, _)| key == "code").map(|(_, code)| code.into_owned()).expect("code")
    }

    /// Sets how many seconds the tokens handed out from now on live.
    pub fn set_expires_in(&self, seconds: u64) {
        self.state.expires_in.store(seconds, Ordering::SeqCst);
    }

    /// Makes every refresh fail as a revoked refresh token does (or work again).
    pub fn refuse_refresh(&self, refuse: bool) {
        self.state.refuse_refresh.store(refuse, Ordering::SeqCst);
    }

    /// Holds every refresh until `gate` opens.
    pub fn hold_refreshes(&self, gate: &Gate) {
        *self.state.hold.lock().unwrap() = Some(gate.clone());
    }

    /// How many refresh requests arrived (refused ones included).
    pub fn refreshes(&self) -> usize {
        self.state.refreshes.load(Ordering::SeqCst)
    }

    /// Every token request's form, oldest first.
    pub fn requests(&self) -> Vec<BTreeMap<String, String>> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The `n`th access token handed out (0 first), as the fake builds it.
    pub fn access_token(n: usize) -> String {
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let claims = json!({"https://api.openai.com/auth": {"chatgpt_account_id": ACCOUNT_ID}, "n": n});
        format!("{}.{}.fake-signature", engine.encode(br#"{"alg":"RS256"}"#), engine.encode(claims.to_string()))
    }

    /// The `n`th refresh token handed out.
    pub fn refresh_token(n: usize) -> String {
        format!("refresh-token-{n}-of-the-fake-issuer")
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn refused(status: StatusCode, body: serde_json::Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn token(State(state): State<Arc<Shared>>, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body);
    let form: BTreeMap<String, String> = reqwest::Url::parse(&format!("http://form/?{text}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default();
    state.requests.lock().unwrap().push(form.clone());
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    if field("client_id") != CLIENT_ID {
        return refused(StatusCode::UNAUTHORIZED, json!({"error": "invalid_client"}));
    }
    match field("grant_type") {
        "authorization_code" => {
            let challenge = state.codes.lock().unwrap().remove(field("code"));
            let Some(challenge) = challenge else {
                return refused(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "invalid_grant", "error_description": "Unknown or used code"}),
                );
            };
            let proof = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(field("code_verifier").as_bytes()));
            if proof != challenge || field("redirect_uri") != REDIRECT_URI {
                return refused(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "invalid_grant", "error_description": "PKCE verification failed"}),
                );
            }
        }
        "refresh_token" => {
            state.refreshes.fetch_add(1, Ordering::SeqCst);
            let gate = state.hold.lock().unwrap().clone();
            if let Some(gate) = gate {
                gate.opened().await;
            }
            let known = state.refresh_tokens.lock().unwrap().remove(field("refresh_token"));
            if !known || state.refuse_refresh.load(Ordering::SeqCst) {
                return refused(
                    StatusCode::UNAUTHORIZED,
                    json!({"error": {"message": "Your refresh token has expired.", "code": "refresh_token_expired"}}),
                );
            }
        }
        _ => return refused(StatusCode::BAD_REQUEST, json!({"error": "unsupported_grant_type"})),
    }
    let n = state.tokens.fetch_add(1, Ordering::SeqCst);
    let refresh = Issuer::refresh_token(n);
    state.refresh_tokens.lock().unwrap().insert(refresh.clone());
    let answer = json!({
        "access_token": Issuer::access_token(n),
        "refresh_token": refresh,
        "id_token": "header.payload.signature",
        "token_type": "Bearer",
        "expires_in": state.expires_in.load(Ordering::SeqCst),
        "scope": "openid profile email offline_access",
    });
    ([(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response()
}
