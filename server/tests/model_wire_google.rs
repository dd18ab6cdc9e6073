//! The model client against the scripted provider's Gemini side on loopback: what goes on the
//! wire, how streamed answers come back (thought signatures included), and how failures are
//! retried or classified.

use std::time::Duration;

use seed_agents_server::testing::model::{
    Client, Endpoint, Message, ModelError, ModelErrorKind, ModelRequest, Retry, Step, StopReason, StreamEvent,
    Timeouts, ToolResult, ToolSpec, Usage, UserPart, endpoint_for,
};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::support::provider::gemini::signature;
use crate::support::provider::{Fallback, Provider, Script};

const KEY: &str = "AIza-test-0123456789-secret";

fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let timeouts =
        Timeouts { connect: Duration::from_secs(2), first_byte: Duration::from_secs(5), idle: Duration::from_secs(5) };
    let http = reqwest::Client::builder().connect_timeout(timeouts.connect).build().unwrap();
    let retry = Retry {
        max_retries: 2,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(2),
    };
    Client::new(http, timeouts).with_retry(retry)
}

fn gemini(provider: &Provider, model: &str) -> Endpoint {
    endpoint_for("google", provider.google_base(), Some(Zeroizing::new(KEY.into())), model.into()).unwrap()
}

fn request(text: &str) -> ModelRequest {
    ModelRequest {
        system: "You are terse.".into(),
        messages: vec![Message::User(vec![UserPart::Text(text.into())])],
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read anything you can address.".into(),
            parameters: json!({"type": "object", "additionalProperties": false,
                "properties": {"address": {"type": "string", "minLength": 1}}, "required": ["address"]})
            .into(),
        }],
        ..ModelRequest::default()
    }
}

async fn step(
    client: &Client,
    endpoint: &Endpoint,
    request: &ModelRequest,
) -> (Vec<StreamEvent>, Result<Step, ModelError>) {
    let mut events = Vec::new();
    let mut push = |event: StreamEvent| events.push(event);
    let result = client.step(endpoint, request, &mut push).await;
    (events, result)
}

fn texts(events: &[StreamEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_turn_streams_deltas_and_sends_the_gemini_request() {
    let provider = Provider::start().await;
    provider.push(Script::text("Hello there").split().usage(100, 7, 40, 0));
    let (events, result) = step(&client(), &gemini(&provider, "gemini-2.5-flash"), &request("Hi")).await;
    let step = result.unwrap();
    assert_eq!(texts(&events), ["H", "e", "l", "l", "o", " ", "t", "h", "e", "r", "e"]);
    assert_eq!((step.text.as_str(), step.stop), ("Hello there", StopReason::Stop));
    assert_eq!(step.usage, Usage { input: 100, output: 7, cache_read: 40, cache_write: 0, total: 147 });

    let sent = provider.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
    assert_eq!(sent[0].header("x-goog-api-key"), KEY);
    assert_eq!(sent[0].header("authorization"), "");
    assert_eq!(
        sent[0].body,
        json!({
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
            "tools": [{"functionDeclarations": [{"name": "read", "description": "Read anything you can address.",
                "parametersJsonSchema": {"type": "object", "properties": {"address": {"type": "string", "minLength": 1}},
                    "required": ["address"]}}]}],
            // No level on a model that can stop thinking: off.
            "generationConfig": {"maxOutputTokens": 16384, "thinkingConfig": {"thinkingBudget": 0}},
        })
    );
}

/// Three steps that each call a tool, then an answer, on Gemini 3 (which refuses a request whose
/// calls lost their signatures): every step goes back with the signature on its call, and the
/// thought summaries stream as reasoning.
#[tokio::test]
async fn a_tool_loop_carries_each_calls_signature_back() {
    let provider = Provider::start().await;
    let client = client();
    let endpoint = gemini(&provider, "gemini-3-flash-preview");
    let mut request = ModelRequest { reasoning: Some("low".into()), ..request("Read three things.") };
    for (n, address) in ["~/memory/a.md", "~/memory/b.md", "~/memory/c.md"].iter().enumerate() {
        provider.push(
            Script::tool_call(&format!("call_{n}"), "read", &json!({"address": address}).to_string())
                .with_text(&format!("Step {n}."))
                .reasoning("Next file.")
                .split(),
        );
    }
    provider.push(Script::text("All read.").reasoning("Done reading.").split());
    let mut reasoning = String::new();
    loop {
        let (events, result) = step(&client, &endpoint, &request).await;
        for event in &events {
            if let StreamEvent::ReasoningDelta(text) = event {
                reasoning.push_str(text);
            }
        }
        let step = result.unwrap();
        if step.stop == StopReason::Stop {
            assert_eq!(step.text, "All read.");
            break;
        }
        assert_eq!(step.stop, StopReason::ToolUse);
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
    assert_eq!(reasoning, "Next file.".repeat(3) + "Done reading.");

    let sent = provider.requests();
    assert_eq!(sent.len(), 4, "no request was refused for a missing signature");
    for request in &sent {
        assert_eq!(
            request.body["generationConfig"]["thinkingConfig"],
            json!({"includeThoughts": true, "thinkingLevel": "LOW"})
        );
    }
    let last = &sent[3].body["contents"];
    let model_turns: Vec<&Value> =
        last.as_array().unwrap().iter().filter(|content| content["role"] == "model").collect();
    assert_eq!(model_turns.len(), 3);
    for (n, turn) in model_turns.iter().enumerate() {
        assert_eq!(
            turn["parts"],
            json!([
                {"text": format!("Step {n}.")},
                {"functionCall": {"name": "read", "args": {"address": format!("~/memory/{}.md", ["a", "b", "c"][n])}},
                 "thoughtSignature": signature(&format!("call_{n}"))},
            ]),
            "step {n}"
        );
    }
    // Each result right after its call, paired by order and name (no ids on the wire).
    assert_eq!(
        last[2],
        json!({"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {"output": "contents of ~/memory/a.md"}}}]})
    );
    assert!(!last.to_string().contains("\"id\""), "{last}");
}

#[tokio::test]
async fn a_user_image_goes_inline() {
    let provider = Provider::start().await;
    provider.push(Script::text("A red dot."));
    let mut look = request("What is this?");
    look.messages = vec![Message::User(vec![
        UserPart::Text("What is this?".into()),
        UserPart::Image { mime: "image/png".into(), data: vec![0x89, 0x50, 0x4e, 0x47] },
    ])];
    let step = step(&client(), &gemini(&provider, "gemini-2.5-pro"), &look).await.1.unwrap();
    assert_eq!(step.text, "A red dot.");
    assert_eq!(
        provider.requests()[0].body["contents"],
        json!([{"role": "user", "parts": [{"text": "What is this?"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}}]}])
    );
}

#[tokio::test]
async fn a_rate_limit_is_retried_then_succeeds() {
    let provider = Provider::start().await;
    provider.push(Script::status(429).message("Resource has been exhausted (e.g. check quota)."));
    provider.push(Script::text("ok"));
    let step = step(&client(), &gemini(&provider, "gemini-2.5-flash"), &request("go")).await.1.unwrap();
    assert_eq!(step.text, "ok");
    assert_eq!(provider.request_count(), 2);
}

#[tokio::test]
async fn a_bad_request_is_not_retried_and_carries_geminis_message() {
    let provider = Provider::start().await;
    provider.push(Script::status(400).message("API key not valid. Please pass a valid API key."));
    let error = step(&client(), &gemini(&provider, "gemini-2.5-flash"), &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.status), (ModelErrorKind::Http, Some(400)));
    assert_eq!(error.message, "400 API key not valid. Please pass a valid API key.");
    assert_eq!(provider.request_count(), 1);

    // A key Gemini echoes never reaches the message.
    provider.push(Script::status(403).message(&format!("Key {KEY} is not allowed")));
    let error = step(&client(), &gemini(&provider, "gemini-2.5-flash"), &request("go")).await.1.unwrap_err();
    assert_eq!(error.message, "403 Key [redacted] is not allowed");
}

#[tokio::test]
async fn a_stream_cut_mid_answer_is_a_stream_error_and_not_retried() {
    let provider = Provider::start().await;
    provider.push(Script::text("a long answer").split().drop_after(5));
    let (events, result) = step(&client(), &gemini(&provider, "gemini-2.5-flash"), &request("go")).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Stream, "{}", error.message);
    assert_eq!(texts(&events).concat(), "a lon", "what came before the cut streamed");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn safety_stops_are_finish_reason_errors_and_length_is_not() {
    let provider = Provider::start().await;
    let client = client();
    let endpoint = gemini(&provider, "gemini-2.5-flash");
    provider.push(Script::text("I can't").finish("SAFETY"));
    let error = step(&client, &endpoint, &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::FinishReason, "Provider finish_reason: SAFETY"));
    provider.push(Script::text("cut sh").finish("length"));
    let step = step(&client, &endpoint, &request("go")).await.1.unwrap();
    assert_eq!((step.stop, step.text.as_str()), (StopReason::Length, "cut sh"));
}

#[tokio::test]
async fn the_echo_fallback_answers_gemini_too() {
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Echo);
    let step = step(&client(), &gemini(&provider, "gemini-2.5-flash"), &request("echo me")).await.1.unwrap();
    assert_eq!(step.text, "echo me");
}
