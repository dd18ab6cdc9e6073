//! Reading a chat completions stream: `data: {chunk}` events until `data: [DONE]`.
//!
//! Chunks are read as loose JSON, so a host's extra or oddly typed fields never break a turn:
//! text is `choices[0].delta.content`, reasoning the first non-empty of `reasoning_content`,
//! `reasoning` and `reasoning_text`, tool calls `delta.tool_calls` fragments, the stop reason
//! `finish_reason`, and usage the top-level `usage` (sent last because of `include_usage`) or,
//! failing that, `choices[0].usage`.

use serde_json::Value;

use crate::model::assemble::{CallFragment, StepBuilder};
use crate::model::sse::Flow;
use crate::model::{ModelError, Step, StepEvents, StopReason, Usage};

/// The state of one chat completions stream.
#[derive(Debug, Default)]
pub(crate) struct ChatStream {
    step: StepBuilder,
    finish_reason: Option<String>,
    done: bool,
}

impl ChatStream {
    /// Takes one SSE event's data.
    pub(crate) fn data(&mut self, data: &str, events: &mut StepEvents<'_>) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::More);
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(Flow::Done);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|error| ModelError::stream(format!("Provider sent invalid stream data: {error}")))?;
        if let Some(error) = chunk.get("error").filter(|error| !error.is_null()) {
            return Err(ModelError::stream(stream_error_message(error)));
        }
        let choice = chunk.get("choices").and_then(|choices| choices.get(0));
        if let Some(choice) = choice {
            self.choice(choice, events);
        }
        let usage = chunk.get("usage").filter(|usage| usage.is_object());
        if let Some(usage) = usage.or_else(|| choice.and_then(|choice| choice.get("usage")).filter(|u| u.is_object())) {
            self.step.usage = usage_of(usage);
        }
        Ok(Flow::More)
    }

    fn choice(&mut self, choice: &Value, events: &mut StepEvents<'_>) {
        if let Some(delta) = choice.get("delta") {
            let reasoning = ["reasoning_content", "reasoning", "reasoning_text"]
                .iter()
                .filter_map(|key| delta.get(key).and_then(Value::as_str))
                .find(|text| !text.is_empty());
            if let Some(reasoning) = reasoning {
                StepBuilder::reasoning(reasoning, events);
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.step.text(text, events);
            }
            for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let function = call.get("function");
                let fragment = CallFragment {
                    slot: call.get("index").and_then(Value::as_u64),
                    id: call.get("id").and_then(Value::as_str),
                    name: function.and_then(|f| f.get("name")).and_then(Value::as_str),
                    arguments: function.and_then(|f| f.get("arguments")).and_then(Value::as_str),
                };
                self.step.call_fragment(&fragment, events);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
    }

    /// The step, once the stream has ended: it must have said why it stopped or sent `[DONE]`.
    pub(crate) fn finish(self) -> Result<Step, ModelError> {
        let stop = match self.finish_reason.as_deref() {
            Some("stop" | "end") => StopReason::Stop,
            Some("length") => StopReason::Length,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some(other) => return Err(ModelError::finish_reason(other)),
            None if self.done => StopReason::Stop,
            None => return Err(ModelError::stream("Provider stream ended before the response was complete")),
        };
        Ok(self.step.finish(stop))
    }
}

/// An error object a host sent inside the stream: its `message`, else its JSON text.
fn stream_error_message(error: &Value) -> String {
    match error.get("message").and_then(Value::as_str) {
        Some(message) => message.to_owned(),
        None => error.as_str().map_or_else(|| error.to_string(), str::to_owned),
    }
}

/// OpenAI usage: cached prompt tokens are reads (less any writes a host reports among them),
/// and input is what remains of the prompt.
fn usage_of(usage: &Value) -> Usage {
    let number = |value: Option<&Value>| value.and_then(Value::as_u64).unwrap_or(0);
    let details = usage.get("prompt_tokens_details");
    let cached = number(details.and_then(|d| d.get("cached_tokens")));
    let cache_write = number(details.and_then(|d| d.get("cache_write_tokens")));
    let cache_read = cached.saturating_sub(cache_write);
    let input = number(usage.get("prompt_tokens")).saturating_sub(cache_read).saturating_sub(cache_write);
    let output = number(usage.get("completion_tokens"));
    Usage { input, output, cache_read, cache_write, total: input + output + cache_read + cache_write }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::sse::test_support::{decode_every_split, replay};
    use crate::model::{ModelErrorKind, StreamEvent, ToolCall, Wire};

    /// The §2.2 example plus text, reasoning and a second call split mid-token.
    const TOOL_TURN: &str = concat!(
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null},\"finish_reason\":null}],\"usage\":null}\n\n",
        ": keep-alive comment\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Hmm, é\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me \"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"look ✓\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_A\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"addr\"}}]}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ess\\\":\\\"~/memory/\\\"}\"}}]}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_B\",\"type\":\"function\",\"function\":{\"name\":\"status\",\"arguments\":\"{\\\"title\\\":\"}}]}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\\\"Notes\\\"}\"}}]}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":2100,\"completion_tokens\":19,\"total_tokens\":2119,\"prompt_tokens_details\":{\"cached_tokens\":1024}}}\n\n",
        "data: [DONE]\n\n",
    );

    #[tokio::test]
    async fn a_tool_turn_decodes_the_same_however_the_bytes_are_split() {
        let (events, step) = decode_every_split(Wire::OpenAiChat, TOOL_TURN).await;
        assert_eq!(
            events,
            [
                StreamEvent::ReasoningDelta("Hmm, é".into()),
                StreamEvent::TextDelta("Let me ".into()),
                StreamEvent::TextDelta("look ✓".into()),
                StreamEvent::ToolCallStarted { id: "call_A".into(), name: "read".into() },
                StreamEvent::ToolCallStarted { id: "call_B".into(), name: "status".into() },
            ]
        );
        let step = step.expect("a complete step");
        assert_eq!(step.text, "Let me look ✓");
        assert_eq!(step.stop, StopReason::ToolUse);
        assert_eq!(
            step.tool_calls,
            [
                ToolCall { id: "call_A".into(), name: "read".into(), arguments: json!({"address": "~/memory/"}) },
                ToolCall { id: "call_B".into(), name: "status".into(), arguments: json!({"title": "Notes"}) },
            ]
        );
        assert_eq!(step.usage, Usage { input: 1076, output: 19, cache_read: 1024, cache_write: 0, total: 2119 });
    }

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        let body = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null});
        format!("data: {body}\n\n")
    }

    #[tokio::test]
    async fn stop_reasons() {
        let text = chunk(json!({"content": "partial"}), None);
        let ended = |finish: &str| format!("{text}{}data: [DONE]\n\n", chunk(json!({}), Some(finish)));
        let length = replay(Wire::OpenAiChat, &ended("length")).await.1.expect("length is not an error");
        assert_eq!((length.stop, length.text.as_str()), (StopReason::Length, "partial"));
        assert_eq!(replay(Wire::OpenAiChat, &ended("stop")).await.1.expect("stop").stop, StopReason::Stop);
        let filtered = replay(Wire::OpenAiChat, &ended("content_filter")).await.1.expect_err("filtered");
        assert_eq!(filtered.kind, ModelErrorKind::FinishReason);
        assert_eq!(filtered.message, "Provider finish_reason: content_filter");
        // [DONE] without a finish_reason: a plain stop.
        let done = replay(Wire::OpenAiChat, &format!("{text}data: [DONE]\n\n")).await.1.expect("done");
        assert_eq!(done.stop, StopReason::Stop);
        // Neither: the stream broke off.
        let cut = replay(Wire::OpenAiChat, &text).await.1.expect_err("cut");
        assert_eq!(cut.kind, ModelErrorKind::Stream);
    }

    #[tokio::test]
    async fn bad_data_and_in_stream_errors_are_stream_errors() {
        let garbled = replay(Wire::OpenAiChat, "data: {\"choices\":\n\n").await.1.expect_err("garbled");
        assert_eq!(garbled.kind, ModelErrorKind::Stream);
        assert!(garbled.message.starts_with("Provider sent invalid stream data"), "{}", garbled.message);
        let error = "data: {\"error\":{\"message\":\"Upstream overloaded\",\"code\":502}}\n\n";
        let error = replay(Wire::OpenAiChat, error).await.1.expect_err("error chunk");
        assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::Stream, "Upstream overloaded"));
    }

    #[test]
    fn usage_with_cache_writes() {
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 20}});
        assert_eq!(usage_of(&usage), Usage { input: 40, output: 5, cache_read: 40, cache_write: 20, total: 105 });
    }
}
