//! The `streamGenerateContent` request body.

use serde_json::{Map, Value, json};

use super::{SKIP_SIGNATURE_CHECK, schema, third_generation};
use crate::model::vendors::{ReasoningOff, reasoning_support_for};
use crate::model::{
    Endpoint, Message, ModelError, ModelRequest, Thinking, ToolCall, ToolResult, ToolSpec, UserPart, accepts_images,
    base64_text, reasoning_level,
};

/// The fields of Gemini's `generationConfig`: a provider's `modelDefaults` key with one of these
/// names goes there (over ours), every other key onto the body itself.
const GENERATION_CONFIG: [&str; 20] = [
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "speechConfig",
    "thinkingConfig",
    "imageConfig",
    "mediaResolution",
];

/// The JSON body for one streamed step, or [`crate::model::ModelErrorKind::Unsupported`] when a
/// tool's schema cannot be put in a form Gemini takes (see `schema`).
///
/// The system prompt is the `systemInstruction`; the conversation is `contents` with roles `user`
/// and `model`; tools are one `functionDeclarations` list; `generationConfig` holds the output
/// limit and the `thinkingConfig` of [`thinking_config`].
pub(crate) fn body(endpoint: &Endpoint, request: &ModelRequest) -> Result<Map<String, Value>, ModelError> {
    let model = endpoint.model.as_str();
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents(model, &request.messages)));
    if !request.system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": request.system}]}));
    }
    if !request.tools.is_empty() {
        let declarations = request.tools.iter().map(declaration).collect::<Result<Vec<_>, _>>()?;
        body.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
    }
    let mut generation = Map::new();
    generation.insert("maxOutputTokens".into(), request.max_tokens.into());
    if let Some(thinking) = thinking_config(model, request.reasoning.as_deref()) {
        generation.insert("thinkingConfig".into(), thinking);
    }
    for (key, value) in request.model_defaults.iter().flatten() {
        if GENERATION_CONFIG.contains(&key.as_str()) {
            generation.insert(key.clone(), value.clone());
        } else {
            body.insert(key.clone(), value.clone());
        }
    }
    // A `generationConfig` key of the defaults replaces ours whole, as any other key would.
    body.entry("generationConfig").or_insert(Value::Object(generation));
    Ok(body)
}

/// The `thinkingConfig` for a model and level (docs/runtime.md §1.9), or `None` to send none.
///
/// A level on a model with reasoning control asks for thought summaries (`includeThoughts`) and
/// sets Gemini 3's `thinkingLevel` (its `-pro` models take only low and high) or Gemini 2.5's
/// `thinkingBudget`: minimal 128 (512 on flash-lite, its floor), low 2048, medium 8192, high
/// 32768 on pro and 24576 elsewhere; other 2.5 models get the dynamic budget, -1. No level means
/// off where Gemini can turn thinking off (2.5 flash and flash-lite: budget 0) and the model's
/// own default elsewhere (2.5 pro and every Gemini 3 always think): nothing is sent. A level on
/// a model without reasoning control sends nothing.
pub(crate) fn thinking_config(model: &str, reasoning: Option<&str>) -> Option<Value> {
    let support = reasoning_support_for("google", model)?;
    let name = model.rsplit('/').next().unwrap_or(model);
    let pro = name.contains("-pro");
    let flash = name.starts_with("gemini-2.5-flash");
    let Some(level) = reasoning_level(reasoning) else {
        return (support.off == ReasoningOff::Off && flash).then(|| json!({"thinkingBudget": 0}));
    };
    let rank = match level {
        "minimal" => 0,
        "low" => 1,
        "medium" => 2,
        "high" | "xhigh" | "max" => 3,
        _ => return None,
    };
    if third_generation(model) {
        let level = match (pro, rank) {
            (true, 0 | 1) => "LOW",
            (true, _) => "HIGH",
            (false, 0) => "MINIMAL",
            (false, 1) => "LOW",
            (false, 2) => "MEDIUM",
            (false, _) => "HIGH",
        };
        return Some(json!({"includeThoughts": true, "thinkingLevel": level}));
    }
    let budget: i64 = match (rank, pro, flash) {
        (0, false, true) if name.starts_with("gemini-2.5-flash-lite") => 512,
        (0, true, _) | (0, _, true) => 128,
        (1, true, _) | (1, _, true) => 2048,
        (2, true, _) | (2, _, true) => 8192,
        (_, true, _) => 32_768,
        (_, _, true) => 24_576,
        _ => -1,
    };
    Some(json!({"includeThoughts": true, "thinkingBudget": budget}))
}

fn declaration(spec: &ToolSpec) -> Result<Value, ModelError> {
    Ok(json!({
        "name": spec.name,
        "description": spec.description,
        "parametersJsonSchema": schema::parameters(&spec.name, &spec.parameters)?,
    }))
}

fn contents(model: &str, messages: &[Message]) -> Vec<Value> {
    let images = accepts_images(model);
    let nested_images = third_generation(model);
    let mut out: Vec<Value> = Vec::new();
    // The calls of the latest assistant message, which the next results answer in order.
    let mut calls: &[ToolCall] = &[];
    let mut rest = messages;
    while let Some((message, after)) = rest.split_first() {
        rest = after;
        match message {
            Message::User(parts) => {
                let parts: Vec<Value> = parts.iter().filter_map(|part| user_part(part, images)).collect();
                if !parts.is_empty() {
                    out.push(json!({"role": "user", "parts": parts}));
                }
            }
            Message::Assistant { text, tool_calls, thinking } => {
                if text.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                out.push(json!({"role": "model", "parts": model_parts(model, text, tool_calls, thinking)}));
                calls = tool_calls;
            }
            Message::ToolResults(results) => {
                // Every result up to the next other message goes in one user content.
                let mut all: Vec<&ToolResult> = results.iter().collect();
                while let Some((Message::ToolResults(more), after)) = rest.split_first() {
                    all.extend(more);
                    rest = after;
                }
                let mut responses = Vec::new();
                let mut shown = Vec::new();
                for result in in_call_order(calls, &all) {
                    let (response, pictures) = function_response(result, images, nested_images);
                    responses.push(response);
                    shown.extend(pictures);
                }
                out.push(json!({"role": "user", "parts": responses}));
                if !shown.is_empty() {
                    let mut parts = vec![json!({"text": "Tool result image:"})];
                    parts.extend(shown);
                    out.push(json!({"role": "user", "parts": parts}));
                }
            }
        }
    }
    out
}

/// A user part; empty text is left out (Gemini refuses empty text parts), and so are images for a
/// model that takes none.
fn user_part(part: &UserPart, images: bool) -> Option<Value> {
    match part {
        UserPart::Text(text) if text.is_empty() => None,
        UserPart::Text(text) => Some(json!({"text": text})),
        UserPart::Image { mime, data } => images.then(|| inline_data(mime, data)),
    }
}

fn inline_data(mime: &str, data: &[u8]) -> Value {
    json!({"inlineData": {"mimeType": mime, "data": base64_text(data)}})
}

/// An assistant turn as Gemini sent it: signed thought parts, the text (with its signature) and
/// the calls (each with its signature). Gemini 3 checks that the calls of the current turn carry
/// their signatures; a step replayed from the log has none (they are never stored), so its first
/// call gets the placeholder Gemini documents for that case.
fn model_parts(model: &str, text: &str, calls: &[ToolCall], thinking: &[Thinking]) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut text_signature = None;
    let mut call_signatures: Vec<(&str, &str)> = Vec::new();
    for block in thinking {
        match block {
            Thinking::Signed { text, signature } if !text.is_empty() => {
                parts.push(json!({"thought": true, "text": text, "thoughtSignature": signature}));
            }
            Thinking::PartSignature { call_id: None, signature } => text_signature = Some(signature.as_str()),
            Thinking::PartSignature { call_id: Some(id), signature } => call_signatures.push((id, signature)),
            _ => {}
        }
    }
    if !text.is_empty() {
        let mut part = json!({"text": text});
        if let Some(signature) = text_signature {
            part["thoughtSignature"] = signature.into();
        }
        parts.push(part);
    }
    let unsigned = call_signatures.is_empty() && third_generation(model);
    for (position, call) in calls.iter().enumerate() {
        let args = match &call.arguments {
            Value::Object(_) => call.arguments.clone(),
            _ => Value::Object(Map::new()),
        };
        let mut part = json!({"functionCall": {"name": call.name, "args": args}});
        let signature = call_signatures.iter().find(|(id, _)| *id == call.id).map(|(_, signature)| *signature);
        match signature {
            Some(signature) => part["thoughtSignature"] = signature.into(),
            None if unsigned && position == 0 => part["thoughtSignature"] = SKIP_SIGNATURE_CHECK.into(),
            None => {}
        }
        parts.push(part);
    }
    parts
}

/// The results in the order of the calls they answer (Gemini pairs them by position and name),
/// then any result whose call is not in the latest assistant message.
fn in_call_order<'a>(calls: &[ToolCall], results: &[&'a ToolResult]) -> Vec<&'a ToolResult> {
    let mut used = vec![false; results.len()];
    let mut ordered = Vec::with_capacity(results.len());
    for call in calls {
        if let Some(index) = (0..results.len()).find(|&index| !used[index] && results[index].call_id == call.id) {
            used[index] = true;
            ordered.push(results[index]);
        }
    }
    ordered.extend(results.iter().zip(&used).filter(|(_, used)| !**used).map(|(result, _)| *result));
    ordered
}

/// A `functionResponse` part (`output`, or `error` for a failed call) and the images to show
/// apart: Gemini 3 takes them inside the response, older models in a user content after it.
fn function_response(result: &ToolResult, images: bool, nested: bool) -> (Value, Vec<Value>) {
    let pictures: Vec<Value> = if images {
        result.images.iter().map(|image| inline_data(&image.mime, &image.data)).collect()
    } else {
        Vec::new()
    };
    let text = if result.text.is_empty() && !pictures.is_empty() { "(see attached image)" } else { &result.text };
    let key = if result.is_error { "error" } else { "output" };
    let mut response = Map::new();
    response.insert("name".into(), result.name.clone().into());
    response.insert("response".into(), json!({ key: text }));
    if nested && !pictures.is_empty() {
        response.insert("parts".into(), Value::Array(pictures));
        return (json!({"functionResponse": response}), Vec::new());
    }
    (json!({"functionResponse": response}), pictures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_support::{endpoint, sample_request};
    use crate::model::{Image, ModelErrorKind};

    fn google(model: &str) -> Endpoint {
        endpoint("google", model)
    }

    #[test]
    fn golden_body() {
        let body = body(&google("gemini-2.5-flash"), &sample_request()).expect("body");
        let expected = json!({
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "generationConfig": {"maxOutputTokens": 16384, "temperature": 0.2, "thinkingConfig": {"thinkingBudget": 0}},
            "contents": [
                {"role": "user", "parts": [
                    {"text": "<message_sender>\n{\"accountId\":\"z6Mk1\"}\n</message_sender>\n\nWhat is in my notes?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
                ]},
                {"role": "model", "parts": [
                    {"thought": true, "text": "The notes live in memory.", "thoughtSignature": "c2lnbmVk"},
                    {"text": "Let me look."},
                    {"functionCall": {"name": "read", "args": {"address": "~/memory/"}}},
                    {"functionCall": {"name": "status", "args": {"title": "Notes"}}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "read", "response": {"output": "notes.md"}}},
                    {"functionResponse": {"name": "status", "response": {"error": "Title must be short"}}},
                ]},
                {"role": "user", "parts": [
                    {"text": "Tool result image:"},
                    {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}},
                ]},
                {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {"output": ""}}}]},
                {"role": "user", "parts": [{"text": "Thanks"}]},
            ],
            "tools": [{"functionDeclarations": [
                {"name": "read", "description": "Read anything you can address.",
                 "parametersJsonSchema": {"type": "object",
                    "properties": {"address": {"type": "string", "minLength": 1}}, "required": ["address"]}},
                {"name": "status", "description": "Set the session title.",
                 "parametersJsonSchema": {"type": "object", "properties": {"title": {"type": "string"}}}},
            ]}],
        });
        assert_eq!(Value::Object(body), expected);
    }

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: json!({"n": id}) }
    }

    fn result(id: &str, name: &str) -> ToolResult {
        ToolResult { call_id: id.into(), name: name.into(), text: id.into(), images: Vec::new(), is_error: false }
    }

    fn signature(call_id: Option<&str>, signature: &str) -> Thinking {
        Thinking::PartSignature { call_id: call_id.map(str::to_owned), signature: signature.into() }
    }

    #[test]
    fn signatures_go_back_on_their_parts_and_results_follow_call_order() {
        let request = ModelRequest {
            messages: vec![
                Message::User(vec![UserPart::Text("go".into())]),
                Message::Assistant {
                    text: "Reading both.".into(),
                    tool_calls: vec![call("a", "read"), call("b", "status")],
                    thinking: vec![signature(Some("a"), "U0lHX0E="), signature(None, "U0lHX1Q=")],
                },
                // Results out of order, over two messages: one user content, in call order.
                Message::ToolResults(vec![result("b", "status")]),
                Message::ToolResults(vec![result("a", "read")]),
            ],
            ..ModelRequest::default()
        };
        let body = body(&google("gemini-3-flash-preview"), &request).expect("body");
        assert_eq!(
            body["contents"][1]["parts"],
            json!([
                {"text": "Reading both.", "thoughtSignature": "U0lHX1Q="},
                {"functionCall": {"name": "read", "args": {"n": "a"}}, "thoughtSignature": "U0lHX0E="},
                {"functionCall": {"name": "status", "args": {"n": "b"}}},
            ])
        );
        assert_eq!(body["contents"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            body["contents"][2],
            json!({"role": "user", "parts": [
                {"functionResponse": {"name": "read", "response": {"output": "a"}}},
                {"functionResponse": {"name": "status", "response": {"output": "b"}}},
            ]})
        );
        assert!(!Value::Object(body).to_string().contains("\"id\""), "no ids go to Gemini");
    }

    #[test]
    fn replayed_calls_on_gemini_3_carry_the_placeholder_signature() {
        let request = ModelRequest {
            messages: vec![
                Message::User(vec![UserPart::Text("go".into())]),
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![call("a", "read"), call("b", "read")],
                    thinking: Vec::new(),
                },
                Message::ToolResults(vec![result("a", "read"), result("b", "read")]),
            ],
            ..ModelRequest::default()
        };
        let parts = |model: &str| body(&google(model), &request).expect("body")["contents"][1]["parts"].clone();
        let three = parts("gemini-3-pro-preview");
        assert_eq!(three[0]["thoughtSignature"], SKIP_SIGNATURE_CHECK);
        assert!(three[1].get("thoughtSignature").is_none(), "only the first call of a step is signed");
        let two = parts("gemini-2.5-pro");
        assert!(two[0].get("thoughtSignature").is_none(), "Gemini 2.5 does not check");
    }

    #[test]
    fn images_in_results_nest_on_gemini_3_and_are_dropped_for_text_only_models() {
        let with_image = ToolResult {
            call_id: "a".into(),
            name: "read".into(),
            text: String::new(),
            images: vec![Image { mime: "image/png".into(), data: vec![1, 2, 3] }],
            is_error: false,
        };
        let request = ModelRequest {
            messages: vec![
                Message::User(vec![
                    UserPart::Text("look".into()),
                    UserPart::Image { mime: "image/png".into(), data: vec![9] },
                ]),
                Message::Assistant { text: String::new(), tool_calls: vec![call("a", "read")], thinking: Vec::new() },
                Message::ToolResults(vec![with_image]),
            ],
            ..ModelRequest::default()
        };
        let contents = |model: &str| body(&google(model), &request).expect("body")["contents"].clone();
        let three = contents("gemini-3-pro-preview");
        assert_eq!(
            three[2]["parts"],
            json!([{"functionResponse": {"name": "read", "response": {"output": "(see attached image)"},
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "AQID"}}]}}])
        );
        assert_eq!(three.as_array().map(Vec::len), Some(3));
        let text_only = contents("learnlm-1.5-pro");
        assert_eq!(text_only[0]["parts"], json!([{"text": "look"}]));
        assert_eq!(text_only[2]["parts"][0]["functionResponse"]["response"], json!({"output": ""}));
        assert_eq!(text_only.as_array().map(Vec::len), Some(3));
    }

    #[test]
    fn thinking_configs() {
        let config = |model: &str, level: Option<&str>| thinking_config(model, level);
        assert_eq!(
            config("gemini-2.5-flash", Some("low")),
            Some(json!({"includeThoughts": true, "thinkingBudget": 2048}))
        );
        assert_eq!(
            config("gemini-2.5-pro", Some("high")),
            Some(json!({"includeThoughts": true, "thinkingBudget": 32768}))
        );
        assert_eq!(
            config("gemini-2.5-flash", Some("high")),
            Some(json!({"includeThoughts": true, "thinkingBudget": 24576}))
        );
        assert_eq!(
            config("gemini-2.5-flash-lite", Some("minimal")),
            Some(json!({"includeThoughts": true, "thinkingBudget": 512}))
        );
        assert_eq!(
            config("gemini-2.5-pro", Some("minimal")),
            Some(json!({"includeThoughts": true, "thinkingBudget": 128}))
        );
        assert_eq!(
            config("gemini-2.5-computer-use", Some("medium")),
            Some(json!({"includeThoughts": true, "thinkingBudget": -1}))
        );
        assert_eq!(
            config("gemini-3-pro-preview", Some("medium")),
            Some(json!({"includeThoughts": true, "thinkingLevel": "HIGH"}))
        );
        assert_eq!(
            config("gemini-3-pro-preview", Some("minimal")),
            Some(json!({"includeThoughts": true, "thinkingLevel": "LOW"}))
        );
        assert_eq!(
            config("gemini-3-flash-preview", Some("minimal")),
            Some(json!({"includeThoughts": true, "thinkingLevel": "MINIMAL"}))
        );
        assert_eq!(
            config("gemini-3-flash-preview", Some("medium")),
            Some(json!({"includeThoughts": true, "thinkingLevel": "MEDIUM"}))
        );
        // No level: off where Gemini can turn thinking off, the model's default elsewhere.
        assert_eq!(config("gemini-2.5-flash", None), Some(json!({"thinkingBudget": 0})));
        assert_eq!(config("gemini-2.5-flash-lite", Some("off")), Some(json!({"thinkingBudget": 0})));
        assert_eq!(config("gemini-2.5-pro", None), None);
        assert_eq!(config("gemini-3-flash-preview", None), None);
        // No reasoning control: nothing, whatever the level.
        assert_eq!(config("gemini-2.0-flash", Some("high")), None);
        assert_eq!(config("gemini-2.0-flash", None), None);
    }

    #[test]
    fn model_defaults_land_where_gemini_reads_them() {
        let mut defaults = Map::new();
        defaults.insert("temperature".into(), json!(0.1));
        defaults.insert("maxOutputTokens".into(), json!(100));
        defaults.insert(
            "safetySettings".into(),
            json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]),
        );
        let request = ModelRequest { model_defaults: Some(defaults), ..ModelRequest::default() };
        let body = body(&google("gemini-2.0-flash"), &request).expect("body");
        assert_eq!(body["generationConfig"], json!({"maxOutputTokens": 100, "temperature": 0.1}));
        assert_eq!(body["safetySettings"][0]["threshold"], "BLOCK_NONE");
        assert!(!body.contains_key("systemInstruction") && !body.contains_key("tools"));

        let mut whole = Map::new();
        whole.insert("generationConfig".into(), json!({"topK": 3}));
        let request = ModelRequest { model_defaults: Some(whole), ..ModelRequest::default() };
        assert_eq!(body_of("gemini-2.0-flash", &request)["generationConfig"], json!({"topK": 3}));
    }

    fn body_of(model: &str, request: &ModelRequest) -> Map<String, Value> {
        body(&google(model), request).expect("body")
    }

    #[test]
    fn a_schema_gemini_cannot_take_is_refused_with_the_tool_named() {
        let request = ModelRequest {
            tools: vec![ToolSpec {
                name: "lookup".into(),
                description: "Look up.".into(),
                parameters: json!({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}})
                    .into(),
            }],
            ..ModelRequest::default()
        };
        let error = body(&google("gemini-2.5-flash"), &request).expect_err("refused");
        assert_eq!(error.kind, ModelErrorKind::Unsupported);
        assert!(error.message.contains("Tool lookup"), "{}", error.message);
    }
}
