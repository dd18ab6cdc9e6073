//! Reading a Messages stream: `message_start`, content blocks (`text`, `thinking`,
//! `redacted_thinking`, `tool_use`) with their deltas (signed thinking is kept whole in the step,
//! to be handed back within the pass), `message_delta` (stop reason and output
//! usage), `message_stop`; `ping` is ignored and `error` fails the step. Events are told apart
//! by their data's `type` (the SSE event name when it has none).

use serde_json::Value;

use crate::model::assemble::StepBuilder;
use crate::model::sse::Flow;
use crate::model::{ModelError, Step, StepEvents, StopReason};

/// The state of one Messages stream.
#[derive(Debug, Default)]
pub(crate) struct MessagesStream {
    step: StepBuilder,
    stop_reason: Option<String>,
    stopped: bool,
}

impl MessagesStream {
    /// Takes one SSE event.
    pub(crate) fn event(&mut self, name: &str, data: &str, events: &mut StepEvents<'_>) -> Result<Flow, ModelError> {
        if data.trim().is_empty() {
            return Ok(Flow::More);
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|error| ModelError::stream(format!("Provider sent invalid stream data: {error}")))?;
        let kind = event.get("type").and_then(Value::as_str).unwrap_or(name);
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(usage) = event.get("message").and_then(|message| message.get("usage")) {
                    self.usage(usage);
                }
            }
            "content_block_start" => self.block_start(index, event.get("content_block"), events),
            "content_block_delta" => self.block_delta(index, event.get("delta"), events),
            "message_delta" => {
                if let Some(reason) = event.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = event.get("usage") {
                    self.usage(usage);
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
            }
            "error" => {
                let error = event.get("error");
                let message = error
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .map_or_else(|| error.map_or_else(|| event.to_string(), Value::to_string), str::to_owned);
                return Err(ModelError::stream(message));
            }
            // ping, content_block_stop and anything newer.
            _ => {}
        }
        Ok(Flow::More)
    }

    fn block_start(&mut self, index: u64, block: Option<&Value>, events: &mut StepEvents<'_>) {
        let Some(block) = block else {
            return;
        };
        let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => self.step.text(text("text"), events),
            Some("thinking") => self.step.start_thinking(index, text("thinking"), text("signature"), events),
            Some("redacted_thinking") => self.step.redacted_thinking(index, text("data")),
            Some("tool_use") => {
                let input = block.get("input").filter(|input| input.is_object()).cloned();
                self.step.start_call(index, text("id"), text("name"), input, events);
            }
            // Server-side tool blocks carry nothing for us.
            _ => {}
        }
    }

    fn block_delta(&mut self, index: u64, delta: Option<&Value>, events: &mut StepEvents<'_>) {
        let Some(delta) = delta else {
            return;
        };
        let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("");
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => self.step.text(text("text"), events),
            Some("thinking_delta") => self.step.thinking_text(index, text("thinking"), events),
            Some("signature_delta") => self.step.thinking_signature(index, text("signature")),
            Some("input_json_delta") => self.step.call_arguments(index, text("partial_json")),
            // citations_delta: nothing to surface.
            _ => {}
        }
    }

    /// Anthropic usage: every count it sends replaces ours (`message_delta` may update the input
    /// and cache counts of `message_start`).
    fn usage(&mut self, usage: &Value) {
        let usage_field = |key: &str| usage.get(key).and_then(Value::as_u64);
        let counts = &mut self.step.usage;
        for (key, slot) in [
            ("input_tokens", &mut counts.input),
            ("output_tokens", &mut counts.output),
            ("cache_read_input_tokens", &mut counts.cache_read),
            ("cache_creation_input_tokens", &mut counts.cache_write),
        ] {
            if let Some(value) = usage_field(key) {
                *slot = value;
            }
        }
        counts.total = counts.input + counts.output + counts.cache_read + counts.cache_write;
    }

    /// The step, once `message_stop` arrived.
    pub(crate) fn finish(self) -> Result<Step, ModelError> {
        if !self.stopped {
            return Err(ModelError::stream("Provider stream ended before the response was complete"));
        }
        let stop = match self.stop_reason.as_deref() {
            None | Some("end_turn" | "stop_sequence" | "pause_turn") => StopReason::Stop,
            Some("max_tokens" | "model_context_window_exceeded") => StopReason::Length,
            Some("tool_use") => StopReason::ToolUse,
            Some(other) => return Err(ModelError::finish_reason(other)),
        };
        Ok(self.step.finish(stop))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::sse::test_support::{decode_every_split, replay};
    use crate::model::{ModelErrorKind, StreamEvent, Thinking, ToolCall, Usage, Wire};

    /// Thinking, text and a tool call whose JSON arrives in mid-token pieces.
    const TOOL_TURN: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":1800,\"output_tokens\":1,\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":1700}}}\n\n",
        "event: ping\n",
        "data: {\"type\":\"ping\"}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Look in memory – first\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2ln\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Checking ✓\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"addr\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ess\\\": \\\"~/memory/\\\"}\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":22}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    #[tokio::test]
    async fn a_tool_turn_decodes_the_same_however_the_bytes_are_split() {
        let (events, step) = decode_every_split(Wire::Anthropic, TOOL_TURN).await;
        assert_eq!(
            events,
            [
                StreamEvent::ReasoningDelta("Look in memory – first".into()),
                StreamEvent::TextDelta("Checking ✓".into()),
                StreamEvent::ToolCallStarted { id: "toolu_1".into(), name: "read".into() },
            ]
        );
        let step = step.expect("a complete step");
        assert_eq!(step.text, "Checking ✓");
        assert_eq!(step.stop, StopReason::ToolUse);
        assert_eq!(
            step.tool_calls,
            [ToolCall { id: "toolu_1".into(), name: "read".into(), arguments: json!({"address": "~/memory/"}) }]
        );
        assert_eq!(step.usage, Usage { input: 1800, output: 22, cache_read: 0, cache_write: 1700, total: 3522 });
        assert_eq!(
            step.thinking,
            [Thinking::Signed { text: "Look in memory – first".into(), signature: "c2ln".into() }],
            "the signed block is kept whole, to hand back within the pass"
        );
    }

    /// Redacted blocks are kept as sent; a thinking block that never got its signature cannot be
    /// handed back and is dropped.
    #[tokio::test]
    async fn reasoning_blocks_are_kept_only_when_they_can_be_handed_back() {
        let stream = concat!(
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"ZW5j\"}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"Half\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\" a thought\"}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"Hi\"}}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        let (events, step) = replay(Wire::Anthropic, stream).await;
        assert_eq!(
            events,
            [
                StreamEvent::ReasoningDelta("Half".into()),
                StreamEvent::ReasoningDelta(" a thought".into()),
                StreamEvent::TextDelta("Hi".into())
            ]
        );
        assert_eq!(step.unwrap().thinking, [Thinking::Redacted { data: "ZW5j".into() }]);
    }

    fn turn(stop_reason: &str, stop: bool) -> String {
        let mut text = String::from(concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"Hi\"}}\n\n",
        ));
        text.push_str(&format!(
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop_reason}\"}},\"usage\":{{\"output_tokens\":3}}}}\n\n"
        ));
        if stop {
            text.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        }
        text
    }

    #[tokio::test]
    async fn stop_reasons() {
        let step = replay(Wire::Anthropic, &turn("end_turn", true)).await.1.expect("complete");
        assert_eq!((step.stop, step.text.as_str()), (StopReason::Stop, "Hi"));
        assert_eq!(step.usage.total, 8);
        let length = replay(Wire::Anthropic, &turn("max_tokens", true)).await.1.expect("length is no error");
        assert_eq!(length.stop, StopReason::Length);
        let refused = replay(Wire::Anthropic, &turn("refusal", true)).await.1.expect_err("refusal");
        assert_eq!(
            (refused.kind, refused.message.as_str()),
            (ModelErrorKind::FinishReason, "Provider finish_reason: refusal")
        );
        let cut = replay(Wire::Anthropic, &turn("end_turn", false)).await.1.expect_err("no message_stop");
        assert_eq!(cut.kind, ModelErrorKind::Stream);
    }

    #[tokio::test]
    async fn error_events_fail_the_step() {
        let text = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let error = replay(Wire::Anthropic, text).await.1.expect_err("error event");
        assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::Stream, "Overloaded"));
    }
}
