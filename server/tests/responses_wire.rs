//! The model client against the scripted provider's OpenAI Responses API (docs/runtime.md §2.3):
//! which steps go there, what goes on the wire, how the streamed answer comes back, how encrypted
//! reasoning is handed back through a tool loop, and how failures are retried or classified.

use seed_agents_server::testing::model::{
    EncryptedReasoning, Endpoint, Image, Message, ModelErrorKind, ModelRequest, StopReason, StreamEvent, Thinking,
    ToolCall, ToolResult, Usage, UserPart, Wire, endpoint_for,
};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::model_wire::{KEY, client, quick, request, step, texts};
use crate::support::provider::responses::{REASONING_ITEM_ID, encrypted};
use crate::support::provider::{Provider, Script};

fn openai(provider: &Provider, model: &str) -> Endpoint {
    endpoint_for("openai", provider.openai_base(), Some(Zeroizing::new(KEY.into())), model.into()).unwrap()
}

fn leveled(text: &str, level: &str) -> ModelRequest {
    ModelRequest { reasoning: Some(level.into()), ..request(text) }
}

fn reasoning_deltas(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ReasoningDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_leveled_text_turn_streams_and_sends_the_responses_request() {
    let provider = Provider::start().await;
    provider.push(Script::text("Hello there").reasoning("Weighing it").split().usage(100, 7, 40, 0));
    let endpoint = openai(&provider, "o3");
    assert_eq!(endpoint.wire, Wire::OpenAiChat, "the provider type's wire; the request decides");
    let (events, result) = step(&client(quick()), &endpoint, &leveled("Hi", "high")).await;
    let step = result.unwrap();
    assert_eq!(reasoning_deltas(&events), "Weighing it");
    assert_eq!(texts(&events), ["H", "e", "l", "l", "o", " ", "t", "h", "e", "r", "e"]);
    let first_text = events.iter().position(|event| matches!(event, StreamEvent::TextDelta(_))).unwrap();
    assert!(events[..first_text].iter().all(|event| matches!(event, StreamEvent::ReasoningDelta(_))));
    assert_eq!((step.text.as_str(), step.stop), ("Hello there", StopReason::Stop));
    assert_eq!(step.usage, Usage { input: 100, output: 7, cache_read: 40, cache_write: 0, total: 147 });
    assert_eq!(
        step.thinking,
        [Thinking::Encrypted(EncryptedReasoning {
            id: REASONING_ITEM_ID.into(),
            summary: vec!["Weighing it".into()],
            encrypted_content: encrypted("Weighing it"),
        })]
    );

    let sent = provider.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/v1/responses");
    assert_eq!(sent[0].header("authorization"), format!("Bearer {KEY}"));
    let body = &sent[0].body;
    assert_eq!(body["model"], "o3");
    assert_eq!(body["instructions"], "You are terse.");
    assert_eq!((&body["stream"], &body["store"]), (&json!(true), &json!(false)));
    assert_eq!(body["max_output_tokens"], 16384);
    assert_eq!(body["reasoning"], json!({"effort": "high", "summary": "auto"}));
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["input"], json!([{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "read", "description": "Read anything you can address.",
            "parameters": {"type": "object", "additionalProperties": false,
                "properties": {"address": {"type": "string"}}, "required": ["address"]},
            "strict": false}])
    );
    assert!(body.get("messages").is_none());
}

/// Which steps of an `openai` provider go where: a level on a reasoning model, or gpt-5.1 and
/// later without one (told `none`), take the Responses API; the rest stay on chat completions.
#[tokio::test]
async fn only_controlled_reasoning_takes_the_responses_api() {
    let provider = Provider::start().await;
    let client = client(quick());
    let cases = [
        ("gpt-5.1", None, "/v1/responses", Some(json!({"effort": "none"}))),
        ("gpt-5.2", Some("xhigh"), "/v1/responses", Some(json!({"effort": "xhigh", "summary": "auto"}))),
        ("gpt-5", Some("minimal"), "/v1/responses", Some(json!({"effort": "minimal", "summary": "auto"}))),
        ("gpt-5", None, "/v1/chat/completions", None),
        ("o4-mini", Some("off"), "/v1/chat/completions", None),
        ("gpt-4.1", Some("high"), "/v1/chat/completions", None),
    ];
    for (index, (model, level, path, reasoning)) in cases.into_iter().enumerate() {
        provider.push(Script::text("ok"));
        let request = ModelRequest { reasoning: level.map(str::to_owned), ..request("go") };
        let step = step(&client, &openai(&provider, model), &request).await.1.unwrap();
        assert_eq!(step.text, "ok", "{model}");
        let sent = &provider.requests()[index];
        assert_eq!(sent.path, path, "{model} {level:?}");
        assert_eq!(sent.body.get("reasoning").cloned(), reasoning, "{model} {level:?}");
        assert!(sent.body.get("reasoning_effort").is_none(), "{model}: never on chat completions");
    }
}

/// Three tool calls in a row, each after reasoning: every request hands back all the reasoning
/// items so far, each right before the call it led to (named by both halves of its id), then the
/// call's result by `call_id`.
#[tokio::test]
async fn a_tool_loop_hands_encrypted_reasoning_back() {
    let provider = Provider::start().await;
    let client = client(quick());
    let endpoint = openai(&provider, "gpt-5");
    let thoughts = ["Check memory", "Now the notes", "One more look"];
    for (index, thought) in thoughts.iter().enumerate() {
        let n = index + 1;
        let arguments = format!(r#"{{"address":"~/memory/{n}.md"}}"#);
        provider.push(Script::tool_call(&format!("call_{n}|fc_{n}"), "read", &arguments).reasoning(thought).split());
    }
    provider.push(Script::text("All read.").reasoning("Done looking").split());

    let mut request = leveled("Read my notes", "medium");
    let mut answer = None;
    for _ in 0..4 {
        let (events, result) = step(&client, &endpoint, &request).await;
        let step = result.unwrap();
        if step.tool_calls.is_empty() {
            answer = Some(step.text);
            break;
        }
        assert_eq!(step.stop, StopReason::ToolUse);
        let started: Vec<_> = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ToolCallStarted { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(started, [step.tool_calls[0].id.clone()]);
        let results = step
            .tool_calls
            .iter()
            .map(|call| ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                text: format!("contents of {}", call.arguments["address"].as_str().unwrap()),
                images: Vec::new(),
                is_error: false,
            })
            .collect();
        request.messages.push(Message::Assistant {
            text: step.text,
            tool_calls: step.tool_calls,
            thinking: step.thinking,
        });
        request.messages.push(Message::ToolResults(results));
    }
    assert_eq!(answer.as_deref(), Some("All read."));

    let sent = provider.requests();
    assert_eq!(sent.len(), 4);
    let item = |n: usize| {
        vec![
            json!({"type": "reasoning", "id": REASONING_ITEM_ID, "encrypted_content": encrypted(thoughts[n - 1]),
                "summary": [{"type": "summary_text", "text": thoughts[n - 1]}]}),
            json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"), "name": "read",
                "arguments": format!(r#"{{"address":"~/memory/{n}.md"}}"#)}),
            json!({"type": "function_call_output", "call_id": format!("call_{n}"),
                "output": format!("contents of ~/memory/{n}.md")}),
        ]
    };
    for (index, request) in sent.iter().enumerate() {
        let mut expected = vec![json!({"role": "user", "content": [{"type": "input_text", "text": "Read my notes"}]})];
        for n in 1..=index {
            expected.extend(item(n));
        }
        assert_eq!(request.body["input"], Value::Array(expected), "request {}", index + 1);
        assert_eq!(request.body["include"], json!(["reasoning.encrypted_content"]));
    }
}

/// A conversation replayed from the log has no reasoning: its calls go back without item ids
/// (a call item whose reasoning is missing would be refused), answered by `call_id`.
#[tokio::test]
async fn replayed_calls_go_back_without_item_ids() {
    let provider = Provider::start().await;
    provider.push(Script::text("ok"));
    let call = ToolCall { id: "call_7|fc_7".into(), name: "read".into(), arguments: json!({"address": "~/"}) };
    let request = ModelRequest {
        messages: vec![
            Message::User(vec![UserPart::Text("go".into())]),
            Message::Assistant { text: String::new(), tool_calls: vec![call], thinking: Vec::new() },
            Message::ToolResults(vec![ToolResult {
                call_id: "call_7|fc_7".into(),
                name: "read".into(),
                text: "[]".into(),
                images: Vec::new(),
                is_error: false,
            }]),
        ],
        ..leveled("unused", "low")
    };
    step(&client(quick()), &openai(&provider, "gpt-5.1"), &request).await.1.unwrap();
    assert_eq!(
        provider.requests()[0].body["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "function_call", "call_id": "call_7", "name": "read", "arguments": "{\"address\":\"~/\"}"},
            {"type": "function_call_output", "call_id": "call_7", "output": "[]"},
        ])
    );
}

#[tokio::test]
async fn images_go_as_input_images() {
    let provider = Provider::start().await;
    provider.push(Script::text("A chart and a photo."));
    let request = ModelRequest {
        messages: vec![
            Message::User(vec![
                UserPart::Text("What are these?".into()),
                UserPart::Image { mime: "image/png".into(), data: vec![0x89, 0x50, 0x4e, 0x47] },
            ]),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall { id: "call_1".into(), name: "read".into(), arguments: json!({}) }],
                thinking: Vec::new(),
            },
            Message::ToolResults(vec![ToolResult {
                call_id: "call_1".into(),
                name: "read".into(),
                text: String::new(),
                images: vec![Image { mime: "image/jpeg".into(), data: vec![0xff, 0xd8, 0xff] }],
                is_error: false,
            }]),
        ],
        ..leveled("unused", "low")
    };
    let step = step(&client(quick()), &openai(&provider, "gpt-5.2"), &request).await.1.unwrap();
    assert_eq!(step.text, "A chart and a photo.");
    let input = &provider.requests()[0].body["input"];
    assert_eq!(
        input[0]["content"],
        json!([
            {"type": "input_text", "text": "What are these?"},
            {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBORw=="},
        ])
    );
    assert_eq!(
        input[2],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "(see attached image)"})
    );
    assert_eq!(
        input[3],
        json!({"role": "user", "content": [
            {"type": "input_text", "text": "Attached image(s) from tool result:"},
            {"type": "input_image", "detail": "auto", "image_url": "data:image/jpeg;base64,/9j/"},
        ]})
    );
}

#[tokio::test]
async fn a_rate_limit_is_retried_then_succeeds() {
    let provider = Provider::start().await;
    provider.push(Script::status(429).message("Rate limit reached for o3"));
    provider.push(Script::text("ok").reasoning("fine"));
    let step = step(&client(quick()), &openai(&provider, "o3"), &leveled("go", "low")).await.1.unwrap();
    assert_eq!(step.text, "ok");
    let sent = provider.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|request| request.path == "/v1/responses"));
    assert_eq!(sent[0].body, sent[1].body, "the retry sends the same request");
}

#[tokio::test]
async fn a_client_error_is_surfaced_with_the_vendors_message_and_not_retried() {
    let provider = Provider::start().await;
    provider.push(Script::status(400).message("Unsupported value: 'reasoning.effort' does not support 'xhigh'"));
    let error = step(&client(quick()), &openai(&provider, "gpt-5.2"), &leveled("go", "xhigh")).await.1.unwrap_err();
    assert_eq!((error.kind, error.status), (ModelErrorKind::Http, Some(400)));
    assert_eq!(error.message, "400 Unsupported value: 'reasoning.effort' does not support 'xhigh'");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_answer_is_a_stream_error_and_not_retried() {
    let provider = Provider::start().await;
    // created, in_progress, item added, part added, then two one-letter deltas: cut.
    provider.push(Script::text("a long answer").split().drop_after(6));
    let (events, result) = step(&client(quick()), &openai(&provider, "gpt-5.1"), &request("go")).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Stream, "{}", error.message);
    assert_eq!(texts(&events), ["a", " "], "what streamed before the cut");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn the_output_limit_keeps_the_text_and_a_filter_is_an_error() {
    let provider = Provider::start().await;
    let client = client(quick());
    provider.push(Script::text("cut sh").finish("length"));
    let step_ = step(&client, &openai(&provider, "o3"), &leveled("go", "low")).await.1.unwrap();
    assert_eq!((step_.stop, step_.text.as_str()), (StopReason::Length, "cut sh"));
    provider.push(Script::text("Sorry").finish("content_filter"));
    let error = step(&client, &openai(&provider, "o3"), &leveled("go", "low")).await.1.unwrap_err();
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ModelErrorKind::FinishReason, "Provider finish_reason: content_filter")
    );
}
