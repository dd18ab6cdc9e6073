//! The chat completions request body.

use serde_json::{Map, Value, json};

use crate::model::{Endpoint, Message, ModelRequest, ToolCall, ToolSpec, UserPart, data_url, ids, merge_defaults};

/// The JSON body for one streamed step.
///
/// `store: false` is sent except to xai and deepseek, which refuse unknown fields; deepseek gets
/// `reasoning_content: ""` on assistant messages. No reasoning field is ever sent on this path: an
/// `openai` model whose reasoning is controlled goes to the Responses API instead
/// ([`Endpoint::wire_for`]).
pub(crate) fn body(endpoint: &Endpoint, request: &ModelRequest) -> Map<String, Value> {
    let provider_type = endpoint.provider_type.as_str();
    let mut body = Map::new();
    body.insert("model".into(), endpoint.model.clone().into());
    body.insert("messages".into(), Value::Array(messages(provider_type, request)));
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("max_completion_tokens".into(), request.max_tokens.into());
    if !matches!(provider_type, "xai" | "deepseek") {
        body.insert("store".into(), false.into());
    }
    if !request.tools.is_empty() {
        body.insert("tools".into(), request.tools.iter().map(tool).collect());
    }
    merge_defaults(&mut body, request.model_defaults.as_ref());
    body
}

fn messages(provider_type: &str, request: &ModelRequest) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": request.system})];
    for message in &request.messages {
        match message {
            Message::User(parts) => out.push(json!({"role": "user", "content": user_content(parts)})),
            Message::Assistant { text, tool_calls, .. } => {
                if text.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                let mut assistant = Map::new();
                assistant.insert("role".into(), "assistant".into());
                let content = if text.is_empty() { Value::Null } else { text.clone().into() };
                assistant.insert("content".into(), content);
                if !tool_calls.is_empty() {
                    assistant.insert("tool_calls".into(), tool_calls.iter().map(tool_call).collect());
                }
                if provider_type == "deepseek" {
                    assistant.insert("reasoning_content".into(), "".into());
                }
                out.push(Value::Object(assistant));
            }
            Message::ToolResults(results) => {
                out.extend(results.iter().map(|result| {
                    // Chat completions takes no images in a tool message: they follow as a user
                    // message, and a result that is only images says so.
                    let text = if result.text.is_empty() && !result.images.is_empty() {
                        "(see attached image)"
                    } else {
                        &result.text
                    };
                    json!({"role": "tool", "tool_call_id": ids::openai(&result.call_id), "content": text})
                }));
                let images: Vec<Value> = results
                    .iter()
                    .flat_map(|result| &result.images)
                    .map(|image| json!({"type": "image_url", "image_url": {"url": data_url(&image.mime, &image.data)}}))
                    .collect();
                if !images.is_empty() {
                    let mut content = vec![json!({"type": "text", "text": "Attached image(s) from tool result:"})];
                    content.extend(images);
                    out.push(json!({"role": "user", "content": content}));
                }
            }
        }
    }
    out
}

/// A lone text part is sent as a plain string; anything else as content parts.
fn user_content(parts: &[UserPart]) -> Value {
    if let [UserPart::Text(text)] = parts {
        return text.clone().into();
    }
    parts
        .iter()
        .map(|part| match part {
            UserPart::Text(text) => json!({"type": "text", "text": text}),
            UserPart::Image { mime, data } => json!({"type": "image_url", "image_url": {"url": data_url(mime, data)}}),
        })
        .collect()
}

fn tool_call(call: &ToolCall) -> Value {
    json!({
        "id": ids::openai(&call.id),
        "type": "function",
        "function": {"name": call.name, "arguments": arguments_text(&call.arguments)},
    })
}

/// Replayed arguments as the JSON text the vendor expects; anything but an object is sent as `{}`,
/// as the runtime replays it (docs/runtime.md §1.6).
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::Object(_) => arguments.to_string(),
        _ => "{}".to_owned(),
    }
}

fn tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": *spec.parameters,
            "strict": false,
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{endpoint, sample_request};

    #[test]
    fn golden_body() {
        let body = body(&endpoint("openai", "gpt-4.1-mini"), &sample_request());
        let expected = json!({
            "model": "gpt-4.1-mini",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 16384,
            "store": false,
            "temperature": 0.2,
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": [
                    {"type": "text", "text": "<message_sender>\n{\"accountId\":\"z6Mk1\"}\n</message_sender>\n\nWhat is in my notes?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
                ]},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "read", "arguments": "{\"address\":\"~/memory/\"}"}},
                    {"id": "toolu_0123456789abcdefghijklmnopqrstuvwx", "type": "function", "function": {"name": "status", "arguments": "{\"title\":\"Notes\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_9", "content": "notes.md"},
                {"role": "tool", "tool_call_id": "toolu_0123456789abcdefghijklmnopqrstuvwx", "content": "Title must be short"},
                {"role": "user", "content": [
                    {"type": "text", "text": "Attached image(s) from tool result:"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_2", "content": ""},
                {"role": "user", "content": "Thanks"},
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "read",
                    "description": "Read anything you can address.",
                    "parameters": {"type": "object", "additionalProperties": false,
                        "properties": {"address": {"type": "string", "minLength": 1}}, "required": ["address"]},
                    "strict": false,
                }},
                {"type": "function", "function": {
                    "name": "status",
                    "description": "Set the session title.",
                    "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
                    "strict": false,
                }},
            ],
        });
        assert_eq!(Value::Object(body), expected);
    }

    #[test]
    fn vendor_tweaks() {
        let request = ModelRequest { messages: sample_request().messages, ..ModelRequest::default() };
        let deepseek = body(&endpoint("deepseek", "deepseek-chat"), &request);
        assert!(!deepseek.contains_key("store"));
        let assistants: Vec<_> = deepseek["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|message| message["role"] == "assistant")
            .collect();
        assert_eq!(assistants.len(), 2);
        assert!(assistants.iter().all(|message| message["reasoning_content"] == ""));
        assert!(!body(&endpoint("xai", "grok-4"), &request).contains_key("store"));
        assert_eq!(body(&endpoint("ollama", "llama3.2"), &request)["store"], false);
        assert!(!body(&endpoint("ollama", "llama3.2"), &request).contains_key("tools"));
    }

    #[test]
    fn model_defaults_override_generated_keys() {
        let mut defaults = Map::new();
        defaults.insert("max_completion_tokens".into(), 100.into());
        defaults.insert("store".into(), true.into());
        let request = ModelRequest { model_defaults: Some(defaults), ..ModelRequest::default() };
        let body = body(&endpoint("openai", "gpt-4.1"), &request);
        assert_eq!((&body["max_completion_tokens"], &body["store"]), (&json!(100), &json!(true)));
    }
}
