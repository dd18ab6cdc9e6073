//! The model client against the scripted provider on loopback: what goes on the wire for both
//! vendors, how streamed answers come back, and how every kind of failure is retried or
//! classified.

use std::time::{Duration, Instant};

use seed_agents_server::testing::model::{
    Client, Endpoint, Message, ModelError, ModelErrorKind, ModelRequest, Retry, Step, StopReason, StreamEvent,
    Timeouts, ToolSpec, Usage, UserPart, endpoint_for,
};
use serde_json::json;
use zeroize::Zeroizing;

use crate::support::provider::{Fallback, Provider, Script};

pub(crate) const KEY: &str = "sk-test-0123456789-secret";

pub(crate) fn client(timeouts: Timeouts) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().connect_timeout(timeouts.connect).build().unwrap();
    let retry = Retry {
        max_retries: 2,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(2),
    };
    Client::new(http, timeouts).with_retry(retry)
}

pub(crate) fn quick() -> Timeouts {
    Timeouts { connect: Duration::from_secs(2), first_byte: Duration::from_secs(5), idle: Duration::from_secs(5) }
}

fn openai(provider: &Provider) -> Endpoint {
    endpoint_for("openai", provider.openai_base(), Some(Zeroizing::new(KEY.into())), "gpt-4.1-mini".into()).unwrap()
}

fn anthropic(provider: &Provider) -> Endpoint {
    endpoint_for("anthropic", provider.anthropic_base(), Some(Zeroizing::new(KEY.into())), "claude-sonnet-4-5".into())
        .unwrap()
}

pub(crate) fn request(text: &str) -> ModelRequest {
    ModelRequest {
        system: "You are terse.".into(),
        messages: vec![Message::User(vec![UserPart::Text(text.into())])],
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read anything you can address.".into(),
            parameters: json!({"type": "object", "additionalProperties": false,
                "properties": {"address": {"type": "string"}}, "required": ["address"]})
            .into(),
        }],
        ..ModelRequest::default()
    }
}

/// Runs one step, collecting the streamed events.
pub(crate) async fn step(
    client: &Client,
    endpoint: &Endpoint,
    request: &ModelRequest,
) -> (Vec<StreamEvent>, Result<Step, ModelError>) {
    let mut events = Vec::new();
    let mut push = |event: StreamEvent| events.push(event);
    let result = client.step(endpoint, request, &mut push).await;
    (events, result)
}

pub(crate) fn texts(events: &[StreamEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_turn_streams_deltas_and_sends_the_openai_request() {
    let provider = Provider::start().await;
    provider.push(Script::text("Hello there").split().usage(100, 7, 0, 0));
    let (events, result) = step(&client(quick()), &openai(&provider), &request("Hi")).await;
    let step = result.unwrap();
    assert_eq!(texts(&events), ["H", "e", "l", "l", "o", " ", "t", "h", "e", "r", "e"]);
    assert_eq!((step.text.as_str(), step.stop), ("Hello there", StopReason::Stop));
    assert_eq!(step.usage, Usage { input: 100, output: 7, cache_read: 0, cache_write: 0, total: 107 });

    let sent = provider.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/v1/chat/completions");
    assert_eq!(sent[0].header("authorization"), format!("Bearer {KEY}"));
    let body = &sent[0].body;
    assert_eq!(body["model"], "gpt-4.1-mini");
    assert_eq!((&body["stream"], &body["stream_options"]), (&json!(true), &json!({"include_usage": true})));
    assert_eq!((&body["max_completion_tokens"], &body["store"]), (&json!(16384), &json!(false)));
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}])
    );
    assert_eq!(body["tools"][0]["function"]["strict"], false);
}

#[tokio::test]
async fn a_text_turn_streams_deltas_and_sends_the_anthropic_request() {
    let provider = Provider::start().await;
    provider.push(Script::text("Hello there").split().usage(100, 7, 30, 20));
    let (events, result) = step(&client(quick()), &anthropic(&provider), &request("Hi")).await;
    let step = result.unwrap();
    assert_eq!(texts(&events).concat(), "Hello there");
    assert_eq!(texts(&events).len(), 11);
    assert_eq!((step.text.as_str(), step.stop), ("Hello there", StopReason::Stop));
    assert_eq!(step.usage, Usage { input: 100, output: 7, cache_read: 30, cache_write: 20, total: 157 });

    let sent = provider.requests();
    assert_eq!(sent[0].path, "/v1/messages");
    assert_eq!(sent[0].header("x-api-key"), KEY);
    assert_eq!(sent[0].header("anthropic-version"), "2023-06-01");
    assert_eq!(sent[0].header("authorization"), "");
    assert_eq!(sent[0].header("anthropic-beta"), "");
    let body = &sent[0].body;
    assert_eq!((&body["max_tokens"], &body["stream"]), (&json!(16384), &json!(true)));
    assert!(body.get("thinking").is_none());
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}])
    );
    assert_eq!(
        body["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {"address": {"type": "string"}}, "required": ["address"]})
    );
}

#[tokio::test]
async fn tool_calls_with_fragmented_arguments() {
    let provider = Provider::start().await;
    let client = client(quick());
    for endpoint in [openai(&provider), anthropic(&provider)] {
        provider.push(
            Script::tool_call("call_1", "read", r#"{"address":"~/memory/notes.md","format":"markdown"}"#)
                .and_tool_call("call_2", "read", r#"{"address":"thread:"}"#)
                .with_text("Looking")
                .split(),
        );
        let (events, result) = step(&client, &endpoint, &request("What is in my notes?")).await;
        let step = result.unwrap();
        let started: Vec<_> = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ToolCallStarted { id, name } => Some((id.as_str(), name.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(started, [("call_1", "read"), ("call_2", "read")], "{:?}", endpoint.wire);
        assert_eq!(step.stop, StopReason::ToolUse);
        assert_eq!(step.text, "Looking");
        let calls: Vec<_> = step.tool_calls.iter().map(|call| (call.id.as_str(), &call.arguments)).collect();
        assert_eq!(
            calls,
            [
                ("call_1", &json!({"address": "~/memory/notes.md", "format": "markdown"})),
                ("call_2", &json!({"address": "thread:"})),
            ]
        );
    }
}

#[tokio::test]
async fn invalid_tool_arguments_come_back_as_the_raw_text() {
    let provider = Provider::start().await;
    provider.push(Script::tool_call("call_1", "read", r#"{"address": "~/mem"#).split().finish("length"));
    let step = step(&client(quick()), &openai(&provider), &request("go")).await.1.unwrap();
    assert_eq!(step.stop, StopReason::Length);
    assert_eq!(step.tool_calls[0].arguments, json!(r#"{"address": "~/mem"#));
}

#[tokio::test]
async fn reasoning_is_streamed_apart_from_the_answer() {
    let provider = Provider::start().await;
    let client = client(quick());
    for endpoint in [openai(&provider), anthropic(&provider)] {
        provider.push(Script::text("Answer").reasoning("Thinking it over").split());
        let (events, result) = step(&client, &endpoint, &request("go")).await;
        let reasoning: String = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ReasoningDelta(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, "Thinking it over", "{:?}", endpoint.wire);
        assert_eq!(result.unwrap().text, "Answer");
    }
}

#[tokio::test]
async fn anthropic_thinking_request() {
    let provider = Provider::start().await;
    provider.push(Script::text("Done"));
    let thinking = ModelRequest { reasoning: Some("medium".into()), ..request("Think first") };
    step(&client(quick()), &anthropic(&provider), &thinking).await.1.unwrap();
    let sent = &provider.requests()[0];
    assert_eq!(sent.body["thinking"], json!({"type": "enabled", "budget_tokens": 8192}));
    assert_eq!(sent.body["max_tokens"], 16384);
    assert_eq!(sent.header("anthropic-beta"), "interleaved-thinking-2025-05-14");
}

#[tokio::test]
async fn client_errors_are_not_retried_and_read_the_error_body() {
    let provider = Provider::start().await;
    let client = client(quick());
    provider.push(Script::status(400).message("max_tokens: must be at most 8192"));
    let error = step(&client, &openai(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.status), (ModelErrorKind::Http, Some(400)));
    assert_eq!(error.message, "400 max_tokens: must be at most 8192");
    assert_eq!(provider.request_count(), 1);

    provider.push(Script::status(401).message("invalid x-api-key"));
    let error = step(&client, &anthropic(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!(
        (error.kind, error.status, error.message.as_str()),
        (ModelErrorKind::Http, Some(401), "401 invalid x-api-key")
    );
    assert_eq!(provider.request_count(), 2);
}

#[tokio::test]
async fn rate_limits_wait_for_retry_after_then_succeed() {
    let provider = Provider::start().await;
    provider.push(Script::status(429).retry_after(1));
    provider.push(Script::text("ok"));
    let started = Instant::now();
    let step = step(&client(quick()), &openai(&provider), &request("go")).await.1.unwrap();
    assert_eq!(step.text, "ok");
    assert!(started.elapsed() >= Duration::from_millis(950), "waited only {:?}", started.elapsed());
    assert_eq!(provider.request_count(), 2);
}

#[tokio::test]
async fn rate_limited_three_times_is_an_error() {
    let provider = Provider::start().await;
    for _ in 0..3 {
        provider.push(Script::status(429).message("Rate limit reached"));
    }
    provider.push(Script::text("never asked for"));
    let error = step(&client(quick()), &anthropic(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.status), (ModelErrorKind::Http, Some(429)));
    assert_eq!(error.message, "429 Rate limit reached");
    assert_eq!(provider.request_count(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_then_classified() {
    let provider = Provider::start().await;
    let client = client(quick());
    provider.push(Script::status(500).raw_body("nope"));
    provider.push(Script::text("recovered"));
    assert_eq!(step(&client, &openai(&provider), &request("go")).await.1.unwrap().text, "recovered");
    assert_eq!(provider.request_count(), 2);

    for _ in 0..3 {
        provider.push(Script::status(503).raw_body("nope"));
    }
    let error = step(&client, &openai(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.status, error.message.as_str()), (ModelErrorKind::Http, Some(503), "503 nope"));
    assert_eq!(provider.request_count(), 5);
}

#[tokio::test]
async fn connection_failures_are_retried_then_classified() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let endpoint = endpoint_for("ollama", base, None, "llama3.2".into()).unwrap();
    let error = step(&client(quick()), &endpoint, &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.status), (ModelErrorKind::Connect, None));
    assert!(error.message.starts_with("Connection error: "), "{}", error.message);
}

#[tokio::test]
async fn a_stream_dropped_midway_is_a_stream_error_and_not_retried() {
    let provider = Provider::start().await;
    let client = client(quick());
    for endpoint in [openai(&provider), anthropic(&provider)] {
        let before = provider.request_count();
        provider.push(Script::text("a long answer").split().drop_after(5));
        let (events, result) = step(&client, &endpoint, &request("go")).await;
        let error = result.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Stream, "{:?}: {}", endpoint.wire, error.message);
        assert!(!texts(&events).is_empty(), "{:?}: some text streamed before the drop", endpoint.wire);
        assert_eq!(provider.request_count(), before + 1);
    }
}

#[tokio::test]
async fn a_hanging_stream_times_out() {
    let provider = Provider::start().await;
    let timeouts = Timeouts { idle: Duration::from_millis(300), ..quick() };
    provider.push(Script::hang());
    let error = step(&client(timeouts), &openai(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::Timeout, "Provider stream idle for 0.3 s"));
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn refusals_and_filters_are_finish_reason_errors() {
    let provider = Provider::start().await;
    let client = client(quick());
    provider.push(Script::text("Sorry").finish("content_filter"));
    let error = step(&client, &openai(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ModelErrorKind::FinishReason, "Provider finish_reason: content_filter")
    );
    provider.push(Script::text("Sorry").finish("refusal"));
    let error = step(&client, &anthropic(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!((error.kind, error.message.as_str()), (ModelErrorKind::FinishReason, "Provider finish_reason: refusal"));
}

#[tokio::test]
async fn errors_never_contain_the_api_key() {
    let provider = Provider::start().await;
    let client = client(quick());
    provider.push(Script::status(401).message(&format!("Incorrect API key provided: {KEY}")));
    let error = step(&client, &openai(&provider), &request("go")).await.1.unwrap_err();
    assert_eq!(error.message, "401 Incorrect API key provided: [redacted]");
    assert!(!format!("{error:?} {error}").contains(KEY));

    provider.push(Script::status(500).raw_body(&format!("upstream said {KEY}")));
    provider.push(Script::status(500).raw_body(&format!("upstream said {KEY}")));
    provider.push(Script::status(500).raw_body(&format!("upstream said {KEY}")));
    let error = step(&client, &anthropic(&provider), &request("go")).await.1.unwrap_err();
    assert!(!format!("{error:?}").contains(KEY), "{error:?}");
    assert!(!format!("{:?}", anthropic(&provider)).contains(KEY));
}

#[tokio::test]
async fn the_echo_fallback_answers_when_no_script_is_left() {
    let provider = Provider::start().await;
    provider.set_fallback(Fallback::Echo);
    let client = client(quick());
    for endpoint in [openai(&provider), anthropic(&provider)] {
        let step = step(&client, &endpoint, &request("echo me")).await.1.unwrap();
        assert_eq!(step.text, "echo me");
    }
}
