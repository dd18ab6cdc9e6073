//! Reading a `streamGenerateContent?alt=sse` stream: each `data:` event is one
//! `GenerateContentResponse` chunk, and the stream ends when the body does (Gemini sends no end
//! marker), after a chunk whose candidate carries its `finishReason`.
//!
//! Chunks are read as loose JSON. Of `candidates[0].content.parts[]`: a text part marked
//! `thought` is reasoning (a thought summary), any other text part answer text, a `functionCall`
//! part a whole tool call (name and arguments object at once). A part's `thoughtSignature` is kept
//! for the part it came on (a thought block, the answer text or that call), to go back within the
//! pass. `usageMetadata` (the latest wins) gives the usage; an `error` object or a prompt blocked
//! by `promptFeedback` fails the step.

use serde_json::Value;

use crate::model::assemble::StepBuilder;
use crate::model::sse::Flow;
use crate::model::{ModelError, ModelErrorKind, Step, StepEvents, StopReason, Thinking, Usage, ids};

/// The state of one Gemini stream.
#[derive(Debug, Default)]
pub(crate) struct GenerateStream {
    step: StepBuilder,
    /// Thought blocks as (text, signature), the one still streaming last.
    thoughts: Vec<(String, String)>,
    /// Whether the latest part was a thought, so the next thought continues its block.
    in_thought: bool,
    /// The signature on the answer text (the latest non-empty one).
    text_signature: Option<String>,
    /// Signatures on calls, by call id.
    call_signatures: Vec<(String, String)>,
    /// The ids given to this step's calls, in order.
    call_ids: Vec<String>,
    finish_reason: Option<String>,
}

impl GenerateStream {
    /// Takes one SSE event's data.
    pub(crate) fn data(&mut self, data: &str, events: &mut StepEvents<'_>) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|error| ModelError::stream(format!("Provider sent invalid stream data: {error}")))?;
        if let Some(error) = chunk.get("error").filter(|error| !error.is_null()) {
            let message = error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_owned);
            return Err(ModelError::stream(message));
        }
        let candidate = chunk.get("candidates").and_then(|candidates| candidates.get(0));
        if candidate.is_none()
            && let Some(reason) =
                chunk.get("promptFeedback").and_then(|feedback| feedback.get("blockReason")).and_then(Value::as_str)
        {
            return Err(ModelError::new(
                ModelErrorKind::FinishReason,
                format!("Provider blocked the prompt: {reason}"),
            ));
        }
        if let Some(candidate) = candidate {
            let parts = candidate.get("content").and_then(|content| content.get("parts")).and_then(Value::as_array);
            for part in parts.into_iter().flatten() {
                self.part(part, events);
            }
            if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        if let Some(usage) = chunk.get("usageMetadata").filter(|usage| usage.is_object()) {
            self.step.usage = usage_of(usage);
        }
        Ok(Flow::More)
    }

    fn part(&mut self, part: &Value, events: &mut StepEvents<'_>) {
        let signature = part.get("thoughtSignature").and_then(Value::as_str).filter(|signature| !signature.is_empty());
        if let Some(call) = part.get("functionCall") {
            self.in_thought = false;
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let id = ids::google(call.get("id").and_then(Value::as_str), name, &self.call_ids);
            let arguments = call.get("args").filter(|args| !args.is_null()).cloned();
            let slot = self.call_ids.len() as u64;
            self.step.start_call(slot, &id, name, arguments, events);
            if let Some(signature) = signature {
                self.call_signatures.push((id.clone(), signature.to_owned()));
            }
            self.call_ids.push(id);
            return;
        }
        let Some(text) = part.get("text").and_then(Value::as_str) else {
            // Inline data, executable code and other parts carry nothing for us.
            return;
        };
        if part.get("thought").and_then(Value::as_bool) == Some(true) {
            StepBuilder::reasoning(text, events);
            if !self.in_thought {
                self.thoughts.push((String::new(), String::new()));
                self.in_thought = true;
            }
            if let Some((thought, signed)) = self.thoughts.last_mut() {
                thought.push_str(text);
                if let Some(signature) = signature {
                    signature.clone_into(signed);
                }
            }
        } else {
            self.in_thought = false;
            self.step.text(text, events);
            if let Some(signature) = signature {
                self.text_signature = Some(signature.to_owned());
            }
        }
    }

    /// The step, once the body has ended: it must have said why it stopped (a stream that ends
    /// without a finish reason broke off).
    pub(crate) fn finish(self) -> Result<Step, ModelError> {
        let stop = match self.finish_reason.as_deref() {
            // Gemini says STOP after calling tools too; the builder makes it a tool-use stop.
            Some("STOP") => StopReason::Stop,
            Some("MAX_TOKENS") => StopReason::Length,
            Some(other) => return Err(ModelError::finish_reason(other)),
            None => return Err(ModelError::stream("Provider stream ended before the response was complete")),
        };
        let mut step = self.step.finish(stop);
        // Unsigned thought summaries cannot be handed back; they were streamed and are done.
        step.thinking.extend(
            self.thoughts
                .into_iter()
                .filter(|(text, signature)| !text.is_empty() && !signature.is_empty())
                .map(|(text, signature)| Thinking::Signed { text, signature }),
        );
        if let Some(signature) = self.text_signature {
            step.thinking.push(Thinking::PartSignature { call_id: None, signature });
        }
        step.thinking.extend(
            self.call_signatures
                .into_iter()
                .map(|(id, signature)| Thinking::PartSignature { call_id: Some(id), signature }),
        );
        Ok(step)
    }
}

/// Gemini usage: cached prompt tokens apart from fresh input, thoughts counted as output.
fn usage_of(usage: &Value) -> Usage {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let cache_read = count("cachedContentTokenCount");
    let input = count("promptTokenCount").saturating_sub(cache_read);
    let output = count("candidatesTokenCount") + count("thoughtsTokenCount");
    Usage { input, output, cache_read, cache_write: 0, total: input + output + cache_read }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::sse::test_support::{decode_every_split, replay};
    use crate::model::{StreamEvent, ToolCall, Wire};

    /// A thought summary, text, two calls (the first signed, as Gemini signs only the first call
    /// of a step; both with ids, so every replay names them alike), then the finishing chunk with
    /// usage; CRLF line ends, as Gemini sends them.
    const TOOL_TURN: &str = concat!(
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Look in memory – \",\"thought\":true}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":1500,\"totalTokenCount\":1500}}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"first\",\"thought\":true}]},\"index\":0}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Checking ✓\"}]},\"index\":0}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"id\":\"fc_1\",\"name\":\"read\",\"args\":{\"address\":\"~/memory/\"}},\"thoughtSignature\":\"U0lHMQ==\"},{\"functionCall\":{\"id\":\"fc_2\",\"name\":\"status\",\"args\":{\"title\":\"Notes\"}}}]},\"index\":0}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":1500,\"cachedContentTokenCount\":1000,\"candidatesTokenCount\":12,\"thoughtsTokenCount\":30,\"totalTokenCount\":1542},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}\r\n\r\n",
    );

    #[tokio::test]
    async fn a_tool_turn_decodes_the_same_however_the_bytes_are_split() {
        let (events, step) = decode_every_split(Wire::Google, TOOL_TURN).await;
        assert_eq!(
            events,
            [
                StreamEvent::ReasoningDelta("Look in memory – ".into()),
                StreamEvent::ReasoningDelta("first".into()),
                StreamEvent::TextDelta("Checking ✓".into()),
                StreamEvent::ToolCallStarted { id: "fc_1".into(), name: "read".into() },
                StreamEvent::ToolCallStarted { id: "fc_2".into(), name: "status".into() },
            ]
        );
        let step = step.expect("a complete step");
        assert_eq!(step.text, "Checking ✓");
        assert_eq!(step.stop, StopReason::ToolUse, "STOP with calls is a tool-use stop");
        let calls: Vec<(&str, &Value)> =
            step.tool_calls.iter().map(|call| (call.name.as_str(), &call.arguments)).collect();
        assert_eq!(calls, [("read", &json!({"address": "~/memory/"})), ("status", &json!({"title": "Notes"}))]);
        assert_eq!(step.usage, Usage { input: 500, output: 42, cache_read: 1000, cache_write: 0, total: 1542 });
        // Only the first call was signed; the unsigned thought is not kept.
        assert_eq!(
            step.thinking,
            [Thinking::PartSignature { call_id: Some("fc_1".into()), signature: "U0lHMQ==".into() }]
        );
    }

    #[tokio::test]
    async fn calls_gemini_did_not_name_get_ids_of_their_own() {
        let text = TOOL_TURN.replace("\"id\":\"fc_1\",", "").replace("\"id\":\"fc_2\",", "");
        let (events, step) = replay(Wire::Google, &text).await;
        let started: Vec<(String, String)> = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ToolCallStarted { id, name } => Some((id.clone(), name.clone())),
                _ => None,
            })
            .collect();
        let step = step.expect("complete");
        let ids: Vec<(String, String)> =
            step.tool_calls.iter().map(|call| (call.id.clone(), call.name.clone())).collect();
        assert_eq!(ids, started, "announced with the ids they keep");
        assert!(ids[0].0.starts_with("read_") && ids[1].0.starts_with("status_"), "{ids:?}");
        assert_ne!(ids[0].0, ids[1].0);
        assert_eq!(
            step.thinking,
            [Thinking::PartSignature { call_id: Some(ids[0].0.clone()), signature: "U0lHMQ==".into() }]
        );
    }

    fn chunk(parts: Value, finish: Option<&str>) -> String {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(finish) = finish {
            candidate["finishReason"] = finish.into();
        }
        format!("data: {}\r\n\r\n", json!({"candidates": [candidate]}))
    }

    #[tokio::test]
    async fn signed_thoughts_and_text_signatures_are_kept_and_ids_gemini_sent_are_used() {
        let text = [
            chunk(json!([{"text": "Plan", "thought": true}]), None),
            chunk(json!([{"text": " it", "thought": true, "thoughtSignature": "VEg="}]), None),
            chunk(json!([{"text": "Done"}]), None),
            chunk(json!([{"functionCall": {"id": "fc_7", "name": "read", "args": {}}}, {"functionCall": {"id": "fc_7", "name": "read"}}]), None),
            chunk(json!([{"text": "", "thoughtSignature": "VFg="}]), Some("STOP")),
        ]
        .concat();
        let (_, step) = replay(Wire::Google, &text).await;
        let step = step.expect("complete");
        assert_eq!(step.tool_calls[0], ToolCall { id: "fc_7".into(), name: "read".into(), arguments: json!({}) });
        assert_ne!(step.tool_calls[1].id, "fc_7", "a repeated id is replaced");
        assert_eq!(step.tool_calls[1].arguments, json!({}));
        assert_eq!(
            step.thinking,
            [
                Thinking::Signed { text: "Plan it".into(), signature: "VEg=".into() },
                Thinking::PartSignature { call_id: None, signature: "VFg=".into() },
            ]
        );
    }

    #[tokio::test]
    async fn finish_reasons() {
        let text = chunk(json!([{"text": "partial"}]), None);
        let ended = |reason: &str| format!("{text}{}", chunk(json!([]), Some(reason)));
        let length = replay(Wire::Google, &ended("MAX_TOKENS")).await.1.expect("length is no error");
        assert_eq!((length.stop, length.text.as_str()), (StopReason::Length, "partial"));
        assert_eq!(replay(Wire::Google, &ended("STOP")).await.1.expect("stop").stop, StopReason::Stop);
        for reason in ["SAFETY", "RECITATION", "MALFORMED_FUNCTION_CALL", "OTHER"] {
            let error = replay(Wire::Google, &ended(reason)).await.1.expect_err(reason);
            assert_eq!(
                (error.kind, error.message),
                (ModelErrorKind::FinishReason, format!("Provider finish_reason: {reason}"))
            );
        }
        // No finish reason: the stream broke off.
        let cut = replay(Wire::Google, &text).await.1.expect_err("cut");
        assert_eq!(cut.kind, ModelErrorKind::Stream);
        assert_eq!(cut.message, "Provider stream ended before the response was complete");
    }

    #[tokio::test]
    async fn errors_and_blocked_prompts_fail_the_step() {
        let error = "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\r\n\r\n";
        let error = replay(Wire::Google, error).await.1.expect_err("error chunk");
        assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::Stream, "The model is overloaded."));
        let blocked = "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":9}}\r\n\r\n";
        let blocked = replay(Wire::Google, blocked).await.1.expect_err("blocked");
        assert_eq!(
            (blocked.kind, blocked.message.as_str()),
            (ModelErrorKind::FinishReason, "Provider blocked the prompt: SAFETY")
        );
        let garbled = replay(Wire::Google, "data: {\"candidates\":\n\n").await.1.expect_err("garbled");
        assert_eq!(garbled.kind, ModelErrorKind::Stream);
    }
}
