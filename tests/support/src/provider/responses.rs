//! The scripted provider's OpenAI Responses API answers (docs/runtime.md §2.3): named SSE events
//! (`event: <type>` and a `data` object carrying the same `type` and a `sequence_number`) from
//! `response.created` to `response.completed`, or `response.incomplete` for a `length` finish or
//! a vendor reason such as `content_filter`.
//!
//! A script's reasoning becomes a `reasoning` item whose summary streams as
//! `response.reasoning_summary_text.delta`; when the request asked for
//! `include: ["reasoning.encrypted_content"]` its finished item carries
//! [`encrypted`]`(text)`, so a test can tell the item was handed back in the next request. Tool
//! calls are `function_call` items: a script id `call|item` names both halves, a plain id is the
//! `call_id` with the item id `fc_<id>`. Usage reports `input_tokens` with the cache reads
//! included and in `input_tokens_details.cached_tokens` (the API has no cache writes).

use serde_json::{Value, json};

use super::{Reply, argument_pieces, text_pieces};

/// The `encrypted_content` the scripted provider sends for reasoning `text`.
pub fn encrypted(text: &str) -> String {
    format!("gAAAA{}", hex::encode(text))
}

/// The id of the scripted reasoning item of a response (one per response).
pub const REASONING_ITEM_ID: &str = "rs_scripted";

/// Whether a request asked for encrypted reasoning.
pub(super) fn wants_encrypted_reasoning(body: &Value) -> bool {
    body["include"].as_array().is_some_and(|include| include.iter().any(|item| item == "reasoning.encrypted_content"))
}

/// The `call_id` and item id of a scripted call id.
fn call_ids(id: &str) -> (String, String) {
    match id.split_once('|') {
        Some((call_id, item_id)) => (call_id.to_owned(), item_id.to_owned()),
        None => (id.to_owned(), format!("fc_{id}")),
    }
}

pub(super) fn events(reply: &Reply, model: &str, split: bool, encrypted_reasoning: bool) -> Vec<String> {
    let mut sequence = 0;
    let mut event = |mut data: Value| {
        data["sequence_number"] = sequence.into();
        sequence += 1;
        let name = data["type"].as_str().unwrap_or("unknown").to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    };
    let response = |status: &str| {
        json!({"id": "resp_scripted", "object": "response", "created_at": 1_700_000_000, "status": status,
            "model": model, "output": []})
    };
    let mut events = vec![
        event(json!({"type": "response.created", "response": response("in_progress")})),
        event(json!({"type": "response.in_progress", "response": response("in_progress")})),
    ];
    let mut index = 0;
    if let Some(reasoning) = &reply.reasoning {
        let id = REASONING_ITEM_ID;
        events.push(event(json!({"type": "response.output_item.added", "output_index": index,
            "item": {"type": "reasoning", "id": id, "summary": []}})));
        events.push(event(json!({"type": "response.reasoning_summary_part.added", "item_id": id,
            "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}})));
        for piece in text_pieces(reasoning, split) {
            events.push(event(json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
                "output_index": index, "summary_index": 0, "delta": piece})));
        }
        events.push(event(json!({"type": "response.reasoning_summary_text.done", "item_id": id,
            "output_index": index, "summary_index": 0, "text": reasoning})));
        events.push(event(json!({"type": "response.reasoning_summary_part.done", "item_id": id,
            "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": reasoning}})));
        let mut item = json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": reasoning}]});
        if encrypted_reasoning {
            item["encrypted_content"] = encrypted(reasoning).into();
        }
        events.push(event(json!({"type": "response.output_item.done", "output_index": index, "item": item})));
        index += 1;
    }
    if let Some(text) = &reply.text {
        let id = "msg_scripted";
        events.push(event(json!({"type": "response.output_item.added", "output_index": index,
            "item": {"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}})));
        events.push(event(json!({"type": "response.content_part.added", "item_id": id, "output_index": index,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
        for piece in text_pieces(text, split) {
            events.push(event(json!({"type": "response.output_text.delta", "item_id": id, "output_index": index,
                "content_index": 0, "delta": piece, "logprobs": []})));
        }
        events.push(event(json!({"type": "response.output_text.done", "item_id": id, "output_index": index,
            "content_index": 0, "text": text, "logprobs": []})));
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        events.push(event(json!({"type": "response.content_part.done", "item_id": id, "output_index": index,
            "content_index": 0, "part": part})));
        events.push(event(json!({"type": "response.output_item.done", "output_index": index,
            "item": {"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [part]}})));
        index += 1;
    }
    for (id, name, arguments) in &reply.calls {
        let (call_id, item_id) = call_ids(id);
        let item = |arguments: &str, status: &str| {
            json!({"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": status})
        };
        events.push(event(json!({"type": "response.output_item.added", "output_index": index,
            "item": item("", "in_progress")})));
        for piece in argument_pieces(arguments, split) {
            events.push(event(json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                "output_index": index, "delta": piece})));
        }
        events.push(event(json!({"type": "response.function_call_arguments.done", "item_id": item_id,
            "output_index": index, "arguments": arguments})));
        events.push(event(json!({"type": "response.output_item.done", "output_index": index,
            "item": item(arguments, "completed")})));
        index += 1;
    }
    let (input, output, cache_read, _) = reply.usage;
    let usage = json!({"input_tokens": input + cache_read, "input_tokens_details": {"cached_tokens": cache_read},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + cache_read + output});
    let end = match reply.finish.as_deref() {
        None | Some("stop" | "tool_use") => {
            let mut done = response("completed");
            done["usage"] = usage;
            json!({"type": "response.completed", "response": done})
        }
        Some(reason) => {
            let reason = if reason == "length" { "max_output_tokens" } else { reason };
            let mut cut = response("incomplete");
            cut["usage"] = usage;
            cut["incomplete_details"] = json!({"reason": reason});
            json!({"type": "response.incomplete", "response": cut})
        }
    };
    events.push(event(end));
    events
}

/// The text of the last user message of a Responses body's `input`.
pub(super) fn last_user_text(body: &Value) -> String {
    let last = body["input"].as_array().and_then(|items| {
        items.iter().rev().find(|item| {
            item["role"] == "user"
                && item["content"].as_array().is_some_and(|parts| parts.iter().any(|part| part["type"] == "input_text"))
        })
    });
    let parts = last.and_then(|item| item["content"].as_array());
    parts.into_iter().flatten().filter_map(|part| part["text"].as_str()).collect::<Vec<_>>().join("")
}
