//! The step being built from a stream: answer text, tool calls assembled from fragments, usage
//! and the stop reason. Both codecs' stream halves feed one of these and push each event to the
//! caller as they go.

use serde_json::Value;

use super::{Step, StepEvents, StopReason, StreamEvent, Thinking, ToolCall, Usage};

/// A step under construction.
#[derive(Debug, Default)]
pub(crate) struct StepBuilder {
    text: String,
    calls: Vec<CallBuilder>,
    /// Signed reasoning blocks by content-block slot, in the order they started.
    thinking: Vec<(u64, Thinking)>,
    pub(crate) usage: Usage,
}

/// A tool call whose fragments are still arriving.
#[derive(Debug)]
struct CallBuilder {
    /// The vendor's slot for the call (OpenAI `index`, Anthropic content block index).
    slot: Option<u64>,
    id: String,
    /// Whether `id` was made up here because the provider sent none.
    made_up_id: bool,
    name: String,
    /// The argument text, joined from fragments; parsed once at the end.
    arguments: String,
    /// Arguments the provider sent whole at the start (Anthropic `tool_use.input`).
    initial: Option<Value>,
    announced: bool,
}

/// One OpenAI-style tool-call fragment: any of id, name and argument text, for a slot.
#[derive(Debug, Default)]
pub(crate) struct CallFragment<'a> {
    pub(crate) slot: Option<u64>,
    pub(crate) id: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) arguments: Option<&'a str>,
}

impl StepBuilder {
    /// Appends answer text and reports it.
    pub(crate) fn text(&mut self, delta: &str, events: &mut StepEvents<'_>) {
        if !delta.is_empty() {
            self.text.push_str(delta);
            events(StreamEvent::TextDelta(delta.to_owned()));
        }
    }

    /// Reports reasoning text (never kept in the step).
    pub(crate) fn reasoning(delta: &str, events: &mut StepEvents<'_>) {
        if !delta.is_empty() {
            events(StreamEvent::ReasoningDelta(delta.to_owned()));
        }
    }

    /// Starts a signed reasoning block in `slot` (Anthropic `thinking`), reporting its first text.
    pub(crate) fn start_thinking(&mut self, slot: u64, text: &str, signature: &str, events: &mut StepEvents<'_>) {
        Self::reasoning(text, events);
        let block = Thinking::Signed { text: text.to_owned(), signature: signature.to_owned() };
        self.thinking.push((slot, block));
    }

    /// Keeps a redacted reasoning block (Anthropic `redacted_thinking`) to hand back.
    pub(crate) fn redacted_thinking(&mut self, slot: u64, data: &str) {
        self.thinking.push((slot, Thinking::Redacted { data: data.to_owned() }));
    }

    /// More reasoning text for the block in `slot`, reported as it comes.
    pub(crate) fn thinking_text(&mut self, slot: u64, delta: &str, events: &mut StepEvents<'_>) {
        Self::reasoning(delta, events);
        if let Some(Thinking::Signed { text, .. }) = self.thinking_in(slot) {
            text.push_str(delta);
        }
    }

    /// Signature text for the block in `slot`.
    pub(crate) fn thinking_signature(&mut self, slot: u64, delta: &str) {
        if let Some(Thinking::Signed { signature, .. }) = self.thinking_in(slot) {
            signature.push_str(delta);
        }
    }

    fn thinking_in(&mut self, slot: u64) -> Option<&mut Thinking> {
        self.thinking.iter_mut().rev().find(|(at, _)| *at == slot).map(|(_, block)| block)
    }

    /// Starts a call whose id and name are known at once (Anthropic `tool_use` blocks).
    pub(crate) fn start_call(
        &mut self,
        slot: u64,
        id: &str,
        name: &str,
        initial: Option<Value>,
        events: &mut StepEvents<'_>,
    ) {
        self.calls.push(CallBuilder::new(Some(slot), initial));
        let fragment = CallFragment { slot: Some(slot), id: Some(id), name: Some(name), arguments: None };
        let index = self.calls.len() - 1;
        self.apply(index, &fragment, events);
    }

    /// Appends argument text to the call in `slot`, if there is one.
    pub(crate) fn call_arguments(&mut self, slot: u64, text: &str) {
        if let Some(call) = self.calls.iter_mut().rev().find(|call| call.slot == Some(slot)) {
            call.arguments.push_str(text);
        }
    }

    /// Adds an OpenAI-style fragment. A fragment continues the latest call with the same `index`
    /// (or, without an index, the latest call) unless it carries a different id, which starts a
    /// new call.
    pub(crate) fn call_fragment(&mut self, fragment: &CallFragment<'_>, events: &mut StepEvents<'_>) {
        let new_id = fragment.id.filter(|id| !id.is_empty());
        let continues = |call: &CallBuilder| {
            call.slot == fragment.slot && new_id.is_none_or(|id| call.id.is_empty() || call.made_up_id || call.id == id)
        };
        let index = match self.calls.iter().rposition(|call| call.slot == fragment.slot) {
            Some(index) if continues(&self.calls[index]) => index,
            _ => {
                self.calls.push(CallBuilder::new(fragment.slot, None));
                self.calls.len() - 1
            }
        };
        self.apply(index, fragment, events);
    }

    fn apply(&mut self, index: usize, fragment: &CallFragment<'_>, events: &mut StepEvents<'_>) {
        let Some(call) = self.calls.get_mut(index) else {
            return;
        };
        if let Some(id) = fragment.id.filter(|id| !id.is_empty())
            && call.id.is_empty()
        {
            call.id = id.to_owned();
        }
        if let Some(name) = fragment.name.filter(|name| !name.is_empty()) {
            name.clone_into(&mut call.name);
        }
        if let Some(arguments) = fragment.arguments {
            call.arguments.push_str(arguments);
        }
        if !call.announced && !call.name.is_empty() {
            if call.id.is_empty() {
                call.id = made_up_id();
                call.made_up_id = true;
            }
            call.announced = true;
            events(StreamEvent::ToolCallStarted { id: call.id.clone(), name: call.name.clone() });
        }
    }

    /// The finished step. `Stop` with tool calls becomes `ToolUse` (some hosts say `stop` after
    /// calling tools), and `ToolUse` without any becomes `Stop`.
    pub(crate) fn finish(self, stop: StopReason) -> Step {
        let tool_calls: Vec<ToolCall> = self.calls.into_iter().map(CallBuilder::finish).collect();
        let stop = match stop {
            StopReason::Stop if !tool_calls.is_empty() => StopReason::ToolUse,
            StopReason::ToolUse if tool_calls.is_empty() => StopReason::Stop,
            other => other,
        };
        // A block the provider never signed cannot be handed back; it is dropped (and the
        // step after a tool call then runs without thinking, as Anthropic requires).
        let thinking = self
            .thinking
            .into_iter()
            .map(|(_, block)| block)
            .filter(|block| !matches!(block, Thinking::Signed { signature, .. } if signature.is_empty()))
            .collect();
        Step { text: self.text, tool_calls, thinking, stop, usage: self.usage }
    }
}

impl CallBuilder {
    fn new(slot: Option<u64>, initial: Option<Value>) -> Self {
        Self {
            slot,
            id: String::new(),
            made_up_id: false,
            name: String::new(),
            arguments: String::new(),
            initial,
            announced: false,
        }
    }

    fn finish(self) -> ToolCall {
        let id = if self.id.is_empty() { made_up_id() } else { self.id };
        ToolCall { id, name: self.name, arguments: parse_arguments(&self.arguments, self.initial) }
    }
}

/// Parses joined argument text: blank means the initial value (or `{}`), invalid JSON is kept
/// as `Value::String(raw)` for the runtime's validation to report.
pub(crate) fn parse_arguments(raw: &str, initial: Option<Value>) -> Value {
    if raw.trim().is_empty() {
        return initial.unwrap_or_else(|| Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// An id for a call the provider sent without one: `call_` and 32 hex digits (fits OpenAI's 40).
fn made_up_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fragment<'a>(
        slot: Option<u64>,
        id: Option<&'a str>,
        name: Option<&'a str>,
        arguments: Option<&'a str>,
    ) -> CallFragment<'a> {
        CallFragment { slot, id, name, arguments }
    }

    #[test]
    fn fragments_join_by_index_and_split_on_a_new_id() {
        let mut seen = Vec::new();
        let mut events = |event: StreamEvent| seen.push(event);
        let mut step = StepBuilder::default();
        step.call_fragment(&fragment(Some(0), Some("a"), Some("read"), Some("")), &mut events);
        step.call_fragment(&fragment(Some(0), None, None, Some("{\"addr")), &mut events);
        step.call_fragment(&fragment(Some(1), Some("b"), Some("write"), Some("{}")), &mut events);
        step.call_fragment(&fragment(Some(0), None, None, Some("ess\":1}")), &mut events);
        // Same index, different id: a host that numbers every call 0.
        step.call_fragment(&fragment(Some(0), Some("c"), Some("status"), Some("[1]")), &mut events);
        // No index: continues the latest call without one, or starts one.
        step.call_fragment(&fragment(None, Some("d"), Some("plan"), Some("{\"x\"")), &mut events);
        step.call_fragment(&fragment(None, None, None, Some(":2}")), &mut events);
        let done = step.finish(StopReason::ToolUse);
        let calls: Vec<_> = done.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments)).collect();
        assert_eq!(
            calls,
            [
                ("a", "read", &json!({"address": 1})),
                ("b", "write", &json!({})),
                ("c", "status", &json!([1])),
                ("d", "plan", &json!({"x": 2})),
            ]
        );
        let started: Vec<_> = seen
            .iter()
            .map(|event| match event {
                StreamEvent::ToolCallStarted { id, .. } => id.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(started, ["a", "b", "c", "d"]);
    }

    #[test]
    fn arguments_parse_once_at_the_end() {
        assert_eq!(parse_arguments("", None), json!({}));
        assert_eq!(parse_arguments("  ", Some(json!({"a": 1}))), json!({"a": 1}));
        assert_eq!(parse_arguments("{\"a\":", None), json!("{\"a\":"));
        assert_eq!(parse_arguments("{\"a\":true}", None), json!({"a": true}));
    }

    #[test]
    fn a_call_without_an_id_gets_one() {
        let mut events = |_: StreamEvent| {};
        let mut step = StepBuilder::default();
        step.call_fragment(&fragment(Some(0), None, Some("read"), Some("{}")), &mut events);
        let done = step.finish(StopReason::Stop);
        assert_eq!(done.stop, StopReason::ToolUse);
        assert!(done.tool_calls[0].id.starts_with("call_"));
        assert!(done.tool_calls[0].id.len() <= 40);
    }
}
