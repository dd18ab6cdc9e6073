//! Agent turns end to end on a `google` provider: a real server whose `--provider-url google=`
//! points at the scripted provider's Gemini side on loopback (`support::provider::gemini`).

use std::time::Duration;

use futures_util::StreamExt as _;
use seed_agents_protocol::generated::{
    AgentDefinition, CreateAgent, ModelProviderConfig, ReasoningLevel, SessionEventPayload, SetModelProvider, SetSecret,
};
use seed_agents_protocol::{AgentId, SessionId};
use seed_agents_sdk::subscription::Event as Live;
use serde_json::{Value, json};

use crate::support::provider::gemini::signature;
use crate::support::provider::{Provider, Script};
use crate::support::transcript::{read_log, transcript};
use crate::support::{TestServer, User, api_error, definition, say};

const KEY: &str = "AIza-runtime-test-key";

/// A server whose `google` provider type goes to `provider`, a user with a `google` provider
/// `gemini` (its key a stored secret), and an agent on `model` with `level`.
async fn setup(
    provider: &Provider,
    model: &str,
    level: Option<ReasoningLevel>,
) -> (TestServer, User, AgentId, SessionId) {
    let google = provider.google_base();
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
        crate::support::route_provider(config, &format!("google={google}"));
    })
    .await;
    let user = server.user();
    let secret = SetSecret { name: "gemini".into(), value: seed_agents_protocol::Bytes(KEY.into()), metadata: None };
    user.call(secret).await.unwrap();
    let config = ModelProviderConfig {
        extra: Default::default(),
        auth_mode: None,
        base_url: None,
        model_defaults: None,
        secret_refs: Some([("apiKey".to_owned(), "gemini".to_owned())].into()),
        type_: "google".into(),
    };
    user.call(SetModelProvider { name: "gemini".into(), provider: config }).await.unwrap();
    let definition = AgentDefinition {
        model: model.into(),
        model_provider: "gemini".into(),
        reasoning_level: level,
        ..definition("Gem")
    };
    let agent_id = user.call(CreateAgent { client_request_id: None, definition }).await.unwrap().agent_id;
    let session_id = user.create_session(&agent_id, None).await;
    (server, user, agent_id, session_id)
}

#[tokio::test]
async fn a_text_turn_streams_partials_in_order_and_stores_the_answer() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, "gemini-2.5-flash", None).await;
    let mut live = user.client.subscribe(format!("sessions/{session_id}")).start();
    assert!(matches!(live.next().await, Some(Ok(Live::Subscribed { .. }))));
    provider.push(Script::text("Hello from Gemini.").split().usage(120, 7, 100, 0));

    user.call(say(&session_id, "hi")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(transcript(&log), ["user: hi", "assistant: Hello from Gemini."]);
    let SessionEventPayload::MessageEvent(reply) = &log[1].event else { panic!("{log:?}") };
    let meta = reply.meta.as_ref().unwrap();
    assert_eq!((meta.model.as_deref(), meta.provider.as_deref()), (Some("gemini-2.5-flash"), Some("google")));
    let usage = meta.usage.as_ref().unwrap();
    assert_eq!((usage.input, usage.output, usage.cache_read), (120, 7, 100));

    let request = &provider.requests()[0];
    assert_eq!(request.path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
    assert_eq!(request.header("x-goog-api-key"), KEY);
    let body = &request.body;
    let system = body["systemInstruction"]["parts"][0]["text"].as_str().unwrap();
    assert!(system.starts_with("You are helpful."), "{system}");
    let sent = body["contents"][0]["parts"][0]["text"].as_str().unwrap();
    assert_eq!(sent, format!("<message_sender>\n{{\"accountId\":\"{}\"}}\n</message_sender>\n\nhi", user.id));
    let tools: Vec<&str> = body["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read", "write", "call", "delegate", "plan", "status", "continue_session"]);
    // Every declared schema is in the form Gemini takes.
    let declared = body["tools"].to_string();
    for refused in ["additionalProperties", "$schema", "$ref", "const"] {
        assert!(!declared.contains(&format!("\"{refused}\":")), "{refused} in {declared}");
    }

    // Live: the partials in order, `done` just before the durable answer.
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("append assistant") {
        match tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().unwrap().unwrap() {
            Live::Append { event, .. } => seen.push(match &event.event {
                SessionEventPayload::MessageEvent(message) => format!("append {}", message.role),
                other => format!("append {other:?}"),
            }),
            Live::Partial { patch, .. } => {
                if let Some(delta) = patch.text_delta {
                    seen.push(format!("delta {delta}"));
                }
                if patch.done == Some(true) {
                    seen.push("done".into());
                }
                if let Some(activity) = patch.activity {
                    seen.push(format!("activity {}", activity.phase));
                }
            }
            Live::Change { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    let deltas: Vec<&str> = seen.iter().filter_map(|line| line.strip_prefix("delta ")).collect();
    assert_eq!(deltas, "Hello from Gemini.".chars().map(|c| c.to_string()).collect::<Vec<_>>(), "{seen:?}");
    let position = |wanted: &str| seen.iter().position(|line| line == wanted).unwrap_or(usize::MAX);
    assert!(position("append user") < position("activity starting"), "{seen:?}");
    assert!(position("activity starting") < position("activity responding"), "{seen:?}");
    assert!(position("activity responding") < position("delta H"), "{seen:?}");
    assert_eq!(position("done") + 1, seen.len() - 1, "done immediately before the append: {seen:?}");
    server.stop().await;
}

/// Three tool calls, each its own step, on Gemini 3 with thinking: each step's signed call goes
/// back on the next request (the scripted Gemini 3 refuses a request without), the reasoning is
/// never stored, and a later turn, replayed from the log without signatures, still passes.
#[tokio::test]
async fn a_tool_loop_of_three_calls_carries_the_thought_signatures() {
    let provider = Provider::start().await;
    let (server, user, agent_id, session_id) =
        setup(&provider, "gemini-3-flash-preview", Some(ReasoningLevel::Low)).await;
    provider.push(
        Script::tool_call("call_1", "write", r#"{"address":"~/memory/list.md","content":"milk"}"#)
            .with_text("Saving.")
            .reasoning("Write it down first.")
            .split(),
    );
    provider.push(Script::tool_call("call_2", "read", r#"{"address":"~/memory/list.md"}"#).reasoning("Check it."));
    provider.push(Script::tool_call("call_3", "read", r#"{"address":"~/memory/"}"#).reasoning("And the folder."));
    provider.push(Script::text("Your list: milk.").reasoning("All done."));
    user.call(say(&session_id, "remember milk")).await.unwrap();
    let log = read_log(&user, &session_id).await;
    assert_eq!(
        transcript(&log),
        [
            "user: remember milk",
            "assistant: Saving.",
            "call write",
            "result write",
            "call read",
            "result read",
            "call read",
            "result read",
            "assistant: Your list: milk.",
        ]
    );
    let agent = user.call(seed_agents_protocol::generated::GetAgent { agent_id }).await.unwrap().agent;
    let stored = std::fs::read_to_string(std::path::Path::new(&agent.state_dir).join("memory/list.md")).unwrap();
    assert_eq!(stored, "milk");

    let requests = provider.requests();
    assert_eq!(requests.len(), 4, "no request was refused");
    for request in &requests {
        let thinking = &request.body["generationConfig"]["thinkingConfig"];
        assert_eq!(thinking, &json!({"includeThoughts": true, "thinkingLevel": "LOW"}));
    }
    // The last request: each step as Gemini sent it, signature on its call, its result after it.
    let contents = requests[3].body["contents"].as_array().unwrap();
    let roles: Vec<&str> = contents.iter().map(|content| content["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "model", "user", "model", "user", "model", "user"]);
    assert_eq!(
        contents[1]["parts"],
        json!([{"text": "Saving."},
            {"functionCall": {"name": "write", "args": {"address": "~/memory/list.md", "content": "milk"}},
             "thoughtSignature": signature("call_1")}])
    );
    assert_eq!(contents[3]["parts"][0]["thoughtSignature"], signature("call_2"));
    assert_eq!(contents[5]["parts"][0]["thoughtSignature"], signature("call_3"));
    let response = &contents[4]["parts"][0]["functionResponse"];
    assert_eq!(response["name"], "read");
    assert!(response["response"]["output"].as_str().unwrap().contains("milk"), "{response}");
    // The log keeps neither reasoning nor signatures.
    let stored = serde_json::to_string(&read_log(&user, &session_id).await).unwrap();
    for secret in ["Write it down first", &signature("call_1")] {
        assert!(!stored.contains(secret), "{secret} in {stored}");
    }

    // A later turn replays the calls from the log: no signatures, so each step's first call
    // carries the placeholder Gemini documents, and the scripted Gemini 3 accepts it.
    provider.push(Script::text("Still milk."));
    user.call(say(&session_id, "and now?")).await.unwrap();
    let replayed = &provider.requests()[4].body["contents"];
    let signatures: Vec<&Value> = replayed
        .as_array()
        .unwrap()
        .iter()
        .filter(|content| content["role"] == "model")
        .filter_map(|content| content["parts"].as_array()?.iter().find(|part| part.get("functionCall").is_some()))
        .map(|call| &call["thoughtSignature"])
        .collect();
    assert_eq!(signatures, [&json!("skip_thought_signature_validator"); 3]);
    server.stop().await;
}

/// `read attachment:` of an image on Gemini 3: the picture rides inside the function response.
#[tokio::test]
async fn an_image_attachment_goes_inside_the_function_response() {
    use base64::Engine as _;
    use seed_agents_protocol::generated::UploadSessionAttachment;
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, "gemini-3-pro-preview", None).await;
    let png: Vec<u8> = [&b"\x89PNG\r\n\x1a\n"[..], &[7u8; 64][..]].concat();
    let upload = UploadSessionAttachment {
        session_id: session_id.clone(),
        name: "chart.png".into(),
        mime_type: Some("image/png".into()),
        content: seed_agents_protocol::Bytes(png.clone()),
    };
    let attachment = user.call(upload).await.unwrap().attachment;
    provider.push(Script::tool_call("call_1", "read", &format!(r#"{{"address":"attachment:{}"}}"#, attachment.id)));
    provider.push(Script::text("A bar chart."));
    user.call(say(&session_id, "what is in the chart?")).await.unwrap();
    let requests = provider.requests();
    let contents = requests[1].body["contents"].as_array().unwrap();
    let response = &contents[2]["parts"][0]["functionResponse"];
    let shown: Value = serde_json::from_str(response["response"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(shown["shownAsImage"], true, "{shown}");
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    assert_eq!(response["parts"], json!([{"inlineData": {"mimeType": "image/png", "data": data}}]));
    assert_eq!(contents.len(), 3, "no separate image content on Gemini 3");
    server.stop().await;
}

#[tokio::test]
async fn geminis_refusal_is_the_turns_error() {
    let provider = Provider::start().await;
    let (server, user, _agent, session_id) = setup(&provider, "gemini-2.5-flash", None).await;
    provider.push(Script::status(400).message("API key not valid. Please pass a valid API key."));
    let (status, message) = api_error(user.call(say(&session_id, "hi")).await);
    assert_eq!(status, 502);
    assert!(message.contains("400 API key not valid. Please pass a valid API key."), "{message}");
    assert_eq!(provider.request_count(), 1, "a 400 is not retried");
    let lines = transcript(&read_log(&user, &session_id).await);
    assert_eq!(lines, ["user: hi", "error: 400 API key not valid. Please pass a valid API key."]);
    server.stop().await;
}
