//! Fixed inputs shared by the server's process-level tests, its benchmarks and the workspace's
//! integration tests.

use seed_agents_protocol::generated::{
    AgentDefinition, AgentDefinitionSystemPrompt, AgentTriggerInput, AgentTriggerInputPrompt, AgentTriggerSource,
    InvokeSessionTool, InvokeSessionToolResponse, InvokeSessionToolVerb, MessageSession, MessageSessionContentPart,
    ModelProviderConfig, TextContentPart, WebhookSource,
};
use seed_agents_protocol::{Value, wire};

/// An enabled webhook trigger named `name` whose firings open a thread with `prompt`.
pub fn webhook_trigger(name: &str, prompt: &str) -> AgentTriggerInput {
    AgentTriggerInput {
        extra: Default::default(),
        continuation: None,
        enabled: None,
        name: name.into(),
        prompt: Some(AgentTriggerInputPrompt::String(prompt.into())),
        source: AgentTriggerSource::WebhookSource(WebhookSource { extra: Default::default() }),
    }
}

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

/// `InvokeSessionTool` with `verb` and JSON `input` in session `session_id`.
pub fn invoke(session_id: &str, verb: InvokeSessionToolVerb, input: serde_json::Value) -> InvokeSessionTool {
    InvokeSessionTool { input: Value(wire::to_ipld(&input).unwrap()), session_id: session_id.into(), verb }
}

/// The output of a verb that succeeded, as JSON (a verb that failed fails the test).
pub fn tool_output(response: &InvokeSessionToolResponse) -> serde_json::Value {
    assert_eq!(response.error, None, "{response:?}");
    serde_json::to_value(response.output.as_ref().unwrap()).unwrap()
}
