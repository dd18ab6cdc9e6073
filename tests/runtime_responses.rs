//! Agent turns on OpenAI's Responses API end to end (docs/runtime.md §1.9, §2.3): a real server
//! whose `openai` provider type goes to the scripted provider on loopback, an agent on a
//! reasoning model, and the SDK over HTTP and the WebSocket.

use std::time::Duration;

use futures_util::StreamExt as _;
use seed_agents_protocol::generated::{
    CreateAgent, ReasoningLevel, SessionEventPayload, SetModelProvider, SetSecret, UploadSessionAttachment,
};
use seed_agents_sdk::subscription::Event as Live;
use serde_json::{Value, json};

use crate::support::provider::responses::{REASONING_ITEM_ID, encrypted};
use crate::support::provider::{Provider, Script};
use crate::support::transcript::{read_log, transcript};
use crate::support::{TestServer, User, api_error, definition, provider_config, say};

const KEY: &str = "sk-openai-test";

/// A server whose `openai` provider type goes to `provider`, with the provider `main` (type
/// openai, key `openai-key`) and an agent on `model` with `level`; automatic titles off.
async fn setup(
    provider: &Provider,
    model: &str,
    level: Option<ReasoningLevel>,
) -> (TestServer, User, seed_agents_protocol::SessionId) {
    let openai = provider.openai_base();
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(2);
        crate::support::route_provider(config, &format!("openai={openai}"));
    })
    .await;
    let user = server.user();
    let key = SetSecret {
        name: "openai-key".into(),
        value: seed_agents_protocol::Bytes(KEY.as_bytes().to_vec()),
        metadata: None,
    };
    user.call(key).await.unwrap();
    user.call(SetModelProvider { name: "main".into(), provider: provider_config() }).await.unwrap();
    let definition = seed_agents_protocol::generated::AgentDefinition {
        model: model.into(),
        reasoning_level: level,
        ..definition("Reasoner")
    };
    let agent_id = user.call(CreateAgent { client_request_id: None, definition }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    (server, user, session_id)
}

/// A live line: `append <role or kind>`, `delta <text>`, `done`, `activity <phase>` or
/// `tool <call id>`.
fn lines_of(event: Live) -> Vec<String> {
    match event {
        Live::Append { event, .. } => vec![match &event.event {
            SessionEventPayload::MessageEvent(message) => format!("append {}", message.role),
            SessionEventPayload::ToolCallEvent(call) => format!("append call {}", call.id),
            SessionEventPayload::ToolResultEvent(result) => format!("append result {}", result.tool_call_id),
            other => format!("append {other:?}"),
        }],
        Live::Partial { patch, .. } => {
            let mut lines = Vec::new();
            if let Some(activity) = patch.activity {
                lines.push(match activity.tool_call_id {
                    Some(id) => format!("tool {id}"),
                    None => format!("activity {}", activity.phase),
                });
            }
            if let Some(delta) = patch.text_delta {
                lines.push(format!("delta {delta}"));
            }
            if patch.done == Some(true) {
                lines.push("done".into());
            }
            lines
        }
        _ => Vec::new(),
    }
}

/// Three tool calls, each after reasoning, then the answer: the log holds the calls under their
/// composite ids and no reasoning; every request of the pass hands back the encrypted reasoning
/// so far with the calls it led to; the WebSocket shows each call and then the answer's deltas
/// in order. The next turn replays the log without reasoning or item ids.
#[tokio::test]
async fn a_reasoning_tool_loop_carries_encrypted_reasoning_and_streams_in_order() {
    let provider = Provider::start().await;
    let (server, user, session_id) = setup(&provider, "gpt-5", Some(ReasoningLevel::Low)).await;
    let mut live = user.client.subscribe(format!("sessions/{session_id}")).start();
    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));
    let thoughts = ["Look at memory first", "Write the note", "Check it landed"];
    let calls = [
        ("read", r#"{"address":"~/memory/"}"#),
        ("write", r#"{"address":"~/memory/notes.md","content":"buy milk"}"#),
        ("read", r#"{"address":"~/memory/notes.md"}"#),
    ];
    for (n, ((name, arguments), thought)) in calls.iter().zip(thoughts).enumerate() {
        let id = format!("call_{}|fc_{}", n + 1, n + 1);
        provider.push(Script::tool_call(&id, name, arguments).reasoning(thought).split());
    }
    provider.push(Script::text("Noted: buy milk.").reasoning("All done").split().usage(300, 9, 200, 0));

    let answer = user.call(say(&session_id, "note: buy milk")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&log),
        [
            "user: note: buy milk",
            "call read",
            "result read",
            "call write",
            "result write",
            "call read",
            "result read",
            "assistant: Noted: buy milk."
        ]
    );
    assert_eq!(answer.assistant_event_id, log[7].id);
    let call_ids: Vec<String> = log
        .iter()
        .filter_map(|event| match &event.event {
            SessionEventPayload::ToolCallEvent(call) => Some(call.id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(call_ids, ["call_1|fc_1", "call_2|fc_2", "call_3|fc_3"], "stored as the vendor named them");
    let SessionEventPayload::MessageEvent(reply) = &log[7].event else { panic!("{log:?}") };
    let meta = reply.meta.as_ref().unwrap();
    assert_eq!((meta.model.as_deref(), meta.provider.as_deref()), (Some("gpt-5"), Some("openai")));
    let usage = meta.usage.as_ref().unwrap();
    assert_eq!((usage.input, usage.output, usage.cache_read), (300, 9, 200));
    // Reasoning is never stored.
    let stored = serde_json::to_string(&log).unwrap();
    for secret in thoughts.iter().chain(&["All done", "gAAAA"]) {
        assert!(!stored.contains(secret), "{secret} in {stored}");
    }

    // What the server sent: the Responses request, reasoning handed back step by step.
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(request.path, "/v1/responses");
        assert_eq!(request.header("authorization"), format!("Bearer {KEY}"));
        let body = &request.body;
        assert_eq!((&body["model"], &body["store"], &body["stream"]), (&json!("gpt-5"), &json!(false), &json!(true)));
        assert_eq!(body["reasoning"], json!({"effort": "low", "summary": "auto"}));
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert!(body["instructions"].as_str().unwrap().starts_with("You are helpful."));
        let tools: Vec<&str> = body["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(tools, ["read", "write", "call", "delegate", "plan", "status", "continue_session"]);
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[0]["role"], "user");
        assert!(input[0]["content"][0]["text"].as_str().unwrap().ends_with("note: buy milk"));
        assert_eq!(input.len(), 1 + 3 * index, "request {}: {input:?}", index + 1);
        for n in 1..=index {
            let (reasoning, call, output) = (&input[3 * n - 2], &input[3 * n - 1], &input[3 * n]);
            assert_eq!(
                reasoning,
                &json!({"type": "reasoning", "id": REASONING_ITEM_ID, "encrypted_content": encrypted(thoughts[n - 1]),
                    "summary": [{"type": "summary_text", "text": thoughts[n - 1]}]}),
                "request {}",
                index + 1
            );
            let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            let scripted: Value = serde_json::from_str(calls[n - 1].1).unwrap();
            assert_eq!(
                (&call["type"], &call["id"], &call["call_id"], &call["name"], &arguments),
                (
                    &json!("function_call"),
                    &json!(format!("fc_{n}")),
                    &json!(format!("call_{n}")),
                    &json!(calls[n - 1].0),
                    &scripted
                )
            );
            assert_eq!(
                (&output["type"], &output["call_id"]),
                (&json!("function_call_output"), &json!(format!("call_{n}")))
            );
        }
    }
    let written: Value = serde_json::from_str(requests[3].body["input"][9]["output"].as_str().unwrap()).unwrap();
    assert!(written.to_string().contains("buy milk"), "the last read saw the note: {written}");

    // Live: each call's tool activity and events, then the answer's deltas, `done`, the append.
    let mut seen: Vec<String> = Vec::new();
    while seen.last().map(String::as_str) != Some("append assistant") {
        let event = tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().unwrap().unwrap();
        seen.extend(lines_of(event));
    }
    let position = |wanted: &str| seen.iter().position(|line| line == wanted).unwrap_or(usize::MAX);
    for n in 1..=3 {
        let id = format!("call_{n}|fc_{n}");
        assert!(position(&format!("append call {id}")) < position(&format!("tool {id}")), "{seen:?}");
        assert!(position(&format!("tool {id}")) < position(&format!("append result {id}")), "{seen:?}");
        if n > 1 {
            assert!(
                position(&format!("append result call_{}|fc_{}", n - 1, n - 1))
                    < position(&format!("append call {id}"))
            );
        }
    }
    let deltas: Vec<&str> = seen.iter().filter_map(|line| line.strip_prefix("delta ")).collect();
    assert_eq!(deltas.concat(), "Noted: buy milk.");
    assert_eq!(deltas.len(), "Noted: buy milk.".chars().count(), "one delta per scripted piece: {seen:?}");
    let first_delta = seen.iter().position(|line| line.starts_with("delta ")).unwrap();
    assert!(position("append result call_3|fc_3") < first_delta, "{seen:?}");
    assert_eq!(seen[first_delta - 1], "activity responding", "{seen:?}");
    assert_eq!(position("done") + 1, seen.len() - 1, "done immediately before the append: {seen:?}");
    assert_eq!(seen[position("done") - 1], "activity thinking", "{seen:?}");

    // The next turn replays the log: no reasoning to hand back, so no item ids either.
    provider.push(Script::text("Still noted."));
    user.call(say(&session_id, "anything else?")).await.unwrap();
    let replayed = &provider.requests()[4].body;
    let input = replayed["input"].as_array().unwrap();
    assert!(input.iter().all(|item| item["type"] != "reasoning"), "{input:?}");
    let calls: Vec<&Value> = input.iter().filter(|item| item["type"] == "function_call").collect();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|call| call.get("id").is_none()), "{calls:?}");
    let call_ids: Vec<&str> = calls.iter().map(|call| call["call_id"].as_str().unwrap()).collect();
    assert_eq!(call_ids, ["call_1", "call_2", "call_3"]);
    assert!(input.iter().any(|item| item["type"] == "message" && item["content"][0]["text"] == "Noted: buy milk."));
    server.stop().await;
}

/// A 400 ends the turn at once with the vendor's message; a stream cut mid-answer ends it too,
/// with nothing of the cut answer kept; a rate limit is retried and the turn answers.
#[tokio::test]
async fn failures_end_the_turn_with_the_vendors_message() {
    let provider = Provider::start().await;
    let (server, user, session_id) = setup(&provider, "o3", Some(ReasoningLevel::High)).await;
    provider.push(Script::status(400).message("Invalid 'input[1].encrypted_content'"));
    let (status, message) = api_error(user.call(say(&session_id, "hi")).await);
    assert_eq!(status, 502);
    assert!(message.contains("400 Invalid 'input[1].encrypted_content'"), "{message}");
    assert_eq!(provider.request_count(), 1, "a 400 is not retried");

    provider.push(Script::text("Half an answer that never ends").split().drop_after(8));
    let (status, _) = api_error(user.call(say(&session_id, "again")).await);
    assert_eq!(status, 502);

    provider.push(Script::status(429).message("Rate limit reached"));
    provider.push(Script::text("Third time lucky."));
    user.call(say(&session_id, "once more")).await.unwrap();
    let lines = transcript(&read_log(&user, &session_id).await);
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(lines[1], "error: 400 Invalid 'input[1].encrypted_content'", "{lines:?}");
    assert_eq!(lines[2], "user: again");
    assert!(lines[3].starts_with("error: "), "the cut answer is not kept: {lines:?}");
    assert_eq!(lines[4..], ["user: once more", "assistant: Third time lucky."]);
    assert_eq!(provider.request_count(), 4);
    server.stop().await;
}

/// gpt-5.1 without a level is told not to reason, on the Responses API; an image it reads comes
/// back as an input image after the call's output.
#[tokio::test]
async fn an_image_attachment_reaches_a_model_told_not_to_reason() {
    let provider = Provider::start().await;
    let (server, user, session_id) = setup(&provider, "gpt-5.1", None).await;
    let png: Vec<u8> = [&b"\x89PNG\r\n\x1a\n"[..], &[7u8; 64][..]].concat();
    let upload = UploadSessionAttachment {
        session_id: session_id.clone(),
        name: "chart.png".into(),
        mime_type: Some("image/png".into()),
        content: seed_agents_protocol::Bytes(png.clone()),
    };
    let attachment = user.call(upload).await.unwrap().attachment;
    provider.push(Script::tool_call(
        "call_1|fc_1",
        "read",
        &format!(r#"{{"address":"attachment:{}"}}"#, attachment.id),
    ));
    provider.push(Script::text("A bar chart."));
    user.call(say(&session_id, "what is in the chart?")).await.unwrap();

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/v1/responses");
        assert_eq!(request.body["reasoning"], json!({"effort": "none"}));
        assert!(request.body.get("include").is_none());
    }
    let input = requests[1].body["input"].as_array().unwrap();
    let output = &input[input.len() - 2];
    assert_eq!((&output["type"], &output["call_id"]), (&json!("function_call_output"), &json!("call_1")));
    let shown: Value = serde_json::from_str(output["output"].as_str().unwrap()).unwrap();
    assert_eq!(shown["shownAsImage"], true, "{shown}");
    use base64::Engine as _;
    let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&png));
    assert_eq!(
        input[input.len() - 1],
        json!({"role": "user", "content": [
            {"type": "input_text", "text": "Attached image(s) from tool result:"},
            {"type": "input_image", "detail": "auto", "image_url": url},
        ]})
    );
    // No reasoning was asked for, so none came back, and the call goes back without its item id.
    let call = input.iter().find(|item| item["type"] == "function_call").unwrap();
    assert!(call.get("id").is_none(), "{call}");
    server.stop().await;
}
