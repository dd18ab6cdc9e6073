//! Reading a Responses stream: named SSE events whose data carries the same `type`.
//!
//! - `response.output_item.added` starts an output item at its `output_index`: a `function_call`
//!   starts a tool call whose id is the composite `call_id|item_id` (the id stored in the log,
//!   so the next request can name both halves), a `reasoning` item starts a block to hand back;
//! - `response.output_text.delta` (and `response.refusal.delta`, which is said to the user too)
//!   is answer text, `response.reasoning_summary_text.delta` (and `response.reasoning_text.delta`)
//!   reasoning text, `response.function_call_arguments.delta` argument text;
//! - `response.function_call_arguments.done` and `response.output_item.done` carry each item
//!   whole: they fill in what no delta brought, and finish a reasoning item with its
//!   `encrypted_content` (one without any cannot be handed back and is dropped);
//! - `response.completed` ends the answer (usage: `input_tokens` with the cached part in
//!   `input_tokens_details.cached_tokens`, `output_tokens` reasoning included);
//!   `response.incomplete` ends it cut by the output limit (a `length` stop) or by the content
//!   filter (a failure); `response.failed` and `error` fail the step. A stream that ends before
//!   any of these was cut.
//!
//! Everything else (`response.created`, `response.in_progress`, content and summary part
//! boundaries, hosted tools) carries nothing for us.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::model::assemble::StepBuilder;
use crate::model::sse::Flow;
use crate::model::{EncryptedReasoning, ModelError, Step, StepEvents, StopReason, Thinking, Usage};

/// The state of one Responses stream.
#[derive(Debug, Default)]
pub(crate) struct ResponsesStream {
    step: StepBuilder,
    /// Output index of each item by its id (deltas name both; a host may leave out the index).
    slots: HashMap<String, u64>,
    /// Reasoning items in the order they started.
    reasoning: Vec<ReasoningItem>,
    /// Output items that streamed text or argument deltas (their `done` adds nothing).
    streamed: HashSet<u64>,
    /// Function-call items already started as calls.
    calls: HashSet<u64>,
    end: Option<End>,
}

/// A reasoning item whose summary is still streaming.
#[derive(Debug)]
struct ReasoningItem {
    slot: u64,
    id: String,
    summary: Vec<String>,
    /// Set by `output_item.done`; without it the item cannot be handed back.
    encrypted_content: Option<String>,
}

/// How the response ended.
#[derive(Debug)]
enum End {
    Completed,
    /// `response.incomplete`, with `incomplete_details.reason`.
    Incomplete(Option<String>),
}

impl ResponsesStream {
    /// Takes one SSE event.
    pub(crate) fn event(&mut self, name: &str, data: &str, events: &mut StepEvents<'_>) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|error| ModelError::stream(format!("Provider sent invalid stream data: {error}")))?;
        let kind = event.get("type").and_then(Value::as_str).unwrap_or(name);
        let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or("");
        match kind {
            "response.output_item.added" => {
                if let Some(item) = event.get("item") {
                    let slot = self.slot_of(&event, item.get("id").and_then(Value::as_str));
                    self.item_added(slot, item, events);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let slot = self.slot_of(&event, event.get("item_id").and_then(Value::as_str));
                self.streamed.insert(slot);
                self.step.text(text("delta"), events);
            }
            "response.reasoning_summary_text.delta" => {
                let slot = self.slot_of(&event, event.get("item_id").and_then(Value::as_str));
                let part = event.get("summary_index").and_then(Value::as_u64).unwrap_or(0);
                self.summary_delta(slot, part, text("delta"), events);
            }
            "response.reasoning_text.delta" => StepBuilder::reasoning(text("delta"), events),
            "response.function_call_arguments.delta" => {
                let slot = self.slot_of(&event, event.get("item_id").and_then(Value::as_str));
                self.streamed.insert(slot);
                self.step.call_arguments(slot, text("delta"));
            }
            "response.function_call_arguments.done" => {
                let slot = self.slot_of(&event, event.get("item_id").and_then(Value::as_str));
                if self.streamed.insert(slot) {
                    self.step.call_arguments(slot, text("arguments"));
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.get("item") {
                    let slot = self.slot_of(&event, item.get("id").and_then(Value::as_str));
                    self.item_done(slot, item, events);
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = event.get("response");
                if let Some(usage) = response.and_then(|response| response.get("usage")).filter(|u| u.is_object()) {
                    self.step.usage = usage_of(usage);
                }
                self.end = Some(if kind == "response.completed" {
                    End::Completed
                } else {
                    let reason = response
                        .and_then(|response| response.get("incomplete_details"))
                        .and_then(|details| details.get("reason"))
                        .and_then(Value::as_str);
                    End::Incomplete(reason.map(str::to_owned))
                });
                return Ok(Flow::Done);
            }
            "response.failed" => {
                let error = event.get("response").and_then(|response| response.get("error"));
                return Err(ModelError::stream(error_message(error, "Provider response failed")));
            }
            "error" => {
                // The error's fields sit at the top level; some hosts nest them under `error`.
                let error = event.get("error").filter(|error| error.is_object()).unwrap_or(&event);
                return Err(ModelError::stream(error_message(Some(error), "Provider stream error")));
            }
            _ => {}
        }
        Ok(Flow::More)
    }

    /// The item's output index: the event's `output_index`, else the one its item id started at,
    /// else a fresh one past every index seen.
    fn slot_of(&mut self, event: &Value, item_id: Option<&str>) -> u64 {
        if let Some(index) = event.get("output_index").and_then(Value::as_u64) {
            if let Some(id) = item_id.filter(|id| !id.is_empty()) {
                self.slots.entry(id.to_owned()).or_insert(index);
            }
            return index;
        }
        let known = item_id.and_then(|id| self.slots.get(id)).copied();
        known.unwrap_or_else(|| {
            let next = self.slots.values().max().map_or(0, |max| max + 1);
            if let Some(id) = item_id.filter(|id| !id.is_empty()) {
                self.slots.insert(id.to_owned(), next);
            }
            next
        })
    }

    fn item_added(&mut self, slot: u64, item: &Value, events: &mut StepEvents<'_>) {
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                self.start_call(slot, item, events);
                // Arguments already there at the start (a host that streams no deltas).
                if !text("arguments").is_empty() {
                    self.streamed.insert(slot);
                    self.step.call_arguments(slot, text("arguments"));
                }
            }
            Some("reasoning") if !self.reasoning.iter().any(|reasoning| reasoning.slot == slot) => {
                self.reasoning.push(ReasoningItem {
                    slot,
                    id: text("id").to_owned(),
                    summary: Vec::new(),
                    encrypted_content: None,
                });
            }
            // Messages are read through their text deltas; hosted tools carry nothing for us.
            _ => {}
        }
    }

    fn start_call(&mut self, slot: u64, item: &Value, events: &mut StepEvents<'_>) {
        if !self.calls.insert(slot) {
            return;
        }
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
        let id = match (text("call_id"), text("id")) {
            ("", item_id) => item_id.to_owned(),
            (call_id, "") => call_id.to_owned(),
            (call_id, item_id) => format!("{call_id}|{item_id}"),
        };
        self.step.start_call(slot, &id, text("name"), None, events);
    }

    fn summary_delta(&mut self, slot: u64, part: u64, delta: &str, events: &mut StepEvents<'_>) {
        let Some(item) = self.reasoning.iter_mut().rev().find(|item| item.slot == slot) else {
            StepBuilder::reasoning(delta, events);
            return;
        };
        let part = usize::try_from(part).unwrap_or(usize::MAX).min(item.summary.len());
        if part == item.summary.len() {
            // A new part: set apart from the one before in what is shown.
            if part > 0 {
                StepBuilder::reasoning("\n\n", events);
            }
            item.summary.push(String::new());
        }
        item.summary[part].push_str(delta);
        StepBuilder::reasoning(delta, events);
    }

    fn item_done(&mut self, slot: u64, item: &Value, events: &mut StepEvents<'_>) {
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                self.start_call(slot, item, events);
                if self.streamed.insert(slot) {
                    self.step.call_arguments(slot, text("arguments"));
                }
            }
            Some("message") => self.message_done(slot, item, events),
            Some("reasoning") => {
                if !self.reasoning.iter().any(|reasoning| reasoning.slot == slot) {
                    self.item_added(slot, item, events);
                }
                let done: Option<Vec<String>> = item.get("summary").and_then(Value::as_array).map(|parts| {
                    parts.iter().map(|part| part.get("text").and_then(Value::as_str).unwrap_or("").to_owned()).collect()
                });
                if let Some(reasoning) = self.reasoning.iter_mut().rev().find(|reasoning| reasoning.slot == slot) {
                    // The finished item is the one handed back: its summary wins over the deltas.
                    if let Some(summary) = done.filter(|summary| !summary.is_empty()) {
                        reasoning.summary = summary;
                    }
                    if reasoning.id.is_empty() {
                        text("id").clone_into(&mut reasoning.id);
                    }
                    reasoning.encrypted_content =
                        Some(text("encrypted_content").to_owned()).filter(|content| !content.is_empty());
                }
            }
            _ => {}
        }
    }

    /// The text of a finished message whose text never came as deltas.
    fn message_done(&mut self, slot: u64, item: &Value, events: &mut StepEvents<'_>) {
        if !self.streamed.insert(slot) {
            return;
        }
        for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
            let key = if part.get("type").and_then(Value::as_str) == Some("refusal") { "refusal" } else { "text" };
            self.step.text(part.get(key).and_then(Value::as_str).unwrap_or(""), events);
        }
    }

    /// The step, once the response completed (or stopped at the output limit).
    pub(crate) fn finish(self) -> Result<Step, ModelError> {
        let stop = match self.end {
            Some(End::Completed) => StopReason::Stop,
            Some(End::Incomplete(Some(reason))) if reason == "content_filter" => {
                return Err(ModelError::finish_reason(&reason));
            }
            // `max_output_tokens`, or a reason this build does not know: the text so far stands.
            Some(End::Incomplete(_)) => StopReason::Length,
            None => return Err(ModelError::stream("Provider stream ended before the response was complete")),
        };
        let mut step = self.step.finish(stop);
        step.thinking = self
            .reasoning
            .into_iter()
            .filter_map(|item| {
                let encrypted_content = item.encrypted_content?;
                Some(Thinking::Encrypted(EncryptedReasoning { id: item.id, summary: item.summary, encrypted_content }))
            })
            .collect();
        Ok(step)
    }
}

/// An error object's `message`, else its `code`, else its JSON text, else `fallback`.
fn error_message(error: Option<&Value>, fallback: &str) -> String {
    let Some(error) = error.filter(|error| !error.is_null()) else {
        return fallback.to_owned();
    };
    let field = |key: &str| error.get(key).and_then(Value::as_str).filter(|text| !text.is_empty());
    field("message").or_else(|| field("code")).map_or_else(|| error.to_string(), str::to_owned)
}

/// Responses usage: `input_tokens` includes the cached part.
fn usage_of(usage: &Value) -> Usage {
    let field =
        |path: &[&str]| path.iter().try_fold(usage, |value, key| value.get(key)).and_then(Value::as_u64).unwrap_or(0);
    let prompt = field(&["input_tokens"]);
    let cache_read = field(&["input_tokens_details", "cached_tokens"]).min(prompt);
    let input = prompt - cache_read;
    let output = field(&["output_tokens"]);
    Usage { input, output, cache_read, cache_write: 0, total: input + output + cache_read }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::sse::test_support::{decode_every_split, replay};
    use crate::model::{ModelErrorKind, StreamEvent, ToolCall, Wire};

    fn event(data: Value) -> String {
        let name = data["type"].as_str().unwrap_or("unknown").to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    }

    fn completed(usage: Value) -> String {
        event(json!({"type": "response.completed", "sequence_number": 99,
            "response": {"id": "resp_1", "status": "completed", "usage": usage}}))
    }

    /// Reasoning with a two-part summary, text, and two calls whose arguments arrive in
    /// mid-token pieces (the second only in its `done` event).
    fn tool_turn() -> String {
        [
            event(json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}})),
            event(json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "reasoning", "id": "rs_1", "summary": []}})),
            event(json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0,
                "summary_index": 0, "part": {"type": "summary_text", "text": ""}})),
            event(json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
                "summary_index": 0, "delta": "Notes live – in memory"})),
            event(json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
                "summary_index": 1, "delta": "Read them"})),
            event(json!({"type": "response.output_item.done", "output_index": 0,
                "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA==",
                    "summary": [{"type": "summary_text", "text": "Notes live – in memory"},
                                {"type": "summary_text", "text": "Read them"}]}})),
            event(json!({"type": "response.output_item.added", "output_index": 1,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}})),
            event(json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 1,
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})),
            event(json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
                "content_index": 0, "delta": "Let me "})),
            event(json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
                "content_index": 0, "delta": "look ✓"})),
            event(json!({"type": "response.output_item.done", "output_index": 1,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Let me look ✓", "annotations": []}]}})),
            event(json!({"type": "response.output_item.added", "output_index": 2,
                "item": {"type": "function_call", "id": "fc_A", "call_id": "call_A", "name": "read", "arguments": ""}})),
            event(json!({"type": "response.function_call_arguments.delta", "item_id": "fc_A", "output_index": 2,
                "delta": "{\"addr"})),
            event(json!({"type": "response.function_call_arguments.delta", "item_id": "fc_A", "output_index": 2,
                "delta": "ess\":\"~/memory/\"}"})),
            event(json!({"type": "response.function_call_arguments.done", "item_id": "fc_A", "output_index": 2,
                "arguments": "{\"address\":\"~/memory/\"}"})),
            event(json!({"type": "response.output_item.done", "output_index": 2,
                "item": {"type": "function_call", "id": "fc_A", "call_id": "call_A", "name": "read",
                    "arguments": "{\"address\":\"~/memory/\"}", "status": "completed"}})),
            event(json!({"type": "response.output_item.added", "output_index": 3,
                "item": {"type": "function_call", "id": "fc_B", "call_id": "call_B", "name": "status", "arguments": ""}})),
            event(json!({"type": "response.function_call_arguments.done", "item_id": "fc_B", "output_index": 3,
                "arguments": "{\"title\":\"Notes\"}"})),
            completed(json!({"input_tokens": 2100, "input_tokens_details": {"cached_tokens": 1024},
                "output_tokens": 19, "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 2119})),
        ]
        .concat()
    }

    #[tokio::test]
    async fn a_tool_turn_decodes_the_same_however_the_bytes_are_split() {
        let (events, step) = decode_every_split(Wire::OpenAiResponses, &tool_turn()).await;
        assert_eq!(
            events,
            [
                StreamEvent::ReasoningDelta("Notes live – in memory".into()),
                StreamEvent::ReasoningDelta("\n\n".into()),
                StreamEvent::ReasoningDelta("Read them".into()),
                StreamEvent::TextDelta("Let me ".into()),
                StreamEvent::TextDelta("look ✓".into()),
                StreamEvent::ToolCallStarted { id: "call_A|fc_A".into(), name: "read".into() },
                StreamEvent::ToolCallStarted { id: "call_B|fc_B".into(), name: "status".into() },
            ]
        );
        let step = step.expect("a complete step");
        assert_eq!((step.text.as_str(), step.stop), ("Let me look ✓", StopReason::ToolUse));
        assert_eq!(
            step.tool_calls,
            [
                ToolCall { id: "call_A|fc_A".into(), name: "read".into(), arguments: json!({"address": "~/memory/"}) },
                ToolCall { id: "call_B|fc_B".into(), name: "status".into(), arguments: json!({"title": "Notes"}) },
            ]
        );
        assert_eq!(step.usage, Usage { input: 1076, output: 19, cache_read: 1024, cache_write: 0, total: 2119 });
        assert_eq!(
            step.thinking,
            [Thinking::Encrypted(EncryptedReasoning {
                id: "rs_1".into(),
                summary: vec!["Notes live – in memory".into(), "Read them".into()],
                encrypted_content: "gAAAA==".into(),
            })]
        );
    }

    /// Items told only whole (no `added`, no deltas), and reasoning that came back without its
    /// encrypted content (not asked for): the text and call stand, the reasoning is dropped.
    #[tokio::test]
    async fn whole_items_without_deltas() {
        let stream = [
            event(json!({"type": "response.output_item.done", "output_index": 0,
                "item": {"type": "reasoning", "id": "rs_9", "summary": []}})),
            event(json!({"type": "response.output_item.done", "output_index": 1,
                "item": {"type": "message", "id": "msg_9", "content": [
                    {"type": "output_text", "text": "Hi"}, {"type": "refusal", "refusal": " – no."}]}})),
            event(json!({"type": "response.output_item.done", "output_index": 2,
                "item": {"type": "function_call", "id": "fc_9", "call_id": "call_9", "name": "read", "arguments": "{}"}})),
            completed(json!({"input_tokens": 5, "output_tokens": 2})),
        ]
        .concat();
        let (events, step) = replay(Wire::OpenAiResponses, &stream).await;
        assert_eq!(
            events,
            [
                StreamEvent::TextDelta("Hi".into()),
                StreamEvent::TextDelta(" – no.".into()),
                StreamEvent::ToolCallStarted { id: "call_9|fc_9".into(), name: "read".into() },
            ]
        );
        let step = step.expect("complete");
        assert_eq!((step.text.as_str(), step.tool_calls.len(), step.thinking.len()), ("Hi – no.", 1, 0));
        assert_eq!(step.usage, Usage { input: 5, output: 2, cache_read: 0, cache_write: 0, total: 7 });
    }

    fn text_then(end: &str) -> String {
        let delta = event(json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "delta": "partial"}));
        format!("{delta}{end}")
    }

    #[tokio::test]
    async fn stop_reasons() {
        let done = replay(Wire::OpenAiResponses, &text_then(&completed(json!({})))).await.1.expect("completed");
        assert_eq!((done.stop, done.text.as_str()), (StopReason::Stop, "partial"));
        let incomplete = |reason: &str| {
            event(json!({"type": "response.incomplete", "response": {"status": "incomplete",
                "incomplete_details": {"reason": reason}, "usage": {"input_tokens": 3, "output_tokens": 16384}}}))
        };
        let length = replay(Wire::OpenAiResponses, &text_then(&incomplete("max_output_tokens"))).await.1;
        let length = length.expect("the output limit is no error");
        assert_eq!((length.stop, length.text.as_str(), length.usage.output), (StopReason::Length, "partial", 16384));
        let filtered = replay(Wire::OpenAiResponses, &text_then(&incomplete("content_filter"))).await.1;
        let filtered = filtered.expect_err("filtered");
        assert_eq!(
            (filtered.kind, filtered.message.as_str()),
            (ModelErrorKind::FinishReason, "Provider finish_reason: content_filter")
        );
        // Neither completed nor incomplete: the stream broke off.
        let cut = replay(Wire::OpenAiResponses, &text_then("")).await.1.expect_err("cut");
        assert_eq!(
            (cut.kind, cut.message.as_str()),
            (ModelErrorKind::Stream, "Provider stream ended before the response was complete")
        );
    }

    #[tokio::test]
    async fn failures_and_error_events_fail_the_step_with_the_vendors_message() {
        let failed = event(json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": "server_error", "message": "The model had an error"}}}));
        let error = replay(Wire::OpenAiResponses, &text_then(&failed)).await.1.expect_err("failed");
        assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::Stream, "The model had an error"));
        let plain =
            event(json!({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": null}));
        let error = replay(Wire::OpenAiResponses, &plain).await.1.expect_err("error event");
        assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::Stream, "Slow down"));
        let nested = event(json!({"type": "error", "error": {"code": "overloaded"}}));
        assert_eq!(replay(Wire::OpenAiResponses, &nested).await.1.expect_err("nested").message, "overloaded");
        let garbled = replay(Wire::OpenAiResponses, "event: x\ndata: {\"type\":\n\n").await.1.expect_err("garbled");
        assert!(garbled.message.starts_with("Provider sent invalid stream data"), "{}", garbled.message);
    }

    /// A host that leaves out `output_index` still has its deltas joined by item id.
    #[tokio::test]
    async fn items_are_found_by_id_without_an_index() {
        let stream = [
            event(json!({"type": "response.output_item.added",
                "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read"}})),
            event(json!({"type": "response.output_item.added",
                "item": {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "read"}})),
            event(json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{\"a\":1}"})),
            event(json!({"type": "response.function_call_arguments.delta", "item_id": "fc_2", "delta": "{\"b\":2}"})),
            completed(json!({})),
        ]
        .concat();
        let step = replay(Wire::OpenAiResponses, &stream).await.1.expect("complete");
        let calls: Vec<_> = step.tool_calls.iter().map(|call| (call.id.as_str(), &call.arguments)).collect();
        assert_eq!(calls, [("call_1|fc_1", &json!({"a": 1})), ("call_2|fc_2", &json!({"b": 2}))]);
    }
}
