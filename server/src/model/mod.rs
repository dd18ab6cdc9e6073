//! The model-provider room: one model step against a vendor's streaming API.
//!
//! The runtime speaks one neutral conversation ([`ModelRequest`]: a system prompt, [`Message`]s,
//! [`ToolSpec`]s) and gets back one assembled [`Step`] (text, tool calls, why it stopped, token
//! usage), with [`StreamEvent`]s pushed to a callback while the answer streams in. Three codecs
//! translate: `openai` writes OpenAI-compatible chat completions (provider types openai,
//! openrouter, deepseek, groq, xai, ollama, custom), `responses` writes OpenAI's Responses API
//! (an `openai` model whose reasoning is controlled: a level set, or an explicit `none`; see
//! [`Endpoint::wire_for`]), `anthropic` writes Anthropic Messages and `google` writes Gemini's
//! `streamGenerateContent`. Each codec has a request half (neutral conversation to vendor JSON)
//! and a stream half (vendor SSE events to neutral events and a step); neither touches the
//! network.
//!
//! Reasoning a vendor wants handed back ([`Thinking`]: Anthropic's signed blocks, the Responses
//! API's encrypted reasoning items, Gemini's thought signatures) travels in the assistant
//! [`Message`] of the step that made it, within one pass only: it is never stored, so a
//! conversation replayed from the log carries none and each codec sends what is valid without it
//! (docs/runtime.md §1.6, §2.3, §2.4, §2.5).
//!
//! [`Client`] owns the network: the HTTP request, our own retry layer (a few quick retries before
//! any byte of an answer was consumed), the connect / first-byte / idle timeouts, and the
//! classification of every failure into one [`ModelError`]. Nothing here knows sessions, runs or
//! the database; the runtime decides what a failure means for a turn.
//!
//! Layout: `client` (requests, retries, streaming), `retry` (which answers are retried and when),
//! `sse` (response bytes under timeouts, framed as SSE events by `sseer`), `assemble` (the step
//! being built: text, tool-call fragments, usage), `ids` (tool-call id rules per vendor),
//! `error`, `openai/`, `responses/`, `anthropic/` and `google/` (request and stream halves of
//! each codec; `google/schema` also turns tool schemas into the subset Gemini takes).

mod anthropic;
mod assemble;
mod client;
mod error;
mod google;
mod ids;
pub(crate) mod oauth;
mod openai;
mod responses;
mod retry;
mod sse;
pub(crate) mod vendors;

use std::fmt;
use std::ops::{Add, AddAssign};

use reqwest::header::HeaderMap;
use zeroize::Zeroizing;

use crate::model::vendors::reasoning_support_for;

pub use client::{Client, Timeouts};
pub use error::{ModelError, ModelErrorKind};
pub use retry::Retry;

/// The callback a step pushes its [`StreamEvent`]s to.
pub(crate) type StepEvents<'a> = dyn FnMut(StreamEvent) + Send + 'a;

/// The `max_tokens`-class limit sent on every request (docs/runtime.md §1.10).
pub(crate) const MAX_TOKENS: u32 = 16_384;

/// Which wire format an endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// OpenAI-compatible chat completions: `POST {base}/chat/completions`.
    OpenAiChat,
    /// OpenAI's Responses API: `POST {base}/responses`.
    OpenAiResponses,
    /// Anthropic Messages: `POST {base}/v1/messages`.
    Anthropic,
    /// Google Gemini: `POST {base}/models/{model}:streamGenerateContent?alt=sse`.
    Google,
}

/// Where one model step goes: the wire format, the provider type (which tunes a few fields), the
/// base URL, the key and the model id. Its `Debug` never shows the key.
///
/// A subscription ("Sign in with ChatGPT") endpoint is the same shape: `wire`
/// [`Wire::OpenAiResponses`], the vendor's backend as `base_url`, the OAuth access token as
/// `api_key` (sent as the bearer) and the account id and client headers in `extra_headers`.
#[derive(Clone)]
pub struct Endpoint {
    /// The wire format, from the provider type ([`endpoint_for`]); a step may still go out on the
    /// Responses API ([`Endpoint::wire_for`]).
    pub wire: Wire,
    /// The provider type's wire name: `openai`, `anthropic`, `ollama`, …
    pub provider_type: String,
    /// The base URL: `https://api.openai.com/v1` style for chat completions (the path
    /// `chat/completions` is appended), `https://api.anthropic.com` for Anthropic (`v1/messages`),
    /// `https://generativelanguage.googleapis.com/v1beta` for Google (`models/…`).
    pub base_url: String,
    /// The API key; `None` sends the placeholder `local` (keyless types such as ollama and custom).
    pub api_key: Option<Zeroizing<String>>,
    /// The model id sent as `model`.
    pub model: String,
    /// Headers sent with every request after the wire's own (they win on a clash); empty for
    /// API-key providers. Mark a secret one sensitive so no debug output shows it.
    pub extra_headers: HeaderMap,
    /// Whether this is a subscription backend ([`subscription_endpoint`]): it takes no output
    /// token limit, and its models always reason.
    pub subscription: bool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("wire", &self.wire)
            .field("provider_type", &self.provider_type)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("extra_headers", &self.extra_headers.keys().collect::<Vec<_>>())
            .field("subscription", &self.subscription)
            .finish()
    }
}

impl Endpoint {
    /// The wire a request goes out on: the endpoint's own, except that an `openai` chat
    /// completions endpoint sends a request to the Responses API when its model's reasoning is
    /// controlled (docs/runtime.md §1.9, §2.3): a level is set, or the model needs an explicit
    /// `none` without one (gpt-5.1 and later). Everything else stays on chat completions, so a
    /// turn's title (asked for without reasoning) on o3 or gpt-5 goes there.
    pub fn wire_for(&self, request: &ModelRequest) -> Wire {
        match self.wire {
            Wire::OpenAiChat if uses_responses_api(&self.provider_type, &self.model, request.reasoning.as_deref()) => {
                Wire::OpenAiResponses
            }
            wire => wire,
        }
    }
}

/// One model step's input: the whole conversation as the provider should see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// The system prompt.
    pub system: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools offered, in the order the provider should list them.
    pub tools: Vec<ToolSpec>,
    /// The reasoning level name (`minimal` … `xhigh`); `None`, `off`, `none` and `default` mean no
    /// level. Anthropic sends budget thinking and Gemini a `thinkingConfig`; an OpenAI model with
    /// reasoning control goes to the Responses API with the level as its effort (or `none`, on
    /// gpt-5.1 and later without one); a level on a model without reasoning control sends nothing
    /// (docs/runtime.md §1.9).
    pub reasoning: Option<String>,
    /// The output token limit ([`MAX_TOKENS`] by default).
    pub max_tokens: u32,
    /// The provider's `modelDefaults`, shallow-merged over the finished payload last, so its keys
    /// win over ours (docs/runtime.md §1.10).
    pub model_defaults: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Default for ModelRequest {
    fn default() -> Self {
        Self {
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            reasoning: None,
            max_tokens: MAX_TOKENS,
            model_defaults: None,
        }
    }
}

/// One message of the neutral conversation.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A user turn: text and images, in order.
    User(Vec<UserPart>),
    /// An assistant turn: its text and the tool calls it made. One with neither is not sent.
    Assistant {
        /// The assistant's text (may be empty when it only called tools).
        text: String,
        /// The calls it made, in order.
        tool_calls: Vec<ToolCall>,
        /// The reasoning the step began with and the signatures on its parts, kept only within the
        /// pass that produced them (never stored, so replayed messages have none) and sent back by
        /// the codec of the vendor that made them, which needs them to keep reasoning through a
        /// tool loop; other codecs skip them.
        thinking: Vec<Thinking>,
    },
    /// The results of the preceding assistant message's calls, in call order.
    ToolResults(Vec<ToolResult>),
}

/// A piece of a user message.
#[derive(Clone, PartialEq)]
pub enum UserPart {
    /// Plain text.
    Text(String),
    /// An image, sent inline (a data URL or a base64 block).
    Image {
        /// Its media type, such as `image/png`.
        mime: String,
        /// Its bytes.
        data: Vec<u8>,
    },
}

impl fmt::Debug for UserPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(text) => f.debug_tuple("Text").field(text).finish(),
            Self::Image { mime, data } => {
                f.debug_struct("Image").field("mime", mime).field("bytes", &data.len()).finish()
            }
        }
    }
}

/// Reasoning as the provider sent it, to be handed back unchanged: Anthropic `thinking` and
/// `redacted_thinking` blocks, OpenAI Responses `reasoning` items, Gemini thought parts and
/// `thoughtSignature`s. Its text is never shown, stored or replayed.
#[derive(Clone, PartialEq, Eq)]
pub enum Thinking {
    /// Readable reasoning and the provider's signature over it.
    Signed {
        /// The reasoning text.
        text: String,
        /// The provider's signature.
        signature: String,
    },
    /// Reasoning the provider encrypted.
    Redacted {
        /// The opaque payload.
        data: String,
    },
    /// A signature the provider put on one part of its answer (Gemini `thoughtSignature`), handed
    /// back on the same part: the answer text when `call_id` is `None`, else that tool call.
    PartSignature {
        /// The call whose part carried it; `None` for the answer text.
        call_id: Option<String>,
        /// The opaque signature.
        signature: String,
    },
    /// An OpenAI Responses `reasoning` item (Responses only).
    Encrypted(EncryptedReasoning),
}

impl Thinking {
    /// Whether this is an Anthropic block (signed or redacted).
    pub(crate) fn is_anthropic(&self) -> bool {
        matches!(self, Self::Signed { .. } | Self::Redacted { .. })
    }
}

impl fmt::Debug for Thinking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Signed { text, .. } => f.debug_struct("Signed").field("chars", &text.chars().count()).finish(),
            Self::Redacted { data } => f.debug_struct("Redacted").field("bytes", &data.len()).finish(),
            Self::PartSignature { call_id, signature } => {
                f.debug_struct("PartSignature").field("call_id", call_id).field("bytes", &signature.len()).finish()
            }
            Self::Encrypted(item) => f.debug_tuple("Encrypted").field(item).finish(),
        }
    }
}

/// An OpenAI Responses `reasoning` item as the stream finished it. With `store: false` the vendor
/// keeps nothing, so the next request of the pass hands the item back whole, before the message
/// and calls that followed it; the model then goes on from its own reasoning.
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptedReasoning {
    /// The item id (`rs_…`).
    pub id: String,
    /// The reasoning summary, one entry per part (streamed as reasoning deltas).
    pub summary: Vec<String>,
    /// The vendor's encrypted reasoning (`include: ["reasoning.encrypted_content"]`): opaque.
    pub encrypted_content: String,
}

impl fmt::Debug for EncryptedReasoning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptedReasoning")
            .field("id", &self.id)
            .field("summary_parts", &self.summary.len())
            .field("bytes", &self.encrypted_content.len())
            .finish()
    }
}

/// A tool call, as the model made it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The provider's call id, as it sent it (codecs normalise ids only on the way out).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The parsed arguments. Streamed fragments are joined and parsed once at the end: an empty
    /// argument string becomes `{}`, and text that is not valid JSON (a truncated or garbled call)
    /// becomes `Value::String(<the raw text>)`, so schema validation fails with the model's own
    /// text in the report instead of a guessed object.
    pub arguments: serde_json::Value,
}

/// The result of one tool call, sent back to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// The id of the call it answers.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The text the model sees.
    pub text: String,
    /// Images the model sees with the text (`read attachment:` of an image, for a model that
    /// takes images). Never stored: the log keeps the result's metadata only.
    pub images: Vec<Image>,
    /// Whether the call failed (Anthropic `is_error`; chat completions has no such flag).
    pub is_error: bool,
}

/// An image sent inline with a tool result.
#[derive(Clone, PartialEq)]
pub struct Image {
    /// Its media type, such as `image/png`.
    pub mime: String,
    /// Its bytes.
    pub data: Vec<u8>,
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Image").field("mime", &self.mime).field("bytes", &self.data.len()).finish()
    }
}

/// Whether a model takes images as input (docs/runtime.md §1.3): OpenAI's gpt-4o, gpt-4.1,
/// gpt-4-turbo, gpt-5 and later, o1, o3 and o4-mini; Claude 3 and later; any Gemini. Others are
/// treated as text-only, so an image they would refuse is never sent.
pub(crate) fn accepts_images(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let gpt_five_or_later = model
        .strip_prefix("gpt-")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|major| major.parse::<u32>().ok())
        .is_some_and(|major| major >= 5);
    let claude_three_or_later = model.strip_prefix("claude-").is_some_and(|rest| {
        // `claude-3-5-sonnet…` and `claude-sonnet-4-5…`: the first number is the generation.
        rest.split('-').find_map(|part| part.parse::<u32>().ok()).is_some_and(|generation| generation >= 3)
    });
    ["gpt-4o", "gpt-4.1", "gpt-4-turbo", "o1", "o3", "o4-mini", "gemini-"]
        .iter()
        .any(|prefix| model.starts_with(prefix))
        || gpt_five_or_later
        || claude_three_or_later
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its arguments as JSON Schema (Anthropic gets only `type`, `properties` and `required`).
    /// Shared: the built-in tools' schemas are offered on every step of every pass.
    pub parameters: std::sync::Arc<serde_json::Value>,
}

/// Something the provider streamed, pushed to the caller as it arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// A piece of answer text, exactly as the provider sent it.
    TextDelta(String),
    /// A piece of reasoning ("thinking") text; never part of the answer.
    ReasoningDelta(String),
    /// A tool call began (its arguments are still streaming).
    ToolCallStarted {
        /// The provider's call id.
        id: String,
        /// The tool's name.
        name: String,
    },
}

/// One model step's outcome: what the model said and did, and why it stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The answer text (all text deltas joined).
    pub text: String,
    /// The tool calls, in the order the provider started them.
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning to hand back within the pass, in order (Anthropic signed blocks, Responses
    /// reasoning items, Gemini part signatures; empty elsewhere).
    pub thinking: Vec<Thinking>,
    /// Why the model stopped.
    pub stop: StopReason,
    /// Token usage of this step.
    pub usage: Usage,
}

/// Why a step ended. Refusals and filters are errors ([`ModelErrorKind::FinishReason`]), not
/// stop reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The model finished its answer.
    Stop,
    /// The output limit cut the answer; the text so far is kept as the answer.
    Length,
    /// The model wants its tool calls run.
    ToolUse,
}

/// Token counts of a step (or a sum of steps, with `+=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Input tokens not read from or written to the prompt cache.
    pub input: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
    /// The sum of the four.
    pub total: u64,
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.total += other.total;
    }
}

impl Add for Usage {
    type Output = Self;

    fn add(mut self, other: Self) -> Self {
        self += other;
        self
    }
}

/// The endpoint for a provider type, or [`ModelErrorKind::Unsupported`] when this build has no
/// codec for it (an unknown type).
pub fn endpoint_for(
    provider_type: &str,
    base_url: String,
    api_key: Option<Zeroizing<String>>,
    model: String,
) -> Result<Endpoint, ModelError> {
    let wire = match provider_type {
        "anthropic" => Wire::Anthropic,
        "openai" | "openrouter" | "deepseek" | "groq" | "xai" | "ollama" | "custom" => Wire::OpenAiChat,
        "google" => Wire::Google,
        other => return Err(ModelError::unsupported(format!("Unsupported model provider type: {other}"))),
    };
    Ok(Endpoint {
        wire,
        provider_type: provider_type.to_owned(),
        base_url,
        api_key,
        model,
        extra_headers: HeaderMap::new(),
        subscription: false,
    })
}

/// The endpoint of a "Sign in with ChatGPT" turn (docs/runtime.md §1.3, §2.3): the Responses
/// API at `base_url` (the ChatGPT Codex backend, `{base}/responses`), the OAuth access token as
/// the bearer, and the ChatGPT account and this client named in headers.
pub(crate) fn subscription_endpoint(
    base_url: String,
    access_token: Zeroizing<String>,
    chatgpt_account_id: &str,
    model: String,
) -> Result<Endpoint, ModelError> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut extra_headers = HeaderMap::new();
    let mut account = HeaderValue::from_str(chatgpt_account_id)
        .map_err(|_| ModelError::new(ModelErrorKind::Connect, "The ChatGPT account id is not a valid header value"))?;
    account.set_sensitive(true);
    extra_headers.insert(HeaderName::from_static("chatgpt-account-id"), account);
    extra_headers.insert(HeaderName::from_static("originator"), HeaderValue::from_static(oauth::ORIGINATOR));
    extra_headers.insert(HeaderName::from_static("openai-beta"), HeaderValue::from_static("responses=experimental"));
    Ok(Endpoint {
        wire: Wire::OpenAiResponses,
        provider_type: "openai".to_owned(),
        base_url,
        api_key: Some(access_token),
        model,
        extra_headers,
        subscription: true,
    })
}

/// Whether a step goes to OpenAI's Responses API (docs/runtime.md §1.3, §1.9): an `openai` model
/// with reasoning control, and either a level set or a model that must be told `none` without
/// one (gpt-5.1 and later). A level on a model without reasoning control sends nothing, as
/// upstream does; other provider types never switch.
pub(crate) fn uses_responses_api(provider_type: &str, model: &str, reasoning: Option<&str>) -> bool {
    provider_type == "openai"
        && reasoning_support_for(provider_type, model)
            .is_some_and(|support| reasoning_level(reasoning).is_some() || support.supports_effort_none)
}

/// The level name when one is really set (`off`, `none`, `default` and blank mean none).
fn reasoning_level(reasoning: Option<&str>) -> Option<&str> {
    reasoning.map(str::trim).filter(|level| !matches!(*level, "" | "off" | "none" | "default"))
}

/// Shallow-merges the provider's `modelDefaults` over a finished payload: its keys win.
pub(crate) fn merge_defaults(
    body: &mut serde_json::Map<String, serde_json::Value>,
    defaults: Option<&serde_json::Map<String, serde_json::Value>>,
) {
    for (key, value) in defaults.into_iter().flatten() {
        body.insert(key.clone(), value.clone());
    }
}

/// `data:<mime>;base64,<data>`.
pub(crate) fn data_url(mime: &str, data: &[u8]) -> String {
    format!("data:{mime};base64,{}", base64_text(data))
}

/// Standard padded base64, as every vendor expects for inline images.
pub(crate) fn base64_text(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A conversation that exercises every message shape, shared by the codecs' golden tests.
#[cfg(test)]
pub(crate) mod test_support {
    use serde_json::json;

    use super::*;

    /// An endpoint of `provider_type` on a loopback base URL.
    pub(crate) fn endpoint(provider_type: &str, model: &str) -> Endpoint {
        endpoint_for(provider_type, "http://127.0.0.1:9/v1".into(), None, model.into()).expect("supported type")
    }

    /// System prompt, a user message with the sender prefix and an image, an assistant message
    /// with two calls (a composite id and an id over 40 characters), their results (one an
    /// error), an assistant message with nothing in it (dropped), a call whose arguments never
    /// parsed, its empty result, a plain user message, two tools and a `modelDefaults` key.
    pub(crate) fn sample_request() -> ModelRequest {
        let long_id = "toolu_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH";
        let mut defaults = serde_json::Map::new();
        defaults.insert("temperature".into(), json!(0.2));
        ModelRequest {
            system: "You are terse.".into(),
            messages: vec![
                Message::User(vec![
                    UserPart::Text(
                        "<message_sender>\n{\"accountId\":\"z6Mk1\"}\n</message_sender>\n\nWhat is in my notes?".into(),
                    ),
                    UserPart::Image { mime: "image/png".into(), data: vec![0x89, 0x50, 0x4e, 0x47] },
                ]),
                Message::Assistant {
                    text: "Let me look.".into(),
                    tool_calls: vec![
                        ToolCall {
                            id: "call_9|fc_123".into(),
                            name: "read".into(),
                            arguments: json!({"address": "~/memory/"}),
                        },
                        ToolCall { id: long_id.into(), name: "status".into(), arguments: json!({"title": "Notes"}) },
                    ],
                    thinking: vec![
                        Thinking::Signed { text: "The notes live in memory.".into(), signature: "c2lnbmVk".into() },
                        Thinking::Redacted { data: "ZW5jcnlwdGVk".into() },
                    ],
                },
                Message::ToolResults(vec![
                    ToolResult {
                        call_id: "call_9|fc_123".into(),
                        name: "read".into(),
                        text: "notes.md".into(),
                        images: vec![Image { mime: "image/jpeg".into(), data: vec![0xff, 0xd8, 0xff] }],
                        is_error: false,
                    },
                    ToolResult {
                        call_id: long_id.into(),
                        name: "status".into(),
                        text: "Title must be short".into(),
                        images: Vec::new(),
                        is_error: true,
                    },
                ]),
                Message::Assistant { text: String::new(), tool_calls: Vec::new(), thinking: Vec::new() },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall { id: "call_2".into(), name: "read".into(), arguments: json!("{\"bad") }],
                    thinking: Vec::new(),
                },
                Message::ToolResults(vec![ToolResult {
                    call_id: "call_2".into(),
                    name: "read".into(),
                    text: String::new(),
                    images: Vec::new(),
                    is_error: false,
                }]),
                Message::User(vec![UserPart::Text("Thanks".into())]),
            ],
            tools: vec![
                ToolSpec {
                    name: "read".into(),
                    description: "Read anything you can address.".into(),
                    parameters: json!({"type": "object", "additionalProperties": false,
                        "properties": {"address": {"type": "string", "minLength": 1}}, "required": ["address"]})
                    .into(),
                },
                ToolSpec {
                    name: "status".into(),
                    description: "Set the session title.".into(),
                    parameters: json!({"type": "object", "properties": {"title": {"type": "string"}}}).into(),
                },
            ],
            reasoning: None,
            max_tokens: MAX_TOKENS,
            model_defaults: Some(defaults),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_models_take_images() {
        for model in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1",
            "gpt-4-turbo",
            "gpt-5",
            "gpt-5.1-codex",
            "o3",
            "o4-mini",
            "claude-3-5-sonnet-latest",
            "claude-sonnet-4-5",
            "anthropic/claude-opus-4-1",
            "openai/gpt-4o",
            "gemini-2.5-flash",
        ] {
            assert!(accepts_images(model), "{model}");
        }
        for model in ["gpt-3.5-turbo", "gpt-4", "claude-2.1", "llama3", "deepseek-chat", "mistral-large", ""] {
            assert!(!accepts_images(model), "{model}");
        }
    }

    #[test]
    fn endpoints_by_provider_type() {
        for type_ in ["openai", "openrouter", "deepseek", "groq", "xai", "ollama", "custom"] {
            let endpoint = endpoint_for(type_, "http://x/v1".into(), None, "m".into()).expect("supported");
            assert_eq!(endpoint.wire, Wire::OpenAiChat, "{type_}");
        }
        let anthropic = endpoint_for("anthropic", "https://api.anthropic.com".into(), None, "c".into());
        assert_eq!(anthropic.expect("supported").wire, Wire::Anthropic);

        let google =
            endpoint_for("google", "https://generativelanguage.googleapis.com/v1beta".into(), None, "g".into());
        assert_eq!(google.expect("supported").wire, Wire::Google);
        let unknown = endpoint_for("mistral", String::new(), None, "m".into()).expect_err("unsupported");
        assert_eq!(unknown.message, "Unsupported model provider type: mistral");
    }

    #[test]
    fn endpoint_debug_hides_the_key() {
        let key = Zeroizing::new("sk-very-secret".to_owned());
        let endpoint = endpoint_for("openai", "https://api.openai.com/v1".into(), Some(key), "gpt-4.1".into());
        let shown = format!("{:?}", endpoint.expect("supported"));
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn responses_api_for_openai_models_whose_reasoning_is_controlled() {
        assert!(uses_responses_api("openai", "o3", Some("high")));
        assert!(uses_responses_api("openai", "gpt-5", Some("minimal")));
        assert!(uses_responses_api("openai", "gpt-5.2", Some("xhigh")));
        // gpt-5.1 and later must be told `none` without a level: that is a Responses request too.
        assert!(uses_responses_api("openai", "gpt-5.2", None));
        assert!(uses_responses_api("openai", "gpt-5.1", Some("off")));
        // No level on a model that reasons by default: chat completions, nothing sent.
        assert!(!uses_responses_api("openai", "o4-mini", Some("")));
        assert!(!uses_responses_api("openai", "gpt-5", None));
        // No reasoning control, or not OpenAI: nothing to switch for.
        assert!(!uses_responses_api("openai", "gpt-4.1", Some("high")));
        assert!(!uses_responses_api("openai", "gpt-5-chat-latest", Some("high")));
        assert!(!uses_responses_api("anthropic", "claude-sonnet-4-5", Some("high")));
        assert!(!uses_responses_api("openrouter", "openai/o3", Some("high")));
    }

    #[test]
    fn the_wire_follows_the_request() {
        let leveled = ModelRequest { reasoning: Some("high".into()), ..ModelRequest::default() };
        let plain = ModelRequest::default();
        let o3 = test_support::endpoint("openai", "o3");
        assert_eq!((o3.wire_for(&leveled), o3.wire_for(&plain)), (Wire::OpenAiResponses, Wire::OpenAiChat));
        let gpt51 = test_support::endpoint("openai", "gpt-5.1");
        assert_eq!(gpt51.wire_for(&plain), Wire::OpenAiResponses);
        let claude = test_support::endpoint("anthropic", "claude-sonnet-4-5");
        assert_eq!(claude.wire_for(&leveled), Wire::Anthropic);
        // An endpoint that is Responses only (a subscription backend) stays there.
        let codex = Endpoint { wire: Wire::OpenAiResponses, ..test_support::endpoint("openai", "gpt-4.1") };
        assert_eq!(codex.wire_for(&plain), Wire::OpenAiResponses);
    }

    #[test]
    fn usage_adds_up() {
        let mut sum = Usage { input: 1, output: 2, cache_read: 3, cache_write: 4, total: 10 };
        sum += Usage { input: 10, output: 20, cache_read: 30, cache_write: 40, total: 100 };
        assert_eq!(sum, Usage { input: 11, output: 22, cache_read: 33, cache_write: 44, total: 110 });
        assert_eq!(Usage::default() + sum, sum);
    }
}
