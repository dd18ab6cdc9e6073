//! Agent definitions as `CreateAgent` and `UpdateAgent` accept them: every field checked and
//! trimmed, the system prompt turned into blocks, and every reference (model provider, signing
//! keys) resolved in the agent owner's account before anything is written.
//!
//! Error messages match the upstream server word for word, because clients show them as they are.

use std::collections::{BTreeSet, HashSet};

use seed_agents_protocol::generated::{AgentDefinition, AgentDefinitionSystemPrompt, AgentModelRef};

use crate::agents::prompt::normalize_prompt;
use crate::error::{ApiError, ApiResult};
use crate::model::vendors::check_reasoning_level_for;
use crate::validate::{MAX_NAME_BYTES, MAX_OPEN_MAP_CBOR_BYTES, bounded_string, cbor_len, js_trim};

/// The byte limit of `model` and of each enabled model id.
pub(crate) const MAX_MODEL_BYTES: usize = 256;
/// The most `enabledModels` entries a definition may list (counted before duplicates are removed).
pub(crate) const MAX_ENABLED_MODELS: usize = 32;
/// The most `tools` entries a definition may list.
pub(crate) const MAX_TOOLS: usize = 32;
/// The byte limit of one tool name.
pub(crate) const MAX_TOOL_NAME_BYTES: usize = 128;
/// The byte limit of all tool names together.
pub(crate) const MAX_TOOLS_TOTAL_BYTES: usize = 4 * 1024;
/// The most `mcpServers` names a definition may list.
pub(crate) const MAX_MCP_SERVERS: usize = 16;

/// What normalising a definition needs to know about the account that owns (or will own) the
/// agent. The caller answers from the database; for `UpdateAgent` by a collaborator this is still
/// the owner's account, never the caller's.
pub(crate) trait DefinitionContext {
    /// The stored `type` of the owner's model provider with this name, or `None` when the owner has
    /// no such provider.
    fn provider_type(&self, name: &str) -> ApiResult<Option<String>>;

    /// Whether the owner has a secret with this name whose metadata says `kind: 'hm-account-key'`.
    fn is_signing_key(&self, secret_name: &str) -> ApiResult<bool>;
}

/// Checks an agent definition and returns the one to store.
///
/// In order: name; system prompt (stored as blocks); model provider and model names; enabled
/// models (deduplicated; their providers need not exist); signing keys; tools; metadata; MCP
/// servers (deduplicated); then the references: the model provider must exist in the owner's
/// account (400 `Model provider not found`) and be of a type this build runs (400 `Unsupported
/// model provider type: X`), the reasoning level must be one the provider type and
/// model accept, and every signing key must be an account key secret of the owner
/// (400 `Signing key not found`). `thoroughness` is kept as given.
pub(crate) fn normalize_definition(def: &AgentDefinition, ctx: &dyn DefinitionContext) -> ApiResult<AgentDefinition> {
    let name = bounded_string(&def.name, "Agent name", MAX_NAME_BYTES)?;
    let system_prompt = AgentDefinitionSystemPrompt::Array(normalize_prompt(&def.system_prompt, "System prompt")?);
    let model_provider = bounded_string(&def.model_provider, "Model provider", MAX_NAME_BYTES)?;
    let model = bounded_string(&def.model, "Model", MAX_MODEL_BYTES)?;
    let enabled_models = match &def.enabled_models {
        None => None,
        Some(entries) => Some(normalize_enabled_models(entries)?).filter(|models| !models.is_empty()),
    };
    let signing_key = def.signing_key.as_deref().map(signing_key_name).transpose()?;
    let signing_keys = match &def.signing_keys {
        None => None,
        Some(keys) => Some(keys.iter().map(|key| signing_key_name(key)).collect::<ApiResult<Vec<_>>>()?),
    };
    let tools = def.tools.as_deref().map(normalize_tools).transpose()?;
    if let Some(metadata) = &def.metadata
        && cbor_len(metadata)? > MAX_OPEN_MAP_CBOR_BYTES
    {
        return Err(ApiError::invalid("Metadata is too large"));
    }
    let mcp_servers = def.mcp_servers.as_deref().map(normalize_mcp_servers).transpose()?;

    let definition = AgentDefinition {
        extra: Default::default(),
        enabled_models,
        mcp_servers,
        metadata: def.metadata.clone(),
        model,
        model_provider,
        name,
        reasoning_level: def.reasoning_level,
        signing_key,
        signing_keys,
        system_prompt,
        thoroughness: def.thoroughness,
        tools,
    };

    let Some(provider_type) = ctx.provider_type(&definition.model_provider)? else {
        return Err(ApiError::invalid("Model provider not found"));
    };
    // A record of a type this build cannot run (written by another server) is refused here,
    // not discovered by a failed turn.
    crate::model::vendors::ProviderType::require(&provider_type)?;
    check_reasoning_level_for(&provider_type, &definition.model, definition.reasoning_level)?;
    for key in signing_key_set(&definition) {
        if !ctx.is_signing_key(&key)? {
            return Err(ApiError::invalid("Signing key not found"));
        }
    }
    Ok(definition)
}

/// The key an agent signs with by default (and whose account its default trigger watches): the
/// legacy `signingKey` when set, else the first of `signingKeys`.
pub(crate) fn primary_signing_key(def: &AgentDefinition) -> Option<&str> {
    def.signing_key.as_deref().or_else(|| def.signing_keys.as_ref().and_then(|keys| keys.first()).map(String::as_str))
}

/// Every signing key the definition grants the agent: `signingKeys` together with the legacy
/// `signingKey`. Only the owner may change this set (`UpdateAgent` by a writer must leave it equal).
pub(crate) fn signing_key_set(def: &AgentDefinition) -> BTreeSet<String> {
    def.signing_key.iter().chain(def.signing_keys.iter().flatten()).cloned().collect()
}

/// [`signing_key_set`] in the order a prompt lists them: the primary key first, then
/// `signingKeys` as the definition lists them, each once.
pub(crate) fn signing_keys_in_order(def: &AgentDefinition) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for key in def.signing_key.iter().chain(def.signing_keys.iter().flatten()) {
        if !keys.contains(key) {
            keys.push(key.clone());
        }
    }
    keys
}

fn signing_key_name(key: &str) -> ApiResult<String> {
    bounded_string(key, "Signing key", MAX_NAME_BYTES)
}

fn normalize_enabled_models(entries: &[AgentModelRef]) -> ApiResult<Vec<AgentModelRef>> {
    if entries.len() > MAX_ENABLED_MODELS {
        return Err(ApiError::invalid("Too many enabled models"));
    }
    let mut seen = HashSet::new();
    let mut models = Vec::new();
    for entry in entries {
        let provider = bounded_string(&entry.provider, "Enabled model provider", MAX_NAME_BYTES)?;
        let model = bounded_string(&entry.model, "Enabled model", MAX_MODEL_BYTES)?;
        if seen.insert((provider.clone(), model.clone())) {
            models.push(AgentModelRef { extra: Default::default(), model, provider });
        }
    }
    Ok(models)
}

/// Tool names are taken as written: blank or padded names are an error, not something to trim.
fn normalize_tools(tools: &[String]) -> ApiResult<Vec<String>> {
    if tools.len() > MAX_TOOLS {
        return Err(ApiError::invalid("Too many tools"));
    }
    let mut total = 0;
    for tool in tools {
        if tool.is_empty() || js_trim(tool) != tool {
            return Err(ApiError::invalid("Tools must be non-empty trimmed strings"));
        }
        if tool.len() > MAX_TOOL_NAME_BYTES {
            return Err(ApiError::invalid("Tool name is too large"));
        }
        // With the count and per-name limits this cannot trip (32 × 128 B = 4 KiB); it stays so
        // the total holds if either of those limits is ever raised.
        total += tool.len();
        if total > MAX_TOOLS_TOTAL_BYTES {
            return Err(ApiError::invalid("Tools are too large"));
        }
    }
    Ok(tools.to_vec())
}

/// MCP server grants are names of the owner's MCP servers. Like enabled models they are checked
/// for shape only (at most 16 server-name slugs, duplicates removed): a name with no server
/// behind it grants nothing.
fn normalize_mcp_servers(names: &[String]) -> ApiResult<Vec<String>> {
    if names.len() > MAX_MCP_SERVERS {
        return Err(ApiError::invalid("Too many MCP servers"));
    }
    let mut seen = HashSet::new();
    let mut servers = Vec::new();
    for name in names {
        let name = bounded_string(name, "MCP server name", MAX_NAME_BYTES)?;
        if !crate::validate::is_slug(&name) {
            return Err(ApiError::invalid(format!("Invalid MCP server name: {name}")));
        }
        if seen.insert(name.clone()) {
            servers.push(name);
        }
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::{BTreeMap, HashMap};

    use ipld_core::ipld::Ipld;
    use seed_agents_protocol::Value;
    use seed_agents_protocol::generated::{ReasoningLevel, Thoroughness};

    use super::*;
    use crate::error::ErrorKind;

    /// An owner account with some providers (name -> type) and secrets (name -> is account key).
    #[derive(Default)]
    struct Owner {
        providers: HashMap<String, String>,
        secrets: HashMap<String, bool>,
        key_lookups: RefCell<Vec<String>>,
    }

    impl Owner {
        fn new() -> Self {
            let mut owner = Owner::default();
            owner.providers.insert("main".into(), "openai".into());
            owner.providers.insert("claude".into(), "anthropic".into());
            owner.providers.insert("legacy".into(), "retired-type".into());
            owner.secrets.insert("alice-key".into(), true);
            owner.secrets.insert("bob-key".into(), true);
            owner.secrets.insert("openai-api-key".into(), false);
            owner
        }
    }

    impl DefinitionContext for Owner {
        fn provider_type(&self, name: &str) -> ApiResult<Option<String>> {
            Ok(self.providers.get(name).cloned())
        }

        fn is_signing_key(&self, secret_name: &str) -> ApiResult<bool> {
            self.key_lookups.borrow_mut().push(secret_name.to_owned());
            Ok(self.secrets.get(secret_name).copied().unwrap_or(false))
        }
    }

    struct Broken;

    impl DefinitionContext for Broken {
        fn provider_type(&self, _: &str) -> ApiResult<Option<String>> {
            Err(ApiError::internal("database is gone"))
        }

        fn is_signing_key(&self, _: &str) -> ApiResult<bool> {
            Err(ApiError::internal("database is gone"))
        }
    }

    fn base() -> AgentDefinition {
        AgentDefinition {
            extra: Default::default(),
            enabled_models: None,
            mcp_servers: None,
            metadata: None,
            model: "gpt-5".into(),
            model_provider: "main".into(),
            name: "Scout".into(),
            reasoning_level: None,
            signing_key: None,
            signing_keys: None,
            system_prompt: AgentDefinitionSystemPrompt::String("You are **Scout**.".into()),
            thoroughness: None,
            tools: None,
        }
    }

    fn normalize(def: &AgentDefinition) -> ApiResult<AgentDefinition> {
        normalize_definition(def, &Owner::new())
    }

    #[track_caller]
    fn rejects(def: &AgentDefinition, message: &str) {
        let error = normalize(def).expect_err("expected an error");
        assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
        assert_eq!(error.message(), message);
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    fn model_ref(provider: &str, model: &str) -> AgentModelRef {
        AgentModelRef { extra: Default::default(), model: model.into(), provider: provider.into() }
    }

    #[test]
    fn minimal_definition_is_trimmed_and_prompt_becomes_blocks() {
        let mut def = base();
        def.name = "  Scout \n".into();
        def.model_provider = " main ".into();
        def.model = " gpt-5 ".into();
        let out = normalize(&def).expect("valid");
        assert_eq!(out.name, "Scout");
        assert_eq!(out.model_provider, "main");
        assert_eq!(out.model, "gpt-5");
        let expected = normalize_prompt(&def.system_prompt, "System prompt").expect("prompt");
        assert_eq!(out.system_prompt, AgentDefinitionSystemPrompt::Array(expected));
        assert_eq!((out.enabled_models, out.mcp_servers, out.metadata, out.reasoning_level), (None, None, None, None));
        assert_eq!((out.signing_key, out.signing_keys, out.thoroughness, out.tools), (None, None, None, None));
    }

    #[test]
    fn normalizing_twice_changes_nothing() {
        let mut def = base();
        def.signing_keys = Some(strings(&["alice-key"]));
        def.tools = Some(strings(&["search"]));
        def.enabled_models = Some(vec![model_ref("main", "gpt-5")]);
        let once = normalize(&def).expect("valid");
        assert_eq!(normalize(&once).expect("valid"), once);
    }

    #[test]
    fn name_limits() {
        let mut def = base();
        def.name = " \t ".into();
        rejects(&def, "Agent name is required");
        def.name = "n".repeat(257);
        rejects(&def, "Agent name is too large");
        def.name = "n".repeat(256);
        assert!(normalize(&def).is_ok());
    }

    #[test]
    fn system_prompt_errors_come_from_the_prompt_normaliser() {
        let mut def = base();
        def.system_prompt = AgentDefinitionSystemPrompt::String("   ".into());
        rejects(&def, "System prompt is required");
    }

    #[test]
    fn provider_and_model_limits() {
        let mut def = base();
        def.model_provider = "".into();
        rejects(&def, "Model provider is required");
        def.model_provider = "p".repeat(257);
        rejects(&def, "Model provider is too large");
        def = base();
        def.model = " ".into();
        rejects(&def, "Model is required");
        def.model = "m".repeat(257);
        rejects(&def, "Model is too large");
        def.model = "m".repeat(256);
        assert!(normalize(&def).is_ok());
    }

    #[test]
    fn provider_must_exist_in_the_owner_account() {
        let mut def = base();
        def.model_provider = "elsewhere".into();
        rejects(&def, "Model provider not found");
    }

    #[test]
    fn reasoning_level_must_suit_provider_type_and_model() {
        let mut def = base();
        def.reasoning_level = Some(ReasoningLevel::Minimal);
        assert_eq!(normalize(&def).expect("valid").reasoning_level, Some(ReasoningLevel::Minimal));

        def.reasoning_level = Some(ReasoningLevel::Xhigh);
        rejects(&def, "Model gpt-5 does not support reasoning level 'xhigh' (valid: minimal, low, medium, high)");

        def.model = "gpt-4o".into();
        rejects(&def, "Model gpt-4o does not support a reasoning level");

        def.model_provider = "claude".into();
        def.model = "claude-sonnet-4-5".into();
        def.reasoning_level = Some(ReasoningLevel::High);
        assert!(normalize(&def).is_ok());

        // A provider record of a type this build cannot run is refused, level or not.
        def.model_provider = "legacy".into();
        rejects(&def, "Unsupported model provider type: retired-type");
        def.reasoning_level = None;
        rejects(&def, "Unsupported model provider type: retired-type");
    }

    #[test]
    fn enabled_models_are_checked_deduplicated_and_need_no_provider() {
        let mut def = base();
        def.enabled_models = Some(vec![
            model_ref("main", "gpt-5"),
            model_ref(" main ", "gpt-5 "),
            model_ref("other-server", "llama"),
            model_ref("main", "gpt-5.2"),
        ]);
        let out = normalize(&def).expect("valid");
        assert_eq!(
            out.enabled_models,
            Some(vec![model_ref("main", "gpt-5"), model_ref("other-server", "llama"), model_ref("main", "gpt-5.2")])
        );

        def.enabled_models = Some(Vec::new());
        assert_eq!(normalize(&def).expect("valid").enabled_models, None);

        def.enabled_models = Some(vec![model_ref("main", "gpt-5"); 32]);
        assert_eq!(normalize(&def).expect("valid").enabled_models, Some(vec![model_ref("main", "gpt-5")]));
        def.enabled_models = Some(vec![model_ref("main", "gpt-5"); 33]);
        rejects(&def, "Too many enabled models");

        def.enabled_models = Some(vec![model_ref(" ", "gpt-5")]);
        rejects(&def, "Enabled model provider is required");
        def.enabled_models = Some(vec![model_ref(&"p".repeat(257), "gpt-5")]);
        rejects(&def, "Enabled model provider is too large");
        def.enabled_models = Some(vec![model_ref("main", "")]);
        rejects(&def, "Enabled model is required");
        def.enabled_models = Some(vec![model_ref("main", &"m".repeat(257))]);
        rejects(&def, "Enabled model is too large");
    }

    #[test]
    fn signing_keys_are_bounded_and_must_be_owner_account_keys() {
        let mut def = base();
        def.signing_key = Some(" alice-key ".into());
        def.signing_keys = Some(strings(&["bob-key", " alice-key"]));
        let out = normalize(&def).expect("valid");
        assert_eq!(out.signing_key.as_deref(), Some("alice-key"));
        assert_eq!(out.signing_keys, Some(strings(&["bob-key", "alice-key"])));

        def.signing_keys = Some(Vec::new());
        assert_eq!(normalize(&def).expect("valid").signing_keys, Some(Vec::new()));

        let mut def = base();
        def.signing_key = Some("".into());
        rejects(&def, "Signing key is required");
        def.signing_key = Some("k".repeat(257));
        rejects(&def, "Signing key is too large");
        def.signing_key = None;
        def.signing_keys = Some(vec!["alice-key".into(), "k".repeat(257)]);
        rejects(&def, "Signing key is too large");
        def.signing_keys = Some(strings(&["alice-key", "  "]));
        rejects(&def, "Signing key is required");

        // Missing secrets, and secrets that are not account keys, are both "not found".
        def.signing_keys = Some(strings(&["alice-key", "nobody-key"]));
        rejects(&def, "Signing key not found");
        def.signing_keys = Some(strings(&["openai-api-key"]));
        rejects(&def, "Signing key not found");
        // The legacy single key is checked even when the list is present.
        def.signing_keys = Some(strings(&["alice-key"]));
        def.signing_key = Some("openai-api-key".into());
        rejects(&def, "Signing key not found");
    }

    #[test]
    fn each_distinct_signing_key_is_looked_up_once() {
        let owner = Owner::new();
        let mut def = base();
        def.signing_key = Some("alice-key".into());
        def.signing_keys = Some(strings(&["bob-key", "alice-key", "bob-key"]));
        assert!(normalize_definition(&def, &owner).is_ok());
        assert_eq!(*owner.key_lookups.borrow(), strings(&["alice-key", "bob-key"]));
    }

    #[test]
    fn tool_limits() {
        let mut def = base();
        def.tools = Some(strings(&["search", "publish", "not-a-real-tool"]));
        assert_eq!(normalize(&def).expect("valid").tools, Some(strings(&["search", "publish", "not-a-real-tool"])));
        def.tools = Some(Vec::new());
        assert_eq!(normalize(&def).expect("valid").tools, Some(Vec::new()));

        def.tools = Some(vec!["t".into(); 33]);
        rejects(&def, "Too many tools");
        for bad in ["", " search", "search\n", "\u{FEFF}search"] {
            def.tools = Some(vec![bad.into()]);
            rejects(&def, "Tools must be non-empty trimmed strings");
        }
        def.tools = Some(vec!["t".repeat(129)]);
        rejects(&def, "Tool name is too large");
        def.tools = Some(vec!["t".repeat(128); 32]);
        assert!(normalize(&def).is_ok());
        // 32 × 128 = 4096 bytes is the most; one more byte anywhere is too much.
        let mut tools = vec!["t".repeat(128); 31];
        tools.push("u".repeat(128));
        def.tools = Some(tools.clone());
        assert!(normalize(&def).is_ok());
        tools[0].push('x');
        def.tools = Some(tools);
        rejects(&def, "Tool name is too large");
        let mut tools = vec!["t".repeat(127); 32];
        tools.push("x".into());
        def.tools = Some(tools);
        rejects(&def, "Too many tools");
    }

    #[test]
    fn metadata_limit() {
        let metadata = |len: usize| {
            let mut map = BTreeMap::new();
            map.insert("k".to_owned(), Value(Ipld::String("x".repeat(len))));
            Some(map)
        };
        let mut def = base();
        // {"k": text(n)} encodes to n + 6 bytes for n in 256..=65535.
        def.metadata = metadata(16 * 1024 - 6);
        assert_eq!(normalize(&def).expect("valid").metadata, def.metadata);
        def.metadata = metadata(16 * 1024 - 5);
        rejects(&def, "Metadata is too large");
    }

    #[test]
    fn mcp_servers_are_bounded_and_deduplicated() {
        let mut def = base();
        def.mcp_servers = Some(strings(&["github", " github ", "linear"]));
        assert_eq!(normalize(&def).expect("valid").mcp_servers, Some(strings(&["github", "linear"])));
        def.mcp_servers = Some(Vec::new());
        assert_eq!(normalize(&def).expect("valid").mcp_servers, Some(Vec::new()));
        def.mcp_servers = Some(vec!["s".into(); 16]);
        assert!(normalize(&def).is_ok());
        def.mcp_servers = Some(vec!["s".into(); 17]);
        rejects(&def, "Too many MCP servers");
        def.mcp_servers = Some(strings(&[" "]));
        rejects(&def, "MCP server name is required");
        def.mcp_servers = Some(vec!["s".repeat(257)]);
        rejects(&def, "MCP server name is too large");
        def.mcp_servers = Some(vec!["s".repeat(33)]);
        rejects(&def, &format!("Invalid MCP server name: {}", "s".repeat(33)));
        def.mcp_servers = Some(strings(&["GitHub"]));
        rejects(&def, "Invalid MCP server name: GitHub");
    }

    #[test]
    fn thoroughness_is_kept() {
        let mut def = base();
        def.thoroughness = Some(Thoroughness::Deep);
        assert_eq!(normalize(&def).expect("valid").thoroughness, Some(Thoroughness::Deep));
    }

    #[test]
    fn shape_errors_come_before_lookups_and_lookup_failures_propagate() {
        let mut def = base();
        def.tools = Some(vec!["".into()]);
        // Broken would answer 500; the shape error wins because nothing was looked up yet.
        let error = normalize_definition(&def, &Broken).expect_err("invalid");
        assert_eq!(error.message(), "Tools must be non-empty trimmed strings");
        let error = normalize_definition(&base(), &Broken).expect_err("lookup fails");
        assert_eq!(error.kind(), ErrorKind::Internal);
    }

    #[test]
    fn primary_key_and_grant_set() {
        let mut def = base();
        assert_eq!(primary_signing_key(&def), None);
        assert!(signing_key_set(&def).is_empty());

        def.signing_keys = Some(strings(&["bob-key", "alice-key"]));
        assert_eq!(primary_signing_key(&def), Some("bob-key"));
        def.signing_key = Some("carol-key".into());
        assert_eq!(primary_signing_key(&def), Some("carol-key"));
        assert_eq!(signing_key_set(&def), ["alice-key", "bob-key", "carol-key"].map(String::from).into());

        def.signing_keys = Some(Vec::new());
        assert_eq!(primary_signing_key(&def), Some("carol-key"));
        def.signing_key = None;
        assert_eq!(primary_signing_key(&def), None);

        // Order and repeats do not change the set a writer must leave alone.
        let mut a = base();
        a.signing_keys = Some(strings(&["x", "y", "x"]));
        let mut b = base();
        b.signing_keys = Some(strings(&["y", "x"]));
        assert_eq!(signing_key_set(&a), signing_key_set(&b));
    }
}
