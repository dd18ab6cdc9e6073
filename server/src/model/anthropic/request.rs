//! The Messages request body.

use serde_json::{Map, Value, json};

use crate::model::{
    Endpoint, Message, ModelRequest, Thinking, ToolCall, ToolResult, ToolSpec, UserPart, base64_text, ids,
};
use crate::model::{merge_defaults, reasoning_level};

/// The smallest thinking budget Anthropic accepts.
const MIN_BUDGET: u32 = 1024;

/// The JSON body for one streamed step.
///
/// Prompt caching marks the system block, the last tool and the last block of the final user
/// message. Thinking is sent per [`thinking_enabled`].
pub(crate) fn body(endpoint: &Endpoint, request: &ModelRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), endpoint.model.clone().into());
    body.insert("max_tokens".into(), request.max_tokens.into());
    body.insert("stream".into(), true.into());
    if !request.system.is_empty() {
        body.insert("system".into(), json!([{"type": "text", "text": request.system, "cache_control": ephemeral()}]));
    }
    body.insert("messages".into(), Value::Array(messages(&request.messages)));
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request.tools.iter().map(tool).collect();
        if let Some(Value::Object(last)) = tools.last_mut() {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(budget) = thinking_enabled(request) {
        body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    merge_defaults(&mut body, request.model_defaults.as_ref());
    body
}

/// The thinking budget when this request sends thinking (docs/runtime.md §1.9): a level is set
/// (minimal 1024, low 2048, medium 8192, high 16384 tokens; xhigh and max as high), shrunk to
/// `max_tokens − 1024` when it does not fit under `max_tokens`. In the middle of a tool loop (the
/// last assistant message called tools) Anthropic wants that message to start with its signed
/// thinking block: a step of this pass carries it and thinking goes on; a call replayed from the
/// log carries none (reasoning is never stored), so that step runs without thinking.
pub(crate) fn thinking_enabled(request: &ModelRequest) -> Option<u32> {
    let mut budget = match reasoning_level(request.reasoning.as_deref())? {
        "minimal" => 1024,
        "low" => 2048,
        "medium" => 8192,
        "high" | "xhigh" | "max" => 16_384,
        _ => return None,
    };
    if request.max_tokens <= budget {
        budget = request.max_tokens.saturating_sub(MIN_BUDGET);
    }
    let in_tool_loop = request
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant { text, tool_calls, thinking } if !(text.is_empty() && tool_calls.is_empty()) => {
                Some(!tool_calls.is_empty() && !thinking.iter().any(Thinking::is_anthropic))
            }
            _ => None,
        })
        .unwrap_or(false);
    (budget >= MIN_BUDGET && !in_tool_loop).then_some(budget)
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Whether the last message sent holds tool results, so the next results join it.
    let mut open_results = false;
    for message in messages {
        match message {
            Message::User(parts) => {
                let blocks: Vec<Value> = parts.iter().filter_map(user_block).collect();
                if !blocks.is_empty() {
                    out.push(json!({"role": "user", "content": blocks}));
                    open_results = false;
                }
            }
            Message::Assistant { text, tool_calls, thinking } => {
                let mut blocks = Vec::new();
                if !(text.is_empty() && tool_calls.is_empty()) {
                    blocks.extend(thinking.iter().filter_map(thinking_block));
                }
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                blocks.extend(tool_calls.iter().map(tool_use));
                if !blocks.is_empty() {
                    out.push(json!({"role": "assistant", "content": blocks}));
                    open_results = false;
                }
            }
            Message::ToolResults(results) => {
                let blocks = results.iter().map(tool_result);
                match out.last_mut().and_then(|last| last.get_mut("content")).and_then(Value::as_array_mut) {
                    Some(content) if open_results => content.extend(blocks),
                    _ => {
                        out.push(json!({"role": "user", "content": blocks.collect::<Vec<_>>()}));
                        open_results = true;
                    }
                }
            }
        }
    }
    if let Some(last) = out.last_mut().filter(|last| last["role"] == "user")
        && let Some(Value::Object(block)) =
            last.get_mut("content").and_then(Value::as_array_mut).and_then(|c| c.last_mut())
    {
        block.insert("cache_control".into(), ephemeral());
    }
    out
}

/// A user block; empty text is left out (Anthropic refuses empty text blocks).
fn user_block(part: &UserPart) -> Option<Value> {
    match part {
        UserPart::Text(text) if text.is_empty() => None,
        UserPart::Text(text) => Some(json!({"type": "text", "text": text})),
        UserPart::Image { mime, data } => Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": mime, "data": base64_text(data)},
        })),
    }
}

/// A reasoning block exactly as the provider sent it; another vendor's reasoning is not sent.
fn thinking_block(block: &Thinking) -> Option<Value> {
    match block {
        Thinking::Signed { text, signature } => {
            Some(json!({"type": "thinking", "thinking": text, "signature": signature}))
        }
        Thinking::Redacted { data } => Some(json!({"type": "redacted_thinking", "data": data})),
        Thinking::PartSignature { .. } => None,
        Thinking::Encrypted(_) => None,
    }
}

fn tool_use(call: &ToolCall) -> Value {
    let input = match &call.arguments {
        Value::Object(_) => call.arguments.clone(),
        _ => Value::Object(Map::new()),
    };
    json!({"type": "tool_use", "id": ids::anthropic(&call.id), "name": call.name, "input": input})
}

fn tool_result(result: &ToolResult) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), "tool_result".into());
    block.insert("tool_use_id".into(), ids::anthropic(&result.call_id).into());
    let mut content = Vec::new();
    if !result.text.is_empty() {
        content.push(json!({"type": "text", "text": result.text}));
    }
    content.extend(result.images.iter().map(|image| {
        json!({"type": "image", "source": {"type": "base64", "media_type": image.mime, "data": base64_text(&image.data)}})
    }));
    if !content.is_empty() {
        block.insert("content".into(), Value::Array(content));
    }
    block.insert("is_error".into(), result.is_error.into());
    Value::Object(block)
}

/// The tool with its schema reduced to `type`, `properties` and `required`.
fn tool(spec: &ToolSpec) -> Value {
    let properties = spec.parameters.get("properties").cloned().unwrap_or_else(|| json!({}));
    let required = spec.parameters.get("required").cloned().unwrap_or_else(|| json!([]));
    json!({
        "name": spec.name,
        "description": spec.description,
        "input_schema": {"type": "object", "properties": properties, "required": required},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_support::{endpoint, sample_request};

    #[test]
    fn golden_body() {
        let body = body(&endpoint("anthropic", "claude-sonnet-4-5"), &sample_request());
        let cache = json!({"type": "ephemeral"});
        let expected = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 16384,
            "stream": true,
            "temperature": 0.2,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": cache}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "<message_sender>\n{\"accountId\":\"z6Mk1\"}\n</message_sender>\n\nWhat is in my notes?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "The notes live in memory.", "signature": "c2lnbmVk"},
                    {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "call_9_fc_123", "name": "read", "input": {"address": "~/memory/"}},
                    {"type": "tool_use", "id": "toolu_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH", "name": "status", "input": {"title": "Notes"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_9_fc_123", "content": [
                        {"type": "text", "text": "notes.md"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
                    ], "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH", "content": [{"type": "text", "text": "Title must be short"}], "is_error": true},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_2", "name": "read", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_2", "is_error": false},
                ]},
                {"role": "user", "content": [{"type": "text", "text": "Thanks", "cache_control": cache}]},
            ],
            "tools": [
                {"name": "read", "description": "Read anything you can address.",
                 "input_schema": {"type": "object", "properties": {"address": {"type": "string", "minLength": 1}}, "required": ["address"]}},
                {"name": "status", "description": "Set the session title.",
                 "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": []},
                 "cache_control": cache},
            ],
        });
        assert_eq!(Value::Object(body), expected);
    }

    #[test]
    fn consecutive_results_share_one_user_message_and_the_last_one_is_cached() {
        let call = |id: &str| ToolCall { id: id.into(), name: "read".into(), arguments: json!({}) };
        let result = |id: &str| ToolResult {
            call_id: id.into(),
            name: "read".into(),
            text: id.into(),
            images: Vec::new(),
            is_error: false,
        };
        let request = ModelRequest {
            messages: vec![
                Message::User(vec![UserPart::Text("go".into()), UserPart::Text(String::new())]),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![call("a"), call("b")],
                    thinking: Vec::new(),
                },
                Message::ToolResults(vec![result("a")]),
                Message::ToolResults(vec![result("b")]),
            ],
            ..ModelRequest::default()
        };
        let body = body(&endpoint("anthropic", "claude-sonnet-4-5"), &request);
        assert!(!body.contains_key("system"));
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"], json!([{"type": "text", "text": "go"}]));
        let results = messages[2]["content"].as_array().expect("results");
        assert_eq!(results.len(), 2);
        assert_eq!(results[1]["tool_use_id"], "b");
        assert_eq!(results[1]["cache_control"], json!({"type": "ephemeral"}));
        assert!(results[0].get("cache_control").is_none());
    }

    #[test]
    fn thinking_budgets() {
        let with = |level: &str, messages: Vec<Message>| ModelRequest {
            reasoning: Some(level.into()),
            messages,
            ..ModelRequest::default()
        };
        let budget = |level: &str| thinking_enabled(&with(level, Vec::new()));
        assert_eq!(budget("minimal"), Some(1024));
        assert_eq!(budget("low"), Some(2048));
        assert_eq!(budget("medium"), Some(8192));
        // high does not fit under max_tokens 16384: shrunk to 16384 − 1024.
        assert_eq!(budget("high"), Some(15_360));
        assert_eq!(budget("off"), None);
        assert_eq!(thinking_enabled(&ModelRequest::default()), None);

        let body = body(&endpoint("anthropic", "claude-sonnet-4-5"), &with("high", Vec::new()));
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 15360}));
        assert_eq!(body["max_tokens"], 16384);

        // Inside a tool loop replayed from the log (no signed thinking) the step goes without
        // thinking; after a text answer it thinks again.
        let call = ToolCall { id: "a".into(), name: "read".into(), arguments: json!({}) };
        let result = ToolResult {
            call_id: "a".into(),
            name: "read".into(),
            text: "x".into(),
            images: Vec::new(),
            is_error: false,
        };
        let looping = vec![
            Message::User(vec![UserPart::Text("go".into())]),
            Message::Assistant { text: "Looking.".into(), tool_calls: vec![call.clone()], thinking: Vec::new() },
            Message::ToolResults(vec![result.clone()]),
        ];
        assert_eq!(thinking_enabled(&with("low", looping.clone())), None);
        // A loop of this pass hands its signed thinking back first and keeps thinking.
        let signed = Thinking::Signed { text: "Read first.".into(), signature: "c2ln".into() };
        let thinking_loop = vec![
            Message::User(vec![UserPart::Text("go".into())]),
            Message::Assistant { text: "Looking.".into(), tool_calls: vec![call], thinking: vec![signed] },
            Message::ToolResults(vec![result]),
        ];
        assert_eq!(thinking_enabled(&with("low", thinking_loop.clone())), Some(2048));
        let sent = super::body(&endpoint("anthropic", "claude-sonnet-4-5"), &with("low", thinking_loop));
        assert_eq!(
            sent["messages"][1]["content"],
            json!([
                {"type": "thinking", "thinking": "Read first.", "signature": "c2ln"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "a", "name": "read", "input": {}},
            ])
        );
        let mut answered = looping;
        answered.push(Message::Assistant { text: "Done.".into(), tool_calls: Vec::new(), thinking: Vec::new() });
        answered.push(Message::Assistant { text: String::new(), tool_calls: Vec::new(), thinking: Vec::new() });
        answered.push(Message::User(vec![UserPart::Text("again".into())]));
        assert_eq!(thinking_enabled(&with("low", answered)), Some(2048));
    }
}
