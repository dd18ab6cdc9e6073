//! The model vendors this server speaks to: the provider types it knows, and the checks a provider
//! record passes before it is stored (`SetModelProvider`).
//!
//! Everything here is static: which vendor endpoint a type talks to, whether a stored record may
//! point it somewhere else, whether it needs an API key, which model-list endpoint shape it has, and
//! which reasoning levels each model accepts. Nothing here touches the database or the network.
//!
//! Error messages match the upstream server word for word, because clients show them as they are.

use seed_agents_protocol::generated::{ModelProviderConfig, ModelProviderConfigAuthMode, ReasoningLevel};

use crate::error::{ApiError, ApiResult};
use crate::validate::{MAX_NAME_BYTES, MAX_OPEN_MAP_CBOR_BYTES, bounded_string, cbor_len, js_trim};

/// The byte limit of a provider base URL.
pub(crate) const MAX_BASE_URL_BYTES: usize = 2048;

/// A supported model provider type (`ModelProviderConfig.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderType {
    /// OpenAI, api.openai.com (also the only type with subscription sign-in).
    OpenAi,
    /// Anthropic, api.anthropic.com.
    Anthropic,
    /// Google Gemini, generativelanguage.googleapis.com.
    Google,
    /// OpenRouter (OpenAI-compatible).
    OpenRouter,
    /// DeepSeek (OpenAI-compatible).
    DeepSeek,
    /// Groq (OpenAI-compatible).
    Groq,
    /// xAI (OpenAI-compatible).
    Xai,
    /// A local or self-hosted Ollama server (OpenAI-compatible, no key, base URL may be changed).
    Ollama,
    /// Any OpenAI-compatible endpoint; the record must carry its base URL.
    Custom,
}

/// The shape of the vendor endpoint that lists a provider's models (`ListProviderModels`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelListStyle {
    /// `GET {base}/models`, bearer key, answer `{data: [{id}]}`.
    OpenAi,
    /// `GET {base}/v1/models`, `x-api-key` + `anthropic-version`, answer `{data: [{id, display_name?}]}`.
    Anthropic,
    /// `GET {base}/models?key=…`, answer `{models: [{name, displayName?, supportedGenerationMethods?}]}`.
    Google,
}

impl ModelListStyle {
    /// The human label that prefixes model-list failures (`<label> request failed: HTTP 401`).
    pub fn label(self) -> &'static str {
        match self {
            Self::OpenAi => "OpenAI models",
            Self::Anthropic => "Anthropic models",
            Self::Google => "Google models",
        }
    }

    /// The path appended to the base URL to list models.
    pub fn path(self) -> &'static str {
        match self {
            Self::OpenAi | Self::Google => "models",
            Self::Anthropic => "v1/models",
        }
    }

    /// 502 for a non-success HTTP status from the model-list endpoint.
    pub fn request_failed(self, status: u16) -> ApiError {
        ApiError::upstream(format!("{} request failed: HTTP {status}", self.label()))
    }

    /// 502 for a model-list answer that does not have the expected shape.
    pub fn invalid_response(self) -> ApiError {
        ApiError::upstream(format!("{} response is invalid", self.label()))
    }
}

impl ProviderType {
    /// Every supported type, in the order the protocol lists them.
    pub const ALL: [ProviderType; 9] = [
        Self::OpenAi,
        Self::Anthropic,
        Self::Google,
        Self::OpenRouter,
        Self::DeepSeek,
        Self::Groq,
        Self::Xai,
        Self::Ollama,
        Self::Custom,
    ];

    /// The type for its wire name (exact, case-sensitive), or `None` when unsupported.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|candidate| candidate.as_str() == name)
    }

    /// The type for a stored or requested name, or 400 `Unsupported model provider type: X`.
    pub fn require(name: &str) -> ApiResult<Self> {
        Self::parse(name).ok_or_else(|| ApiError::invalid(format!("Unsupported model provider type: {name}")))
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Google => "google",
            Self::OpenRouter => "openrouter",
            Self::DeepSeek => "deepseek",
            Self::Groq => "groq",
            Self::Xai => "xai",
            Self::Ollama => "ollama",
            Self::Custom => "custom",
        }
    }

    /// The endpoint used when the record has no (usable) base URL of its own; `None` for `custom`.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Self::OpenAi => Some("https://api.openai.com/v1"),
            Self::Anthropic => Some("https://api.anthropic.com"),
            Self::Google => Some("https://generativelanguage.googleapis.com/v1beta"),
            Self::OpenRouter => Some("https://openrouter.ai/api/v1"),
            Self::DeepSeek => Some("https://api.deepseek.com"),
            Self::Groq => Some("https://api.groq.com/openai/v1"),
            Self::Xai => Some("https://api.x.ai/v1"),
            Self::Ollama => Some("http://localhost:11434/v1"),
            Self::Custom => None,
        }
    }

    /// Whether a stored record may choose the base URL. Pinned vendors never do, so a stored API
    /// key cannot be sent to a host the vendor does not own.
    pub fn allows_custom_base_url(self) -> bool {
        matches!(self, Self::Ollama | Self::Custom)
    }

    /// Whether listing models and running turns need `secretRefs.apiKey` (api-key auth mode).
    pub fn requires_api_key(self) -> bool {
        !matches!(self, Self::Ollama | Self::Custom)
    }

    /// Whether the type offers subscription sign-in (`authMode: 'subscription'`, provider OAuth).
    pub fn supports_subscription(self) -> bool {
        matches!(self, Self::OpenAi)
    }

    /// Which model-list endpoint shape the type has.
    pub fn model_list_style(self) -> ModelListStyle {
        match self {
            Self::Anthropic => ModelListStyle::Anthropic,
            Self::Google => ModelListStyle::Google,
            _ => ModelListStyle::OpenAi,
        }
    }

    /// The human label of the type's model-list requests (`OpenAI models` for every
    /// OpenAI-compatible type), used as `<label> request failed: HTTP n`.
    pub fn label(self) -> &'static str {
        self.model_list_style().label()
    }

    /// 400 `<type> API key is not configured`, for an api-key provider without `secretRefs.apiKey`.
    pub fn api_key_not_configured(self) -> ApiError {
        ApiError::invalid(format!("{} API key is not configured", self.as_str()))
    }

    /// The base URL requests go to: the record's own (trimmed, non-blank) URL when the type allows
    /// one, else the type's default. `None` only for a `custom` record without a base URL.
    pub fn effective_base_url(self, config: &ModelProviderConfig) -> Option<String> {
        let configured = config.base_url.as_deref().map(js_trim).filter(|url| !url.is_empty());
        match configured {
            Some(url) if self.allows_custom_base_url() => Some(url.to_owned()),
            _ => self.default_base_url().map(str::to_owned),
        }
    }

    /// [`Self::effective_base_url`], or 400 `Base URL is required for provider type: X`.
    pub fn resolve_base_url(self, config: &ModelProviderConfig) -> ApiResult<String> {
        self.effective_base_url(config).ok_or_else(|| self.base_url_required())
    }

    /// [`Self::resolve_base_url`], with the operator's `--provider-url` for this type in place
    /// of the type's default (a gateway or proxy in front of the vendor). A record's own URL,
    /// where the type allows one, still wins.
    pub fn resolve_base_url_with(self, config: &ModelProviderConfig, overrides: &[ProviderUrl]) -> ApiResult<String> {
        let own = config.base_url.as_deref().map(js_trim).filter(|url| !url.is_empty());
        if own.is_some() && self.allows_custom_base_url() {
            return self.resolve_base_url(config);
        }
        match overrides.iter().rev().find(|entry| !entry.subscription && entry.provider_type == self) {
            Some(entry) => Ok(entry.url.clone()),
            None => self.resolve_base_url(config),
        }
    }

    fn base_url_required(self) -> ApiError {
        ApiError::invalid(format!("Base URL is required for provider type: {}", self.as_str()))
    }
}

impl std::fmt::Display for ProviderType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator's base URL for every provider of one type (`--provider-url anthropic=https://…`),
/// or for the subscription backend of a type (`--provider-url openai-subscription=https://…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrl {
    /// The type it applies to.
    pub provider_type: ProviderType,
    /// Whether it is the type's subscription backend rather than its API.
    pub subscription: bool,
    /// Where that type's requests go instead of the vendor's default.
    pub url: String,
}

/// The suffix of a `--provider-url` key that names a type's subscription backend.
const SUBSCRIPTION_SUFFIX: &str = "-subscription";

/// Parses `type=url` or `type-subscription=url` (an http(s) URL; one trailing `/` dropped).
pub fn parse_provider_url(value: &str) -> Result<ProviderUrl, String> {
    let (name, url) = value.split_once('=').ok_or_else(|| format!("expected <type>=<url>, got {value}"))?;
    let name = name.trim();
    let (type_name, subscription) = match name.strip_suffix(SUBSCRIPTION_SUFFIX) {
        Some(type_name) => (type_name, true),
        None => (name, false),
    };
    let provider_type = ProviderType::parse(type_name).ok_or_else(|| format!("unknown provider type: {name}"))?;
    if subscription && !provider_type.supports_subscription() {
        return Err(format!("provider type {type_name} has no subscription sign-in"));
    }
    let url = url.trim();
    if !is_http_url(url) {
        return Err(format!("not an http(s) URL: {url}"));
    }
    Ok(ProviderUrl { provider_type, subscription, url: url.strip_suffix('/').unwrap_or(url).to_owned() })
}

/// The base URL of a type's subscription backend: the operator's `<type>-subscription=` URL, or
/// the vendor's (OpenAI: the ChatGPT Codex backend, whose Responses endpoint is `{base}/responses`).
pub(crate) fn subscription_base_url(provider_type: ProviderType, overrides: &[ProviderUrl]) -> ApiResult<String> {
    if let Some(entry) = overrides.iter().rev().find(|entry| entry.subscription && entry.provider_type == provider_type)
    {
        return Ok(entry.url.clone());
    }
    match provider_type {
        ProviderType::OpenAi => Ok(OPENAI_SUBSCRIPTION_BASE_URL.to_owned()),
        other => Err(ApiError::invalid(format!("Provider type does not support subscription auth: {other}"))),
    }
}

/// Where "Sign in with ChatGPT" turns go: the backend the Codex CLI uses with a ChatGPT plan.
pub(crate) const OPENAI_SUBSCRIPTION_BASE_URL: &str = "https://chatgpt.com/backend-api/codex";

/// Checks and trims a provider name (`Provider name is required` / `… is too large`).
pub(crate) fn provider_name(name: &str) -> ApiResult<String> {
    bounded_string(name, "Provider name", MAX_NAME_BYTES)
}

/// Validates a `SetModelProvider` request and returns the config to store.
///
/// The name is checked with [`provider_name`] (call that too for the trimmed name to store). The
/// returned config has its type, base URL and secret references trimmed, keeps `authMode` and
/// `modelDefaults` as given, and drops a base URL the type would never use.
pub(crate) fn validate_provider(name: &str, config: &ModelProviderConfig) -> ApiResult<ModelProviderConfig> {
    provider_name(name)?;
    let type_name = bounded_string(&config.type_, "Provider type", MAX_NAME_BYTES)?;
    let provider_type = ProviderType::require(&type_name)?;

    if config.auth_mode == Some(ModelProviderConfigAuthMode::Subscription) {
        if !provider_type.supports_subscription() {
            return Err(ApiError::invalid(format!("Provider type does not support subscription auth: {type_name}")));
        }
        let has_oauth_ref =
            config.secret_refs.as_ref().and_then(|refs| refs.get("oauth")).is_some_and(|r| !r.is_empty());
        if !has_oauth_ref {
            return Err(ApiError::invalid("Subscription providers require a secretRefs.oauth credential reference"));
        }
    }

    let mut base_url = None;
    if let Some(raw) = &config.base_url {
        let url = bounded_string(raw, "Provider base URL", MAX_BASE_URL_BYTES)?;
        if !is_http_url(&url) {
            return Err(ApiError::invalid("Provider base URL is invalid"));
        }
        if provider_type.allows_custom_base_url() {
            base_url = Some(url);
        }
    }
    if base_url.is_none() && provider_type.default_base_url().is_none() {
        return Err(provider_type.base_url_required());
    }

    if let Some(defaults) = &config.model_defaults
        && cbor_len(defaults)? > MAX_OPEN_MAP_CBOR_BYTES
    {
        return Err(ApiError::invalid("Model defaults are too large"));
    }

    let secret_refs = match &config.secret_refs {
        None => None,
        Some(refs) => {
            let mut checked = std::collections::BTreeMap::new();
            for (key, value) in refs {
                let key = bounded_string(key, "Secret ref key", MAX_NAME_BYTES)?;
                let value = bounded_string(value, "Secret ref value", MAX_NAME_BYTES)?;
                checked.insert(key, value);
            }
            Some(checked)
        }
    };

    Ok(ModelProviderConfig {
        extra: Default::default(),
        auth_mode: config.auth_mode,
        base_url,
        model_defaults: config.model_defaults.clone(),
        secret_refs,
        type_: type_name,
    })
}

/// Whether `url` is an absolute `http:` or `https:` URL with a host, as a base URL must be.
///
/// A deliberately small check (the server has no URL crate): scheme, `//`, a non-empty host
/// (a name, an IPv4 address or a bracketed IPv6 address), an optional numeric port ≤ 65535, and no
/// whitespace or control characters anywhere.
pub(crate) fn is_http_url(url: &str) -> bool {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return false;
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return false;
    };
    let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host_port)| host_port);

    let (host_ok, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        let Some((inner, after)) = bracketed.split_once(']') else {
            return false;
        };
        let ipv6_ok = !inner.is_empty()
            && inner.contains(':')
            && inner.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return false,
            },
        };
        (ipv6_ok, port)
    } else {
        let (host, port) = match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        };
        (!host.is_empty() && !host.chars().any(is_forbidden_host_char), port)
    };
    let port_ok = match port {
        None | Some("") => true,
        Some(port) => port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u32>().is_ok_and(|n| n <= 65_535),
    };
    host_ok && port_ok
}

fn is_forbidden_host_char(c: char) -> bool {
    matches!(c, '#' | '%' | '/' | ':' | '<' | '>' | '?' | '@' | '[' | '\\' | ']' | '^' | '|' | '"' | '`' | '{' | '}')
}

/// What leaving the reasoning level unset means for a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReasoningOff {
    /// The model does no reasoning; the server disables or omits it.
    Off,
    /// Reasoning cannot be disabled; the provider's default level applies.
    ProviderDefault,
}

/// How a model's reasoning can be controlled (upstream `modelReasoningSupport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReasoningSupport {
    /// The levels the model accepts, least reasoning first.
    pub levels: &'static [ReasoningLevel],
    /// What an unset level means.
    pub off: ReasoningOff,
    /// Whether the model takes an explicit "no reasoning" value (OpenAI `reasoning.effort: none`),
    /// which it needs when no level is chosen (gpt-5.1 and later default to reasoning): such a
    /// step goes to the Responses API with that value (docs/runtime.md §1.9).
    pub supports_effort_none: bool,
}

const LOW_TO_HIGH: &[ReasoningLevel] = &[ReasoningLevel::Low, ReasoningLevel::Medium, ReasoningLevel::High];
const MINIMAL_TO_HIGH: &[ReasoningLevel] =
    &[ReasoningLevel::Minimal, ReasoningLevel::Low, ReasoningLevel::Medium, ReasoningLevel::High];
const LOW_TO_XHIGH: &[ReasoningLevel] =
    &[ReasoningLevel::Low, ReasoningLevel::Medium, ReasoningLevel::High, ReasoningLevel::Xhigh];

/// The reasoning control of a model, or `None` when it (or its provider type) has none.
///
/// Known per provider type from the model id alone:
/// - openai: `o1`/`o3`/`o4` families take low–high and always reason; gpt-5.0 takes minimal–high
///   and always reasons (its `gpt-5-chat…` variants have no control); gpt-5.1 takes low–high;
///   gpt-5.2 and every later version take low–xhigh; older models have no control.
/// - anthropic: claude-3-7 and later (and every family-first id such as `claude-sonnet-4-5`) take
///   minimal–high, off by default.
/// - google: gemini-2.5 and later take minimal–high; `-pro` models cannot turn reasoning off.
/// - every other type: no control.
///
/// No model accepts `max` yet.
pub(crate) fn reasoning_support(provider_type: ProviderType, model: &str) -> Option<ReasoningSupport> {
    match provider_type {
        ProviderType::OpenAi => openai_reasoning(model),
        ProviderType::Anthropic => anthropic_reasoning(model),
        ProviderType::Google => google_reasoning(model),
        _ => None,
    }
}

/// [`reasoning_support`] for a provider type by name; an unknown type has no reasoning control.
pub(crate) fn reasoning_support_for(provider_type: &str, model: &str) -> Option<ReasoningSupport> {
    ProviderType::parse(provider_type).and_then(|provider_type| reasoning_support(provider_type, model))
}

/// The levels a model accepts (empty when it has no reasoning control).
#[cfg(test)]
fn reasoning_levels(provider_type: ProviderType, model: &str) -> &'static [ReasoningLevel] {
    reasoning_support(provider_type, model).map_or(&[], |support| support.levels)
}

/// [`check_reasoning_level_for`] for a typed provider type.
#[cfg(test)]
fn check_reasoning_level(provider_type: ProviderType, model: &str, level: Option<ReasoningLevel>) -> ApiResult<()> {
    check_reasoning_support(reasoning_support(provider_type, model), model, level)
}

/// Checks an agent definition's reasoning level against its model (no level always passes), for a
/// provider type by name (as stored on a provider record).
///
/// Invalid input `Model X does not support a reasoning level` when the model has no reasoning
/// control, and `Model X does not support reasoning level 'L' (valid: a, b)` when the level is not
/// one it takes.
pub(crate) fn check_reasoning_level_for(
    provider_type: &str,
    model: &str,
    level: Option<ReasoningLevel>,
) -> ApiResult<()> {
    check_reasoning_support(reasoning_support_for(provider_type, model), model, level)
}

fn check_reasoning_support(
    support: Option<ReasoningSupport>,
    model: &str,
    level: Option<ReasoningLevel>,
) -> ApiResult<()> {
    let Some(level) = level else {
        return Ok(());
    };
    let Some(support) = support else {
        return Err(ApiError::invalid(format!("Model {model} does not support a reasoning level")));
    };
    if support.levels.contains(&level) {
        return Ok(());
    }
    let valid: Vec<String> = support.levels.iter().map(ToString::to_string).collect();
    Err(ApiError::invalid(format!(
        "Model {model} does not support reasoning level '{level}' (valid: {})",
        valid.join(", ")
    )))
}

/// The reasoning check of a session model override (`UpdateSession`), which upstream words
/// differently: 400 `Model X does not support reasoning level 'L'` whether the model has no
/// reasoning control or just not that level.
pub(crate) fn check_override_reasoning_level(
    provider_type: &str,
    model: &str,
    level: Option<ReasoningLevel>,
) -> ApiResult<()> {
    let Some(level) = level else {
        return Ok(());
    };
    match reasoning_support_for(provider_type, model) {
        Some(support) if support.levels.contains(&level) => Ok(()),
        _ => Err(ApiError::invalid(format!("Model {model} does not support reasoning level '{level}'"))),
    }
}

/// Splits a leading run of ASCII digits off `text`: its value (saturating, as a huge JavaScript
/// number still compares as huge) and the rest. `None` when `text` does not start with a digit.
fn leading_number(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let value = text[..digits].bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0')));
    Some((value, &text[digits..]))
}

/// Parses `<major>` or `<major>.<minor>` at the start of `text` (minor 0 when absent).
pub(crate) fn leading_version(text: &str) -> Option<(u64, u64)> {
    let (major, rest) = leading_number(text)?;
    let minor = rest.strip_prefix('.').and_then(leading_number).map_or(0, |(minor, _)| minor);
    Some((major, minor))
}

fn openai_reasoning(model: &str) -> Option<ReasoningSupport> {
    let o_series = model.strip_prefix('o').is_some_and(|rest| {
        let mut chars = rest.chars();
        matches!(chars.next(), Some('1' | '3' | '4')) && (chars.as_str().is_empty() || chars.as_str().starts_with('-'))
    });
    if o_series {
        return Some(ReasoningSupport {
            levels: LOW_TO_HIGH,
            off: ReasoningOff::ProviderDefault,
            supports_effort_none: false,
        });
    }
    let (major, minor) = leading_version(model.strip_prefix("gpt-")?)?;
    if major < 5 {
        return None;
    }
    if major > 5 || minor >= 2 {
        return Some(ReasoningSupport { levels: LOW_TO_XHIGH, off: ReasoningOff::Off, supports_effort_none: true });
    }
    if minor == 1 {
        return Some(ReasoningSupport { levels: LOW_TO_HIGH, off: ReasoningOff::Off, supports_effort_none: true });
    }
    if model.starts_with("gpt-5-chat") {
        return None;
    }
    Some(ReasoningSupport { levels: MINIMAL_TO_HIGH, off: ReasoningOff::ProviderDefault, supports_effort_none: false })
}

fn anthropic_reasoning(model: &str) -> Option<ReasoningSupport> {
    const THINKING: ReasoningSupport =
        ReasoningSupport { levels: MINIMAL_TO_HIGH, off: ReasoningOff::Off, supports_effort_none: false };
    let rest = model.strip_prefix("claude-")?;
    // Version-first ids: claude-<major>-<minor>-<family>…; thinking arrived with 3.7.
    if let Some((major, after)) = leading_number(rest)
        && let Some((minor, _)) = after.strip_prefix('-').and_then(leading_number)
    {
        return (major > 3 || (major == 3 && minor >= 7)).then_some(THINKING);
    }
    // Family-first ids (claude-<family>-<major>…) are all recent enough.
    let letters = rest.bytes().take_while(u8::is_ascii_lowercase).count();
    let family_first = letters > 0
        && rest[letters..].strip_prefix('-').is_some_and(|after| after.starts_with(|c: char| c.is_ascii_digit()));
    family_first.then_some(THINKING)
}

fn google_reasoning(model: &str) -> Option<ReasoningSupport> {
    let (major, minor) = leading_version(model.strip_prefix("gemini-")?)?;
    if major < 2 || (major == 2 && minor < 5) {
        return None;
    }
    let off = if model.contains("-pro") { ReasoningOff::ProviderDefault } else { ReasoningOff::Off };
    Some(ReasoningSupport { levels: MINIMAL_TO_HIGH, off, supports_effort_none: false })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ipld_core::ipld::Ipld;
    use seed_agents_protocol::Value;

    use super::*;
    use crate::error::ErrorKind;

    fn config(type_: &str) -> ModelProviderConfig {
        ModelProviderConfig {
            extra: Default::default(),
            auth_mode: None,
            base_url: None,
            model_defaults: None,
            secret_refs: None,
            type_: type_.into(),
        }
    }

    fn refs(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[track_caller]
    fn rejects(result: ApiResult<impl std::fmt::Debug>, message: &str) {
        let error = result.expect_err("expected an error");
        assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
        assert_eq!(error.message(), message);
    }

    #[test]
    fn types_round_trip_and_unknown_types_are_unsupported() {
        for provider_type in ProviderType::ALL {
            assert_eq!(ProviderType::parse(provider_type.as_str()), Some(provider_type));
            assert_eq!(provider_type.to_string(), provider_type.as_str());
        }
        assert_eq!(ProviderType::parse("OpenAI"), None);
        assert_eq!(ProviderType::parse(" openai"), None);
        rejects(ProviderType::require("mistral"), "Unsupported model provider type: mistral");
    }

    #[test]
    fn provider_table_matches_the_protocol() {
        use ProviderType::*;
        let expected = [
            (OpenAi, Some("https://api.openai.com/v1"), ModelListStyle::OpenAi, false, true),
            (Anthropic, Some("https://api.anthropic.com"), ModelListStyle::Anthropic, false, true),
            (Google, Some("https://generativelanguage.googleapis.com/v1beta"), ModelListStyle::Google, false, true),
            (OpenRouter, Some("https://openrouter.ai/api/v1"), ModelListStyle::OpenAi, false, true),
            (DeepSeek, Some("https://api.deepseek.com"), ModelListStyle::OpenAi, false, true),
            (Groq, Some("https://api.groq.com/openai/v1"), ModelListStyle::OpenAi, false, true),
            (Xai, Some("https://api.x.ai/v1"), ModelListStyle::OpenAi, false, true),
            (Ollama, Some("http://localhost:11434/v1"), ModelListStyle::OpenAi, true, false),
            (Custom, None, ModelListStyle::OpenAi, true, false),
        ];
        for (provider_type, base, style, custom_base, key) in expected {
            assert_eq!(provider_type.default_base_url(), base, "{provider_type}");
            assert_eq!(provider_type.model_list_style(), style, "{provider_type}");
            assert_eq!(provider_type.allows_custom_base_url(), custom_base, "{provider_type}");
            assert_eq!(provider_type.requires_api_key(), key, "{provider_type}");
            assert_eq!(provider_type.supports_subscription(), provider_type == OpenAi, "{provider_type}");
        }
    }

    #[test]
    fn labels_and_vendor_error_messages() {
        assert_eq!(ProviderType::OpenAi.label(), "OpenAI models");
        assert_eq!(ProviderType::Groq.label(), "OpenAI models");
        assert_eq!(ProviderType::Anthropic.label(), "Anthropic models");
        assert_eq!(ProviderType::Google.label(), "Google models");
        assert_eq!(ModelListStyle::Anthropic.path(), "v1/models");
        assert_eq!(ModelListStyle::Google.path(), "models");

        let failed = ProviderType::Anthropic.model_list_style().request_failed(401);
        assert_eq!(failed.kind(), ErrorKind::Upstream);
        assert_eq!(failed.message(), "Anthropic models request failed: HTTP 401");
        let invalid = ModelListStyle::OpenAi.invalid_response();
        assert_eq!(invalid.kind(), ErrorKind::Upstream);
        assert_eq!(invalid.message(), "OpenAI models response is invalid");
        rejects(Err::<(), _>(ProviderType::DeepSeek.api_key_not_configured()), "deepseek API key is not configured");
    }

    #[test]
    fn effective_base_url_honours_overrides_only_where_allowed() {
        let mut openai = config("openai");
        openai.base_url = Some("https://evil.example/v1".into());
        assert_eq!(ProviderType::OpenAi.effective_base_url(&openai).as_deref(), Some("https://api.openai.com/v1"));

        let mut ollama = config("ollama");
        assert_eq!(ProviderType::Ollama.effective_base_url(&ollama).as_deref(), Some("http://localhost:11434/v1"));
        ollama.base_url = Some("  http://gpu-box:11434/v1 ".into());
        assert_eq!(ProviderType::Ollama.effective_base_url(&ollama).as_deref(), Some("http://gpu-box:11434/v1"));
        ollama.base_url = Some("   ".into());
        assert_eq!(ProviderType::Ollama.effective_base_url(&ollama).as_deref(), Some("http://localhost:11434/v1"));

        let mut custom = config("custom");
        assert_eq!(ProviderType::Custom.effective_base_url(&custom), None);
        rejects(ProviderType::Custom.resolve_base_url(&custom), "Base URL is required for provider type: custom");
        custom.base_url = Some("https://llm.internal/v1".into());
        assert_eq!(ProviderType::Custom.resolve_base_url(&custom).ok().as_deref(), Some("https://llm.internal/v1"));
    }

    #[test]
    fn subscription_provider_urls() {
        let api = parse_provider_url("openai=http://127.0.0.1:9/v1/").unwrap();
        let backend = parse_provider_url("openai-subscription=http://127.0.0.1:9/backend-api/codex").unwrap();
        assert_eq!((api.subscription, backend.subscription), (false, true));
        assert_eq!(backend.provider_type, ProviderType::OpenAi);
        let overrides = [api.clone(), backend.clone()];
        // Each key reaches only its own target.
        assert_eq!(ProviderType::OpenAi.resolve_base_url_with(&config("openai"), &overrides).unwrap(), api.url);
        assert_eq!(subscription_base_url(ProviderType::OpenAi, &overrides).unwrap(), backend.url);
        assert_eq!(subscription_base_url(ProviderType::OpenAi, &[api]).unwrap(), OPENAI_SUBSCRIPTION_BASE_URL);
        assert_eq!(
            ProviderType::OpenAi.resolve_base_url_with(&config("openai"), &[backend]).unwrap(),
            "https://api.openai.com/v1"
        );
        assert_eq!(
            parse_provider_url("groq-subscription=http://x/").unwrap_err(),
            "provider type groq has no subscription sign-in"
        );
        assert_eq!(
            parse_provider_url("nope-subscription=http://x/").unwrap_err(),
            "unknown provider type: nope-subscription"
        );
    }

    #[test]
    fn js_trim_matches_javascript() {
        assert_eq!(js_trim("\u{FEFF} a \t\n"), "a");
        assert_eq!(js_trim("\u{85}a"), "\u{85}a");
        assert_eq!(js_trim("\u{3000}a\u{2028}"), "a");
    }

    #[test]
    fn bounded_strings() {
        assert_eq!(bounded_string("  x ", "Thing", 1).ok().as_deref(), Some("x"));
        rejects(bounded_string(" \n ", "Thing", 10), "Thing is required");
        rejects(bounded_string("ab", "Thing", 1), "Thing is too large");
        // Bytes, not characters: "é" is two bytes.
        rejects(bounded_string("é", "Thing", 1), "Thing is too large");
    }

    #[test]
    fn provider_name_limits() {
        assert!(validate_provider(&"n".repeat(256), &config("openai")).is_ok());
        rejects(validate_provider("  ", &config("openai")), "Provider name is required");
        rejects(validate_provider(&"n".repeat(257), &config("openai")), "Provider name is too large");
        assert_eq!(provider_name(" main ").ok().as_deref(), Some("main"));
    }

    #[test]
    fn provider_type_checks() {
        rejects(validate_provider("p", &config("")), "Provider type is required");
        rejects(validate_provider("p", &config(&"t".repeat(257))), "Provider type is too large");
        rejects(validate_provider("p", &config("mistral")), "Unsupported model provider type: mistral");
        let stored = validate_provider("p", &config(" anthropic ")).expect("valid");
        assert_eq!(stored, config("anthropic"));
    }

    #[test]
    fn subscription_auth_rules() {
        let mut groq = config("groq");
        groq.auth_mode = Some(ModelProviderConfigAuthMode::Subscription);
        groq.secret_refs = refs(&[("oauth", "x")]);
        rejects(validate_provider("p", &groq), "Provider type does not support subscription auth: groq");

        let mut openai = config("openai");
        openai.auth_mode = Some(ModelProviderConfigAuthMode::Subscription);
        let missing = "Subscription providers require a secretRefs.oauth credential reference";
        rejects(validate_provider("p", &openai), missing);
        openai.secret_refs = refs(&[("apiKey", "k")]);
        rejects(validate_provider("p", &openai), missing);
        openai.secret_refs = refs(&[("oauth", "")]);
        rejects(validate_provider("p", &openai), missing);
        openai.secret_refs = refs(&[("oauth", "openai-subscription-oauth")]);
        let stored = validate_provider("p", &openai).expect("valid");
        assert_eq!(stored.auth_mode, Some(ModelProviderConfigAuthMode::Subscription));

        let mut api_key = config("anthropic");
        api_key.auth_mode = Some(ModelProviderConfigAuthMode::ApiKey);
        assert_eq!(
            validate_provider("p", &api_key).expect("valid").auth_mode,
            Some(ModelProviderConfigAuthMode::ApiKey)
        );
    }

    #[test]
    fn base_url_rules() {
        let with_url = |type_: &str, url: &str| {
            let mut c = config(type_);
            c.base_url = Some(url.into());
            validate_provider("p", &c)
        };
        // Pinned types: checked, then dropped.
        assert_eq!(with_url("openai", "https://proxy.example/v1").expect("valid").base_url, None);
        rejects(with_url("openai", "not a url"), "Provider base URL is invalid");
        // Types that allow a base URL keep it, trimmed.
        assert_eq!(
            with_url("ollama", " http://10.0.0.2:11434/v1 ").expect("valid").base_url.as_deref(),
            Some("http://10.0.0.2:11434/v1")
        );
        assert_eq!(
            with_url("custom", "https://llm.example").expect("valid").base_url.as_deref(),
            Some("https://llm.example")
        );
        // custom needs one.
        rejects(validate_provider("p", &config("custom")), "Base URL is required for provider type: custom");
        assert!(validate_provider("p", &config("ollama")).is_ok());
        // Limits and shape.
        rejects(with_url("custom", "  "), "Provider base URL is required");
        let long = format!("https://example.com/{}", "a".repeat(2048));
        rejects(with_url("custom", &long), "Provider base URL is too large");
        let exact = format!("https://example.com/{}", "a".repeat(2048 - "https://example.com/".len()));
        assert!(with_url("custom", &exact).is_ok());
        rejects(with_url("custom", "ftp://example.com"), "Provider base URL is invalid");
    }

    #[test]
    fn url_check() {
        for good in [
            "http://localhost:11434/v1",
            "https://api.example.com",
            "HTTPS://API.EXAMPLE.COM/v1?x=1#y",
            "http://user:pw@host:8080/",
            "http://[::1]:8080/v1",
            "http://host:/path",
            "http://127.0.0.1",
        ] {
            assert!(is_http_url(good), "{good}");
        }
        for bad in [
            "",
            "localhost:11434",
            "http:/x",
            "http://",
            "http:///path",
            "http://host:99999",
            "http://host:8a",
            "http://ho st/",
            "http://host/a b",
            "http://[::1",
            "http://[zz]/",
            "http://[::1]x/",
            "http://a|b/",
            "mailto:x@y",
            "javascript:alert(1)",
        ] {
            assert!(!is_http_url(bad), "{bad}");
        }
    }

    #[test]
    fn model_defaults_limit() {
        let defaults = |len: usize| {
            let mut map = BTreeMap::new();
            map.insert("k".to_owned(), Value(Ipld::String("x".repeat(len))));
            map
        };
        // {"k": text(n)}: 1 (map) + 2 (key) + 3 (text header for 256..=65535) + n.
        let mut c = config("openai");
        c.model_defaults = Some(defaults(16 * 1024 - 6));
        assert_eq!(cbor_len(c.model_defaults.as_ref().expect("set")).ok(), Some(16 * 1024));
        assert_eq!(validate_provider("p", &c).expect("valid").model_defaults, c.model_defaults);
        c.model_defaults = Some(defaults(16 * 1024 - 5));
        rejects(validate_provider("p", &c), "Model defaults are too large");
    }

    #[test]
    fn secret_ref_limits() {
        let mut c = config("openai");
        c.secret_refs = refs(&[(" apiKey ", " openai-key ")]);
        assert_eq!(validate_provider("p", &c).expect("valid").secret_refs, refs(&[("apiKey", "openai-key")]));
        c.secret_refs = refs(&[]);
        assert_eq!(validate_provider("p", &c).expect("valid").secret_refs, refs(&[]));
        c.secret_refs = refs(&[("apiKey", "")]);
        rejects(validate_provider("p", &c), "Secret ref value is required");
        let long = "s".repeat(257);
        c.secret_refs = refs(&[("apiKey", long.as_str())]);
        rejects(validate_provider("p", &c), "Secret ref value is too large");
        c.secret_refs = refs(&[(" ", "v")]);
        rejects(validate_provider("p", &c), "Secret ref key is required");
        c.secret_refs = refs(&[(long.as_str(), "v")]);
        rejects(validate_provider("p", &c), "Secret ref key is too large");
        let ok = "s".repeat(256);
        c.secret_refs = refs(&[(ok.as_str(), ok.as_str())]);
        assert!(validate_provider("p", &c).is_ok());
    }

    #[test]
    fn openai_reasoning_by_generation() {
        use ReasoningLevel::*;
        let levels = |model| reasoning_levels(ProviderType::OpenAi, model);
        assert_eq!(levels("o1"), [Low, Medium, High]);
        assert_eq!(levels("o3-mini"), [Low, Medium, High]);
        assert_eq!(levels("o4-mini-2025"), [Low, Medium, High]);
        assert!(levels("o2").is_empty());
        assert!(levels("o3mini").is_empty());
        assert_eq!(levels("gpt-5"), [Minimal, Low, Medium, High]);
        assert_eq!(levels("gpt-5-mini"), [Minimal, Low, Medium, High]);
        assert!(levels("gpt-5-chat-latest").is_empty());
        assert_eq!(levels("gpt-5.1"), [Low, Medium, High]);
        assert_eq!(levels("gpt-5.1-chat"), [Low, Medium, High]);
        assert_eq!(levels("gpt-5.2"), [Low, Medium, High, Xhigh]);
        assert_eq!(levels("gpt-5.6-terra"), [Low, Medium, High, Xhigh]);
        assert_eq!(levels("gpt-6"), [Low, Medium, High, Xhigh]);
        assert_eq!(levels("gpt-99999999999999999999999"), [Low, Medium, High, Xhigh]);
        assert_eq!(levels("gpt-5."), [Minimal, Low, Medium, High]);
        assert!(levels("gpt-4o").is_empty());
        assert!(levels("gpt-4.1").is_empty());
        assert!(levels("chatgpt-4o").is_empty());

        let gpt5 = reasoning_support(ProviderType::OpenAi, "gpt-5").expect("supported");
        assert_eq!((gpt5.off, gpt5.supports_effort_none), (ReasoningOff::ProviderDefault, false));
        let gpt51 = reasoning_support(ProviderType::OpenAi, "gpt-5.1").expect("supported");
        assert_eq!((gpt51.off, gpt51.supports_effort_none), (ReasoningOff::Off, true));
        let o3 = reasoning_support(ProviderType::OpenAi, "o3").expect("supported");
        assert_eq!((o3.off, o3.supports_effort_none), (ReasoningOff::ProviderDefault, false));
    }

    #[test]
    fn anthropic_and_google_reasoning() {
        use ReasoningLevel::*;
        let claude = |model| reasoning_levels(ProviderType::Anthropic, model);
        assert!(claude("claude-3-5-sonnet-latest").is_empty());
        assert!(claude("claude-2-1").is_empty());
        assert!(claude("claude-3-opus-20240229").is_empty());
        assert_eq!(claude("claude-3-7-sonnet-latest"), [Minimal, Low, Medium, High]);
        assert_eq!(claude("claude-4-0"), [Minimal, Low, Medium, High]);
        assert_eq!(claude("claude-sonnet-4-5"), [Minimal, Low, Medium, High]);
        assert_eq!(claude("claude-fable-5"), [Minimal, Low, Medium, High]);
        assert!(claude("claude-Sonnet-4").is_empty());
        assert!(claude("claude-instant").is_empty());
        assert!(claude("sonnet-4-5").is_empty());
        let sonnet = reasoning_support(ProviderType::Anthropic, "claude-sonnet-4-5").expect("supported");
        assert_eq!(sonnet.off, ReasoningOff::Off);

        let gemini = |model| reasoning_levels(ProviderType::Google, model);
        assert!(gemini("gemini-2.0-flash").is_empty());
        assert!(gemini("gemini-1.5-pro").is_empty());
        assert_eq!(gemini("gemini-2.5-flash"), [Minimal, Low, Medium, High]);
        assert_eq!(gemini("gemini-3-flash"), [Minimal, Low, Medium, High]);
        assert!(gemini("models/gemini-2.5-pro").is_empty());
        let pro = reasoning_support(ProviderType::Google, "gemini-2.5-pro").expect("supported");
        assert_eq!(pro.off, ReasoningOff::ProviderDefault);
        let flash = reasoning_support(ProviderType::Google, "gemini-2.5-flash").expect("supported");
        assert_eq!(flash.off, ReasoningOff::Off);

        for other in [ProviderType::OpenRouter, ProviderType::Ollama, ProviderType::Custom, ProviderType::Xai] {
            assert!(reasoning_levels(other, "gpt-5").is_empty());
        }
        assert_eq!(reasoning_support_for("nope", "gpt-5"), None);
        assert!(reasoning_support_for("openai", "gpt-5").is_some());
    }

    #[test]
    fn reasoning_level_messages() {
        use ReasoningLevel::*;
        assert!(check_reasoning_level(ProviderType::OpenAi, "gpt-4o", None).is_ok());
        assert!(check_reasoning_level(ProviderType::OpenAi, "gpt-5", Some(Minimal)).is_ok());
        rejects(
            check_reasoning_level(ProviderType::OpenAi, "gpt-4o", Some(Low)),
            "Model gpt-4o does not support a reasoning level",
        );
        rejects(
            check_reasoning_level(ProviderType::OpenAi, "gpt-5", Some(Xhigh)),
            "Model gpt-5 does not support reasoning level 'xhigh' (valid: minimal, low, medium, high)",
        );
        rejects(
            check_reasoning_level(ProviderType::OpenAi, "gpt-5.2", Some(Max)),
            "Model gpt-5.2 does not support reasoning level 'max' (valid: low, medium, high, xhigh)",
        );
        rejects(
            check_reasoning_level_for("mystery", "gpt-5", Some(Low)),
            "Model gpt-5 does not support a reasoning level",
        );
        assert!(check_reasoning_level_for("mystery", "gpt-5", None).is_ok());

        assert!(check_override_reasoning_level("google", "gemini-2.5-pro", Some(High)).is_ok());
        assert!(check_override_reasoning_level("groq", "llama", None).is_ok());
        rejects(
            check_override_reasoning_level("groq", "llama", Some(High)),
            "Model llama does not support reasoning level 'high'",
        );
        rejects(
            check_override_reasoning_level("openai", "gpt-5.1", Some(Minimal)),
            "Model gpt-5.1 does not support reasoning level 'minimal'",
        );
    }
}
