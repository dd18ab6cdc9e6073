//! `ListProviderModels`: ask a provider's vendor which models it serves.
//!
//! The provider record is looked up by name in the caller's account, or in the agent owner's
//! account when the action names an agent the caller may read. Subscription providers answer a
//! fixed list (the ChatGPT backend has no list endpoint). Api-key providers call the vendor's list
//! endpoint in the shape of their [`ModelListStyle`]:
//!
//! - OpenAI-compatible: `GET {base}/models`, `Authorization: Bearer <key>` only when there is a key;
//! - Anthropic: `GET {base}/v1/models`, `x-api-key` and `anthropic-version: 2023-06-01`;
//! - Google: `GET {base}/models?key=<key>`, dropping models that cannot `generateContent`.
//!
//! Invariant (ARCHITECTURE.md rule 8): the API key is decrypted only here, into a buffer that is zeroed when
//! dropped; it is never logged, and no error message or response carries it (network errors are
//! logged without their URL, which holds Google's key). Copies made inside the HTTP stack (the
//! header value, the request URL) are beyond our reach; that part is best-effort.
//!
//! Redirects follow the outbound client's policy; reqwest drops `Authorization` when a redirect
//! leaves the host, and the pinned vendors (the only ones sent `x-api-key` or a key query) are
//! trusted not to redirect elsewhere.

use std::time::Duration;

use crate::db::Connection;
use reqwest::Url;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use seed_agents_protocol::generated::{
    ListProviderModels, ListProviderModelsResponse, ModelProviderConfigAuthMode, ProviderModelInfo,
};
use serde_json::Value;
use zeroize::Zeroizing;

use super::PROVIDER_NOT_FOUND;
use super::store::load;
use crate::access::{self, Need};
use crate::app::App;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::model::vendors::{ModelListStyle, ProviderType};
use crate::secrets;
use crate::validate::{MAX_NAME_BYTES, bounded_string};

/// How long one model-list request may take, connection included.
pub(crate) const MODEL_LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest model-list answer read; a longer one is an invalid response.
pub(crate) const MAX_MODEL_LIST_BYTES: usize = 8 * 1024 * 1024;

/// The `anthropic-version` header value of Anthropic requests.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `secretRefs` key naming a provider's API key secret.
const API_KEY_REF: &str = "apiKey";

/// The models a subscription provider offers: what the ChatGPT Codex backend accepts (it has no
/// list endpoint), as upstream serves them.
pub(crate) const SUBSCRIPTION_MODELS: [(&str, &str); 5] = [
    ("gpt-5.6-sol", "GPT-5.6 Sol"),
    ("gpt-5.6-terra", "GPT-5.6 Terra"),
    ("gpt-5.6-luna", "GPT-5.6 Luna"),
    ("gpt-5.5", "GPT-5.5"),
    ("gpt-5.4", "GPT-5.4"),
];

/// `ListProviderModels {provider, agentId?}`: the models of the provider named `provider`.
///
/// Errors, in order: 400 `Model provider is required` / `… is too large`; with `agentId`, the
/// access errors of [`access::require`] (404 `Agent not found` for a caller with no role); 404
/// `Model provider not found`; 400 `<type> API key is not configured` when the type needs a key
/// and the record names none; 400 `Required secret is not configured` when the named secret is
/// missing; 502 `<type> provider at <base URL>: models request failed: HTTP n` / `… response is
/// invalid` from the vendor.
pub(crate) async fn list_provider_models(
    app: &App,
    caller: &Caller,
    action: ListProviderModels,
) -> ApiResult<ListProviderModelsResponse> {
    let name = bounded_string(&action.provider, "Model provider", MAX_NAME_BYTES)?;
    let account = caller.account_id.clone();
    let agent_id = action.agent_id;
    let overrides = app.config.provider_urls.clone();
    let listing = app.db.read(move |conn| plan(conn, &account, agent_id.as_deref(), &name, &overrides)).await?;
    let models = match listing {
        Listing::Subscription => subscription_models(),
        Listing::Vendor { provider_type, base_url, sealed_key } => {
            let key = match sealed_key {
                Some(sealed) => Some(sealed.open(app)?),
                None => None,
            };
            let key = key.as_ref().map(|key| api_key_text(provider_type, key)).transpose()?;
            let style = provider_type.model_list_style();
            let named = Named { provider_type: provider_type.as_str(), base_url: &base_url };
            fetch_models_of(&app.http, style, &base_url, key, MODEL_LIST_TIMEOUT, &named).await?
        }
    };
    Ok(ListProviderModelsResponse { extra: Default::default(), models })
}

/// What the database says about the provider to list.
enum Listing {
    /// A subscription provider: the fixed list.
    Subscription,
    /// An api-key provider: where to ask, and its key when it names one.
    Vendor { provider_type: ProviderType, base_url: String, sealed_key: Option<SealedKey> },
}

/// An API key secret as stored: opened only on the async side, where the secret key lives.
#[derive(Debug)]
pub(crate) struct SealedKey {
    account_id: String,
    name: String,
    sealed: Vec<u8>,
}

impl SealedKey {
    /// The key an api-key provider record of `owner` names (`secretRefs.apiKey`), in upstream's
    /// order of checks: 400 `Required secret is not configured` when the named secret is missing,
    /// 400 `<type> API key is not configured` when a type that needs one names none, `None` for
    /// a keyless type without one. Model lists and agent turns both read keys through here.
    pub(crate) fn load(
        conn: &Connection,
        owner: &str,
        provider_type: ProviderType,
        config: &seed_agents_protocol::generated::ModelProviderConfig,
    ) -> ApiResult<Option<Self>> {
        let key_name = config.secret_refs.as_ref().and_then(|refs| refs.get(API_KEY_REF)).filter(|n| !n.is_empty());
        match key_name {
            Some(key_name) => {
                let sealed = secrets::store::load_sealed(conn, owner, key_name)?
                    .ok_or_else(|| ApiError::invalid("Required secret is not configured"))?;
                Ok(Some(SealedKey { account_id: owner.to_owned(), name: key_name.to_owned(), sealed }))
            }
            None if provider_type.requires_api_key() => Err(provider_type.api_key_not_configured()),
            None => Ok(None),
        }
    }

    /// Decrypts the key into a buffer zeroed on drop. A value that does not open is a 500 whose
    /// logged cause never contains plaintext.
    fn open(self, app: &App) -> ApiResult<Zeroizing<Vec<u8>>> {
        app.secrets.open(&self.account_id, &self.name, &self.sealed).map(Zeroizing::new).map_err(ApiError::internal)
    }

    /// Decrypts the key as header-safe text (`api_key_text`'s rule), zeroed on drop.
    pub(crate) fn open_text(self, app: &App, provider_type: ProviderType) -> ApiResult<Zeroizing<String>> {
        let key = self.open(app)?;
        Ok(Zeroizing::new(api_key_text(provider_type, &key)?.to_owned()))
    }
}

/// Resolves the account, loads the provider and its sealed key, in upstream's order of checks.
fn plan(
    conn: &Connection,
    account_id: &str,
    agent_id: Option<&str>,
    name: &str,
    overrides: &[crate::model::vendors::ProviderUrl],
) -> ApiResult<Listing> {
    let owner = match agent_id {
        Some(agent_id) => access::require(conn, agent_id, account_id, Need::Read)?.owner_id,
        None => account_id.to_owned(),
    };
    let row = load(conn, &owner, name)?.ok_or_else(|| ApiError::not_found(PROVIDER_NOT_FOUND))?;
    let provider_type = ProviderType::require(&row.config.type_)?;
    if row.config.auth_mode == Some(ModelProviderConfigAuthMode::Subscription) {
        return Ok(Listing::Subscription);
    }
    let sealed_key = SealedKey::load(conn, &owner, provider_type, &row.config)?;
    let base_url = provider_type.resolve_base_url_with(&row.config, overrides)?;
    Ok(Listing::Vendor { provider_type, base_url, sealed_key })
}

/// The key as text; 400 `<type> API key is invalid` when it is not printable ASCII (tab and
/// space allowed), the only bytes an HTTP header value may carry.
fn api_key_text(provider_type: ProviderType, key: &[u8]) -> ApiResult<&str> {
    let printable = key.iter().all(|byte| *byte == b'\t' || (0x20..0x7f).contains(byte));
    let invalid = || ApiError::invalid(format!("{} API key is invalid", provider_type.as_str()));
    if !printable {
        return Err(invalid());
    }
    std::str::from_utf8(key).map_err(|_| invalid())
}

/// The fixed list of [`SUBSCRIPTION_MODELS`].
pub(crate) fn subscription_models() -> Vec<ProviderModelInfo> {
    SUBSCRIPTION_MODELS
        .iter()
        .map(|(id, name)| ProviderModelInfo { extra: Default::default(), id: (*id).into(), name: (*name).into() })
        .collect()
}

/// One model-list request: where to send it and its headers (sensitive ones marked so).
pub(crate) struct ModelListRequest {
    /// The endpoint, query included.
    pub url: Url,
    /// The request headers.
    pub headers: HeaderMap,
}

/// Shows the URL without its query (Google's key) and the headers with sensitive values hidden.
impl std::fmt::Debug for ModelListRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut url = self.url.clone();
        url.set_query(None);
        f.debug_struct("ModelListRequest").field("url", &url.as_str()).field("headers", &self.headers).finish()
    }
}

/// Builds the request of `style` for `base_url` and `api_key`, as upstream does: the path is
/// appended to the base URL's path (trailing slashes dropped), the base's query and fragment are
/// dropped. OpenAI-style sends `Authorization` only for a non-empty key; Anthropic always sends
/// `x-api-key` (empty without a key) and Google always sends `key`.
///
/// 400 `Provider base URL is invalid` when the base URL does not parse; 400 `API key is invalid`
/// when the key cannot be a header value.
pub(crate) fn build_request(
    style: ModelListStyle,
    base_url: &str,
    api_key: Option<&str>,
) -> ApiResult<ModelListRequest> {
    let mut url = join_url_path(base_url, style.path())?;
    let mut headers = HeaderMap::new();
    let key = api_key.unwrap_or("");
    match style {
        ModelListStyle::OpenAi => {
            if !key.is_empty() {
                let bearer = Zeroizing::new(format!("Bearer {key}"));
                headers.insert(AUTHORIZATION, sensitive(&bearer)?);
            }
        }
        ModelListStyle::Anthropic => {
            headers.insert(HeaderName::from_static("x-api-key"), sensitive(key)?);
            headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(ANTHROPIC_VERSION));
        }
        ModelListStyle::Google => {
            url.query_pairs_mut().append_pair("key", key);
        }
    }
    Ok(ModelListRequest { url, headers })
}

fn sensitive(value: &str) -> ApiResult<HeaderValue> {
    let mut header = HeaderValue::from_str(value).map_err(|_| ApiError::invalid("API key is invalid"))?;
    header.set_sensitive(true);
    Ok(header)
}

/// `base_url` with `path` appended to its path, without query or fragment.
pub(crate) fn join_url_path(base_url: &str, path: &str) -> ApiResult<Url> {
    let mut url = Url::parse(base_url).map_err(|_| ApiError::invalid("Provider base URL is invalid"))?;
    let joined = format!("{}/{}", url.path().trim_end_matches('/'), path.trim_start_matches('/'));
    url.set_path(&joined);
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// Parses a model-list answer of `style` into `{id, name}` entries, skipping malformed entries as
/// upstream does. Anthropic names come from `display_name`, Google's from `displayName` (ids lose
/// their `models/` prefix, and models whose `supportedGenerationMethods` lack `generateContent`
/// are dropped); OpenAI-style names are the ids. 502 `<label> response is invalid` for anything
/// that is not JSON with the expected list.
pub(crate) fn parse_models(style: ModelListStyle, body: &[u8]) -> ApiResult<Vec<ProviderModelInfo>> {
    let body: Value = serde_json::from_slice(body).map_err(|_| style.invalid_response())?;
    let list_key = match style {
        ModelListStyle::OpenAi | ModelListStyle::Anthropic => "data",
        ModelListStyle::Google => "models",
    };
    let Some(Value::Array(entries)) = body.as_object().and_then(|body| body.get(list_key)) else {
        return Err(style.invalid_response());
    };
    Ok(entries.iter().filter_map(|entry| parse_entry(style, entry.as_object()?)).collect())
}

fn parse_entry(style: ModelListStyle, entry: &serde_json::Map<String, Value>) -> Option<ProviderModelInfo> {
    let text = |key: &str| entry.get(key).and_then(Value::as_str);
    let (id, name) = match style {
        ModelListStyle::OpenAi => (text("id")?.to_owned(), None),
        ModelListStyle::Anthropic => (text("id")?.to_owned(), text("display_name")),
        ModelListStyle::Google => {
            let full = text("name")?;
            if let Some(Value::Array(methods)) = entry.get("supportedGenerationMethods")
                && !methods.iter().any(|method| method.as_str() == Some("generateContent"))
            {
                return None;
            }
            (full.strip_prefix("models/").unwrap_or(full).to_owned(), text("displayName"))
        }
    };
    let name = name.map_or_else(|| id.clone(), str::to_owned);
    Some(ProviderModelInfo { extra: Default::default(), id, name })
}

/// Performs the model-list request of `style` against `base_url` with `http`, within `timeout`,
/// and parses the answer. Non-2xx answers are 502 `<label> request failed: HTTP n`; a vendor that
/// cannot be reached or does not answer in time is 502 `<label> request failed: unreachable` /
/// `… timed out`; bodies over [`MAX_MODEL_LIST_BYTES`] or not in the style's shape are 502
/// `<label> response is invalid`.
pub async fn fetch_models(
    http: &reqwest::Client,
    style: ModelListStyle,
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> ApiResult<Vec<ProviderModelInfo>> {
    fetch_models_of(http, style, base_url, api_key, timeout, &style.label()).await
}

/// A provider as its failures name it: `custom provider at http://host/v1`, its type and base
/// URL (without user info or query), so a failure never names a vendor the provider is not.
struct Named<'a> {
    provider_type: &'a str,
    base_url: &'a str,
}

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = Url::parse(self.base_url).map(|mut url| {
            // Setting these fails only for URLs that cannot have them; then there is nothing to hide.
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        });
        write!(f, "{} provider at {}: models", self.provider_type, shown.as_deref().unwrap_or("an invalid URL"))
    }
}

/// [`fetch_models`], its failures prefixed with `label` (`<label> request failed: HTTP 500`).
async fn fetch_models_of(
    http: &reqwest::Client,
    style: ModelListStyle,
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
    label: &(dyn std::fmt::Display + Sync),
) -> ApiResult<Vec<ProviderModelInfo>> {
    let ModelListRequest { url, headers } = build_request(style, base_url, api_key)?;
    let unreachable = |error: reqwest::Error| {
        let reason = if error.is_timeout() { "timed out" } else { "unreachable" };
        // The URL may hold the key (Google): log the error without it.
        tracing::warn!(label = %label, error = %error.without_url(), "model list request failed");
        ApiError::upstream(format!("{label} request failed: {reason}"))
    };
    let invalid = || ApiError::upstream(format!("{label} response is invalid"));
    let mut response = http.get(url).headers(headers).timeout(timeout).send().await.map_err(unreachable)?;
    let status = response.status();
    if !status.is_success() {
        return Err(ApiError::upstream(format!("{label} request failed: HTTP {}", status.as_u16())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > MAX_MODEL_LIST_BYTES {
            return Err(invalid());
        }
        body.extend_from_slice(&chunk);
    }
    // Every failure of `parse_models` is an answer not in the style's shape.
    parse_models(style, &body).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn header<'a>(request: &'a ModelListRequest, name: &str) -> Option<&'a str> {
        request.headers.get(name).map(|value| value.to_str().unwrap())
    }

    fn models(list: &[(&str, &str)]) -> Vec<ProviderModelInfo> {
        list.iter()
            .map(|(id, name)| ProviderModelInfo { extra: Default::default(), id: (*id).into(), name: (*name).into() })
            .collect()
    }

    #[test]
    fn openai_requests() {
        let request = build_request(ModelListStyle::OpenAi, "https://api.openai.com/v1", Some("sk-1")).unwrap();
        assert_eq!(request.url.as_str(), "https://api.openai.com/v1/models");
        assert_eq!(header(&request, "authorization"), Some("Bearer sk-1"));
        assert!(request.headers.get("authorization").unwrap().is_sensitive());
        assert_eq!(request.headers.len(), 1);
        for no_key in [None, Some("")] {
            let request = build_request(ModelListStyle::OpenAi, "http://localhost:11434/v1/", no_key).unwrap();
            assert_eq!(request.url.as_str(), "http://localhost:11434/v1/models");
            assert!(request.headers.is_empty(), "no Authorization without a key");
        }
    }

    #[test]
    fn anthropic_requests() {
        let request = build_request(ModelListStyle::Anthropic, "https://api.anthropic.com", Some("ak")).unwrap();
        assert_eq!(request.url.as_str(), "https://api.anthropic.com/v1/models");
        assert_eq!(header(&request, "x-api-key"), Some("ak"));
        assert!(request.headers.get("x-api-key").unwrap().is_sensitive());
        assert!(!format!("{request:?}").contains("ak\""));
        assert_eq!(header(&request, "anthropic-version"), Some("2023-06-01"));
        assert_eq!(header(&request, "authorization"), None);
    }

    #[test]
    fn google_requests() {
        let base = "https://generativelanguage.googleapis.com/v1beta";
        let request = build_request(ModelListStyle::Google, base, Some("g k&=")).unwrap();
        assert_eq!(request.url.path(), "/v1beta/models");
        let query: Vec<(String, String)> = request.url.query_pairs().into_owned().collect();
        assert_eq!(query, [("key".to_owned(), "g k&=".to_owned())]);
        assert!(request.headers.is_empty());
        let shown = format!("{request:?}");
        assert!(!shown.contains("g k") && !shown.contains("key="), "{shown}");
    }

    #[test]
    fn url_joining() {
        let join = |base, path| join_url_path(base, path).unwrap().to_string();
        assert_eq!(join("http://h:1", "models"), "http://h:1/models");
        assert_eq!(join("http://h:1/", "/models"), "http://h:1/models");
        assert_eq!(join("http://h/a//", "v1/models"), "http://h/a/v1/models");
        assert_eq!(join("http://h/a?x=1#f", "models"), "http://h/a/models");
        let error = join_url_path("not a url", "models").unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::Invalid, "Provider base URL is invalid"));
    }

    #[test]
    fn keys_that_cannot_be_headers_are_refused_without_echo() {
        let error = build_request(ModelListStyle::OpenAi, "http://h", Some("sk\nsecret")).unwrap_err();
        assert_eq!((error.kind(), error.message()), (ErrorKind::Invalid, "API key is invalid"));
        for bad in [&[0xff, b's'][..], b"sk\nx", "ké".as_bytes()] {
            let error = api_key_text(ProviderType::Groq, bad).unwrap_err();
            assert_eq!(error.message(), "groq API key is invalid");
        }
        assert_eq!(api_key_text(ProviderType::Groq, b"sk-1 \t~").unwrap(), "sk-1 \t~");
    }

    #[test]
    fn openai_parsing() {
        let body =
            br#"{"object":"list","data":[{"id":"gpt-5"},{"id":7},"x",{"name":"no id"},{"id":"o3","owned_by":"x"}]}"#;
        assert_eq!(parse_models(ModelListStyle::OpenAi, body).unwrap(), models(&[("gpt-5", "gpt-5"), ("o3", "o3")]));
        assert_eq!(parse_models(ModelListStyle::OpenAi, br#"{"data":[]}"#).unwrap(), []);
    }

    #[test]
    fn anthropic_parsing() {
        let body = br#"{"data":[{"id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5"},{"id":"claude-x","display_name":3}]}"#;
        assert_eq!(
            parse_models(ModelListStyle::Anthropic, body).unwrap(),
            models(&[("claude-sonnet-4-5", "Claude Sonnet 4.5"), ("claude-x", "claude-x")])
        );
    }

    #[test]
    fn google_parsing_filters_non_generating_models() {
        let body = br#"{"models":[
            {"name":"models/gemini-2.5-pro","displayName":"Gemini 2.5 Pro","supportedGenerationMethods":["generateContent","countTokens"]},
            {"name":"models/embedding-001","displayName":"Embedding","supportedGenerationMethods":["embedContent"]},
            {"name":"models/gemini-x"},
            {"name":"tunedModels/t1","supportedGenerationMethods":"not a list"},
            {"displayName":"no name"}
        ]}"#;
        assert_eq!(
            parse_models(ModelListStyle::Google, body).unwrap(),
            models(&[
                ("gemini-2.5-pro", "Gemini 2.5 Pro"),
                ("gemini-x", "gemini-x"),
                ("tunedModels/t1", "tunedModels/t1")
            ])
        );
    }

    #[test]
    fn invalid_answers_are_bad_gateway() {
        for (style, body, message) in [
            (ModelListStyle::OpenAi, &b"not json"[..], "OpenAI models response is invalid"),
            (ModelListStyle::OpenAi, br#"{"models":[]}"#, "OpenAI models response is invalid"),
            (ModelListStyle::OpenAi, br#"[{"id":"x"}]"#, "OpenAI models response is invalid"),
            (ModelListStyle::Anthropic, br#"{"data":{}}"#, "Anthropic models response is invalid"),
            (ModelListStyle::Google, br#"{"data":[]}"#, "Google models response is invalid"),
        ] {
            let error = parse_models(style, body).unwrap_err();
            assert_eq!((error.kind(), error.message()), (ErrorKind::Upstream, message));
        }
    }

    #[test]
    fn failures_name_the_provider_type_and_url_without_credentials() {
        let named = Named { provider_type: "custom", base_url: "http://user:pw@127.0.0.1:9/v1?token=t" };
        assert_eq!(named.to_string(), "custom provider at http://127.0.0.1:9/v1: models");
        let bad = Named { provider_type: "ollama", base_url: "not a url" };
        assert_eq!(bad.to_string(), "ollama provider at an invalid URL: models");
    }

    #[test]
    fn subscription_list_is_fixed() {
        let list = subscription_models();
        assert_eq!(list.len(), 5);
        assert_eq!(
            list[0],
            ProviderModelInfo { extra: Default::default(), id: "gpt-5.6-sol".into(), name: "GPT-5.6 Sol".into() }
        );
        assert_eq!(
            list[4],
            ProviderModelInfo { extra: Default::default(), id: "gpt-5.4".into(), name: "GPT-5.4".into() }
        );
    }
}
