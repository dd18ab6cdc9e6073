//! Fixed inputs shared by the server's process-level tests, its benchmarks and the workspace's
//! integration tests.

use seed_agents_protocol::generated::{
    AgentDefinition, AgentDefinitionSystemPrompt, MessageSession, MessageSessionContentPart, ModelProviderConfig,
    TextContentPart,
};

/// An OpenAI provider referring to the secret `openai-key` (which need not exist: nothing here
/// calls the vendor).
pub fn provider_config() -> ModelProviderConfig {
    ModelProviderConfig {
        extra: Default::default(),
        auth_mode: None,
        base_url: None,
        model_defaults: None,
        secret_refs: Some([("apiKey".to_owned(), "openai-key".to_owned())].into()),
        type_: "openai".into(),
    }
}

/// An agent named `name` on the provider `main`.
pub fn definition(name: &str) -> AgentDefinition {
    AgentDefinition {
        extra: Default::default(),
        enabled_models: None,
        mcp_servers: None,
        metadata: None,
        model: "gpt-4.1".into(),
        model_provider: "main".into(),
        name: name.into(),
        reasoning_level: None,
        signing_key: None,
        signing_keys: None,
        system_prompt: AgentDefinitionSystemPrompt::String("You are helpful.".into()),
        thoroughness: None,
        tools: None,
    }
}

/// A keyless `custom` (OpenAI-compatible) provider at `base_url`: the scripted
/// [`provider`](crate::provider) in the tests and benchmarks that run turns.
pub fn custom_provider_config(base_url: String) -> ModelProviderConfig {
    ModelProviderConfig {
        extra: Default::default(),
        auth_mode: None,
        base_url: Some(base_url),
        model_defaults: None,
        secret_refs: None,
        type_: "custom".into(),
    }
}

/// `MessageSession` with one text part.
pub fn say(session_id: &str, text: impl Into<String>) -> MessageSession {
    MessageSession::new(vec![MessageSessionContentPart::TextContentPart(TextContentPart::new(text))], session_id)
}
