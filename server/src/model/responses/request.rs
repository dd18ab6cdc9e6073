//! The Responses request body.

use serde_json::{Map, Value, json};

use crate::model::vendors::reasoning_support_for;
use crate::model::{
    EncryptedReasoning, Endpoint, Message, ModelRequest, Thinking, ToolCall, ToolResult, ToolSpec, UserPart, data_url,
    ids, merge_defaults, reasoning_level,
};

/// The JSON body for one streamed step.
///
/// `store: false` always: the vendor keeps nothing, so every request carries the whole
/// conversation, and reasoning comes back encrypted (`include: ["reasoning.encrypted_content"]`)
/// to be handed back within the pass. The system prompt is the `instructions` field (what the
/// vendor inserts as the developer message, and the only place subscription backends take it).
/// Tools are strict-free function tools, as on chat completions. Reasoning per [`reasoning`].
pub(crate) fn body(endpoint: &Endpoint, request: &ModelRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), endpoint.model.clone().into());
    if !request.system.is_empty() {
        body.insert("instructions".into(), request.system.clone().into());
    }
    body.insert("input".into(), Value::Array(input(&request.messages)));
    body.insert("stream".into(), true.into());
    body.insert("store".into(), false.into());
    // A subscription backend refuses an output limit; its plan sets one.
    if !endpoint.subscription {
        body.insert("max_output_tokens".into(), request.max_tokens.into());
    }
    if !request.tools.is_empty() {
        body.insert("tools".into(), request.tools.iter().map(tool).collect());
    }
    let reasoning = reasoning(endpoint, request);
    // A subscription model reasons even when no level is set (at the backend's default effort).
    let reasons = match &reasoning {
        Some(reasoning) => reasoning["effort"] != "none",
        None => endpoint.subscription,
    };
    if reasons {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(reasoning) = reasoning {
        body.insert("reasoning".into(), reasoning);
    }
    merge_defaults(&mut body, request.model_defaults.as_ref());
    body
}

/// The `reasoning` object (docs/runtime.md §1.9): a level set is the effort, with the vendor's
/// summary of its reasoning asked for (`summary: "auto"`, streamed as reasoning deltas); no level
/// on a model that takes an explicit `none` (gpt-5.1 and later) is `{effort: "none"}`; no level
/// otherwise sends nothing, leaving the vendor's default.
fn reasoning(endpoint: &Endpoint, request: &ModelRequest) -> Option<Value> {
    if let Some(level) = reasoning_level(request.reasoning.as_deref()) {
        return Some(json!({"effort": level, "summary": "auto"}));
    }
    if endpoint.subscription {
        return None;
    }
    reasoning_support_for(&endpoint.provider_type, &endpoint.model)
        .filter(|support| support.supports_effort_none)
        .map(|_| json!({"effort": "none"}))
}

/// The conversation as input items.
///
/// An assistant message becomes its reasoning items (only a step of this pass has any), an
/// assistant `message` item with its text, and a `function_call` item per call. Item ids go out
/// only where the vendor can pair them: a message that hands its reasoning back names the
/// reasoning items and its calls' items by their ids (the `item_id` half of a composite call id);
/// one without reasoning (replayed from the log, or from another vendor) names none, since a
/// call item whose reasoning is missing is refused. Each tool result is a
/// `function_call_output` for the `call_id`; images from results follow all of a step's outputs
/// as one user message, as on chat completions.
fn input(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::new();
    for message in messages {
        match message {
            Message::User(parts) => {
                let content: Vec<Value> = parts.iter().map(user_part).collect();
                if !content.is_empty() {
                    out.push(json!({"role": "user", "content": content}));
                }
            }
            Message::Assistant { text, tool_calls, thinking } => {
                if text.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                let reasoning: Vec<&EncryptedReasoning> = thinking
                    .iter()
                    .filter_map(|block| match block {
                        Thinking::Encrypted(item) => Some(item),
                        _ => None,
                    })
                    .collect();
                out.extend(reasoning.iter().map(|item| reasoning_item(item)));
                if !text.is_empty() {
                    out.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}));
                }
                out.extend(tool_calls.iter().map(|call| function_call(call, !reasoning.is_empty())));
            }
            Message::ToolResults(results) => {
                out.extend(results.iter().map(function_call_output));
                let images: Vec<Value> = results
                    .iter()
                    .flat_map(|result| &result.images)
                    .map(|image| input_image(&image.mime, &image.data))
                    .collect();
                if !images.is_empty() {
                    let mut content =
                        vec![json!({"type": "input_text", "text": "Attached image(s) from tool result:"})];
                    content.extend(images);
                    out.push(json!({"role": "user", "content": content}));
                }
            }
        }
    }
    out
}

fn user_part(part: &UserPart) -> Value {
    match part {
        UserPart::Text(text) => json!({"type": "input_text", "text": text}),
        UserPart::Image { mime, data } => input_image(mime, data),
    }
}

fn input_image(mime: &str, data: &[u8]) -> Value {
    json!({"type": "input_image", "detail": "auto", "image_url": data_url(mime, data)})
}

/// A reasoning item exactly as the vendor finished it.
fn reasoning_item(item: &EncryptedReasoning) -> Value {
    let summary: Vec<Value> = item.summary.iter().map(|text| json!({"type": "summary_text", "text": text})).collect();
    json!({"type": "reasoning", "id": item.id, "summary": summary, "encrypted_content": item.encrypted_content})
}

fn function_call(call: &ToolCall, name_item: bool) -> Value {
    let (call_id, item_id) = ids::responses(&call.id);
    let mut item = Map::new();
    item.insert("type".into(), "function_call".into());
    if let Some(item_id) = item_id.filter(|_| name_item) {
        item.insert("id".into(), item_id.into());
    }
    item.insert("call_id".into(), call_id.into());
    item.insert("name".into(), call.name.clone().into());
    item.insert("arguments".into(), arguments_text(&call.arguments).into());
    Value::Object(item)
}

/// Replayed arguments as the JSON text the vendor expects; anything but an object is sent as `{}`,
/// as the runtime replays it (docs/runtime.md §1.6).
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::Object(_) => arguments.to_string(),
        _ => "{}".to_owned(),
    }
}

/// A result's text; one that is only images says so (the images follow as a user message).
fn function_call_output(result: &ToolResult) -> Value {
    let text = if result.text.is_empty() && !result.images.is_empty() { "(see attached image)" } else { &result.text };
    json!({"type": "function_call_output", "call_id": ids::responses(&result.call_id).0, "output": text})
}

fn tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": *spec.parameters,
        "strict": false,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{endpoint, sample_request};

    #[test]
    fn golden_body() {
        let request = ModelRequest { reasoning: Some("high".into()), ..sample_request() };
        let body = body(&endpoint("openai", "o3"), &request);
        let expected = json!({
            "model": "o3",
            "instructions": "You are terse.",
            "stream": true,
            "store": false,
            "max_output_tokens": 16384,
            "temperature": 0.2,
            "reasoning": {"effort": "high", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "<message_sender>\n{\"accountId\":\"z6Mk1\"}\n</message_sender>\n\nWhat is in my notes?"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBORw=="},
                ]},
                // Anthropic's blocks are not this vendor's: skipped, so no item ids either.
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "call_9", "name": "read", "arguments": "{\"address\":\"~/memory/\"}"},
                {"type": "function_call", "call_id": "toolu_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH", "name": "status", "arguments": "{\"title\":\"Notes\"}"},
                {"type": "function_call_output", "call_id": "call_9", "output": "notes.md"},
                {"type": "function_call_output", "call_id": "toolu_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH", "output": "Title must be short"},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "Attached image(s) from tool result:"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/jpeg;base64,/9j/"},
                ]},
                {"type": "function_call", "call_id": "call_2", "name": "read", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_2", "output": ""},
                {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
            ],
            "tools": [
                {"type": "function", "name": "read", "description": "Read anything you can address.",
                 "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"address": {"type": "string", "minLength": 1}}, "required": ["address"]},
                 "strict": false},
                {"type": "function", "name": "status", "description": "Set the session title.",
                 "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
                 "strict": false},
            ],
        });
        assert_eq!(Value::Object(body), expected);
    }

    /// A subscription backend gets no output limit, and encrypted reasoning whether or not a
    /// level is set (its models always reason); a level is still the effort.
    #[test]
    fn subscription_bodies() {
        let token = zeroize::Zeroizing::new("at".to_owned());
        let codex = crate::model::subscription_endpoint(
            "http://127.0.0.1:9/codex".into(),
            token,
            "acct",
            "gpt-5.1-codex".into(),
        )
        .expect("endpoint");
        let plain = body(&codex, &ModelRequest::default());
        assert_eq!(plain.get("max_output_tokens"), None);
        assert_eq!(plain.get("reasoning"), None);
        assert_eq!(plain["include"], json!(["reasoning.encrypted_content"]));
        let leveled = body(&codex, &ModelRequest { reasoning: Some("low".into()), ..ModelRequest::default() });
        assert_eq!(leveled["reasoning"], json!({"effort": "low", "summary": "auto"}));
        assert_eq!(leveled["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(codex.extra_headers["chatgpt-account-id"], "acct");
        assert!(codex.extra_headers["chatgpt-account-id"].is_sensitive());
        assert_eq!(codex.extra_headers["originator"], "seed-agents");
        // Not a subscription: the API's limit and no reasoning fields without a level.
        let api = body(&endpoint("openai", "o3"), &ModelRequest::default());
        assert_eq!(api["max_output_tokens"], 16384);
        assert_eq!((api.get("include"), api.get("reasoning")), (None, None));
    }

    /// A step of this pass hands its reasoning back first, and then names its call items so the
    /// vendor can pair them; results answer the `call_id`.
    #[test]
    fn reasoning_items_go_back_with_the_calls_they_led_to() {
        let reasoning = EncryptedReasoning {
            id: "rs_1".into(),
            summary: vec!["Read first.".into(), "Then answer.".into()],
            encrypted_content: "gAAAA-opaque".into(),
        };
        let request = ModelRequest {
            reasoning: Some("low".into()),
            messages: vec![
                Message::User(vec![UserPart::Text("go".into())]),
                Message::Assistant {
                    text: "Looking.".into(),
                    tool_calls: vec![ToolCall { id: "call_A|fc_A".into(), name: "read".into(), arguments: json!({}) }],
                    thinking: vec![
                        Thinking::Encrypted(reasoning),
                        Thinking::Signed { text: "not ours".into(), signature: "c2ln".into() },
                    ],
                },
                Message::ToolResults(vec![ToolResult {
                    call_id: "call_A|fc_A".into(),
                    name: "read".into(),
                    text: String::new(),
                    images: vec![crate::model::Image { mime: "image/png".into(), data: vec![1, 2, 3] }],
                    is_error: false,
                }]),
            ],
            ..ModelRequest::default()
        };
        let body = body(&endpoint("openai", "gpt-5"), &request);
        assert!(!body.contains_key("instructions"), "no system prompt, no instructions");
        assert!(!body.contains_key("tools"));
        assert_eq!(body["reasoning"], json!({"effort": "low", "summary": "auto"}));
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-opaque", "summary": [
                    {"type": "summary_text", "text": "Read first."},
                    {"type": "summary_text", "text": "Then answer."},
                ]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
                {"type": "function_call", "id": "fc_A", "call_id": "call_A", "name": "read", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_A", "output": "(see attached image)"},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "Attached image(s) from tool result:"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,AQID"},
                ]},
            ])
        );
    }

    #[test]
    fn reasoning_effort_per_model_and_level() {
        let with =
            |level: Option<&str>| ModelRequest { reasoning: level.map(str::to_owned), ..ModelRequest::default() };
        let sent = |model: &str, level: Option<&str>| {
            let body = body(&endpoint("openai", model), &with(level));
            (body.get("reasoning").cloned(), body.get("include").cloned())
        };
        let include = Some(json!(["reasoning.encrypted_content"]));
        assert_eq!(sent("gpt-5.2", Some("xhigh")), (Some(json!({"effort": "xhigh", "summary": "auto"})), include));
        // gpt-5.1 and later must be told to not reason; nothing encrypted comes back to include.
        assert_eq!(sent("gpt-5.1", None), (Some(json!({"effort": "none"})), None));
        assert_eq!(sent("gpt-6", Some("off")), (Some(json!({"effort": "none"})), None));
        // A model that reasons by default gets no reasoning field without a level.
        assert_eq!(sent("o3", None), (None, None));
    }

    #[test]
    fn model_defaults_override_generated_keys() {
        let mut defaults = Map::new();
        defaults.insert("reasoning".into(), json!({"effort": "minimal"}));
        defaults.insert("store".into(), true.into());
        let request =
            ModelRequest { reasoning: Some("high".into()), model_defaults: Some(defaults), ..ModelRequest::default() };
        let body = body(&endpoint("openai", "gpt-5"), &request);
        assert_eq!((&body["reasoning"], &body["store"]), (&json!({"effort": "minimal"}), &json!(true)));
    }
}
