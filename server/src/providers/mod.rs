//! Model providers: set, list and delete an account's provider records, with their SQL.
//!
//! A provider record is a [`ModelProviderConfig`] (validated by
//! [`crate::model::vendors::validate_provider`]) stored as canonical CBOR under
//! `(account_id, name)`. Its `secretRefs` name account secrets (an API key, or subscription OAuth
//! credentials); the record never holds a secret itself, and listings never return the config:
//! clients see [`RedactedModelProvider`] only, which says whether secrets are referenced and, for
//! subscription providers, whether sign-in is needed.
//!
//! Deleting a provider deletes the secrets it referenced that no remaining provider of the account
//! still references (subscription providers of one type share one OAuth secret).

pub(crate) mod models;
pub(crate) mod oauth;
pub(crate) mod signin;
pub(crate) mod store;
pub(crate) mod subscription;

use std::collections::BTreeSet;

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    DeleteModelProvider, DeleteModelProviderResponse, ListModelProviders, ListModelProvidersResponse,
    ModelProviderConfig, ModelProviderConfigAuthMode, RedactedModelProvider, RedactedModelProviderAuthMode,
    RedactedModelProviderAuthStatus, SetModelProvider, SetModelProviderResponse,
};

use crate::access::{self, Need};
use crate::app::App;
use crate::bus::ChangeReason;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::model::vendors;
use crate::secrets;
use store::ProviderRow;

/// The 404 for a provider name the account does not have.
pub(crate) const PROVIDER_NOT_FOUND: &str = "Model provider not found";

/// The `secretRefs` key of a subscription provider's OAuth credentials.
const OAUTH_REF: &str = "oauth";

/// `SetModelProvider {name, provider}`: validates and upserts the caller's provider `name`,
/// keeping an existing record's id and creation time.
pub(crate) async fn set_model_provider(
    app: &App,
    caller: &Caller,
    action: SetModelProvider,
) -> ApiResult<SetModelProviderResponse> {
    let name = vendors::provider_name(&action.name)?;
    let config = vendors::validate_provider(&action.name, &action.provider)?;
    let account = caller.account_id.clone();
    let now = app.clock.now_ms();
    let provider = app
        .db
        .write(move |conn| {
            let row = store::upsert(conn, &account, &name, &config, now)?;
            let auth = provider_auth(conn, &account, &row.config)?;
            Ok(redact(row, auth))
        })
        .await?;
    app.bus.account_change(&caller.account_id, ChangeReason::ModelProviderChanged, None, None);
    Ok(SetModelProviderResponse { extra: Default::default(), provider })
}

/// `ListModelProviders {agentId?}`: the caller's providers, or with `agentId` those of the agent's
/// owner (the caller must be able to read the agent), most recently updated first.
pub(crate) async fn list_model_providers(
    app: &App,
    caller: &Caller,
    action: ListModelProviders,
) -> ApiResult<ListModelProvidersResponse> {
    let account = caller.account_id.clone();
    let providers = app
        .db
        .read(move |conn| {
            let owner = match &action.agent_id {
                Some(agent_id) => access::require(conn, agent_id, &account, Need::Read)?.owner_id,
                None => account,
            };
            store::load_all(conn, &owner)?
                .into_iter()
                .map(|row| {
                    let auth = provider_auth(conn, &owner, &row.config)?;
                    Ok(redact(row, auth))
                })
                .collect::<ApiResult<Vec<_>>>()
        })
        .await?;
    Ok(ListModelProvidersResponse { extra: Default::default(), providers })
}

/// `DeleteModelProvider {name}`: deletes the caller's provider `name` and, in the same
/// transaction, every secret it referenced that no remaining provider references.
pub(crate) async fn delete_model_provider(
    app: &App,
    caller: &Caller,
    action: DeleteModelProvider,
) -> ApiResult<DeleteModelProviderResponse> {
    let name = vendors::provider_name(&action.name)?;
    let account = caller.account_id.clone();
    let name = app
        .db
        .write(move |conn| {
            let deleted =
                store::load_config(conn, &account, &name)?.ok_or_else(|| ApiError::not_found(PROVIDER_NOT_FOUND))?;
            store::delete(conn, &account, &name)?;
            let remaining = store::load_all(conn, &account)?;
            let remaining: Vec<&ModelProviderConfig> = remaining.iter().map(|row| &row.config).collect();
            for secret in orphaned_secrets(&deleted, &remaining) {
                secrets::store::delete_secret(conn, &account, &secret)?;
            }
            Ok(name)
        })
        .await?;
    app.bus.account_change(&caller.account_id, ChangeReason::ModelProviderChanged, None, None);
    Ok(DeleteModelProviderResponse { extra: Default::default(), name })
}

/// The auth fields of a redacted provider: both absent for api-key providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ProviderAuth {
    /// `subscription` for subscription providers.
    pub mode: Option<RedactedModelProviderAuthMode>,
    /// Whether the subscription's credentials are usable.
    pub status: Option<RedactedModelProviderAuthStatus>,
}

/// Looks up a subscription provider's OAuth secret and derives [`ProviderAuth`].
pub(crate) fn provider_auth(
    conn: &Connection,
    account_id: &str,
    config: &ModelProviderConfig,
) -> ApiResult<ProviderAuth> {
    let Some(secret_name) = oauth_secret_name(config) else {
        return Ok(auth_from_secret(config, OauthSecret::NoRef));
    };
    let metadata = secrets::store::load_metadata(conn, account_id, secret_name)?;
    let secret = match &metadata {
        None => OauthSecret::Missing,
        Some(metadata) => OauthSecret::Present(metadata.as_deref()),
    };
    Ok(auth_from_secret(config, secret))
}

/// What the lookup of a subscription provider's OAuth secret found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OauthSecret<'a> {
    /// The config has no (non-empty) `secretRefs.oauth`.
    NoRef,
    /// The referenced secret does not exist.
    Missing,
    /// The secret exists, with this stored metadata CBOR.
    Present(Option<&'a [u8]>),
}

/// The non-empty `secretRefs.oauth` of a config.
pub(crate) fn oauth_secret_name(config: &ModelProviderConfig) -> Option<&str> {
    config.secret_refs.as_ref()?.get(OAUTH_REF).map(String::as_str).filter(|name| !name.is_empty())
}

/// [`ProviderAuth`] from the OAuth secret's lookup. A subscription provider needs login when it
/// references no secret, the secret is missing, or it is flagged `needsReauth` (a refresh was
/// rejected); otherwise it is ok. Other providers have neither field.
pub(crate) fn auth_from_secret(config: &ModelProviderConfig, oauth_secret: OauthSecret<'_>) -> ProviderAuth {
    if config.auth_mode != Some(ModelProviderConfigAuthMode::Subscription) {
        return ProviderAuth::default();
    }
    let needs_login = match oauth_secret {
        OauthSecret::NoRef | OauthSecret::Missing => true,
        OauthSecret::Present(None) => false,
        OauthSecret::Present(Some(metadata)) => needs_reauth(metadata),
    };
    let status =
        if needs_login { RedactedModelProviderAuthStatus::NeedsLogin } else { RedactedModelProviderAuthStatus::Ok };
    ProviderAuth { mode: Some(RedactedModelProviderAuthMode::Subscription), status: Some(status) }
}

/// Whether secret metadata carries a truthy `needsReauth` (JavaScript truthiness, as upstream).
fn needs_reauth(metadata: &[u8]) -> bool {
    secrets::decode_metadata(metadata).and_then(|map| map.get("needsReauth").map(js_truthy)).unwrap_or(false)
}

fn js_truthy(value: &Ipld) -> bool {
    match value {
        Ipld::Null => false,
        Ipld::Bool(value) => *value,
        Ipld::Integer(value) => *value != 0,
        Ipld::Float(value) => *value != 0.0 && !value.is_nan(),
        Ipld::String(value) => !value.is_empty(),
        Ipld::Bytes(_) | Ipld::List(_) | Ipld::Map(_) | Ipld::Link(_) => true,
    }
}

/// Whether a config references any secret (`hasSecrets`).
pub(crate) fn has_secrets(config: &ModelProviderConfig) -> bool {
    config.secret_refs.as_ref().is_some_and(|refs| !refs.is_empty())
}

/// The redacted view of a provider record: never its config or secret names.
pub(crate) fn redact(row: ProviderRow, auth: ProviderAuth) -> RedactedModelProvider {
    RedactedModelProvider {
        extra: Default::default(),
        auth_mode: auth.mode,
        auth_status: auth.status,
        created_at: row.created_at,
        has_secrets: has_secrets(&row.config),
        id: row.id,
        name: row.name,
        type_: row.type_,
        updated_at: row.updated_at,
    }
}

/// The secrets `deleted` referenced that none of `remaining` references, each once, in the order
/// of `deleted`'s `secretRefs` keys.
pub(crate) fn orphaned_secrets(deleted: &ModelProviderConfig, remaining: &[&ModelProviderConfig]) -> Vec<String> {
    let still_referenced: BTreeSet<&str> = remaining
        .iter()
        .filter_map(|config| config.secret_refs.as_ref())
        .flat_map(|refs| refs.values().map(String::as_str))
        .collect();
    let mut seen = BTreeSet::new();
    deleted
        .secret_refs
        .iter()
        .flat_map(|refs| refs.values())
        .filter(|name| !still_referenced.contains(name.as_str()) && seen.insert(name.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use seed_agents_protocol::wire;

    use super::*;
    use crate::error::ErrorKind;

    fn config(type_: &str, refs: &[(&str, &str)]) -> ModelProviderConfig {
        ModelProviderConfig {
            extra: Default::default(),
            auth_mode: None,
            base_url: None,
            model_defaults: None,
            secret_refs: (!refs.is_empty())
                .then(|| refs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
            type_: type_.to_owned(),
        }
    }

    fn subscription(refs: &[(&str, &str)]) -> ModelProviderConfig {
        ModelProviderConfig { auth_mode: Some(ModelProviderConfigAuthMode::Subscription), ..config("openai", refs) }
    }

    fn metadata(entries: &[(&str, Ipld)]) -> Vec<u8> {
        let map: BTreeMap<String, Ipld> = entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        wire::ipld_to_vec(&Ipld::Map(map)).unwrap()
    }

    #[test]
    fn orphaned_secrets_skip_shared_ones() {
        let deleted = config("openai", &[("apiKey", "openai-key"), ("oauth", "openai-subscription-oauth")]);
        let shared = subscription(&[("oauth", "openai-subscription-oauth")]);
        let unrelated = config("anthropic", &[("apiKey", "anthropic-key")]);
        assert_eq!(orphaned_secrets(&deleted, &[&shared, &unrelated]), ["openai-key"]);
        assert_eq!(orphaned_secrets(&deleted, &[]), ["openai-key", "openai-subscription-oauth"]);
        // A reference under another key still counts.
        let same_value = config("groq", &[("other", "openai-key")]);
        assert_eq!(orphaned_secrets(&deleted, &[&same_value, &shared]), Vec::<String>::new());
        // Two keys naming one secret delete it once.
        let twice = config("openai", &[("a", "s"), ("b", "s")]);
        assert_eq!(orphaned_secrets(&twice, &[]), ["s"]);
        assert!(orphaned_secrets(&config("ollama", &[]), &[&unrelated]).is_empty());
        let empty_refs = ModelProviderConfig { secret_refs: Some(BTreeMap::new()), ..config("ollama", &[]) };
        assert!(orphaned_secrets(&empty_refs, &[]).is_empty());
    }

    #[test]
    fn api_key_providers_have_no_auth_fields() {
        let plain = config("openai", &[("apiKey", "k")]);
        assert_eq!(auth_from_secret(&plain, OauthSecret::NoRef), ProviderAuth::default());
        let explicit = ModelProviderConfig { auth_mode: Some(ModelProviderConfigAuthMode::ApiKey), ..plain };
        assert_eq!(auth_from_secret(&explicit, OauthSecret::Present(None)), ProviderAuth::default());
    }

    #[test]
    fn subscription_auth_status() {
        use RedactedModelProviderAuthStatus::{NeedsLogin, Ok};
        let sub = subscription(&[("oauth", "openai-subscription-oauth")]);
        let status = |lookup: OauthSecret<'_>| {
            let auth = auth_from_secret(&sub, lookup);
            assert_eq!(auth.mode, Some(RedactedModelProviderAuthMode::Subscription));
            auth.status.unwrap()
        };
        assert_eq!(status(OauthSecret::NoRef), NeedsLogin);
        assert_eq!(status(OauthSecret::Missing), NeedsLogin);
        assert_eq!(status(OauthSecret::Present(None)), Ok);
        let ok = metadata(&[("kind", Ipld::String("provider-oauth".into()))]);
        assert_eq!(status(OauthSecret::Present(Some(&ok))), Ok);
        for (flag, expected) in [
            (Ipld::Bool(true), NeedsLogin),
            (Ipld::Bool(false), Ok),
            (Ipld::Integer(1), NeedsLogin),
            (Ipld::Integer(0), Ok),
            (Ipld::String("yes".into()), NeedsLogin),
            (Ipld::String(String::new()), Ok),
            (Ipld::Null, Ok),
            (Ipld::Map(BTreeMap::new()), NeedsLogin),
        ] {
            let bytes = metadata(&[("needsReauth", flag.clone())]);
            assert_eq!(status(OauthSecret::Present(Some(&bytes))), expected, "{flag:?}");
        }
        // Metadata that is not a map carries no flag.
        let list = wire::ipld_to_vec(&Ipld::List(vec![])).unwrap();
        assert_eq!(status(OauthSecret::Present(Some(&list))), Ok);
    }

    #[test]
    fn oauth_ref_lookup() {
        assert_eq!(oauth_secret_name(&subscription(&[("oauth", "s")])), Some("s"));
        assert_eq!(oauth_secret_name(&subscription(&[("oauth", "")])), None);
        assert_eq!(oauth_secret_name(&subscription(&[("apiKey", "k")])), None);
        assert_eq!(oauth_secret_name(&config("openai", &[])), None);
    }

    #[test]
    fn redaction_hides_config() {
        let row = ProviderRow {
            id: "id-1".into(),
            name: "main".into(),
            type_: "custom".into(),
            config: ModelProviderConfig {
                base_url: Some("https://llm.internal/v1".into()),
                ..config("custom", &[("apiKey", "very-private-name")])
            },
            created_at: 1,
            updated_at: 2,
        };
        let redacted = redact(row, ProviderAuth::default());
        assert!(redacted.has_secrets);
        let encoded = wire::to_vec(&redacted).unwrap();
        let Ipld::Map(fields) = wire::decode_ipld(&encoded).unwrap() else { panic!("not a map") };
        let keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        assert_eq!(keys, ["createdAt", "hasSecrets", "id", "name", "type", "updatedAt"]);
        let text = wire::diagnostic(&encoded).unwrap();
        assert!(!text.contains("very-private-name") && !text.contains("llm.internal"), "{text}");

        let without = ProviderRow {
            id: "id-2".into(),
            name: "sub".into(),
            type_: "openai".into(),
            config: ModelProviderConfig { secret_refs: Some(BTreeMap::new()), ..subscription(&[]) },
            created_at: 1,
            updated_at: 1,
        };
        let auth = auth_from_secret(&without.config, OauthSecret::NoRef);
        let redacted = redact(without, auth);
        assert!(!redacted.has_secrets);
        assert_eq!(redacted.auth_mode, Some(RedactedModelProviderAuthMode::Subscription));
        assert_eq!(redacted.auth_status, Some(RedactedModelProviderAuthStatus::NeedsLogin));
    }

    /// The handlers against a real app: upserts keep identity, delete keeps shared secrets.
    #[tokio::test]
    async fn set_list_delete_round_trip() {
        use crate::bus::Event;
        use crate::caller::Caller;
        use crate::{Clock, Config};
        use seed_agents_protocol::Principal;
        use seed_agents_protocol::generated::SetSecret;

        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::manual(1_000);
        let app = App::open(Config::new(dir.path(), "127.0.0.1:0".parse().unwrap()), clock.clone()).unwrap();
        let principal = Principal::from_public_key(&[9; 32]);
        let caller = Caller {
            account_id: principal.to_string(),
            signer: principal,
            signer_id: principal.to_string(),
            protocol: 3,
        };
        let mut events = app.bus.subscribe();
        for (name, value) in [("openai-key", &b"sk-1"[..]), ("openai-subscription-oauth", b"{}")] {
            let action = SetSecret { metadata: None, name: name.into(), value: value.into() };
            crate::secrets::set_secret(&app, &caller, action).await.unwrap();
        }
        let set = |name: &str, provider: ModelProviderConfig| {
            set_model_provider(&app, &caller, SetModelProvider { name: name.into(), provider })
        };
        let oauth = [("oauth", "openai-subscription-oauth")];
        let first = set(" main ", config("openai", &[("apiKey", "openai-key")])).await.unwrap().provider;
        clock.advance(10);
        set("sub1", subscription(&oauth)).await.unwrap();
        clock.advance(10);
        let sub2 = set("sub2", subscription(&oauth)).await.unwrap().provider;
        assert_eq!(sub2.auth_status, Some(RedactedModelProviderAuthStatus::Ok));
        clock.advance(10);
        let again = set("main", config("openai", &[("apiKey", "openai-key")])).await.unwrap().provider;
        assert_eq!((again.id.as_str(), again.created_at, again.updated_at), (first.id.as_str(), 1_000, 1_030));

        let list = |agent_id: Option<&str>| {
            list_model_providers(&app, &caller, ListModelProviders { agent_id: agent_id.map(Into::into) })
        };
        let names: Vec<String> = list(None).await.unwrap().providers.into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["main", "sub2", "sub1"]);
        assert_eq!(list(Some("missing")).await.unwrap_err().message(), "Agent not found");

        let delete = |name: &str| delete_model_provider(&app, &caller, DeleteModelProvider { name: name.into() });
        let secret_exists = |name: &'static str| {
            let account = caller.account_id.clone();
            app.db.read(move |conn| Ok(secrets::store::load_metadata(conn, &account, name)?.is_some()))
        };
        assert_eq!(delete("sub1").await.unwrap().name, "sub1");
        assert!(secret_exists("openai-subscription-oauth").await.unwrap(), "still used by sub2");
        delete(" main ").await.unwrap();
        assert!(!secret_exists("openai-key").await.unwrap());
        delete("sub2").await.unwrap();
        assert!(!secret_exists("openai-subscription-oauth").await.unwrap());
        let missing = delete("sub2").await.unwrap_err();
        assert_eq!((missing.kind(), missing.message()), (ErrorKind::NotFound, PROVIDER_NOT_FOUND));
        assert!(list(None).await.unwrap().providers.is_empty());

        let mut changes = 0;
        while let Ok(event) = events.try_recv() {
            assert!(matches!(&*event, Event::AccountChange { reason: ChangeReason::ModelProviderChanged, .. }));
            changes += 1;
        }
        assert_eq!(changes, 7, "four sets and three deletes; SetSecret publishes nothing");
    }
}
