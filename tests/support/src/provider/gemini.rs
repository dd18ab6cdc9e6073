//! The scripted provider's Gemini side (docs/runtime.md §2.5): `POST
//! /v1beta/models/<model>:streamGenerateContent?alt=sse`, answered as Gemini streams it.
//!
//! Each SSE event is one `GenerateContentResponse` chunk, lines ending in CRLF as Gemini's do:
//! reasoning as `thought` text parts, answer text as text parts, each tool call as one whole
//! `functionCall` part without an id (Gemini names no calls), and the last chunk carrying the
//! `finishReason` (`STOP` after tool calls too) with `usageMetadata`. Like Gemini 2.5 and 3, it
//! signs the first call of each step with a `thoughtSignature` (`sig:<scripted call id>` in
//! base64, so a test can tell which signature went back where) and, when the script reasons, the
//! last text part of a step without calls.
//!
//! Like Gemini 3, it refuses (400, consuming no script) a request to a `gemini-3…` model whose
//! model turns call tools without a signature on the first call, and any request without
//! `alt=sse`. Errors have Gemini's body, `{"error": {"code", "message", "status"}}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use base64::Engine as _;
use serde_json::{Value, json};

use super::{Reply, Shared, Vendor, answer, finish_reason, text_pieces};

/// The route's handler.
pub(super) async fn generate(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(&state, Vendor::Google, uri, headers, &body)
}

/// The model named in the path (`/v1beta/models/<model>:streamGenerateContent`).
pub(super) fn model_of(uri: &Uri) -> String {
    let path = uri.path();
    let resource = path.split_once("/models/").map_or(path, |(_, rest)| rest);
    resource.split(':').next().unwrap_or(resource).to_owned()
}

/// Why Gemini would refuse this request before answering, if it would.
pub(super) fn refusal(uri: &Uri, model: &str, body: &Value) -> Option<String> {
    if uri.query() != Some("alt=sse") || !uri.path().ends_with(":streamGenerateContent") {
        return Some(format!("scripted Gemini speaks only streamGenerateContent?alt=sse, not {uri}"));
    }
    if !model.starts_with("gemini-3") {
        return None;
    }
    let contents = body["contents"].as_array()?;
    contents.iter().enumerate().find_map(|(index, content)| {
        let first_call = content["parts"].as_array()?.iter().find(|part| part.get("functionCall").is_some())?;
        let signed = first_call["thoughtSignature"].as_str().is_some_and(|signature| !signature.is_empty());
        (content["role"] == "model" && !signed).then(|| {
            format!(
                "Function call is missing a thought_signature in functionCall parts. Additional data, function \
                 call `default_api:{}`, position {}.",
                first_call["functionCall"]["name"].as_str().unwrap_or_default(),
                index + 1
            )
        })
    })
}

/// Gemini's error body.
pub(super) fn error_body(status: u16, message: &str) -> String {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        500 => "INTERNAL",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    };
    json!({"error": {"code": status, "message": message, "status": name}}).to_string()
}

/// The signature the scripted Gemini puts on a part (`sig:<name>` in base64).
pub fn signature(name: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("sig:{name}"))
}

/// The text of the last user content that holds text (function responses are user contents too).
pub(super) fn last_user_text(body: &Value) -> String {
    let contents = body["contents"].as_array().map(Vec::as_slice).unwrap_or_default();
    contents
        .iter()
        .rev()
        .filter(|content| content["role"] == "user")
        .find_map(|content| {
            let parts = content["parts"].as_array()?;
            let texts: Vec<&str> = parts.iter().filter_map(|part| part["text"].as_str()).collect();
            (!texts.is_empty()).then(|| texts.concat())
        })
        .unwrap_or_default()
}

/// The streamed chunks of a reply.
pub(super) fn events(reply: &Reply, model: &str, split: bool) -> Vec<String> {
    let mut chunks: Vec<Vec<Value>> = Vec::new();
    for piece in reply.reasoning.iter().flat_map(|text| text_pieces(text, split)) {
        chunks.push(vec![json!({"text": piece, "thought": true})]);
    }
    for piece in reply.text.iter().flat_map(|text| text_pieces(text, split)) {
        chunks.push(vec![json!({"text": piece})]);
    }
    if reply.calls.is_empty() {
        if reply.reasoning.is_some()
            && let Some(last) = chunks.last_mut().and_then(|parts| parts.last_mut())
            && last.get("thought").is_none()
        {
            last["thoughtSignature"] = signature("text").into();
        }
    } else {
        // All calls of a step in one chunk, as Gemini sends them; only the first is signed.
        let calls = reply
            .calls
            .iter()
            .enumerate()
            .map(|(index, (id, name, arguments))| {
                let args: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
                let mut part = json!({"functionCall": {"name": name, "args": args}});
                if index == 0 {
                    part["thoughtSignature"] = signature(id).into();
                }
                part
            })
            .collect();
        chunks.push(calls);
    }
    if chunks.is_empty() {
        chunks.push(vec![json!({"text": ""})]);
    }
    let finish = finish_reason(reply, Vendor::Google);
    let (input, output, cache_read, _) = reply.usage;
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(index, parts)| {
            let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
            let mut chunk = json!({"modelVersion": model, "responseId": "scripted"});
            if index == last {
                candidate["finishReason"] = finish.clone().into();
                let prompt = input + cache_read;
                chunk["usageMetadata"] = json!({"promptTokenCount": prompt, "cachedContentTokenCount": cache_read,
                    "candidatesTokenCount": output, "totalTokenCount": prompt + output});
            } else {
                chunk["usageMetadata"] =
                    json!({"promptTokenCount": input + cache_read, "totalTokenCount": input + cache_read});
            }
            chunk["candidates"] = json!([candidate]);
            format!("data: {chunk}\r\n\r\n")
        })
        .collect()
}
